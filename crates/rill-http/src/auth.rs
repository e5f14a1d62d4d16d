//! Who makes a request (docs/SECURITY.md §6): with authentication required, every path
//! but [`PUBLIC_PATHS`] needs `Authorization: Basic` (checked with Argon2id, at most
//! [`PASSWORD_CHECKS_MAX`] at once) or `Authorization: Bearer`, checked by the broker;
//! without, requests act as the principal every client connection has. The principal
//! goes into the request's extensions as [`Caller`], for the API to hand to the broker.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use rill_broker::{HttpCredential, Principal};

use crate::app::AppState;
use crate::error::ApiError;

/// Paths served without a credential.
pub(crate) const PUBLIC_PATHS: &[&str] = &["/health", "/health/live", "/metrics"];
/// Argon2id checks of HTTP Basic passwords run at once (each takes ~19 MiB and a core
/// for a few tens of ms); more wait.
pub(crate) const PASSWORD_CHECKS_MAX: usize = 2;

/// The address of the connection a request came on (set by `serve_connection`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// The principal a request acts as.
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub(crate) Principal);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        // `authenticate` runs before every route; a request without a principal would
        // be a routing mistake, refused rather than served as anyone.
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::Unauthenticated("no credential was checked".into()))
    }
}

/// The middleware: finds the request's principal, or answers 401.
pub(crate) async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if PUBLIC_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let peer = request.extensions().get::<Peer>().map(|p| p.0.ip());
    let principal = if state.broker.auth_required() {
        match check(&state, peer, request.headers()).await {
            Ok(principal) => principal,
            Err(e) => return e.into_response(),
        }
    } else {
        state.broker.session(peer).principal()
    };
    request.extensions_mut().insert(Caller(principal));
    next.run(request).await
}

async fn check(
    state: &Arc<AppState>,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<Principal, ApiError> {
    let credential = credential(headers)
        .map_err(|why| ApiError::Unauthenticated(why.into()))?
        .ok_or_else(|| {
            ApiError::Unauthenticated(
                "this path needs a credential: HTTP Basic or a Bearer token".into(),
            )
        })?;
    let outcome = match &credential {
        // Argon2id: off the runtime's threads, a bounded number at once.
        HttpCredential::Basic { .. } => {
            let _slot = state
                .password_checks
                .acquire()
                .await
                .map_err(|_| ApiError::Unauthenticated("the server is stopping".into()))?;
            let broker = Arc::clone(&state.broker);
            tokio::task::spawn_blocking(move || broker.authenticate_http(peer, &credential)).await?
        }
        HttpCredential::Bearer(_) => state.broker.authenticate_http(peer, &credential),
    };
    outcome.map_err(|e| ApiError::Unauthenticated(e.to_string()))
}

/// The `Authorization` header's credential: `None` without the header, an error for
/// one that cannot be read.
fn credential(headers: &HeaderMap) -> Result<Option<HttpCredential>, &'static str> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| "the Authorization header is not ASCII")?
        .trim();
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
        return Ok(Some(HttpCredential::bearer(rest)));
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("the Authorization header must be Basic or Bearer");
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest)
        .map_err(|_| "the Basic credential is not base64")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "the Basic credential is not UTF-8")?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or("the Basic credential is not USER:PASSWORD")?;
    Ok(Some(HttpCredential::basic(user, password)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn authorization_headers_are_read() {
        assert!(matches!(credential(&HeaderMap::new()), Ok(None)));
        // "alice:pa:ss" in base64.
        match credential(&headers("Basic YWxpY2U6cGE6c3M=")) {
            Ok(Some(HttpCredential::Basic { user, password })) => {
                assert_eq!(user, "alice");
                assert_eq!(password.expose(), "pa:ss");
            }
            other => panic!("{other:?}"),
        }
        match credential(&headers("bearer rill_abc")) {
            Ok(Some(HttpCredential::Bearer(t))) => assert_eq!(t.expose(), "rill_abc"),
            other => panic!("{other:?}"),
        }
        for bad in ["Digest abc", "Basic !!!", "Basic YWxpY2U=", "Bearer"] {
            assert!(credential(&headers(bad)).is_err(), "{bad}");
        }
    }
}
