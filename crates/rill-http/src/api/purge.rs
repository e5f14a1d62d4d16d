//! `POST /api/v1/streams/{stream}/topics/{topic}/purge`: records before a point deleted
//! exactly (the broker's `PurgeTopic`, docs/PROTOCOL.md), every partition or one.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rill_proto::pb;
use serde::{Deserialize, Serialize};

use super::topics::TopicPath;
use super::{ApiJson, ApiPath, ask, check_name};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::records::parse_rfc3339_us;

/// The body: where the records left start, and of which partition.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PurgeJson {
    /// `offset` (with `offset`), `time` (with `time`) or `end`.
    before: String,
    offset: Option<u64>,
    time: Option<String>,
    partition: Option<u32>,
}

/// The point on the wire: `(before, offset, timestamp_us)`.
fn purge_point(body: &PurgeJson) -> Result<(pb::PurgeTo, u64, i64), ApiError> {
    let only = |what: &str, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(ApiError::BadJson(format!(
                "before {:?} takes {what}",
                body.before
            )))
        }
    };
    match body.before.as_str() {
        "end" => {
            only(
                "neither offset nor time",
                body.offset.is_none() && body.time.is_none(),
            )?;
            Ok((pb::PurgeTo::End, 0, 0))
        }
        "offset" => {
            only(
                "offset and not time",
                body.offset.is_some() && body.time.is_none(),
            )?;
            Ok((pb::PurgeTo::Offset, body.offset.unwrap_or(0), 0))
        }
        "time" => {
            only(
                "time and not offset",
                body.time.is_some() && body.offset.is_none(),
            )?;
            let text = body.time.as_deref().unwrap_or("");
            let us = parse_rfc3339_us(text).ok_or_else(|| {
                ApiError::BadJson(format!("time: {text:?} is not an RFC 3339 time"))
            })?;
            Ok((pb::PurgeTo::Timestamp, 0, us))
        }
        other => Err(ApiError::BadJson(format!(
            "before: {other:?} is not offset, time or end"
        ))),
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct FirstOffsetJson {
    partition: u32,
    first_offset: Option<u64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct PurgedJson {
    partitions: Vec<FirstOffsetJson>,
}

/// `POST /api/v1/streams/{stream}/topics/{topic}/purge`: each purged partition's new
/// first offset.
pub(crate) async fn purge(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<TopicPath>,
    ApiJson(body): ApiJson<PurgeJson>,
) -> Result<Json<PurgedJson>, ApiError> {
    check_name("stream", &path.stream)?;
    check_name("topic", &path.topic)?;
    let (before, offset, timestamp_us) = purge_point(&body)?;
    let (answer, _) = ask!(
        &state,
        &caller,
        PurgeTopic(pb::PurgeTopicRequest {
            stream: path.stream,
            topic: path.topic,
            partition: body.partition,
            before: before as i32,
            offset,
            timestamp_us,
        })
    );
    Ok(Json(PurgedJson {
        partitions: answer
            .log_starts
            .into_iter()
            .map(|s| FirstOffsetJson {
                partition: s.partition,
                first_offset: s.offset,
            })
            .collect(),
    }))
}
