//! The metadata group's log store and state machine on disk (docs/REPLICATION.md §4.1).
//!
//! Files in the group's directory:
//! - `meta.log`: the Raft log, one frame per entry: `len u32 LE`, `crc32c u32 LE` of the
//!   body, then the body (the entry as JSON). Appends go to the end and are fsynced
//!   before the library is told they are durable; truncating a suffix or purging a prefix
//!   rewrites the file whole (write a temporary file, fsync, rename, fsync the
//!   directory): the metadata log is small, and a rename is atomic.
//! - `meta.vote`, `meta.purged`: the vote and the last purged log id, each replaced
//!   atomically the same way.
//! - `meta.snapshot`: the last snapshot (its metadata and the state), replaced
//!   atomically; at open the state machine starts from it.
//!
//! At open a torn last frame (short, or a CRC that does not match) is cut: the library
//! was never told it was durable. A bad frame before the last is damage, and opening
//! fails rather than guess.
//!
//! Every file operation goes through rill-storage's `Io` seam, so the power-loss model
//! (`SimIo`) covers the store: a new `meta.log` and a new directory are made durable
//! with their parent directory before anything in them is reported durable. File I/O is
//! synchronous inside the async calls (the metadata group writes little); it moves off
//! the runtime's threads before the store serves clients.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{self, Cursor};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{EntryPayload, LogState, OptionalSend, RaftLogReader, RaftSnapshotBuilder};
use rill_storage::{Io, IoFile, StdIo};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::files::{
    decode_frames, ensure_dir, invalid, push_frame, read_file, read_json, replace_file, write_json,
};
use crate::meta::{MetaCommand, MetaResponse, MetaState};

openraft::declare_raft_types!(
    /// The metadata group's types: commands and responses of [`MetaState`], nodes named
    /// by id only (each node maps ids to addresses from its own `--peers`).
    pub MetaTypes:
        D = MetaCommand,
        R = MetaResponse,
        NodeId = u64,
        Node = openraft::EmptyNode,
);

/// An entry of the metadata log.
pub type MetaEntry = <MetaTypes as openraft::RaftTypeConfig>::Entry;

/// Entries as one frame of `meta.log`: an append writes one frame, so a crash during
/// it tears at most that frame.
pub fn encode_entries(entries: &[MetaEntry]) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(entries).map_err(invalid)?;
    let mut out = Vec::new();
    push_frame(&mut out, &body)?;
    Ok(out)
}

/// One entry as a frame of `meta.log`.
pub fn encode_entry(entry: &MetaEntry) -> io::Result<Vec<u8>> {
    encode_entries(std::slice::from_ref(entry))
}

/// The entries of a `meta.log` file, and the length of its whole frames: a torn last
/// frame ends the log, a bad frame before the last is an error (the frame rules are in
/// the `files` module).
pub fn decode_log(bytes: &[u8]) -> io::Result<(Vec<MetaEntry>, usize)> {
    let (frames, whole) = decode_frames(bytes, "meta.log")?;
    let mut entries = Vec::new();
    for (at, body) in frames {
        let mut batch: Vec<MetaEntry> = serde_json::from_slice(body)
            .map_err(|e| invalid(format!("meta.log: the frame at byte {at}: {e}")))?;
        entries.append(&mut batch);
    }
    Ok((entries, whole))
}

#[derive(Debug)]
struct LogInner {
    io: Arc<dyn Io>,
    dir: PathBuf,
    /// The log, by index (the metadata log is small enough to hold).
    log: BTreeMap<u64, MetaEntry>,
    /// The open log file, appended to at `len`.
    file: Arc<dyn IoFile>,
    len: u64,
    last_purged: Option<LogIdOf<MetaTypes>>,
    vote: Option<VoteOf<MetaTypes>>,
}

impl LogInner {
    fn log_path(&self) -> PathBuf {
        self.dir.join("meta.log")
    }

    /// Rewrites the log file from `log`, atomically.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut bytes = Vec::new();
        for entry in self.log.values() {
            bytes.extend_from_slice(&encode_entry(entry)?);
        }
        let path = self.log_path();
        replace_file(self.io.as_ref(), &path, &bytes)?;
        self.file = self.io.open(&path, false)?;
        self.len = bytes.len() as u64;
        Ok(())
    }
}

/// The metadata group's Raft log on disk. Cheap to clone (clones share the files).
#[derive(Debug, Clone)]
pub struct MetaLogStore {
    inner: Arc<Mutex<LogInner>>,
}

impl MetaLogStore {
    /// Opens (or creates) the log in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Self> {
        Self::open_with(Arc::new(StdIo), dir)
    }

    /// Opens (or creates) the log in `dir`, through `io`.
    pub fn open_with(io: Arc<dyn Io>, dir: impl AsRef<Path>) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        ensure_dir(io.as_ref(), &dir)?;
        let path = dir.join("meta.log");
        let existed = io.exists(&path);
        let bytes = read_file(io.as_ref(), &path)?.unwrap_or_default();
        let (entries, whole) = decode_log(&bytes)?;
        let file = io.open(&path, true)?;
        // Its entries hold the credentials' verifiers (docs/SECURITY.md §2.3).
        io.restrict_to_owner(&path)?;
        if !existed {
            // The new file's entry, durable before anything in it is said to be.
            io.sync_dir(&dir)?;
        }
        if whole < bytes.len() {
            file.set_len(whole as u64)?;
            file.sync_data()?;
        }
        let last_purged: Option<LogIdOf<MetaTypes>> =
            read_json(io.as_ref(), &dir.join("meta.purged"))?;
        let vote = read_json(io.as_ref(), &dir.join("meta.vote"))?;
        // Entries at or below the purge point, left by a crash between writing the point
        // and rewriting the log, are not served.
        let log = entries
            .into_iter()
            .filter(|e| last_purged.is_none_or(|p| e.index() > p.index()))
            .map(|e| (e.index(), e))
            .collect();
        Ok(Self {
            inner: Arc::new(Mutex::new(LogInner {
                io,
                dir,
                log,
                file,
                len: whole as u64,
                last_purged,
                vote,
            })),
        })
    }
}

impl RaftLogReader<MetaTypes> for MetaLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<MetaEntry>, io::Error> {
        let inner = self.inner.lock().await;
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<MetaTypes>>, io::Error> {
        Ok(self.inner.lock().await.vote)
    }
}

impl RaftLogStorage<MetaTypes> for MetaLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<MetaTypes>, io::Error> {
        let inner = self.inner.lock().await;
        let last = inner.log.values().next_back().map(RaftEntry::log_id);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last.or(inner.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<MetaTypes>) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        write_json(inner.io.as_ref(), &inner.dir.join("meta.vote"), vote)?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<MetaTypes>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = MetaEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.inner.lock().await;
        let added: Vec<MetaEntry> = entries.into_iter().collect();
        if added.is_empty() {
            callback.io_completed(Ok(()));
            return Ok(());
        }
        let bytes = encode_entries(&added)?;
        let result = inner
            .file
            .write_all_at(&bytes, inner.len)
            .and_then(|()| inner.file.sync_data());
        if let Err(e) = &result {
            // What was written is not known to be whole: the log is rewritten from
            // memory (without these entries) before anything else is appended.
            tracing::error!(error = %e, "appending to the metadata log failed");
            inner.rewrite()?;
            callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
            return result;
        }
        inner.len += bytes.len() as u64;
        for entry in added {
            inner.log.insert(entry.index(), entry);
        }
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(
        &mut self,
        last_log_id: Option<LogIdOf<MetaTypes>>,
    ) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        let from = last_log_id.map_or(0, |id| id.index() + 1);
        let cut = inner.log.split_off(&from);
        if cut.is_empty() {
            return Ok(());
        }
        inner.rewrite()
    }

    async fn purge(&mut self, log_id: LogIdOf<MetaTypes>) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        // The purge point first: a crash after it and before the rewrite leaves entries
        // the library no longer asks for, which are harmless.
        write_json(inner.io.as_ref(), &inner.dir.join("meta.purged"), &log_id)?;
        inner.last_purged = Some(log_id);
        let keep = inner.log.split_off(&(log_id.index() + 1));
        inner.log = keep;
        inner.rewrite()
    }
}

/// A snapshot as stored: its metadata and the state.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMetaOf<MetaTypes>,
    state: MetaState,
}

#[derive(Debug)]
struct MachineInner {
    io: Arc<dyn Io>,
    dir: PathBuf,
    state: MetaState,
    last_applied: Option<LogIdOf<MetaTypes>>,
    last_membership: StoredMembershipOf<MetaTypes>,
    snapshot: Option<StoredSnapshot>,
}

/// The metadata state machine: [`MetaState`] as of the last applied entry. Cheap to
/// clone (clones share it).
#[derive(Debug, Clone)]
pub struct MetaStateMachine {
    inner: Arc<Mutex<MachineInner>>,
}

impl MetaStateMachine {
    /// Opens the state machine in `dir`, starting from the stored snapshot if any (the
    /// library applies the log after it again).
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Self> {
        Self::open_with(Arc::new(StdIo), dir)
    }

    /// Opens the state machine in `dir`, through `io`.
    pub fn open_with(io: Arc<dyn Io>, dir: impl AsRef<Path>) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        ensure_dir(io.as_ref(), &dir)?;
        let snapshot: Option<StoredSnapshot> = read_json(io.as_ref(), &dir.join("meta.snapshot"))?;
        let (state, last_applied, last_membership) = match &snapshot {
            Some(s) => (
                s.state.clone(),
                s.meta.last_log_id,
                s.meta.last_membership.clone(),
            ),
            None => (
                MetaState::default(),
                None,
                StoredMembershipOf::<MetaTypes>::default(),
            ),
        };
        Ok(Self {
            inner: Arc::new(Mutex::new(MachineInner {
                io,
                dir,
                state,
                last_applied,
                last_membership,
                snapshot,
            })),
        })
    }

    /// A copy of the state as of the last applied entry.
    pub async fn state(&self) -> MetaState {
        self.inner.lock().await.state.clone()
    }
}

impl RaftSnapshotBuilder<MetaTypes> for MetaStateMachine {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<SnapshotOf<MetaTypes, Self::SnapshotData>, io::Error> {
        let mut inner = self.inner.lock().await;
        let stored = StoredSnapshot {
            meta: SnapshotMetaOf::<MetaTypes> {
                last_log_id: inner.last_applied,
                last_membership: inner.last_membership.clone(),
            },
            state: inner.state.clone(),
        };
        write_json(inner.io.as_ref(), &inner.dir.join("meta.snapshot"), &stored)?;
        let data = serde_json::to_vec(&stored.state).map_err(invalid)?;
        let meta = stored.meta.clone();
        inner.snapshot = Some(stored);
        Ok(SnapshotOf::<MetaTypes, Self::SnapshotData> {
            meta,
            snapshot: Cursor::new(data),
        })
    }
}

impl RaftStateMachine<MetaTypes> for MetaStateMachine {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<MetaTypes>>, StoredMembershipOf<MetaTypes>), io::Error> {
        let inner = self.inner.lock().await;
        Ok((inner.last_applied, inner.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<MetaTypes>, io::Error>> + Unpin + OptionalSend,
    {
        let mut inner = self.inner.lock().await;
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = match &entry.payload {
                EntryPayload::Blank => MetaResponse::Done,
                EntryPayload::Normal(command) => inner.state.apply(command),
                EntryPayload::Membership(membership) => {
                    inner.last_membership = StoredMembershipOf::<MetaTypes>::new(
                        Some(entry.log_id),
                        membership.clone(),
                    );
                    MetaResponse::Done
                }
            };
            inner.last_applied = Some(entry.log_id);
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<MetaTypes>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let state: MetaState = serde_json::from_slice(snapshot.get_ref()).map_err(invalid)?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            state,
        };
        let mut inner = self.inner.lock().await;
        write_json(inner.io.as_ref(), &inner.dir.join("meta.snapshot"), &stored)?;
        inner.state = stored.state.clone();
        inner.last_applied = meta.last_log_id;
        inner.last_membership = meta.last_membership.clone();
        inner.snapshot = Some(stored);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<MetaTypes, Self::SnapshotData>>, io::Error> {
        let inner = self.inner.lock().await;
        let Some(stored) = &inner.snapshot else {
            return Ok(None);
        };
        let data = serde_json::to_vec(&stored.state).map_err(invalid)?;
        Ok(Some(SnapshotOf::<MetaTypes, Self::SnapshotData> {
            meta: stored.meta.clone(),
            snapshot: Cursor::new(data),
        }))
    }
}
