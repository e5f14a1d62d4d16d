use crate::ErrorCode;

/// Errors of the Rill client. Each says what the caller can do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an error code.
    #[error("{code:?}: {message}")]
    Server {
        /// The wire error code.
        code: ErrorCode,
        /// The server's explanation.
        message: String,
        /// For offset errors: the log start (below start) or end (beyond end).
        offset: Option<u64>,
    },
    /// The connection failed and the retry budget is spent.
    #[error("connection to {addr} failed: {reason}")]
    Connection {
        /// The server address.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// A write's outcome is unknown and it is not safe to send again: the connection
    /// broke after a non-idempotent publish was sent, or the broker forgot an
    /// idempotent producer while one of its batches had an attempt without an answer.
    /// The records may or may not be stored; read the partition to find out.
    #[error("the outcome of a write is unknown (it may have been stored): {0}")]
    Indeterminate(String),
    /// The server sent something that is not valid protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The URL is not `rill://HOST:PORT`.
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// An argument is invalid (a name, a zero duration, …); nothing was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Encoding a value failed.
    #[error("could not encode the value: {0}")]
    Encode(String),
    /// A record's value could not be decoded; reading can continue after it.
    #[error("record {partition}:{offset} could not be decoded: {reason}")]
    Decode {
        /// Partition of the record.
        partition: u32,
        /// Offset of the record.
        offset: u64,
        /// The codec's message.
        reason: String,
    },
    /// A stored record batch is invalid and not even its header can be read (a broken
    /// server or a garbled response): where it ends is unknown.
    #[error("invalid batch from the server: {0}")]
    InvalidBatch(#[from] rill_format::FormatError),
    /// The broker reports records of a partition lost: their bytes are damaged or
    /// missing on its disk (the damaged ranges of `Topic::describe`). Readers and
    /// consumers return this once and go on reading at `to`; nothing of the range can be
    /// read. `to` is `None` while the end of the range is unknown (damage at the end of
    /// the log, until an operator accepts it with `rill topic repair
    /// --accept-data-loss`): reading that partition then waits at `from`.
    #[error(
        "records {from}..{} of partition {partition} are lost on the server: {reason}",
        to.map_or_else(|| "(end unknown)".to_owned(), |t| t.to_string())
    )]
    DataLoss {
        /// The partition.
        partition: u32,
        /// The first offset lost.
        from: u64,
        /// The first offset after the range, where reading resumes, if known.
        to: Option<u64>,
        /// The broker's description (segment, position, damage).
        reason: String,
    },
    /// A stored batch the broker served fails its checksum or checks while its header
    /// is intact: its records `from..to` cannot be trusted and are not delivered. The
    /// broker did not know (it checks headers only when it serves), so this is damage to
    /// report to an operator. Readers and consumers return this once and go on at `to`.
    #[error(
        "records {from}..{to} of partition {partition} arrived corrupt and are skipped: {reason}"
    )]
    Corrupt {
        /// The partition.
        partition: u32,
        /// The first offset of the batch (or the one asked for, if later).
        from: u64,
        /// The offset after the batch.
        to: u64,
        /// What the check found.
        reason: String,
    },
    /// No record arrived within the time given to `next_within`.
    #[error("no record within {0:?}")]
    Timeout(std::time::Duration),
    /// The embedded broker failed to open.
    #[cfg(feature = "embedded")]
    #[error("embedded broker: {0}")]
    Embedded(#[from] rill_broker::BrokerError),
    /// The producer or consumer was shut down.
    #[error("shut down")]
    Shutdown,
    /// The client was closed ([`Client::close`](crate::Client::close)): every call made
    /// after that fails at once with this error. Open or connect a new client.
    #[error("the client was closed")]
    Closed,
    /// A panic in another task left state in doubt that later calls rely on (a
    /// producer's sequence numbers, a group member's partitions): calls that need it
    /// fail from then on instead of risking wrong results. Build a new producer or
    /// consumer.
    #[error("{what} are in doubt after a panic; create a new one")]
    Poisoned {
        /// What is in doubt.
        what: &'static str,
    },
    /// The background producer's buffer is full (with `Backpressure::Fail`, or after
    /// `Backpressure::BlockFor` waited in vain).
    #[error("the producer buffer is full")]
    BufferFull,
    /// An idempotent producer ended every one of the 65,536 epochs it has in a
    /// partition (an epoch ends when a send's outcome is unknown or the broker forgot
    /// the producer), so it cannot number new batches there without reusing an
    /// identity. Build a new producer: it gets a new producer id.
    #[error(
        "the idempotent producer used up its epochs in partition {partition}: build a new producer"
    )]
    EpochsExhausted {
        /// The partition.
        partition: u32,
    },
    /// A background send failed; the error is reported on the next call.
    #[error("a background send failed: {0}")]
    Background(String),
}

impl ClientError {
    /// The server's error code, if this is a server error (`DATA_LOSS` for
    /// [`ClientError::DataLoss`]).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Server { code, .. } => Some(*code),
            Self::DataLoss { .. } => Some(ErrorCode::DataLoss),
            _ => None,
        }
    }

    /// Whether retrying the same request later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Server { code, .. } => code.is_transient(),
            Self::Connection { .. } => true,
            _ => false,
        }
    }

    /// The records this error says could not be delivered: `(partition, from, to)` of
    /// [`ClientError::DataLoss`] and [`ClientError::Corrupt`]. Reading goes on at `to`.
    pub fn lost_range(&self) -> Option<(u32, u64, Option<u64>)> {
        match self {
            Self::DataLoss {
                partition,
                from,
                to,
                ..
            } => Some((*partition, *from, *to)),
            Self::Corrupt {
                partition,
                from,
                to,
                ..
            } => Some((*partition, *from, Some(*to))),
            _ => None,
        }
    }

    /// The error for a broker's error answer to `request`. `DATA_LOSS` to a fetch
    /// becomes [`ClientError::DataLoss`], naming the partition and the range.
    pub(crate) fn from_response(
        error: rill_proto::pb::ErrorResponse,
        request: &rill_proto::RequestBody,
    ) -> Self {
        let code = ErrorCode::from_wire(error.code);
        if let (ErrorCode::DataLoss, rill_proto::RequestBody::Fetch(fetch)) = (code, request) {
            return Self::DataLoss {
                partition: fetch.partition,
                // An older or broken answer without the start: the offset asked for is
                // in the range.
                from: error.range_start.unwrap_or(fetch.offset),
                to: error.offset,
                reason: error.message,
            };
        }
        Self::Server {
            code,
            message: error.message,
            offset: error.offset,
        }
    }
}
