//! The partition log: append, read, time lookup, retention, durability, damage.
//!
//! Concurrency: appends are serialized by the writer mutex (a stamped header copy and
//! the caller's records, written back to back). A panic while it is held poisons the
//! log (fail-stop): the writer's state may be half-updated, so nothing more is
//! appended until the log is reopened.
//! Reads take no writer lock: they find their segment under a short read lock on the
//! segment list and read with positional I/O, bounded by what is *visible*. Under
//! [`Durability::Always`](crate::Durability::Always) a batch becomes visible (and is acknowledged) only after an
//! `fdatasync` covered it, so a reader never sees a record that a power loss could
//! take back. Syncs are group commits: whichever waiting appender finds no sync in
//! progress syncs everything written so far, and every appender it covered returns.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use parking_lot::RwLock;
use rill_format::Batches;

use crate::StorageError;
use crate::clock::Clock;
use crate::config::LogConfig;
use crate::damage::{Accepted, DamagedRange, write_accepted};
use crate::env::LogEnv;
use crate::error::io_err;
use crate::files::SegmentFile;
use crate::index::SegmentIndex;
use crate::io::{Io, IoFile};
use crate::recovery::{WriterState, recover};
use crate::recovery_point::RecoveryPoint;
use crate::segment::{IndexCadence, Segment, log_path};

use self::sync::GroupCommit;

mod append;
mod purge;
mod read;
mod sync;
mod truncate;
mod tune;

pub use append::CheckedBatch;
pub(crate) use append::release_preallocated;

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
    /// The options the log was opened with. Its durability and retention fields are
    /// never read: `tunable` holds them, since an operator may change them while the log
    /// is open.
    config: LogConfig,
    tunable: RwLock<tune::Tunable>,
    env: LogEnv,
    /// Segments in offset order; the last is the active one.
    segments: RwLock<Vec<Arc<Segment>>>,
    log_start: AtomicU64,
    /// Offset after the last batch readers may see.
    visible_next: AtomicU64,
    /// A std mutex on purpose: its poisoning after a panic is what fails the log.
    writer: Mutex<Writer>,
    commit: GroupCommit,
    poison: Arc<OnceLock<&'static str>>,
    /// Sealed segments whose background sync has not finished. The recovery point only
    /// moves while this is zero: it may only name data with everything before it durable.
    seals_pending: Arc<AtomicUsize>,
    seal_threads: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Write-behind and drop-behind: how far the flusher got.
    behind: parking_lot::Mutex<sync::Behind>,
    /// Damaged ranges, by first offset.
    damage: RwLock<Vec<DamagedRange>>,
    /// Whether `damage` is non-empty (read on every read, so not behind the lock).
    has_damage: AtomicBool,
}

#[derive(Debug)]
pub(crate) struct Writer {
    pub(crate) active: Arc<Segment>,
    /// The active segment's open `.log` (pinned while it is active).
    pub(crate) file: Arc<dyn IoFile>,
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
    /// Set by [`PartitionLog::fence`]: appends are refused (an elastic topic's range
    /// being sealed, or sealed). Memory only: a reopened log takes appends until fenced
    /// again.
    pub(crate) fenced: bool,
    /// The active segment ends in damage, so nothing may be appended to it: a lower
    /// bound for the offset appends resume at once the loss is accepted.
    pub(crate) tail_damage: Option<u64>,
    /// How far the active segment's blocks are reserved ahead of its writes
    /// ([`IoFile::preallocate`]); 0 for a segment not reserved into yet.
    pub(crate) preallocated: u64,
}

impl Writer {
    pub(crate) fn new(
        config: &LogConfig,
        active: Arc<Segment>,
        file: Arc<dyn IoFile>,
        state: WriterState,
    ) -> Self {
        let cadence = IndexCadence::new(config.index_interval_bytes, active.index().last());
        Self {
            active,
            file,
            written_len: state.written_len,
            next_offset: state.next_offset,
            last_max_ts: state.last_max_ts,
            segment_first_ts: state.segment_first_ts,
            cadence,
            seq: 0,
            closed: false,
            fenced: false,
            tail_damage: state.tail_damage,
            preallocated: 0,
        }
    }
}

/// The last write, as a sync would cover it.
#[derive(Debug, Clone)]
struct Written {
    seq: u64,
    segment: Arc<Segment>,
    file: Arc<dyn IoFile>,
    len: u64,
    next_offset: u64,
    max_ts: Option<i64>,
}

impl PartitionLog {
    /// Opens (creating or recovering) the log in `dir` on the real file system.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Self, StorageError> {
        Self::open_in(dir, config, &LogEnv::default())
    }

    /// Opens the log with an explicit I/O layer and clock (tests inject faults and time).
    pub fn open_with(
        dir: impl AsRef<Path>,
        config: LogConfig,
        io: Arc<dyn Io>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StorageError> {
        Self::open_in(dir, config, &LogEnv::new(io, clock))
    }

    /// Opens the log in an environment (disk, clock, shared file cache).
    pub fn open_in(
        dir: impl AsRef<Path>,
        config: LogConfig,
        env: &LogEnv,
    ) -> Result<Self, StorageError> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let mut recovered = recover(&dir, &config, env)?;
        let writer = recovered.writer;
        let visible_next = writer.next_offset;
        let log_start = logical_start(
            purge::read_log_start(env.io.as_ref(), &dir),
            recovered.segments[0].base_offset,
            visible_next,
            &dir,
        );
        // Damage no reader can reach does not fail the log.
        recovered
            .damage
            .retain(|d| d.to_offset.is_none_or(|to| to > log_start));
        let has_damage = !recovered.damage.is_empty();
        Ok(Self {
            dir,
            tunable: RwLock::new(tune::Tunable::of(&config)),
            config,
            env: env.clone(),
            segments: RwLock::new(recovered.segments),
            log_start: AtomicU64::new(log_start),
            visible_next: AtomicU64::new(visible_next),
            writer: Mutex::new(writer),
            commit: GroupCommit::default(),
            poison: Arc::new(OnceLock::new()),
            seals_pending: Arc::new(AtomicUsize::new(0)),
            seal_threads: parking_lot::Mutex::new(Vec::new()),
            behind: parking_lot::Mutex::default(),
            damage: RwLock::new(recovered.damage),
            has_damage: AtomicBool::new(has_damage),
        })
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log's options as they are now: those it was opened with, with the
    /// durability and retention last set ([`PartitionLog::set_durability`],
    /// [`PartitionLog::set_retention`]).
    pub fn config(&self) -> LogConfig {
        let tunable = *self.tunable.read();
        LogConfig {
            durability: tunable.durability,
            retention_age: tunable.retention_age,
            retention_bytes: tunable.retention_bytes,
            ..self.config.clone()
        }
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
        self.segments.read().len()
    }

    /// Why the log refuses appends after a failed write or fsync (or a panic), if it
    /// does.
    pub fn poisoned(&self) -> Option<&'static str> {
        self.poison.get().copied()
    }

    /// The damaged ranges of the log, by first offset.
    pub fn damage(&self) -> Vec<DamagedRange> {
        if !self.has_damage.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.damage.read().clone()
    }

    /// Why the log refuses appends, if it does: poisoned, or damaged ranges nobody
    /// accepted yet. `None` for a healthy log.
    pub fn failure(&self) -> Option<String> {
        if let Some(cause) = self.poisoned() {
            return Some(format!(
                "poisoned after a failed {cause}; reopen (repair) it"
            ));
        }
        self.unaccepted_damage()
            .map(|ranges| format!("damaged data: {ranges}"))
    }

    /// The unaccepted damaged ranges, described; `None` if there are none.
    fn unaccepted_damage(&self) -> Option<String> {
        if !self.has_damage.load(Ordering::Acquire) {
            return None;
        }
        let damage = self.damage.read();
        let described: Vec<String> = damage
            .iter()
            .filter(|d| !d.accepted)
            .map(DamagedRange::describe)
            .collect();
        (!described.is_empty()).then(|| described.join("; "))
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

    /// Refuses appends to a poisoned or damaged log.
    fn check_writable(&self) -> Result<(), StorageError> {
        self.check_poison()?;
        match self.unaccepted_damage() {
            Some(ranges) => Err(StorageError::Damaged { ranges }),
            None => Ok(()),
        }
    }

    fn segments_snapshot(&self) -> Vec<Arc<Segment>> {
        self.segments.read().clone()
    }

    /// The writer, or `Poisoned` if a panic left it half-updated (the log is poisoned
    /// then, for good: only a reopen recovers).
    fn lock_writer(&self) -> Result<MutexGuard<'_, Writer>, StorageError> {
        match self.writer.lock() {
            Ok(w) => Ok(w),
            Err(_) => {
                self.poison_with("append (a panic while appending)");
                Err(StorageError::Poisoned {
                    cause: "append (a panic while appending)",
                })
            }
        }
    }

    /// Records damage found after open; the log refuses appends until it is accepted.
    fn add_damage(&self, range: DamagedRange) {
        let mut damage = self.damage.write();
        if damage
            .iter()
            .any(|d| d.segment_base == range.segment_base && d.position == range.position)
        {
            return;
        }
        tracing::error!(dir = %self.dir.display(), range = %range.describe(), "damaged data found by a read: the partition refuses appends until the loss is accepted");
        let at = damage.partition_point(|d| d.from_offset <= range.from_offset);
        damage.insert(at, range);
        self.has_damage.store(true, Ordering::Release);
    }

    /// The damaged range holding `offset`, if any.
    fn damage_at(&self, offset: u64) -> Option<DamagedRange> {
        if !self.has_damage.load(Ordering::Acquire) {
            return None;
        }
        self.damage
            .read()
            .iter()
            .find(|d| d.contains(offset) && d.to_offset != Some(d.from_offset))
            .cloned()
    }

    /// Accepts every damaged range as lost, so the log takes appends again (reads of
    /// the ranges still fail with [`StorageError::DataLoss`]). If damage ends the log,
    /// appends resume in a new segment at the first offset that no damaged record can
    /// have used and that is at least `min_next_offset` (the caller passes the largest
    /// offset any consumer stored, so no consumer skips new records). Returns the
    /// accepted ranges. The acceptance is durable (the accepted-damage file).
    pub fn accept_damage(&self, min_next_offset: u64) -> Result<Vec<DamagedRange>, StorageError> {
        self.check_poison()?;
        let mut w = self.lock_writer()?;
        if w.closed {
            return Err(StorageError::Closed);
        }
        if let Some(hint) = w.tail_damage {
            let end = w.next_offset;
            let resume = hint.max(min_next_offset).max(end);
            let damaged = Arc::clone(&w.active);
            self.roll_to(&mut w, resume)?;
            damaged.close_damage(resume);
            w.tail_damage = None;
            for d in self.damage.write().iter_mut() {
                // The ranges at the end of the log now end where appends resume.
                let lost_at_end = d.position == d.end_position && d.from_offset >= end;
                if d.to_offset.is_none() || lost_at_end {
                    d.to_offset = Some(resume.max(d.from_offset));
                }
            }
            self.visible_next.fetch_max(resume, Ordering::AcqRel);
        }
        drop(w);
        let mut damage = self.damage.write();
        let log_start = self.log_start();
        damage.retain(|d| d.to_offset.is_none_or(|to| to > log_start));
        for d in damage.iter_mut() {
            d.accepted = true;
        }
        let entries: Vec<Accepted> = damage.iter().map(Accepted::of).collect();
        write_accepted(self.env.io.as_ref(), &self.dir, &entries)?;
        tracing::warn!(dir = %self.dir.display(), ranges = damage.len(), "damaged ranges accepted as lost: the partition takes appends again");
        self.has_damage.store(!damage.is_empty(), Ordering::Release);
        Ok(damage.clone())
    }

    /// Deletes sealed segments past the retention limits, oldest first, and those
    /// wholly below a purged log start (a crash may have left them, docs/FORMAT.md §4,
    /// "Purge"). The active segment is never deleted. The log start only moves forward.
    pub fn apply_retention(&self) -> Result<RetentionOutcome, StorageError> {
        let removed: Vec<Arc<Segment>> = {
            let mut segments = self.segments.write();
            let n = self
                .past_retention(&segments, u64::MAX)
                .max(self.segments_below_start(&segments));
            let removed: Vec<_> = segments.drain(..n).collect();
            if n > 0 {
                self.log_start
                    .fetch_max(segments[0].base_offset, Ordering::AcqRel);
            }
            removed
        };
        self.remove_segments(&removed)
    }

    /// Where the log would start if the sealed segments past the retention limits
    /// whose batches all lie below `below` were deleted; `None` if none would be. A
    /// replica's retention (docs/REPLICATION.md §7.5) purges its group's log up to
    /// there rather than deleting them itself, with `below` its high watermark.
    pub fn retention_cut(&self, below: u64) -> Option<u64> {
        let segments = self.segments.read();
        let n = self.past_retention(&segments, below);
        (n > 0).then(|| segments[n].base_offset)
    }

    /// How many segments from the oldest are past the retention limits (age or bytes)
    /// and end at or below `below`: never the active one.
    fn past_retention(&self, segments: &[Arc<Segment>], below: u64) -> usize {
        let now = self.env.clock.now_us();
        let retention = *self.tunable.read();
        let age_us = retention
            .retention_age
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let mut total: u64 = segments.iter().map(|s| s.visible_len()).sum();
        let mut n = 0;
        while n + 1 < segments.len() {
            let first = &segments[n];
            if first.next_offset() > below {
                break;
            }
            let len = first.visible_len();
            let too_old = match (age_us, first.max_timestamp_us()) {
                (Some(age), Some(max_ts)) => now.saturating_sub(max_ts) > age,
                _ => false,
            };
            let too_big = retention
                .retention_bytes
                .is_some_and(|max| total - len >= max);
            if !(too_old || too_big) {
                break;
            }
            total -= len;
            n += 1;
        }
        n
    }

    /// Deletes the sealed segments whose batches all lie below `offset`, oldest first:
    /// a replica's purge (docs/REPLICATION.md §7.5), which decides what its log keeps
    /// instead of [`PartitionLog::apply_retention`]. The active segment is never
    /// deleted.
    pub fn remove_segments_before(&self, offset: u64) -> Result<RetentionOutcome, StorageError> {
        let removed: Vec<Arc<Segment>> = {
            let mut segments = self.segments.write();
            let n = segments[..segments.len() - 1]
                .iter()
                .take_while(|s| s.next_offset() <= offset)
                .count();
            let removed: Vec<_> = segments.drain(..n).collect();
            if n > 0 {
                self.log_start
                    .fetch_max(segments[0].base_offset, Ordering::AcqRel);
            }
            removed
        };
        self.remove_segments(&removed)
    }

    /// Deletes the files of segments already taken out of the list.
    fn remove_segments(&self, removed: &[Arc<Segment>]) -> Result<RetentionOutcome, StorageError> {
        let mut outcome = RetentionOutcome {
            segments_deleted: removed.len(),
            bytes_deleted: removed.iter().map(|s| s.visible_len()).sum(),
            log_start: self.log_start(),
        };
        for segment in removed {
            segment.remove_files(self.env.io.as_ref())?;
        }
        if !removed.is_empty() {
            self.env
                .io
                .sync_dir(&self.dir)
                .map_err(io_err("sync directory", &self.dir))?;
            // Damage in deleted segments is gone with them.
            let log_start = self.log_start();
            let mut damage = self.damage.write();
            damage.retain(|d| d.to_offset.is_none_or(|to| to > log_start));
            self.has_damage.store(!damage.is_empty(), Ordering::Release);
            tracing::info!(dir = %self.dir.display(), segments = outcome.segments_deleted, log_start = outcome.log_start, "retention deleted segments");
        }
        outcome.log_start = self.log_start();
        Ok(outcome)
    }

    /// Syncs what was appended and refuses further appends. Reads keep working.
    pub fn close(&self) -> Result<(), StorageError> {
        let mut w = match self.writer.lock() {
            Ok(w) => w,
            Err(poisoned) => {
                // A panic poisoned the writer. Its state is only used below to discard
                // what was never synced, which is safe whatever the panic left.
                self.poison_with("append (a panic while appending)");
                poisoned.into_inner()
            }
        };
        if w.closed {
            return Ok(());
        }
        w.closed = true;
        if self.poisoned().is_some() {
            self.discard_unsynced(&w);
        }
        drop(w);
        let seals: Vec<_> = std::mem::take(&mut *self.seal_threads.lock());
        for seal in seals {
            if seal.join().is_err() {
                self.poison_with("segment seal (a panic while sealing)");
            }
        }
        if self.poisoned().is_some() {
            return Ok(());
        }
        self.sync()?;
        let w = self.lock_writer()?;
        let active = Arc::clone(&w.active);
        if !active.has_damage() && w.tail_damage.is_none() && self.unaccepted_damage().is_none() {
            // Every seal has finished: the recovery point may now name the very end
            // (unless damage nobody accepted lies before it: the next open must find it
            // again, see `recover`).
            self.advance_recovery_point(RecoveryPoint {
                segment_base: active.base_offset,
                position: w.written_len,
                next_offset: w.next_offset,
                max_timestamp_us: w.last_max_ts,
            });
        }
        drop(w);
        active.index_mut().sync()
    }
}

impl PartitionLog {
    /// After a failed write or fsync under `always`, cuts the active segment back to
    /// what was synced: the page cache may hold bytes the disk never got (a failed
    /// fsync can leave pages marked clean), and a reopen must not take them for durable
    /// data. Nothing beyond was acknowledged. Best effort: recovery validates anyway.
    fn discard_unsynced(&self, w: &Writer) {
        if self.durability() != crate::Durability::Always {
            return;
        }
        let synced = w.active.visible_len();
        if w.written_len > synced {
            match w.file.set_len(synced) {
                Ok(()) => {
                    tracing::warn!(path = %w.active.path.display(), synced, dropped_bytes = w.written_len - synced, "discarded the unsynced tail of a poisoned partition")
                }
                Err(e) => {
                    tracing::warn!(path = %w.active.path.display(), error = %e, "cannot discard the unsynced tail of a poisoned partition")
                }
            }
        }
    }
}

/// Where readers start in a recovered log: at the purged start the `log-start` file
/// names, or the first segment's base if that is later (retention deleted past it, or
/// there was no purge); never past the recovered end, which only a loss of synced data
/// makes possible (docs/FORMAT.md §4, "Purge").
fn logical_start(purged: Option<u64>, first_base: u64, end: u64, dir: &Path) -> u64 {
    let Some(purged) = purged else {
        return first_base;
    };
    if purged > end {
        tracing::error!(dir = %dir.display(), purged, end, "the log-start file names an offset past the recovered end: the log starts at its end");
        return first_base.max(end);
    }
    first_base.max(purged)
}

pub(crate) fn corrupt(path: &Path, position: u64, reason: &dyn std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        path: path.to_path_buf(),
        position,
        reason: reason.to_string(),
    }
}

/// Creates the files of an empty segment at `base` and makes them durable in the
/// directory. Returns the segment (its file pinned) and the open file.
pub(crate) fn create_segment(
    env: &LogEnv,
    dir: &Path,
    base: u64,
) -> Result<(Segment, Arc<dyn IoFile>), StorageError> {
    let io = env.io.as_ref();
    let path = log_path(dir, base);
    let log = io
        .open(&path, true)
        .map_err(io_err("create segment", &path))?;
    // A new segment starts empty even if a stale file of that name was left behind.
    log.set_len(0).map_err(io_err("truncate segment", &path))?;
    let (mut index, _) = SegmentIndex::open(io, dir, base, 0)?;
    index.truncate(0)?;
    io.sync_dir(dir).map_err(io_err("sync directory", dir))?;
    let file = SegmentFile::pinned(
        path.clone(),
        Arc::clone(&log),
        Arc::clone(&env.io),
        Arc::clone(&env.files),
    );
    Ok((Segment::new(base, path, file, index), log))
}
