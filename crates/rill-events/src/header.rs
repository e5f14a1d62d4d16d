//! The record headers of events, retry records and dead letters (docs/EVENTS.md §2).
//! Fixed layouts, little-endian, each with a version byte; a decoder refuses every
//! length, version or byte value it does not know rather than guess.

use crate::{Algebra, BodyCodec, Ordering};

/// The header of every event record: a 16-byte `bytes` value.
pub const EVENT_HEADER: &str = "rill.ev";
/// The header of retry records and dead letters: a 48-byte `bytes` value.
pub const RETRY_HEADER: &str = "rill.retry";
/// The last error's text on retry records and dead letters: a `str` value.
pub const ERROR_HEADER: &str = "rill.error";
/// Why a dead letter is one: a `u8` value.
pub const DLQ_HEADER: &str = "rill.dlq";
/// The longest `rill.error` text kept, in bytes.
pub const ERROR_TEXT_BYTES_MAX: usize = 1024;

const VERSION: u8 = 1;
const EVENT_LEN: usize = 16;
const RETRY_LEN: usize = 48;

/// A header that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The header is missing.
    #[error("no `{0}` header")]
    Missing(&'static str),
    /// The header is not a `bytes` value.
    #[error("`{0}` is not a bytes value")]
    NotBytes(&'static str),
    /// The value has another length than its version's.
    #[error("`{header}` holds {len} bytes, not {expected}")]
    Length {
        /// The header.
        header: &'static str,
        /// Its length.
        len: usize,
        /// The length of version 1.
        expected: usize,
    },
    /// A version this build does not know (a newer publisher).
    #[error("`{header}` has version {version}; this consumer reads version 1")]
    Version {
        /// The header.
        header: &'static str,
        /// The version byte.
        version: u8,
    },
    /// A field holds a value outside its range.
    #[error("`{header}` field {field} holds {value}, which means nothing")]
    Field {
        /// The header.
        header: &'static str,
        /// The field.
        field: &'static str,
        /// Its byte.
        value: u8,
    },
    /// The key hash is not that of the record's key.
    #[error("the key hash {stated:#018x} is not that of the record's key ({actual:#018x})")]
    KeyHash {
        /// The header's.
        stated: u64,
        /// `xxh3_64` of the record key.
        actual: u64,
    },
}

/// The `rill.ev` header of an event record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHeader {
    /// The event type's tag.
    pub tag: u32,
    /// `xxh3_64` of the record key.
    pub key_hash: u64,
    /// The event's ordering.
    pub ordering: Ordering,
    /// The type's algebra.
    pub algebra: Algebra,
    /// The body's codec.
    pub codec: BodyCodec,
}

impl EventHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; EVENT_LEN] {
        let mut b = [0u8; EVENT_LEN];
        b[0] = VERSION;
        b[1..5].copy_from_slice(&self.tag.to_le_bytes());
        b[5..13].copy_from_slice(&self.key_hash.to_le_bytes());
        b[13] = self.ordering.to_byte();
        b[14] = self.algebra.to_byte();
        b[15] = self.codec.to_byte();
        b
    }

    /// Reads the header's bytes.
    pub fn decode(b: &[u8]) -> Result<Self, HeaderError> {
        check_frame(EVENT_HEADER, b, EVENT_LEN)?;
        let field = |field, value| HeaderError::Field {
            header: EVENT_HEADER,
            field,
            value,
        };
        Ok(Self {
            tag: u32::from_le_bytes(b[1..5].try_into().expect("4 bytes")),
            key_hash: u64::from_le_bytes(b[5..13].try_into().expect("8 bytes")),
            ordering: Ordering::from_byte(b[13]).ok_or_else(|| field("ordering", b[13]))?,
            algebra: Algebra::from_byte(b[14]).ok_or_else(|| field("algebra", b[14]))?,
            codec: BodyCodec::from_byte(b[15]).ok_or_else(|| field("codec", b[15]))?,
        })
    }
}

fn check_frame(header: &'static str, b: &[u8], expected: usize) -> Result<(), HeaderError> {
    match b.first() {
        None => Err(HeaderError::Length {
            header,
            len: 0,
            expected,
        }),
        Some(&version) if version != VERSION => Err(HeaderError::Version { header, version }),
        Some(_) if b.len() != expected => Err(HeaderError::Length {
            header,
            len: b.len(),
            expected,
        }),
        Some(_) => Ok(()),
    }
}

/// What a retry record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryKind {
    /// Pending work of its key.
    Work,
    /// Closes its key's pending work below its own offset (empty value).
    Done,
}

/// The class of the last error a retry record or dead letter met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// None yet (work waiting behind a quarantine).
    None,
    /// Transient past `transient_max`, escalated.
    Transient,
    /// Retryable.
    Retryable,
    /// Unrecoverable.
    Unrecoverable,
    /// The record could not be decoded or handled at all.
    Undecodable,
}

impl ErrorClass {
    const ALL: [Self; 5] = [
        Self::None,
        Self::Transient,
        Self::Retryable,
        Self::Unrecoverable,
        Self::Undecodable,
    ];

    fn to_byte(self) -> u8 {
        Self::ALL.iter().position(|c| *c == self).expect("listed") as u8
    }
}

/// Why a record is a dead letter (the `rill.dlq` byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// The handler said it can never succeed.
    Unrecoverable,
    /// Every retry attempt failed.
    RetriesExhausted,
    /// `rill.ev` is missing or does not decode, or the record has no key.
    BadHeader,
    /// The body does not decode as the type's body.
    UndecodableBody,
    /// No handler of the consumer takes the tag, and it dead-letters such records
    /// (`Unhandled::DeadLetter`).
    UnknownTag,
    /// The header's algebra is not the registered type's.
    AlgebraMismatch,
    /// A marker: the dead letter at the offset in the value was replayed.
    Replayed,
}

impl DeadLetterReason {
    const ALL: [Self; 7] = [
        Self::Unrecoverable,
        Self::RetriesExhausted,
        Self::BadHeader,
        Self::UndecodableBody,
        Self::UnknownTag,
        Self::AlgebraMismatch,
        Self::Replayed,
    ];

    /// The wire byte (1 to 7).
    pub fn to_byte(self) -> u8 {
        Self::ALL.iter().position(|r| *r == self).expect("listed") as u8 + 1
    }

    /// The reason of a wire byte, if it is one.
    pub fn from_byte(b: u8) -> Option<Self> {
        Self::ALL.get(usize::from(b.checked_sub(1)?)).copied()
    }

    /// A short name, for listings.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unrecoverable => "unrecoverable",
            Self::RetriesExhausted => "retries-exhausted",
            Self::BadHeader => "bad-header",
            Self::UndecodableBody => "undecodable-body",
            Self::UnknownTag => "unknown-tag",
            Self::AlgebraMismatch => "algebra-mismatch",
            Self::Replayed => "replayed",
        }
    }
}

/// The `rill.retry` header of retry records and dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryHeader {
    /// Work or a done marker.
    pub kind: RetryKind,
    /// Failed attempts of the key so far (0: never tried).
    pub attempt: u32,
    /// The first failure, µs since the epoch (0 if none).
    pub first_failure_us: i64,
    /// The last failure, µs since the epoch (0 if none).
    pub last_failure_us: i64,
    /// The class of the last error.
    pub last_error: ErrorClass,
    /// The main topic's partition the record came from.
    pub source_partition: u32,
    /// The lowest main offset it stands for.
    pub source_first: u64,
    /// The highest main offset it stands for.
    pub source_last: u64,
}

impl RetryHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; RETRY_LEN] {
        let mut b = [0u8; RETRY_LEN];
        b[0] = VERSION;
        b[1] = match self.kind {
            RetryKind::Work => 0,
            RetryKind::Done => 1,
        };
        b[2..6].copy_from_slice(&self.attempt.to_le_bytes());
        b[6..14].copy_from_slice(&self.first_failure_us.to_le_bytes());
        b[14..22].copy_from_slice(&self.last_failure_us.to_le_bytes());
        b[22] = self.last_error.to_byte();
        b[23..27].copy_from_slice(&self.source_partition.to_le_bytes());
        b[27..35].copy_from_slice(&self.source_first.to_le_bytes());
        b[35..43].copy_from_slice(&self.source_last.to_le_bytes());
        b
    }

    /// Reads the header's bytes.
    pub fn decode(b: &[u8]) -> Result<Self, HeaderError> {
        check_frame(RETRY_HEADER, b, RETRY_LEN)?;
        let field = |field, value| HeaderError::Field {
            header: RETRY_HEADER,
            field,
            value,
        };
        let kind = match b[1] {
            0 => RetryKind::Work,
            1 => RetryKind::Done,
            v => return Err(field("kind", v)),
        };
        let last_error = *ErrorClass::ALL
            .get(usize::from(b[22]))
            .ok_or_else(|| field("last error class", b[22]))?;
        if let Some(&v) = b[43..].iter().find(|&&v| v != 0) {
            return Err(field("reserved", v));
        }
        let source_first = u64::from_le_bytes(b[27..35].try_into().expect("8 bytes"));
        let source_last = u64::from_le_bytes(b[35..43].try_into().expect("8 bytes"));
        if source_last < source_first {
            return Err(field("source last offset", 0));
        }
        Ok(Self {
            kind,
            attempt: u32::from_le_bytes(b[2..6].try_into().expect("4 bytes")),
            first_failure_us: i64::from_le_bytes(b[6..14].try_into().expect("8 bytes")),
            last_failure_us: i64::from_le_bytes(b[14..22].try_into().expect("8 bytes")),
            last_error,
            source_partition: u32::from_le_bytes(b[23..27].try_into().expect("4 bytes")),
            source_first,
            source_last,
        })
    }
}

/// `text` cut to at most [`ERROR_TEXT_BYTES_MAX`] bytes, at a character boundary.
pub fn error_text(text: &str) -> &str {
    if text.len() <= ERROR_TEXT_BYTES_MAX {
        return text;
    }
    let mut end = ERROR_TEXT_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
