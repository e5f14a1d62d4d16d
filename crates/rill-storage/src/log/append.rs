//! Appending: checking a batch, stamping and writing it, rolling segments.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rill_format::{BATCH_HEADER_LEN, BatchHeader, BatchView, stamp};

use super::{Appended, DurableTicket, PartitionLog, Writer, Written, create_segment};
use crate::StorageError;
use crate::config::Durability;
use crate::error::io_err;
use crate::recovery_point::RecoveryPoint;
use crate::segment::{Found, IndexCadence, Scanner, Segment, entry_for};

/// The least a log reserves ahead of its writes, and the most (see
/// `PartitionLog::preallocate`).
const PREALLOCATE_BYTES_MIN: u64 = 1 << 20;
const PREALLOCATE_BYTES_MAX: u64 = 32 << 20;

/// A batch that passed every check that does not depend on the log's state (size,
/// both CRCs, record structure and size, timestamp span): what
/// [`PartitionLog::check`] returns and [`PartitionLog::try_append`] writes.
#[derive(Debug, Clone, Copy)]
pub struct CheckedBatch<'a> {
    bytes: &'a [u8],
    count: u64,
    /// `max_timestamp_us - first_timestamp_us` as the producer set them.
    span_us: i64,
}

impl CheckedBatch<'_> {
    /// Records in the batch.
    pub fn record_count(&self) -> u64 {
        self.count
    }

    /// Bytes of the batch.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Whether the batch is empty (never: a batch has a header).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl PartitionLog {
    /// Checks a batch without appending it: everything [`PartitionLog::append`] would
    /// refuse whatever the log holds (too large, malformed, a record too large, a
    /// timestamp span beyond `timestamp_ahead_max`). A caller that must wait before
    /// appending (an idempotent producer's sequence) checks first, so a bad batch is
    /// refused at once.
    pub fn check<'a>(&self, batch: &'a [u8]) -> Result<CheckedBatch<'a>, StorageError> {
        self.check_size(batch)?;
        let view = BatchView::parse(batch)?;
        if view.as_bytes().len() != batch.len() {
            return Err(StorageError::TrailingBytes {
                extra: batch.len() - view.as_bytes().len(),
            });
        }
        // Checked by the parser: max - first equals a non-negative delta.
        let span_us = view.max_timestamp_us() - view.first_timestamp_us();
        self.check_limits(
            batch,
            view.largest_record_bytes(),
            span_us,
            view.record_count(),
        )
    }

    /// [`PartitionLog::check`] of a batch built in this process by `rill-format`'s
    /// builder (docs/FORMAT.md §3, "Batches built in-process"): the builder made a batch
    /// the parser accepts and counted its largest record, so only the header is read
    /// (its checksum too) and the log's limits applied; the body checksum and the
    /// records are not checked again. The same refusals as `check` for the same bytes.
    pub fn check_built<'a>(
        &self,
        built: &'a rill_format::BuiltBatch,
    ) -> Result<CheckedBatch<'a>, StorageError> {
        let batch = &built.bytes()[..];
        self.check_size(batch)?;
        let header = BatchHeader::parse(batch)?;
        // The builder writes a batch exactly `batch_length` long, with a span its
        // timestamps fit.
        debug_assert_eq!(header.batch_length as usize, batch.len());
        let span_us = header.max_timestamp_us - header.first_timestamp_us;
        self.check_limits(
            batch,
            built.largest_record_bytes(),
            span_us,
            header.record_count,
        )
    }

    fn check_size(&self, batch: &[u8]) -> Result<(), StorageError> {
        if batch.len() > self.config.batch_bytes_max as usize {
            return Err(StorageError::BatchTooLarge {
                bytes: batch.len(),
                max: self.config.batch_bytes_max,
            });
        }
        Ok(())
    }

    /// The checks of a parsed batch that depend on the log's settings.
    fn check_limits<'a>(
        &self,
        batch: &'a [u8],
        largest_record_bytes: usize,
        span_us: i64,
        record_count: u32,
    ) -> Result<CheckedBatch<'a>, StorageError> {
        if largest_record_bytes > self.config.record_bytes_max as usize {
            return Err(StorageError::RecordTooLarge {
                bytes: largest_record_bytes,
                max: self.config.record_bytes_max,
            });
        }
        let ahead_max_us = self.ahead_max_us();
        if span_us > ahead_max_us {
            let now_us = self.env.clock.now_us();
            return Err(StorageError::TimestampOutOfRange {
                max_timestamp_us: now_us.saturating_add(span_us),
                now_us,
                ahead_max_us,
            });
        }
        Ok(CheckedBatch {
            bytes: batch,
            count: u64::from(record_count),
            span_us,
        })
    }

    /// Refuses appends to a closed, fenced, poisoned or damaged log.
    pub(super) fn check_appendable(&self, w: &Writer) -> Result<(), StorageError> {
        if w.closed {
            return Err(StorageError::Closed);
        }
        if w.fenced {
            return Err(StorageError::Fenced {
                next_offset: w.next_offset,
            });
        }
        self.check_writable()?;
        if w.tail_damage.is_some() {
            // Even accepted, damage that ends the active segment leaves its next offset
            // unknown: only `accept_damage`, which rolls past it, may resume appends.
            return Err(StorageError::Damaged {
                ranges: "damage ends the log; accept the loss to resume appends".to_owned(),
            });
        }
        Ok(())
    }

    fn ahead_max_us(&self) -> i64 {
        // Validated to fit in `LogConfig::validate`.
        i64::try_from(self.config.timestamp_ahead_max.as_micros()).unwrap_or(i64::MAX)
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
    /// acknowledging. Rolls to a new segment first if the batch needs one.
    pub fn append_deferred(&self, batch: &[u8]) -> Result<(Appended, DurableTicket), StorageError> {
        let checked = self.check(batch)?;
        loop {
            if let Some(done) = self.try_append(&checked)? {
                return Ok(done);
            }
            self.make_room(checked.len())?;
        }
    }

    /// Refuses every append from now on and returns the offset the next append would
    /// have taken: no append completes after this returns (appends hold the writer lock
    /// while they write). Reads, syncs and retention go on. Idempotent. For sealing a
    /// range of an elastic topic (docs/RANGES.md §3), which then syncs the log through
    /// the returned offset. Fails on a closed or poisoned log.
    pub fn fence(&self) -> Result<u64, StorageError> {
        let mut w = self.lock_writer()?;
        if w.closed {
            return Err(StorageError::Closed);
        }
        self.check_writable()?;
        w.fenced = true;
        Ok(w.next_offset)
    }

    /// Lifts [`PartitionLog::fence`] (a seal that failed before it was committed).
    pub fn unfence(&self) -> Result<(), StorageError> {
        self.lock_writer()?.fenced = false;
        Ok(())
    }

    /// Writes a checked batch unless the active segment must roll first, in which case
    /// it writes nothing and returns `None`: call [`PartitionLog::make_room`] (which may
    /// sync and create files, so a caller holding a lock of its own releases it first)
    /// and try again. Returns before the durability policy holds, like
    /// [`PartitionLog::append_deferred`].
    pub fn try_append(
        &self,
        checked: &CheckedBatch<'_>,
    ) -> Result<Option<(Appended, DurableTicket)>, StorageError> {
        let batch = checked.bytes;
        let len = checked.len();
        let mut w = self.lock_writer()?;
        self.check_appendable(&w)?;
        let now = self.env.clock.now_us();
        let ts = w.last_max_ts.map_or(now, |last| now.max(last));
        if checked.span_us > 0
            && ts.saturating_add(checked.span_us) > now.saturating_add(self.ahead_max_us())
        {
            // A span of 0 cannot move the clock past max(now, last); a positive span may
            // only reach `timestamp_ahead_max` beyond now, so no sequence of batches can
            // ratchet the partition's clock away.
            return Err(StorageError::TimestampOutOfRange {
                max_timestamp_us: ts.saturating_add(checked.span_us),
                now_us: now,
                ahead_max_us: self.ahead_max_us(),
            });
        }
        if self.needs_roll(&w, len, ts) {
            return Ok(None);
        }
        let base = w.next_offset;
        let mut header = [0u8; BATCH_HEADER_LEN];
        header.copy_from_slice(&batch[..BATCH_HEADER_LEN]);
        stamp(&mut header, base, ts)?;
        self.write_tail(&mut w, &header, checked, base, ts)
            .map(Some)
    }

    /// Writes a batch whose base offset and timestamps are already stamped (by a
    /// partition's Raft leader, docs/FORMAT.md §4 "Replicated appends"), bytes
    /// unchanged, like [`PartitionLog::append_deferred`]: rolls first if it must, and
    /// returns before the durability policy holds. Refuses a batch that does not
    /// continue the log (`NotContiguous`): its base offset must be the log's next
    /// offset and its first timestamp at least the previous batch's largest.
    pub fn append_stamped(&self, batch: &[u8]) -> Result<(Appended, DurableTicket), StorageError> {
        let checked = self.check(batch)?;
        loop {
            if let Some(done) = self.try_append_stamped(&checked)? {
                return Ok(done);
            }
            self.make_room(checked.len())?;
        }
    }

    /// [`PartitionLog::append_stamped`] without the roll: `None` if the active segment
    /// must roll first (call [`PartitionLog::make_room`] and try again).
    pub fn try_append_stamped(
        &self,
        checked: &CheckedBatch<'_>,
    ) -> Result<Option<(Appended, DurableTicket)>, StorageError> {
        let batch = checked.bytes;
        let mut w = self.lock_writer()?;
        self.check_appendable(&w)?;
        let view = BatchView::parse(batch)?;
        let (base, ts) = (view.base_offset(), view.first_timestamp_us());
        if base != w.next_offset || w.last_max_ts.is_some_and(|last| ts < last) {
            return Err(StorageError::NotContiguous {
                base_offset: base,
                first_timestamp_us: ts,
                next_offset: w.next_offset,
                last_timestamp_us: w.last_max_ts,
            });
        }
        if self.needs_roll(&w, checked.len(), ts) {
            return Ok(None);
        }
        let mut header = [0u8; BATCH_HEADER_LEN];
        header.copy_from_slice(&batch[..BATCH_HEADER_LEN]);
        self.write_tail(&mut w, &header, checked, base, ts)
            .map(Some)
    }

    /// Writes a stamped header and the batch's records at the end of the active
    /// segment and advances the writer.
    fn write_tail(
        &self,
        w: &mut Writer,
        header: &[u8; BATCH_HEADER_LEN],
        checked: &CheckedBatch<'_>,
        base: u64,
        ts: i64,
    ) -> Result<(Appended, DurableTicket), StorageError> {
        let batch = checked.bytes;
        let len = checked.len();
        let position = w.written_len;
        self.preallocate(w, position + len);
        // The stamped header, then the records as the caller holds them, in one write
        // where the file can. A crash in the middle leaves a torn batch, which recovery
        // cuts.
        let written = w
            .file
            .write_all_vectored_at(&[header, &batch[BATCH_HEADER_LEN..]], position);
        if let Err(e) = written {
            self.poison_with("write");
            return Err(io_err("write segment", &w.active.path)(e));
        }
        if w.cadence.take(position) {
            let found = Found {
                position,
                header: BatchHeader::parse(header)?,
            };
            if let Some(entry) = entry_for(w.active.base_offset, &found) {
                let pushed = w.active.index_mut().push(entry);
                if let Err(e) = pushed {
                    self.poison_with("index write");
                    return Err(e);
                }
            }
        }
        let next = base + checked.count;
        let max_ts = ts + checked.span_us;
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
            file: Arc::clone(&w.file),
            len: w.written_len,
            next_offset: next,
            max_ts: w.last_max_ts,
        };
        if self.durability() != Durability::Always {
            self.publish(&written);
        }
        let seq = written.seq;
        self.commit.lock().latest = Some(written);
        Ok((
            Appended {
                base_offset: base,
                last_offset: next - 1,
                timestamp_us: ts,
            },
            DurableTicket(seq),
        ))
    }

    /// Reserves the active segment's blocks ahead of a write ending at `end`, once it
    /// passes what is reserved: as far ahead again as the segment holds, from 1 MiB to
    /// [`PREALLOCATE_BYTES_MAX`], never past the segment's roll size. So a quiet
    /// partition reserves little, a busy one calls `fallocate` once per 32 MiB, and
    /// what is reserved and unwritten is at most that per log (freed at the roll). A
    /// hint: a failure is logged and the write goes on.
    fn preallocate(&self, w: &mut Writer, end: u64) {
        if end <= w.preallocated {
            return;
        }
        let ahead = end.clamp(PREALLOCATE_BYTES_MIN, PREALLOCATE_BYTES_MAX);
        let to = end
            .saturating_add(ahead)
            .min(self.config.segment_bytes_max.max(end));
        // Too little to be worth a call (a small segment near its roll size, or a tiny
        // write into a new one): reserve nothing now, look again at the next write.
        if end < PREALLOCATE_BYTES_MIN || to <= end {
            return;
        }
        if let Err(e) = w.file.preallocate(end, to - end) {
            tracing::debug!(path = %w.active.path.display(), error = %e, "could not reserve blocks ahead of the log's writes");
        }
        w.preallocated = to;
    }

    /// Frees the blocks reserved ahead of the active segment's writes if nothing was
    /// appended for `idle` (by the log's clock): a partition that went quiet holds no
    /// reservation until it is written again. Returns whether it freed any. A hint: a
    /// failure is logged.
    pub fn release_idle_reservation(&self, idle: std::time::Duration) -> bool {
        let Ok(mut w) = self.lock_writer() else {
            return false;
        };
        if w.preallocated <= w.written_len {
            return false;
        }
        let idle_us = i64::try_from(idle.as_micros()).unwrap_or(i64::MAX);
        let now = self.env.clock.now_us();
        if w.last_max_ts
            .is_some_and(|last| now.saturating_sub(last) < idle_us)
        {
            return false;
        }
        release_preallocated(&w.active.path, w.file.as_ref());
        w.preallocated = w.written_len;
        true
    }

    /// Rolls to a new segment if a batch of `len` bytes would need one. Under
    /// `always` this syncs the old segment (holding only the log's own writer lock).
    pub fn make_room(&self, len: u64) -> Result<(), StorageError> {
        let mut w = self.lock_writer()?;
        self.check_appendable(&w)?;
        let now = self.env.clock.now_us();
        let ts = w.last_max_ts.map_or(now, |last| now.max(last));
        if self.needs_roll(&w, len, ts) {
            let base = w.next_offset;
            self.roll_to(&mut w, base)?;
        }
        Ok(())
    }

    /// Headers of every batch in the last `segments` segments, oldest first: what a
    /// caller needs to rebuild per-producer state after a restart. Damaged ranges are
    /// stepped over; a segment whose chain breaks where no damage is known contributes
    /// the headers before the break (a warning says so).
    pub fn recent_batch_headers(&self, segments: usize) -> Result<Vec<BatchHeader>, StorageError> {
        let all = self.segments_snapshot();
        let mut headers = Vec::new();
        for segment in &all[all.len().saturating_sub(segments)..] {
            let file = segment.log()?;
            let mut scanner = Scanner::new(file.as_ref(), &segment.path, 0, segment.visible_len())
                .skipping(segment.damaged());
            loop {
                match scanner.next_batch()? {
                    Ok(Some(found)) => headers.push(found.header),
                    Ok(None) => break,
                    Err(stop) => {
                        tracing::warn!(path = %segment.path.display(), position = scanner.position(), reason = %stop, "cannot read batch headers past damage");
                        break;
                    }
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
    /// always complete on disk) and starts a new one at offset `base` (the next offset,
    /// or a later one after accepted damage).
    pub(super) fn roll_to(&self, w: &mut Writer, base: u64) -> Result<(), StorageError> {
        let old = Arc::clone(&w.active);
        let old_file = Arc::clone(&w.file);
        // Here, under the writer's lock, so no truncation races it (a truncation may
        // cut into this segment while it is still being sealed).
        if w.preallocated > 0 {
            release_preallocated(&old.path, old_file.as_ref());
        }
        if self.durability() == Durability::Always {
            // Under `always` the old segment is synced already but for appends still
            // waiting on their group commit: syncing it here is cheap, and is what
            // those waiters need (the next leader syncs the new segment).
            let started = std::time::Instant::now();
            let synced = old_file.sync_data();
            crate::stats::observe_fsync(started.elapsed());
            if let Err(e) = synced {
                self.poison_with("fsync");
                return Err(io_err("sync segment", &old.path)(e));
            }
            old.set_visible_len(w.written_len);
            seal_index(&old);
            old.file.unpin();
        } else {
            // Under `never`/`interval`, syncing up to a gigabyte here would stall every
            // append for a long time: seal in the background instead. Until that sync
            // finishes the recovery point stays behind, so a crash makes recovery
            // validate this segment too.
            old.set_visible_len(w.written_len);
            self.seal_in_background(Arc::clone(&old), old_file);
        }
        let (segment, file) = match create_segment(&self.env, &self.dir, base) {
            Ok((s, f)) => (Arc::new(s), f),
            Err(e) => {
                self.poison_with("segment roll");
                return Err(e);
            }
        };
        self.segments.write().push(Arc::clone(&segment));
        self.advance_recovery_point(RecoveryPoint {
            segment_base: base,
            position: 0,
            next_offset: base,
            max_timestamp_us: w.last_max_ts,
        });
        w.active = segment;
        w.file = file;
        w.written_len = 0;
        w.next_offset = base;
        w.segment_first_ts = None;
        w.cadence = IndexCadence::new(self.config.index_interval_bytes, None);
        w.preallocated = 0;
        Ok(())
    }

    fn seal_in_background(&self, segment: Arc<Segment>, file: Arc<dyn crate::IoFile>) {
        self.seals_pending.fetch_add(1, Ordering::AcqRel);
        let pending = Arc::clone(&self.seals_pending);
        let poison = Arc::clone(&self.poison);
        let spawned = std::thread::Builder::new()
            .name("rill-seal".into())
            .spawn(move || {
                // A panic in the sync leaves the segment's durability unknown: poison.
                let sealed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let started = std::time::Instant::now();
                    let synced = file.sync_data();
                    crate::stats::observe_fsync(started.elapsed());
                    synced
                }));
                match sealed {
                    Ok(Ok(())) => {
                        seal_index(&segment);
                        segment.file.unpin();
                        // Only a successful seal lets the recovery point move on.
                        pending.fetch_sub(1, Ordering::AcqRel);
                    }
                    Ok(Err(e)) => {
                        if poison.set("fsync").is_ok() {
                            tracing::error!(path = %segment.path.display(), error = %e, "sealing a segment failed: partition poisoned");
                        }
                    }
                    Err(_) => {
                        if poison.set("segment seal (a panic while sealing)").is_ok() {
                            tracing::error!(path = %segment.path.display(), "sealing a segment panicked: partition poisoned");
                        }
                    }
                }
            });
        match spawned {
            Ok(handle) => {
                let mut threads = self.seal_threads.lock();
                threads.retain(|t| !t.is_finished());
                threads.push(handle);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start a sealing thread: partition poisoned");
                self.poison_with("segment seal");
            }
        }
    }
}

/// Frees the blocks reserved past a sealed segment's end. A hint: a failure is logged.
pub(crate) fn release_preallocated(path: &std::path::Path, file: &dyn crate::IoFile) {
    if let Err(e) = file.release_preallocated() {
        tracing::warn!(path = %path.display(), error = %e, "could not free the blocks reserved past a sealed segment's end");
    }
}

/// Syncs a sealed segment's index and closes its files: its entries stay in memory.
fn seal_index(segment: &Segment) {
    let mut index = segment.index_mut();
    if let Err(e) = index.sync() {
        // The index is a hint that recovery rebuilds; a failed index sync is worth a
        // warning, not a poisoned partition.
        tracing::warn!(error = %e, "could not sync a sealed segment's index");
    }
    index.release_files();
}
