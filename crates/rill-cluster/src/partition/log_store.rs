//! The log store of a partition group: batches in the partition's segments, one
//! pointer per entry in `raft/entries`, the vote in `raft/vote`, the purge point in
//! `raft/purged` (docs/REPLICATION.md §5).
//!
//! An append writes each data entry's batch to the segments (a leader's proposal
//! stamped there, a replica's batch as it came), then the pointers, all in one write.
//! The library hears that they are durable from a flusher thread, in order: under the
//! topic's `always` policy once the segments (a group commit shared with every append
//! waiting) and the pointer file are fsynced, under `interval` and `never` at once
//! (§6.2). At open, the two are made to agree: pointers whose batch did not survive are
//! cut (with every pointer after them), and batches after the last pointer are cut
//! (they were never reported durable).
//!
//! Reads of the recent tail come from memory (the last [`TAIL_CACHE_BYTES`] of batches,
//! and always every batch not yet synced, which the segments do not serve to readers
//! yet), older entries from the segments.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};

use bytes::{Bytes, BytesMut};
use openraft::alias::{LogIdOf, StoredMembershipOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{EntryPayload, LogState, OptionalSend, RaftLogReader};
use parking_lot::Mutex;
use rill_format::{BATCH_HEADER_LEN, stamp};
use rill_storage::{
    Durability, DurableTicket, Io, IoFile, LogConfig, LogEnv, PartitionLog, StorageError,
};
use serde::{Deserialize, Serialize};

use super::pointer::{Pointer, PointerKind};
use super::{PartitionCommand, PartitionEntry, PartitionTypes};
use crate::files::{
    decode_frames, ensure_dir, invalid, push_frame, read_file, read_json, replace_file, write_json,
};

/// Bytes of recent batches a store keeps in memory for reads (more only while they are
/// not yet synced).
pub const TAIL_CACHE_BYTES: usize = 64 << 20;
/// Appends waiting for the flusher at most; an append waits for room beyond.
const FLUSH_QUEUE: usize = 1024;
/// Durability notices the flusher handles with one sync at most.
const FLUSH_BATCH: usize = 256;

mod tune;

fn storage_err(e: StorageError) -> io::Error {
    io::Error::other(e)
}

/// The purge point: the last purged entry and the offset after the batches up to it;
/// after an install, also the snapshot's membership (the purge point is then the
/// snapshot, docs/REPLICATION.md §7.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Purged {
    pub(crate) log_id: LogIdOf<PartitionTypes>,
    pub(crate) next_offset: u64,
    #[serde(default)]
    pub(crate) membership: Option<StoredMembershipOf<PartitionTypes>>,
    /// Where the range is sealed, when a seal entry was purged (docs/RANGES.md §9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sealed: Option<u64>,
}

/// A pointer and its frame's position in `raft/entries`.
#[derive(Debug, Clone)]
struct Placed {
    pointer: Pointer,
    position: u64,
}

#[derive(Debug)]
struct State {
    /// Pointers by index, oldest first, consecutive.
    entries: VecDeque<Placed>,
    /// The pointer file, appended to at `len`.
    file: Arc<dyn IoFile>,
    len: u64,
    purged: Option<Purged>,
    vote: Option<VoteOf<PartitionTypes>>,
}

impl State {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|p| p.pointer.index())
    }

    fn last_index(&self) -> Option<u64> {
        self.entries
            .back()
            .map(|p| p.pointer.index())
            .or(self.purged.as_ref().map(|p| p.log_id.index))
    }

    /// The offset after the last batch of the log (or of the purge point).
    fn next_offset(&self, log_start: u64) -> u64 {
        self.entries
            .iter()
            .rev()
            .find_map(|p| p.pointer.offsets())
            .map(|(_, next)| next)
            .or(self.purged.as_ref().map(|p| p.next_offset))
            .unwrap_or(log_start)
    }

    /// The seal entry's index and end, if the log holds one (or purged one). No batch
    /// follows a seal, so the search stops at the last batch.
    fn sealed(&self) -> Option<(u64, u64)> {
        self.entries
            .iter()
            .rev()
            .take_while(|p| p.pointer.offsets().is_none())
            .find_map(|p| p.pointer.seal().map(|end| (p.pointer.index(), end)))
            .or_else(|| {
                let p = self.purged.as_ref()?;
                p.sealed.map(|end| (p.log_id.index, end))
            })
    }

    /// Position in `entries` of the pointer at `index`.
    fn slot(&self, index: u64) -> Option<usize> {
        let first = self.first_index()?;
        let at = usize::try_from(index.checked_sub(first)?).ok()?;
        (at < self.entries.len()).then_some(at)
    }
}

/// Recent batches by entry index (increasing), stamped.
#[derive(Debug, Default)]
struct TailCache {
    entries: VecDeque<(u64, u64, Bytes)>,
    bytes: usize,
}

impl TailCache {
    fn get(&self, index: u64) -> Option<Bytes> {
        let at = self.entries.binary_search_by_key(&index, |e| e.0).ok()?;
        Some(self.entries[at].2.clone())
    }

    /// Adds entry `index`'s batch, ending at `next_offset`; drops the oldest while over
    /// the bound, but never one the segments do not serve yet (ending above `visible`).
    fn push(&mut self, index: u64, next_offset: u64, bytes: Bytes, visible: u64) {
        self.bytes += bytes.len();
        self.entries.push_back((index, next_offset, bytes));
        while self.bytes > TAIL_CACHE_BYTES
            && self
                .entries
                .front()
                .is_some_and(|(_, next, _)| *next <= visible)
        {
            let (_, _, b) = self.entries.pop_front().expect("not empty");
            self.bytes -= b.len();
        }
    }

    fn truncate_from(&mut self, index: u64) {
        while self.entries.back().is_some_and(|(i, _, _)| *i >= index) {
            let (_, _, b) = self.entries.pop_back().expect("not empty");
            self.bytes -= b.len();
        }
    }

    fn purge_to(&mut self, index: u64) {
        while self.entries.front().is_some_and(|(i, _, _)| *i <= index) {
            let (_, _, b) = self.entries.pop_front().expect("not empty");
            self.bytes -= b.len();
        }
    }
}

struct Flush {
    ticket: DurableTicket,
    /// The log the ticket is of (an install replaces the log).
    log: Arc<PartitionLog>,
    callback: IOFlushed<PartitionTypes>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) io: Arc<dyn Io>,
    /// The partition's directory (its log's files) and its `raft/` directory.
    pub(crate) partition_dir: PathBuf,
    pub(crate) dir: PathBuf,
    /// The log's options; a topic's alter changes its durability and retention
    /// (`tune.rs`), which a log reopened after an install keeps.
    pub(crate) config: parking_lot::RwLock<LogConfig>,
    /// Whether the flusher syncs the pointer file: under `always` (changed with it).
    pub(crate) sync_pointers: Arc<AtomicBool>,
    pub(crate) env: LogEnv,
    /// The log; an install that replaces it whole swaps it.
    log: parking_lot::RwLock<Arc<PartitionLog>>,
    state: Mutex<State>,
    cache: Mutex<TailCache>,
    /// The pointer file as the flusher syncs it (replaced when the file is rewritten).
    current_file: Arc<Mutex<Arc<dyn IoFile>>>,
    flusher: Mutex<Option<SyncSender<Flush>>>,
}

impl Debug for Flush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flush")
            .field("ticket", &self.ticket)
            .finish()
    }
}

/// A partition group's Raft log over the partition's segments. Cheap to clone (clones
/// share it); its reader is a clone.
#[derive(Debug, Clone)]
pub struct PartitionLogStore {
    pub(crate) shared: Arc<Shared>,
}

impl PartitionLogStore {
    /// Opens the partition in `partition_dir`: its log (recovered; an install that
    /// committed is finished first, one that did not is discarded) and its `raft/`
    /// directory; makes the pointers and the segments agree (see the module's
    /// documentation).
    pub fn open(partition_dir: &Path, config: LogConfig, env: &LogEnv) -> io::Result<Self> {
        let io = Arc::clone(&env.io);
        let dir = partition_dir.join("raft");
        let pending = super::install::recover(io.as_ref(), partition_dir, &dir)?;
        let log = Arc::new(
            PartitionLog::open_in(partition_dir, config.clone(), env).map_err(storage_err)?,
        );
        ensure_dir(io.as_ref(), &dir)?;
        let path = dir.join("entries");
        let existed = io.exists(&path);
        let bytes = read_file(io.as_ref(), &path)?.unwrap_or_default();
        let (frames, whole) = decode_frames(&bytes, "raft/entries")?;
        let file = io.open(&path, true)?;
        if !existed {
            io.sync_dir(&dir)?;
        }
        let mut purged: Option<Purged> = read_json(io.as_ref(), &dir.join("purged"))?;
        if let Some(p) = &pending {
            // A committed install: its purge point holds, whatever was written after it.
            write_json(io.as_ref(), &dir.join("purged"), p)?;
            purged = Some(p.clone());
        }
        let vote = read_json(io.as_ref(), &dir.join("vote"))?;
        let mut entries = VecDeque::with_capacity(frames.len());
        for (position, body) in frames {
            let pointer = Pointer::decode(body)
                .map_err(|e| invalid(format!("raft/entries at byte {position}: {e}")))?;
            // Pointers at or below the purge point (a crash between writing the point
            // and rewriting the file) are not served.
            if purged
                .as_ref()
                .is_some_and(|p| pointer.index() <= p.log_id.index)
            {
                continue;
            }
            if let Some(last) = entries.back() {
                let last: &Placed = last;
                if pointer.index() != last.pointer.index() + 1 {
                    return Err(invalid(format!(
                        "raft/entries: entry {} follows entry {}",
                        pointer.index(),
                        last.pointer.index()
                    )));
                }
            }
            entries.push_back(Placed {
                pointer,
                position: position as u64,
            });
        }
        let mut state = State {
            entries,
            file: Arc::clone(&file),
            len: whole as u64,
            purged,
            vote,
        };
        let cut = reconcile(&mut state, &log)?;
        if cut || whole < bytes.len() {
            state.file.set_len(state.len)?;
            state.file.sync_data()?;
        }
        let current_file = Arc::new(Mutex::new(Arc::clone(&state.file)));
        let (tx, rx) = std::sync::mpsc::sync_channel(FLUSH_QUEUE);
        let sync_pointers = Arc::new(AtomicBool::new(config.durability == Durability::Always));
        {
            let current_file = Arc::clone(&current_file);
            let sync_pointers = Arc::clone(&sync_pointers);
            std::thread::Builder::new()
                .name("rill-raft-flush".into())
                .spawn(move || flusher(&rx, &current_file, &sync_pointers))?;
        }
        let store = Self {
            shared: Arc::new(Shared {
                io,
                partition_dir: partition_dir.to_path_buf(),
                dir,
                config: parking_lot::RwLock::new(config),
                sync_pointers,
                env: env.clone(),
                log: parking_lot::RwLock::new(log),
                state: Mutex::new(state),
                cache: Mutex::new(TailCache::default()),
                current_file,
                flusher: Mutex::new(Some(tx)),
            }),
        };
        if let Some(purged) = pending {
            // The install had committed: finish what it had not written yet.
            store.installed(purged)?;
            super::install::finish(store.shared.io.as_ref(), &store.shared.dir)?;
        }
        Ok(store)
    }

    /// The disk the store writes through.
    pub fn io(&self) -> &Arc<dyn Io> {
        &self.shared.io
    }

    /// The partition's `raft/` directory.
    pub fn raft_dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The options of the partition's log.
    pub fn config(&self) -> LogConfig {
        self.shared.config.read().clone()
    }

    /// The environment the partition's log was opened in.
    pub fn env(&self) -> &LogEnv {
        &self.shared.env
    }

    /// The partition's log (an install may replace it: do not keep it).
    pub fn log(&self) -> Arc<PartitionLog> {
        Arc::clone(&self.shared.log.read())
    }

    /// Replaces the log with the one now in the partition's directory (an install
    /// swapped its files).
    pub(crate) fn reopen_log(&self) -> io::Result<()> {
        let shared = &self.shared;
        let config = shared.config.read().clone();
        let log = PartitionLog::open_in(&shared.partition_dir, config, &shared.env)
            .map_err(storage_err)?;
        *shared.log.write() = Arc::new(log);
        Ok(())
    }

    /// The pointers of entries `[from, to)` that the store holds.
    pub fn pointers(&self, from: u64, to: u64) -> Vec<Pointer> {
        let state = self.shared.state.lock();
        state
            .entries
            .iter()
            .filter(|p| (from..to).contains(&p.pointer.index()))
            .map(|p| p.pointer.clone())
            .collect()
    }

    /// The offset after the batches of the entries up to `index` (the end of what a
    /// replica that holds them holds).
    pub fn next_offset_at(&self, index: u64) -> u64 {
        let log_start = self.log().log_start();
        let state = self.shared.state.lock();
        state
            .entries
            .iter()
            .rev()
            .filter(|p| p.pointer.index() <= index)
            .find_map(|p| p.pointer.offsets())
            .map(|(_, next)| next)
            .or_else(|| {
                state
                    .purged
                    .as_ref()
                    .filter(|p| p.log_id.index <= index)
                    .map(|p| p.next_offset)
            })
            .unwrap_or(log_start)
    }

    /// The index of the last entry whose batch ends at or before `offset` (`None` when
    /// the log holds none): how far a purge may go to drop the segments below `offset`.
    pub fn last_index_ending_by(&self, offset: u64) -> Option<u64> {
        let state = self.shared.state.lock();
        state
            .entries
            .iter()
            .filter_map(|p| {
                p.pointer
                    .offsets()
                    .map(|(_, next)| (p.pointer.index(), next))
            })
            .take_while(|&(_, next)| next <= offset)
            .last()
            .map(|(index, _)| index)
    }

    /// The offset after the last batch of the log, as the pointers say.
    pub fn next_offset(&self) -> u64 {
        let log_start = self.log().log_start();
        self.shared.state.lock().next_offset(log_start)
    }

    /// The seal entry this log holds (committed or not), as its index and the offset
    /// the range is sealed at (docs/RANGES.md §9).
    pub fn sealed(&self) -> Option<(u64, u64)> {
        self.shared.state.lock().sealed()
    }

    /// Stops the flusher thread once the durability notices queued before have been
    /// sent (clones of the store cannot append afterwards).
    pub fn close(&self) {
        self.shared.flusher.lock().take();
    }

    /// After a snapshot was installed: the purge point is the snapshot's last entry,
    /// with the log ending at `next_offset`; every pointer up to it goes.
    pub(crate) fn installed(&self, purged: Purged) -> io::Result<()> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        let index = purged.log_id.index;
        write_json(shared.io.as_ref(), &shared.dir.join("purged"), &purged)?;
        state.purged = Some(purged);
        while state
            .entries
            .front()
            .is_some_and(|p| p.pointer.index() <= index)
        {
            state.entries.pop_front();
        }
        rewrite(shared, &mut state)?;
        shared.cache.lock().purge_to(index);
        Ok(())
    }

    /// The purge point, if the log was ever purged (or a snapshot installed).
    pub(crate) fn purged(&self) -> Option<Purged> {
        self.shared.state.lock().purged.clone()
    }

    /// Entry `index`'s batch: from memory, or from the segments.
    fn batch(&self, index: u64, base: u64, len: u32) -> io::Result<Bytes> {
        if let Some(b) = self.shared.cache.lock().get(index) {
            return Ok(b);
        }
        let log = self.log();
        if base >= log.next_offset() {
            // Written but not synced yet, and no longer in memory: sync, so the segments
            // serve it.
            log.sync().map_err(storage_err)?;
        }
        let read = log.read(base, len as usize).map_err(storage_err)?;
        let batch = read
            .batches()
            .next()
            .ok_or_else(|| invalid(format!("the batch at offset {base} is not in the log")))?
            .map_err(|e| invalid(format!("the batch at offset {base}: {e}")))?;
        if batch.base_offset() != base || batch.as_bytes().len() != len as usize {
            return Err(invalid(format!(
                "the log holds a batch at {} of {} bytes where entry {index} points at {base} ({len} bytes)",
                batch.base_offset(),
                batch.as_bytes().len()
            )));
        }
        Ok(Bytes::copy_from_slice(batch.as_bytes()))
    }
}

/// Makes pointers and segments agree after a crash; returns whether pointers were cut.
fn reconcile(state: &mut State, log: &PartitionLog) -> io::Result<bool> {
    let floor = state
        .purged
        .as_ref()
        .map_or(log.log_start(), |p| p.next_offset);
    let end = log.next_offset();
    if end < floor {
        return Err(invalid(format!(
            "the partition's log ends at offset {end}, below its Raft purge point's {floor}: its data is missing"
        )));
    }
    let mut expected = floor;
    let mut keep = state.entries.len();
    for (i, placed) in state.entries.iter().enumerate() {
        if let Some((base, next)) = placed.pointer.offsets() {
            if base != expected {
                return Err(invalid(format!(
                    "raft/entries: entry {} points at offset {base}, expected {expected}",
                    placed.pointer.index()
                )));
            }
            if next > end {
                // Its batch did not survive the crash: it and everything after were never
                // reported durable.
                keep = i;
                break;
            }
            expected = next;
        }
    }
    let cut = keep < state.entries.len();
    if cut {
        tracing::warn!(dir = %log.dir().display(), from = state.entries[keep].pointer.index(), "cut entry pointers whose batches did not survive a crash");
        state.len = state.entries[keep].position;
        state.entries.truncate(keep);
    }
    if end > expected {
        tracing::warn!(dir = %log.dir().display(), from = expected, to = end, "cut batches that no entry pointer names");
        log.truncate_from(expected).map_err(storage_err)?;
    }
    Ok(cut)
}

/// Rewrites the pointer file from `state`, atomically.
fn rewrite(shared: &Shared, state: &mut State) -> io::Result<()> {
    let mut bytes = Vec::new();
    for placed in &mut state.entries {
        placed.position = bytes.len() as u64;
        push_frame(&mut bytes, &placed.pointer.encode()?)?;
    }
    let path = shared.dir.join("entries");
    replace_file(shared.io.as_ref(), &path, &bytes)?;
    state.file = shared.io.open(&path, false)?;
    state.len = bytes.len() as u64;
    *shared.current_file.lock() = Arc::clone(&state.file);
    Ok(())
}

/// Tells the library appends are durable, in order, one sync for many.
fn flusher(rx: &Receiver<Flush>, pointers: &Mutex<Arc<dyn IoFile>>, sync_pointers: &AtomicBool) {
    while let Ok(first) = rx.recv() {
        let mut flushes = vec![first];
        while flushes.len() < FLUSH_BATCH {
            match rx.try_recv() {
                Ok(more) if Arc::ptr_eq(&more.log, &flushes[0].log) => flushes.push(more),
                Ok(other) => {
                    // Another log (after an install): its own round.
                    let sync = sync_pointers.load(Ordering::Acquire);
                    flush(std::mem::take(&mut flushes), pointers, sync);
                    flushes.push(other);
                }
                Err(_) => break,
            }
        }
        flush(flushes, pointers, sync_pointers.load(Ordering::Acquire));
    }
}

/// One sync for appends to one log, then their notices, in order.
fn flush(flushes: Vec<Flush>, pointers: &Mutex<Arc<dyn IoFile>>, sync_pointers: bool) {
    let Some(first) = flushes.first() else {
        return;
    };
    let log = Arc::clone(&first.log);
    let ticket = flushes
        .iter()
        .map(|f| f.ticket)
        .max()
        .unwrap_or(DurableTicket::DURABLE);
    let result = log
        .wait_durable(ticket)
        .map_err(storage_err)
        .and_then(|()| {
            if sync_pointers {
                let file = Arc::clone(&*pointers.lock());
                file.sync_data()
            } else {
                Ok(())
            }
        });
    if let Err(e) = &result {
        tracing::error!(dir = %log.dir().display(), error = %e, "making Raft entries durable failed");
    }
    for f in flushes {
        let outcome = match &result {
            Ok(()) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        };
        f.callback.io_completed(outcome);
    }
}

/// The stamped copy of a batch the log stamped at `base` and `timestamp_us`.
fn stamped_copy(batch: &[u8], base: u64, timestamp_us: i64) -> io::Result<Bytes> {
    let mut out = BytesMut::with_capacity(batch.len());
    out.extend_from_slice(batch);
    stamp(&mut out[..BATCH_HEADER_LEN], base, timestamp_us).map_err(invalid)?;
    Ok(out.freeze())
}

impl RaftLogReader<PartitionTypes> for PartitionLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<PartitionEntry>, io::Error> {
        let from = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        };
        let pointers = self.pointers(from, to);
        let mut entries = Vec::with_capacity(pointers.len());
        for p in pointers {
            let entry = match p.kind {
                PointerKind::Blank => PartitionEntry::new_blank(p.log_id),
                PointerKind::Membership(m) => PartitionEntry::new_membership(p.log_id, m),
                PointerKind::Seal { end } => {
                    PartitionEntry::new_normal(p.log_id, PartitionCommand::Sealed(end))
                }
                PointerKind::Data {
                    base_offset, bytes, ..
                } => {
                    let batch = self.batch(p.log_id.index, base_offset, bytes)?;
                    PartitionEntry::new_normal(p.log_id, PartitionCommand::Batch(batch))
                }
            };
            entries.push(entry);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<PartitionTypes>>, io::Error> {
        Ok(self.shared.state.lock().vote)
    }
}

impl RaftLogStorage<PartitionTypes> for PartitionLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<PartitionTypes>, io::Error> {
        let state = self.shared.state.lock();
        let purged = state.purged.as_ref().map(|p| p.log_id);
        let last = state.entries.back().map(|p| p.pointer.log_id).or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<PartitionTypes>) -> Result<(), io::Error> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        write_json(shared.io.as_ref(), &shared.dir.join("vote"), vote)?;
        state.vote = Some(*vote);
        Ok(())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<PartitionTypes>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = PartitionEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let shared = &self.shared;
        let log = self.log();
        // Where the log ends as entries are appended: a seal is stamped with it (the
        // log's own visible end may lag writes not yet durable).
        let (mut expected, mut sealed, mut next) = {
            let state = shared.state.lock();
            (
                state.last_index().map(|i| i + 1),
                state.sealed().is_some(),
                state.next_offset(log.log_start()),
            )
        };
        let mut frames = Vec::new();
        let mut added = Vec::new();
        let mut cached = Vec::new();
        let mut ticket = DurableTicket::DURABLE;
        for entry in entries {
            let log_id = entry.log_id;
            if expected.is_some_and(|e| e != log_id.index) {
                return Err(invalid(format!(
                    "appending entry {} where entry {} is next",
                    log_id.index,
                    expected.unwrap_or_default()
                )));
            }
            expected = Some(log_id.index + 1);
            let kind = match entry.payload {
                EntryPayload::Blank => PointerKind::Blank,
                EntryPayload::Membership(m) => PointerKind::Membership(m),
                // A second seal (two racing sealers): the first stands.
                EntryPayload::Normal(PartitionCommand::Seal) if sealed => PointerKind::Blank,
                EntryPayload::Normal(PartitionCommand::Seal) => {
                    sealed = true;
                    PointerKind::Seal { end: next }
                }
                EntryPayload::Normal(PartitionCommand::Sealed(end)) => {
                    if next != end {
                        return Err(invalid(format!(
                            "a seal at offset {end} where the log ends at {next}"
                        )));
                    }
                    sealed = true;
                    PointerKind::Seal { end }
                }
                // A batch proposed after a seal (a leader checks before proposing; this
                // is the last line): never appended, applied as a refusal.
                EntryPayload::Normal(PartitionCommand::Propose(_)) if sealed => PointerKind::Blank,
                EntryPayload::Normal(command) => {
                    let (stored, appended, t) = match command {
                        PartitionCommand::Seal | PartitionCommand::Sealed(_) => {
                            unreachable!("seals are matched above")
                        }
                        PartitionCommand::Propose(batch) => {
                            let (a, t) = log.append_deferred(&batch).map_err(storage_err)?;
                            (stamped_copy(&batch, a.base_offset, a.timestamp_us)?, a, t)
                        }
                        PartitionCommand::Batch(batch) => {
                            let (a, t) = log.append_stamped(&batch).map_err(storage_err)?;
                            (batch, a, t)
                        }
                    };
                    ticket = ticket.max(t);
                    next = appended.last_offset + 1;
                    let kind = PointerKind::Data {
                        base_offset: appended.base_offset,
                        next_offset: appended.last_offset + 1,
                        bytes: u32::try_from(stored.len()).map_err(invalid)?,
                    };
                    cached.push((log_id.index, appended.last_offset + 1, stored));
                    kind
                }
            };
            let pointer = Pointer { log_id, kind };
            let at = frames.len() as u64;
            push_frame(&mut frames, &pointer.encode()?)?;
            added.push((pointer, at));
        }
        if added.is_empty() {
            callback.io_completed(Ok(()));
            return Ok(());
        }
        {
            let mut state = shared.state.lock();
            let base = state.len;
            state.file.write_all_at(&frames, base)?;
            state.len += frames.len() as u64;
            for (pointer, at) in added {
                state.entries.push_back(Placed {
                    pointer,
                    position: base + at,
                });
            }
        }
        {
            let visible = log.next_offset();
            let mut cache = shared.cache.lock();
            for (index, next, bytes) in cached {
                cache.push(index, next, bytes, visible);
            }
        }
        let sender = shared.flusher.lock().clone();
        match sender {
            Some(tx) => tx
                .send(Flush {
                    ticket,
                    log,
                    callback,
                })
                .map_err(|_| io::Error::other("the store's flusher stopped"))?,
            None => return Err(io::Error::other("the store is closed")),
        }
        Ok(())
    }

    async fn truncate_after(
        &mut self,
        last_log_id: Option<LogIdOf<PartitionTypes>>,
    ) -> Result<(), io::Error> {
        let shared = &self.shared;
        let from = last_log_id.map_or(0, |id| id.index + 1);
        let cut_offset = {
            let mut state = shared.state.lock();
            let Some(at) = state
                .slot(from)
                .or_else(|| (state.first_index() > Some(from)).then_some(0))
            else {
                return Ok(());
            };
            let offset = state
                .entries
                .iter()
                .skip(at)
                .find_map(|p| p.pointer.offsets())
                .map(|(base, _)| base);
            // The pointers first: a crash after this leaves batches no pointer names,
            // which the next open cuts.
            let position = state.entries[at].position;
            state.file.set_len(position)?;
            state.file.sync_data()?;
            state.len = position;
            state.entries.truncate(at);
            offset
        };
        shared.cache.lock().truncate_from(from);
        if let Some(offset) = cut_offset {
            self.log().truncate_from(offset).map_err(storage_err)?;
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogIdOf<PartitionTypes>) -> Result<(), io::Error> {
        let shared = &self.shared;
        let drop_before = {
            let mut state = shared.state.lock();
            if state
                .purged
                .as_ref()
                .is_some_and(|p| p.log_id.index >= log_id.index)
            {
                return Ok(());
            }
            let log_start = self.log().log_start();
            let next_offset = state
                .entries
                .iter()
                .take_while(|p| p.pointer.index() <= log_id.index)
                .filter_map(|p| p.pointer.offsets())
                .last()
                .map(|(_, next)| next)
                .or(state.purged.as_ref().map(|p| p.next_offset))
                .unwrap_or(log_start);
            let sealed = state
                .sealed()
                .filter(|&(index, _)| index <= log_id.index)
                .map(|(_, end)| end);
            let purged = Purged {
                log_id,
                next_offset,
                membership: None,
                sealed,
            };
            // The purge point first: pointers at or below it are not served after a
            // crash that left them in the file.
            write_json(shared.io.as_ref(), &shared.dir.join("purged"), &purged)?;
            state.purged = Some(purged);
            while state
                .entries
                .front()
                .is_some_and(|p| p.pointer.index() <= log_id.index)
            {
                state.entries.pop_front();
            }
            rewrite(shared, &mut state)?;
            next_offset
        };
        shared.cache.lock().purge_to(log_id.index);
        self.log()
            .remove_segments_before(drop_before)
            .map_err(storage_err)?;
        Ok(())
    }
}
