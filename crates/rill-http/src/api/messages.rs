//! `GET …/partitions/{partition}/messages`: a bounded page of a partition's records
//! (docs/HTTP_API.md §4). One fetch through the broker, decoded with `rill-format` as
//! the SDK decodes it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rill_proto::{ErrorCode, pb};
use serde::{Deserialize, Serialize};

use super::{ApiPath, ApiQuery, ask, number};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::records::{RecordJson, parse_rfc3339_us};

/// Records per page at most, and by default.
const LIMIT_MAX: u64 = 100;
const LIMIT_DEFAULT: u64 = 20;
/// Bytes of keys and values shown in one page: records are added until it is passed
/// (at least one record).
pub(crate) const PAGE_SHOWN_BYTES_MAX: usize = 1 << 20;
/// Bytes of batches asked of the broker in one fetch (a first batch larger than this
/// still comes whole, up to the broker's batch bound).
const FETCH_BYTES_MAX: u32 = 1 << 20;

#[derive(Debug, Deserialize)]
pub(crate) struct PartitionPath {
    stream: String,
    topic: String,
    partition: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessagesQuery {
    offset: Option<String>,
    time: Option<String>,
    limit: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct DataLossJson {
    from_offset: u64,
    to_offset: u64,
    reason: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct MessagesJson {
    stream: String,
    topic: String,
    partition: u32,
    /// `None` on a page that only reports damage (no fetch answered).
    log_start: Option<u64>,
    log_end: Option<u64>,
    records: Vec<RecordJson>,
    next_offset: u64,
    data_loss: Option<DataLossJson>,
}

/// The page of a fetch's batches from `from`: at most `limit` records within the shown
/// bytes' budget, where the next page starts, and the damaged or corrupt range the page
/// stopped at, if any.
pub(crate) fn page(
    payload: &[u8],
    from: u64,
    limit: usize,
    fetch_next: u64,
) -> (Vec<RecordJson>, u64, Option<DataLossJson>) {
    let mut records = Vec::new();
    let mut shown = 0;
    let mut next = from;
    let mut rest = payload;
    while !rest.is_empty() {
        let batch = match rill_format::BatchView::parse(rest) {
            Ok(batch) => batch,
            Err(e) => {
                // A batch that fails its checks: the records before it, then the
                // next page reports it (as the SDK does).
                let range = rill_format::BatchHeader::parse(rest)
                    .ok()
                    .and_then(|h| Some((h.base_offset, h.next_offset()?)));
                return match range {
                    Some((_, end)) if end <= from => {
                        // Wholly before the page: skip it by its length, if it fits.
                        match rill_format::BatchHeader::parse(rest)
                            .ok()
                            .map(|h| h.batch_length as usize)
                            .filter(|&len| len <= rest.len())
                        {
                            Some(len) => {
                                rest = &rest[len..];
                                continue;
                            }
                            None => (records, next, None),
                        }
                    }
                    Some((base, end)) if records.is_empty() => {
                        let loss = DataLossJson {
                            from_offset: base.max(from),
                            to_offset: end,
                            reason: e.to_string(),
                        };
                        (records, end, Some(loss))
                    }
                    _ => (records, next, None),
                };
            }
        };
        rest = &rest[batch.as_bytes().len()..];
        for record in batch.records() {
            if record.offset < from {
                continue;
            }
            if records.len() == limit || (shown >= PAGE_SHOWN_BYTES_MAX && !records.is_empty()) {
                return (records, next, None);
            }
            let json = RecordJson::new(&record);
            shown += json.shown_bytes();
            next = record.offset + 1;
            records.push(json);
        }
    }
    if records.is_empty() {
        // Nothing at or after `from` in what came: go on where the broker says.
        next = fetch_next.max(from);
    }
    (records, next, None)
}

/// `GET /api/v1/streams/{stream}/topics/{topic}/partitions/{partition}/messages`.
pub(crate) async fn messages(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<PartitionPath>,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<Json<MessagesJson>, ApiError> {
    let partition = u32::try_from(number(
        "partition",
        &path.partition,
        0,
        u64::from(u32::MAX),
    )?)
    .map_err(|_| ApiError::parameter("partition", "out of range"))?;
    let limit = match &query.limit {
        Some(text) => number("limit", text, 1, LIMIT_MAX)?,
        None => LIMIT_DEFAULT,
    };
    let resolve = |spec: pb::OffsetSpec, timestamp_us: i64| pb::ResolveOffsetRequest {
        stream: path.stream.clone(),
        topic: path.topic.clone(),
        partition,
        spec: spec as i32,
        timestamp_us,
    };
    let offset = match (&query.offset, &query.time) {
        (Some(_), Some(_)) => {
            return Err(ApiError::parameter(
                "time",
                "offset and time exclude each other",
            ));
        }
        (Some(text), None) => number("offset", text, 0, u64::MAX)?,
        (None, Some(text)) => {
            let us = parse_rfc3339_us(text).ok_or_else(|| {
                ApiError::parameter("time", format!("{text:?} is not an RFC 3339 time"))
            })?;
            ask!(
                &state,
                &caller,
                ResolveOffset(resolve(pb::OffsetSpec::Timestamp, us))
            )
            .0
            .offset
        }
        (None, None) => {
            ask!(
                &state,
                &caller,
                ResolveOffset(resolve(pb::OffsetSpec::First, 0))
            )
            .0
            .offset
        }
    };
    let fetch = pb::FetchRequest {
        stream: path.stream.clone(),
        topic: path.topic.clone(),
        partition,
        offset,
        max_bytes: FETCH_BYTES_MAX,
        max_wait_ms: 0,
        min_bytes: 0,
    };
    let answer = super::call(&state, &caller, rill_proto::RequestBody::Fetch(fetch)).await;
    let (fetched, payload) = match answer {
        Ok((rill_proto::ResponseBody::Fetch(f), payload)) => (f, payload),
        Ok((other, _)) => {
            return Err(ApiError::Unexpected {
                asked: "Fetch",
                got: other.kind().name(),
            });
        }
        Err(e) => return data_loss_page(path, partition, offset, e),
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let (records, next_offset, data_loss) = page(&payload, offset, limit, fetched.next_offset);
    Ok(Json(MessagesJson {
        stream: path.stream,
        topic: path.topic,
        partition,
        log_start: Some(fetched.log_start),
        log_end: Some(fetched.log_end),
        records,
        next_offset,
        data_loss,
    }))
}

/// A fetch that failed: a page that reports the damaged range it met (`DATA_LOSS`,
/// with where reading resumes), or the error itself.
fn data_loss_page(
    path: PartitionPath,
    partition: u32,
    offset: u64,
    error: ApiError,
) -> Result<Json<MessagesJson>, ApiError> {
    let ApiError::Broker {
        code: ErrorCode::DataLoss,
        message,
        range_start,
        offset: resume,
    } = error
    else {
        return Err(error);
    };
    let resume = resume.unwrap_or(offset).max(offset);
    Ok(Json(MessagesJson {
        stream: path.stream,
        topic: path.topic,
        partition,
        log_start: None,
        log_end: None,
        records: Vec::new(),
        next_offset: resume,
        data_loss: Some(DataLossJson {
            from_offset: range_start.unwrap_or(offset),
            to_offset: resume,
            reason: message,
        }),
    }))
}
