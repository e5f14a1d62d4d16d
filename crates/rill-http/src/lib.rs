//! Rill's HTTP application: what the admin port serves (docs/HTTP_API.md).
//!
//! - `/health`, `/health/live` — plain text for probes.
//! - `/metrics` — the server's [`Metrics`] in the Prometheus text format, kept in
//!   `prometheus-client` types (`metrics/`).
//! - `/api/v1/…` — the admin JSON API (`api/`): every request is made to the broker
//!   through [`rill_broker::Broker::handle_as`] as the principal its credential proves,
//!   so the broker authorizes it and this crate never decides what a caller may do.
//! - `/` — the web console's embedded assets (`console.rs`; a placeholder for now).
//!
//! [`HttpApp`] is the application; `rill-server` owns the listener, the connection limit
//! and TLS, and hands each accepted stream to [`HttpApp::serve_connection`], which
//! serves it with hyper under this crate's bounds: the request head (16 KiB, read within
//! 5 s), the request body (64 KiB), the time one request may take (10 s).
//!
//! The rate [`sampler`](HttpApp::run_sampler) reads the per-topic counters every 5 s
//! and keeps 15 minutes of rates, bounded in topics and groups.
//!
//! Architecture Invariant: no business logic here: what a request may do and what it
//! does are the broker's; this crate turns HTTP into broker requests and broker answers
//! into JSON, and bounds what one request may cost.

#![deny(missing_docs, unreachable_pub)]

mod api;
mod app;
mod auth;
mod console;
mod error;
mod metrics;
mod openapi;
mod records;
mod sampler;

pub use app::{HttpApp, HttpSettings};
pub use metrics::{
    BufferGauge, CloseReason, ConnectionGauge, DURATION_BUCKETS_SECONDS, METRICS_CONTENT_TYPE,
    Metrics, TOPIC_SERIES_MAX, TopicTotals,
};
