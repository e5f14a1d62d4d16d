//! The seam a cluster serves the broker through (docs/REPLICATION.md §11.1): the broker
//! never imports the Raft library. `rill-cluster` implements [`Cluster`] and
//! [`ReplicaLog`]; a broker opened with [`Broker::open_clustered`](crate::Broker::open_clustered)
//! takes its catalog, its stored offsets and its partitions from them.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use rill_storage::PartitionLog;
use tokio::sync::watch;

use crate::BrokerError;
use crate::catalog::TopicConfig;

/// A boxed future of the seam.
pub type ClusterFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BrokerError>> + Send + 'a>>;

/// A batch's commit: its base offset, last offset and append time once a majority
/// holds it.
pub type Commit = ClusterFuture<'static, (u64, u64, i64)>;

/// A change of the catalog, proposed through the metadata group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogChange {
    /// Creates a stream.
    CreateStream(String),
    /// Deletes a stream, its topics and their stored offsets.
    DeleteStream(String),
    /// Creates a topic with its options and, per partition, its replicas.
    CreateTopic {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
        /// Its options.
        config: TopicConfig,
        /// Replicas per partition; `None`: the cluster's default (min(3, nodes)).
        replicas: Option<u32>,
    },
    /// Deletes a topic and its stored offsets.
    DeleteTopic {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
    },
    /// Changes a topic's options from `from` (what the change was made against: a
    /// topic altered meanwhile is a `Conflict`) to `to`, adding partitions up to
    /// `to.partitions`, placed as a new topic's are.
    AlterTopic {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
        /// Its options as the change found them.
        from: TopicConfig,
        /// Its new options.
        to: TopicConfig,
    },
}

/// What the metadata group answered a catalog change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogOutcome {
    /// Done.
    Done,
    /// It existed already as asked.
    Exists,
    /// What it names does not exist.
    NotFound(String),
    /// It cannot be done as asked: why.
    Conflict(String),
}

/// A stored consumer offset's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetName {
    /// The stream.
    pub stream: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The consumer (or group) name.
    pub consumer: String,
}

/// A node of the cluster, as clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMember {
    /// Its id.
    pub id: u64,
    /// Its client address (`--listen`), once it registered.
    pub client: Option<String>,
}

/// One partition of a topic in a cluster.
#[derive(Clone)]
pub struct Placement {
    /// Its replicas (node ids).
    pub replicas: Vec<u64>,
    /// The replica on this node, if it is one of them.
    pub local: Option<Arc<dyn ReplicaLog>>,
}

impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Placement")
            .field("replicas", &self.replicas)
            .field("local", &self.local.is_some())
            .finish()
    }
}

/// A topic in a cluster.
#[derive(Debug, Clone)]
pub struct ClusterTopic {
    /// Its options.
    pub config: TopicConfig,
    /// Its partitions, by number.
    pub partitions: Vec<Placement>,
}

/// The catalog and stored offsets as this node applied them.
#[derive(Debug, Clone, Default)]
pub struct ClusterCatalog {
    /// Grows with every applied change.
    pub version: u64,
    /// Streams by name, each with its topics by name.
    pub streams: BTreeMap<String, BTreeMap<String, ClusterTopic>>,
    /// Stored consumer offsets.
    pub offsets: BTreeMap<OffsetName, u64>,
    /// The nodes.
    pub members: Vec<ClusterMember>,
    /// The credential file (`auth.json`'s text) and its version, once one was made
    /// (docs/SECURITY.md §2.3).
    pub auth: Option<(u64, Arc<str>)>,
}

/// A node in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// Its id.
    pub id: u64,
    /// Its node-to-node address.
    pub peer: String,
    /// Its client address, once registered.
    pub client: Option<String>,
    /// Whether it answered just now.
    pub up: bool,
    /// Whether it leads the metadata group (the controller), as this node knows.
    pub controller: bool,
}

/// A partition in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    /// The stream.
    pub stream: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// Its leader, if one is known.
    pub leader: Option<u64>,
    /// Its replicas.
    pub replicas: Vec<u64>,
    /// Per follower the leader heard from: records behind the high watermark.
    pub lag: BTreeMap<u64, u64>,
    /// The leader's high watermark (0 while no leader answered).
    pub high_watermark: u64,
}

/// The nodes of a cluster and its partitions' replication.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterStatus {
    /// The nodes, by id.
    pub nodes: Vec<NodeStatus>,
    /// Every partition of every topic.
    pub partitions: Vec<PartitionStatus>,
}

/// One replica on this node, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaHealth {
    /// The stream.
    pub stream: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// Whether this replica leads now.
    pub leading: bool,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// Its current term.
    pub term: u64,
    /// Its high watermark.
    pub high_watermark: u64,
    /// Times it saw the leader change since the node started.
    pub leader_changes: u64,
    /// When leading: per follower, records behind.
    pub lag: BTreeMap<u64, u64>,
}

/// This node's view of the cluster, for `/health` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterHealth {
    /// This node's id.
    pub node_id: u64,
    /// Whether this node is in a quorum of the metadata group now: it leads it and a
    /// majority acknowledged it within the last second, or it follows a leader.
    pub in_quorum: bool,
    /// The metadata group's leader (the controller), as this node knows it.
    pub controller: Option<u64>,
    /// The metadata group's current term here.
    pub term: u64,
    /// Times this node saw the controller change since it started.
    pub controller_changes: u64,
    /// The replicas on this node.
    pub replicas: Vec<ReplicaHealth>,
    /// How long this node's proposals as a partition leader took to commit.
    pub commit_latency: LatencySnapshot,
}

/// Upper bounds of the commit-latency buckets, in seconds (100 µs to 10 s); a last
/// `+Inf` bucket catches the rest.
pub const COMMIT_BUCKETS_SECONDS: [f64; 15] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0,
];

/// A histogram of durations over [`COMMIT_BUCKETS_SECONDS`], kept with atomics.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Non-cumulative counts; the last slot is `+Inf`.
    buckets: [std::sync::atomic::AtomicU64; COMMIT_BUCKETS_SECONDS.len() + 1],
    sum_nanos: std::sync::atomic::AtomicU64,
    count: std::sync::atomic::AtomicU64,
}

impl LatencyHistogram {
    /// Counts one duration.
    pub fn observe(&self, elapsed: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let seconds = elapsed.as_secs_f64();
        let slot = COMMIT_BUCKETS_SECONDS.partition_point(|&bound| bound < seconds);
        self.buckets[slot].fetch_add(1, Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> LatencySnapshot {
        use std::sync::atomic::Ordering::Relaxed;
        LatencySnapshot {
            counts: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            sum_nanos: self.sum_nanos.load(Relaxed),
            count: self.count.load(Relaxed),
        }
    }
}

/// What a [`LatencyHistogram`] counted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LatencySnapshot {
    /// Per bucket of [`COMMIT_BUCKETS_SECONDS`] and a last `+Inf` one, not cumulative
    /// (empty: nothing counted yet, or none kept).
    pub counts: Vec<u64>,
    /// The sum of the durations, in nanoseconds.
    pub sum_nanos: u64,
    /// Durations counted.
    pub count: u64,
}

/// A cluster, as the broker uses it.
pub trait Cluster: Send + Sync + fmt::Debug + 'static {
    /// This node's id.
    fn node_id(&self) -> u64;
    /// Proposes a catalog change; resolves once it is committed and applied on this node.
    fn change_catalog(&self, change: CatalogChange) -> ClusterFuture<'_, CatalogOutcome>;
    /// The applied catalog, as it changes.
    fn catalog(&self) -> watch::Receiver<Arc<ClusterCatalog>>;
    /// Stores consumer offsets; resolves once committed.
    fn store_offsets(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, ()>;
    /// Deletes a stored offset; resolves once committed, with whether there was one.
    fn delete_offset(&self, key: OffsetName) -> ClusterFuture<'_, bool>;
    /// The term in which this node coordinates consumer groups (it leads the metadata
    /// group and applied an entry of its term); `NOT_LEADER` naming the leader otherwise.
    fn coordinator_term(&self) -> Result<u64, BrokerError>;
    /// The metadata group's read index, confirmed now by this node as its leader in
    /// `term` with a quorum (never asked of another node); `NOT_LEADER` otherwise.
    fn read_index_here(&self, term: u64) -> ClusterFuture<'_, u64>;
    /// Stores consumer offsets only if this node leads the metadata group (never
    /// forwarded); resolves once committed, with the entry's index.
    fn store_offsets_here(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, u64>;
    /// Deletes a stored offset only if this node leads the metadata group; resolves
    /// once committed, with whether there was one and the entry's index.
    fn delete_offset_here(&self, key: OffsetName) -> ClusterFuture<'_, (bool, u64)>;
    /// The metadata group's read index: once the catalog applied on this node reaches
    /// it (its version is above it), a read of it is linearizable.
    fn read_index(&self) -> ClusterFuture<'_, u64>;
    /// The nodes and the partitions' replication, as the nodes report them now.
    fn status(&self) -> ClusterFuture<'_, ClusterStatus>;
    /// This node's view, at once (for `/health` and `/metrics`).
    fn health(&self) -> ClusterHealth;
    /// Whether this node's applied catalog is current: it hears from the metadata
    /// group's leader and applied everything it knows committed. A node that just
    /// started, or is cut off, is not: a name it does not know may exist.
    fn catalog_current(&self) -> bool;
    /// Replaces the credential file if it is still at version `expected` (0: none
    /// yet); resolves once committed and applied on this node. `Conflict` if it changed.
    fn replace_auth(&self, expected: u64, text: Arc<str>) -> ClusterFuture<'_, CatalogOutcome>;
    /// Stores offsets all at once or none (a named consumer's reset); resolves once
    /// committed and applied on this node. `InvalidRequest` if one names a partition
    /// that no longer exists (then none is stored).
    fn reset_offsets(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, ()>;
    /// [`Cluster::reset_offsets`] only if this node leads the metadata group (a group's
    /// reset, never forwarded); resolves once committed, with the entry's index.
    fn reset_offsets_here(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, u64>;
    /// Deletes every stored offset of `consumer` on a topic at once, only if this node
    /// leads the metadata group (a group's delete, never forwarded); resolves once
    /// committed, with how many there were and the entry's index.
    fn delete_consumer_here(
        &self,
        stream: &str,
        topic: &str,
        consumer: &str,
    ) -> ClusterFuture<'_, (u32, u64)>;
}

/// A partition replica on this node, as the broker serves it.
pub trait ReplicaLog: Send + Sync + fmt::Debug + 'static {
    /// Enqueues a batch (unstamped, as a producer sent it) as the group's next proposal:
    /// proposals keep the order of these calls. Resolves once enqueued, to its commit.
    /// `NotLeader` if this replica does not lead.
    fn propose(&self, batch: Bytes) -> ClusterFuture<'_, Commit>;
    /// The term this replica leads in, or `None` when it does not lead.
    fn leading(&self) -> Option<u64>;
    /// The leader this replica knows of.
    fn leader(&self) -> Option<u64>;
    /// The high watermark: every offset below it is committed.
    fn high_watermark(&self) -> u64;
    /// Watches the high watermark.
    fn watch_high_watermark(&self) -> watch::Receiver<u64>;
    /// The local log (reads must stay below the high watermark).
    fn log(&self) -> Arc<PartitionLog>;
    /// Seals this replica's range where its log ends (docs/RANGES.md §9), the leader
    /// only: no batch is proposed after the seal. Resolves once the seal is committed,
    /// to the offset the range is sealed at; a log that holds a seal already answers
    /// with it once it is committed. `NotLeader` if this replica does not lead.
    fn seal(&self) -> ClusterFuture<'_, u64>;
    /// The seal this replica's log holds, committed or not: the offset it is at.
    fn sealed(&self) -> Option<u64>;
    /// Applies the topic's retention to this replica through its group (a purge of the
    /// group's log, docs/REPLICATION.md §7.5), never by deleting segments under it.
    /// Resolves to where the log is to start when anything is to go.
    fn retain(&self) -> ClusterFuture<'_, Option<u64>>;
}
