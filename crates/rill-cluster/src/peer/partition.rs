//! Partition groups on the node-to-node transport (docs/REPLICATION.md §9).
//!
//! Request kinds, each answered with its kind | `0x80` and a JSON body (or `0xff`):
//!
//! | kind | request | body |
//! |---:|---|---|
//! | 5 | append entries | head, then the data entries' batches back to back |
//! | 6 | vote | JSON `{group, body}` |
//! | 7 | snapshot: begin | JSON: the group, a transfer id, the vote, the snapshot's metadata, its log's start and end |
//! | 8 | snapshot: batches | head (the group and the transfer id), then batches back to back |
//! | 9 | snapshot: end | JSON: the group and the transfer id; answered once installed |
//!
//! A head is `json_len u32 LE` and that much JSON; the raw bytes after it are the
//! batches, which never go through JSON. An append's head lists its entries (blank,
//! membership, or a batch with its length) and the batches follow in that order; every
//! byte after the head must belong to one. A snapshot is streamed as batches into a
//! receive log in the group's `raft/receive/` and installed from it at the end (one
//! transfer per group at a time: a new begin replaces an unfinished one).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest};
use openraft::{EmptyNode, EntryPayload, Membership, Raft, RaftNetworkV2};
use rill_storage::{Durability, LogConfig, PartitionLog};
use serde::{Deserialize, Serialize};

use super::{Envelope, Groups, PeerError, Peers, from_json, json};
use crate::partition::{
    PartitionCommand, PartitionEntry, PartitionLogStore, PartitionSnapshot, PartitionStateMachine,
    PartitionTypes,
};

const KIND_APPEND: u8 = 5;
const KIND_VOTE: u8 = 6;
const KIND_SNAPSHOT_BEGIN: u8 = 7;
const KIND_SNAPSHOT_BATCHES: u8 = 8;
const KIND_SNAPSHOT_END: u8 = 9;
/// Bytes of batches per snapshot request at most.
const SNAPSHOT_CHUNK: usize = 4 << 20;
/// How long one snapshot request may take (the end waits for the install).
const SNAPSHOT_STEP_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn is_partition_kind(kind: u8) -> bool {
    (KIND_APPEND..=KIND_SNAPSHOT_END).contains(&kind)
}

/// A partition, as its group is named on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionId {
    /// The stream.
    pub stream: String,
    /// The topic.
    pub topic: String,
    /// The partition's number.
    pub partition: u32,
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.stream, self.topic, self.partition)
    }
}

/// A partition group as a request names it: the partition and its topic's incarnation
/// (docs/REPLICATION.md §9). A replica answers only requests of its own incarnation, so
/// one left from a deleted topic of the same name (on a node that has not learnt of the
/// deletion yet) cannot take part in the new topic's group, nor the new group in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct GroupRef {
    #[serde(flatten)]
    id: PartitionId,
    /// 0 for topics from before incarnations (and frames of nodes that sent none).
    #[serde(default)]
    incarnation: u64,
}

/// A partition replica, as the peer server hands it requests.
pub type PartitionRaft = Raft<PartitionTypes, PartitionStateMachine>;

/// A partition group this node serves: its replica and the snapshot being received.
pub struct PartitionGroup {
    id: PartitionId,
    incarnation: u64,
    raft: PartitionRaft,
    store: PartitionLogStore,
    receiving: tokio::sync::Mutex<Option<Receiving>>,
}

impl fmt::Debug for PartitionGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionGroup")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl PartitionGroup {
    /// The group of partition `id` of its topic's `incarnation`, served by `raft` over
    /// `store`.
    pub fn new(
        id: PartitionId,
        incarnation: u64,
        raft: PartitionRaft,
        store: PartitionLogStore,
    ) -> Self {
        Self {
            id,
            incarnation,
            raft,
            store,
            receiving: tokio::sync::Mutex::new(None),
        }
    }

    /// The partition.
    pub fn id(&self) -> &PartitionId {
        &self.id
    }

    /// The replica.
    pub fn raft(&self) -> &PartitionRaft {
        &self.raft
    }
}

/// A snapshot being received.
struct Receiving {
    transfer: u64,
    vote: VoteOf<PartitionTypes>,
    meta: SnapshotMetaOf<PartitionTypes>,
    log_start: u64,
    next_offset: u64,
    sealed: Option<u64>,
    log: Arc<PartitionLog>,
}

#[derive(Serialize, Deserialize)]
enum WireEntry {
    Blank(LogIdOf<PartitionTypes>),
    Membership(LogIdOf<PartitionTypes>, Membership<u64, EmptyNode>),
    Batch(LogIdOf<PartitionTypes>, u32),
    Sealed(LogIdOf<PartitionTypes>, u64),
}

#[derive(Serialize, Deserialize)]
struct AppendHead {
    group: GroupRef,
    vote: VoteOf<PartitionTypes>,
    prev_log_id: Option<LogIdOf<PartitionTypes>>,
    leader_commit: Option<LogIdOf<PartitionTypes>>,
    entries: Vec<WireEntry>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotBegin {
    group: GroupRef,
    transfer: u64,
    vote: VoteOf<PartitionTypes>,
    meta: SnapshotMetaOf<PartitionTypes>,
    log_start: u64,
    next_offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotStep {
    group: GroupRef,
    transfer: u64,
}

/// A head and the raw bytes after it.
fn with_head<T: Serialize>(head: &T, raw: &[&[u8]]) -> Result<Vec<u8>, PeerError> {
    let head = json(head)?;
    let raw_len: usize = raw.iter().map(|r| r.len()).sum();
    let len = u32::try_from(head.len()).map_err(|_| PeerError::Frame("a head too large".into()))?;
    let mut out = Vec::with_capacity(4 + head.len() + raw_len);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&head);
    for r in raw {
        out.extend_from_slice(r);
    }
    Ok(out)
}

/// Splits a body into its decoded head and the raw bytes after it.
fn split_head<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<(T, Bytes), PeerError> {
    let Some(len) = body.first_chunk::<4>() else {
        return Err(PeerError::Frame("a body without its head length".into()));
    };
    let len = u32::from_le_bytes(*len) as usize;
    let end = 4usize
        .checked_add(len)
        .filter(|&e| e <= body.len())
        .ok_or_else(|| {
            PeerError::Frame(format!("a head of {len} bytes in a body of {}", body.len()))
        })?;
    let head = from_json(&body[4..end])?;
    Ok((head, body.slice(end..)))
}

/// The body of an append request of `group` of its topic's `incarnation`.
pub fn encode_append(
    group: &PartitionId,
    incarnation: u64,
    rpc: &AppendEntriesRequest<PartitionTypes>,
) -> Result<Vec<u8>, PeerError> {
    let mut entries = Vec::with_capacity(rpc.entries.len());
    let mut raw: Vec<&[u8]> = Vec::new();
    for e in &rpc.entries {
        let id = e.log_id;
        entries.push(match &e.payload {
            EntryPayload::Blank => WireEntry::Blank(id),
            EntryPayload::Membership(m) => WireEntry::Membership(id, m.clone()),
            EntryPayload::Normal(PartitionCommand::Batch(b)) => {
                raw.push(b);
                WireEntry::Batch(
                    id,
                    u32::try_from(b.len())
                        .map_err(|_| PeerError::Frame("a batch too large".into()))?,
                )
            }
            EntryPayload::Normal(PartitionCommand::Sealed(end)) => WireEntry::Sealed(id, *end),
            EntryPayload::Normal(PartitionCommand::Propose(_) | PartitionCommand::Seal) => {
                return Err(PeerError::Frame(
                    "an unstamped batch or seal is never replicated".into(),
                ));
            }
        });
    }
    let head = AppendHead {
        group: GroupRef {
            id: group.clone(),
            incarnation,
        },
        vote: rpc.vote,
        prev_log_id: rpc.prev_log_id,
        leader_commit: rpc.leader_commit,
        entries,
    };
    with_head(&head, &raw)
}

/// Decodes an append request's body: its group, the topic's incarnation and the
/// request, whose batches are slices of `body`.
pub fn decode_append(
    body: &Bytes,
) -> Result<(PartitionId, u64, AppendEntriesRequest<PartitionTypes>), PeerError> {
    let (head, raw): (AppendHead, Bytes) = split_head(body)?;
    let mut at = 0usize;
    let mut entries = Vec::with_capacity(head.entries.len());
    for e in head.entries {
        entries.push(match e {
            WireEntry::Blank(id) => PartitionEntry::new_blank(id),
            WireEntry::Membership(id, m) => PartitionEntry::new_membership(id, m),
            WireEntry::Sealed(id, end) => {
                PartitionEntry::new_normal(id, PartitionCommand::Sealed(end))
            }
            WireEntry::Batch(id, len) => {
                let end = at
                    .checked_add(len as usize)
                    .filter(|&e| e <= raw.len())
                    .ok_or_else(|| {
                        PeerError::Frame(format!(
                            "entry {} says {len} bytes, {} are left",
                            id.index,
                            raw.len() - at
                        ))
                    })?;
                let batch = raw.slice(at..end);
                at = end;
                PartitionEntry::new_normal(id, PartitionCommand::Batch(batch))
            }
        });
    }
    if at != raw.len() {
        return Err(PeerError::Frame(format!(
            "{} bytes after the last batch",
            raw.len() - at
        )));
    }
    let rpc = AppendEntriesRequest {
        vote: head.vote,
        prev_log_id: head.prev_log_id,
        entries,
        leader_commit: head.leader_commit,
    };
    Ok((head.group.id, head.group.incarnation, rpc))
}

/// Handles a partition group's request.
pub(crate) async fn handle(groups: &Groups, kind: u8, body: Bytes) -> Result<Vec<u8>, PeerError> {
    let remote = |e: &dyn fmt::Display| PeerError::Remote(e.to_string());
    match kind {
        KIND_APPEND => {
            let (id, incarnation, rpc) = decode_append(&body)?;
            let group = group_of(groups, &GroupRef { id, incarnation })?;
            json(
                &group
                    .raft
                    .append_entries(rpc)
                    .await
                    .map_err(|e| remote(&e))?,
            )
        }
        KIND_VOTE => {
            let envelope: Envelope<VoteRequest<PartitionTypes>> = from_json(&body)?;
            let name: GroupRef = serde_json::from_str(&envelope.group)
                .map_err(|e| PeerError::Frame(format!("a partition group name: {e}")))?;
            let group = group_of(groups, &name)?;
            json(
                &group
                    .raft
                    .vote(envelope.body)
                    .await
                    .map_err(|e| remote(&e))?,
            )
        }
        KIND_SNAPSHOT_BEGIN => {
            let begin: SnapshotBegin = from_json(&body)?;
            let group = group_of(groups, &begin.group)?;
            receive_begin(&group, begin).await?;
            json(&())
        }
        KIND_SNAPSHOT_BATCHES => {
            let (step, raw): (SnapshotStep, Bytes) = split_head(&body)?;
            let group = group_of(groups, &step.group)?;
            receive_batches(&group, step.transfer, &raw).await?;
            json(&())
        }
        KIND_SNAPSHOT_END => {
            let step: SnapshotStep = from_json(&body)?;
            let group = group_of(groups, &step.group)?;
            json(&receive_end(&group, step.transfer).await?)
        }
        other => Err(PeerError::Frame(format!("unknown request kind {other}"))),
    }
}

/// The group a request names, if this node's replica of it is of the same incarnation.
fn group_of(groups: &Groups, name: &GroupRef) -> Result<Arc<PartitionGroup>, PeerError> {
    let group = groups.partition(&name.id)?;
    if group.incarnation != name.incarnation {
        return Err(PeerError::Remote(format!(
            "the replica of {} here is of another incarnation of its topic ({} here, {} asked)",
            name.id, group.incarnation, name.incarnation
        )));
    }
    Ok(group)
}

fn storage(e: impl fmt::Display) -> PeerError {
    PeerError::Remote(e.to_string())
}

async fn receive_begin(group: &PartitionGroup, begin: SnapshotBegin) -> Result<(), PeerError> {
    if begin.next_offset < begin.log_start {
        return Err(PeerError::Frame(format!(
            "a snapshot of offsets {}..{}",
            begin.log_start, begin.next_offset
        )));
    }
    let mut receiving = group.receiving.lock().await;
    *receiving = None;
    let io = group.store.io();
    let dir = group.store.raft_dir().join("receive");
    if io.is_dir(&dir) {
        io.remove_dir_all(&dir)?;
    }
    let config = LogConfig {
        initial_offset: begin.log_start,
        // Synced whole before it is installed.
        durability: Durability::Never,
        ..group.store.config()
    };
    let env = rill_storage::LogEnv::new(Arc::clone(io), Arc::clone(&group.store.env().clock));
    let log = PartitionLog::open_in(&dir, config, &env).map_err(storage)?;
    *receiving = Some(Receiving {
        transfer: begin.transfer,
        vote: begin.vote,
        meta: begin.meta,
        log_start: begin.log_start,
        next_offset: begin.next_offset,
        sealed: begin.sealed,
        log: Arc::new(log),
    });
    Ok(())
}

async fn receive_batches(
    group: &PartitionGroup,
    transfer: u64,
    raw: &[u8],
) -> Result<(), PeerError> {
    let receiving = group.receiving.lock().await;
    let Some(r) = receiving.as_ref().filter(|r| r.transfer == transfer) else {
        return Err(PeerError::Remote(format!(
            "no snapshot transfer {transfer} under way"
        )));
    };
    for batch in rill_format::Batches::new(raw) {
        let batch = batch.map_err(|e| PeerError::Frame(format!("a snapshot batch: {e}")))?;
        if batch.next_offset() > r.next_offset {
            return Err(PeerError::Frame(format!(
                "a snapshot batch ends at {}, after the snapshot's end {}",
                batch.next_offset(),
                r.next_offset
            )));
        }
        r.log.append_stamped(batch.as_bytes()).map_err(storage)?;
    }
    Ok(())
}

async fn receive_end(
    group: &PartitionGroup,
    transfer: u64,
) -> Result<SnapshotResponse<PartitionTypes>, PeerError> {
    let taken = {
        let mut receiving = group.receiving.lock().await;
        match receiving.take() {
            Some(r) if r.transfer == transfer => r,
            other => {
                *receiving = other;
                return Err(PeerError::Remote(format!(
                    "no snapshot transfer {transfer} under way"
                )));
            }
        }
    };
    if taken.log.next_offset() != taken.next_offset {
        return Err(PeerError::Frame(format!(
            "the snapshot's batches end at {}, not at its end {}",
            taken.log.next_offset(),
            taken.next_offset
        )));
    }
    taken.log.sync().map_err(storage)?;
    let snapshot = SnapshotOf::<PartitionTypes, PartitionSnapshot> {
        meta: taken.meta,
        snapshot: PartitionSnapshot {
            log_start: taken.log_start,
            next_offset: taken.next_offset,
            source: Arc::clone(&taken.log),
            sealed: taken.sealed,
        },
    };
    let answer = group
        .raft
        .install_full_snapshot(taken.vote, snapshot)
        .await
        .map_err(|e| PeerError::Remote(e.to_string()));
    let _ = taken.log.close();

    let io = group.store.io();
    let dir = group.store.raft_dir().join("receive");
    if io.is_dir(&dir) {
        io.remove_dir_all(&dir)?;
    }
    answer
}

/// openraft's network of one partition group over [`Peers`].
#[derive(Debug, Clone)]
pub struct PartitionNetwork {
    peers: Peers,
    group: GroupRef,
}

impl PartitionNetwork {
    /// The network of partition `group` of its topic's `incarnation` over `peers`.
    pub fn new(peers: Peers, group: PartitionId, incarnation: u64) -> Self {
        Self {
            peers,
            group: GroupRef {
                id: group,
                incarnation,
            },
        }
    }
}

impl RaftNetworkFactory<PartitionTypes> for PartitionNetwork {
    type Network = PartitionClient;

    async fn new_client(&mut self, target: u64, _node: &EmptyNode) -> PartitionClient {
        PartitionClient {
            target,
            peers: self.peers.clone(),
            group: self.group.clone(),
        }
    }
}

/// A client of one peer for one partition group.
#[derive(Debug)]
pub struct PartitionClient {
    target: u64,
    peers: Peers,
    group: GroupRef,
}

fn unreachable(e: &PeerError) -> RPCError<PartitionTypes> {
    RPCError::Unreachable(Unreachable::new(e))
}

impl PartitionClient {
    async fn call<R: for<'de> Deserialize<'de>>(
        &self,
        kind: u8,
        body: Vec<u8>,
        limit: Duration,
    ) -> Result<R, PeerError> {
        let answer = self.peers.call(self.target, kind, body, limit).await?;
        from_json(&answer)
    }

    async fn send_snapshot(
        &self,
        vote: VoteOf<PartitionTypes>,
        snapshot: SnapshotOf<PartitionTypes, PartitionSnapshot>,
    ) -> Result<SnapshotResponse<PartitionTypes>, PeerError> {
        let transfer: u64 = rand::random();
        let data = snapshot.snapshot;
        let begin = SnapshotBegin {
            group: self.group.clone(),
            transfer,
            vote,
            meta: snapshot.meta,
            log_start: data.log_start,
            next_offset: data.next_offset,
            sealed: data.sealed,
        };
        self.call::<()>(KIND_SNAPSHOT_BEGIN, json(&begin)?, SNAPSHOT_STEP_TIMEOUT)
            .await?;
        let step = SnapshotStep {
            group: self.group.clone(),
            transfer,
        };
        let mut at = data.log_start;
        while at < data.next_offset {
            let read = data.source.read(at, SNAPSHOT_CHUNK).map_err(storage)?;
            let mut raw: Vec<&[u8]> = Vec::new();
            let mut next = at;
            for batch in read.batches() {
                let batch = batch.map_err(storage)?;
                if batch.next_offset() > data.next_offset {
                    break;
                }
                if batch.base_offset() >= at {
                    raw.push(batch.as_bytes());
                    next = batch.next_offset();
                }
            }
            if next == at {
                return Err(PeerError::Remote(format!(
                    "the snapshot's log has no batch at {at}"
                )));
            }
            self.call::<()>(
                KIND_SNAPSHOT_BATCHES,
                with_head(&step, &raw)?,
                SNAPSHOT_STEP_TIMEOUT,
            )
            .await?;
            at = next;
        }
        self.call(KIND_SNAPSHOT_END, json(&step)?, SNAPSHOT_STEP_TIMEOUT)
            .await
    }
}

impl RaftNetworkV2<PartitionTypes> for PartitionClient {
    type SnapshotData = PartitionSnapshot;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<PartitionTypes>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<PartitionTypes>, RPCError<PartitionTypes>> {
        let body = encode_append(&self.group.id, self.group.incarnation, &rpc)
            .map_err(|e| unreachable(&e))?;
        self.call(KIND_APPEND, body, option.hard_ttl())
            .await
            .map_err(|e| unreachable(&e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<PartitionTypes>,
        option: RPCOption,
    ) -> Result<openraft::raft::VoteResponse<PartitionTypes>, RPCError<PartitionTypes>> {
        let group = serde_json::to_string(&self.group)
            .map_err(|e| unreachable(&PeerError::Frame(e.to_string())))?;
        let body = json(&Envelope { group, body: rpc }).map_err(|e| unreachable(&e))?;
        self.call(KIND_VOTE, body, option.hard_ttl())
            .await
            .map_err(|e| unreachable(&e))
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<PartitionTypes>,
        snapshot: SnapshotOf<PartitionTypes, Self::SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<PartitionTypes>, StreamingError<PartitionTypes>> {
        tokio::select! {
            answer = self.send_snapshot(vote, snapshot) => {
                answer.map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))
            }
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }
}
