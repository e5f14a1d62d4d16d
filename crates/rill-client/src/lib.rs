//! Rill's Rust SDK: one [`Client`] over TCP ([`Client::connect`]) or over an in-process
//! broker ([`Client::open`]), with the same API and behaviour on both.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! use rill_client::{Client, CommitPolicy, StartAt};
//!
//! let dir = tempfile::tempdir()?;
//! let rill = Client::open(dir.path()).await?;          // embedded; or Client::connect(url)
//! let orders = rill.stream("shop").topic("orders");
//! orders.ensure(2).await?;
//! let at = orders.publish().key("order-17").value("placed").send().await?;
//!
//! let mut reader = orders.records("audit");            // a cursor the caller keeps
//! let first = reader.next().await.expect("one record")?;
//! assert_eq!(&first.value[..], b"placed");
//!
//! let mut consumer = orders                            // the broker keeps the position
//!     .consumer("billing", at.partition)
//!     .start_at(StartAt::Next)
//!     .commit_policy(CommitPolicy::Disabled)
//!     .build()
//!     .await?;
//! let record = consumer.next().await.expect("a record")?;
//! consumer.commit(&record).await?;                     // after handling it
//! assert_eq!(consumer.last_stored_offset(at.partition), Some(at.offset));
//! rill.close().await?;
//! # Ok::<(), Box<dyn std::error::Error>>(()) })
//! # }
//! ```
//!
//! Architecture Invariant: the client reaches a broker only through the one transport
//! seam (`transport.rs`: TCP or embedded); every feature is built on it, so both
//! transports run the same code above it.

#![deny(missing_docs, unreachable_pub)]

mod ahead;
#[cfg(feature = "avro")]
pub mod avro;
mod batching;
mod client;
mod code;
mod codec;
mod commit;
mod consumer;
mod error;
mod group;
mod info;
mod message;
mod producer;
mod ranged;
pub mod raw;
mod reader;
mod routed;
mod routing;
mod subscription;
mod tls;
mod topic;
mod topic_admin;
mod transport;
mod users;

#[cfg(feature = "avro")]
pub use apache_avro::Schema as AvroSchema;
#[cfg(feature = "avro")]
pub use avro::Avro;
pub use batching::{Batching, BatchingBuilder};
pub use client::{
    Client, ClientBuilder, DEFAULT_URL, RetryPolicy, StreamHandle, parse_url, parse_urls,
    redact_url, split_credentials, url_uses_tls,
};
pub use code::ErrorCode;
pub use codec::{Codec, Json, MsgPack};
pub use commit::CommitPolicy;
pub use consumer::{Consumer, ConsumerBuilder, StartAt};
pub use error::ClientError;
pub use group::{
    GroupConsumer, GroupConsumerBuilder, MEMBER_METRIC_NAME_MAX, MEMBER_METRICS_MAX,
    RebalanceCallback,
};
pub use info::{
    AutoSplit, ClusterNodeInfo, ClusterPartitionInfo, ClusterStatus, DamagedRange,
    GroupDescription, GroupMember, GroupPartition, PartitionInfo, RangeChange, RangeInfo,
    StreamInfo, TopicConfig, TopicDescription, TopicInfo,
};
pub use message::{Message, Position, Record, Value};
pub use producer::{Background, Backpressure, Producer, ProducerBuilder, Sharding};
pub use reader::{Offsets, Reader};
pub use rill_auth::Secret;
pub use rill_format::{Durability, ParseDurabilityError};
/// The protocol's rule for stream, topic, consumer and group names (`docs/PROTOCOL.md`
/// §7): why a name breaks it, if it does, so a caller can check before it asks.
pub use rill_proto::{NAME_LEN_MAX, name_problem};
pub use routing::{Routing, key_hash, partition_for_key};
pub use subscription::Subscription;
pub use tls::TlsOptions;
pub use topic::{Fetched, Publish, Topic, TopicOptions, TypedTopic};
pub use topic_admin::{
    ConsumerPartition, ConsumerSummary, GroupSummary, LogStart, PurgeTo, ResetTo, StoredOffset,
    TopicChanges,
};
pub use transport::Credentials;
pub use users::{
    NewToken, Permission, QUOTA_RATE_MIN, Quota, QuotaChange, Role, TokenInfo, UserInfo, WhoAmI,
};
