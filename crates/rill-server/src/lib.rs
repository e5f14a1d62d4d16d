//! Rill's network front: a tokio TCP server speaking the `rill-proto` wire protocol, and
//! the HTTP port, whose application (`/health`, `/metrics`, the admin JSON API) is
//! `rill-http`'s: this crate owns its listener, connection limit, spare descriptor and
//! TLS, and hands each accepted stream to `rill_http::HttpApp`.
//!
//! The server only moves bytes: it splits frames off each connection, decodes them into
//! [`rill_proto::Request`]s, hands each to [`rill_broker::Broker::handle`] in its own task
//! (so a long poll never blocks the requests pipelined behind it), and writes the
//! encoded responses back in whatever order they finish. Everything it owns is a bound:
//! connections (lowered to what the file-descriptor limit allows), in-flight requests
//! per connection, frame size, bytes buffered per connection and in all, the time a
//! write may stall, idle time, drain time.
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
//! `connection.rs` (one client: reader, per-request tasks), `subscribe.rs` (push
//! streaming: a connection's subscriptions and their credit), `writer.rs` (the single
//! writer and its write timeout), `budget.rs` (the byte budgets), `fds.rs` (the
//! descriptor-derived connection limit and the spare descriptor), `http.rs` (one HTTP
//! connection: TLS, then `rill-http` serves it), `tls.rs` (TLS on both listeners,
//! reloadable, and the plaintext check before the handshake). [`Metrics`] is
//! `rill-http`'s, re-exported: the server counts into it, the HTTP port serves it.
//!
//! Architecture Invariant: no business logic here: every decision about streams, topics,
//! records and offsets is in `rill-broker`; this crate decodes frames, calls
//! `Broker::handle`, encodes replies, and enforces transport bounds.

#![deny(missing_docs, unreachable_pub)]

mod budget;
mod config;
mod connection;
mod error;
mod fds;
mod http;
mod server;
mod subscribe;
mod tls;
mod writer;

pub use config::ServerConfig;
pub use error::ServerError;
pub use rill_http::{CloseReason, DURATION_BUCKETS_SECONDS, Metrics};
pub use server::Server;
pub use tls::{Tls, TlsError, TlsSettings};
