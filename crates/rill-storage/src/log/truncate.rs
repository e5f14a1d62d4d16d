//! Truncation: cutting a replica's log back to a batch boundary (docs/FORMAT.md §4,
//! "Replicated appends and truncation").

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{PartitionLog, Writer, create_segment};
use crate::StorageError;
use crate::error::io_err;
use crate::recovery_point::RecoveryPoint;
use crate::segment::{IndexCadence, Scanner, Segment};

/// Where a truncation cuts: the segment holding the offset, the batch's position in
/// it, and the largest timestamp before it.
struct Cut {
    at: usize,
    position: u64,
    max_ts_before: Option<i64>,
}

impl PartitionLog {
    /// Removes every batch at or after `offset`, durably: when this returns, the log
    /// ends at `offset` and a crash cannot bring the removed batches back. `offset` must
    /// be where a batch starts, between the log's start and its end (`NotBatchBoundary`,
    /// `OffsetBeforeStart`, `OffsetBeyondEnd` otherwise); at the end it does nothing.
    ///
    /// For a Raft follower cutting a tail its leader does not have. A crash during it
    /// leaves the old log or a prefix of it at least `offset` long, so calling it again
    /// finishes it. A log that is poisoned, closed or has damaged ranges refuses. Reads
    /// keep running, but a read at or above `offset` while it runs may fail or return
    /// the old batches: callers read below it (a replica reads below its commit point).
    pub fn truncate_from(&self, offset: u64) -> Result<(), StorageError> {
        let mut w = self.lock_writer()?;
        self.check_appendable(&w)?;
        if self.has_damage.load(Ordering::Acquire) {
            return Err(StorageError::Damaged {
                ranges: "a log with damaged ranges is not truncated".to_owned(),
            });
        }
        let log_start = self.log_start();
        if offset < log_start {
            return Err(StorageError::OffsetBeforeStart {
                requested: offset,
                log_start,
            });
        }
        if offset > w.next_offset {
            return Err(StorageError::OffsetBeyondEnd {
                requested: offset,
                next_offset: w.next_offset,
            });
        }
        if offset == w.next_offset {
            return Ok(());
        }
        // 1. Everything written is durable: the active segment synced (sharing a group
        //    commit in progress) and every background seal finished.
        self.sync_through_locked()?;
        self.join_seals()?;
        let segments = self.segments_snapshot();
        let cut = self.find_cut(&segments, offset)?;
        let target = Arc::clone(&segments[cut.at]);
        // 2. The recovery point at the cut: everything before it is durable.
        let point = RecoveryPoint {
            segment_base: target.base_offset,
            position: cut.position,
            next_offset: offset,
            max_timestamp_us: cut.max_ts_before,
        };
        if let Err(e) = point.write_durable(self.env.io.as_ref(), &self.dir) {
            self.poison_with("truncation");
            return Err(io_err("write recovery point", &self.dir)(e));
        }
        // From here a failure leaves the in-memory state unlike the disk: poison, so only
        // a reopen (which recovers from the disk) goes on.
        match self.cut_files(&mut w, &segments, &cut, offset) {
            Ok(()) => {
                tracing::warn!(dir = %self.dir.display(), offset, "truncated the log's tail");
                Ok(())
            }
            Err(e) => {
                self.poison_with("truncation");
                Err(e)
            }
        }
    }

    /// Syncs everything written so far (the caller holds the writer lock, so nothing
    /// more is written meanwhile).
    pub(super) fn sync_through_locked(&self) -> Result<(), StorageError> {
        let seq = self.commit.lock().latest.as_ref().map_or(0, |l| l.seq);
        self.sync_through(seq)
    }

    /// Waits for every background seal; a failed one has poisoned the log.
    pub(super) fn join_seals(&self) -> Result<(), StorageError> {
        let seals: Vec<_> = std::mem::take(&mut *self.seal_threads.lock());
        for seal in seals {
            if seal.join().is_err() {
                self.poison_with("segment seal (a panic while sealing)");
            }
        }
        self.check_poison()
    }

    /// Finds the batch at `offset` and the largest timestamp before it.
    fn find_cut(&self, segments: &[Arc<Segment>], offset: u64) -> Result<Cut, StorageError> {
        let at = segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1);
        let segment = &segments[at];
        let max_before_segment = segments[..at]
            .iter()
            .rev()
            .find_map(|s| s.max_timestamp_us());
        if offset == segment.base_offset {
            return Ok(Cut {
                at,
                position: 0,
                max_ts_before: max_before_segment,
            });
        }
        // Scan from the index entry of a batch before the offset (its batches are
        // durable and whole: the log was synced and has no damage), so the batch before
        // the cut is scanned and its largest timestamp known.
        let (start, start_offset) = segment
            .index()
            .floor_offset(offset - segment.base_offset - 1)
            .map_or((0, segment.base_offset), |e| {
                (
                    u64::from(e.position),
                    segment.base_offset + u64::from(e.rel_offset),
                )
            });
        let file = segment.log()?;
        let mut scanner = Scanner::new(file.as_ref(), &segment.path, start, segment.visible_len())
            .chaining(start_offset);
        let mut max_ts = None;
        loop {
            let position = scanner.position();
            match scanner.next_batch()? {
                Ok(Some(found)) if found.header.base_offset == offset => {
                    return Ok(Cut {
                        at,
                        position,
                        max_ts_before: max_ts,
                    });
                }
                Ok(Some(found)) if found.header.base_offset < offset => {
                    max_ts = Some(found.header.max_timestamp_us);
                }
                Ok(_) | Err(_) => return Err(StorageError::NotBatchBoundary { offset }),
            }
        }
    }

    /// Steps 3 and 4: removes the later segments, cuts the one holding the offset and
    /// starts the new active segment at it.
    fn cut_files(
        &self,
        w: &mut Writer,
        segments: &[Arc<Segment>],
        cut: &Cut,
        offset: u64,
    ) -> Result<(), StorageError> {
        let io = self.env.io.as_ref();
        let target = &segments[cut.at];
        // Readers see the log end at the cut from now on.
        self.visible_next.store(offset, Ordering::Release);
        {
            let mut list = self.segments.write();
            list.truncate(cut.at + 1);
        }
        // 3. The later segments, the last first, so a crash leaves a prefix.
        for later in segments[cut.at + 1..].iter().rev() {
            later.remove_files(io)?;
        }
        io.sync_dir(&self.dir)
            .map_err(io_err("sync directory", &self.dir))?;
        // 4. Cut the segment holding the offset, or empty it when the batch was its
        //    first (the new active segment is then that same file).
        let file = target.log()?;
        file.set_len(cut.position)
            .and_then(|()| file.sync_data())
            .map_err(io_err("truncate segment", &target.path))?;
        if cut.position == 0 {
            self.segments.write().truncate(cut.at);
            target.remove_handles();
        } else {
            let rel = offset - target.base_offset;
            {
                let mut index = target.index_mut();
                let keep = index
                    .entries()
                    .partition_point(|e| u64::from(e.rel_offset) < rel);
                index.reopen_files(io)?;
                index.truncate(keep)?;
                index.release_files();
            }
            target.cut_to(cut.position, offset, cut.max_ts_before);
            target.file.unpin();
        }
        let (segment, file) = create_segment(&self.env, &self.dir, offset)?;
        let segment = Arc::new(segment);
        self.segments.write().push(Arc::clone(&segment));
        if self.segments.read().len() == 1 {
            self.log_start.store(offset, Ordering::Release);
        }
        let point = RecoveryPoint {
            segment_base: offset,
            position: 0,
            next_offset: offset,
            max_timestamp_us: cut.max_ts_before,
        };
        point
            .write_durable(io, &self.dir)
            .map_err(io_err("write recovery point", &self.dir))?;
        w.active = segment;
        w.file = file;
        w.written_len = 0;
        w.next_offset = offset;
        w.last_max_ts = cut.max_ts_before;
        w.segment_first_ts = None;
        w.cadence = IndexCadence::new(self.config.index_interval_bytes, None);
        w.preallocated = 0;
        // Group commit and write-behind named the old tail: start over from the new one
        // (everything before it is synced).
        {
            let mut st = self.commit.lock();
            st.latest = None;
            st.synced_seq = w.seq;
        }
        *self.behind.lock() = super::sync::Behind::default();
        Ok(())
    }
}
