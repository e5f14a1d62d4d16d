//! The protocol's error codes as the SDK's own type (`docs/PROTOCOL.md` §5).

use std::fmt;

/// A broker's error code (`docs/PROTOCOL.md` §5); carried by [`ClientError::Server`]
/// and returned by [`ClientError::code`].
///
/// [`ClientError::Server`]: crate::ClientError::Server
/// [`ClientError::code`]: crate::ClientError::code
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `ERROR_CODE_UNSPECIFIED` (0): Never sent on purpose: an answer without a code.
    Unspecified,
    /// `INTERNAL` (1): A broker-side bug or catalog I/O failure.
    Internal,
    /// `INVALID_REQUEST` (2): A malformed frame or control message.
    InvalidRequest,
    /// `UNKNOWN_KIND` (3): The server does not know this request kind (it is older).
    UnknownKind,
    /// `UNSUPPORTED_VERSION` (4): The frame's protocol version is not spoken.
    UnsupportedVersion,
    /// `FRAME_TOO_LARGE` (5): A frame over the server's `max_frame_bytes`.
    FrameTooLarge,
    /// `INVALID_NAME` (6): A stream, topic, group, member or consumer name breaks the name rules.
    InvalidName,
    /// `STREAM_NOT_FOUND` (7): No such stream.
    StreamNotFound,
    /// `TOPIC_NOT_FOUND` (8): No such topic.
    TopicNotFound,
    /// `PARTITION_NOT_FOUND` (9): The partition is not below the topic's partition count.
    PartitionNotFound,
    /// `STREAM_EXISTS` (10): The stream exists.
    StreamExists,
    /// `TOPIC_EXISTS` (11): The topic exists (or exists with other options).
    TopicExists,
    /// `INVALID_BATCH` (12): The payload is not exactly one valid batch.
    InvalidBatch,
    /// `BATCH_TOO_LARGE` (13): A batch over the server's `max_batch_bytes`.
    BatchTooLarge,
    /// `RECORD_TOO_LARGE` (14): A record over the topic's `max_record_bytes`.
    RecordTooLarge,
    /// `OFFSET_BEFORE_START` (15): An offset below the log start (retention deleted it).
    OffsetBeforeStart,
    /// `OFFSET_BEYOND_END` (16): An offset beyond the log end.
    OffsetBeyondEnd,
    /// `OUT_OF_ORDER_SEQUENCE` (17): An idempotent batch neither next nor a recent duplicate.
    OutOfOrderSequence,
    /// `PRODUCER_FENCED` (18): A higher epoch of this producer id exists in the partition.
    ProducerFenced,
    /// `STORAGE_FAILURE` (19): Disk I/O failed, or the partition is failed or damaged.
    StorageFailure,
    /// `TIMEOUT` (20): Reserved: not sent by this server version.
    Timeout,
    /// `NOT_OWNER` (21): Reserved for clustering: the partition is led elsewhere.
    NotOwner,
    /// `REBALANCING` (22): Reserved for consumer groups.
    Rebalancing,
    /// `MIGRATING` (23): Reserved for clustering: a key range is moving.
    Migrating,
    /// `BUSY` (24): The server is at its connection or descriptor limit.
    Busy,
    /// `INVALID_CONFIG` (25): Topic options out of range.
    InvalidConfig,
    /// `OFFSET_NOT_FOUND` (26): Reserved: not sent.
    OffsetNotFound,
    /// `SHUTTING_DOWN` (27): The server is stopping, or the partition closed under the request.
    ShuttingDown,
    /// `GROUP_NOT_FOUND` (28): The group does not exist.
    GroupNotFound,
    /// `NOT_MEMBER` (29): The member is not in the group (it left, or its session expired).
    NotMember,
    /// `STALE_GENERATION` (30): A group request from an earlier session of the member.
    StaleGeneration,
    /// `NOT_ASSIGNED` (31): The member does not own the partition now.
    NotAssigned,
    /// `UNKNOWN_PRODUCER_ID` (32): The partition has no state for this idempotent producer.
    UnknownProducerId,
    /// `TIMESTAMP_OUT_OF_RANGE` (33): The batch's timestamps reach too far beyond the broker's clock.
    TimestampOutOfRange,
    /// `DATA_LOSS` (34): The offsets asked for are in a damaged range.
    DataLoss,
    /// `GROUP_NOT_EMPTY` (35): An admin request that needs a group without live members.
    GroupNotEmpty,
    /// `NOT_LEADER` (36): In a cluster, this node does not lead the partition; the error
    /// names the leader when the node knows it.
    NotLeader,
    /// `UNAUTHENTICATED` (37): The server requires authentication and the connection has
    /// none, an authentication step failed, or the credential no longer holds.
    Unauthenticated,
    /// `PERMISSION_DENIED` (38): The authenticated user lacks a permission the request
    /// needs.
    PermissionDenied,
    /// A code this version of the SDK does not know (a newer server): its number.
    Unknown(i32),
}

impl ErrorCode {
    /// The code of wire number `code`.
    pub fn from_wire(code: i32) -> Self {
        match code {
            0 => Self::Unspecified,
            1 => Self::Internal,
            2 => Self::InvalidRequest,
            3 => Self::UnknownKind,
            4 => Self::UnsupportedVersion,
            5 => Self::FrameTooLarge,
            6 => Self::InvalidName,
            7 => Self::StreamNotFound,
            8 => Self::TopicNotFound,
            9 => Self::PartitionNotFound,
            10 => Self::StreamExists,
            11 => Self::TopicExists,
            12 => Self::InvalidBatch,
            13 => Self::BatchTooLarge,
            14 => Self::RecordTooLarge,
            15 => Self::OffsetBeforeStart,
            16 => Self::OffsetBeyondEnd,
            17 => Self::OutOfOrderSequence,
            18 => Self::ProducerFenced,
            19 => Self::StorageFailure,
            20 => Self::Timeout,
            21 => Self::NotOwner,
            22 => Self::Rebalancing,
            23 => Self::Migrating,
            24 => Self::Busy,
            25 => Self::InvalidConfig,
            26 => Self::OffsetNotFound,
            27 => Self::ShuttingDown,
            28 => Self::GroupNotFound,
            29 => Self::NotMember,
            30 => Self::StaleGeneration,
            31 => Self::NotAssigned,
            32 => Self::UnknownProducerId,
            33 => Self::TimestampOutOfRange,
            34 => Self::DataLoss,
            35 => Self::GroupNotEmpty,
            36 => Self::NotLeader,
            37 => Self::Unauthenticated,
            38 => Self::PermissionDenied,
            other => Self::Unknown(other),
        }
    }

    /// The wire number.
    pub fn wire(self) -> i32 {
        match self {
            Self::Unspecified => 0,
            Self::Internal => 1,
            Self::InvalidRequest => 2,
            Self::UnknownKind => 3,
            Self::UnsupportedVersion => 4,
            Self::FrameTooLarge => 5,
            Self::InvalidName => 6,
            Self::StreamNotFound => 7,
            Self::TopicNotFound => 8,
            Self::PartitionNotFound => 9,
            Self::StreamExists => 10,
            Self::TopicExists => 11,
            Self::InvalidBatch => 12,
            Self::BatchTooLarge => 13,
            Self::RecordTooLarge => 14,
            Self::OffsetBeforeStart => 15,
            Self::OffsetBeyondEnd => 16,
            Self::OutOfOrderSequence => 17,
            Self::ProducerFenced => 18,
            Self::StorageFailure => 19,
            Self::Timeout => 20,
            Self::NotOwner => 21,
            Self::Rebalancing => 22,
            Self::Migrating => 23,
            Self::Busy => 24,
            Self::InvalidConfig => 25,
            Self::OffsetNotFound => 26,
            Self::ShuttingDown => 27,
            Self::GroupNotFound => 28,
            Self::NotMember => 29,
            Self::StaleGeneration => 30,
            Self::NotAssigned => 31,
            Self::UnknownProducerId => 32,
            Self::TimestampOutOfRange => 33,
            Self::DataLoss => 34,
            Self::GroupNotEmpty => 35,
            Self::NotLeader => 36,
            Self::Unauthenticated => 37,
            Self::PermissionDenied => 38,
            Self::Unknown(code) => code,
        }
    }

    /// The name PROTOCOL.md gives it (`TOPIC_NOT_FOUND`); `UNKNOWN` for an unknown code.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unspecified => "ERROR_CODE_UNSPECIFIED",
            Self::Internal => "INTERNAL",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::UnknownKind => "UNKNOWN_KIND",
            Self::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Self::FrameTooLarge => "FRAME_TOO_LARGE",
            Self::InvalidName => "INVALID_NAME",
            Self::StreamNotFound => "STREAM_NOT_FOUND",
            Self::TopicNotFound => "TOPIC_NOT_FOUND",
            Self::PartitionNotFound => "PARTITION_NOT_FOUND",
            Self::StreamExists => "STREAM_EXISTS",
            Self::TopicExists => "TOPIC_EXISTS",
            Self::InvalidBatch => "INVALID_BATCH",
            Self::BatchTooLarge => "BATCH_TOO_LARGE",
            Self::RecordTooLarge => "RECORD_TOO_LARGE",
            Self::OffsetBeforeStart => "OFFSET_BEFORE_START",
            Self::OffsetBeyondEnd => "OFFSET_BEYOND_END",
            Self::OutOfOrderSequence => "OUT_OF_ORDER_SEQUENCE",
            Self::ProducerFenced => "PRODUCER_FENCED",
            Self::StorageFailure => "STORAGE_FAILURE",
            Self::Timeout => "TIMEOUT",
            Self::NotOwner => "NOT_OWNER",
            Self::Rebalancing => "REBALANCING",
            Self::Migrating => "MIGRATING",
            Self::Busy => "BUSY",
            Self::InvalidConfig => "INVALID_CONFIG",
            Self::OffsetNotFound => "OFFSET_NOT_FOUND",
            Self::ShuttingDown => "SHUTTING_DOWN",
            Self::GroupNotFound => "GROUP_NOT_FOUND",
            Self::NotMember => "NOT_MEMBER",
            Self::StaleGeneration => "STALE_GENERATION",
            Self::NotAssigned => "NOT_ASSIGNED",
            Self::UnknownProducerId => "UNKNOWN_PRODUCER_ID",
            Self::TimestampOutOfRange => "TIMESTAMP_OUT_OF_RANGE",
            Self::DataLoss => "DATA_LOSS",
            Self::GroupNotEmpty => "GROUP_NOT_EMPTY",
            Self::NotLeader => "NOT_LEADER",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::Unknown(_) => "UNKNOWN",
        }
    }

    /// Whether the same request may succeed later (PROTOCOL.md §5: codes 20–24, 27 and 36);
    /// the client retries these with back-off.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Self::Timeout
                | Self::NotOwner
                | Self::NotLeader
                | Self::Rebalancing
                | Self::Migrating
                | Self::Busy
                | Self::ShuttingDown
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(code) => write!(f, "UNKNOWN({code})"),
            known => f.write_str(known.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every wire code of the protocol maps to the variant of the same name and back;
    /// a code added to rill.proto without a variant here fails.
    #[test]
    fn every_wire_code_round_trips() {
        for n in 0..=200 {
            let ours = ErrorCode::from_wire(n);
            assert_eq!(ours.wire(), n);
            match rill_proto::ErrorCode::try_from(n) {
                Ok(wire) => {
                    assert_eq!(ours.name(), wire.as_str_name(), "{n}");
                    assert_eq!(ours.is_transient(), wire.is_transient(), "{n}");
                }
                Err(_) => assert_eq!(ours, ErrorCode::Unknown(n)),
            }
        }
        assert_eq!(ErrorCode::from_wire(-1), ErrorCode::Unknown(-1));
        assert_eq!(ErrorCode::TopicNotFound.to_string(), "TOPIC_NOT_FOUND");
        assert_eq!(ErrorCode::Unknown(99).to_string(), "UNKNOWN(99)");
    }
}
