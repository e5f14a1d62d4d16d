//! The server: `GET /api/v1/info` and `GET /api/v1/rates` (docs/HTTP_API.md §3).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rill_proto::pb;
use serde::{Deserialize, Serialize};

use super::{ApiQuery, ask, check_name, number};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::records::rfc3339_ms;
use crate::sampler::{LagPoint, RatePoint, Rates, SAMPLE_INTERVAL, SAMPLES_MAX};

pub(crate) const SAMPLE_INTERVAL_SECONDS: u64 = SAMPLE_INTERVAL.as_secs();
/// Minutes of rates asked at most (what the sampler keeps), and by default.
const MINUTES_MAX: u64 = SAMPLES_MAX as u64 * SAMPLE_INTERVAL_SECONDS / 60;
const MINUTES_DEFAULT: u64 = 5;

#[derive(Debug, Serialize)]
pub(crate) struct ListenJson {
    client: String,
    http: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ClusterJson {
    node_id: u64,
    role: &'static str,
    controller: Option<u64>,
    in_quorum: bool,
    term: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct InfoJson {
    version: &'static str,
    started_at: Option<String>,
    uptime_seconds: u64,
    user: Option<String>,
    auth: bool,
    tls: bool,
    admin_writes: bool,
    listen: ListenJson,
    cluster: Option<ClusterJson>,
}

/// `GET /api/v1/info`.
pub(crate) async fn info(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Json<InfoJson>, ApiError> {
    // Who the caller is, as the broker sees it (and the check that it may ask).
    let (who, _) = ask!(&state, &caller, WhoAmI(pb::WhoAmIRequest {}));
    let started_ms = state
        .started_at
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let cluster = state.broker.cluster_health().map(|h| ClusterJson {
        node_id: h.node_id,
        role: if h.controller == Some(h.node_id) {
            "controller"
        } else {
            "follower"
        },
        controller: h.controller,
        in_quorum: h.in_quorum,
        term: h.term,
    });
    let settings = &state.settings;
    Ok(Json(InfoJson {
        version: env!("CARGO_PKG_VERSION"),
        started_at: rfc3339_ms(started_ms),
        uptime_seconds: state.started.elapsed().as_secs(),
        user: (!who.user.is_empty()).then_some(who.user),
        auth: who.auth_required,
        tls: settings.tls,
        admin_writes: settings.admin_writes,
        listen: ListenJson {
            client: settings.client_addr.to_string(),
            http: settings.http_addr.map(|a| a.to_string()),
        },
        cluster,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RatesQuery {
    minutes: Option<String>,
    stream: Option<String>,
    topic: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct RatePointJson {
    at: Option<String>,
    #[serde(flatten)]
    rates: Rates,
}

#[derive(Debug, Serialize)]
pub(crate) struct LagPointJson {
    at: Option<String>,
    lag: u64,
}

impl LagPointJson {
    pub(crate) fn new(p: LagPoint) -> Self {
        LagPointJson {
            at: rfc3339_ms(p.at_ms),
            lag: p.lag,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct RatesJson {
    interval_seconds: u64,
    points: Vec<RatePointJson>,
}

/// `GET /api/v1/rates`: the totals' series, or one topic's.
pub(crate) async fn rates(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<RatesQuery>,
) -> Result<Json<RatesJson>, ApiError> {
    let minutes = match &query.minutes {
        Some(text) => number("minutes", text, 1, MINUTES_MAX)?,
        None => MINUTES_DEFAULT,
    };
    let samples = usize::try_from(minutes * 60 / SAMPLE_INTERVAL_SECONDS).unwrap_or(SAMPLES_MAX);
    let points = match (&query.stream, &query.topic) {
        (None, None) => {
            // Rates are the server's: any caller the broker lets list streams sees them.
            ask!(&state, &caller, ListStreams(pb::ListStreamsRequest {}));
            state.sampler.rates(None, samples)
        }
        (Some(stream), Some(topic)) => {
            check_name("stream", stream)?;
            check_name("topic", topic)?;
            // A topic's rates are for who may describe it.
            ask!(
                &state,
                &caller,
                DescribeTopic(pb::DescribeTopicRequest {
                    stream: stream.clone(),
                    topic: topic.clone(),
                })
            );
            state.sampler.rates(Some((stream, topic)), samples)
        }
        (Some(_), None) => return Err(ApiError::parameter("topic", "stream needs topic")),
        (None, Some(_)) => return Err(ApiError::parameter("stream", "topic needs stream")),
    };
    Ok(Json(RatesJson {
        interval_seconds: SAMPLE_INTERVAL_SECONDS,
        points: points
            .into_iter()
            .map(|p: RatePoint| RatePointJson {
                at: rfc3339_ms(p.at_ms),
                rates: p.rates,
            })
            .collect(),
    }))
}
