//! An elastic topic in a cluster of three real `rill serve` processes (docs/RANGES.md
//! §9): keyed idempotent producers write while a range splits and the parent's leader
//! is killed with SIGKILL at a seeded moment of each split; each split completes (the
//! seal in the parent's group, its end recorded in the catalog by whoever leads the
//! parent next), the children land on other nodes, and a merge of two ranges led from
//! different nodes follows. Afterwards every acknowledged record is read exactly once,
//! each key's records in order, by a cursor, a named consumer and a consumer group of
//! two; every sealed range's leader reports its log ending at its seal.
//!
//! The seed comes from `RILL_TEST_SEED` (printed, so a failure can be replayed).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::cluster::{cluster, wait_status};
use rill_client::{Client, Message, Position, Topic, TopicOptions};

const KEYS: u32 = 8;

/// The seed of this run: `RILL_TEST_SEED`, or the clock.
fn seed() -> u64 {
    let seed = std::env::var("RILL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("RILL_TEST_SEED={seed}");
    seed
}

/// Three nodes started, their URL, and a client of them.
async fn start_cluster(dir: &std::path::Path) -> (Vec<common::cluster::Node>, String, Client) {
    let (mut nodes, url) = cluster(dir);
    for n in &mut nodes {
        n.start();
    }
    let client = Client::connect(&url).await.unwrap();
    (nodes, url, client)
}

/// Creates `topic` with `options`, asked again while the cluster is forming.
async fn create(topic: &Topic, options: &TopicOptions) -> rill_client::TopicConfig {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match topic.create_with(options, true).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(Instant::now() < deadline, "creating the topic: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The leader of `partition` of shop/orders, as `rill cluster status` reports it once
/// it has one.
fn leader_of(url: &str, partition: u32) -> u64 {
    let status = wait_status(url, |s| {
        s["partitions"].as_array().is_some_and(|ps| {
            ps.iter().any(|p| {
                p["topic"] == "orders" && p["partition"] == partition && p["leader"].is_u64()
            })
        })
    });
    status["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == "orders" && p["partition"] == partition)
        .and_then(|p| p["leader"].as_u64())
        .unwrap()
}

/// A producer of `KEYS` keys (`{name}k0`…), each key's records numbered in order,
/// sending until `stop`; the values acknowledged.
async fn produce(topic: Topic, name: String, stop: Arc<AtomicBool>) -> Vec<String> {
    let producer = topic
        .producer()
        .retries(100, Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let mut acked = Vec::new();
    let mut n = 0u32;
    while !stop.load(Ordering::SeqCst) {
        for k in 0..KEYS {
            let v = format!("{name}k{k}/{n}");
            producer
                .send(Message::new(v.clone()).with_key(format!("{name}k{k}")))
                .await
                .unwrap_or_else(|e| panic!("{v}: {e}"));
            acked.push(v);
        }
        n += 1;
        if n.is_multiple_of(8) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    acked
}

/// Waits until the topic's map is at `epoch` or later, through whichever node answers;
/// the description then. A node answers from the catalog it has applied, which may be
/// behind the controller's (a node restarted a moment before, or a follower that has
/// not applied the newest change): so a test that chooses a range to change chooses it
/// from a description at least as new as the last change it waited for.
async fn wait_epoch(topic: &Topic, epoch: u64) -> rill_client::TopicDescription {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(d) = topic.describe().await
            && d.range_epoch >= epoch
        {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "the range change did not complete"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The topic's description, from whichever node answers.
async fn describe(topic: &Topic) -> rill_client::TopicDescription {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match topic.describe().await {
            Ok(d) => return d,
            Err(e) => assert!(Instant::now() < deadline, "describe: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The end of `range`'s log as its leader reports it.
async fn log_end(topic: &Topic, range: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match topic
            .fetch(Position::new(range, 0), 1, Duration::ZERO)
            .await
        {
            Ok(f) => return f.log_end,
            Err(e) => assert!(Instant::now() < deadline, "range {range}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks that `read` holds each of `acked` exactly once and each key's records in
/// order.
fn check(read: &[(Position, String)], acked: &[String], what: &str) {
    let mut count: BTreeMap<&str, u32> = BTreeMap::new();
    let mut last: BTreeMap<&str, (u32, Position)> = BTreeMap::new();
    for (p, v) in read {
        *count.entry(v).or_default() += 1;
        let (key, n) = v.split_once('/').unwrap();
        let n: u32 = n.parse().unwrap();
        if let Some((before, at)) = last.insert(key, (n, *p)) {
            assert!(
                before < n,
                "{what}: {key}: {n} (at {p:?}) after {before} (at {at:?})"
            );
        }
    }
    for v in acked {
        assert_eq!(count.get(v.as_str()), Some(&1), "{what}: {v}");
    }
    assert_eq!(
        count.len(),
        acked.len(),
        "{what}: records never acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_completes_while_the_parents_leader_is_killed_and_readers_keep_each_keys_order() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, url, client) = start_cluster(dir.path()).await;
    let topic = client.stream("shop").topic("orders");
    let config = create(
        &topic,
        &TopicOptions {
            partitions: Some(1),
            elastic: true,
            replicas: Some(2),
            ..Default::default()
        },
    )
    .await;
    assert!(config.elastic);
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..2)
        .map(|i| tokio::spawn(produce(topic.clone(), format!("p{i}"), Arc::clone(&stop))))
        .collect();
    // Records flow before the split.
    let started = Instant::now();
    loop {
        let d = describe(&topic).await;
        if d.partitions[0].next_offset >= 300 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "records flow");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Splits, each with its parent's leader killed at a seeded moment of it: the whole
    // change takes a few milliseconds, so the kill lands anywhere from before the plan
    // to after the answer.
    let rounds: u64 = std::env::var("RILL_SPLIT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for round in 0..rounds {
        let d = wait_epoch(&topic, round).await;
        let parent = d
            .ranges
            .iter()
            .filter(|r| r.sealed_at.is_none())
            .map(|r| r.id)
            .next()
            .unwrap();
        let victim = leader_of(&url, parent);
        let admin = topic.clone();
        let split = tokio::spawn(async move { admin.split_range(Some(parent), None).await });
        let delay = Duration::from_micros(next() % 8_000);
        tokio::time::sleep(delay).await;
        nodes.iter_mut().find(|n| n.id == victim).unwrap().kill9();
        // A parent's group of two replicas has no quorum until the node is back.
        tokio::time::sleep(Duration::from_millis(300)).await;
        nodes.iter_mut().find(|n| n.id == victim).unwrap().start();
        // Whether the request's answer came before the kill or not, the change
        // completes.
        let answered = match split.await.unwrap() {
            Ok(change) => format!("answered {change:?}"),
            // The kill may have come before the plan committed (then nothing happened)
            // or after (then the change goes on without the request): asked again, the
            // split is made, waited out (`MIGRATING`), or found made (the range is
            // sealed).
            Err(e) => loop {
                match topic.split_range(Some(parent), None).await {
                    Ok(change) => break format!("failed ({e}); asked again: {change:?}"),
                    Err(again) if again.to_string().contains("is sealed") => {
                        break format!("failed ({e}); the change went on without it");
                    }
                    Err(again) => {
                        eprintln!("asking for the split again: {again}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            },
        };
        eprintln!(
            "round {round}: split range {parent}, killed node {victim} (its leader) {delay:?} in; the request {answered}"
        );
        let ranges = wait_epoch(&topic, round + 1).await.ranges;
        let children: Vec<&rill_client::RangeInfo> =
            ranges.iter().filter(|r| r.parents == [parent]).collect();
        assert!(ranges[parent as usize].sealed_at.is_some(), "{ranges:?}");
        assert_eq!(children.len(), 2, "{ranges:?}");
    }
    // Children are placed as added partitions are: some land on a node that holds no
    // replica of their parent.
    let d = wait_epoch(&topic, rounds).await;
    let status = wait_status(&url, |s| {
        s["partitions"]
            .as_array()
            .is_some_and(|ps| ps.iter().filter(|p| p["leader"].is_u64()).count() == d.ranges.len())
    });
    let replicas = |p: u32| -> Vec<u64> {
        status["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["partition"] == p)
            .unwrap()["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_u64().unwrap())
            .collect()
    };
    assert!(
        d.ranges.iter().any(|r| r
            .parents
            .iter()
            .any(|&p| replicas(r.id).iter().any(|n| !replicas(p).contains(n)))),
        "a child lands on another node"
    );

    // A merge of two neighbours, whose groups are led from wherever elections put
    // them, while the producers go on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut open: Vec<rill_client::RangeInfo> = wait_epoch(&topic, rounds)
        .await
        .ranges
        .into_iter()
        .filter(|r| r.sealed_at.is_none())
        .collect();
    open.sort_by_key(|r| r.lo);
    // Through the CLI, as an operator would.
    let out = common::cluster::rill(
        &url,
        &[
            "topic",
            "merge",
            "shop/orders",
            "--ranges",
            &format!("{},{}", open[0].id, open[1].id),
            "--output",
            "json",
        ],
    );
    assert!(
        out.status.success(),
        "rill topic merge: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(merged["sealed"].as_array().unwrap().len(), 2, "{merged}");
    assert_eq!(merged["range_epoch"], rounds + 1, "{merged}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acked = Vec::new();
    for p in producers {
        acked.extend(p.await.unwrap());
    }
    let d = wait_epoch(&topic, rounds + 1).await;
    eprintln!("ranges: {:?}", d.ranges);
    assert_eq!(
        d.range_epoch,
        rounds + 1,
        "no change but the splits and the merge"
    );
    // Each range's end as its leader reports it (a node answers `describe` from its
    // own replicas only): a sealed range ends at its seal, and the ranges hold the
    // acknowledged records and no more (the readers below say which).
    let mut total = 0;
    for r in &d.ranges {
        let end = log_end(&topic, r.id).await;
        if let Some(sealed) = r.sealed_at {
            assert_eq!(end, sealed, "range {}", r.id);
        }
        total += end;
    }
    assert_eq!(total, acked.len() as u64, "records in the ranges");

    // A cursor from the start, parents before children.
    let mut reader = topic.records("after");
    let mut read = Vec::new();
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        read.push((r.position(), String::from_utf8(r.value.to_vec()).unwrap()));
    }
    check(&read, &acked, "a cursor");
    // A named consumer, its offsets stored through the cluster.
    let mut named = topic.consumer("named", 0).build().await.unwrap();
    let mut read = Vec::new();
    while read.len() < acked.len() {
        let r = named
            .next_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("after {} records: {e}", read.len()));
        read.push((r.position(), String::from_utf8(r.value.to_vec()).unwrap()));
    }
    named.shutdown().await.unwrap();
    check(&read, &acked, "a named consumer");
    let mut again = topic.consumer("named", 0).build().await.unwrap();
    assert!(
        again
            .next_within(Duration::from_millis(1500))
            .await
            .is_err(),
        "a named consumer built again reads nothing more"
    );
    // A consumer group of two, coordinated by the controller: ranges are handed out
    // parents first, each key's records first handed out in order across members.
    let clock = Arc::new(AtomicU64::new(0));
    let handed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let members: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|id| {
            let builder = topic
                .consumer_group("readers")
                .member_id(id)
                .session_timeout(Duration::from_secs(6));
            let (clock, handed, done) = (clock.clone(), handed.clone(), done.clone());
            tokio::spawn(async move {
                let mut c = builder.build().await.unwrap();
                let mut out = Vec::new();
                loop {
                    match c.next_within(Duration::from_secs(2)).await {
                        Ok(r) => {
                            handed.fetch_add(1, Ordering::SeqCst);
                            out.push((
                                clock.fetch_add(1, Ordering::SeqCst),
                                r.position(),
                                String::from_utf8(r.value.to_vec()).unwrap(),
                            ));
                        }
                        Err(rill_client::ClientError::Timeout(_))
                            if done.load(Ordering::SeqCst) =>
                        {
                            break;
                        }
                        Err(rill_client::ClientError::Timeout(_)) => {}
                        Err(e) => panic!("member {id} after {} records: {e}", out.len()),
                    }
                }
                c.shutdown().await.unwrap();
                out
            })
        })
        .collect();
    let started = Instant::now();
    while handed.load(Ordering::SeqCst) < acked.len() as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the group handed out {} of {} records",
            handed.load(Ordering::SeqCst),
            acked.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::SeqCst);
    let mut delivered = Vec::new();
    for m in members {
        delivered.extend(m.await.unwrap());
    }
    delivered.sort_by_key(|d| d.0);
    // First deliveries only: a rebalance as the second member joins may hand out
    // again what was not committed yet (at least once).
    let mut seen = std::collections::BTreeSet::new();
    let first: Vec<(Position, String)> = delivered
        .iter()
        .filter(|d| seen.insert(d.2.clone()))
        .map(|d| (d.1, d.2.clone()))
        .collect();
    check(&first, &acked, "a consumer group of two");
    eprintln!(
        "{} records acknowledged and read; the group handed out {} again",
        acked.len(),
        delivered.len() - first.len()
    );
    drop(nodes);
}

/// The automatic policy in a cluster: the node that leads a hot range watches what it
/// appends and splits it through the cluster, under a producer that never notices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_automatic_policy_splits_a_hot_range_through_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, _url, client) = start_cluster(dir.path()).await;
    let topic = client.stream("shop").topic("orders");
    let config = create(
        &topic,
        &TopicOptions {
            partitions: Some(1),
            elastic: true,
            replicas: Some(2),
            auto_split: Some(rill_client::AutoSplit::new(1_000).window(Duration::from_secs(1))),
            ..Default::default()
        },
    )
    .await;
    assert!(config.auto_split.is_some());
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(topic.clone(), "hot".into(), Arc::clone(&stop)));
    let ranges = wait_epoch(&topic, 1).await.ranges;
    stop.store(true, Ordering::SeqCst);
    let acked = producer.await.unwrap();
    assert!(ranges[0].sealed_at.is_some(), "{ranges:?}");
    assert_eq!(
        ranges.iter().filter(|r| r.parents == [0]).count(),
        2,
        "{ranges:?}"
    );
    let mut reader = topic.records("after");
    let mut read = Vec::new();
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        read.push((r.position(), String::from_utf8(r.value.to_vec()).unwrap()));
    }
    check(&read, &acked, "a cursor after the policy's split");
    eprintln!(
        "{} records; the policy split range 0 into {:?}",
        acked.len(),
        &ranges[1..]
    );
}

/// A range whose leadership moves to a node that watched the topic before keeps its age:
/// the new leader watches it for a whole window and splits it when hot, without waiting
/// out the cooldown (5 minutes by default) as if it were a new range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_range_splits_under_its_new_leader_without_waiting_out_the_cooldown() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, url, client) = start_cluster(dir.path()).await;
    let topic = client.stream("shop").topic("orders");
    create(
        &topic,
        &TopicOptions {
            partitions: Some(1),
            elastic: true,
            replicas: Some(3),
            auto_split: Some(rill_client::AutoSplit::new(1_000).window(Duration::from_secs(1))),
            ..Default::default()
        },
    )
    .await;
    // Every node's policy sees the topic (ticks once a second) while range 0 is idle.
    let first = leader_of(&url, 0);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    nodes.iter_mut().find(|n| n.id == first).unwrap().kill9();
    let status = wait_status(&url, |s| {
        s["partitions"].as_array().is_some_and(|ps| {
            ps.iter().any(|p| {
                p["topic"] == "orders"
                    && p["partition"] == 0
                    && p["leader"].as_u64().is_some_and(|l| l != first)
            })
        })
    });
    let second = status["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == "orders" && p["partition"] == 0)
        .and_then(|p| p["leader"].as_u64())
        .unwrap();
    nodes.iter_mut().find(|n| n.id == first).unwrap().start();
    assert_eq!(
        topic.describe().await.unwrap().range_epoch,
        0,
        "nothing split while idle"
    );
    // Hot under its new leader: split within seconds, not after the cooldown.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(topic.clone(), "hot".into(), Arc::clone(&stop)));
    let ranges = wait_epoch(&topic, 1).await.ranges;
    stop.store(true, Ordering::SeqCst);
    let acked = producer.await.unwrap();
    assert!(ranges[0].sealed_at.is_some(), "{ranges:?}");
    let mut reader = topic.records("after");
    let mut read = Vec::new();
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        read.push((r.position(), String::from_utf8(r.value.to_vec()).unwrap()));
    }
    check(&read, &acked, "a cursor after the new leader's split");
    eprintln!(
        "range 0 led by node {first}, then by node {second}, which split it: {:?}",
        &ranges[1..]
    );
}
