//! Three replicas of a partition over the node-to-node transport on loopback
//! (docs/REPLICATION.md §9): batches travel as raw bytes after a JSON head. The group
//! commits and every replica holds the same bytes; a stopped leader is replaced and,
//! started again on its port, catches up; a replica stopped while the leader purged
//! past its end is sent the snapshot over TCP in chunks and its log replaced; bad
//! partition frames get an error and the node goes on.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::until;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::{EmptyNode, Raft};
use rill_cluster::partition::{
    PartitionCommand, PartitionLogStore, PartitionResponse, PartitionStateMachine,
};
use rill_cluster::peer::{
    Groups, PartitionGroup, PartitionId, PartitionNetwork, PartitionRaft, Peers,
};
use rill_format::{BatchBuilder, BatchView, NewRecord};
use rill_storage::{Durability, LogConfig, LogEnv, PartitionLog};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn group() -> PartitionId {
    PartitionId {
        stream: "shop".into(),
        topic: "orders".into(),
        partition: 0,
    }
}

struct Node {
    raft: PartitionRaft,
    sm: PartitionStateMachine,
    store: PartitionLogStore,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(
    id: u64,
    dir: &Path,
    listener: TcpListener,
    peers: &BTreeMap<u64, SocketAddr>,
) -> Node {
    let log_config = LogConfig {
        durability: Durability::Always,
        segment_bytes_max: 4096,
        ..LogConfig::default()
    };
    let store = PartitionLogStore::open(dir, log_config, &LogEnv::default()).unwrap();
    let sm = PartitionStateMachine::open(&store).unwrap();
    let network = PartitionNetwork::new(
        Peers::new(peers.iter().map(|(&id, addr)| (id, addr.to_string()))),
        group(),
        1,
    );
    let raft = Raft::new(
        id,
        common::partition_config(),
        network,
        store.clone(),
        sm.clone(),
    )
    .await
    .unwrap();
    let groups = Groups::new();
    groups.add_partition(PartitionGroup::new(group(), 1, raft.clone(), store.clone()));
    let serving = tokio::spawn(rill_cluster::peer::serve(listener, groups));
    Node {
        raft,
        sm,
        store,
        serving,
    }
}

async fn stop(node: Node) {
    node.serving.abort();
    node.raft.shutdown().await.unwrap();
    node.store.close();
}

async fn leader(nodes: &BTreeMap<u64, Node>) -> u64 {
    let start = Instant::now();
    loop {
        let mut seen = Vec::new();
        for n in nodes.values() {
            seen.push(n.raft.current_leader().await);
        }
        seen.dedup();
        if let [Some(l)] = seen[..]
            && nodes.contains_key(&l)
        {
            return l;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no leader the replicas agree on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn batch(tag: &str) -> Bytes {
    let mut b = BatchBuilder::new();
    for i in 0..3 {
        b.push(NewRecord::value(
            format!("{tag}/{i}/{}", "z".repeat(100)).as_bytes(),
        ))
        .unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

async fn produce(nodes: &BTreeMap<u64, Node>, tag: &str) -> u64 {
    let start = Instant::now();
    loop {
        let l = leader(nodes).await;
        match nodes[&l]
            .raft
            .client_write(PartitionCommand::Propose(batch(tag)))
            .await
        {
            Ok(done) => match done.data {
                PartitionResponse::Appended { last_offset, .. } => return last_offset + 1,
                PartitionResponse::Done | PartitionResponse::Sealed { .. } => panic!("no offsets"),
            },
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(15),
                "not committed: {e}"
            ),
        }
    }
}

fn batches(log: &PartitionLog, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = from.max(log.log_start());
    while at < log.next_offset() {
        let read = log.read(at, 1 << 20).unwrap();
        for b in read.batches() {
            let b: BatchView<'_> = b.unwrap();
            if b.base_offset() >= at {
                out.push((b.base_offset(), b.as_bytes().to_vec()));
            }
        }
        at = read.next_offset;
    }
    out
}

async fn converged(nodes: &BTreeMap<u64, Node>, from: u64, end: u64) {
    until("every replica holds the same committed log", || async {
        if nodes.values().any(|n| n.sm.high_watermark() < end) {
            return false;
        }
        let logs: Vec<_> = nodes
            .values()
            .map(|n| batches(&n.store.log(), from))
            .collect();
        logs.iter().all(|l| l == &logs[0])
    })
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_over_loopback_commit_fail_over_and_catch_up_by_snapshot() {
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let (listeners, peers) = bind_three().await;
    let mut nodes = BTreeMap::new();
    for (id, listener) in listeners {
        nodes.insert(id, start(id, dirs[&id].path(), listener, &peers).await);
    }
    let members: BTreeMap<u64, EmptyNode> = (1..=3).map(|id| (id, EmptyNode {})).collect();
    for n in nodes.values() {
        let _ = n.raft.initialize(members.clone()).await;
    }
    let mut end = 0;
    for i in 0..20 {
        end = produce(&nodes, &format!("a{i}")).await;
    }
    converged(&nodes, 0, end).await;

    // The leader stops; the others go on; started again on its port, it catches up.
    let first = leader(&nodes).await;
    stop(nodes.remove(&first).unwrap()).await;
    for i in 0..10 {
        end = produce(&nodes, &format!("b{i}")).await;
    }
    let listener = TcpListener::bind(peers[&first]).await.unwrap();
    nodes.insert(
        first,
        start(first, dirs[&first].path(), listener, &peers).await,
    );
    converged(&nodes, 0, end).await;

    // A follower stops; the leader goes on, snapshots and purges past its end.
    let lead = leader(&nodes).await;
    let away = *nodes.keys().find(|&&id| id != lead).unwrap();
    let away_end = nodes[&away].store.log().next_offset();
    stop(nodes.remove(&away).unwrap()).await;
    for i in 0..60 {
        end = produce(&nodes, &format!("c{i}")).await;
    }
    let lead = leader(&nodes).await;
    let raft = nodes[&lead].raft.clone();
    raft.trigger().snapshot().await.unwrap();
    until("the snapshot is built", || {
        let raft = raft.clone();
        async move { raft.metrics().borrow_watched().snapshot.is_some() }
    })
    .await;
    let upto = raft.metrics().borrow_watched().snapshot.unwrap().index;
    raft.trigger().purge_log(upto).await.unwrap();
    let mut more = 0;
    while raft
        .metrics()
        .borrow_watched()
        .purged
        .is_none_or(|p| p.index < upto)
    {
        more += 1;
        end = produce(&nodes, &format!("d{more}")).await;
        assert!(more < 500, "the leader purges its log");
    }
    let from = nodes[&lead].store.log().log_start();
    assert!(from > away_end, "the purge deleted the away follower's end");
    // Back: it is sent the snapshot over TCP, its log replaced by the leader's.
    let listener = TcpListener::bind(peers[&away]).await.unwrap();
    nodes.insert(
        away,
        start(away, dirs[&away].path(), listener, &peers).await,
    );
    converged(&nodes, from, end).await;
    assert!(
        nodes[&away]
            .raft
            .metrics()
            .borrow_watched()
            .snapshot
            .is_some(),
        "the follower installed a snapshot"
    );
    assert_eq!(nodes[&away].store.log().log_start(), from);
    for (_, n) in std::mem::take(&mut nodes) {
        stop(n).await;
    }
}

/// A request frame: length, kind, correlation id, body.
fn request_frame(kind: u8, correlation: u64, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len() + 9).unwrap();
    let mut frame = len.to_le_bytes().to_vec();
    frame.push(kind);
    frame.extend_from_slice(&correlation.to_le_bytes());
    frame.extend_from_slice(body);
    frame
}

fn head(json: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(json.len()).unwrap().to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(raw);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_partition_frames_get_an_error_and_the_node_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let node = start(1, dir.path(), listener, &BTreeMap::from([(1, addr)])).await;
    let members: BTreeMap<u64, EmptyNode> = BTreeMap::from([(1, EmptyNode {})]);
    node.raft.initialize(members).await.unwrap();
    // It leads before the bad frames come (some name a leader of a later term), so the
    // write after them shows none of them deposed it.
    let start = Instant::now();
    while node.raft.current_leader().await != Some(1) {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the node never led"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let group = r#"{"stream":"shop","topic":"orders","partition":0,"incarnation":1}"#;
    let vote = r#"{"leader_id":{"term":9,"node_id":2},"committed":true}"#;
    let append = |entries: &str| {
        format!(
            r#"{{"group":{group},"vote":{vote},"prev_log_id":null,"leader_commit":null,"entries":{entries}}}"#
        )
    };
    let mut c = TcpStream::connect(addr).await.unwrap();
    let cases: Vec<(u8, Vec<u8>)> = vec![
        // No head length; a head longer than the body; not JSON.
        (5, vec![1, 0]),
        (5, vec![200, 0, 0, 0, b'{']),
        (5, head("nope", b"")),
        // A batch longer than the bytes sent, and bytes after the last batch.
        (
            5,
            head(
                &append(r#"[{"Batch":[{"leader_id":{"term":9,"node_id":2},"index":1},500]}]"#),
                b"short",
            ),
        ),
        (5, head(&append("[]"), b"trailing")),
        // A group this node has no replica of.
        (5, head(&append("[]").replace("orders", "other"), b"")),
        (6, br#"{"group":"x","body":{}}"#.to_vec()),
        // Well-formed requests of a leader of a later term, but of another incarnation
        // of the topic (or of none): answered with an error, never handed to the group,
        // so they depose no one.
        (
            5,
            head(
                &append("[]").replace(r#""incarnation":1"#, r#""incarnation":2"#),
                b"",
            ),
        ),
        (
            5,
            head(&append("[]").replace(r#","incarnation":1"#, ""), b""),
        ),
        (
            6,
            vote_request(
                r#"{"stream":"shop","topic":"orders","partition":0,"incarnation":2}"#,
                vote,
            ),
        ),
        // Snapshot steps with no transfer under way.
        (
            8,
            head(&format!(r#"{{"group":{group},"transfer":5}}"#), b""),
        ),
        (
            9,
            format!(r#"{{"group":{group},"transfer":5}}"#).into_bytes(),
        ),
    ];
    for (kind, body) in &cases {
        c.write_all(&request_frame(*kind, 7, body)).await.unwrap();
        let mut h = [0u8; 13];
        c.read_exact(&mut h).await.unwrap();
        assert_eq!(
            h[4],
            0xff,
            "an error frame for kind {kind} body {:?}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(u64::from_le_bytes(h[5..13].try_into().unwrap()), 7);
        let mut text = vec![0u8; u32::from_le_bytes(h[0..4].try_into().unwrap()) as usize - 9];
        c.read_exact(&mut text).await.unwrap();
    }
    // The node goes on: it still commits.
    let done = node
        .raft
        .client_write(PartitionCommand::Propose(batch("after")))
        .await
        .unwrap();
    assert!(matches!(
        done.data,
        PartitionResponse::Appended { base_offset: 0, .. }
    ));
    // The same requests of the group's own incarnation are the group's: the vote is
    // answered (it is well formed), and the append of a leader of a later term makes
    // the node follow it.
    for (kind, body) in [
        (6, vote_request(group, vote)),
        (5, head(&append("[]"), b"")),
    ] {
        c.write_all(&request_frame(kind, 8, &body)).await.unwrap();
        let mut h = [0u8; 13];
        c.read_exact(&mut h).await.unwrap();
        let mut rest = vec![0u8; u32::from_le_bytes(h[0..4].try_into().unwrap()) as usize - 9];
        c.read_exact(&mut rest).await.unwrap();
        assert_ne!(
            h[4],
            0xff,
            "kind {kind} of the group's own incarnation is answered: {}",
            String::from_utf8_lossy(&rest)
        );
    }
    // Its vote is the later term's now (terms never go back), where none of the
    // frames of another incarnation had moved it.
    let start = Instant::now();
    while node.raft.metrics().borrow_watched().vote.leader_id.term < 9 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the append reached the group"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop(node).await;
}

/// A vote request's body: the envelope with the group's name as a JSON string.
fn vote_request(group: &str, vote: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "group": group,
        "body": serde_json::from_str::<serde_json::Value>(&format!(
            r#"{{"vote":{vote},"last_log_id":{{"leader_id":{{"term":9,"node_id":2}},"index":100}}}}"#
        ))
        .unwrap(),
    }))
    .unwrap()
}
