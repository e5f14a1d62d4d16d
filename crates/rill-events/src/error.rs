//! The errors of publishing and of starting a consumer.

use rill_client::ClientError;

use crate::BodyError;

/// A publish that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The body did not encode.
    #[error("the event's body does not encode: {0}")]
    Body(#[from] BodyError),
    /// The key encodes to no bytes.
    #[error("the event's key encodes to no bytes (a key is never empty)")]
    EmptyKey,
    /// The broker or the connection refused it.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Why a consumer did not start; nothing was created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// `retry_delays` is empty.
    #[error("retry_delays is empty: a failed key would never be tried again")]
    NoRetryDelays,
    /// The partition list is empty.
    #[error("the partition list is empty")]
    NoPartitions,
    /// A partition is listed twice.
    #[error("partition {0} is listed twice")]
    DuplicatePartition(u32),
    /// A listed partition does not exist.
    #[error("partition {partition} does not exist: {topic} has {partitions}")]
    PartitionNotFound {
        /// The partition.
        partition: u32,
        /// The main topic.
        topic: String,
        /// Its partition count.
        partitions: u32,
    },
    /// A bound is zero.
    #[error("{0} must be positive")]
    Zero(&'static str),
    /// No handler is registered.
    #[error("no handler is registered")]
    NoHandlers,
    /// Handlers of event types keyed into different topics.
    #[error("handlers name different topics ({first} and {second}): one consumer reads one topic")]
    MixedTopics {
        /// One topic.
        first: &'static str,
        /// Another.
        second: &'static str,
    },
    /// Two handlers take the same tag.
    #[error("tag {tag} is registered twice ({first} and {second})")]
    DuplicateTag {
        /// The tag.
        tag: u32,
        /// One type.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
    /// The main topic does not exist.
    #[error("the main topic {stream}/{topic} does not exist")]
    TopicNotFound {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
    },
    /// A retry or dead-letter topic exists with another partition count.
    #[error("{topic} has {found} partitions, the main topic {expected}")]
    PartitionCountMismatch {
        /// The retry or dead-letter topic.
        topic: String,
        /// Its partition count.
        found: u32,
        /// The main topic's.
        expected: u32,
    },
    /// The main topic is elastic (docs/RANGES.md): its key ranges split and merge, and a
    /// key's pending retries live in one range's retry partition while its newer events
    /// land in the range's children, so the consumer could not keep the key's order.
    #[error(
        "the main topic {stream}/{topic} is elastic: events consumers read plain topics only (a key's retries would stay behind in a split range's retry partition while its newer events are handled in the children)"
    )]
    ElasticTopic {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
    },
    /// A name the broker would refuse (the consumer name, or a derived topic name).
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The broker or the connection failed.
    #[error(transparent)]
    Client(#[from] ClientError),
}
