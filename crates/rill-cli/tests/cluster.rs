//! Three real `rill serve --node-id --peers` processes on loopback (docs/REPLICATION.md):
//! the CLI and the SDK over a multi-address URL create a replicated topic through any
//! node and follow partition leaders; an idempotent keyed producer keeps writing while
//! each node in turn is killed with SIGKILL and started again; afterwards every
//! acknowledged record is read exactly once at its acknowledged offset, in per-key
//! order, stored offsets survived, `rill cluster status --json` saw every node up and
//! each killed one down, and the replicas' logs on disk are identical up to
//! where the shortest ends, with at least a majority holding every acknowledged record.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{Node, cluster, rill, wait_status};
use common::rill_bin;
use rill_client::{Client, Message, Position, PurgeTo, ResetTo, TopicChanges};

/// Every record of a partition, read through the cluster.
/// Every record of `partition`, read until the end the leader reports and at least up
/// to `at_least`. A deposed leader that has not learnt it yet serves its own committed
/// view, which may end before records its successor acknowledged (docs/REPLICATION.md
/// §6: stale, never wrong), so the end it reports is not taken for the end while an
/// acknowledged offset lies beyond it.
async fn read_all(client: &Client, partition: u32, at_least: u64) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let topic = client.stream("shop").topic("orders");
    let mut out = Vec::new();
    let mut at = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "partition {partition} read to its end in time"
        );
        let fetched = topic
            .fetch(Position::new(partition, at), 1 << 20, Duration::ZERO)
            .await
            .expect("a fetch through the cluster");
        if fetched.records.is_empty() {
            // The end is the committed end the leader reports, not an empty answer.
            if fetched.next_offset >= fetched.log_end && fetched.next_offset >= at_least {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        for r in fetched.records {
            out.push((
                r.offset,
                r.key.map(|k| k.to_vec()).unwrap_or_default(),
                r.value.to_vec(),
            ));
        }
        at = fetched.next_offset;
    }
}

/// The batches of one replica's partition log on disk, as (base offset, bytes).
fn replica_batches(data: &Path, partition: u32) -> Vec<(u64, Vec<u8>)> {
    let dir = data
        .join("cluster/streams/shop/orders")
        .join(partition.to_string());
    let config = rill_storage::LogConfig {
        durability: rill_storage::Durability::Never,
        ..rill_storage::LogConfig::default()
    };
    let log = rill_storage::PartitionLog::open(&dir, config).expect("the replica's log opens");
    let mut out = Vec::new();
    let mut at = log.log_start();
    while at < log.next_offset() {
        let read = log.read(at, 1 << 20).unwrap();
        for b in read.batches() {
            let b = b.unwrap();
            out.push((b.base_offset(), b.as_bytes().to_vec()));
        }
        at = read.next_offset;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_replicate_follow_leaders_and_survive_kill9_of_each_node() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, url) = cluster(dir.path());
    for n in &mut nodes {
        n.start();
    }
    // The CLI over the multi-address URL: a topic replicated on all three.
    let out = rill(
        &url,
        &[
            "topic",
            "create",
            "shop/orders",
            "--partitions",
            "2",
            "--replicas",
            "3",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = rill(&url, &["topic", "describe", "shop/orders"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("partitions\t2"));
    // `rill cluster status --json`: every node up, every partition led, on all three.
    let status = wait_status(&url, |s| {
        // One node is the controller (the metadata group's leader), the others nodes.
        s["nodes"].as_array().is_some_and(|n| {
            n.len() == 3
                && n.iter().all(|n| n["up"] == true && n["client"].is_string())
                && n.iter().filter(|n| n["role"] == "controller").count() == 1
                && n.iter()
                    .all(|n| n["role"] == "controller" || n["role"] == "node")
        }) && s["partitions"]
            .as_array()
            .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p["leader"].is_u64()))
    });
    for p in status["partitions"].as_array().unwrap() {
        assert_eq!(p["stream"], "shop");
        assert_eq!(p["replicas"].as_array().unwrap().len(), 3);
        assert!(p["lag"].is_object());
    }

    let client = Client::connect(&url).await.unwrap();
    let topic = client.stream("shop").topic("orders");

    let producer = topic
        .producer()
        .retries(30, Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    // Acknowledged records: (partition, offset) → (key, value).
    let mut acked: BTreeMap<(u32, u64), (String, String)> = BTreeMap::new();
    let mut seq = 0u64;
    let mut send = async |acked: &mut BTreeMap<(u32, u64), (String, String)>, n: u64| {
        for _ in 0..n {
            seq += 1;
            let key = format!("k{}", seq % 7);
            let value = format!("v{seq}");
            match producer
                .send(Message::new(value.clone()).with_key(key.clone()))
                .await
            {
                Ok(Some(p)) => {
                    assert!(
                        acked
                            .insert((p.partition, p.offset), (key, value))
                            .is_none(),
                        "two records acknowledged at one offset"
                    );
                }
                Ok(None) => unreachable!("a direct-mode producer returns positions"),
                Err(e) => eprintln!("send failed (not acknowledged): {e}"),
            }
        }
    };
    send(&mut acked, 50).await;
    // Each node in turn: killed while the producer goes on, then started again.
    for node in &mut nodes {
        node.kill9();
        let killed = node.id;
        // The others see it down.
        wait_status(&url, |s| {
            s["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| n["id"] == killed && n["up"] == false))
        });
        send(&mut acked, 40).await;
        node.start();
        send(&mut acked, 20).await;
    }
    assert!(
        acked.len() >= 150,
        "most sends were acknowledged: {}",
        acked.len()
    );
    // Commit latency: every node has the histogram; its +Inf bucket counts them all,
    // and the leaders of the last sends (all up since) counted what they committed.
    let mut committed = 0;
    for n in &nodes {
        let metrics = common::http_get(&n.http, "/metrics");
        let value = |name: &str| -> u64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in {metrics}"))
        };
        let count = value("rill_replica_commit_seconds_count ");
        assert_eq!(
            value("rill_replica_commit_seconds_bucket{le=\"+Inf\"} "),
            count
        );
        committed += count;
    }
    assert!(committed > 0, "no commit was timed");
    // Stored offsets go through the metadata group: stored through one node, read
    // through another, kept while a node is killed.
    topic.store_offset("c1", Position::new(0, 3)).await.unwrap();
    nodes[0].kill9();
    let other = Client::connect(&format!("rill://127.0.0.1:{}", nodes[1].client_port))
        .await
        .unwrap();
    // Read linearizably on any node: the stored offset, at once (never an older one),
    // even while the node it was stored through is down.
    let stored = other
        .stream("shop")
        .topic("orders")
        .stored_offset("c1", 0)
        .await
        .unwrap();
    assert_eq!(stored, Some(3));
    other.close().await.unwrap();
    nodes[0].start();

    // Every acknowledged record exactly once at its offset; per-key order.
    let mut seen_keys: BTreeMap<String, u64> = BTreeMap::new();
    for p in 0..2u32 {
        let acked_end = acked
            .range((p, 0)..(p + 1, 0))
            .next_back()
            .map_or(0, |((_, offset), _)| offset + 1);
        let records = read_all(&client, p, acked_end).await;
        let mut offsets: Vec<u64> = records.iter().map(|r| r.0).collect();
        offsets.dedup();
        assert_eq!(offsets.len(), records.len(), "no offset read twice");
        let by_offset: BTreeMap<u64, (Vec<u8>, Vec<u8>)> = records
            .iter()
            .map(|(o, k, v)| (*o, (k.clone(), v.clone())))
            .collect();
        let mut values_seen = std::collections::BTreeSet::new();
        for (_, v) in by_offset.values() {
            assert!(
                values_seen.insert(v.clone()),
                "a value stored twice: {}",
                String::from_utf8_lossy(v)
            );
        }
        for ((partition, offset), (key, value)) in acked.range((p, 0)..(p + 1, 0)) {
            let (k, v) = by_offset
                .get(offset)
                .unwrap_or_else(|| panic!("acknowledged record {partition}/{offset} is missing"));
            assert_eq!(
                (k.as_slice(), v.as_slice()),
                (key.as_bytes(), value.as_bytes())
            );
        }
        for (k, v) in by_offset.values() {
            let key = String::from_utf8_lossy(k).into_owned();
            let n: u64 = String::from_utf8_lossy(v)[1..].parse().unwrap();
            if let Some(prev) = seen_keys.insert(key.clone(), n) {
                assert!(prev < n, "key {key}: v{n} after v{prev}");
            }
        }
    }
    client.close().await.unwrap();
    assert!(common::http_get(&nodes[0].http, "/health").starts_with("HTTP/1.1 200"));
    // Node 1 was started again a moment ago: its replicas come as it applies the
    // catalog.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let metrics = common::http_get(&nodes[0].http, "/metrics");
        let replica = metrics.contains(
            "rill_replica_high_watermark{stream=\"shop\",topic=\"orders\",partition=\"0\"}",
        );
        if metrics.contains("rill_cluster_in_quorum 1") && replica {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Stopped cleanly after a moment to catch up: the replicas agree on disk.
    tokio::time::sleep(Duration::from_secs(2)).await;
    nodes[1].terminate();
    nodes[2].terminate();
    // Alone, the last node is out of quorum, and says so.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let health = common::http_get(&nodes[0].http, "/health");
        if health.starts_with("HTTP/1.1 503") {
            assert!(health.contains("not in a quorum"), "{health}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a lone node still reports healthy: {health}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    nodes[0].terminate();
    for p in 0..2u32 {
        let logs: Vec<Vec<(u64, Vec<u8>)>> =
            nodes.iter().map(|n| replica_batches(&n.data, p)).collect();
        let shortest = logs.iter().map(Vec::len).min().unwrap();
        for l in &logs {
            assert!(
                l[..shortest] == logs[0][..shortest],
                "replicas of partition {p} differ"
            );
        }
        let acked_end = acked
            .range((p, 0)..(p + 1, 0))
            .map(|((_, o), _)| o + 1)
            .max()
            .unwrap_or(0);
        let holding = logs
            .iter()
            .filter(|l| {
                l.last().is_some_and(|(b, bytes)| {
                    b + u64::from(rill_format::BatchView::parse(bytes).unwrap().record_count())
                        >= acked_end
                })
            })
            .count();
        assert!(
            holding >= 2,
            "a majority holds every acknowledged record of partition {p}"
        );
    }
}

/// The segment files of a node's replica of `shop/logs` partition 0.
fn segment_files(node: &Node) -> usize {
    let dir = node.data.join("cluster/streams/shop/logs/0");
    std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_runs_on_every_replica_of_a_cluster_and_readers_go_on_from_the_new_start() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, url) = cluster(dir.path());
    let settings = dir.path().join("rill.toml");
    std::fs::write(&settings, "retention_check_secs = 1\n").unwrap();
    for n in &mut nodes {
        n.config = Some(settings.clone());
        n.start();
    }
    let out = rill(
        &url,
        &["topic", "create", "shop/logs", "--segment-bytes", "4096"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = Client::connect(&url).await.unwrap();
    let topic = client.stream("shop").topic("logs");
    // The limit comes with an alter through the metadata group (docs/REPLICATION.md
    // §11.1), which every node applies to its running replica's log.
    let altered = topic
        .alter(TopicChanges::new().retention_bytes(Some(16384)))
        .await
        .unwrap();
    assert_eq!(altered.retention_bytes, Some(16384));
    let producer = topic
        .producer()
        .retries(30, Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    // About 100 KiB in 4 KiB segments: some 25 of them, 16 KiB of which retention keeps.
    let mut end = 0;
    for i in 0..200u32 {
        let mut value = format!("r{i}/").into_bytes();
        value.resize(500, b'.');
        let acked = producer.send(Message::new(value)).await.unwrap();
        end = acked.expect("an acknowledged position").offset + 1;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let files: Vec<usize> = nodes.iter().map(segment_files).collect();
        if files.iter().all(|&f| (1..=6).contains(&f)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention did not run on every replica: segment files {files:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The leader's log starts later now: a reader from 0 is told where it starts, and
    // one from there reads the tail to the end.
    let start = log_start(&topic).await;
    assert!(start > 0 && start < end, "log start {start} of {end}");
    let mut at = start;
    while at < end {
        let fetched = topic
            .fetch(Position::new(0, at), 1 << 20, Duration::ZERO)
            .await
            .unwrap();
        assert!(!fetched.records.is_empty(), "records from {at}");
        for r in &fetched.records {
            assert_eq!(r.offset, at);
            assert!(r.value.starts_with(format!("r{at}/").as_bytes()));
            at += 1;
        }
    }
    // And a produce goes on at the end.
    assert_eq!(
        producer
            .send(Message::new("last"))
            .await
            .unwrap()
            .unwrap()
            .offset,
        end
    );
    // A second partition: its replicas start on the nodes it names, and its group
    // takes records.
    let altered = topic
        .alter(TopicChanges::new().partitions(2))
        .await
        .unwrap();
    assert_eq!(
        (altered.partitions, altered.retention_bytes),
        (2, Some(16384))
    );
    let added = topic
        .publish()
        .partition(1)
        .value("added")
        .send()
        .await
        .unwrap();
    assert_eq!((added.partition, added.offset), (1, 0));
    // Operators' requests through the cluster: a group reset by the coordinator to
    // the new log start, listed, read from there by a member, then deleted once the
    // member is gone; a named consumer reset and listed.
    let reset = topic.reset_group("g", ResetTo::First, None).await.unwrap();
    let reset: Vec<(u32, u64)> = reset.iter().map(|o| (o.partition, o.next_offset)).collect();
    // The coordinator's own replica names the start: each replica's retention cuts on
    // its own schedule (docs/REPLICATION.md §7.5), so it may still be a segment behind.
    // Retention goes on meanwhile (the record produced above can make another segment
    // go), so the bound is the leader's start as it is after the reset.
    // Replicas cut where the group's retention entry says, each when it applies it: the
    // leader gets there too, within a few passes.
    let group_start = reset[0].1;
    let deadline = Instant::now() + Duration::from_secs(10);
    let leader_start = loop {
        let now = log_start(&topic).await;
        if now >= group_start || Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        group_start > 0 && group_start <= leader_start && start <= leader_start,
        "{reset:?}, leader's start {start} before the reset, {leader_start} after"
    );
    assert_eq!(reset[1], (1, 0));
    let groups = topic.groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].name.as_str(), groups[0].members), ("g", 0));
    // Both partitions count, as far as the coordinator's replicas know their ends.
    let lag = groups[0].lag;
    assert!(
        (end - group_start..=end + 2 - group_start).contains(&lag),
        "lag {lag}"
    );
    let mut member = topic.consumer_group("g").build().await.unwrap();
    let first = member.next_within(Duration::from_secs(20)).await.unwrap();
    assert!(
        (first.partition == 0 && first.offset >= group_start)
            || (first.partition, first.offset) == (1, 0),
        "{first:?}"
    );
    let busy = topic.delete_group("g").await.unwrap_err();
    assert_eq!(
        busy.code(),
        Some(rill_client::ErrorCode::GroupNotEmpty),
        "{busy}"
    );
    member.shutdown().await.unwrap();
    assert_eq!(topic.delete_group("g").await.unwrap(), 2);
    assert!(topic.groups().await.unwrap().is_empty());
    // A node resolves the end as its replica knows it (a follower's high watermark
    // trails the leader's by the latest commit until its next append): asked again, it
    // reaches the end.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reset = topic
            .reset_consumer("c", ResetTo::End, Some(0))
            .await
            .unwrap();
        if reset[0].next_offset == end + 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{reset:?}, end {}", end + 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let consumers = topic.consumers().await.unwrap();
    assert_eq!(consumers.len(), 1);
    assert_eq!(consumers[0].name, "c");
    assert_eq!(consumers[0].partitions[0].next_offset, end + 1);
    // An exact purge is refused in a cluster (docs/REPLICATION.md §11.1), not applied
    // to one replica.
    let purge = topic.purge(PurgeTo::End, None).await.unwrap_err();
    assert_eq!(
        purge.code(),
        Some(rill_client::ErrorCode::InvalidRequest),
        "{purge}"
    );
    assert!(
        purge.to_string().contains("not supported in a cluster"),
        "{purge}"
    );
    for n in &mut nodes {
        n.terminate();
    }
}

/// The CLI as a user, with `input` on its standard input.
fn rill_as(
    url: &str,
    user: &str,
    password: &str,
    args: &[&str],
    input: &str,
) -> std::process::Output {
    let args = [&["--server", url][..], args].concat();
    common::rill_in(
        &args,
        &[
            ("RILL_LOG", "warn"),
            ("RILL_USER", user),
            ("RILL_PASSWORD", password),
        ],
        input,
    )
}

/// Runs `args` as `user` until it succeeds (at most 30 s): the cluster electing its
/// leaders, or a node catching up with the credentials.
fn until_ok(url: &str, user: &str, password: &str, args: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = rill_as(url, user, password, args, "");
        if o.status.success() {
            return String::from_utf8_lossy(&o.stdout).into_owned();
        }
        assert!(
            Instant::now() < deadline,
            "{args:?} as {user} on {url} kept failing: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Users, ACLs and tokens are the cluster's (docs/SECURITY.md §2.3): the first admin
/// made on one node logs in on the others, a user made through one node works through
/// any, two admins creating users at once through two nodes lose neither, and a node
/// that was down while a user was deleted refuses that user once it is back.
#[test]
fn users_made_through_any_node_hold_on_every_node_and_survive_a_kill9() {
    const ADMIN: &str = "cluster-admin-pw";
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, _) = cluster(dir.path());
    let settings = dir.path().join("rill.toml");
    std::fs::write(&settings, "auth = true\n").unwrap();
    for n in nodes.iter_mut() {
        n.config = Some(settings.clone());
    }
    nodes[0]
        .env
        .push(("RILL_ADMIN_PASSWORD".into(), ADMIN.into()));
    for n in nodes.iter_mut() {
        n.start();
    }
    let at = |n: &Node| format!("rill://127.0.0.1:{}", n.client_port);
    let (u1, u2, u3) = (at(&nodes[0]), at(&nodes[1]), at(&nodes[2]));

    // The admin node 1 made logs in through node 2, which was given no password.
    // (Each node takes it when it applies the entry: asked until it has.)
    for url in [&u2, &u3] {
        until_ok(url, "admin", ADMIN, &["stream", "list"]);
    }
    let o = rill_as(&u2, "admin", "wrong-password", &["stream", "list"], "");
    assert!(String::from_utf8_lossy(&o.stderr).contains("unauthenticated"));

    // alice, made through node 3, may read "shop" through node 1.
    let o = rill_as(
        &u3,
        "admin",
        ADMIN,
        &["user", "create", "alice", "--password-stdin"],
        "alice-password\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    until_ok(
        &u3,
        "admin",
        ADMIN,
        &["topic", "create", "shop/orders", "--partitions", "1"],
    );
    let o = rill_as(
        &u3,
        "admin",
        ADMIN,
        &[
            "acl", "grant", "alice", "--stream", "shop", "--allow", "read",
        ],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let streams = until_ok(&u1, "alice", "alice-password", &["stream", "list"]);
    assert!(streams.starts_with("shop\t"), "{streams}");

    // Two admins at once through two nodes: both users exist afterwards.
    let spawn = |url: &str, name: &str| {
        use std::io::Write;
        let mut child = Command::new(rill_bin())
            .args(["--server", url, "user", "create", name, "--password-stdin"])
            .env("RILL_LOG", "warn")
            .env("RILL_USER", "admin")
            .env("RILL_PASSWORD", ADMIN)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{name}-password\n").as_bytes())
            .unwrap();
        child
    };
    let (a, b) = (spawn(&u1, "bob"), spawn(&u2, "carol"));
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Through the third node, once it has applied both.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let users = until_ok(&u3, "admin", ADMIN, &["user", "list"]);
        let all = ["admin", "alice", "bob", "carol"]
            .iter()
            .all(|name| users.lines().any(|l| l.starts_with(&format!("{name}\t"))));
        if all {
            break;
        }
        assert!(Instant::now() < deadline, "a user is missing: {users}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Node 3 is down while alice is deleted; back, it refuses her.
    nodes[2].kill9();
    let o = rill_as(&u1, "admin", ADMIN, &["user", "delete", "alice"], "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    nodes[2].start();
    // Once node 3 serves the admin again, it has caught up with at least the delete's
    // entry or is still catching up: ask until alice is refused.
    until_ok(&u3, "admin", ADMIN, &["stream", "list"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = rill_as(&u3, "alice", "alice-password", &["stream", "list"], "");
        if String::from_utf8_lossy(&o.stderr).contains("unauthenticated") {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 still lets alice in");
        std::thread::sleep(Duration::from_millis(200));
    }
    // bob's password works through the node that was down.
    until_ok(&u3, "bob", "bob-password", &["stream", "list"]);

    // No clear password anywhere in the nodes' data directories (raft logs included),
    // and the metadata's files, which hold the verifiers, are their owner's alone.
    let mut metadata_files = 0;
    for n in &nodes {
        for entry in common::walk(&n.data) {
            let name = entry.file_name().unwrap().to_string_lossy().into_owned();
            if name == "meta.log" || name == "meta.snapshot" {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&entry).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", entry.display());
                metadata_files += 1;
            }
            let bytes = std::fs::read(&entry).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            for secret in [ADMIN, "alice-password", "bob-password", "carol-password"] {
                assert!(!text.contains(secret), "{} holds {secret}", entry.display());
            }
        }
    }
    assert!(metadata_files >= 3, "every node has a meta.log");
}

/// Partition 0's log start on its leader, as a fetch from offset 0 is told it (the log
/// must start later than 0).
async fn log_start(topic: &rill_client::Topic) -> u64 {
    match topic
        .fetch(Position::new(0, 0), 1 << 20, Duration::ZERO)
        .await
    {
        Err(rill_client::ClientError::Server {
            code: rill_client::ErrorCode::OffsetBeforeStart,
            offset: Some(log_start),
            ..
        }) => log_start,
        other => panic!("a fetch below the log start: {other:?}"),
    }
}
