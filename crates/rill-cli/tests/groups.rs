//! Consumer groups with real processes: three `rill consume --group` members on a
//! 6-partition topic, records keyed over 1,000 keys; one member is killed with SIGKILL
//! mid-stream and another added later. Every record is processed at least once, none is
//! skipped, per-key order holds within each member, and the dead member's partitions
//! move within the session timeout plus a little.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ServerProcess, rill_bin};
use rill_client::{Client, Message, TopicOptions};

const KEYS: usize = 1000;
const SESSION: &str = "3s";

/// A printed record: (partition, offset, key, sequence number within the key).
type Seen = (u32, u64, String, u64);

/// One member process and the records it printed.
struct Member {
    child: Child,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Member {
    fn start(url: &str) -> Self {
        let mut child = Command::new(rill_bin())
            .args([
                "--server", url, "consume", "grp/t", "--group", "g", "--follow",
            ])
            .args(["--format", "json", "--session-timeout", SESSION])
            .env("RILL_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn a member");
        let stdout = child.stdout.take().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let sink = Arc::clone(&seen);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON record");
                let value = v["value"].as_str().unwrap();
                let (key, seq) = value.split_once(':').unwrap();
                sink.lock().unwrap().push((
                    v["partition"].as_u64().unwrap() as u32,
                    v["offset"].as_u64().unwrap(),
                    key.to_owned(),
                    seq.parse().unwrap(),
                ));
            }
        });
        Self { child, seen }
    }

    fn records(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn produce_round(topic: &rill_client::Topic, round: u64) {
    let messages: Vec<Message> = (0..KEYS)
        .flat_map(|k| {
            (0..3).map(move |i| {
                Message::new(format!("k{k}:{}", round * 3 + i)).with_key(format!("k{k}"))
            })
        })
        .collect();
    topic.publish_batch(messages).await.unwrap();
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

async fn settled(topic: &rill_client::Topic, members: usize) -> bool {
    match topic.describe_group("g").await {
        Ok(d) => {
            d.members.len() == members
                && d.partitions.iter().all(|p| p.owner.is_some())
                && d.members.iter().all(|m| m.revoking.is_empty())
        }
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_die_and_join_without_skipping_or_reordering() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&dir.path().join("data"));
    let client = Client::connect(&server.url()).await.unwrap();
    let topic = client.stream("grp").topic("t");
    topic
        .create_with(&TopicOptions::partitions(6), false)
        .await
        .unwrap();

    let mut members: Vec<Member> = (0..3).map(|_| Member::start(&server.url())).collect();
    let started = Instant::now();
    while !settled(&topic, 3).await {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "3 members never settled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let all_seen = |members: &[Member], expected: usize| {
        let mut offsets = BTreeSet::new();
        for m in members {
            for (p, o, _, _) in m.records() {
                offsets.insert((p, o));
            }
        }
        offsets.len() >= expected
    };

    produce_round(&topic, 0).await;
    wait_until("round 0", Duration::from_secs(30), || {
        all_seen(&members, 3 * KEYS)
    })
    .await;

    // SIGKILL one member while it is reading; its partitions must move to the others,
    // which re-read what it had not stored.
    produce_round(&topic, 1).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    members[0].child.kill().unwrap();
    members[0].child.wait().unwrap();
    let killed_at = Instant::now();
    while !settled(&topic, 2).await {
        assert!(
            killed_at.elapsed() < Duration::from_secs(15),
            "the dead member's partitions never moved"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let moved_after = killed_at.elapsed();
    wait_until("round 1", Duration::from_secs(30), || {
        all_seen(&members, 6 * KEYS)
    })
    .await;

    // A paused member (SIGSTOP) keeps its connection but stops heartbeating: its session
    // expires and its partitions move. Resumed, the zombie's stores are refused and it
    // rejoins as a new member.
    let paused_pid = members[1].child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &paused_pid])
            .status()
            .unwrap()
            .success()
    );
    let paused_at = Instant::now();
    while !settled(&topic, 1).await {
        assert!(
            paused_at.elapsed() < Duration::from_secs(15),
            "the paused member never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let expired_after = paused_at.elapsed();
    produce_round(&topic, 2).await;
    wait_until("round 2", Duration::from_secs(30), || {
        all_seen(&members, 9 * KEYS)
    })
    .await;
    assert!(
        Command::new("kill")
            .args(["-CONT", &paused_pid])
            .status()
            .unwrap()
            .success()
    );
    while !settled(&topic, 2).await {
        assert!(
            paused_at.elapsed() < Duration::from_secs(30),
            "the resumed member never rejoined"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A new member joins mid-stream.
    members.push(Member::start(&server.url()));
    let joined_at = Instant::now();
    produce_round(&topic, 3).await;
    while !settled(&topic, 3).await {
        if joined_at.elapsed() > Duration::from_secs(15) {
            panic!(
                "the new member never got partitions: {:?}",
                topic.describe_group("g").await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rebalanced_after = joined_at.elapsed();
    wait_until("round 3", Duration::from_secs(30), || {
        all_seen(&members, 12 * KEYS)
    })
    .await;

    // Every record processed at least once; none skipped.
    let mut count: BTreeMap<(u32, u64), usize> = BTreeMap::new();
    for m in &members {
        for (p, o, _, _) in m.records() {
            *count.entry((p, o)).or_default() += 1;
        }
    }
    let ends = topic.describe().await.unwrap().partitions;
    let expected: usize = ends.iter().map(|p| p.next_offset as usize).sum();
    assert_eq!(expected, 12 * KEYS);
    for p in &ends {
        for o in 0..p.next_offset {
            assert!(
                count.contains_key(&(p.partition, o)),
                "record {}:{o} was skipped",
                p.partition
            );
        }
    }
    let duplicates: usize = count.values().map(|n| n - 1).sum();

    // Per-key order within each member: the first time a member handles each record of
    // a key, the sequence numbers increase.
    for (i, m) in members.iter().enumerate() {
        let mut last: BTreeMap<String, u64> = BTreeMap::new();
        let mut handled = BTreeSet::new();
        for (p, o, key, seq) in m.records() {
            if !handled.insert((p, o)) {
                continue;
            }
            if let Some(prev) = last.insert(key.clone(), seq) {
                assert!(
                    prev < seq,
                    "member {i}: key {key} went from {prev} to {seq}"
                );
            }
        }
    }
    eprintln!(
        "[groups] {} records, {duplicates} re-delivered; partitions moved {moved_after:?} after SIGKILL (connection closed), {expired_after:?} after SIGSTOP (session timeout {SESSION}); new member served after {rebalanced_after:?}",
        12 * KEYS
    );
    assert!(
        expired_after < Duration::from_secs(5),
        "a silent member's partitions must move within the session timeout + 2 s, took {expired_after:?}"
    );
    for mut m in members {
        let _ = m.child.kill();
        let _ = m.child.wait();
    }
}

/// The server restarts under a group member: the stored group offsets are intact, the
/// member rejoins by itself and resumes where the group left off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_rejoins_after_a_server_restart_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = common::free_port();
    let url = format!("rill://127.0.0.1:{port}");
    let mut server = {
        let data = data.clone();
        tokio::task::spawn_blocking(move || common::FixedServer::start(&data, port))
            .await
            .unwrap()
    };
    let client = Client::connect(&url).await.unwrap();
    let topic = client.stream("grp").topic("r");
    topic
        .create_with(&TopicOptions::partitions(2), false)
        .await
        .unwrap();
    for i in 0..20 {
        topic
            .publish()
            .value(format!("before-{i}"))
            .partition(i % 2)
            .send()
            .await
            .unwrap();
    }
    let mut member = topic
        .consumer_group("g")
        .commit_policy(rill_client::CommitPolicy::Each)
        .session_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let mut read = BTreeSet::new();
    while read.len() < 20 {
        let r = member.next_within(Duration::from_secs(10)).await.unwrap();
        read.insert((r.partition, r.offset));
    }
    // Asking for one more says the caller is done with the 20th: `Each` stores it.
    let idle = member.next_within(Duration::from_secs(1)).await;
    assert!(
        matches!(idle, Err(rill_client::ClientError::Timeout(_))),
        "{idle:?}"
    );
    server.kill9();
    let mut server = {
        let data = data.clone();
        tokio::task::spawn_blocking(move || common::FixedServer::start(&data, port))
            .await
            .unwrap()
    };
    // The offsets survived: describe shows no lag.
    let d = topic.describe_group("g").await.unwrap();
    assert!(d.partitions.iter().all(|p| p.lag == 0), "{d:?}");
    for i in 0..10 {
        topic
            .publish()
            .value(format!("after-{i}"))
            .partition(i % 2)
            .send()
            .await
            .unwrap();
    }
    // The member rejoins on its own and reads only the new records.
    let mut after = Vec::new();
    while after.len() < 10 {
        let r = member.next_within(Duration::from_secs(20)).await.unwrap();
        let value = String::from_utf8(r.value.to_vec()).unwrap();
        assert!(
            value.starts_with("after-"),
            "re-read {value} after the restart"
        );
        after.push(value);
    }
    member.shutdown().await.unwrap();
    server.kill9();
}
