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
//! File I/O is synchronous in the async calls: the metadata group writes little. Before
//! it serves clients, the writes move off the runtime's threads and onto the `Io` seam
//! of rill-storage, so the power-loss model covers them (docs/REPLICATION.md §12).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Cursor, Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{EntryPayload, LogState, OptionalSend, RaftLogReader, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

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

/// A frame's body may not be larger than this (a corrupt length is not allocated).
const FRAME_MAX: u32 = 64 << 20;

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Writes `bytes` to `path` so that after a crash the file is either the old one or
/// the new one, whole.
fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    sync_dir(path)
}

fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| invalid(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(invalid)?;
    replace_file(path, &bytes)
}

/// One entry as a frame of `meta.log`.
pub fn encode_entry(entry: &MetaEntry) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(entry).map_err(invalid)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= FRAME_MAX)
        .ok_or_else(|| invalid("a metadata entry is too large"))?;
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The entries of a `meta.log` file, and the length of its whole frames (a torn tail
/// after it is not an error; damage before the last frame is).
pub fn decode_log(bytes: &[u8]) -> io::Result<(Vec<MetaEntry>, usize)> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < 8 {
            // A torn header at the end.
            break;
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        let end = 8 + len as usize;
        let last = end >= rest.len();
        if len > FRAME_MAX || end > rest.len() || crc32c::crc32c(&rest[8..end]) != crc {
            if last || end > rest.len() {
                // The last frame, torn by a crash before its fsync: never reported durable.
                break;
            }
            return Err(invalid(format!(
                "meta.log: a damaged entry at byte {at}, before the end"
            )));
        }
        let entry: MetaEntry = serde_json::from_slice(&rest[8..end])
            .map_err(|e| invalid(format!("meta.log: entry at byte {at}: {e}")))?;
        entries.push(entry);
        at += end;
    }
    Ok((entries, at))
}

#[derive(Debug)]
struct LogInner {
    dir: PathBuf,
    /// The log, by index (the metadata log is small enough to hold).
    log: BTreeMap<u64, MetaEntry>,
    /// The open log file, appended to.
    file: File,
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
        replace_file(&path, &bytes)?;
        self.file = OpenOptions::new().append(true).open(&path)?;
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
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let path = dir.join("meta.log");
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let (entries, whole) = decode_log(&bytes)?;
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        if whole < bytes.len() {
            file.set_len(whole as u64)?;
            file.sync_all()?;
        }
        let last_purged = read_json(&dir.join("meta.purged"))?;
        let vote = read_json(&dir.join("meta.vote"))?;
        let log = entries.into_iter().map(|e| (e.index(), e)).collect();
        Ok(Self {
            inner: Arc::new(Mutex::new(LogInner {
                dir,
                log,
                file,
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
        write_json(&inner.dir.join("meta.vote"), vote)?;
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
        let mut bytes = Vec::new();
        let mut added = Vec::new();
        for entry in entries {
            bytes.extend_from_slice(&encode_entry(&entry)?);
            added.push(entry);
        }
        let result = inner
            .file
            .write_all(&bytes)
            .and_then(|()| inner.file.sync_data());
        if let Err(e) = &result {
            // What was written is not known to be whole: the log is rewritten from
            // memory (without these entries) before anything else is appended.
            tracing::error!(error = %e, "appending to the metadata log failed");
            inner.rewrite()?;
            callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
            return result;
        }
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
        write_json(&inner.dir.join("meta.purged"), &log_id)?;
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
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let snapshot: Option<StoredSnapshot> = read_json(&dir.join("meta.snapshot"))?;
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
        write_json(&inner.dir.join("meta.snapshot"), &stored)?;
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
        write_json(&inner.dir.join("meta.snapshot"), &stored)?;
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
