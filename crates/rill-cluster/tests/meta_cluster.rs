//! Three metadata nodes on the real library with our store, in one process, wired by
//! an in-memory router that can cut a node off: they bootstrap with `initialize` on
//! every node (docs/REPLICATION.md §3), elect a leader, replicate commands; a leader
//! cut off is replaced and catches up when it returns, past a purged log (by snapshot);
//! a node restarted from its directory comes back with the same state.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{config, until};
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{EmptyNode, Raft, RaftNetworkV2};
use parking_lot::Mutex;
use rill_cluster::{MetaCommand, MetaLogStore, MetaState, MetaStateMachine, MetaTypes, TopicSpec};

type MetaRaft = Raft<MetaTypes, MetaStateMachine>;

/// Who can reach whom: the nodes, and the ones cut off from every other.
#[derive(Clone, Default)]
struct Router {
    nodes: Arc<Mutex<BTreeMap<u64, (MetaRaft, MetaStateMachine)>>>,
    cut: Arc<Mutex<BTreeSet<u64>>>,
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
    fn target(&self, from: u64, to: u64) -> Result<MetaRaft, Down> {
        let cut = self.cut.lock();
        if cut.contains(&from) || cut.contains(&to) {
            return Err(Down(format!("{from} -> {to} is cut")));
        }
        drop(cut);
        self.nodes
            .lock()
            .get(&to)
            .map(|(raft, _)| raft.clone())
            .ok_or_else(|| Down(format!("node {to} is not running")))
    }
}

struct Net {
    from: u64,
    to: u64,
    router: Router,
}

fn unreachable<E: std::error::Error + 'static>(e: &E) -> RPCError<MetaTypes> {
    RPCError::Unreachable(Unreachable::new(e))
}

impl RaftNetworkV2<MetaTypes> for Net {
    type SnapshotData = std::io::Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetaTypes>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MetaTypes>, RPCError<MetaTypes>> {
        let raft = self
            .router
            .target(self.from, self.to)
            .map_err(|e| unreachable(&e))?;
        raft.append_entries(rpc).await.map_err(|e| unreachable(&e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MetaTypes>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MetaTypes>, RPCError<MetaTypes>> {
        let raft = self
            .router
            .target(self.from, self.to)
            .map_err(|e| unreachable(&e))?;
        raft.vote(rpc).await.map_err(|e| unreachable(&e))
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<MetaTypes>,
        snapshot: SnapshotOf<MetaTypes, Self::SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<MetaTypes>, StreamingError<MetaTypes>> {
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

impl RaftNetworkFactory<MetaTypes> for Factory {
    type Network = Net;

    async fn new_client(&mut self, target: u64, _node: &EmptyNode) -> Net {
        Net {
            from: self.from,
            to: target,
            router: self.router.clone(),
        }
    }
}

async fn start(router: &Router, id: u64, dir: &PathBuf) -> MetaRaft {
    let log = MetaLogStore::open(dir).expect("the log opens");
    let sm = MetaStateMachine::open(dir).expect("the state machine opens");
    let factory = Factory {
        from: id,
        router: router.clone(),
    };
    let raft = Raft::new(id, config(), factory, log, sm.clone())
        .await
        .expect("the node starts");
    router.nodes.lock().insert(id, (raft.clone(), sm));
    raft
}

/// The leader, as the given nodes see it, once they agree and it is one of them.
async fn leader(router: &Router, among: &[u64]) -> u64 {
    let start = Instant::now();
    loop {
        let rafts: Vec<MetaRaft> = among
            .iter()
            .map(|id| router.nodes.lock()[id].0.clone())
            .collect();
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
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for a leader that {among:?} agree on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn states(router: &Router, ids: &[u64]) -> Vec<MetaState> {
    let sms: Vec<MetaStateMachine> = ids
        .iter()
        .map(|id| router.nodes.lock()[id].1.clone())
        .collect();
    let mut out = Vec::new();
    for sm in sms {
        out.push(sm.state().await);
    }
    out
}

/// Commits `command` through the leader of the nodes that are not cut off (`hint`
/// first). A busy machine may delay heartbeats into an election, so a refused write is
/// tried again on whoever leads then (every command here is idempotent).
async fn write(router: &Router, hint: u64, command: MetaCommand) {
    let start = Instant::now();
    let mut to = hint;
    loop {
        let raft = router.nodes.lock()[&to].0.clone();
        match raft.client_write(command.clone()).await {
            Ok(_) => return,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "no leader commits {command}: {e}"
                );
                let cut = router.cut.lock().clone();
                let live: Vec<u64> = (1..=3).filter(|id| !cut.contains(id)).collect();
                to = leader(router, &live).await;
            }
        }
    }
}

fn stream(name: &str) -> MetaCommand {
    MetaCommand::CreateStream { name: name.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_replicate_fail_over_catch_up_and_restart() {
    let router = Router::default();
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let path = |id: u64| dirs[&id].path().to_path_buf();
    for id in 1..=3 {
        start(&router, id, &path(id)).await;
    }
    let members: BTreeMap<u64, EmptyNode> = (1..=3).map(|id| (id, EmptyNode {})).collect();
    // Every pristine node initializes with the same voters (node ids only). A node that
    // has voted meanwhile (another's initialize started an election) is no longer
    // pristine and refuses, harmlessly.
    for id in 1..=3 {
        let raft = router.nodes.lock()[&id].0.clone();
        match raft.initialize(members.clone()).await {
            Ok(()) => {}
            Err(openraft::error::RaftError::APIError(
                openraft::error::InitializeError::NotAllowed(_),
            )) => {}
            Err(e) => panic!("initialize failed on node {id}: {e}"),
        }
    }
    let first = leader(&router, &[1, 2, 3]).await;
    write(&router, first, stream("shop")).await;
    until("every node applied the stream", || async {
        states(&router, &[1, 2, 3])
            .await
            .iter()
            .all(|s| s.streams.contains_key("shop"))
    })
    .await;

    // The leader is cut off: the other two elect one of them and go on.
    router.cut.lock().insert(first);
    let rest: Vec<u64> = (1..=3).filter(|&id| id != first).collect();
    let second = leader(&router, &rest).await;
    assert_ne!(second, first);
    write(
        &router,
        second,
        MetaCommand::CreateTopic {
            stream: "shop".into(),
            topic: "orders".into(),
            spec: TopicSpec {
                replicas: vec![vec![1, 2, 3]; 2],
                options: vec![1, 2],
                incarnation: 1,
            },
        },
    )
    .await;
    for i in 0..20 {
        write(&router, second, stream(&format!("s{i}"))).await;
    }
    // The new leader snapshots and purges its log, so the old one must be sent a
    // snapshot to catch up.
    let raft = router.nodes.lock()[&second].0.clone();
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
    // A leader purges once no request to a follower reads those entries; it tries again
    // as replication goes on, so writes go on until it has.
    let mut more = 0;
    until("the log is purged up to the snapshot", || {
        let (raft, router) = (raft.clone(), router.clone());
        more += 1;
        let name = format!("more{more}");
        async move {
            write(&router, second, stream(&name)).await;
            raft.metrics()
                .borrow_watched()
                .purged
                .is_some_and(|p| p.index >= upto)
        }
    })
    .await;
    let streams = 21 + more;
    let old = states(&router, &[first]).await.remove(0);
    assert!(
        old.topic("shop", "orders").is_none(),
        "the cut-off node applied nothing meanwhile"
    );

    // Healed: the old leader follows and catches up.
    router.cut.lock().clear();
    until("the old leader caught up", || async {
        let all = states(&router, &[1, 2, 3]).await;
        all.iter().all(|s| s == &all[0]) && all[0].streams.len() == streams
    })
    .await;

    let caught_up = router.nodes.lock()[&first].0.clone();
    assert!(
        caught_up.metrics().borrow_watched().snapshot.is_some(),
        "the old leader was sent a snapshot: the entries it lacked were purged"
    );

    // A restart from the directory keeps the state.
    let before = states(&router, &[first]).await.remove(0);
    let (raft, _) = router.nodes.lock().remove(&first).unwrap();
    raft.shutdown().await.unwrap();
    let raft = start(&router, first, &path(first)).await;
    until("the restarted node applied its log again", || {
        let router = router.clone();
        let before = before.clone();
        async move { states(&router, &[first]).await[0] == before }
    })
    .await;
    write(&router, leader(&router, &[1, 2, 3]).await, stream("after")).await;
    until("the restarted node follows again", || async {
        states(&router, &[1, 2, 3])
            .await
            .iter()
            .all(|s| s.streams.contains_key("after"))
    })
    .await;
    drop(raft);
    let nodes = std::mem::take(&mut *router.nodes.lock());
    for (_, (raft, _)) in nodes {
        raft.shutdown().await.unwrap();
    }
}
