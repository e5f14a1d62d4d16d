//! Rill's broker core, embeddable: a persisted catalog of streams, topics and
//! partitions; produce with an idempotent-producer check; fetch with long polling;
//! durable stored offsets. It has no sockets: the TCP server (`rill-server`) and the
//! embedded client both call [`Broker::handle`], so they behave the same.
//!
//! Architecture Invariant: no socket code here, and every decision about data lives
//! here rather than in the server. Blocking log I/O runs on tokio's blocking pool.

mod admin;
mod broker;
mod catalog;
mod data;
mod error;
mod group;
mod groups;
mod handler;
mod names;
mod offsets;
mod partition;
mod producer;
mod reserve;
mod upkeep;

pub use broker::{Broker, BrokerConfig, FailedPartition, Fetch, PartitionState};
pub use catalog::{PARTITIONS_MAX, RECORD_BYTES_DEFAULT, SEGMENT_BYTES_DEFAULT, TopicConfig};
pub use error::BrokerError;
pub use group::{Coordinator, GroupError, MemberView};
pub use groups::{SESSION_TIMEOUT_DEFAULT, Session};
pub use handler::error_response;
pub use names::{NAME_LEN_MAX, validate_name};
pub use offsets::{OffsetKey, OffsetStore};
pub use partition::Produced;
pub use producer::{Check, ProducerTable, RECENT_BATCHES, RECENT_BATCHES_MAX, RecentBatch};
/// Process-wide fsync latency of the log engine, for metrics.
pub use rill_storage::{FSYNC_BUCKETS_SECONDS, FsyncStats, fsync_stats};
