//! Rill's broker core, embeddable: a persisted catalog of streams, topics and
//! partitions; produce with an idempotent-producer check; fetch with long polling;
//! durable stored offsets. It has no sockets: the TCP server (`rill-server`) and the
//! embedded client both call [`Broker::handle`], so they behave the same.
//!
//! Architecture Invariant: no socket code here, and every decision about data lives
//! here rather than in the server. Blocking log I/O runs on tokio's blocking pool.

#![deny(missing_docs, unreachable_pub)]

mod admin;
mod alter;
mod auth;
mod broker;
mod catalog;
pub mod cluster;
mod clustered;
mod clustered_ranges;
mod data;
mod elastic;
mod error;
mod group;
mod group_admin;
mod groups;
mod handler;
mod names;
mod offsets;
mod partition;
mod policy;
mod producer;
mod purge;
mod quota;
mod reserve;
mod upkeep;

// The API other crates use, and the types its signatures name; everything else is
// crate-private (the coordinator, the producer table, the offset store, the limits).
pub use auth::{HttpCredential, Principal, TOKEN_MECHANISM, password_verifiers};
pub use broker::{Broker, BrokerConfig, FailedPartition, Fetch, PartitionState};
pub use catalog::{AutoSplit, PendingChange, StoredRange, StoredRanges, TopicConfig};
pub use elastic::{OPEN_RANGES_MAX, RangeChange};
pub use error::BrokerError;
pub use group::GroupError;
pub use groups::{MemberReport, Session};
pub use names::validate_name;
pub use partition::Produced;
pub use policy::{RangeChanges, RangeStat};
pub use quota::{QuotaKind, QuotaUsage, THROTTLE_MAX};
/// Process-wide fsync latency of the log engine, for metrics.
pub use rill_storage::{FSYNC_BUCKETS_SECONDS, FsyncStats, fsync_stats};
