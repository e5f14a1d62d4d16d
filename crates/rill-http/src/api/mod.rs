//! The admin JSON API under `/api/v1/` (docs/HTTP_API.md). Every handler turns its
//! request into broker requests made with [`call`] as the caller's principal, so the
//! broker authorizes each one; the handlers check only the shape of what they were
//! sent (names, numbers and their bounds) and shape the answers into JSON.

mod groups;
mod messages;
mod purge;
mod server;
mod topics;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::routing::{get, post};
use bytes::Bytes;
use rill_proto::{RequestBody, ResponseBody};
use serde::de::DeserializeOwned;

use crate::app::{AppState, BODY_BYTES_MAX};
use crate::auth::Caller;
use crate::error::ApiError;

/// Declares the API's routes once: the router and the list of its paths, which the
/// test of the OpenAPI document compares with the document.
macro_rules! api_routes {
    ($( $path:literal => $route:expr ),* $(,)?) => {
        /// Every path the API routes, as written in the router.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) const API_PATHS: &[&str] = &[$($path),*];

        /// Every route of the API.
        pub(crate) fn routes() -> Router<Arc<AppState>> {
            Router::new()$(.route($path, $route))*
        }
    };
}

api_routes! {
    "/api/v1/openapi.json" => get(crate::openapi::document),
    "/api/v1/info" => get(server::info),
    "/api/v1/rates" => get(server::rates),
    "/api/v1/streams" => get(topics::streams),
    "/api/v1/topics" => get(topics::list),
    "/api/v1/streams/{stream}/topics" => post(topics::create),
    "/api/v1/streams/{stream}/topics/{topic}" =>
        get(topics::describe).patch(topics::alter).delete(topics::delete),
    "/api/v1/streams/{stream}/topics/{topic}/purge" => post(purge::purge),
    "/api/v1/streams/{stream}/topics/{topic}/partitions/{partition}/messages" =>
        get(messages::messages),
    "/api/v1/streams/{stream}/topics/{topic}/groups" => get(groups::list),
    "/api/v1/streams/{stream}/topics/{topic}/groups/{group}" =>
        get(groups::describe).delete(groups::delete),
    "/api/v1/streams/{stream}/topics/{topic}/groups/{group}/reset" => post(groups::reset),
    "/api/v1/streams/{stream}/topics/{topic}/consumers" => get(groups::consumers),
    "/api/v1/streams/{stream}/topics/{topic}/consumers/{consumer}/reset" =>
        post(groups::reset_consumer),
}

/// Makes one request to the broker as `caller`: its answer's body and payload, or the
/// broker's error.
pub(crate) async fn call(
    state: &AppState,
    caller: &Caller,
    body: RequestBody,
) -> Result<(ResponseBody, Bytes), ApiError> {
    match state
        .broker
        .handle_as(&caller.0, rill_proto::Request::new(body))
        .await
    {
        rill_proto::Response::Ok { body, payload } => Ok((body, payload)),
        rill_proto::Response::Err { error, .. } => Err(ApiError::from_wire(&error)),
    }
}

/// Makes a request of kind `$kind` and takes its answer of the same kind, or returns
/// the error.
macro_rules! ask {
    ($state:expr, $caller:expr, $kind:ident($request:expr)) => {
        match $crate::api::call($state, $caller, rill_proto::RequestBody::$kind($request)).await? {
            (rill_proto::ResponseBody::$kind(answer), payload) => (answer, payload),
            (other, _) => {
                return Err($crate::error::ApiError::Unexpected {
                    asked: stringify!($kind),
                    got: other.kind().name(),
                });
            }
        }
    };
}
pub(crate) use ask;

/// Checks a name against the protocol's rule (docs/PROTOCOL.md §7).
pub(crate) fn check_name(parameter: &'static str, name: &str) -> Result<(), ApiError> {
    match rill_proto::name_problem(name) {
        None => Ok(()),
        Some(problem) => Err(ApiError::InvalidName {
            name: parameter,
            problem,
        }),
    }
}

/// Where an operation on offsets points: a body's word (`to` of a reset, `before` of a
/// purge) with its `offset` or `time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    First,
    End,
    Offset(u64),
    /// µs since the Unix epoch.
    Time(i64),
}

/// Reads the point a body names in its field `field` (one of `words`, among `first`,
/// `end`, `offset` and `time`): `offset` takes the body's `offset` and not its `time`,
/// `time` its `time` (RFC 3339) and not its `offset`, the others neither.
pub(crate) fn point(
    field: &str,
    word: &str,
    words: &[&str],
    offset: Option<u64>,
    time: Option<&str>,
) -> Result<Point, ApiError> {
    let refuse = |what: &str| Err(ApiError::BadJson(format!("{field} {word:?} takes {what}")));
    if !words.contains(&word) {
        return Err(ApiError::BadJson(format!(
            "{field}: {word:?} is not {}",
            words.join(", ")
        )));
    }
    match (word, offset, time) {
        ("offset", Some(n), None) => Ok(Point::Offset(n)),
        ("offset", ..) => refuse("offset and not time"),
        ("time", None, Some(text)) => crate::records::parse_rfc3339_us(text)
            .map(Point::Time)
            .ok_or_else(|| ApiError::BadJson(format!("time: {text:?} is not an RFC 3339 time"))),
        ("time", ..) => refuse("time and not offset"),
        ("first", None, None) => Ok(Point::First),
        ("end", None, None) => Ok(Point::End),
        _ => refuse("neither offset nor time"),
    }
}

/// A whole number parameter within `min..=max`.
pub(crate) fn number(
    parameter: &'static str,
    text: &str,
    min: u64,
    max: u64,
) -> Result<u64, ApiError> {
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::parameter(
            parameter,
            format!("{text:?} is not a whole number from {min} to {max}"),
        )),
    }
}

/// Path parameters, their names checked, with a refusal that names the path (or the
/// name) as the bad parameter.
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // Every name in a path is checked here, once, before any handler runs.
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::parameter("path", e.body_text()))?;
        for (key, value) in &raw {
            if let Some(parameter) = NAME_PARAMETERS.iter().find(|name| **name == key) {
                check_name(parameter, value)?;
            }
        }
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(t)) => Ok(ApiPath(t)),
            Err(e) => Err(ApiError::parameter("path", e.body_text())),
        }
    }
}

/// The path parameters that are names (docs/PROTOCOL.md §7), which [`ApiPath`] checks.
const NAME_PARAMETERS: &[&str] = &["stream", "topic", "group", "consumer"];

/// Query parameters into a struct that denies unknown fields: an unknown or malformed
/// parameter is a `400` that names it.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(t)) => Ok(ApiQuery(t)),
            Err(e) => Err(ApiError::parameter("query", e.body_text())),
        }
    }
}

/// A JSON body of at most [`BODY_BYTES_MAX`] bytes.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(t)) => Ok(ApiJson(t)),
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::PayloadTooLarge {
                    bytes_max: BODY_BYTES_MAX,
                })
            }
            Err(e) => Err(ApiError::BadJson(e.body_text())),
        }
    }
}
