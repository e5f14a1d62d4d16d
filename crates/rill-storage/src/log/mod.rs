//! The partition log: append, read, time lookup, retention, durability.
//!
//! Concurrency: appends are serialized by the writer mutex (a stamped header copy and
//! the caller's records, written back to back).
//! Reads take no writer lock: they find their segment under a short read lock on the
//! segment list and read with positional I/O, bounded by what is *visible*. Under
//! [`Durability::Always`] a batch becomes visible (and is acknowledged) only after an
//! `fdatasync` covered it, so a reader never sees a record that a power loss could
//! take back. Syncs are group commits: whichever waiting appender finds no sync in
//! progress syncs everything written so far, and every appender it covered returns.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use rill_format::{BATCH_HEADER_LEN, BatchHeader, BatchView, Batches, FormatError, stamp};

use crate::clock::{Clock, SystemClock};
use crate::config::{Durability, LogConfig};
use crate::error::io_err;
use crate::index::SegmentIndex;
use crate::io::{Io, StdIo};
use crate::recovery_point::RecoveryPoint;
use crate::segment::{IndexCadence, Scanner, Segment, entry_for, log_path};
use crate::{StorageError, recovery};

use self::sync::GroupCommit;

mod sync;

/// Bytes read at a time when locating an offset from a sparse index entry.
const LOCATE_CHUNK_BYTES: usize = 8 * 1024;

/// What [`PartitionLog::append`] assigned to a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Offset of the batch's last record.
    pub last_offset: u64,
    /// Append time stamped as the first record's timestamp, µs.
    pub timestamp_us: i64,
}

/// Names a write returned by [`PartitionLog::append_deferred`], for
/// [`PartitionLog::wait_durable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DurableTicket(u64);

impl DurableTicket {
    /// A ticket for writes that were already durable (recovered from disk).
    pub const DURABLE: Self = Self(0);
}

/// Whole stored batches returned by [`PartitionLog::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRead {
    /// Back-to-back batches exactly as stored; the first contains the requested offset
    /// (and may start before it). Empty when the reader is at the end of the log.
    pub bytes: Vec<u8>,
    /// Offset after the last returned batch: where the next read continues.
    pub next_offset: u64,
    /// First offset still stored.
    pub log_start: u64,
    /// Offset the next append will get, as visible to readers.
    pub log_end: u64,
}

impl LogRead {
    /// Iterates the returned batches.
    pub fn batches(&self) -> Batches<'_> {
        Batches::new(&self.bytes)
    }
}

/// What a retention pass deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    /// Segments deleted.
    pub segments_deleted: usize,
    /// Bytes of `.log` deleted.
    pub bytes_deleted: u64,
    /// First offset still stored after the pass.
    pub log_start: u64,
}

/// The durable, append-only log of one partition.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    io: Arc<dyn Io>,
    clock: Arc<dyn Clock>,
    /// Segments in offset order; the last is the active one.
    segments: RwLock<Vec<Arc<Segment>>>,
    log_start: AtomicU64,
    /// Offset after the last batch readers may see.
    visible_next: AtomicU64,
    writer: Mutex<Writer>,
    commit: GroupCommit,
    poison: Arc<OnceLock<&'static str>>,
    /// Sealed segments whose background sync has not finished. The recovery point only
    /// moves while this is zero: it may only name data with everything before it durable.
    seals_pending: Arc<std::sync::atomic::AtomicUsize>,
    seal_threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Write-behind under `interval`: the segment (base offset) and position up to
    /// which writeback was started.
    written_back: Mutex<(u64, u64)>,
}

#[derive(Debug)]
pub(crate) struct Writer {
    pub(crate) active: Arc<Segment>,
    /// Bytes written to the active segment (visible or not).
    pub(crate) written_len: u64,
    pub(crate) next_offset: u64,
    /// Largest timestamp stamped so far; the next batch's first timestamp is not below it.
    pub(crate) last_max_ts: Option<i64>,
    /// Append time of the active segment's first batch, for age-based rolls.
    pub(crate) segment_first_ts: Option<i64>,
    pub(crate) cadence: IndexCadence,
    /// Number of batches appended since open; identifies writes for group commit.
    pub(crate) seq: u64,
    pub(crate) closed: bool,
}

/// The last write, as a sync would cover it.
#[derive(Debug, Clone)]
struct Written {
    seq: u64,
    segment: Arc<Segment>,
    len: u64,
    next_offset: u64,
    max_ts: Option<i64>,
}

impl PartitionLog {
    /// Opens (creating or recovering) the log in `dir` on the real file system.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Self, StorageError> {
        Self::open_with(dir, config, Arc::new(StdIo), Arc::new(SystemClock))
    }

    /// Opens the log with an explicit I/O layer and clock (tests inject faults and time).
    pub fn open_with(
        dir: impl AsRef<Path>,
        config: LogConfig,
        io: Arc<dyn Io>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StorageError> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let recovered = recovery::recover(&dir, &config, io.as_ref())?;
        let log_start = recovered.segments[0].base_offset;
        let writer = recovered.writer;
        let visible_next = writer.next_offset;
        Ok(Self {
            dir,
            config,
            io,
            clock,
            segments: RwLock::new(recovered.segments),
            log_start: AtomicU64::new(log_start),
            visible_next: AtomicU64::new(visible_next),
            writer: Mutex::new(writer),
            commit: GroupCommit::default(),
            poison: Arc::new(OnceLock::new()),
            seals_pending: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            seal_threads: Mutex::new(Vec::new()),
            written_back: Mutex::new((u64::MAX, 0)),
        })
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options the log was opened with.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// First offset still stored.
    pub fn log_start(&self) -> u64 {
        self.log_start.load(Ordering::Acquire)
    }

    /// Offset the next append will get, as far as readers can see.
    pub fn next_offset(&self) -> u64 {
        self.visible_next.load(Ordering::Acquire)
    }

    /// Bytes of `.log` stored across all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments_snapshot()
            .iter()
            .map(|s| s.visible_len())
            .sum()
    }

    /// Number of segments, the active one included.
    pub fn segment_count(&self) -> usize {
        self.segments_read().len()
    }

    /// Why the log refuses appends, if it does.
    pub fn poisoned(&self) -> Option<&'static str> {
        self.poison.get().copied()
    }

    fn poison_with(&self, cause: &'static str) {
        if self.poison.set(cause).is_ok() {
            tracing::error!(dir = %self.dir.display(), cause, "partition poisoned: refusing appends until reopened");
        }
    }

    fn check_poison(&self) -> Result<(), StorageError> {
        match self.poisoned() {
            Some(cause) => Err(StorageError::Poisoned { cause }),
            None => Ok(()),
        }
    }

    fn segments_read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Segment>>> {
        self.segments.read().unwrap_or_else(|e| e.into_inner())
    }

    fn segments_snapshot(&self) -> Vec<Arc<Segment>> {
        self.segments_read().clone()
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one batch: validates it, stamps its base offset and append time, writes
    /// it, and returns once the durability policy holds.
    ///
    /// `batch` must hold exactly one batch. It is not modified: the stamped 64-byte
    /// header is written from a copy, followed by the caller's records, so a shared
    /// buffer (a decoded frame, an embedded client's retry copy) is never copied.
    /// Under [`Durability::Always`] this returns after an `fdatasync` covered the batch
    /// (shared with concurrent appends).
    pub fn append(&self, batch: &[u8]) -> Result<Appended, StorageError> {
        let (appended, ticket) = self.append_deferred(batch)?;
        self.wait_durable(ticket)?;
        Ok(appended)
    }

    /// Writes a batch like [`PartitionLog::append`] but returns before the durability
    /// policy holds: call [`PartitionLog::wait_durable`] with the ticket before
    /// acknowledging. Lets a caller hold its own lock across the write only, so
    /// concurrent appends still share one fsync.
    pub fn append_deferred(&self, batch: &[u8]) -> Result<(Appended, DurableTicket), StorageError> {
        if batch.len() > self.config.batch_bytes_max as usize {
            return Err(StorageError::BatchTooLarge {
                bytes: batch.len(),
                max: self.config.batch_bytes_max,
            });
        }
        let view = BatchView::parse(batch)?;
        if view.as_bytes().len() != batch.len() {
            return Err(StorageError::TrailingBytes {
                extra: batch.len() - view.as_bytes().len(),
            });
        }
        if view.largest_record_bytes() > self.config.record_bytes_max as usize {
            return Err(StorageError::RecordTooLarge {
                bytes: view.largest_record_bytes(),
                max: self.config.record_bytes_max,
            });
        }
        let count = u64::from(view.record_count());
        // Checked by the parser: max - first equals a non-negative delta.
        let span = view.max_timestamp_us() - view.first_timestamp_us();
        let len = batch.len() as u64;

        let (appended, seq) = {
            let mut w = self.lock_writer();
            if w.closed {
                return Err(StorageError::Closed);
            }
            self.check_poison()?;
            let now = self.clock.now_us();
            let ts = w.last_max_ts.map_or(now, |last| now.max(last));
            if self.needs_roll(&w, len, ts) {
                self.roll(&mut w)?;
            }
            let base = w.next_offset;
            let mut header = [0u8; BATCH_HEADER_LEN];
            header.copy_from_slice(&batch[..BATCH_HEADER_LEN]);
            stamp(&mut header, base, ts)?;
            let position = w.written_len;
            // The stamped header, then the records as the caller holds them. A crash
            // between the two writes leaves a torn batch, which recovery cuts.
            let written = w.active.log.write_all_at(&header, position).and_then(|()| {
                w.active.log.write_all_at(
                    &batch[BATCH_HEADER_LEN..],
                    position + BATCH_HEADER_LEN as u64,
                )
            });
            if let Err(e) = written {
                self.poison_with("write");
                return Err(io_err("write segment", &w.active.path)(e));
            }
            if w.cadence.take(position) {
                let found = crate::segment::Found {
                    position,
                    header: BatchHeader::parse(&header)?,
                };
                if let Some(entry) = entry_for(w.active.base_offset, &found) {
                    let pushed = w.active.index_mut().push(entry);
                    if let Err(e) = pushed {
                        self.poison_with("index write");
                        return Err(e);
                    }
                }
            }
            let next = base + count;
            let max_ts = ts + span;
            w.written_len += len;
            w.next_offset = next;
            w.last_max_ts = Some(max_ts);
            w.segment_first_ts.get_or_insert(ts);
            w.seq += 1;
            w.active.set_next_offset(next);
            w.active.observe_timestamp(max_ts);
            let written = Written {
                seq: w.seq,
                segment: Arc::clone(&w.active),
                len: w.written_len,
                next_offset: next,
                max_ts: w.last_max_ts,
            };
            if self.config.durability != Durability::Always {
                self.publish(&written);
            }
            let seq = written.seq;
            self.commit.lock().latest = Some(written);
            (
                Appended {
                    base_offset: base,
                    last_offset: next - 1,
                    timestamp_us: ts,
                },
                seq,
            )
        };

        Ok((appended, DurableTicket(seq)))
    }

    /// Headers of every batch in the last `segments` segments, oldest first: what a
    /// caller needs to rebuild per-producer state after a restart.
    pub fn recent_batch_headers(&self, segments: usize) -> Result<Vec<BatchHeader>, StorageError> {
        let all = self.segments_snapshot();
        let mut headers = Vec::new();
        for segment in &all[all.len().saturating_sub(segments)..] {
            let mut scanner = Scanner::new(
                segment.log.as_ref(),
                &segment.path,
                0,
                segment.visible_len(),
            );
            loop {
                match scanner.next_batch()? {
                    Ok(Some(found)) => headers.push(found.header),
                    Ok(None) => break,
                    Err(stop) => return Err(corrupt(&segment.path, scanner.position(), &stop)),
                }
            }
        }
        Ok(headers)
    }

    fn needs_roll(&self, w: &Writer, len: u64, ts: i64) -> bool {
        if w.written_len == 0 {
            return false;
        }
        if w.written_len + len > self.config.segment_bytes_max {
            return true;
        }
        match (self.config.segment_age_max, w.segment_first_ts) {
            (Some(age), Some(first)) => {
                ts.saturating_sub(first) >= i64::try_from(age.as_micros()).unwrap_or(i64::MAX)
            }
            _ => false,
        }
    }

    /// Seals the active segment (synced, whatever the policy, so a sealed segment is
    /// always complete on disk) and starts a new one at the next offset.
    fn roll(&self, w: &mut Writer) -> Result<(), StorageError> {
        let old = Arc::clone(&w.active);
        if self.config.durability == Durability::Always {
            // Under `always` the old segment is synced already but for appends still
            // waiting on their group commit: syncing it here is cheap, and is what
            // those waiters need (the next leader syncs the new segment).
            let started = std::time::Instant::now();
            let synced = old.log.sync_data();
            crate::stats::observe_fsync(started.elapsed());
            if let Err(e) = synced {
                self.poison_with("fsync");
                return Err(io_err("sync segment", &old.path)(e));
            }
            old.set_visible_len(w.written_len);
            if let Err(e) = old.index().sync() {
                // The index is a hint that recovery rebuilds; a failed index sync is
                // worth a warning, not a poisoned partition.
                tracing::warn!(error = %e, "could not sync a sealed segment's index");
            }
        } else {
            // Under `never`/`interval`, syncing up to a gigabyte here would stall every
            // append for a long time: seal in the background instead. Until that sync
            // finishes the recovery point stays behind, so a crash makes recovery
            // validate this segment too.
            old.set_visible_len(w.written_len);
            self.seal_in_background(Arc::clone(&old));
        }
        let base = w.next_offset;
        let segment = match create_segment(self.io.as_ref(), &self.dir, base) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                self.poison_with("segment roll");
                return Err(e);
            }
        };
        {
            let mut segments = self.segments.write().unwrap_or_else(|e| e.into_inner());
            segments.push(Arc::clone(&segment));
        }
        self.advance_recovery_point(RecoveryPoint {
            segment_base: base,
            position: 0,
            next_offset: base,
            max_timestamp_us: w.last_max_ts,
        });
        w.active = segment;
        w.written_len = 0;
        w.segment_first_ts = None;
        w.cadence = IndexCadence::new(self.config.index_interval_bytes, None);
        Ok(())
    }

    fn seal_in_background(&self, segment: Arc<Segment>) {
        self.seals_pending.fetch_add(1, Ordering::AcqRel);
        let pending = Arc::clone(&self.seals_pending);
        let poison = Arc::clone(&self.poison);
        let spawned = std::thread::Builder::new()
            .name("rill-seal".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let synced = segment.log.sync_data();
                crate::stats::observe_fsync(started.elapsed());
                match synced {
                    Ok(()) => {
                        if let Err(e) = segment.index().sync() {
                            tracing::warn!(error = %e, "could not sync a sealed segment's index");
                        }
                        // Only a successful seal lets the recovery point move on.
                        pending.fetch_sub(1, Ordering::AcqRel);
                    }
                    Err(e) => {
                        if poison.set("fsync").is_ok() {
                            tracing::error!(path = %segment.path.display(), error = %e, "sealing a segment failed: partition poisoned");
                        }
                    }
                }
            });
        match spawned {
            Ok(handle) => {
                let mut threads = self.seal_threads.lock().unwrap_or_else(|e| e.into_inner());
                threads.retain(|t| !t.is_finished());
                threads.push(handle);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start a sealing thread: partition poisoned");
                self.poison_with("segment seal");
            }
        }
    }

    /// Reads whole batches starting with the one that holds `from`, up to `max_bytes`
    /// (at least one batch, even if it is larger).
    pub fn read(&self, from: u64, max_bytes: usize) -> Result<LogRead, StorageError> {
        let log_end = self.next_offset();
        let log_start = self.log_start();
        if from < log_start {
            return Err(StorageError::OffsetBeforeStart {
                requested: from,
                log_start,
            });
        }
        if from > log_end {
            return Err(StorageError::OffsetBeyondEnd {
                requested: from,
                next_offset: log_end,
            });
        }
        let empty = LogRead {
            bytes: Vec::new(),
            next_offset: from,
            log_start,
            log_end,
        };
        if from == log_end {
            return Ok(empty);
        }
        let segments = self.segments_snapshot();
        let mut i = segments
            .partition_point(|s| s.base_offset <= from)
            .saturating_sub(1);
        while let Some(segment) = segments.get(i) {
            if let Some(read) = self.read_segment(segment, from, max_bytes, log_start, log_end)? {
                return Ok(read);
            }
            i += 1;
        }
        // Retention removed the segment between the checks above and the snapshot.
        let log_start = self.log_start();
        if from < log_start {
            return Err(StorageError::OffsetBeforeStart {
                requested: from,
                log_start,
            });
        }
        Ok(empty)
    }

    /// Reads from one segment, or `None` if `from` is past its visible batches.
    fn read_segment(
        &self,
        segment: &Segment,
        from: u64,
        max_bytes: usize,
        log_start: u64,
        log_end: u64,
    ) -> Result<Option<LogRead>, StorageError> {
        let visible = segment.visible_len();
        let start = segment.index_floor(from);
        let mut scanner = Scanner::new(segment.log.as_ref(), &segment.path, start, visible)
            .with_chunk(LOCATE_CHUNK_BYTES);
        let first = loop {
            match scanner.next_batch()? {
                Ok(Some(found)) => {
                    if found.header.next_offset().is_some_and(|n| n > from) {
                        break found;
                    }
                }
                Ok(None) => return Ok(None),
                Err(stop) => return Err(corrupt(&segment.path, scanner.position(), &stop)),
            }
        };
        let first_len = u64::from(first.header.batch_length);
        let want = (visible - first.position)
            .min(max_bytes as u64)
            .max(first_len);
        let mut bytes = vec![0u8; want as usize];
        segment
            .log
            .read_exact_at(&mut bytes, first.position)
            .map_err(io_err("read segment", &segment.path))?;
        // Keep whole batches only.
        let mut keep = 0usize;
        let mut next_offset = from;
        while keep < bytes.len() {
            let header = match BatchHeader::parse(&bytes[keep..]) {
                Ok(h) => h,
                Err(FormatError::Truncated { .. }) => break,
                Err(e) => {
                    return Err(StorageError::Corrupt {
                        path: segment.path.clone(),
                        position: first.position + keep as u64,
                        reason: e.to_string(),
                    });
                }
            };
            let len = header.batch_length as usize;
            if keep + len > bytes.len() {
                break;
            }
            keep += len;
            next_offset = header.next_offset().unwrap_or(u64::MAX);
        }
        bytes.truncate(keep);
        Ok(Some(LogRead {
            bytes,
            next_offset,
            log_start,
            log_end,
        }))
    }

    /// The offset of the first record whose timestamp is at or after `timestamp_us`, or
    /// `None` if every visible record is older.
    pub fn offset_for_timestamp(&self, timestamp_us: i64) -> Result<Option<u64>, StorageError> {
        let log_end = self.next_offset();
        let segments = self.segments_snapshot();
        for segment in segments
            .iter()
            .filter(|s| s.max_timestamp_us().is_some_and(|m| m >= timestamp_us))
        {
            let start = segment
                .index()
                .floor_time(timestamp_us)
                .map_or(0, |e| u64::from(e.position));
            let visible = segment.visible_len();
            let mut scanner = Scanner::new(segment.log.as_ref(), &segment.path, start, visible)
                .with_chunk(LOCATE_CHUNK_BYTES);
            loop {
                let found = match scanner.next_batch()? {
                    Ok(Some(found)) => found,
                    Ok(None) => break,
                    Err(stop) => return Err(corrupt(&segment.path, scanner.position(), &stop)),
                };
                if found.header.max_timestamp_us < timestamp_us {
                    continue;
                }
                let bytes = scanner.batch_bytes(&found)?;
                let view = BatchView::parse(bytes)
                    .map_err(|e| corrupt(&segment.path, found.position, &e))?;
                let hit = view
                    .records()
                    .find(|r| r.timestamp_us >= timestamp_us)
                    .map(|r| r.offset);
                return Ok(hit.filter(|&o| o < log_end));
            }
        }
        Ok(None)
    }

    /// Deletes sealed segments past the retention limits, oldest first. The active
    /// segment is never deleted.
    pub fn apply_retention(&self) -> Result<RetentionOutcome, StorageError> {
        let now = self.clock.now_us();
        let age_us = self
            .config
            .retention_age
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let removed: Vec<Arc<Segment>> = {
            let mut segments = self.segments.write().unwrap_or_else(|e| e.into_inner());
            let mut total: u64 = segments.iter().map(|s| s.visible_len()).sum();
            let mut n = 0;
            while n + 1 < segments.len() {
                let first = &segments[n];
                let len = first.visible_len();
                let too_old = match (age_us, first.max_timestamp_us()) {
                    (Some(age), Some(max_ts)) => now.saturating_sub(max_ts) > age,
                    _ => false,
                };
                let too_big = self
                    .config
                    .retention_bytes
                    .is_some_and(|max| total - len >= max);
                if !(too_old || too_big) {
                    break;
                }
                total -= len;
                n += 1;
            }
            let removed: Vec<_> = segments.drain(..n).collect();
            if n > 0 {
                self.log_start
                    .store(segments[0].base_offset, Ordering::Release);
            }
            removed
        };
        let mut outcome = RetentionOutcome {
            segments_deleted: removed.len(),
            bytes_deleted: removed.iter().map(|s| s.visible_len()).sum(),
            log_start: self.log_start(),
        };
        for segment in &removed {
            segment.remove_files(self.io.as_ref())?;
        }
        if !removed.is_empty() {
            self.io
                .sync_dir(&self.dir)
                .map_err(io_err("sync directory", &self.dir))?;
            tracing::info!(dir = %self.dir.display(), segments = outcome.segments_deleted, log_start = outcome.log_start, "retention deleted segments");
        }
        outcome.log_start = self.log_start();
        Ok(outcome)
    }

    /// Syncs what was appended and refuses further appends. Reads keep working.
    pub fn close(&self) -> Result<(), StorageError> {
        let mut w = self.lock_writer();
        if w.closed {
            return Ok(());
        }
        w.closed = true;
        drop(w);
        let seals: Vec<_> =
            std::mem::take(&mut *self.seal_threads.lock().unwrap_or_else(|e| e.into_inner()));
        for seal in seals {
            let _ = seal.join();
        }
        if self.poisoned().is_some() {
            return Ok(());
        }
        self.sync()?;
        let w = self.lock_writer();
        let active = Arc::clone(&w.active);
        // Every seal has finished: the recovery point may now name the very end.
        self.advance_recovery_point(RecoveryPoint {
            segment_base: active.base_offset,
            position: w.written_len,
            next_offset: w.next_offset,
            max_timestamp_us: w.last_max_ts,
        });
        drop(w);
        active.index().sync()
    }
}

pub(crate) fn corrupt(path: &Path, position: u64, reason: &dyn std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        path: path.to_path_buf(),
        position,
        reason: reason.to_string(),
    }
}

/// Creates the files of an empty segment at `base` and makes them durable in the
/// directory.
pub(crate) fn create_segment(io: &dyn Io, dir: &Path, base: u64) -> Result<Segment, StorageError> {
    let path = log_path(dir, base);
    let log = io
        .open(&path, true)
        .map_err(io_err("create segment", &path))?;
    // A new segment starts empty even if a stale file of that name was left behind.
    log.set_len(0).map_err(io_err("truncate segment", &path))?;
    let (mut index, _) = SegmentIndex::open(io, dir, base, 0)?;
    index.truncate(0)?;
    io.sync_dir(dir).map_err(io_err("sync directory", dir))?;
    Ok(Segment::new(base, path, log, index))
}
