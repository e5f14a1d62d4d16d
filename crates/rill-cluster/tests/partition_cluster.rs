//! Three replicas of one partition on the real library with our log store and state
//! machine, in one process, wired by an in-memory router that can cut a node off
//! (docs/REPLICATION.md §5–7): a leader's proposals get dense offsets from its log and
//! every replica ends with the same bytes; a leader cut off keeps proposals it cannot
//! commit, the majority goes on, and when it returns it truncates that tail and takes
//! the new leader's; a follower that was away past a purge of the leader's log catches
//! up by a snapshot that carries the batches it lacks; a replica restarted from its directory comes back with its log.
//! The high watermark never moves back on any replica, and no replica ever shows a
//! committed offset that another holds with different bytes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::until;
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{EmptyNode, Raft, RaftNetworkV2};
use parking_lot::Mutex;
use rill_cluster::partition::{
    PartitionCommand, PartitionLogStore, PartitionResponse, PartitionSnapshot,
    PartitionStateMachine, PartitionTypes,
};
use rill_format::{BatchBuilder, BatchView, NewRecord};
use rill_storage::{Durability, LogConfig, LogEnv, PartitionLog};

type PartitionRaft = Raft<PartitionTypes, PartitionStateMachine>;

#[derive(Clone)]
struct Node {
    raft: PartitionRaft,
    sm: PartitionStateMachine,
    store: PartitionLogStore,
}

#[derive(Clone, Default)]
struct Router {
    nodes: Arc<Mutex<BTreeMap<u64, Node>>>,
    cut: Arc<Mutex<BTreeSet<u64>>>,
    /// The replicas' segment size.
    segment_bytes: u64,
}

#[derive(Debug)]
struct Down(String);

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Down {}

impl Router {
    fn target(&self, from: u64, to: u64) -> Result<PartitionRaft, Down> {
        let cut = self.cut.lock();
        if cut.contains(&from) || cut.contains(&to) {
            return Err(Down(format!("{from} -> {to} is cut")));
        }
        drop(cut);
        self.nodes
            .lock()
            .get(&to)
            .map(|n| n.raft.clone())
            .ok_or_else(|| Down(format!("node {to} is not running")))
    }

    fn node(&self, id: u64) -> Node {
        self.nodes.lock()[&id].clone()
    }
}

struct Net {
    from: u64,
    to: u64,
    router: Router,
}

fn unreachable<E: std::error::Error + 'static>(e: &E) -> RPCError<PartitionTypes> {
    RPCError::Unreachable(Unreachable::new(e))
}

impl RaftNetworkV2<PartitionTypes> for Net {
    type SnapshotData = PartitionSnapshot;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<PartitionTypes>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<PartitionTypes>, RPCError<PartitionTypes>> {
        let raft = self
            .router
            .target(self.from, self.to)
            .map_err(|e| unreachable(&e))?;
        raft.append_entries(rpc).await.map_err(|e| unreachable(&e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<PartitionTypes>,
        _option: RPCOption,
    ) -> Result<VoteResponse<PartitionTypes>, RPCError<PartitionTypes>> {
        let raft = self
            .router
            .target(self.from, self.to)
            .map_err(|e| unreachable(&e))?;
        raft.vote(rpc).await.map_err(|e| unreachable(&e))
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<PartitionTypes>,
        snapshot: SnapshotOf<PartitionTypes, Self::SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<PartitionTypes>, StreamingError<PartitionTypes>> {
        let raft = self
            .router
            .target(self.from, self.to)
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
        raft.install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))
    }
}

struct Factory {
    from: u64,
    router: Router,
}

impl RaftNetworkFactory<PartitionTypes> for Factory {
    type Network = Net;

    async fn new_client(&mut self, target: u64, _node: &EmptyNode) -> Net {
        Net {
            from: self.from,
            to: target,
            router: self.router.clone(),
        }
    }
}

async fn start(router: &Router, id: u64, dir: &Path) -> PartitionRaft {
    let config = LogConfig {
        durability: Durability::Always,
        segment_bytes_max: router.segment_bytes,
        ..LogConfig::default()
    };
    let store = PartitionLogStore::open(dir, config, &LogEnv::default()).expect("the store opens");
    let sm = PartitionStateMachine::open(&store).expect("the state machine opens");
    let factory = Factory {
        from: id,
        router: router.clone(),
    };
    let raft = Raft::new(
        id,
        common::partition_config(),
        factory,
        store.clone(),
        sm.clone(),
    )
    .await
    .expect("the replica starts");
    router.nodes.lock().insert(
        id,
        Node {
            raft: raft.clone(),
            sm,
            store,
        },
    );
    raft
}

/// The leader, as the given nodes see it, once they agree and it is one of them.
async fn leader(router: &Router, among: &[u64]) -> u64 {
    let start = Instant::now();
    loop {
        let rafts: Vec<PartitionRaft> = among.iter().map(|id| router.node(*id).raft).collect();
        let mut seen = BTreeSet::new();
        for raft in &rafts {
            seen.insert(raft.current_leader().await);
        }
        if let [Some(l)] = seen.into_iter().collect::<Vec<_>>()[..]
            && among.contains(&l)
        {
            return l;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "timed out waiting for a leader that {among:?} agree on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn batch(tag: &str, records: usize) -> Bytes {
    let mut b = BatchBuilder::new();
    for i in 0..records {
        b.push(NewRecord::value(
            format!("{tag}/{i}/{}", "v".repeat(80)).as_bytes(),
        ))
        .unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

/// Proposes a batch through the leader of the live nodes until one commits it; returns
/// the offsets it got. (Each tag is proposed until committed once: a retried proposal
/// that had committed after all shows up twice, which the checks below allow for by
/// tag; the idempotent producer's deduplication is the broker's, not this layer's.)
async fn produce(router: &Router, tag: &str, records: usize) -> (u64, u64) {
    let start = Instant::now();
    loop {
        let cut = router.cut.lock().clone();
        let live: Vec<u64> = (1..=3).filter(|id| !cut.contains(id)).collect();
        let to = leader(router, &live).await;
        let raft = router.node(to).raft;
        let write = raft.client_write(PartitionCommand::Propose(batch(tag, records)));
        match tokio::time::timeout(Duration::from_secs(5), write).await {
            Ok(Ok(done)) => match done.data {
                PartitionResponse::Appended {
                    base_offset,
                    last_offset,
                    ..
                } => return (base_offset, last_offset),
                PartitionResponse::Done | PartitionResponse::Sealed { .. } => {
                    panic!("a data entry answered without offsets")
                }
            },
            Ok(Err(e)) => {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no leader commits {tag}: {e}"
                );
            }
            Err(_) => {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no leader commits {tag}"
                );
            }
        }
    }
}

/// Every batch of a replica's log from `from`, as (base offset, bytes).
fn batches(log: &PartitionLog, from: u64) -> Option<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut at = from.max(log.log_start());
    loop {
        if at >= log.next_offset() {
            return Some(out);
        }
        // A follower may be cutting its tail under the read: that is no answer yet.
        let read = log.read(at, 1 << 20).ok()?;
        if read.bytes.is_empty() {
            return Some(out);
        }
        for b in read.batches() {
            let b: BatchView<'_> = b.unwrap();
            if b.base_offset() >= at {
                out.push((b.base_offset(), b.as_bytes().to_vec()));
            }
        }
        at = read.next_offset;
    }
}

/// The tag of a batch's records.
fn tag(bytes: &[u8]) -> String {
    let view = BatchView::parse(bytes).unwrap();
    let first = view.records().next().unwrap();
    let value = std::str::from_utf8(first.value).unwrap();
    value.split('/').next().unwrap().to_owned()
}

/// Waits until every replica's high watermark is `end` and their logs (from `from`)
/// are identical; returns the batches.
async fn converged(router: &Router, from: u64, end: u64) -> Vec<(u64, Vec<u8>)> {
    let start = Instant::now();
    loop {
        let nodes: Vec<Node> = (1..=3).map(|id| router.node(id)).collect();
        let logs: Vec<_> = nodes
            .iter()
            .map(|n| batches(&n.store.log(), from))
            .collect();
        if nodes.iter().all(|n| n.sm.high_watermark() >= end)
            && logs[0].is_some()
            && logs.iter().all(|l| l == &logs[0])
        {
            return logs[0].clone().unwrap();
        }
        if start.elapsed() > Duration::from_secs(15) {
            let seen: Vec<_> = nodes
                .iter()
                .zip(&logs)
                .map(|(n, l)| {
                    (
                        n.sm.high_watermark(),
                        n.store.log().next_offset(),
                        l.as_ref().map(|l| {
                            l.iter()
                                .map(|(b, bytes)| (*b, tag(bytes)))
                                .collect::<Vec<_>>()
                        }),
                    )
                })
                .collect();
            panic!("replicas did not converge on {from}..{end}: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Watches every replica's high watermark and fails if one moves back.
fn watch_watermarks(router: &Router) -> tokio::task::JoinHandle<()> {
    let router = router.clone();
    tokio::spawn(async move {
        let mut last = BTreeMap::new();
        loop {
            let nodes: Vec<(u64, Node)> = router
                .nodes
                .lock()
                .iter()
                .map(|(id, n)| (*id, n.clone()))
                .collect();
            for (id, node) in nodes {
                let w = node.sm.high_watermark();
                let before = last.insert((id, Arc::as_ptr(&node.store.log()) as usize), w);
                assert!(
                    before.is_none_or(|b| b <= w),
                    "replica {id}'s high watermark moved back from {before:?} to {w}"
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// Segments large enough that the leader's purge keeps the one holding the away
/// follower's end: the follower copies the batches after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_commit_fail_over_truncate_catch_up_by_snapshot_and_restart() {
    scenario(1 << 20).await;
}

/// Small segments: the leader's purge deletes the segment holding the away follower's
/// end, so the follower's log is replaced whole by the snapshot's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_end_the_leader_deleted_is_sent_a_log_that_replaces_its_own() {
    scenario(4096).await;
}

async fn scenario(segment_bytes: u64) {
    let router = Router {
        segment_bytes,
        ..Router::default()
    };
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let path = |id: u64| dirs[&id].path().to_path_buf();
    for id in 1..=3 {
        start(&router, id, &path(id)).await;
    }
    let members: BTreeMap<u64, EmptyNode> = (1..=3).map(|id| (id, EmptyNode {})).collect();
    for id in 1..=3 {
        match router.node(id).raft.initialize(members.clone()).await {
            Ok(()) => {}
            Err(openraft::error::RaftError::APIError(
                openraft::error::InitializeError::NotAllowed(_),
            )) => {}
            Err(e) => panic!("initialize failed on node {id}: {e}"),
        }
    }
    let watcher = watch_watermarks(&router);

    // Proposals get dense offsets from the leader's log, in the order they commit.
    let mut end = 0;
    for i in 0..30 {
        let (base, last) = produce(&router, &format!("a{i}"), 1 + i % 4).await;
        assert!(base >= end, "offsets go forward");
        end = last + 1;
    }
    let log = converged(&router, 0, end).await;
    let tags: Vec<String> = log.iter().map(|(_, b)| tag(b)).collect();
    for i in 0..30 {
        assert!(tags.contains(&format!("a{i}")), "a{i} is in the log");
    }

    // The leader is cut off with proposals it cannot commit.
    let old = leader(&router, &[1, 2, 3]).await;
    router.cut.lock().insert(old);
    let stranded = router.node(old).raft;
    let pending: Vec<_> = (0..5)
        .map(|i| {
            let raft = stranded.clone();
            tokio::spawn(async move {
                raft.client_write(PartitionCommand::Propose(batch(&format!("lost{i}"), 2)))
                    .await
            })
        })
        .collect();
    until("the cut-off leader appended its proposals", || async {
        router.node(old).store.log().next_offset() > end
    })
    .await;
    // The majority elects a new leader and goes on.
    for i in 0..20 {
        let (_, last) = produce(&router, &format!("b{i}"), 3).await;
        end = end.max(last + 1);
    }
    assert!(
        router.node(old).sm.high_watermark() < end,
        "the cut-off leader committed nothing new"
    );
    // Healed: the old leader truncates its tail and takes the new leader's.
    router.cut.lock().clear();
    let log = converged(&router, 0, end).await;
    let tags: Vec<String> = log.iter().map(|(_, b)| tag(b)).collect();
    assert!(
        tags.iter().all(|t| !t.starts_with("lost")),
        "the stranded proposals are gone from every replica"
    );
    for p in pending {
        let outcome = p.await.unwrap();
        assert!(
            outcome.is_err(),
            "a stranded proposal was acknowledged: {outcome:?}"
        );
    }

    // A follower away while the leader snapshots and purges catches up by snapshot.
    let lead = leader(&router, &[1, 2, 3]).await;
    let away = (1..=3).find(|&id| id != lead).unwrap();
    router.cut.lock().insert(away);
    for i in 0..40 {
        let (_, last) = produce(&router, &format!("c{i}"), 4).await;
        end = end.max(last + 1);
    }
    let lead = leader(&router, &(1..=3).filter(|&i| i != away).collect::<Vec<_>>()).await;
    let raft = router.node(lead).raft;
    raft.trigger().snapshot().await.unwrap();
    until("the snapshot is built", || {
        let raft = raft.clone();
        async move { raft.metrics().borrow_watched().snapshot.is_some() }
    })
    .await;
    let upto = raft
        .metrics()
        .borrow_watched()
        .snapshot
        .expect("built")
        .index;
    raft.trigger().purge_log(upto).await.unwrap();
    let mut more = 0;
    until("the leader purged its log up to the snapshot", || {
        more += 1;
        let (raft, router) = (raft.clone(), router.clone());
        let tag = format!("d{more}");
        async move {
            produce(&router, &tag, 1).await;
            raft.metrics()
                .borrow_watched()
                .purged
                .is_some_and(|p| p.index >= upto)
        }
    })
    .await;
    let lead_log = router.node(lead).store.log();
    end = lead_log.next_offset();
    let away_end = router.node(away).store.log().next_offset();
    if segment_bytes < 8192 {
        assert!(
            lead_log.log_start() > away_end,
            "the leader's purge deleted the away follower's end"
        );
    } else {
        assert!(lead_log.log_start() <= away_end);
    }
    router.cut.lock().clear();
    let from = lead_log.log_start();
    converged(&router, from, end).await;
    assert!(
        router
            .node(away)
            .raft
            .metrics()
            .borrow_watched()
            .snapshot
            .is_some(),
        "the follower was sent a snapshot: the entries it lacked were purged"
    );

    // A replica restarted from its directory comes back with its log and follows.
    let before = batches(&router.node(away).store.log(), from).unwrap();
    let node = router.nodes.lock().remove(&away).unwrap();
    node.raft.shutdown().await.unwrap();
    node.store.close();
    drop(node);
    start(&router, away, &path(away)).await;
    assert_eq!(
        batches(&router.node(away).store.log(), from).unwrap(),
        before
    );
    let (_, last) = produce(&router, "after", 2).await;
    converged(&router, from, last + 1).await;

    watcher.abort();
    let nodes = std::mem::take(&mut *router.nodes.lock());
    for (_, node) in nodes {
        node.raft.shutdown().await.unwrap();
    }
}
