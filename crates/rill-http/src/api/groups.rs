//! Consumer groups (docs/HTTP_API.md §5).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rill_proto::pb;
use serde::{Deserialize, Serialize};

use super::server::{LagPointJson, SAMPLE_INTERVAL_SECONDS};
use super::{ApiPath, ask, check_name};
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
    check_name("stream", &path.stream)?;
    check_name("topic", &path.topic)?;
    check_name("group", &path.group)?;
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
