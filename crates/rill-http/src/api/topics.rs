//! Streams and topics: list, describe, create, delete (docs/HTTP_API.md §4).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rill_proto::pb;
use serde::{Deserialize, Serialize};

use super::{ApiJson, ApiPath, ApiQuery, ask, check_name, number};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::sampler::Rates;

/// Topics per page of `GET /api/v1/topics` at most, and by default.
const TOPICS_PAGE_MAX: u64 = 1_000;
const TOPICS_PAGE_DEFAULT: u64 = 100;

#[derive(Debug, Serialize)]
pub(crate) struct StreamJson {
    name: String,
    topics: u32,
}

#[derive(Debug, Serialize)]
pub(crate) struct StreamsJson {
    streams: Vec<StreamJson>,
}

/// `GET /api/v1/streams`.
pub(crate) async fn streams(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Json<StreamsJson>, ApiError> {
    let (answer, _) = ask!(&state, &caller, ListStreams(pb::ListStreamsRequest {}));
    let mut streams: Vec<StreamJson> = answer
        .streams
        .into_iter()
        .map(|s| StreamJson {
            name: s.name,
            topics: s.topics,
        })
        .collect();
    streams.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(StreamsJson { streams }))
}

/// A topic's options as the API shows them.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct OptionsJson {
    partitions: u32,
    retention_ms: Option<u64>,
    retention_bytes: Option<u64>,
    segment_bytes: Option<u64>,
    durability: String,
    max_record_bytes: Option<u32>,
    replicas: Option<u32>,
}

impl OptionsJson {
    pub(crate) fn new(o: &pb::TopicOptions) -> Self {
        let durability = match pb::Durability::try_from(o.durability) {
            Ok(pb::Durability::Always) => "always".to_owned(),
            Ok(pb::Durability::Never) => "never".to_owned(),
            Ok(pb::Durability::Interval) => {
                format!("interval:{}", o.durability_interval_ms.unwrap_or(0))
            }
            Ok(pb::Durability::Unspecified) | Err(_) => "unspecified".to_owned(),
        };
        OptionsJson {
            partitions: o.partitions,
            retention_ms: o.retention_ms,
            retention_bytes: o.retention_bytes,
            segment_bytes: o.segment_bytes,
            durability,
            max_record_bytes: o.max_record_bytes,
            replicas: o.replicas,
        }
    }
}

#[derive(Debug, Serialize, Default)]
pub(crate) struct TotalsJson {
    records: u64,
    bytes: u64,
    segments: u64,
    failed_partitions: u32,
}

#[derive(Debug, Serialize)]
pub(crate) struct DamagedJson {
    from_offset: u64,
    to_offset: Option<u64>,
    segment: String,
    position: u64,
    reason: String,
    accepted: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct PartitionJson {
    partition: u32,
    first_offset: u64,
    next_offset: u64,
    records: u64,
    bytes: u64,
    segments: u32,
    failure: Option<String>,
    damaged: Vec<DamagedJson>,
}

/// One key range of an elastic topic (docs/RANGES.md). Hash bounds are `0x` and 16 hex
/// digits: 64-bit numbers do not survive JSON numbers in a browser.
#[derive(Debug, Serialize)]
pub(crate) struct RangeJson {
    id: u32,
    lo: String,
    hi: String,
    parents: Vec<u32>,
    sealed_at: Option<u64>,
    bytes_per_s: Option<u64>,
}

/// A topic's description.
#[derive(Debug, Serialize)]
pub(crate) struct TopicJson {
    stream: String,
    topic: String,
    options: OptionsJson,
    partitions: Vec<PartitionJson>,
    totals: TotalsJson,
    rates: Option<Rates>,
    /// Elastic topics only: `true`, the range map's epoch and its ranges.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    elastic: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    range_epoch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ranges: Option<Vec<RangeJson>>,
}

fn totals(partitions: &[pb::PartitionInfo]) -> TotalsJson {
    let mut t = TotalsJson::default();
    for p in partitions {
        t.records += p.next_offset.saturating_sub(p.first_offset);
        t.bytes += p.size_bytes;
        t.segments += u64::from(p.segments);
        t.failed_partitions += u32::from(!p.failure.is_empty());
    }
    t
}

fn topic_json(state: &AppState, d: pb::DescribeTopicResponse) -> TopicJson {
    let rates = state.sampler.last_minute(&d.stream, &d.topic);
    let elastic = d.options.as_ref().is_some_and(|o| o.elastic);
    let ranges = elastic.then(|| {
        d.ranges
            .iter()
            .map(|r| RangeJson {
                id: r.id,
                lo: format!("{:#018x}", r.lo),
                hi: format!("{:#018x}", r.hi),
                parents: r.parents.clone(),
                sealed_at: r.sealed_at,
                bytes_per_s: r.bytes_per_s,
            })
            .collect()
    });
    TopicJson {
        elastic,
        range_epoch: elastic.then_some(d.range_epoch),
        ranges,
        options: OptionsJson::new(&d.options.unwrap_or_default()),
        totals: totals(&d.partitions),
        partitions: d
            .partitions
            .into_iter()
            .map(|p| PartitionJson {
                partition: p.partition,
                first_offset: p.first_offset,
                next_offset: p.next_offset,
                records: p.next_offset.saturating_sub(p.first_offset),
                bytes: p.size_bytes,
                segments: p.segments,
                failure: (!p.failure.is_empty()).then_some(p.failure),
                damaged: p
                    .damaged
                    .into_iter()
                    .map(|r| DamagedJson {
                        from_offset: r.from_offset,
                        to_offset: r.to_offset,
                        segment: r.segment,
                        position: r.position,
                        reason: r.reason,
                        accepted: r.accepted,
                    })
                    .collect(),
            })
            .collect(),
        stream: d.stream,
        topic: d.topic,
        rates,
    }
}

async fn describe_one(
    state: &AppState,
    caller: &Caller,
    stream: &str,
    topic: &str,
) -> Result<TopicJson, ApiError> {
    let (answer, _) = ask!(
        state,
        caller,
        DescribeTopic(pb::DescribeTopicRequest {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
        })
    );
    Ok(topic_json(state, answer))
}

#[derive(Debug, Deserialize)]
pub(crate) struct TopicPath {
    pub(crate) stream: String,
    pub(crate) topic: String,
}

/// `GET /api/v1/streams/{stream}/topics/{topic}`.
pub(crate) async fn describe(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<TopicPath>,
) -> Result<Json<TopicJson>, ApiError> {
    Ok(Json(
        describe_one(&state, &caller, &path.stream, &path.topic).await?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    stream: Option<String>,
    limit: Option<String>,
    after: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct TopicSummaryJson {
    stream: String,
    topic: String,
    options: OptionsJson,
    totals: TotalsJson,
    rates: Option<Rates>,
}

#[derive(Debug, Serialize)]
pub(crate) struct TopicsJson {
    topics: Vec<TopicSummaryJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// `GET /api/v1/topics`: a page of topics with their totals.
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<TopicsJson>, ApiError> {
    if let Some(stream) = &query.stream {
        check_name("stream", stream)?;
    }
    let limit = match &query.limit {
        Some(text) => number("limit", text, 1, TOPICS_PAGE_MAX)?,
        None => TOPICS_PAGE_DEFAULT,
    };
    let after = match &query.after {
        Some(text) => {
            let (s, t) = text
                .split_once('/')
                .ok_or_else(|| ApiError::parameter("after", "must be STREAM/TOPIC"))?;
            check_name("after", s)?;
            check_name("after", t)?;
            Some((s.to_owned(), t.to_owned()))
        }
        None => None,
    };
    let (answer, _) = ask!(
        &state,
        &caller,
        ListTopics(pb::ListTopicsRequest {
            stream: query.stream.clone().unwrap_or_default(),
        })
    );
    let mut names: Vec<(String, String)> = answer
        .topics
        .into_iter()
        .map(|t| (t.stream, t.topic))
        .filter(|name| after.as_ref().is_none_or(|a| name > a))
        .collect();
    names.sort();
    let page = usize::try_from(limit).unwrap_or(usize::MAX);
    let next = (names.len() > page).then(|| {
        let (s, t) = &names[page - 1];
        format!("{s}/{t}")
    });
    let mut topics = Vec::with_capacity(page.min(names.len()));
    for (stream, topic) in names.into_iter().take(page) {
        match describe_one(&state, &caller, &stream, &topic).await {
            Ok(d) => topics.push(TopicSummaryJson {
                stream: d.stream,
                topic: d.topic,
                options: d.options,
                totals: d.totals,
                rates: d.rates,
            }),
            // Deleted between the listing and its description.
            Err(ApiError::Broker {
                code: rill_proto::ErrorCode::TopicNotFound | rill_proto::ErrorCode::StreamNotFound,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Json(TopicsJson { topics, next }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamPath {
    stream: String,
}

/// The body of `POST /api/v1/streams/{stream}/topics`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTopicJson {
    topic: String,
    partitions: Option<u32>,
    retention_ms: Option<u64>,
    retention_bytes: Option<u64>,
    segment_bytes: Option<u64>,
    durability: Option<String>,
    max_record_bytes: Option<u32>,
    replicas: Option<u32>,
}

impl CreateTopicJson {
    fn options(&self) -> Result<pb::TopicOptions, ApiError> {
        let (durability, durability_interval_ms) = match &self.durability {
            None => (pb::Durability::Unspecified, None),
            Some(text) => match text.parse::<rill_format::Durability>() {
                Ok(rill_format::Durability::Always) => (pb::Durability::Always, None),
                Ok(rill_format::Durability::Never) => (pb::Durability::Never, None),
                Ok(d @ rill_format::Durability::Interval(_)) => {
                    (pb::Durability::Interval, d.interval_ms())
                }
                Err(e) => return Err(ApiError::BadJson(format!("durability: {e}"))),
            },
        };
        Ok(pb::TopicOptions {
            // 0 is the wire's "the broker's default".
            partitions: self.partitions.unwrap_or(0),
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            segment_bytes: self.segment_bytes,
            durability: durability as i32,
            durability_interval_ms,
            max_record_bytes: self.max_record_bytes,
            replicas: self.replicas,
            // Not offered over HTTP yet (docs/RANGES.md §11).
            elastic: false,
            auto_split: None,
            auto_split_window_ms: None,
            auto_split_cooldown_ms: None,
        })
    }
}

/// `POST /api/v1/streams/{stream}/topics`: `201` with the new topic's description.
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<StreamPath>,
    ApiJson(body): ApiJson<CreateTopicJson>,
) -> Result<Response, ApiError> {
    check_name("topic", &body.topic)?;
    if body.partitions == Some(0) {
        return Err(ApiError::BadJson("partitions: must be at least 1".into()));
    }
    let options = body.options()?;
    ask!(
        &state,
        &caller,
        CreateTopic(pb::CreateTopicRequest {
            stream: path.stream.clone(),
            topic: body.topic.clone(),
            options: Some(options),
            if_missing: false,
            create_stream: true,
        })
    );
    let topic = describe_one(&state, &caller, &path.stream, &body.topic).await?;
    Ok((StatusCode::CREATED, Json(topic)).into_response())
}

/// `DELETE /api/v1/streams/{stream}/topics/{topic}`: `204`.
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<TopicPath>,
) -> Result<StatusCode, ApiError> {
    ask!(
        &state,
        &caller,
        DeleteTopic(pb::DeleteTopicRequest {
            stream: path.stream,
            topic: path.topic,
        })
    );
    Ok(StatusCode::NO_CONTENT)
}

/// Reads a field that may be absent (`None`), `null` (`Some(None)`) or a value.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The body of `PATCH /api/v1/streams/{stream}/topics/{topic}`: an absent field stays,
/// a `null` limit is removed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AlterTopicJson {
    #[serde(default, deserialize_with = "present")]
    retention_ms: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    retention_bytes: Option<Option<u64>>,
    durability: Option<String>,
    partitions: Option<u32>,
}

/// `PATCH /api/v1/streams/{stream}/topics/{topic}`: the topic's description after the
/// change.
pub(crate) async fn alter(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<TopicPath>,
    ApiJson(body): ApiJson<AlterTopicJson>,
) -> Result<Json<TopicJson>, ApiError> {
    let (durability, durability_interval_ms) = match &body.durability {
        None => (pb::Durability::Unspecified, None),
        Some(text) => match text.parse::<rill_format::Durability>() {
            Ok(rill_format::Durability::Always) => (pb::Durability::Always, None),
            Ok(rill_format::Durability::Never) => (pb::Durability::Never, None),
            Ok(d @ rill_format::Durability::Interval(_)) => {
                (pb::Durability::Interval, d.interval_ms())
            }
            Err(e) => return Err(ApiError::BadJson(format!("durability: {e}"))),
        },
    };
    let change = |c: Option<Option<u64>>| c.map(|value| pb::LimitChange { value });
    ask!(
        &state,
        &caller,
        AlterTopic(pb::AlterTopicRequest {
            stream: path.stream.clone(),
            topic: path.topic.clone(),
            retention_ms: change(body.retention_ms),
            retention_bytes: change(body.retention_bytes),
            durability: durability as i32,
            durability_interval_ms,
            partitions: body.partitions,
            auto_split: None,
        })
    );
    Ok(Json(
        describe_one(&state, &caller, &path.stream, &path.topic).await?,
    ))
}
