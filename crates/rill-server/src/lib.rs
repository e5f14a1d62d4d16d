//! Rill's network front: a tokio TCP server speaking the `rill-proto` wire protocol, and
//! a tiny HTTP admin endpoint (`/health`, `/metrics`).
//!
//! The server only moves bytes: it splits frames off each connection, decodes them into
//! [`rill_proto::Request`]s, hands each to [`rill_broker::Broker::handle`] in its own task
//! (so a long poll never blocks the requests pipelined behind it), and writes the
//! encoded responses back in whatever order they finish. Everything it owns is a bound:
//! connections, in-flight requests per connection, frame size, idle time, drain time.
//!
//! ```no_run
//! use std::sync::Arc;
//! use rill_broker::{Broker, BrokerConfig};
//! use rill_server::{Server, ServerConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = Arc::new(Broker::open(BrokerConfig::new("/var/lib/rill"))?);
//! let server = Server::bind(ServerConfig::default(), Arc::clone(&broker)).await?;
//! tracing::info!(addr = %server.local_addr(), "listening");
//! server
//!     .run(async {
//!         let _ = tokio::signal::ctrl_c().await;
//!     })
//!     .await?;
//! broker.shutdown()?;
//! # Ok(())
//! # }
//! ```
//!
//! Module map: `server.rs` (listeners, accept loops, connection limit, shutdown),
//! `connection.rs` (one client: reader, per-request tasks, single writer), `http.rs`
//! (the admin responder), `metrics.rs` (counters and histograms, Prometheus text).
//!
//! Architecture Invariant: no business logic here: every decision about streams, topics,
//! records and offsets is in `rill-broker`; this crate decodes frames, calls
//! `Broker::handle`, encodes replies, and enforces transport bounds.

mod config;
mod connection;
mod error;
mod http;
mod metrics;
mod server;

pub use config::ServerConfig;
pub use error::ServerError;
pub use metrics::{DURATION_BUCKETS_SECONDS, Metrics};
pub use server::Server;
