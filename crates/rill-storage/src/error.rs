use std::io;
use std::path::PathBuf;

use rill_format::FormatError;

/// Errors of the log engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A write or fsync failed earlier; the log refuses appends until it is reopened,
    /// which recovers from what is really on disk. Reads still work.
    #[error("partition is poisoned after a failed {cause}; reopen it to recover")]
    Poisoned {
        /// The operation that failed first.
        cause: &'static str,
    },
    /// The batch is malformed.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] FormatError),
    /// The buffer holds bytes after the batch.
    #[error("{extra} bytes follow the batch; append takes exactly one batch")]
    TrailingBytes {
        /// Bytes after the batch.
        extra: usize,
    },
    /// The batch exceeds `batch_bytes_max`.
    #[error("batch of {bytes} bytes exceeds the limit of {max} bytes")]
    BatchTooLarge {
        /// Size of the batch.
        bytes: usize,
        /// The limit.
        max: u32,
    },
    /// A record exceeds `record_bytes_max`.
    #[error("record of {bytes} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// Size of the largest record.
        bytes: usize,
        /// The limit.
        max: u32,
    },
    /// The offset was deleted by retention or a purge; reading can resume at
    /// `log_start`.
    #[error(
        "offset {requested} is below the log start {log_start} (deleted by retention or a purge)"
    )]
    OffsetBeforeStart {
        /// The offset asked for.
        requested: u64,
        /// The first offset still stored.
        log_start: u64,
    },
    /// The offset has not been written yet.
    #[error("offset {requested} is beyond the log end {next_offset}")]
    OffsetBeyondEnd {
        /// The offset asked for.
        requested: u64,
        /// The next offset to be written.
        next_offset: u64,
    },
    /// Stored data is damaged somewhere recovery does not repair (a sealed segment).
    #[error("corrupt log at {path} position {position}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte position of the damage.
        position: u64,
        /// What was found.
        reason: String,
    },
    /// The offset is in a damaged range: its records cannot be served. Reading resumes
    /// at `to` (when known).
    #[error("records {from}..{} are lost: {reason}", to.map_or_else(|| "(end unknown)".to_owned(), |t| t.to_string()))]
    DataLoss {
        /// The first offset of the damaged range.
        from: u64,
        /// The first offset after it, if known.
        to: Option<u64>,
        /// What was found (the segment, the position, the damage).
        reason: String,
    },
    /// The log holds damaged ranges no operator accepted: it refuses appends.
    #[error(
        "partition has damaged data: {ranges}; accept the loss with `rill topic repair --accept-data-loss` once the disk is checked"
    )]
    Damaged {
        /// The damaged ranges, described.
        ranges: String,
    },
    /// A batch's timestamps reach further ahead of the broker's clock than allowed.
    #[error(
        "batch timestamps reach {max_timestamp_us} µs, more than {ahead_max_us} µs ahead of the broker's clock ({now_us} µs)"
    )]
    TimestampOutOfRange {
        /// The batch's largest timestamp as it would be stamped.
        max_timestamp_us: i64,
        /// The broker's clock.
        now_us: i64,
        /// The bound (`LogConfig::timestamp_ahead_max`).
        ahead_max_us: i64,
    },
    /// A stamped batch (a replica's append) does not continue the log: its base offset
    /// is not the log's next offset, or its first timestamp is below the previous
    /// batch's largest.
    #[error(
        "stamped batch at offset {base_offset} (first timestamp {first_timestamp_us} µs) does not continue the log at offset {next_offset} (last timestamp {last_timestamp_us:?} µs)"
    )]
    NotContiguous {
        /// The batch's base offset.
        base_offset: u64,
        /// The batch's first timestamp.
        first_timestamp_us: i64,
        /// The log's next offset.
        next_offset: u64,
        /// The largest timestamp in the log, if any.
        last_timestamp_us: Option<i64>,
    },
    /// A truncation point that is not where a batch starts.
    #[error("cannot truncate at offset {offset}: no batch starts there")]
    NotBatchBoundary {
        /// The offset asked for.
        offset: u64,
    },
    /// The options are out of range.
    #[error("invalid log config: {0}")]
    Config(#[from] ConfigError),
    /// The log was closed.
    #[error("log is closed")]
    Closed,
    /// The log is fenced ([`crate::PartitionLog::fence`]): it takes no appends.
    #[error("log is fenced at offset {next_offset}: it takes no more appends")]
    Fenced {
        /// Where the log ends.
        next_offset: u64,
    },
}

/// An option of [`crate::LogConfig`] is out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `segment_bytes_max` must be in 1 KiB..=4 GiB-1.
    #[error("segment_bytes_max {0} must be between 1024 and 4294967295")]
    SegmentBytes(u64),
    /// `index_interval_bytes` must be positive.
    #[error("index_interval_bytes must be positive")]
    IndexInterval,
    /// A sync interval must be positive.
    #[error("durability interval must be positive")]
    ZeroInterval,
    /// Ages must be positive.
    #[error("segment and retention ages must be positive")]
    ZeroAge,
    /// `batch_bytes_max` must hold at least a batch header.
    #[error("batch_bytes_max {0} is below the 64-byte batch header")]
    BatchBytes(u32),
    /// `record_bytes_max` must be positive.
    #[error("record_bytes_max must be positive")]
    RecordBytes,
    /// `timestamp_ahead_max` must be positive and fit in i64 µs.
    #[error("timestamp_ahead_max must be positive (and below 292,000 years)")]
    TimestampAhead,
}

/// Wraps an OS error with what was being done to which file.
pub(crate) fn io_err(
    op: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(io::Error) -> StorageError + use<> {
    let path = path.to_path_buf();
    move |source| StorageError::Io { op, path, source }
}
