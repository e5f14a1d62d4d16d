//! Options of one partition log, with their defaults and validation.

use std::time::Duration;

use crate::ConfigError;

pub use rill_format::Durability;

/// Options of a partition log.
///
/// Build one with struct-update syntax: `LogConfig { durability: Durability::Never,
/// ..LogConfig::default() }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll to a new segment before one would grow past this (default 1 GiB, at most
    /// `u32::MAX`).
    pub segment_bytes_max: u64,
    /// Roll a non-empty segment whose first batch is older than this (default 7 days).
    pub segment_age_max: Option<Duration>,
    /// Bytes of log between two sparse index entries (default 4 KiB).
    pub index_interval_bytes: u64,
    /// The durability policy (default [`Durability::Always`]).
    pub durability: Durability,
    /// Delete sealed segments whose newest record is older than this (default none).
    pub retention_age: Option<Duration>,
    /// Delete the oldest sealed segments while the log is larger than this (default none).
    pub retention_bytes: Option<u64>,
    /// Largest batch accepted by `append` (default 16 MiB).
    pub batch_bytes_max: u32,
    /// Largest single record accepted by `append` (default 1 MiB).
    pub record_bytes_max: u32,
    /// Offset of the first record of a new, empty log (default 0).
    pub initial_offset: u64,
    /// How far ahead of the broker's clock a batch's record timestamps may reach
    /// (default 1 hour; like Kafka's `log.message.timestamp.after.max.ms`). Record
    /// timestamps are the append time plus the producer's deltas; without a bound a
    /// producer could push the partition's clock (which never goes back) years ahead.
    pub timestamp_ahead_max: Duration,
    /// How much of the newest data the log leaves in the page cache when memory is
    /// short ([`MemoryWatch`](crate::MemoryWatch)): older data, once written back, is
    /// dropped from it then (`posix_fadvise(DONTNEED)`, by the broker's flusher, a few
    /// MiB at a time). `None` leaves the cache to the kernel. Default 2 GiB: readers
    /// near the head (nearly all of them) read from memory, and a log that ingests for
    /// hours does not leave every later write waiting for the kernel to reclaim a page
    /// (0.3 against 1.2 GB/s sustained here). While memory is short the flusher also
    /// starts writeback of each new MiB (write-behind), so what it drops is clean. While
    /// memory is ample nothing is dropped, so a reader catching up reads from memory
    /// what is still there, and a `never` log's writeback is left to the kernel.
    pub cache_tail_bytes: Option<u64>,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes_max: 1 << 30,
            segment_age_max: Some(Duration::from_secs(7 * 24 * 3600)),
            index_interval_bytes: 4096,
            durability: Durability::Always,
            retention_age: None,
            retention_bytes: None,
            batch_bytes_max: 16 << 20,
            record_bytes_max: 1 << 20,
            initial_offset: 0,
            timestamp_ahead_max: Duration::from_secs(3600),
            cache_tail_bytes: Some(2 << 30),
        }
    }
}

impl LogConfig {
    /// Checks that every option is in range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.segment_bytes_max < 1024 || self.segment_bytes_max > u64::from(u32::MAX) {
            return Err(ConfigError::SegmentBytes(self.segment_bytes_max));
        }
        if self.index_interval_bytes == 0 {
            return Err(ConfigError::IndexInterval);
        }
        if let Durability::Interval(d) = self.durability
            && d.is_zero()
        {
            return Err(ConfigError::ZeroInterval);
        }
        if matches!(self.segment_age_max, Some(d) if d.is_zero())
            || matches!(self.retention_age, Some(d) if d.is_zero())
        {
            return Err(ConfigError::ZeroAge);
        }
        if self.batch_bytes_max < rill_format::BATCH_HEADER_LEN as u32 {
            return Err(ConfigError::BatchBytes(self.batch_bytes_max));
        }
        if self.record_bytes_max == 0 {
            return Err(ConfigError::RecordBytes);
        }
        if self.timestamp_ahead_max.is_zero()
            || i64::try_from(self.timestamp_ahead_max.as_micros()).is_err()
        {
            return Err(ConfigError::TimestampAhead);
        }
        Ok(())
    }
}
