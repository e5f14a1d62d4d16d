//! Durability of a [`PartitionLog`]: group commit (one fsync for every append waiting
//! on it), the interval sync a timer drives, write-behind, the recovery point, and
//! when writes become visible to readers.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::{DurableTicket, PartitionLog, Written};
use crate::StorageError;
use crate::config::Durability;
use crate::error::io_err;
use crate::io::IoFile;
use crate::memory::Memory;
use crate::recovery_point::RecoveryPoint;
use crate::segment::Segment;

/// Write-behind starts writeback once at least this much is new (whole pages).
const WRITE_BEHIND_BYTES: u64 = 1 << 20;
/// Page size assumed for write-behind ranges (a partial tail page is left alone: it
/// is still being appended to).
const PAGE: u64 = 4096;
/// Drop-behind drops at least this much at a time.
const DROP_BEHIND_BYTES: u64 = 8 << 20;

/// How far write-behind and drop-behind got: in the active segment as of the last
/// call, and in the segment sealed before it.
#[derive(Debug, Default)]
pub(super) struct Behind {
    /// The active segment as of the last call (`None` before the first).
    active: Option<Weak<Segment>>,
    /// Writeback started up to here in it.
    written_back: u64,
    /// Dropped from the page cache up to here in it.
    dropped: u64,
    /// The segment sealed before it and where its dropping got: the rest goes once
    /// the active segment alone holds the cache tail. Weak: a segment retention
    /// deleted meanwhile is not kept open for this.
    sealed: Option<(Weak<Segment>, u64)>,
}

/// Drops `segment`'s pages from `from` to `to` from the page cache (a hint: failures
/// are logged, not returned).
fn drop_cached(segment: &Segment, file: Option<&Arc<dyn IoFile>>, from: u64, to: u64) {
    if to <= from {
        return;
    }
    let file = match file {
        Some(f) => Arc::clone(f),
        None => match segment.file.get() {
            Ok(f) => f,
            Err(_) => return,
        },
    };
    if let Err(e) = file.drop_cached(from, to - from) {
        tracing::debug!(segment = %segment.path.display(), error = %e, "drop-behind hint failed");
    }
}

#[derive(Debug, Default)]
pub(super) struct CommitState {
    pub(super) latest: Option<Written>,
    pub(super) synced_seq: u64,
    pub(super) syncing: bool,
    pub(super) last_sync_us: Option<i64>,
}

#[derive(Debug, Default)]
pub(super) struct GroupCommit {
    state: Mutex<CommitState>,
    pub(super) synced: Condvar,
}

impl GroupCommit {
    // The state is a few counters updated together with no call in between that can
    // panic; the one long step (the fsync) runs without the lock, under a guard that
    // fails the log if it panics. So a lock without poisoning.
    pub(super) fn lock(&self) -> MutexGuard<'_, CommitState> {
        self.state.lock()
    }
}

/// Held by the thread running a group sync: if that thread panics in the fsync, the
/// sync's outcome is unknown, so the log is poisoned and the waiters are woken (they
/// would otherwise wait for `syncing` to clear forever).
struct SyncInProgress<'a> {
    log: &'a PartitionLog,
    finished: bool,
}

impl Drop for SyncInProgress<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.log.poison_with("fsync (a panic while syncing)");
            let mut st = self.log.commit.lock();
            st.syncing = false;
            self.log.commit.synced.notify_all();
        }
    }
}

impl PartitionLog {
    /// Returns once the write behind `ticket` satisfies the durability policy: synced
    /// under `always` (sharing the sync with concurrent appends). Under `interval` it
    /// returns at once: the sync is the job of whoever calls [`Self::sync_if_due`] on a
    /// timer (the broker's [`Flusher`](crate::Flusher)), so an append never waits for
    /// an fsync it did not ask for. (Syncing inline here made the append that crossed
    /// the interval wait for the whole fsync, 10+ ms, and every append behind it.)
    pub fn wait_durable(&self, ticket: DurableTicket) -> Result<(), StorageError> {
        match self.durability() {
            Durability::Always => self.sync_through(ticket.0),
            Durability::Interval(_) | Durability::Never => Ok(()),
        }
    }

    /// Writes the recovery point if every sealed segment is durable (otherwise it must
    /// stay behind them).
    pub(super) fn advance_recovery_point(&self, rp: RecoveryPoint) {
        if self.seals_pending.load(Ordering::Acquire) == 0 {
            rp.write(self.env.io.as_ref(), &self.dir);
        }
    }

    /// Makes a write visible to readers.
    pub(super) fn publish(&self, written: &Written) {
        written.segment.set_visible_len(written.len);
        self.visible_next
            .fetch_max(written.next_offset, Ordering::AcqRel);
    }

    /// Returns once every write up to `seq` is synced, syncing itself if no other
    /// thread is (group commit).
    pub(super) fn sync_through(&self, seq: u64) -> Result<(), StorageError> {
        let mut st = self.commit.lock();
        loop {
            if st.synced_seq >= seq {
                return Ok(());
            }
            self.check_poison()?;
            if st.syncing {
                self.commit.synced.wait(&mut st);
                continue;
            }
            let Some(target) = st.latest.clone() else {
                // Nothing was ever written, so there is nothing to wait for.
                return Ok(());
            };
            st.syncing = true;
            drop(st);
            let mut guard = SyncInProgress {
                log: self,
                finished: false,
            };
            let started = std::time::Instant::now();
            let result = target.file.sync_data();
            crate::stats::observe_fsync(started.elapsed());
            guard.finished = true;
            if result.is_ok() {
                // Only one thread syncs at a time, so recovery points are written in order.
                self.advance_recovery_point(RecoveryPoint {
                    segment_base: target.segment.base_offset,
                    position: target.len,
                    next_offset: target.next_offset,
                    max_timestamp_us: target.max_ts,
                });
            }
            let now = self.env.clock.now_us();
            st = self.commit.lock();
            st.syncing = false;
            match result {
                Ok(()) => {
                    st.synced_seq = st.synced_seq.max(target.seq);
                    st.last_sync_us = Some(now);
                    self.publish(&target);
                    self.commit.synced.notify_all();
                }
                Err(e) => {
                    // Never retry a failed fsync: the kernel may have dropped the dirty
                    // pages, so a later "successful" sync would prove nothing.
                    self.poison_with("fsync");
                    self.commit.synced.notify_all();
                    return Err(io_err("sync segment", &target.segment.path)(e));
                }
            }
        }
    }

    /// Syncs everything appended so far.
    pub fn sync(&self) -> Result<(), StorageError> {
        let seq = self.commit.lock().latest.as_ref().map_or(0, |w| w.seq);
        self.sync_through(seq)
    }

    /// Under [`Durability::Interval`], syncs if unsynced data is older than the interval.
    /// Returns whether it synced. A timer should call this so an idle tail is synced too.
    pub fn sync_if_due(&self) -> Result<bool, StorageError> {
        let Durability::Interval(interval) = self.durability() else {
            return Ok(false);
        };
        let (seq, due) = {
            let st = self.commit.lock();
            let Some(latest) = &st.latest else {
                return Ok(false);
            };
            let now = self.env.clock.now_us();
            let interval_us = i64::try_from(interval.as_micros()).unwrap_or(i64::MAX);
            let due = latest.seq > st.synced_seq
                && st
                    .last_sync_us
                    .is_none_or(|last| now.saturating_sub(last) >= interval_us);
            (latest.seq, due)
        };
        if due {
            self.sync_through(seq)?;
        }
        Ok(due)
    }

    /// Write-behind and drop-behind, for a timer to call often (the broker's
    /// [`Flusher`](crate::Flusher), every 10 ms).
    ///
    /// Under [`Durability::Interval`], or with a cache tail while `memory` is
    /// [`Memory::Short`], starts (does not wait for) writeback of the whole pages of the
    /// active segment written since the last call, once there is at least 1 MiB of
    /// them: the periodic sync then finds little left to write, appends do not stall
    /// behind a second's worth of writeback, and what drop-behind gives back is clean.
    /// (Starting it only half the tail behind the end was measured too: 0.77x the
    /// sustained rate.) While memory is ample a `never` log's writeback is left to the
    /// kernel: done during a burst of writes on few cores it cost 4 partitions written
    /// at once 0.64x their rate.
    ///
    /// With a cache tail ([`LogConfig::cache_tail_bytes`](crate::LogConfig)), and while
    /// `memory` is [`Memory::Short`] ([`MemoryWatch`](crate::MemoryWatch)), drops from
    /// the page cache what lies more than the tail behind the log's end and was written
    /// back (waiting for that writeback, which started long before): 8 MiB or more of
    /// the active segment at a time, from where the last drop ended, and the segment
    /// sealed before it once the active segment alone holds the tail. While memory is
    /// ample nothing is dropped: readers catching up find the log in the cache, and
    /// segments sealed meanwhile are left to the kernel's reclaim.
    ///
    /// Both are hints: failures are logged, not returned; durability still comes only
    /// from the sync, and what a read returns does not change.
    pub fn write_behind(&self, memory: Memory) {
        let tail = self
            .config
            .cache_tail_bytes
            .filter(|_| memory == Memory::Short);
        let interval = matches!(self.durability(), Durability::Interval(_));
        if tail.is_none() && !interval {
            return;
        }
        let Some(latest) = self.commit.lock().latest.clone() else {
            return;
        };
        let mut b = self.behind.lock();
        let current = b
            .active
            .as_ref()
            .is_some_and(|a| std::ptr::eq(a.as_ptr(), Arc::as_ptr(&latest.segment)));
        if !current {
            // A roll, or the first call: the old active segment is sealed. At most one
            // sealed segment waits; an older one still waiting is dropped now (or left
            // to the kernel while memory is ample).
            if let Some(older) = b.sealed.take()
                && tail.is_some()
                && let Some(seg) = older.0.upgrade()
            {
                drop_cached(&seg, None, older.1, seg.visible_len());
            }
            let dropped = b.dropped;
            b.sealed = b.active.take().map(|a| (a, dropped));
            b.active = Some(Arc::downgrade(&latest.segment));
            b.written_back = 0;
            b.dropped = 0;
        }
        let to = latest.len - latest.len % PAGE;
        if to >= b.written_back + WRITE_BEHIND_BYTES {
            if let Err(e) = latest
                .file
                .start_writeback(b.written_back, to - b.written_back)
            {
                tracing::debug!(segment = %latest.segment.path.display(), error = %e, "write-behind hint failed");
            }
            b.written_back = to;
        }
        let Some(tail) = tail else {
            return;
        };
        if latest.len >= tail
            && let Some((sealed, from)) = b.sealed.take()
            && let Some(seg) = sealed.upgrade()
        {
            drop_cached(&seg, None, from, seg.visible_len());
        }
        let keep = latest.len.saturating_sub(tail);
        let upto = (keep - keep % PAGE).min(b.written_back);
        if upto >= b.dropped + DROP_BEHIND_BYTES {
            drop_cached(&latest.segment, Some(&latest.file), b.dropped, upto);
            b.dropped = upto;
        }
    }
}
