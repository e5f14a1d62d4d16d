//! `POST /api/v1/streams/{stream}/topics/{topic}/purge`: records before a point deleted
//! exactly (the broker's `PurgeTopic`, docs/PROTOCOL.md), every partition or one.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rill_proto::pb;
use serde::{Deserialize, Serialize};

use super::topics::TopicPath;
use super::{ApiJson, ApiPath, Point, ask, point};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

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
    let words = ["offset", "time", "end"];
    Ok(
        match point(
            "before",
            &body.before,
            &words,
            body.offset,
            body.time.as_deref(),
        )? {
            Point::Offset(n) => (pb::PurgeTo::Offset, n, 0),
            Point::Time(us) => (pb::PurgeTo::Timestamp, 0, us),
            Point::End | Point::First => (pb::PurgeTo::End, 0, 0),
        },
    )
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
