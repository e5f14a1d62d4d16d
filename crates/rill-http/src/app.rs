//! The application: its shared state, the router with its bounds, and the serving of
//! one connection with hyper.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rill_broker::Broker;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

use crate::Metrics;
use crate::auth::{self, PASSWORD_CHECKS_MAX, Peer};
use crate::error::ApiError;
use crate::sampler::Sampler;

/// Largest request head hyper reads (request line and headers); a larger one is
/// answered `431`. hyper's own floor for this bound is 8 KiB.
pub(crate) const REQUEST_HEAD_BYTES_MAX: usize = 16 << 10;
/// How long a connection may take to send a request head, also between requests of a
/// kept-alive connection: then it is closed.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request body read; a larger one is answered `413`.
pub(crate) const BODY_BYTES_MAX: usize = 64 << 10;
/// Longest one request may take from its head to its response.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// What the application is told about the server it runs in (shown by
/// `GET /api/v1/info`), and whether it takes writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// The client protocol listener's address.
    pub client_addr: SocketAddr,
    /// The HTTP port's own address.
    pub http_addr: Option<SocketAddr>,
    /// Whether both ports speak TLS.
    pub tls: bool,
    /// Whether the API serves writes (`rill serve --http-admin-writes`): without it,
    /// writes are refused with `403 WRITES_DISABLED`.
    pub admin_writes: bool,
}

/// What every request shares.
#[derive(Debug)]
pub(crate) struct AppState {
    pub(crate) broker: Arc<Broker>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) sampler: Sampler,
    pub(crate) settings: HttpSettings,
    pub(crate) started_at: SystemTime,
    pub(crate) started: Instant,
    pub(crate) password_checks: Semaphore,
}

/// The HTTP application of one server: cheap to clone, shared by its connections.
#[derive(Debug, Clone)]
pub struct HttpApp {
    state: Arc<AppState>,
    pub(crate) router: Router,
}

impl HttpApp {
    /// The application over `broker`, serving `metrics` at `/metrics`.
    pub fn new(broker: Arc<Broker>, metrics: Arc<Metrics>, settings: HttpSettings) -> Self {
        let state = Arc::new(AppState {
            broker,
            metrics,
            sampler: Sampler::new(),
            settings,
            started_at: SystemTime::now(),
            started: Instant::now(),
            password_checks: Semaphore::new(PASSWORD_CHECKS_MAX),
        });
        let router = router(Arc::clone(&state));
        Self { state, router }
    }

    /// Samples the traffic counters and the groups' lag every 5 s for the rates of the
    /// API, until dropped (the server runs it as a task and aborts it when it stops).
    pub async fn run_sampler(&self) {
        crate::sampler::run(&self.state).await;
    }

    /// Serves one HTTP/1.1 connection (after TLS, on a TLS port) until the client
    /// closes it, its request head does not come within 5 s, or it fails.
    pub async fn serve_connection<S>(&self, stream: S, peer: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let router = self.router.clone();
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(Peer(peer));
                router.clone().oneshot(request.map(axum::body::Body::new))
            },
        );
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .max_buf_size(REQUEST_HEAD_BYTES_MAX)
            // Header names as they were written before hyper (`Content-Type`), which
            // HTTP/1.1 clients read either way.
            .title_case_headers(true)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        if let Err(e) = connection.await {
            tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
        }
    }
}

/// Every route, with the bounds around them: the outermost layer (the last added) is
/// the request timeout, then the body limit, then the refusal of writes, then
/// authentication.
fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/health/live", get(live))
        .route("/metrics", get(metrics))
        .merge(crate::console::routes())
        .merge(crate::api::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            auth::authenticate,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            refuse_writes,
        ))
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(middleware::from_fn(time_limit))
        .with_state(state)
}

/// Every partition takes appends: `ok`; else `503` naming each that does not. A
/// monitor should alert on it; restarting the process would not help.
async fn health(State(state): State<Arc<AppState>>) -> Response {
    match state.metrics.health_problems() {
        None => text(StatusCode::OK, "ok\n".into()),
        Some(problems) => text(StatusCode::SERVICE_UNAVAILABLE, problems),
    }
}

/// The process is up and answering (for a liveness probe, which must not restart a
/// server because one partition is damaged).
async fn live() -> Response {
    text(StatusCode::OK, "ok\n".into())
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::METRICS_CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

fn text(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, TEXT_CONTENT_TYPE)], body).into_response()
}

async fn not_found(request: Request) -> ApiError {
    ApiError::NotFound(request.uri().path().to_owned())
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method.to_string())
}

/// Whether a request changes something: any method but `GET` and `HEAD` under the API.
fn is_write(request: &Request) -> bool {
    request.uri().path().starts_with("/api/")
        && !matches!(*request.method(), Method::GET | Method::HEAD)
}

/// Refuses writes unless the server takes them, before any credential is checked (a
/// refused write costs no Argon2 hash).
async fn refuse_writes(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if is_write(&request) && !state.settings.admin_writes {
        return ApiError::WritesDisabled.into_response();
    }
    next.run(request).await
}

/// Bounds the time of one request (its handler and the broker requests it makes).
async fn time_limit(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout {
            seconds: REQUEST_TIMEOUT.as_secs(),
        }
        .into_response(),
    }
}
