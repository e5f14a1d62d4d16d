use std::fmt;

/// Why a batch was rejected by the parser or the builder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The buffer ends before the batch does.
    #[error("truncated batch: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes the batch needs.
        needed: usize,
        /// Bytes the buffer holds.
        available: usize,
    },
    /// `batch_length` is smaller than the fixed header.
    #[error("batch length {0} is below the 64-byte header")]
    LengthTooSmall(u32),
    /// The header checksum does not match: the length, offset or timestamps are corrupt.
    #[error("header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderCrc {
        /// The CRC stored in the batch.
        stored: u32,
        /// The CRC of the bytes as found.
        computed: u32,
    },
    /// The body checksum does not match: records or producer fields are corrupt.
    #[error("body CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BodyCrc {
        /// The CRC stored in the batch.
        stored: u32,
        /// The CRC of the bytes as found.
        computed: u32,
    },
    /// The batch was written by a format version this build does not know.
    #[error("unsupported batch magic {0} (this build reads magic 1)")]
    UnsupportedMagic(u8),
    /// A reserved byte or attribute bit is set.
    #[error("reserved header bits are set")]
    ReservedBitsSet,
    /// The records use a compression codec this build does not implement.
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(u8),
    /// A batch must hold at least one record.
    #[error("batch holds no records")]
    Empty,
    /// A record is malformed.
    #[error("record {index}: {reason}")]
    Record {
        /// Index of the record in the batch.
        index: u32,
        /// What is wrong with it.
        reason: RecordError,
    },
    /// Bytes remain after the declared records, or the records overrun the batch.
    #[error("batch declares {declared} records but its bytes hold a different layout")]
    CountMismatch {
        /// `record_count` from the header.
        declared: u32,
    },
    /// The header timestamps disagree with the records' deltas.
    #[error(
        "timestamp span mismatch: max - first = {header_span} but the largest delta is {records_span}"
    )]
    TimestampSpan {
        /// `max_timestamp_us - first_timestamp_us` as stored.
        header_span: i128,
        /// Largest record `timestamp_delta`.
        records_span: u64,
    },
    /// `base_offset + record_count` or a timestamp overflows.
    #[error("offset or timestamp arithmetic overflows")]
    Overflow,
    /// The builder was asked to finish a batch larger than `u32::MAX` bytes.
    #[error("batch of {bytes} bytes exceeds the format's 4 GiB limit")]
    TooLarge {
        /// Size the batch would have had.
        bytes: usize,
    },
}

/// What is wrong with one record of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// A field extends past the end of the record or batch.
    Overrun,
    /// A varint is longer than 10 bytes or overflows 64 bits.
    VarintOverflow,
    /// The record's fields do not fill exactly its declared length.
    LengthMismatch,
    /// The record attributes byte is not zero.
    Attributes(u8),
    /// `offset_delta` is not the record's index.
    OffsetDelta(u64),
    /// A header name is empty or longer than 255 bytes.
    HeaderNameLength(u64),
    /// A header name or string value is not UTF-8.
    Utf8,
    /// A header type byte is unknown.
    HeaderType(u8),
    /// A bool header holds a byte other than 0 or 1.
    Bool(u8),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Overrun => f.write_str("a field runs past the end of the record"),
            Self::VarintOverflow => f.write_str("a varint overflows 64 bits"),
            Self::LengthMismatch => f.write_str("fields do not fill the declared record length"),
            Self::Attributes(b) => write!(f, "reserved record attributes {b:#04x} are set"),
            Self::OffsetDelta(d) => write!(f, "offset delta {d} is not the record's index"),
            Self::HeaderNameLength(n) => write!(f, "header name length {n} is not in 1..=255"),
            Self::Utf8 => f.write_str("header name or string value is not UTF-8"),
            Self::HeaderType(t) => write!(f, "unknown header type {t}"),
            Self::Bool(b) => write!(f, "bool header holds {b}, not 0 or 1"),
        }
    }
}

impl std::error::Error for RecordError {}
