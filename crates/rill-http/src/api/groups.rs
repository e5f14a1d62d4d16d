//! Consumer groups (docs/HTTP_API.md §5).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rill_proto::pb;
use serde::{Deserialize, Serialize};

use super::server::{LagPointJson, SAMPLE_INTERVAL_SECONDS};
use super::{ApiJson, ApiPath, ApiQuery, Point, ask, check_name, point};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
pub(crate) struct GroupPath {
    stream: String,
    topic: String,
    group: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct MemberJson {
    member_id: String,
    owned: Vec<u32>,
    revoke: Vec<u32>,
    reports: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct GroupPartitionJson {
    partition: u32,
    stored_offset: Option<u64>,
    log_end: u64,
    lag: u64,
    owner: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct LagHistoryJson {
    interval_seconds: u64,
    points: Vec<LagPointJson>,
}

#[derive(Debug, Serialize)]
pub(crate) struct GroupJson {
    stream: String,
    topic: String,
    group: String,
    generation: u64,
    members: Vec<MemberJson>,
    partitions: Vec<GroupPartitionJson>,
    lag: u64,
    lag_history: LagHistoryJson,
}

/// `GET /api/v1/streams/{stream}/topics/{topic}/groups/{group}`.
pub(crate) async fn describe(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<GroupPath>,
) -> Result<Json<GroupJson>, ApiError> {
    let (answer, _) = ask!(
        &state,
        &caller,
        DescribeGroup(pb::DescribeGroupRequest {
            stream: path.stream.clone(),
            topic: path.topic.clone(),
            group: path.group.clone(),
        })
    );
    let lag = answer
        .partitions
        .iter()
        .fold(0u64, |sum, p| sum.saturating_add(p.lag));
    let points = state
        .sampler
        .lag_history(&path.stream, &path.topic, &path.group)
        .into_iter()
        .map(LagPointJson::new)
        .collect();
    Ok(Json(GroupJson {
        generation: answer.generation,
        members: answer
            .members
            .into_iter()
            .map(|m| MemberJson {
                member_id: m.member_id,
                owned: m.owned,
                revoke: m.revoke,
                reports: m.metrics.into_iter().map(|r| (r.name, r.value)).collect(),
            })
            .collect(),
        partitions: answer
            .partitions
            .into_iter()
            .map(|p| GroupPartitionJson {
                partition: p.partition,
                stored_offset: p.stored_offset,
                log_end: p.log_end,
                lag: p.lag,
                owner: p.owner,
            })
            .collect(),
        lag,
        lag_history: LagHistoryJson {
            interval_seconds: SAMPLE_INTERVAL_SECONDS,
            points,
        },
        stream: path.stream,
        topic: path.topic,
        group: path.group,
    }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct TopicPath {
    stream: String,
    topic: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    after: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct GroupSummaryJson {
    group: String,
    members: u32,
    generation: u64,
    lag: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct GroupsJson {
    groups: Vec<GroupSummaryJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

fn page_after(query: &PageQuery) -> Result<String, ApiError> {
    match &query.after {
        Some(after) => {
            check_name("after", after)?;
            Ok(after.clone())
        }
        None => Ok(String::new()),
    }
}

/// `GET /api/v1/streams/{stream}/topics/{topic}/groups`: a page of the topic's groups
/// (the broker's page: at most 1,000, in name order).
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<TopicPath>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<GroupsJson>, ApiError> {
    let (answer, _) = ask!(
        &state,
        &caller,
        ListGroups(pb::ListGroupsRequest {
            stream: path.stream,
            topic: path.topic,
            after: page_after(&query)?,
        })
    );
    Ok(Json(GroupsJson {
        groups: answer
            .groups
            .into_iter()
            .map(|g| GroupSummaryJson {
                group: g.group,
                members: g.members,
                generation: g.generation,
                lag: g.lag,
            })
            .collect(),
        next: answer.next,
    }))
}

#[derive(Debug, Serialize)]
pub(crate) struct ConsumerPartitionJson {
    partition: u32,
    offset: u64,
    log_end: u64,
    lag: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct ConsumerJson {
    consumer: String,
    partitions: Vec<ConsumerPartitionJson>,
    lag: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct ConsumersJson {
    consumers: Vec<ConsumerJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// `GET /api/v1/streams/{stream}/topics/{topic}/consumers`: a page of the topic's named
/// consumers with their stored offsets.
pub(crate) async fn consumers(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<TopicPath>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<ConsumersJson>, ApiError> {
    let (answer, _) = ask!(
        &state,
        &caller,
        ListConsumers(pb::ListConsumersRequest {
            stream: path.stream,
            topic: path.topic,
            after: page_after(&query)?,
        })
    );
    Ok(Json(ConsumersJson {
        consumers: answer
            .consumers
            .into_iter()
            .map(|c| ConsumerJson {
                consumer: c.consumer,
                partitions: c
                    .partitions
                    .into_iter()
                    .map(|p| ConsumerPartitionJson {
                        partition: p.partition,
                        offset: p.offset,
                        log_end: p.log_end,
                        lag: p.lag,
                    })
                    .collect(),
                lag: c.lag,
            })
            .collect(),
        next: answer.next,
    }))
}

/// The body of a reset: where to move the stored offsets, and of which partition.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetJson {
    to: String,
    offset: Option<u64>,
    time: Option<String>,
    partition: Option<u32>,
}

/// A reset's target on the wire: `(to, offset, timestamp_us)`.
fn reset_target(body: &ResetJson) -> Result<(pb::ResetTo, u64, i64), ApiError> {
    let words = ["first", "end", "offset", "time"];
    Ok(
        match point("to", &body.to, &words, body.offset, body.time.as_deref())? {
            Point::First => (pb::ResetTo::First, 0, 0),
            Point::End => (pb::ResetTo::End, 0, 0),
            Point::Offset(n) => (pb::ResetTo::Offset, n, 0),
            Point::Time(us) => (pb::ResetTo::Timestamp, 0, us),
        },
    )
}

#[derive(Debug, Serialize)]
pub(crate) struct OffsetJson {
    partition: u32,
    offset: Option<u64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct OffsetsJson {
    offsets: Vec<OffsetJson>,
}

fn offsets_json(offsets: Vec<pb::PartitionOffset>) -> OffsetsJson {
    OffsetsJson {
        offsets: offsets
            .into_iter()
            .map(|p| OffsetJson {
                partition: p.partition,
                offset: p.offset,
            })
            .collect(),
    }
}

/// `POST /api/v1/streams/{stream}/topics/{topic}/groups/{group}/reset`.
pub(crate) async fn reset(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<GroupPath>,
    ApiJson(body): ApiJson<ResetJson>,
) -> Result<Json<OffsetsJson>, ApiError> {
    let (to, offset, timestamp_us) = reset_target(&body)?;
    let (answer, _) = ask!(
        &state,
        &caller,
        ResetGroupOffsets(pb::ResetGroupOffsetsRequest {
            stream: path.stream,
            topic: path.topic,
            group: path.group,
            to: to as i32,
            offset,
            timestamp_us,
            partition: body.partition,
        })
    );
    Ok(Json(offsets_json(answer.offsets)))
}

#[derive(Debug, Deserialize)]
pub(crate) struct ConsumerPath {
    stream: String,
    topic: String,
    consumer: String,
}

/// `POST /api/v1/streams/{stream}/topics/{topic}/consumers/{consumer}/reset`.
pub(crate) async fn reset_consumer(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<ConsumerPath>,
    ApiJson(body): ApiJson<ResetJson>,
) -> Result<Json<OffsetsJson>, ApiError> {
    let (to, offset, timestamp_us) = reset_target(&body)?;
    let (answer, _) = ask!(
        &state,
        &caller,
        ResetConsumerOffsets(pb::ResetConsumerOffsetsRequest {
            stream: path.stream,
            topic: path.topic,
            consumer: path.consumer,
            to: to as i32,
            offset,
            timestamp_us,
            partition: body.partition,
        })
    );
    Ok(Json(offsets_json(answer.offsets)))
}

#[derive(Debug, Serialize)]
pub(crate) struct DeletedJson {
    offsets_deleted: u32,
}

/// `DELETE /api/v1/streams/{stream}/topics/{topic}/groups/{group}`: the group's stored
/// offsets go (`409 GROUP_NOT_EMPTY` while it has live members).
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(path): ApiPath<GroupPath>,
) -> Result<Json<DeletedJson>, ApiError> {
    let (answer, _) = ask!(
        &state,
        &caller,
        DeleteGroup(pb::DeleteGroupRequest {
            stream: path.stream,
            topic: path.topic,
            group: path.group,
        })
    );
    Ok(Json(DeletedJson {
        offsets_deleted: answer.offsets_deleted,
    }))
}
