use rill_proto::ErrorCode;
use rill_storage::StorageError;

/// Errors of broker operations. Each maps to one wire [`ErrorCode`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// The connection has not authenticated, its credential no longer holds, or an
    /// authentication exchange failed (the message never says which part was wrong).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The authenticated user lacks a permission the request needs.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A name breaks the naming rules.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// "stream", "topic" or "consumer".
        what: &'static str,
        /// The name (cut to 64 characters).
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// The stream does not exist.
    #[error("stream {0:?} does not exist; create it with `rill stream create`")]
    StreamNotFound(String),
    /// The topic does not exist.
    #[error("topic {stream}/{topic} does not exist; create it with `rill topic create`")]
    TopicNotFound {
        /// Its stream.
        stream: String,
        /// The topic.
        topic: String,
    },
    /// The partition does not exist.
    #[error("partition {partition} does not exist: {stream}/{topic} has {partitions} partitions")]
    PartitionNotFound {
        /// Its stream.
        stream: String,
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// How many the topic has.
        partitions: u32,
    },
    /// The stream exists already.
    #[error("stream {0:?} exists already")]
    StreamExists(String),
    /// The topic exists, with other options than requested (or creation was not
    /// idempotent).
    #[error("topic {stream}/{topic} exists already{detail}")]
    TopicExists {
        /// Its stream.
        stream: String,
        /// The topic.
        topic: String,
        /// What differs, if anything.
        detail: String,
    },
    /// Topic options are out of range.
    #[error("invalid topic options: {0}")]
    InvalidConfig(String),
    /// An append to a sealed range of an elastic topic (docs/RANGES.md §4).
    #[error(
        "range {partition} of {stream}/{topic} is sealed at offset {end}: refresh the topic's ranges and route again"
    )]
    RangeSealed {
        /// Its stream.
        stream: String,
        /// The topic.
        topic: String,
        /// The range (partition).
        partition: u32,
        /// Where it was sealed.
        end: u64,
    },
    /// An append to a range a split or merge is sealing (docs/RANGES.md §3).
    #[error("range {partition} of {stream}/{topic} is being split or merged: retry shortly")]
    RangeMigrating {
        /// Its stream.
        stream: String,
        /// The topic.
        topic: String,
        /// The range (partition).
        partition: u32,
    },
    /// The request is malformed (a message field is missing or out of range).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The idempotent producer's sequence does not follow its last batch.
    #[error("out-of-order sequence for producer {producer_id}: expected {expected}, got {got}")]
    OutOfOrderSequence {
        /// The producer.
        producer_id: u64,
        /// The next sequence the broker expects.
        expected: u32,
        /// The batch's base sequence.
        got: u32,
    },
    /// A newer epoch of this producer id exists.
    #[error("producer {producer_id} epoch {epoch} is fenced by epoch {current}")]
    ProducerFenced {
        /// The producer.
        producer_id: u64,
        /// The batch's epoch.
        epoch: u16,
        /// The current epoch.
        current: u16,
    },
    /// The partition has no state for this idempotent producer and the batch is not its
    /// first: its state was forgotten (evicted, or older than what a restart rebuilt),
    /// so the broker cannot tell whether the batch is a retry of one already stored.
    /// Nothing was stored by this request.
    #[error(
        "producer {producer_id} is unknown to this partition (evicted or forgotten after a restart) and batch sequence {sequence} is not its first; nothing was stored: start a new epoch"
    )]
    UnknownProducerId {
        /// The producer.
        producer_id: u64,
        /// The batch's epoch.
        epoch: u16,
        /// The batch's base sequence.
        sequence: u32,
    },
    /// An idempotent batch (attribute bit 3 set) names producer id 0. `InitProducer`
    /// never issues it, so the batch's producer fields were left unset.
    #[error(
        "an idempotent batch carries producer id 0, which is never issued: set the id InitProducer returned"
    )]
    ProducerIdZero,
    /// The partition could not be opened (its files are unreadable): it serves nothing
    /// until it is repaired.
    #[error("partition {stream}/{topic}/{partition} is unavailable: {reason}")]
    PartitionUnavailable {
        /// Its stream.
        stream: String,
        /// Its topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// Why it could not be opened.
        reason: String,
    },
    /// A consumer-group request was refused.
    #[error(transparent)]
    Group(#[from] crate::GroupError),
    /// The group has no members and no stored offsets.
    #[error("group {0:?} does not exist (it has no member and no stored offset)")]
    GroupNotFound(String),
    /// An admin request that needs the group without live members found some.
    #[error("group {group:?} has {members} live member(s); {hint}")]
    GroupNotEmpty {
        /// The group.
        group: String,
        /// How many members it has.
        members: usize,
        /// What to do about it.
        hint: &'static str,
    },
    /// A stored offset asked for lies outside its partition's records.
    #[error(
        "offset {offset} is outside partition {partition} of {stream}/{topic}, which holds {start}..{end}"
    )]
    OffsetOutOfRange {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The offset asked for.
        offset: u64,
        /// The partition's first stored offset.
        start: u64,
        /// Its end (the next offset).
        end: u64,
    },
    /// No offset is stored for this consumer and partition.
    #[error("no offset stored for consumer {0:?}")]
    OffsetNotFound(String),
    /// The log engine failed or refused.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The broker is shutting down.
    #[error("the broker is shutting down")]
    ShuttingDown,
    /// Catalog persistence failed.
    #[error("catalog {op} {path}: {source}")]
    Catalog {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A background task failed unexpectedly (a bug).
    #[error("internal error: {0}")]
    Internal(String),
    /// In a cluster: this node does not lead what the request is for.
    #[error("this node does not lead {what}{}", match (leader, address) {
        (Some(l), Some(a)) => format!("; node {l} at {a} does"),
        (Some(l), None) => format!("; node {l} does"),
        _ => "; no leader is known yet".to_owned(),
    })]
    NotLeader {
        /// What: a partition, or the metadata group.
        what: String,
        /// The leader's node id, if known.
        leader: Option<u64>,
        /// The leader's client address, if known.
        address: Option<String>,
    },
    /// In a cluster: the group did not answer in time (no majority, or an election).
    #[error("the cluster did not answer in time: {0}")]
    ClusterTimeout(String),
    /// In a cluster: a request this version serves on a single node only.
    #[error("{0} is not supported in a cluster yet")]
    NotInCluster(&'static str),
}

impl BrokerError {
    /// The wire error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidName { .. } => ErrorCode::InvalidName,
            Self::StreamNotFound(_) => ErrorCode::StreamNotFound,
            Self::TopicNotFound { .. } => ErrorCode::TopicNotFound,
            Self::PartitionNotFound { .. } => ErrorCode::PartitionNotFound,
            Self::StreamExists(_) => ErrorCode::StreamExists,
            Self::TopicExists { .. } => ErrorCode::TopicExists,
            Self::InvalidConfig(_) => ErrorCode::InvalidConfig,
            Self::RangeSealed { .. } => ErrorCode::NotOwner,
            Self::RangeMigrating { .. } => ErrorCode::Migrating,
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest,
            Self::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequence,
            Self::ProducerFenced { .. } => ErrorCode::ProducerFenced,
            Self::UnknownProducerId { .. } => ErrorCode::UnknownProducerId,
            Self::ProducerIdZero => ErrorCode::InvalidBatch,
            Self::PartitionUnavailable { .. } => ErrorCode::StorageFailure,
            Self::OffsetNotFound(_) => ErrorCode::OffsetNotFound,
            Self::GroupNotFound(_) => ErrorCode::GroupNotFound,
            Self::GroupNotEmpty { .. } => ErrorCode::GroupNotEmpty,
            Self::OffsetOutOfRange { offset, start, .. } if offset < start => {
                ErrorCode::OffsetBeforeStart
            }
            Self::OffsetOutOfRange { .. } => ErrorCode::OffsetBeyondEnd,
            Self::Group(e) => match e {
                crate::GroupError::NotMember(_) => ErrorCode::NotMember,
                crate::GroupError::NotAssigned { .. } => ErrorCode::NotAssigned,
                crate::GroupError::StaleGeneration { .. } => ErrorCode::StaleGeneration,
            },
            Self::ShuttingDown => ErrorCode::ShuttingDown,
            Self::Catalog { .. } | Self::Internal(_) => ErrorCode::Internal,
            Self::NotLeader { .. } => ErrorCode::NotLeader,
            Self::Unauthenticated(_) => ErrorCode::Unauthenticated,
            Self::PermissionDenied(_) => ErrorCode::PermissionDenied,
            Self::ClusterTimeout(_) => ErrorCode::Timeout,
            Self::NotInCluster(_) => ErrorCode::InvalidRequest,
            Self::Storage(e) => match e {
                StorageError::InvalidBatch(_) | StorageError::TrailingBytes { .. } => {
                    ErrorCode::InvalidBatch
                }
                StorageError::BatchTooLarge { .. } => ErrorCode::BatchTooLarge,
                StorageError::RecordTooLarge { .. } => ErrorCode::RecordTooLarge,
                StorageError::OffsetBeforeStart { .. } => ErrorCode::OffsetBeforeStart,
                StorageError::OffsetBeyondEnd { .. } => ErrorCode::OffsetBeyondEnd,
                StorageError::Closed => ErrorCode::ShuttingDown,
                // A range being sealed (a sealed one answers `RangeSealed` instead).
                StorageError::Fenced { .. } => ErrorCode::Migrating,
                StorageError::Config(_) => ErrorCode::InvalidConfig,
                StorageError::DataLoss { .. } => ErrorCode::DataLoss,
                StorageError::TimestampOutOfRange { .. } => ErrorCode::TimestampOutOfRange,
                _ => ErrorCode::StorageFailure,
            },
        }
    }

    /// The offset an error response carries: the log start or end for offset errors,
    /// where reading resumes after a damaged range.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Self::Storage(StorageError::OffsetBeforeStart { log_start, .. }) => Some(*log_start),
            Self::Storage(StorageError::OffsetBeyondEnd { next_offset, .. }) => Some(*next_offset),
            Self::Storage(StorageError::DataLoss { to, .. }) => *to,
            Self::OffsetOutOfRange { offset, start, .. } if offset < start => Some(*start),
            Self::OffsetOutOfRange { end, .. } => Some(*end),
            _ => None,
        }
    }

    /// The leader and its client address (`NOT_LEADER`).
    pub fn leader(&self) -> (Option<u64>, Option<String>) {
        match self {
            Self::NotLeader {
                leader, address, ..
            } => (*leader, address.clone()),
            _ => (None, None),
        }
    }

    /// The first offset of a damaged range (`DATA_LOSS`).
    pub fn range_start(&self) -> Option<u64> {
        match self {
            Self::Storage(StorageError::DataLoss { from, .. }) => Some(*from),
            _ => None,
        }
    }
}
