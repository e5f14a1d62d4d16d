use rill_proto::ErrorCode;

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
    /// The connection broke after a request was sent that is not safe to repeat
    /// (a non-idempotent publish): it may or may not have been applied.
    #[error(
        "connection lost with a non-idempotent request in flight; it may have been applied: {0}"
    )]
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
    /// A stored record batch is invalid (corrupt data or a broken server).
    #[error("invalid batch from the server: {0}")]
    InvalidBatch(#[from] rill_format::FormatError),
    /// No record arrived within the time given to `next_within`.
    #[error("no record within {0:?}")]
    Timeout(std::time::Duration),
    /// The embedded broker failed to open.
    #[error("embedded broker: {0}")]
    Embedded(#[from] rill_broker::BrokerError),
    /// The client, producer or consumer was shut down.
    #[error("shut down")]
    Shutdown,
    /// The background producer's buffer is full (with `Backpressure::Fail`, or after
    /// `Backpressure::BlockFor` waited in vain).
    #[error("the producer buffer is full")]
    BufferFull,
    /// A background send failed; the error is reported on the next call.
    #[error("a background send failed: {0}")]
    Background(String),
}

impl ClientError {
    /// The server's error code, if this is a server error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Server { code, .. } => Some(*code),
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

    pub(crate) fn from_response(error: rill_proto::pb::ErrorResponse) -> Self {
        Self::Server {
            code: ErrorCode::try_from(error.code).unwrap_or(ErrorCode::Unspecified),
            message: error.message,
            offset: error.offset,
        }
    }
}
