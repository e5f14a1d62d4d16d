//! Three cluster nodes on loopback (docs/REPLICATION.md §3): started in any order they
//! form the metadata group and register their addresses; a topic created through any
//! node (forwarded to the controller) gets a replica on each node its replica sets
//! name, each group elects a leader, and a produce through the leader is committed
//! on every replica with the same bytes; readers never see past the high watermark; a
//! node stopped and started again from its directory takes its replicas back and
//! catches up; an alter that adds a partition starts its replicas; a node whose
//! `--peers` differs from its stored voters refuses to start; a leader restarted at
//! once is a follower until an election, so the first read it answers holds every
//! entry committed before.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::until;
use rill_cluster::meta::{MetaCommand, OffsetKey, TopicSpec};
use rill_cluster::node::{ClusterNode, NodeConfig, NodeError};
use rill_cluster::peer::PartitionId;
use rill_format::{BatchBuilder, BatchView, NewRecord};
use rill_storage::{Durability, LogConfig, LogEnv};
use tokio::net::TcpListener;

fn node_config(id: u64, dir: &Path, peers: &BTreeMap<u64, SocketAddr>) -> NodeConfig {
    NodeConfig {
        id,
        peers: peers.iter().map(|(&i, a)| (i, a.to_string())).collect(),
        data_dir: dir.to_path_buf(),
        timing: common::config(),
        env: LogEnv::default(),
        log_config: Arc::new(|_options: &[u8]| LogConfig {
            durability: Durability::Always,
            segment_bytes_max: 1 << 16,
            ..LogConfig::default()
        }),
    }
}

async fn bind_three() -> (BTreeMap<u64, TcpListener>, BTreeMap<u64, SocketAddr>) {
    let mut listeners = BTreeMap::new();
    for id in 1..=3u64 {
        // A reserved port (rill_testkit::ports): a node restarted on it finds it free.
        let port = rill_testkit::ports::free_port().unwrap();
        listeners.insert(id, TcpListener::bind(("127.0.0.1", port)).await.unwrap());
    }
    let addrs = listeners
        .iter()
        .map(|(&id, l)| (id, l.local_addr().unwrap()))
        .collect();
    (listeners, addrs)
}

fn batch(tag: &str) -> Bytes {
    let mut b = BatchBuilder::new();
    for i in 0..2 {
        b.push(NewRecord::value(format!("{tag}/{i}").as_bytes()))
            .unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

/// Three nodes on loopback, each with a directory of its own, started at once.
async fn start_three() -> (
    BTreeMap<u64, tempfile::TempDir>,
    BTreeMap<u64, SocketAddr>,
    BTreeMap<u64, ClusterNode>,
) {
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let (mut listeners, peers) = bind_three().await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3u64 {
        let listener = listeners.remove(&id).unwrap();
        let node = ClusterNode::start(node_config(id, dirs[&id].path(), &peers), listener)
            .await
            .unwrap();
        nodes.insert(id, node);
    }
    (dirs, peers, nodes)
}

/// Starts node `id` again from its directory, on its peer address.
async fn start_again(
    id: u64,
    dirs: &BTreeMap<u64, tempfile::TempDir>,
    peers: &BTreeMap<u64, SocketAddr>,
) -> ClusterNode {
    let listener = TcpListener::bind(peers[&id]).await.unwrap();
    ClusterNode::start(node_config(id, dirs[&id].path(), peers), listener)
        .await
        .unwrap()
}

/// Creates stream `shop` and its topic `orders`: one partition, a replica on each node.
async fn create_orders(node: &ClusterNode, incarnation: u64) {
    node.propose(MetaCommand::CreateStream {
        name: "shop".into(),
    })
    .await
    .unwrap();
    node.propose(MetaCommand::CreateTopic {
        stream: "shop".into(),
        topic: "orders".into(),
        spec: TopicSpec {
            replicas: vec![vec![1, 2, 3]],
            options: Vec::new(),
            incarnation,
        },
    })
    .await
    .unwrap();
}

fn partition(p: u32) -> PartitionId {
    PartitionId {
        stream: "shop".into(),
        topic: "orders".into(),
        partition: p,
    }
}

/// Produces through whichever node leads the partition, until one commits it.
async fn produce(nodes: &BTreeMap<u64, ClusterNode>, id: &PartitionId, tag: &str) -> u64 {
    let start = Instant::now();
    loop {
        for node in nodes.values() {
            let Ok(replica) = node.replica(id) else {
                continue;
            };
            if !replica.is_leader() {
                continue;
            }
            match replica.produce(batch(tag)).await {
                Ok((_, last, _)) => return last + 1,
                Err(NodeError::NotLeader { .. }) => {}
                Err(e) => panic!("produce failed: {e}"),
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no leader of {id} commits"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every committed batch of a replica, read as a reader would.
fn committed(node: &ClusterNode, id: &PartitionId) -> Vec<(u64, Vec<u8>)> {
    let Ok(replica) = node.replica(id) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut at = replica.log().log_start();
    loop {
        let read = match replica.read(at, 1 << 20) {
            Ok(read) => read,
            // A snapshot being installed: the log is the new one, the watermark not
            // yet (a follower's; readers read from leaders). Nothing to compare yet.
            Err(NodeError::Storage(rill_storage::StorageError::OffsetBeyondEnd { .. }))
                if replica.high_watermark() < replica.log().log_start() =>
            {
                return Vec::new();
            }
            // Retention (or a purge) moved the start while this read the log: what was
            // read no longer is the replica's log; the caller looks again.
            Err(NodeError::Storage(rill_storage::StorageError::OffsetBeforeStart { .. })) => {
                return Vec::new();
            }
            Err(e) => panic!("reading {id} failed: {e}"),
        };
        assert!(read.next_offset <= replica.high_watermark());
        if read.bytes.is_empty() {
            return out;
        }
        for b in read.batches() {
            let b: BatchView<'_> = b.unwrap();
            assert!(
                b.next_offset() <= replica.high_watermark(),
                "a batch past the watermark was served"
            );
            out.push((b.base_offset(), b.as_bytes().to_vec()));
        }
        at = read.next_offset;
    }
}

async fn converged(nodes: &BTreeMap<u64, ClusterNode>, id: &PartitionId, end: u64) {
    until("every replica committed the same batches", || async {
        let logs: Vec<_> = nodes.values().map(|n| committed(n, id)).collect();
        logs.iter().all(|l| l == &logs[0])
            && logs[0].last().is_some_and(|(b, bytes)| {
                b + u64::from(BatchView::parse(bytes).unwrap().record_count()) >= end
            })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_a_cluster_replicate_a_topic_and_take_a_node_back() {
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let (mut listeners, peers) = bind_three().await;
    // Started in any order: 3, then 1, then 2.
    let mut nodes = BTreeMap::new();
    for id in [3u64, 1, 2] {
        let listener = listeners.remove(&id).unwrap();
        let node = ClusterNode::start(node_config(id, dirs[&id].path(), &peers), listener)
            .await
            .unwrap();
        node.register_client(format!("127.0.0.1:{}", 7000 + id));
        nodes.insert(id, node);
    }
    until("every node registered its addresses", || async {
        nodes[&2].metadata().await.nodes.len() == 3
    })
    .await;
    let state = nodes[&1].metadata().await;
    assert_eq!(state.nodes[&3].client, "127.0.0.1:7003");
    assert_eq!(state.nodes[&3].peer, peers[&3].to_string());

    // A topic created through a node that may not lead: forwarded to the controller.
    let follower = nodes
        .values()
        .find(|n| n.controller() != Some(n.id()))
        .unwrap()
        .clone();
    follower
        .propose(MetaCommand::CreateStream {
            name: "shop".into(),
        })
        .await
        .unwrap();
    follower
        .propose(MetaCommand::CreateTopic {
            stream: "shop".into(),
            topic: "orders".into(),
            spec: TopicSpec {
                replicas: vec![vec![1, 2, 3], vec![2, 3, 1]],
                options: Vec::new(),
                incarnation: 7,
            },
        })
        .await
        .unwrap();
    // An offset stored through one node: every node's read index (the leader's,
    // confirmed with a quorum) is at or past the entry that stored it, so a read that
    // waits for it sees the offset.
    let (_, stored_at) = follower
        .propose_indexed(MetaCommand::StoreOffsets {
            offsets: vec![(
                OffsetKey {
                    stream: "shop".into(),
                    topic: "orders".into(),
                    partition: 0,
                    consumer: "c".into(),
                },
                7,
            )],
        })
        .await
        .unwrap();
    for node in nodes.values() {
        let index = node.read_index().await.unwrap();
        assert!(
            index >= stored_at,
            "node {}: {index} < {stored_at}",
            node.id()
        );
        node.wait_published(index).await.unwrap();
        assert!(node.catalog().borrow().version > stored_at);
    }
    until("every node holds both replicas", || async {
        nodes
            .values()
            .all(|n| n.replica(&partition(0)).is_ok() && n.replica(&partition(1)).is_ok())
    })
    .await;
    let mut end = [0u64; 2];
    for i in 0..20 {
        for p in 0..2u32 {
            end[p as usize] = produce(&nodes, &partition(p), &format!("p{p}-{i}")).await;
        }
    }
    for p in 0..2u32 {
        converged(&nodes, &partition(p), end[p as usize]).await;
    }

    // An alter adds a partition (a compare-and-set on the options it was made from):
    // every node its replica set names starts its replica, which takes batches.
    let stale = MetaCommand::AlterTopic {
        stream: "shop".into(),
        topic: "orders".into(),
        expected: b"other".to_vec(),
        options: Vec::new(),
        add: vec![vec![3, 1, 2]],
    };
    assert!(matches!(
        follower.propose(stale).await.unwrap(),
        rill_cluster::MetaResponse::Conflict(_)
    ));
    let alter = MetaCommand::AlterTopic {
        stream: "shop".into(),
        topic: "orders".into(),
        expected: Vec::new(),
        options: Vec::new(),
        add: vec![vec![3, 1, 2]],
    };
    assert_eq!(
        follower.propose(alter).await.unwrap(),
        rill_cluster::MetaResponse::Done
    );
    until("every node holds the added partition's replica", || async {
        nodes.values().all(|n| n.replica(&partition(2)).is_ok())
    })
    .await;
    let added = produce(&nodes, &partition(2), "added").await;
    converged(&nodes, &partition(2), added).await;

    // The leader of partition 0 stops: another takes over; the node comes back from
    // its directory with its replicas and catches up.
    let lead = loop {
        if let Some(n) = nodes
            .values()
            .find(|n| n.replica(&partition(0)).is_ok_and(|r| r.is_leader()))
        {
            break n.id();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stopped = nodes.remove(&lead).unwrap();
    stopped.shutdown().await;
    drop(stopped);
    for i in 0..10 {
        end[0] = produce(&nodes, &partition(0), &format!("after-{i}")).await;
    }
    nodes.insert(lead, start_again(lead, &dirs, &peers).await);
    converged(&nodes, &partition(0), end[0]).await;
    converged(&nodes, &partition(1), end[1]).await;

    // A node started with other peers than its directory's cluster refuses.
    let stopped = nodes.remove(&lead).unwrap();
    stopped.shutdown().await;
    let mut other = peers.clone();
    other.insert(4, "127.0.0.1:1".parse().unwrap());
    let listener = TcpListener::bind(peers[&lead]).await.unwrap();
    let refused = ClusterNode::start(node_config(lead, dirs[&lead].path(), &other), listener).await;
    assert!(
        matches!(&refused, Err(NodeError::Config(m)) if m.contains("belongs to a cluster")),
        "{refused:?}"
    );
    for node in nodes.values() {
        node.shutdown().await;
    }
}

#[tokio::test]
async fn a_configuration_that_names_no_cluster_of_this_node_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peers = BTreeMap::from([(1u64, addr), (2, "127.0.0.1:2".parse().unwrap())]);
    let refused = ClusterNode::start(node_config(3, dir.path(), &peers), listener).await;
    assert!(
        matches!(&refused, Err(NodeError::Config(m)) if m.contains("--node-id 3")),
        "{refused:?}"
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let same = BTreeMap::from([(1u64, addr), (2, addr)]);
    let refused = ClusterNode::start(node_config(1, dir.path(), &same), listener).await;
    assert!(
        matches!(&refused, Err(NodeError::Config(m)) if m.contains("another node")),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_s_files_go_and_a_node_that_missed_the_deletion_starts_the_new_topic_afresh()
 {
    let (dirs, peers, mut nodes) = start_three().await;
    let create = |incarnation: u64| MetaCommand::CreateTopic {
        stream: "shop".into(),
        topic: "orders".into(),
        spec: TopicSpec {
            replicas: vec![vec![1, 2, 3]],
            options: Vec::new(),
            incarnation,
        },
    };
    let replica_dir = |id: u64| dirs[&id].path().join("cluster/streams/shop/orders/0");
    nodes[&1]
        .propose(MetaCommand::CreateStream {
            name: "shop".into(),
        })
        .await
        .unwrap();
    nodes[&1].propose(create(11)).await.unwrap();
    let mut end = 0;
    for i in 0..5 {
        end = produce(&nodes, &partition(0), &format!("old-{i}")).await;
    }
    converged(&nodes, &partition(0), end).await;

    // Node 3 is down while the topic is deleted: the others remove their replicas.
    let down = nodes.remove(&3).unwrap();
    down.shutdown().await;
    drop(down);
    nodes[&1]
        .propose(MetaCommand::DeleteTopic {
            stream: "shop".into(),
            topic: "orders".into(),
        })
        .await
        .unwrap();
    until("the deleted topic's replicas are removed", || async {
        !replica_dir(1).exists() && !replica_dir(2).exists()
    })
    .await;
    assert!(replica_dir(3).exists(), "node 3 missed the deletion");

    // A topic of the same name again; node 3 comes back and must not take its old
    // replica for the new topic's.
    nodes[&1].propose(create(12)).await.unwrap();
    let mut new_end = 0;
    for i in 0..2 {
        new_end = produce(&nodes, &partition(0), &format!("new-{i}")).await;
    }
    assert_eq!(new_end, 4, "the new topic starts at offset 0");
    nodes.insert(3, start_again(3, &dirs, &peers).await);
    converged(&nodes, &partition(0), new_end).await;
    let batches = committed(&nodes[&3], &partition(0));
    assert_eq!(
        batches.len(),
        2,
        "node 3 holds the new topic's batches only"
    );
    for (_, bytes) in &batches {
        let view = BatchView::parse(bytes).unwrap();
        let value = view.records().next().unwrap().value;
        assert!(
            value.starts_with(b"new-"),
            "{:?}",
            String::from_utf8_lossy(value)
        );
    }
    assert_eq!(
        std::fs::read_to_string(replica_dir(3).join("incarnation")).unwrap(),
        "12"
    );
    for node in nodes.values() {
        node.shutdown().await;
    }
}

/// A batch of `records` records of `size` bytes each.
fn big_batch(tag: &str, records: usize, size: usize) -> Bytes {
    let mut b = BatchBuilder::new();
    for i in 0..records {
        let mut value = format!("{tag}/{i}/").into_bytes();
        value.resize(size, b'.');
        b.push(NewRecord::value(&value)).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

/// Produces a big batch through whichever node leads, until one commits it.
async fn produce_big(nodes: &BTreeMap<u64, ClusterNode>, id: &PartitionId, tag: &str) -> u64 {
    let start = Instant::now();
    loop {
        for node in nodes.values() {
            let Ok(replica) = node.replica(id) else {
                continue;
            };
            if !replica.is_leader() {
                continue;
            }
            match replica.produce(big_batch(tag, 4, 500)).await {
                Ok((_, last, _)) => return last + 1,
                Err(NodeError::NotLeader { .. }) => {}
                Err(e) => panic!("produce failed: {e}"),
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no leader of {id} commits"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs retention on every replica until each log starts at or after `at_least`.
async fn retained(nodes: &BTreeMap<u64, ClusterNode>, id: &PartitionId, at_least: u64) {
    until("retention purges every replica's log", || async {
        let mut all = true;
        for node in nodes.values() {
            let replica = node.replica(id).unwrap();
            replica.retain().await.unwrap();
            all &= replica.log().log_start() >= at_least;
        }
        all
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_every_replica_through_its_group_and_a_node_left_behind_is_sent_the_log() {
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let (mut listeners, peers) = bind_three().await;
    let config = |id: u64| NodeConfig {
        log_config: Arc::new(|_options: &[u8]| LogConfig {
            durability: Durability::Always,
            segment_bytes_max: 8 << 10,
            retention_bytes: Some(16 << 10),
            ..LogConfig::default()
        }),
        ..node_config(id, dirs[&id].path(), &peers)
    };
    let mut nodes = BTreeMap::new();
    for id in 1..=3u64 {
        let listener = listeners.remove(&id).unwrap();
        nodes.insert(id, ClusterNode::start(config(id), listener).await.unwrap());
    }
    create_orders(&nodes[&1], 7).await;
    let id = partition(0);
    // About 2 KiB a batch: 60 batches are some 15 segments, far past 16 KiB.
    let mut end = 0;
    for i in 0..60 {
        end = produce_big(&nodes, &id, &format!("a-{i}")).await;
    }
    converged(&nodes, &id, end).await;
    for node in nodes.values() {
        let replica = node.replica(&id).unwrap();
        assert_eq!(replica.log().log_start(), 0, "nothing is purged unasked");
    }
    retained(&nodes, &id, 1).await;
    for node in nodes.values() {
        let replica = node.replica(&id).unwrap();
        let log = replica.log();
        assert!(
            log.size_bytes() >= 16 << 10,
            "retention keeps its limit: {} bytes",
            log.size_bytes()
        );
        assert!(log.log_start() < end, "the committed tail stays readable");
        assert!(matches!(
            replica.read(0, 1 << 20),
            Err(NodeError::Storage(
                rill_storage::StorageError::OffsetBeforeStart { .. }
            ))
        ));
    }
    // What each replica kept is the same batches as every other's, from where it
    // starts; a produce goes on.
    // (Looked at again if retention moved a start while the logs were read.)
    until("every replica kept the same batches", || async {
        let logs: Vec<_> = nodes.values().map(|n| committed(n, &id)).collect();
        if logs.iter().any(Vec::is_empty) {
            return false;
        }
        let from = logs.iter().map(|l| l[0].0).max().unwrap();
        let tails: Vec<Vec<_>> = logs
            .iter()
            .map(|l| l.iter().filter(|b| b.0 >= from).cloned().collect())
            .collect();
        tails.iter().all(|t| t == &tails[0] && !t.is_empty())
    })
    .await;
    end = produce_big(&nodes, &id, "after").await;
    converged(&nodes, &id, end).await;

    // Node 3 goes down; the others go on and retention moves their logs past all it
    // holds, so it cannot be sent entries when it returns: it is sent the log.
    let down = nodes.remove(&3).unwrap();
    let held = down.replica(&id).unwrap().log().next_offset();
    down.shutdown().await;
    drop(down);
    for i in 0..60 {
        produce_big(&nodes, &id, &format!("b-{i}")).await;
    }
    retained(&nodes, &id, held + 1).await;
    let listener = TcpListener::bind(peers[&3]).await.unwrap();
    nodes.insert(3, ClusterNode::start(config(3), listener).await.unwrap());
    end = produce_big(&nodes, &id, "c").await;
    converged(&nodes, &id, end).await;
    let back = committed(&nodes[&3], &id);
    let leader_start = nodes[&1].replica(&id).unwrap().log().log_start();
    assert!(
        back.first().unwrap().0 >= held,
        "node 3's old log was replaced, not extended with a hole"
    );
    assert!(
        back.first().unwrap().0
            <= leader_start.max(nodes[&2].replica(&id).unwrap().log().log_start())
    );
    // Offsets are contiguous from where node 3's log starts.
    let mut next = back.first().unwrap().0;
    for (base, bytes) in &back {
        assert_eq!(*base, next, "no hole in node 3's log");
        next = base + u64::from(BatchView::parse(bytes).unwrap().record_count());
    }
    assert_eq!(next, end);
    for node in nodes.values() {
        node.shutdown().await;
    }
}

/// A metadata leader that stops and starts again before the others notice does not
/// take up its old term (docs/REPLICATION.md §7.2): it would, with openraft's leader
/// restore, and then know only part of what was committed while a follower that was
/// behind catches up from it, so the first coordinator read it confirmed missed
/// offsets stored before it stopped (found by the nemesis: a group's stored offsets
/// read backward after the coordinator's kill -9 and quick restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_leader_restarted_at_once_reads_every_offset_stored_before() {
    const OFFSETS: u64 = 2_000;
    let (dirs, peers, mut nodes) = start_three().await;
    let mut lead = 0;
    until("the nodes agree on a controller", || {
        let seen: Vec<Option<u64>> = nodes.values().map(ClusterNode::controller).collect();
        lead = seen[0].unwrap_or(0);
        async move { seen[0].is_some() && seen.iter().all(|l| *l == seen[0]) }
    })
    .await;
    let leader = nodes[&lead].clone();
    create_orders(&leader, 1).await;
    let followers: Vec<u64> = nodes.keys().copied().filter(|&id| id != lead).collect();
    let (behind, other) = (followers[0], followers[1]);

    // One follower stops: every offset below commits with the leader and the other.
    nodes.remove(&behind).unwrap().shutdown().await;
    let key = |i: u64| OffsetKey {
        stream: "shop".into(),
        topic: "orders".into(),
        partition: 0,
        consumer: format!("c{i}"),
    };
    for chunk in (0..OFFSETS).collect::<Vec<_>>().chunks(100) {
        let stores = chunk.iter().map(|&i| {
            leader.propose_indexed(MetaCommand::StoreOffsets {
                offsets: vec![(key(i), i + 1)],
            })
        });
        for stored in futures::future::join_all(stores).await {
            stored.unwrap();
        }
    }
    // The other follower stops, the leader stops and starts again at once, and the
    // follower that missed every offset comes back: what the leader knows committed
    // now grows only as that follower catches up from it.
    nodes.remove(&other).unwrap().shutdown().await;
    nodes.remove(&lead).unwrap().shutdown().await;
    drop(leader);
    for id in [lead, behind] {
        nodes.insert(id, start_again(id, &dirs, &peers).await);
    }

    // The first read a coordinator confirms holds every offset.
    let start = Instant::now();
    let (coordinator, index) = loop {
        let mut confirmed = None;
        for node in nodes.values() {
            if let Ok(term) = node.coordinator_term()
                && let Ok(index) = node.read_index_here(term).await
            {
                confirmed = Some((node.clone(), index));
                break;
            }
        }
        if let Some(c) = confirmed {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no node coordinates"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    coordinator.wait_published(index).await.unwrap();
    let stored = coordinator.metadata().await.offsets;
    let missing: Vec<u64> = (0..OFFSETS)
        .filter(|&i| stored.get(&key(i)) != Some(&(i + 1)))
        .collect();
    assert!(
        missing.is_empty(),
        "node {} confirmed read index {index} in its first read after the restart, and it \
         misses {} of the {OFFSETS} stored offsets (from c{})",
        coordinator.id(),
        missing.len(),
        missing[0]
    );
    for node in nodes.values() {
        node.shutdown().await;
    }
}

/// The same for a partition: its leader, stopped and started again at once while a
/// follower that missed the newest batches comes back, serves only once its high
/// watermark covers every batch acknowledged before it stopped (with openraft's leader
/// restore, it served a watermark below them, and a reader that had read past it took
/// that for the end of the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_leader_restarted_at_once_serves_every_batch_acknowledged_before() {
    use rill_broker::cluster::ReplicaLog;
    const BATCHES: usize = 1_000;
    let (dirs, peers, mut nodes) = start_three().await;
    create_orders(&nodes[&1], 1).await;
    let id = partition(0);
    produce(&nodes, &id, "first").await;
    let lead = nodes
        .values()
        .find(|n| n.replica(&id).is_ok_and(|r| r.is_leader()))
        .expect("a leader committed the first batch")
        .id();
    let followers: Vec<u64> = nodes.keys().copied().filter(|&n| n != lead).collect();
    let (behind, other) = (followers[0], followers[1]);

    // One follower stops; the batches commit with the leader and the other.
    nodes.remove(&behind).unwrap().shutdown().await;
    let replica = nodes[&lead].replica(&id).unwrap();
    let mut end = 0;
    for chunk in (0..BATCHES).collect::<Vec<_>>().chunks(100) {
        let produced = chunk
            .iter()
            .map(|i| replica.produce(batch(&format!("b{i}"))));
        for p in futures::future::join_all(produced).await {
            let (_, last, _) = p.expect("the leader commits with one follower");
            end = end.max(last + 1);
        }
    }
    drop(replica);
    nodes.remove(&other).unwrap().shutdown().await;
    nodes.remove(&lead).unwrap().shutdown().await;
    for id in [lead, behind] {
        nodes.insert(id, start_again(id, &dirs, &peers).await);
    }

    // The first replica that serves as the leader has every acknowledged batch below
    // its high watermark.
    let start = Instant::now();
    let (serving, watermark) = loop {
        let found = nodes.values().find_map(|n| {
            let r = n.replica(&id).ok()?;
            r.leading()?;
            Some((n.id(), r.high_watermark()))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no replica of {id} serves"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    assert!(
        watermark >= end,
        "node {serving} served {id} with high watermark {watermark}, below the {end} \
         acknowledged before its restart"
    );
    for node in nodes.values() {
        node.shutdown().await;
    }
}
