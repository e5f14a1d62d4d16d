//! Rill: a durable, partitioned event log that a service embeds in-process or runs as a
//! server (`rill serve`), with one SDK for both.
//!
//! ```no_run
//! # async fn example() -> Result<(), rill::ClientError> {
//! let rill = rill::Client::open("./rill-data").await?; // or Client::connect("rill://127.0.0.1:7171")
//! let orders = rill.stream("shop").topic("orders");
//! orders.ensure(2).await?;
//! orders.publish().key("order-17").json(&serde_json::json!({"total": 12.5})).send().await?;
//! # Ok(()) }
//! ```
//!
//! See the crate `rill-client` for the whole API; this crate re-exports it.

#![deny(missing_docs, unreachable_pub)]

pub use rill_client::*;

/// Typed events (the crate `rill-events`; docs/EVENTS.md): event types described once as
/// Rust types, per-key order with ordering fences, run reduction by algebra, retry and
/// dead-letter topics.
#[cfg(feature = "events")]
pub mod events {
    pub use rill_events::*;
}
