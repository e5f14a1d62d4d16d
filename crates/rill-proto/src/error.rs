use crate::ErrorCode;

/// Why bytes could not be decoded as a frame or message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The length prefix exceeds the bound; the stream cannot be resynchronized.
    #[error("frame of {bytes} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// Declared length.
        bytes: u64,
        /// The limit.
        max: u32,
    },
    /// The frame header is inconsistent and names no usable correlation id.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// The frame header is inconsistent.
    #[error("malformed frame {correlation_id}: {reason}")]
    MalformedFrame {
        /// Correlation id of the frame, for the error reply.
        correlation_id: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The request kind is not known to this build.
    #[error("unknown request kind {kind}")]
    UnknownKind {
        /// The kind number.
        kind: u16,
        /// Correlation id of the frame, for the error reply.
        correlation_id: u64,
    },
    /// The frame's protocol version is not spoken here.
    #[error("unsupported protocol version {version}")]
    UnsupportedVersion {
        /// The version in the frame.
        version: u8,
        /// Correlation id of the frame, for the error reply.
        correlation_id: u64,
    },
    /// The control message is not valid protobuf for its kind.
    #[error("invalid control message{}: {reason}", correlation_id.map(|c| format!(" in frame {c}")).unwrap_or_default())]
    Decode {
        /// Correlation id of the frame, when known.
        correlation_id: Option<u64>,
        /// The decoder's message.
        reason: String,
    },
    /// A field of a decoded message holds a value its protobuf type allows but the
    /// protocol does not: an `InitProducerResponse.producer_epoch` above 65535 (record
    /// batches carry the epoch in 16 bits, docs/PROTOCOL.md §3.9). The frame is well
    /// formed, so only the request it answers fails.
    #[error("{field} = {value} in frame {correlation_id} is above its limit {max}")]
    OutOfRange {
        /// Correlation id of the frame.
        correlation_id: u64,
        /// The message and field, as `Message.field`.
        field: &'static str,
        /// The value received.
        value: u64,
        /// The largest value the protocol allows.
        max: u64,
    },
}

impl From<prost::DecodeError> for ProtoError {
    fn from(e: prost::DecodeError) -> Self {
        Self::Decode {
            correlation_id: None,
            reason: e.to_string(),
        }
    }
}

impl ProtoError {
    pub(crate) fn at(self, correlation_id: u64) -> Self {
        match self {
            Self::Decode { reason, .. } => Self::Decode {
                correlation_id: Some(correlation_id),
                reason,
            },
            other => other,
        }
    }

    /// The correlation id to answer, if the frame named one.
    pub fn correlation_id(&self) -> Option<u64> {
        match self {
            Self::FrameTooLarge { .. } | Self::Malformed(_) => None,
            Self::MalformedFrame { correlation_id, .. }
            | Self::UnknownKind { correlation_id, .. }
            | Self::UnsupportedVersion { correlation_id, .. }
            | Self::OutOfRange { correlation_id, .. } => Some(*correlation_id),
            Self::Decode { correlation_id, .. } => *correlation_id,
        }
    }

    /// The error code to reply with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            Self::UnknownKind { .. } => ErrorCode::UnknownKind,
            Self::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            Self::Malformed(_)
            | Self::MalformedFrame { .. }
            | Self::Decode { .. }
            | Self::OutOfRange { .. } => ErrorCode::InvalidRequest,
        }
    }

    /// Whether the connection can go on after replying: false when the byte stream
    /// itself is no longer trustworthy.
    pub fn is_recoverable(&self) -> bool {
        matches!(
            self,
            Self::UnknownKind { .. }
                | Self::UnsupportedVersion { .. }
                | Self::Decode { .. }
                | Self::OutOfRange { .. }
        )
    }
}
