//! The state machine of a partition group: applying a committed entry moves the high
//! watermark past its batch and answers the proposer with the batch's offsets. The
//! batches themselves are the log's; a snapshot is the log up to the watermark
//! (docs/REPLICATION.md §7.5): sending one sends those batches, and installing one
//! makes the follower's log hold them.

use std::io;
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use rill_format::BatchView;
use rill_storage::PartitionLog;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, watch};

use super::install;
use super::log_store::{PartitionLogStore, Purged};
use super::{PartitionCommand, PartitionResponse, PartitionTypes};
use crate::files::{invalid, read_json, write_json};

/// A partition snapshot: the log from `log_start` to `next_offset` (the high watermark
/// at the snapshot's last entry), read from `source`.
#[derive(Debug, Clone)]
pub struct PartitionSnapshot {
    /// First offset the source still holds.
    pub log_start: u64,
    /// Offset after the snapshot's last batch.
    pub next_offset: u64,
    /// The log the batches are read from.
    pub source: Arc<PartitionLog>,
    /// Where the range is sealed, if a seal entry is among the entries the snapshot
    /// covers (docs/RANGES.md §9): a follower that installs it refuses batches after.
    pub sealed: Option<u64>,
}

/// A snapshot as `raft/snapshot` stores it: its metadata and where its log ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMetaOf<PartitionTypes>,
    next_offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<u64>,
}

#[derive(Debug)]
struct MachineState {
    last_applied: Option<LogIdOf<PartitionTypes>>,
    last_membership: StoredMembershipOf<PartitionTypes>,
    snapshot: Option<StoredSnapshot>,
}

/// A partition group's state machine. Cheap to clone (clones share it).
#[derive(Debug, Clone)]
pub struct PartitionStateMachine {
    store: PartitionLogStore,
    state: Arc<Mutex<MachineState>>,
    high_watermark: Arc<watch::Sender<u64>>,
}

impl PartitionStateMachine {
    /// The state machine of `store`'s partition, from its last snapshot if any (the
    /// library applies the entries after it again).
    pub fn open(store: &PartitionLogStore) -> io::Result<Self> {
        let shared = &store.shared;
        let mut snapshot: Option<StoredSnapshot> =
            read_json(shared.io.as_ref(), &shared.dir.join("snapshot"))?;
        // An install commits with its purge point; the snapshot file after it may not
        // have been written when the process died.
        if let Some(purged) = store.purged()
            && let Some(membership) = purged.membership
            && snapshot
                .as_ref()
                .is_none_or(|s| s.meta.last_log_id < Some(purged.log_id))
        {
            snapshot = Some(StoredSnapshot {
                meta: SnapshotMetaOf::<PartitionTypes> {
                    last_log_id: Some(purged.log_id),
                    last_membership: membership,
                },
                next_offset: purged.next_offset,
                sealed: purged.sealed,
            });
        }
        let (last_applied, last_membership, watermark) = match &snapshot {
            Some(s) => (
                s.meta.last_log_id,
                s.meta.last_membership.clone(),
                s.next_offset,
            ),
            None => (
                None,
                StoredMembershipOf::<PartitionTypes>::default(),
                store.log().log_start(),
            ),
        };
        Ok(Self {
            store: store.clone(),
            state: Arc::new(Mutex::new(MachineState {
                last_applied,
                last_membership,
                snapshot,
            })),
            high_watermark: Arc::new(watch::channel(watermark).0),
        })
    }

    /// The high watermark: readers are served the records below it, all committed.
    pub fn high_watermark(&self) -> u64 {
        *self.high_watermark.borrow()
    }

    /// Watches the high watermark (long polls wait on it).
    pub fn watch_high_watermark(&self) -> watch::Receiver<u64> {
        self.high_watermark.subscribe()
    }

    fn snapshot_of(
        &self,
        stored: &StoredSnapshot,
    ) -> SnapshotOf<PartitionTypes, PartitionSnapshot> {
        let log = self.store.log();
        SnapshotOf::<PartitionTypes, PartitionSnapshot> {
            meta: stored.meta.clone(),
            snapshot: PartitionSnapshot {
                log_start: log.log_start(),
                next_offset: stored.next_offset,
                source: Arc::clone(&log),
                sealed: stored.sealed,
            },
        }
    }

    /// Makes the own log hold the snapshot's batches up to its end, and commits the
    /// install with its purge point (docs/REPLICATION.md §7.5): the own log's committed
    /// prefix is the sender's too (Raft), so only what lies after it is copied — unless
    /// the own log ends before the sender's starts, when it is replaced whole.
    fn install_batches(&self, snapshot: &PartitionSnapshot, purged: Purged) -> io::Result<()> {
        let own = self.store.log();
        let at = own.next_offset();
        if at < snapshot.log_start {
            return install::replace_log(&self.store, snapshot, purged);
        }
        if at < snapshot.next_offset {
            install::copy_batches(&snapshot.source, &own, at, snapshot.next_offset)?;
            own.sync().map_err(io::Error::other)?;
        }
        // (A log that is longer already holds the snapshot's last entry, so its batches:
        // the library cut every conflicting entry before the install.)
        self.store.installed(purged)
    }
}

impl RaftSnapshotBuilder<PartitionTypes> for PartitionStateMachine {
    type SnapshotData = PartitionSnapshot;

    async fn build_snapshot(
        &mut self,
    ) -> Result<SnapshotOf<PartitionTypes, PartitionSnapshot>, io::Error> {
        let mut state = self.state.lock().await;
        let stored = StoredSnapshot {
            meta: SnapshotMetaOf::<PartitionTypes> {
                last_log_id: state.last_applied,
                last_membership: state.last_membership.clone(),
            },
            next_offset: self.high_watermark(),
            sealed: self.store.sealed().and_then(|(index, end)| {
                state
                    .last_applied
                    .is_some_and(|applied| index <= applied.index)
                    .then_some(end)
            }),
        };
        let shared = &self.store.shared;
        write_json(shared.io.as_ref(), &shared.dir.join("snapshot"), &stored)?;
        let snapshot = self.snapshot_of(&stored);
        state.snapshot = Some(stored);
        Ok(snapshot)
    }
}

impl RaftStateMachine<PartitionTypes> for PartitionStateMachine {
    type SnapshotData = PartitionSnapshot;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogIdOf<PartitionTypes>>,
            StoredMembershipOf<PartitionTypes>,
        ),
        io::Error,
    > {
        let state = self.state.lock().await;
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm:
            Stream<Item = Result<EntryResponder<PartitionTypes>, io::Error>> + Unpin + OptionalSend,
    {
        let mut state = self.state.lock().await;
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = match &entry.payload {
                EntryPayload::Blank => PartitionResponse::Done,
                EntryPayload::Normal(PartitionCommand::Batch(bytes)) => {
                    let batch = BatchView::parse(bytes).map_err(invalid)?;
                    let next = batch.next_offset();
                    self.high_watermark.send_if_modified(|w| {
                        let moved = next > *w;
                        *w = (*w).max(next);
                        moved
                    });
                    PartitionResponse::Appended {
                        base_offset: batch.base_offset(),
                        last_offset: next - 1,
                        timestamp_us: batch.first_timestamp_us(),
                    }
                }
                EntryPayload::Normal(PartitionCommand::Sealed(end)) => {
                    PartitionResponse::Sealed { end: *end }
                }
                EntryPayload::Normal(PartitionCommand::Propose(_) | PartitionCommand::Seal) => {
                    return Err(invalid(
                        "an unstamped batch reached the state machine (the log gives back stamped ones)",
                    ));
                }
                EntryPayload::Membership(membership) => {
                    state.last_membership = StoredMembershipOf::<PartitionTypes>::new(
                        Some(entry.log_id),
                        membership.clone(),
                    );
                    PartitionResponse::Done
                }
            };
            state.last_applied = Some(entry.log_id);
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
        meta: &SnapshotMetaOf<PartitionTypes>,
        snapshot: PartitionSnapshot,
    ) -> Result<(), io::Error> {
        let mut state = self.state.lock().await;
        if let Some(log_id) = meta.last_log_id {
            let purged = Purged {
                log_id,
                next_offset: snapshot.next_offset,
                membership: Some(meta.last_membership.clone()),
                sealed: snapshot.sealed,
            };
            self.install_batches(&snapshot, purged)?;
        }
        let stored = StoredSnapshot {
            meta: meta.clone(),
            next_offset: snapshot.next_offset,
            sealed: snapshot.sealed,
        };
        let shared = &self.store.shared;
        write_json(shared.io.as_ref(), &shared.dir.join("snapshot"), &stored)?;
        state.last_applied = meta.last_log_id;
        state.last_membership = meta.last_membership.clone();
        state.snapshot = Some(stored);
        self.high_watermark.send_replace(snapshot.next_offset);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<PartitionTypes, PartitionSnapshot>>, io::Error> {
        let state = self.state.lock().await;
        Ok(state.snapshot.as_ref().map(|s| self.snapshot_of(s)))
    }
}
