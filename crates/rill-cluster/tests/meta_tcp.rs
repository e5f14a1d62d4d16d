//! Three metadata nodes over the node-to-node transport on loopback: they form the
//! group, replicate, replace a leader that stops, and the stopped node, started again
//! from its directory on its port, catches up; through fault proxies on every directed
//! link, a leader cut off is replaced and a black-holed follower catches up when its
//! links heal. Bad frames are refused without harm.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{config, until};
use openraft::{EmptyNode, Raft};
use rill_cluster::{
    MetaCommand, MetaLogStore, MetaNetwork, MetaRaft, MetaState, MetaStateMachine, Peers,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Node {
    raft: MetaRaft,
    sm: MetaStateMachine,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(
    id: u64,
    dir: &Path,
    listener: TcpListener,
    peers: &BTreeMap<u64, SocketAddr>,
) -> Node {
    let log = MetaLogStore::open(dir).unwrap();
    let sm = MetaStateMachine::open(dir).unwrap();
    let network = MetaNetwork::new(Peers::new(
        peers.iter().map(|(&id, addr)| (id, addr.to_string())),
    ));
    let raft = Raft::new(id, config(), network, log, sm.clone())
        .await
        .unwrap();
    let groups = rill_cluster::peer::Groups::new();
    groups.set_meta(raft.clone());
    let serving = tokio::spawn(rill_cluster::peer::serve(listener, groups));
    Node { raft, sm, serving }
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
            "no leader the nodes agree on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn write(nodes: &BTreeMap<u64, Node>, command: MetaCommand) {
    let start = Instant::now();
    loop {
        let l = leader(nodes).await;
        match nodes[&l].raft.client_write(command.clone()).await {
            Ok(_) => return,
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(15),
                "not committed: {e}"
            ),
        }
    }
}

async fn states(nodes: &BTreeMap<u64, Node>) -> Vec<MetaState> {
    let mut out = Vec::new();
    for n in nodes.values() {
        out.push(n.sm.state().await);
    }
    out
}

/// Three listeners on free loopback ports, and their addresses.
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

/// Every node initializes with the same voters; a node that voted meanwhile is no
/// longer pristine and refuses, harmlessly.
async fn initialize_all(nodes: &BTreeMap<u64, Node>) {
    let members: BTreeMap<u64, EmptyNode> = (1..=3).map(|id| (id, EmptyNode {})).collect();
    for n in nodes.values() {
        let _ = n.raft.initialize(members.clone()).await;
    }
}

async fn stop_all(nodes: &BTreeMap<u64, Node>) {
    for n in nodes.values() {
        n.serving.abort();
        n.raft.shutdown().await.unwrap();
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

fn stream(name: &str) -> MetaCommand {
    MetaCommand::CreateStream { name: name.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_over_loopback_form_the_group_fail_over_and_catch_up() {
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let (listeners, peers) = bind_three().await;
    let mut nodes = BTreeMap::new();
    for (id, listener) in listeners {
        nodes.insert(id, start(id, dirs[&id].path(), listener, &peers).await);
    }
    initialize_all(&nodes).await;
    write(&nodes, stream("shop")).await;
    until("all three applied it", || async {
        states(&nodes)
            .await
            .iter()
            .all(|s| s.streams.contains_key("shop"))
    })
    .await;

    // The leader stops (its process would be gone): the others go on without it.
    let first = leader(&nodes).await;
    let stopped = nodes.remove(&first).unwrap();
    stopped.serving.abort();
    stopped.raft.shutdown().await.unwrap();
    drop(stopped);
    for i in 0..10 {
        write(&nodes, stream(&format!("s{i}"))).await;
    }

    // Started again from its directory, on its port: it catches up.
    let listener = TcpListener::bind(peers[&first]).await.unwrap();
    nodes.insert(
        first,
        start(first, dirs[&first].path(), listener, &peers).await,
    );
    until("the restarted node caught up", || async {
        let all = states(&nodes).await;
        all.iter().all(|s| s == &all[0]) && all[0].streams.len() == 11
    })
    .await;
    stop_all(&nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_an_error_or_a_closed_connection_and_the_node_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peers = BTreeMap::from([(1, addr)]);
    let node = start(1, dir.path(), listener, &peers).await;

    // An unknown kind, a body that is not JSON, a group that does not exist: each gets
    // an error frame with its correlation id, and the connection stays usable.
    let mut c = TcpStream::connect(addr).await.unwrap();
    for (kind, body) in [
        (0x40u8, &b"{}"[..]),
        (2, &b"not json"[..]),
        (2, &br#"{"group":"nope","body":{}}"#[..]),
    ] {
        c.write_all(&request_frame(kind, 7, body)).await.unwrap();
        let mut head = [0u8; 13];
        c.read_exact(&mut head).await.unwrap();
        assert_eq!(head[4], 0xff, "an error frame");
        assert_eq!(u64::from_le_bytes(head[5..13].try_into().unwrap()), 7);
        let mut text = vec![0u8; u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize - 9];
        c.read_exact(&mut text).await.unwrap();
        assert!(!text.is_empty());
    }
    // A length beyond the bound: the connection is closed, nothing is allocated.
    c.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .unwrap_or(0);
    assert_eq!(n, 0);
    // The node still answers: a fresh connection gets an answer to a vote request.
    let mut c = TcpStream::connect(addr).await.unwrap();
    let body = br#"{"group":"meta","body":{"vote":{"leader_id":{"term":1,"node_id":2},"committed":false},"last_log_id":null}}"#;
    c.write_all(&request_frame(2, 8, body)).await.unwrap();
    let mut head = [0u8; 13];
    c.read_exact(&mut head).await.unwrap();
    assert_eq!(u64::from_le_bytes(head[5..13].try_into().unwrap()), 8);
    assert!(
        head[4] == 0x82 || head[4] == 0xff,
        "a vote answer or a refusal, kind {}",
        head[4]
    );
    node.serving.abort();
    node.raft.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_replaced_and_healed_links_catch_up() {
    use rill_testkit::proxy::{FaultProxy, LinkMode};
    let dirs: BTreeMap<u64, tempfile::TempDir> = (1..=3)
        .map(|id| (id, tempfile::tempdir().unwrap()))
        .collect();
    let (listeners, real) = bind_three().await;
    // A proxy per directed link i -> j; node i reaches j through it.
    let mut proxies: BTreeMap<(u64, u64), FaultProxy> = BTreeMap::new();
    for i in 1..=3u64 {
        for j in (1..=3u64).filter(|&j| j != i) {
            proxies.insert((i, j), FaultProxy::start(real[&j]).await.unwrap());
        }
    }
    let mut nodes = BTreeMap::new();
    for (id, listener) in listeners {
        let peers: BTreeMap<u64, SocketAddr> = (1..=3u64)
            .map(|j| {
                (
                    j,
                    if j == id {
                        real[&j]
                    } else {
                        proxies[&(id, j)].addr()
                    },
                )
            })
            .collect();
        nodes.insert(id, start(id, dirs[&id].path(), listener, &peers).await);
    }
    initialize_all(&nodes).await;
    write(&nodes, stream("shop")).await;
    let isolate = |node: u64, mode: LinkMode| {
        for ((i, j), p) in &proxies {
            if *i == node || *j == node {
                p.set(mode);
            }
        }
    };

    // The leader is cut off from both others.
    let first = leader(&nodes).await;
    isolate(first, LinkMode::Cut);
    let mut rest = nodes;
    let cut = rest.remove(&first).unwrap();
    for i in 0..5 {
        write(&rest, stream(&format!("p{i}"))).await;
    }
    assert!(
        !cut.sm.state().await.streams.contains_key("p0"),
        "the cut-off leader applied nothing the others wrote"
    );
    isolate(first, LinkMode::Pass);
    rest.insert(first, cut);
    let nodes = rest;
    until("the old leader caught up", || async {
        let all = states(&nodes).await;
        all.iter().all(|s| s == &all[0]) && all[0].streams.len() == 6
    })
    .await;

    // A follower's links deliver nothing for a while, then heal.
    let l = leader(&nodes).await;
    let follower = *nodes.keys().find(|&&id| id != l).unwrap();
    isolate(follower, LinkMode::Blackhole);
    let mut rest = nodes;
    let held = rest.remove(&follower).unwrap();
    for i in 0..5 {
        write(&rest, stream(&format!("b{i}"))).await;
    }
    isolate(follower, LinkMode::Pass);
    rest.insert(follower, held);
    let nodes = rest;
    until("the black-holed follower caught up", || async {
        let all = states(&nodes).await;
        all.iter().all(|s| s == &all[0]) && all[0].streams.len() == 11
    })
    .await;
    stop_all(&nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_from_hosts_that_peers_does_not_name_are_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let allowed = rill_cluster::peer::peer_hosts([addr.to_string().as_str()])
        .await
        .unwrap();
    let serving = tokio::spawn(rill_cluster::peer::serve_from(
        listener,
        rill_cluster::peer::Groups::new(),
        Some(allowed),
    ));
    // From 127.0.0.2 (loopback too, but not a host of --peers): closed unanswered.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut stranger = socket.connect(addr).await.unwrap();
    let _ = stranger.write_all(&request_frame(2, 1, b"{}")).await;
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), stranger.read(&mut buf))
        .await
        .expect("the connection is closed, not left open");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "a stranger got an answer: {read:?}"
    );
    // From the peer's host: answered (an error frame: this node serves no group yet).
    let mut peer = TcpStream::connect(addr).await.unwrap();
    peer.write_all(&request_frame(2, 1, b"{}")).await.unwrap();
    let mut head = [0u8; 13];
    peer.read_exact(&mut head).await.unwrap();
    assert_eq!(head[4], 0xff);
    serving.abort();
}
