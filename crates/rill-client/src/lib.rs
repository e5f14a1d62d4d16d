//! Rill's Rust SDK: one [`Client`] over TCP ([`Client::connect`]) or over an in-process
//! broker ([`Client::open`]), with the same API and behaviour on both.
//!
//! ```no_run
//! # async fn example() -> Result<(), rill_client::ClientError> {
//! use rill_client::{Client, CommitPolicy, StartAt};
//!
//! let rill = Client::open("./rill-data").await?;      // embedded; or Client::connect(url)
//! let orders = rill.stream("shop").topic("orders");
//! orders.ensure(2).await?;
//! orders.publish().key("order-17").value("placed").send().await?;
//!
//! let mut reader = orders.records("audit");            // a cursor the caller keeps
//! while let Some(record) = reader.next().await {
//!     println!("{:?}", record?.value);
//! }
//! let mut consumer = orders                            // the broker keeps the position
//!     .consumer("billing", 0)
//!     .start_at(StartAt::Next)
//!     .commit_policy(CommitPolicy::Disabled)
//!     .build()
//!     .await?;
//! if let Some(record) = consumer.next().await {
//!     let record = record?;
//!     consumer.commit(&record).await?;                 // after handling it
//! }
//! # Ok(()) }
//! ```
//!
//! Architecture Invariant: the client reaches a broker only through the one transport
//! seam (`transport.rs`: TCP or embedded); every feature is built on it, so both
//! transports run the same code above it.

mod client;
mod codec;
mod commit;
mod consumer;
mod error;
mod message;
mod producer;
mod reader;
mod routing;
mod topic;
mod transport;

pub use client::{Client, ClientBuilder, DEFAULT_URL, RetryPolicy, StreamHandle, parse_url};
pub use codec::{Codec, Json, MsgPack};
pub use commit::CommitPolicy;
pub use consumer::{Consumer, ConsumerBuilder, StartAt};
pub use error::ClientError;
pub use message::{Message, Position, Record, Value};
pub use producer::{Background, Backpressure, Producer, ProducerBuilder, Sharding};
pub use reader::{Offsets, Reader};
pub use rill_proto::ErrorCode;
/// The wire protocol's messages, for fields the typed API does not wrap yet.
pub use rill_proto::pb as wire;
pub use rill_proto::pb::{DescribeTopicResponse, PartitionInfo, StreamInfo, TopicSummary};
pub use routing::{Routing, partition_for_key};
pub use topic::{Durability, Fetched, Publish, Topic, TopicOptions, TypedTopic};
