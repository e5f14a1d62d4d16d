//! A node of a cluster (docs/REPLICATION.md §3): the metadata group, a replica of every
//! partition whose replica set names this node, and the one peer listener that serves
//! them all.
//!
//! At start the node opens its metadata store in `DATA/cluster/meta`, starts the
//! metadata group with the voters of `--peers`, initializes it if it is pristine
//! (`NotAllowed` — another node's initialize reached it first — counts as done), serves
//! its peers, and registers its addresses through the group. A task follows the
//! applied metadata: for each partition whose replicas include this node it opens the
//! partition (`DATA/streams/S/T/P`, the single-node layout, plus its `raft/`), starts
//! its group on the same transport and initializes it when pristine with the replica
//! set, identical on every replica because it comes from the replicated catalog. A
//! partition whose topic is deleted stops being served (its files stay; deleting them
//! is still to come).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{Config, EmptyNode, Raft, ServerState, SnapshotPolicy};
use parking_lot::RwLock;
use rill_broker::BrokerError;
use rill_storage::{LogConfig, LogEnv, LogRead, PartitionLog, StorageError};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::meta::{MetaCommand, MetaResponse, MetaState, NodeInfo, TopicSpec};
use crate::partition::{
    PartitionCommand, PartitionLogStore, PartitionResponse, PartitionStateMachine, PartitionTypes,
};
use crate::peer::{
    Groups, MetaNetwork, MetaRaft, PartitionGroup, PartitionId, PartitionNetwork, PartitionRaft,
    Peers, Proposed, ReadIndex,
};
use crate::store::{MetaLogStore, MetaStateMachine};

mod tune;

/// How long a node waits for itself to apply a metadata command the leader committed.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// How long a forwarded or retried metadata command may take in all.
const PROPOSE_DEADLINE: Duration = Duration::from_secs(10);
/// The first pause before a metadata command is tried again; it doubles up to 1 s.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long retention waits for the snapshot a purge needs.
const RETENTION_SNAPSHOT_WAIT: Duration = Duration::from_secs(10);

/// A partition's log options from its topic's options, as the catalog stores them.
pub type LogConfigFn = Arc<dyn Fn(&[u8]) -> LogConfig + Send + Sync>;

/// How a node is started.
#[derive(Clone)]
pub struct NodeConfig {
    /// This node's id (`--node-id`).
    pub id: u64,
    /// Every node's node-to-node address, this node's included (`--peers`).
    pub peers: BTreeMap<u64, String>,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Raft timing of every group.
    pub timing: Arc<Config>,
    /// Disk and clock.
    pub env: LogEnv,
    /// A partition's log options from its topic's options (as the catalog stores them).
    pub log_config: LogConfigFn,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("id", &self.id)
            .field("peers", &self.peers)
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// The Raft timing of docs/REPLICATION.md §7.2: heartbeats every 100 ms, elections after
/// 300–600 ms of silence.
pub fn default_timing() -> Arc<Config> {
    Arc::new(
        Config {
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Config::default()
        }
        .validate()
        .expect("a valid Raft config"),
    )
}

/// The metadata group's configuration: the node's timing, with openraft's "leader
/// restore" off, so a leader that restarts is a follower until an election
/// (docs/REPLICATION.md §7.2). A restored leader takes up its old term knowing
/// committed only what its state machine restarts from, and its first entry of that
/// term is an old one: a read index it confirms could miss entries committed and
/// acknowledged before it stopped (found by the nemesis: a group's stored offsets read
/// backward after the coordinator's kill -9 and quick restart).
fn meta_config(base: &Config) -> Arc<Config> {
    Arc::new(
        Config {
            enable_leader_restore: Some(false),
            ..base.clone()
        }
        .validate()
        .expect("a valid Raft config"),
    )
}

/// A partition group's configuration: the node's timing, with snapshots and purges left
/// to the partition's retention (a snapshot is the log itself, §7.5), and no leader
/// restore (see [`meta_config`]: a restored leader's high watermark could be below
/// what readers already read).
fn partition_timing(base: &Config) -> Arc<Config> {
    Arc::new(
        Config {
            snapshot_policy: SnapshotPolicy::Never,
            // Purges are the retention's (`Replica::retain`), never the library's
            // after a snapshot.
            max_in_snapshot_log_to_keep: u64::MAX,
            enable_leader_restore: Some(false),
            ..base.clone()
        }
        .validate()
        .expect("a valid Raft config"),
    )
}

/// Why a node cannot do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration does not describe a cluster this node belongs to.
    #[error("invalid cluster configuration: {0}")]
    Config(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The node does not lead this group; the leader it knows, if any.
    #[error("not the leader{}", .leader.map(|l| format!("; node {l} leads")).unwrap_or_default())]
    NotLeader {
        /// The leader, if known.
        leader: Option<u64>,
    },
    /// The group did not commit in time (no majority, or an election under way).
    #[error("no answer from the group within {0:?}")]
    Timeout(Duration),
    /// The partition has no replica on this node.
    #[error("no replica of {0} on this node")]
    NoReplica(PartitionId),
    /// The Raft group stopped, or another failure.
    #[error("{0}")]
    Failed(String),
    /// Reading the partition's log failed.
    #[error("{0}")]
    Storage(#[from] StorageError),
}

/// A partition replica on this node.
#[derive(Clone)]
pub struct Replica {
    id: PartitionId,
    raft: PartitionRaft,
    sm: PartitionStateMachine,
    store: PartitionLogStore,
    replicas: Vec<u64>,
    /// Leader changes this replica saw (for `/metrics`).
    leader_changes: Arc<std::sync::atomic::AtomicU64>,
    /// The node's commit latency, where this replica's proposals are counted.
    pub(crate) commit_latency: Arc<rill_broker::cluster::LatencyHistogram>,
    /// The topic's options (as the catalog stores them) its log runs with now.
    options: Arc<parking_lot::Mutex<Vec<u8>>>,
    /// Whether this replica proposed a seal (docs/RANGES.md §9): proposals hold it
    /// shared while they enqueue, a seal exclusively, so no batch follows a seal.
    pub(crate) sealing: Arc<tokio::sync::RwLock<bool>>,
}

/// Counts the leader changes a group's metrics show until the group stops.
fn count_leader_changes<C, SM>(
    raft: &Raft<C, SM>,
    changes: Arc<std::sync::atomic::AtomicU64>,
) -> tokio::task::JoinHandle<()>
where
    C: openraft::RaftTypeConfig<NodeId = u64, Node = EmptyNode>,
    SM: openraft::storage::RaftStateMachine<C>,
{
    let mut metrics = raft.metrics();
    tokio::spawn(async move {
        let mut leader = metrics.borrow_watched().current_leader;
        while metrics.changed().await.is_ok() {
            let now = metrics.borrow_watched().current_leader;
            if now != leader {
                leader = now;
                if now.is_some() {
                    changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    })
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.id)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// The partition.
    pub fn id(&self) -> &PartitionId {
        &self.id
    }

    /// Its replica set.
    pub fn replicas(&self) -> &[u64] {
        &self.replicas
    }

    /// Appends a batch through the group: it returns once a majority holds it under
    /// the topic's durability policy and it is applied here, with its offsets. Only the
    /// leader takes batches (`NotLeader` names who leads, when known).
    pub async fn produce(&self, batch: Bytes) -> Result<(u64, u64, i64), NodeError> {
        match self
            .raft
            .client_write(PartitionCommand::Propose(batch))
            .await
        {
            Ok(done) => match done.data {
                PartitionResponse::Appended {
                    base_offset,
                    last_offset,
                    timestamp_us,
                } => Ok((base_offset, last_offset, timestamp_us)),
                PartitionResponse::Done | PartitionResponse::Sealed { .. } => Err(
                    NodeError::Failed("a batch was applied without offsets".into()),
                ),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(NodeError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(f))) => {
                // Its entry was cut by a new leader: it may still commit there, so the
                // producer retries (an idempotent one is deduplicated).
                Err(NodeError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Err(e) => Err(NodeError::Failed(e.to_string())),
        }
    }

    /// Applies the topic's retention to this replica (docs/REPLICATION.md §7.5): the
    /// sealed segments past its limits and below the high watermark go, by a purge of
    /// the group's log up to their last entry, once a snapshot covers it (built here at
    /// the last applied entry if the last one does not). The library purges when no
    /// replication to a follower is reading those entries, so the segments may go a
    /// little later. Returns where the log is to start, when anything is to go.
    pub async fn retain(&self) -> Result<Option<u64>, NodeError> {
        let Some(cut) = self.store.log().retention_cut(self.high_watermark()) else {
            return Ok(None);
        };
        let Some(index) = self.store.last_index_ending_by(cut) else {
            return Ok(None);
        };
        let covered = move |m: &openraft::RaftMetrics<PartitionTypes>| {
            m.snapshot.as_ref().is_some_and(|s| s.index >= index)
        };
        let failed = |e: &dyn std::fmt::Display| {
            NodeError::Failed(format!("retention of partition {}: {e}", self.id))
        };
        if !covered(&self.raft.metrics().borrow_watched()) {
            self.raft
                .trigger()
                .snapshot()
                .await
                .map_err(|e| failed(&e))?;
            self.raft
                .wait(Some(RETENTION_SNAPSHOT_WAIT))
                .metrics(covered, "a snapshot that covers the purge")
                .await
                .map_err(|e| failed(&e))?;
        }
        self.raft
            .trigger()
            .purge_log(index)
            .await
            .map_err(|e| failed(&e))?;
        Ok(Some(cut))
    }

    /// The high watermark: every offset below it is committed.
    pub fn high_watermark(&self) -> u64 {
        self.sm.high_watermark()
    }

    /// Watches the high watermark.
    pub fn watch_high_watermark(&self) -> watch::Receiver<u64> {
        self.sm.watch_high_watermark()
    }

    /// Reads committed batches from `from` (never at or above the high watermark).
    pub fn read(&self, from: u64, max_bytes: usize) -> Result<LogRead, NodeError> {
        let hwm = self.high_watermark();
        let log = self.store.log();
        if from >= hwm {
            if from > hwm {
                return Err(StorageError::OffsetBeyondEnd {
                    requested: from,
                    next_offset: hwm,
                }
                .into());
            }
            return Ok(LogRead {
                bytes: Vec::new(),
                next_offset: from,
                log_start: log.log_start(),
                log_end: hwm,
            });
        }
        let mut read = log.read(from, max_bytes)?;
        // Drop whole batches at or above the watermark.
        let mut keep = 0;
        let mut next = from;
        for batch in read.batches() {
            let batch = batch.map_err(|e| NodeError::Failed(e.to_string()))?;
            if batch.next_offset() > hwm {
                break;
            }
            keep += batch.as_bytes().len();
            next = batch.next_offset();
        }
        read.bytes.truncate(keep);
        read.next_offset = next.max(from);
        read.log_end = hwm;
        Ok(read)
    }

    /// The partition's local log (for status; reads go through [`Replica::read`]).
    pub fn log(&self) -> Arc<PartitionLog> {
        self.store.log()
    }

    /// Whether this replica leads its group now.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow_watched().state == ServerState::Leader
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// The replica's log store.
    pub fn store(&self) -> &PartitionLogStore {
        &self.store
    }

    /// The Raft replica (tests and operations trigger snapshots through it).
    pub fn raft(&self) -> &PartitionRaft {
        &self.raft
    }

    async fn stop(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(partition = %self.id, error = %e, "stopping a replica");
        }
        self.store.close();
    }
}

struct Inner {
    config: NodeConfig,
    peers: Peers,
    groups: Groups,
    meta: MetaRaft,
    meta_sm: MetaStateMachine,
    replicas: Arc<RwLock<HashMap<PartitionId, Arc<Replica>>>>,
    /// Replicas being started or stopped: one reconciliation at a time.
    reconciling: tokio::sync::Mutex<()>,
    /// The catalog as the broker mirrors it, after each reconciliation.
    catalog: watch::Sender<Arc<rill_broker::cluster::ClusterCatalog>>,
    /// Held while the node runs: one node per data directory.
    lock: parking_lot::Mutex<Option<Box<dyn std::fmt::Debug + Send + Sync>>>,
    /// Controller changes this node saw.
    controller_changes: Arc<std::sync::atomic::AtomicU64>,
    /// How long this node's proposals as a partition leader took to commit.
    commit_latency: Arc<rill_broker::cluster::LatencyHistogram>,
}

/// A running node. Cheap to clone; [`ClusterNode::shutdown`] stops it.
#[derive(Clone)]
pub struct ClusterNode {
    inner: Arc<Inner>,
    tasks: Arc<parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode")
            .field("id", &self.inner.config.id)
            .finish_non_exhaustive()
    }
}

impl ClusterNode {
    /// Starts the node, serving its peers on `listener` (bound to its `--peers`
    /// address). Returns once the metadata group runs; the group elects a leader when
    /// a majority of the nodes is up.
    pub async fn start(config: NodeConfig, listener: TcpListener) -> Result<Self, NodeError> {
        validate(&config)?;
        let io = Arc::clone(&config.env.io);
        let cluster_dir = config.data_dir.join("cluster");
        io.create_dir_all(&cluster_dir)?;
        // One node per data directory (the broker's own lock is taken after).
        let lock = io.try_lock(&cluster_dir.join("node.lock")).map_err(|e| {
            NodeError::Config(format!(
                "cannot lock {} (is another rill using this data directory?): {e}",
                cluster_dir.display()
            ))
        })?;
        let meta_dir = cluster_dir.join("meta");
        let log = MetaLogStore::open_with(Arc::clone(&io), &meta_dir)?;
        let meta_sm = MetaStateMachine::open_with(Arc::clone(&io), &meta_dir)?;
        let peers = Peers::new(config.peers.iter().map(|(&id, a)| (id, a.clone())));
        let meta = Raft::new(
            config.id,
            meta_config(&config.timing),
            MetaNetwork::new(peers.clone()),
            log,
            meta_sm.clone(),
        )
        .await
        .map_err(|e| NodeError::Failed(format!("starting the metadata group: {e}")))?;
        // A call the group's core answers: its state (and metrics) are loaded after it.
        let initialized = meta
            .is_initialized()
            .await
            .map_err(|e| NodeError::Failed(e.to_string()))?;
        if initialized && let Err(e) = check_voters(&meta, &config) {
            let _ = meta.shutdown().await;
            return Err(e);
        }
        let groups = Groups::new();
        groups.set_meta(meta.clone());
        let replicas: Arc<RwLock<HashMap<PartitionId, Arc<Replica>>>> = Arc::default();
        {
            let replicas = Arc::clone(&replicas);
            let id = config.id;
            groups.set_reporter(Arc::new(move || local_report(id, &replicas.read())));
        }
        let node = Self {
            inner: Arc::new(Inner {
                config,
                peers,
                groups: groups.clone(),
                meta: meta.clone(),
                meta_sm,
                replicas,
                reconciling: tokio::sync::Mutex::new(()),
                catalog: watch::channel(Arc::default()).0,
                lock: parking_lot::Mutex::new(Some(lock)),
                controller_changes: Arc::default(),
                commit_latency: Arc::default(),
            }),
            tasks: Arc::default(),
        };
        let hosts = crate::peer::peer_hosts(node.inner.config.peers.values().map(String::as_str))
            .await
            .map_err(|e| NodeError::Config(format!("resolving the hosts of --peers: {e}")))?;
        let serving = tokio::spawn(async move {
            if let Err(e) = crate::peer::serve_from(listener, groups, Some(hosts)).await {
                tracing::error!(error = %e, "the peer listener failed");
            }
        });
        node.tasks.lock().push(serving);
        let members: BTreeMap<u64, EmptyNode> = node
            .inner
            .config
            .peers
            .keys()
            .map(|&id| (id, EmptyNode {}))
            .collect();
        initialize(&meta, members, "the metadata group").await?;
        let follower = node.clone();
        node.tasks.lock().push(tokio::spawn(async move {
            follower.follow_metadata().await;
        }));
        let counting = count_leader_changes(&meta, Arc::clone(&node.inner.controller_changes));
        node.tasks.lock().push(counting);
        Ok(node)
    }

    /// Registers the client address this node serves (`--listen`, as bound) through
    /// the metadata group, retrying in the background until a leader commits it.
    pub fn register_client(&self, client_addr: String) {
        let registering = self.clone();
        self.tasks.lock().push(tokio::spawn(async move {
            registering.register(client_addr).await;
        }));
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.inner.config.id
    }

    /// The metadata state as applied on this node (a follower's may be a little behind).
    pub async fn metadata(&self) -> MetaState {
        self.inner.meta_sm.state().await
    }

    /// The metadata group's leader (the controller), as this node knows it.
    pub fn controller(&self) -> Option<u64> {
        self.inner.meta.metrics().borrow_watched().current_leader
    }

    /// The ids of every node of the cluster (`--peers`), sorted.
    pub fn node_ids(&self) -> Vec<u64> {
        self.inner.config.peers.keys().copied().collect()
    }

    /// The catalog this node applied, with its replicas, as it changes.
    pub fn catalog(&self) -> watch::Receiver<Arc<rill_broker::cluster::ClusterCatalog>> {
        self.inner.catalog.subscribe()
    }

    /// Waits until this node applied the metadata log up to `index` and published the
    /// catalog after it (bounded).
    pub async fn wait_published(&self, index: u64) -> Result<(), BrokerError> {
        let mut catalog = self.inner.catalog.subscribe();
        let waited =
            tokio::time::timeout(APPLY_WAIT, catalog.wait_for(|c| c.version > index)).await;
        match waited {
            Ok(Ok(_)) => Ok(()),
            _ => Err(BrokerError::ClusterTimeout(format!(
                "the metadata group committed entry {index} but this node did not apply it within {APPLY_WAIT:?}"
            ))),
        }
    }

    /// The replica of `id` on this node.
    pub fn replica(&self, id: &PartitionId) -> Result<Arc<Replica>, NodeError> {
        self.inner
            .replicas
            .read()
            .get(id)
            .cloned()
            .ok_or_else(|| NodeError::NoReplica(id.clone()))
    }

    /// Every replica on this node.
    pub fn replicas(&self) -> Vec<Arc<Replica>> {
        let mut all: Vec<Arc<Replica>> = self.inner.replicas.read().values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Commits a metadata command through the leader (this node, or the leader it is
    /// forwarded to), retrying through elections for at most 10 s.
    pub async fn propose(&self, command: MetaCommand) -> Result<MetaResponse, NodeError> {
        self.propose_indexed(command).await.map(|(r, _)| r)
    }

    /// Like [`ClusterNode::propose`], with the index of the committed entry.
    pub async fn propose_indexed(
        &self,
        command: MetaCommand,
    ) -> Result<(MetaResponse, u64), NodeError> {
        let started = Instant::now();
        let mut pause = RETRY_FIRST;
        loop {
            let target = match self.inner.meta.client_write(command.clone()).await {
                Ok(done) => return Ok((done.data, done.log_id.index)),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => f.leader_id,
                Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(f))) => f.leader_id,
                Err(e) => return Err(NodeError::Failed(e.to_string())),
            };
            if let Some(leader) = target.filter(|&l| l != self.id()) {
                let left = PROPOSE_DEADLINE.saturating_sub(started.elapsed());
                match self.inner.peers.propose(leader, &command, left).await {
                    Ok(Proposed::Done(response, index)) => return Ok((response, index)),
                    Ok(Proposed::NotLeader(_)) => {}
                    Err(e) => {
                        tracing::debug!(leader, error = %e, "forwarding a metadata command failed");
                    }
                }
            }
            if started.elapsed() + pause > PROPOSE_DEADLINE {
                return Err(NodeError::Timeout(PROPOSE_DEADLINE));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }

    /// The term in which this node leads the metadata group and so coordinates consumer
    /// groups (docs/REPLICATION.md §11.1), once it applied an entry of that term (before,
    /// entries of earlier terms may still be on their way to its state); otherwise
    /// [`NodeError::NotLeader`] with the leader it knows.
    pub fn coordinator_term(&self) -> Result<u64, NodeError> {
        let metrics = self.inner.meta.metrics();
        let m = metrics.borrow_watched();
        let ready = m
            .last_applied
            .as_ref()
            .is_some_and(|applied| applied.leader_id.term == m.current_term);
        if m.state == ServerState::Leader && ready {
            return Ok(m.current_term);
        }
        Err(NodeError::NotLeader {
            leader: m.current_leader.filter(|&l| l != self.id()),
        })
    }

    /// The metadata group's read index as this node, leading it in `term`, confirms it
    /// with a quorum now (never asked of another node): [`NodeError::NotLeader`] if it
    /// does not lead, or leads in another term.
    pub async fn read_index_here(&self, term: u64) -> Result<u64, NodeError> {
        let not_leader = |leader: Option<u64>| NodeError::NotLeader {
            leader: leader.filter(|&l| l != self.id()),
        };
        match self
            .inner
            .meta
            .get_read_linearizer(openraft::raft::ReadPolicy::ReadIndex)
            .await
        {
            Ok(l) if l.read_log_id().committed_leader_id().term == term => {
                Ok(l.read_log_id().index())
            }
            Ok(_) => Err(not_leader(self.controller())),
            Err(RaftError::APIError(openraft::error::LinearizableReadError::ForwardToLeader(
                f,
            ))) => Err(not_leader(f.leader_id)),
            Err(e) => Err(NodeError::Failed(e.to_string())),
        }
    }

    /// Commits a metadata command only if this node leads the metadata group: never
    /// forwarded (a coordinator's group commits must not be applied by another leader,
    /// whose groups may have moved on). [`NodeError::NotLeader`] otherwise.
    pub async fn propose_here(
        &self,
        command: MetaCommand,
    ) -> Result<(MetaResponse, u64), NodeError> {
        match self.inner.meta.client_write(command).await {
            Ok(done) => Ok((done.data, done.log_id.index)),
            Err(RaftError::APIError(
                ClientWriteError::ForwardToLeader(f) | ClientWriteError::LogEntryDiscarded(f),
            )) => Err(NodeError::NotLeader {
                leader: f.leader_id.filter(|&l| l != self.id()),
            }),
            Err(e) => Err(NodeError::Failed(e.to_string())),
        }
    }

    /// The metadata group's read index: an index of its log such that a read of the
    /// state applied up to it is linearizable (it reflects every entry committed before
    /// this call began). Asked of the leader (this node, or the one it knows), which
    /// confirms its leadership with a quorum first; retried through elections for at
    /// most 10 s.
    pub async fn read_index(&self) -> Result<u64, NodeError> {
        let started = Instant::now();
        let mut pause = RETRY_FIRST;
        loop {
            let target = match crate::peer::read_index(&self.inner.meta).await {
                Ok(ReadIndex::At(index)) => return Ok(index),
                Ok(ReadIndex::NotLeader(leader)) => leader,
                Err(e) => {
                    tracing::debug!(error = %e, "the metadata group's read index");
                    None
                }
            };
            if let Some(leader) = target.filter(|&l| l != self.id()) {
                let left = PROPOSE_DEADLINE.saturating_sub(started.elapsed());
                match self.inner.peers.read_index(leader, left).await {
                    Ok(ReadIndex::At(index)) => return Ok(index),
                    Ok(ReadIndex::NotLeader(_)) => {}
                    Err(e) => {
                        tracing::debug!(leader, error = %e, "asking the leader for its read index");
                    }
                }
            }
            if started.elapsed() + pause > PROPOSE_DEADLINE {
                return Err(NodeError::Timeout(PROPOSE_DEADLINE));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }

    /// Stops every group and the peer listener.
    pub async fn shutdown(&self) {
        for task in std::mem::take(&mut *self.tasks.lock()) {
            task.abort();
        }
        let _guard = self.inner.reconciling.lock().await;
        let replicas: Vec<Arc<Replica>> = self
            .inner
            .replicas
            .write()
            .drain()
            .map(|(_, r)| r)
            .collect();
        for r in replicas {
            self.inner.groups.remove_partition(&r.id);
            r.stop().await;
        }
        if let Err(e) = self.inner.meta.shutdown().await {
            tracing::warn!(error = %e, "stopping the metadata group");
        }
        self.inner.lock.lock().take();
    }

    /// The nodes and every partition's replication, as the nodes report them now: each
    /// other node is asked (at most 1 s) for the replicas it runs.
    pub async fn status(&self) -> rill_broker::cluster::ClusterStatus {
        use rill_broker::cluster::{ClusterStatus, NodeStatus, PartitionStatus};
        let me = self.id();
        let controller = self.controller();
        let mut reports = vec![local_report(me, &self.inner.replicas.read())];
        let others: Vec<u64> = self.node_ids().into_iter().filter(|&n| n != me).collect();
        let asks = others.iter().map(|&n| {
            let peers = self.inner.peers.clone();
            async move { (n, peers.report(n, STATUS_WAIT).await) }
        });
        let mut up = BTreeSet::from([me]);
        for (n, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(report) => {
                    up.insert(n);
                    reports.push(report);
                }
                Err(e) => tracing::debug!(node = n, error = %e, "no status from a node"),
            }
        }
        let state = self.metadata().await;
        let nodes = self
            .inner
            .config
            .peers
            .iter()
            .map(|(&id, peer)| NodeStatus {
                id,
                peer: peer.clone(),
                client: state.nodes.get(&id).map(|n| n.client.clone()),
                up: up.contains(&id),
                controller: controller == Some(id),
            })
            .collect();
        let mut partitions = Vec::new();
        for (stream, topics) in &state.streams {
            for (topic, spec) in topics {
                for (p, replicas) in spec.replicas.iter().enumerate() {
                    let id = PartitionId {
                        stream: stream.clone(),
                        topic: topic.clone(),
                        partition: p as u32,
                    };
                    let seen: Vec<&crate::peer::ReplicaReport> = reports
                        .iter()
                        .flat_map(|r| r.replicas.iter())
                        .filter(|r| r.partition == id)
                        .collect();
                    let leading = seen.iter().find(|r| r.leading);
                    let leader = leading
                        .and_then(|r| r.leader)
                        .or_else(|| seen.iter().find_map(|r| r.leader));
                    partitions.push(PartitionStatus {
                        stream: stream.clone(),
                        topic: topic.clone(),
                        partition: p as u32,
                        leader,
                        replicas: replicas.clone(),
                        lag: leading.map(|r| r.lag.clone()).unwrap_or_default(),
                        high_watermark: leading.map_or(0, |r| r.high_watermark),
                    });
                }
            }
        }
        ClusterStatus { nodes, partitions }
    }

    /// Whether this node's applied metadata is current: it knows the metadata group's
    /// leader, learnt the commit point from it, applied every entry up to it, and
    /// published the catalog after.
    pub fn metadata_current(&self) -> bool {
        let m = self.inner.meta.metrics().borrow_watched().clone();
        let applied = m.last_applied.map(|l| l.index);
        // Learnt from the leader (it is not stored): a node that just started does not
        // know it until the leader's first append reaches it.
        let Some(committed) = m.cluster_committed.as_ref().map(|c| c.index) else {
            return false;
        };
        let published = self.inner.catalog.borrow().version;
        m.current_leader.is_some() && applied >= Some(committed) && published > committed
    }

    /// This node's view of the cluster, for `/health` and `/metrics`.
    pub fn health(&self) -> rill_broker::cluster::ClusterHealth {
        use rill_broker::cluster::{ClusterHealth, ReplicaHealth};
        let m = self.inner.meta.metrics().borrow_watched().clone();
        let in_quorum = match m.state {
            ServerState::Leader => m
                .last_quorum_acked
                .as_ref()
                .is_some_and(|at| openraft::Instant::elapsed(&**at) < Duration::from_secs(1)),
            _ => m.current_leader.is_some(),
        };
        let report = local_report(self.id(), &self.inner.replicas.read());
        let replicas = self.inner.replicas.read();
        let replicas = report
            .replicas
            .into_iter()
            .map(|r| {
                let replica = replicas.get(&r.partition);
                ReplicaHealth {
                    term: replica.map_or(0, |x| x.raft.metrics().borrow_watched().current_term),
                    leader_changes: replica.map_or(0, |x| {
                        x.leader_changes.load(std::sync::atomic::Ordering::Relaxed)
                    }),
                    stream: r.partition.stream,
                    topic: r.partition.topic,
                    partition: r.partition.partition,
                    leading: r.leading,
                    leader: r.leader,
                    high_watermark: r.high_watermark,
                    lag: r.lag,
                }
            })
            .collect();
        ClusterHealth {
            node_id: self.id(),
            in_quorum,
            controller: m.current_leader,
            term: m.current_term,
            controller_changes: self
                .inner
                .controller_changes
                .load(std::sync::atomic::Ordering::Relaxed),
            replicas,
            commit_latency: self.inner.commit_latency.snapshot(),
        }
    }

    /// Registers this node's addresses, retrying until a leader commits it.
    async fn register(&self, client_addr: String) {
        let config = &self.inner.config;
        let command = MetaCommand::RegisterNode {
            id: config.id,
            info: NodeInfo {
                peer: config.peers[&config.id].clone(),
                client: client_addr,
            },
        };
        loop {
            match self.propose(command.clone()).await {
                Ok(_) => return,
                Err(e) => tracing::debug!(error = %e, "registering this node: retrying"),
            }
        }
    }

    /// Starts and stops replicas as the applied metadata changes.
    async fn follow_metadata(&self) {
        let mut metrics = self.inner.meta.metrics();
        let mut applied = None;
        // Replicas start only once this node's metadata is current: what it applied
        // before it stopped may name a topic deleted (and created again) since, whose
        // old replica must not start and take part in the new topic's group.
        let mut caught_up = false;
        loop {
            let now = metrics.borrow_watched().last_applied;
            let fresh = !caught_up && (self.metadata_current() || self.coordinator_term().is_ok());
            if now != applied || fresh {
                applied = now;
                let state = self.inner.meta_sm.state().await;
                let version = applied.map_or(0, |id| id.index + 1);
                // Published before the replicas start too: a topic is known at once,
                // its partitions here answering `NOT_LEADER` (which clients retry)
                // until their replicas run.
                self.publish(version, &state);
                caught_up = caught_up || self.metadata_current() || self.coordinator_term().is_ok();
                if caught_up {
                    self.reconcile(&state).await;
                    self.publish(version, &state);
                }
            }
            if caught_up {
                if metrics.changed().await.is_err() {
                    return;
                }
            } else if let Ok(Err(_)) =
                tokio::time::timeout(Duration::from_millis(50), metrics.changed()).await
            {
                return;
            }
        }
    }

    fn publish(&self, version: u64, state: &MetaState) {
        let view = crate::serving::catalog_view(
            version,
            state,
            &self.inner.config.peers,
            &self.inner.replicas.read(),
        );
        self.inner.catalog.send_replace(Arc::new(view));
    }

    async fn reconcile(&self, state: &MetaState) {
        let _guard = self.inner.reconciling.lock().await;
        let me = self.id();
        let mut wanted: BTreeMap<PartitionId, (Vec<u64>, &TopicSpec)> = BTreeMap::new();
        for (stream, topics) in &state.streams {
            for (topic, spec) in topics {
                for (p, replicas) in spec.replicas.iter().enumerate() {
                    if replicas.contains(&me) {
                        let id = PartitionId {
                            stream: stream.clone(),
                            topic: topic.clone(),
                            partition: u32::try_from(p).unwrap_or(u32::MAX),
                        };
                        wanted.insert(id, (replicas.clone(), spec));
                    }
                }
            }
        }
        let gone: Vec<Arc<Replica>> = {
            let mut replicas = self.inner.replicas.write();
            let ids: Vec<PartitionId> = replicas
                .keys()
                .filter(|id| !wanted.contains_key(*id))
                .cloned()
                .collect();
            ids.iter().filter_map(|id| replicas.remove(id)).collect()
        };
        for r in gone {
            self.inner.groups.remove_partition(&r.id);
            r.stop().await;
            // Its files go with it (a crash before this leaves them, and a topic of
            // that name created later removes them: its incarnation differs).
            let dir = self.replica_dir(&r.id);
            drop(r);
            match self.inner.config.env.io.remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "removed the replica of a deleted partition");
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the files of a deleted partition's replica");
                }
            }
        }
        for (id, (replicas, spec)) in wanted {
            let running = self.inner.replicas.read().get(&id).cloned();
            if let Some(replica) = running {
                // An alter may have changed the topic's options.
                self.retune(&replica, &spec.options);
                continue;
            }
            match self.start_replica(&id, replicas, spec).await {
                Ok(replica) => {
                    self.inner.replicas.write().insert(id, Arc::new(replica));
                }
                Err(e) => {
                    tracing::error!(partition = %id, error = %e, "cannot start a replica; retried at the next metadata change");
                }
            }
        }
    }

    /// The directory of this node's replica of `id`.
    fn replica_dir(&self, id: &PartitionId) -> PathBuf {
        self.inner
            .config
            .data_dir
            .join("cluster")
            .join("streams")
            .join(&id.stream)
            .join(&id.topic)
            .join(id.partition.to_string())
    }

    async fn start_replica(
        &self,
        id: &PartitionId,
        replicas: Vec<u64>,
        spec: &TopicSpec,
    ) -> Result<Replica, NodeError> {
        let config = &self.inner.config;
        let dir = self.replica_dir(id);
        claim_replica_dir(config.env.io.as_ref(), &dir, spec.incarnation)
            .map_err(|e| NodeError::Failed(format!("the directory of {id}: {e}")))?;
        let log_config = (config.log_config)(&spec.options);
        let store = PartitionLogStore::open(&dir, log_config, &config.env)?;
        let sm = PartitionStateMachine::open(&store)?;
        let raft = Raft::new(
            config.id,
            partition_timing(&config.timing),
            PartitionNetwork::new(self.inner.peers.clone(), id.clone(), spec.incarnation),
            store.clone(),
            sm.clone(),
        )
        .await
        .map_err(|e| NodeError::Failed(format!("starting the group of {id}: {e}")))?;
        self.inner.groups.add_partition(PartitionGroup::new(
            id.clone(),
            spec.incarnation,
            raft.clone(),
            store.clone(),
        ));
        let members: BTreeMap<u64, EmptyNode> =
            replicas.iter().map(|&r| (r, EmptyNode {})).collect();
        initialize(&raft, members, &format!("the group of {id}")).await?;
        tracing::info!(partition = %id, ?replicas, "started a replica");
        let leader_changes = Arc::default();
        // Ends when the replica stops (its metrics close).
        drop(count_leader_changes(&raft, Arc::clone(&leader_changes)));
        Ok(Replica {
            id: id.clone(),
            raft,
            sm,
            store,
            replicas,
            leader_changes,
            commit_latency: Arc::clone(&self.inner.commit_latency),
            sealing: Arc::default(),
            options: Arc::new(parking_lot::Mutex::new(spec.options.clone())),
        })
    }
}

/// The file in a replica's directory that names its topic's incarnation.
const INCARNATION_FILE: &str = "incarnation";

/// Makes `dir` the replica directory of the topic incarnation `incarnation`: a
/// directory of another incarnation (a topic of this name deleted while this node was
/// down), or one without its incarnation file (its removal was cut short, or its
/// creation was), is removed first; a new one gets its incarnation file, synced, before
/// anything else is written there. Incarnation 0 (topics from before incarnations)
/// takes the directory as it is.
fn claim_replica_dir(
    io: &dyn rill_storage::Io,
    dir: &std::path::Path,
    incarnation: u64,
) -> std::io::Result<()> {
    if incarnation == 0 {
        return Ok(());
    }
    let marker = dir.join(INCARNATION_FILE);
    if io.is_dir(dir) {
        let found = crate::files::read_file(io, &marker)?;
        let ours = found
            .as_deref()
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|t| t.trim().parse::<u64>().ok())
            == Some(incarnation);
        if ours {
            return Ok(());
        }
        tracing::warn!(
            dir = %dir.display(),
            "removing a replica left from an earlier topic of this name"
        );
        io.remove_dir_all(dir)?;
    }
    crate::files::ensure_dir(io, dir)?;
    crate::files::replace_file(io, &marker, incarnation.to_string().as_bytes())
}

/// How long a node waits for another's status report.
const STATUS_WAIT: Duration = Duration::from_secs(1);

/// The replicas this node runs, for another node's status request.
fn local_report(
    node: u64,
    replicas: &HashMap<PartitionId, Arc<Replica>>,
) -> crate::peer::LocalReport {
    let mut out: Vec<crate::peer::ReplicaReport> = replicas
        .values()
        .map(|r| {
            let metrics = r.raft.metrics().borrow_watched().clone();
            let leading = metrics.state == ServerState::Leader;
            let hwm = r.high_watermark();
            let lag = match (&metrics.replication, leading) {
                (Some(matched), true) => matched
                    .iter()
                    .filter(|(n, _)| **n != node)
                    .filter_map(|(n, id)| {
                        id.as_ref()
                            .map(|id| (*n, hwm.saturating_sub(r.store.next_offset_at(id.index))))
                    })
                    .collect(),
                _ => BTreeMap::new(),
            };
            crate::peer::ReplicaReport {
                partition: r.id.clone(),
                leader: metrics.current_leader,
                leading,
                high_watermark: hwm,
                lag,
            }
        })
        .collect();
    out.sort_by(|a, b| a.partition.cmp(&b.partition));
    crate::peer::LocalReport {
        node,
        replicas: out,
    }
}

fn validate(config: &NodeConfig) -> Result<(), NodeError> {
    if config.peers.is_empty() {
        return Err(NodeError::Config("--peers names no node".into()));
    }
    if !config.peers.contains_key(&config.id) {
        return Err(NodeError::Config(format!(
            "--node-id {} is not one of the nodes of --peers ({})",
            config.id,
            config
                .peers
                .keys()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut seen = BTreeSet::new();
    for (id, addr) in &config.peers {
        if !seen.insert(addr) {
            return Err(NodeError::Config(format!(
                "node {id}'s address {addr} is given to another node too"
            )));
        }
    }
    Ok(())
}

/// Refuses a node whose stored voters are not those of `--peers` (a membership change
/// is an explicit command, still to come).
fn check_voters(meta: &MetaRaft, config: &NodeConfig) -> Result<(), NodeError> {
    let metrics = meta.metrics().borrow_watched().clone();
    let stored: BTreeSet<u64> = metrics.membership_config.membership().voter_ids().collect();
    let given: BTreeSet<u64> = config.peers.keys().copied().collect();
    if !stored.is_empty() && stored != given {
        return Err(NodeError::Config(format!(
            "this data directory belongs to a cluster of nodes {stored:?}, but --peers names {given:?}"
        )));
    }
    Ok(())
}

/// Initializes a pristine group; a group that is not pristine (it was initialized, or
/// voted in an election another member's initialize started) is left as it is.
async fn initialize<C, SM>(
    raft: &Raft<C, SM>,
    members: BTreeMap<u64, EmptyNode>,
    what: &str,
) -> Result<(), NodeError>
where
    C: openraft::RaftTypeConfig<NodeId = u64, Node = EmptyNode>,
    SM: openraft::storage::RaftStateMachine<C>,
{
    match raft.initialize(members).await {
        Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(NodeError::Failed(format!("initializing {what}: {e}"))),
    }
}
