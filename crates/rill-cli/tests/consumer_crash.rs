//! Automatic commit policies are at least once: a consuming process killed with SIGKILL
//! while it handles a record gets that record again after a restart, under every
//! policy, for named consumers and group members, over TCP and embedded.
//!
//! The consuming process is this test binary run again (`child_consumer`, ignored in
//! normal runs). It prints `got P O` when `next()` hands out a record and `done P O`
//! once it has handled it, then asks for the next one. At the `kill_at`-th record of its
//! run it prints `got` and stops there, "handling" it forever; the parent kills it then,
//! restarts it, and so on for a seeded schedule of kills, and finally lets a last run
//! handle everything. Every published record must have been handled (`done`) at least
//! once: none may be skipped. Where a policy's window is known, the record handed out
//! first after a restart must lie within that window before the killed one.

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rill_client::{Client, CommitPolicy};

const ENV: &str = "RILL_CONSUMER_CRASH_CHILD";
const PREFIX: &str = "consumer-crash:";
const RECORDS: u64 = 24;
const KILLS: u32 = 3;

/// The policies, by name, as the child takes them.
const POLICIES: &[&str] = &[
    "disabled",
    "polling",
    "interval",
    "interval-polling",
    "all",
    "interval-all",
    "each",
    "interval-each",
    "every",
    "interval-every",
];

fn policy(name: &str) -> CommitPolicy {
    let d = Duration::from_millis(5);
    match name {
        "disabled" => CommitPolicy::Disabled,
        "polling" => CommitPolicy::Polling,
        "interval" => CommitPolicy::Interval(d),
        "interval-polling" => CommitPolicy::IntervalOrPolling(d),
        "all" => CommitPolicy::All,
        "interval-all" => CommitPolicy::IntervalOrAll(d),
        "each" => CommitPolicy::Each,
        "interval-each" => CommitPolicy::IntervalOrEach(d),
        "every" => CommitPolicy::Every(3),
        "interval-every" => CommitPolicy::IntervalOrEvery(d, 3),
        other => panic!("unknown policy {other}"),
    }
}

/// How many records before the killed one a restart may hand out again, where the
/// policy bounds it (the poll-based ones re-deliver up to a poll result, the interval
/// ones up to an interval's worth).
fn window(name: &str) -> Option<u64> {
    match name {
        "disabled" | "each" => Some(0),
        "every" => Some(2),
        _ => None,
    }
}

/// Where the child's broker is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Embedded,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Named,
    Group,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Named => "named",
            Kind::Group => "group",
        }
    }

    fn partitions(self) -> u32 {
        match self {
            Kind::Named => 1,
            Kind::Group => 2,
        }
    }
}

/// One consuming process; killed when dropped.
struct ChildConsumer(common::ChildTest);

impl ChildConsumer {
    fn start(broker: &str, kind: Kind, policy: &str, topic: &str, kill_at: u64) -> Self {
        let config = format!("{broker}|{}|{policy}|{topic}|{kill_at}", kind.name());
        Self(common::ChildTest::spawn(
            "child_consumer",
            (ENV, &config),
            PREFIX,
        ))
    }

    /// The next line the child printed (`got P O`, `done P O` or `stuck P O`), or
    /// `None` if it printed nothing for `quiet`.
    fn line(&self, quiet: Duration) -> Option<(String, u32, u64)> {
        let line = self.0.line(quiet)?;
        let mut parts = line.split_whitespace();
        let what = parts.next().unwrap().to_owned();
        let p = parts.next().unwrap().parse().unwrap();
        let o = parts.next().unwrap().parse().unwrap();
        Some((what, p, o))
    }
}

/// Publishes `RECORDS` records over the kind's partitions.
async fn publish(client: &Client, kind: Kind, topic: &str) {
    let t = client.stream("crash").topic(topic);
    t.ensure(kind.partitions()).await.unwrap();
    for i in 0..RECORDS {
        t.publish()
            .value(format!("v{i}"))
            .partition((i % u64::from(kind.partitions())) as u32)
            .send()
            .await
            .unwrap();
    }
}

/// Runs the kill schedule for each policy; returns a description of every problem.
fn run(transport: Transport, kind: Kind, seed: u64) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = (transport == Transport::Tcp).then(|| common::ServerProcess::start(&data));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = match &server {
        Some(s) => s.url(),
        None => data.display().to_string(),
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut problems = Vec::new();
    for (i, &name) in POLICIES.iter().enumerate() {
        let topic = format!("t{i}");
        runtime.block_on(async {
            let client = match &server {
                Some(s) => Client::connect(&s.url()).await.unwrap(),
                None => Client::open(&data).await.unwrap(),
            };
            publish(&client, kind, &topic).await;
            client.close().await.unwrap();
        });
        let mut handled: BTreeSet<(u32, u64)> = BTreeSet::new();
        // The record the previous run was killed while handling.
        let mut killed: Option<(u32, u64)> = None;
        for kill in 0..=KILLS {
            let last = kill == KILLS;
            // The last run handles everything; the others stop at a seeded record.
            let kill_at = if last { 0 } else { rng.random_range(1..=6) };
            let child = ChildConsumer::start(&broker, kind, name, &topic, kill_at);
            // The first record of each partition this run handed out.
            let mut firsts: BTreeMap<u32, u64> = BTreeMap::new();
            let mut stuck = None;
            loop {
                // A run that is to be killed always gets there; the last one goes quiet
                // early only if records were skipped (it waits for records that the
                // broker will not hand out again).
                let quiet = Duration::from_secs(if last { 15 } else { 60 });
                let Some((what, p, o)) = child.line(quiet) else {
                    assert!(last, "{name}: the consuming process went quiet");
                    break;
                };
                match what.as_str() {
                    "got" => {
                        firsts.entry(p).or_insert(o);
                    }
                    "done" => {
                        handled.insert((p, o));
                    }
                    _ => stuck = Some((p, o)),
                }
                if stuck.is_some() || (last && handled.len() as u64 == RECORDS) {
                    break;
                }
            }
            drop(child);
            if let Some((p, k)) = killed {
                match firsts.get(&p) {
                    Some(&f) if f > k => problems.push(format!(
                        "{name}: killed while handling {p}/{k}, the restart began at {p}/{f}"
                    )),
                    Some(&f) if window(name).is_some_and(|w| f + w < k) => problems.push(
                        format!("{name}: killed at {p}/{k}, the restart re-delivered from {p}/{f}, beyond the policy's window"),
                    ),
                    _ => {}
                }
            }
            killed = stuck;
        }
        let missing: Vec<(u32, u64)> = (0..RECORDS)
            .map(|i| {
                (
                    (i % u64::from(kind.partitions())) as u32,
                    i / u64::from(kind.partitions()),
                )
            })
            .filter(|r| !handled.contains(r))
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{name}: records never handled (skipped): {missing:?}"
            ));
        }
    }
    drop(server);
    problems
}

fn check(transport: Transport, kind: Kind) {
    let seed = std::env::var("RILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (replay with RILL_SEED={seed})");
    let problems = run(transport, kind, seed);
    assert!(problems.is_empty(), "seed {seed}:\n{}", problems.join("\n"));
}

#[test]
fn named_consumer_tcp() {
    check(Transport::Tcp, Kind::Named);
}

#[test]
fn named_consumer_embedded() {
    check(Transport::Embedded, Kind::Named);
}

#[test]
fn group_member_tcp() {
    check(Transport::Tcp, Kind::Group);
}

#[test]
fn group_member_embedded() {
    check(Transport::Embedded, Kind::Group);
}

/// The consuming process of the tests above (run by them with its configuration in
/// `RILL_CONSUMER_CRASH_CHILD`; without it, it has nothing to do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the consuming process of the crash tests, run by them"]
async fn child_consumer() {
    let Ok(config) = std::env::var(ENV) else {
        eprintln!("{ENV} is not set: this is run by the consumer crash tests only");
        return;
    };
    let parts: Vec<&str> = config.split('|').collect();
    let [broker, kind, policy_name, topic, kill_at] = parts[..] else {
        panic!("bad {ENV}: {config}");
    };
    let kill_at: u64 = kill_at.parse().unwrap();
    let client = if broker.starts_with("rill://") {
        Client::connect(broker).await.unwrap()
    } else {
        Client::open(Path::new(broker)).await.unwrap()
    };
    let t = client.stream("crash").topic(topic);
    let policy = policy(policy_name);
    let explicit = policy == CommitPolicy::Disabled;
    let say = |what: &str, p: u32, o: u64| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{PREFIX} {what} {p} {o}").unwrap();
        out.flush().unwrap();
    };
    let mut count = 0;
    let mut handle = |record: &rill_client::Record| {
        count += 1;
        say("got", record.partition, record.offset);
        if count == kill_at {
            say("stuck", record.partition, record.offset);
            // Handling this one never ends: the parent kills the process now.
            std::thread::sleep(Duration::from_secs(3600));
        }
        // Handling takes a moment, so interval policies come due in between.
        std::thread::sleep(Duration::from_millis(2));
        say("done", record.partition, record.offset);
    };
    if kind == "named" {
        let mut c = t
            .consumer("crash", 0)
            .commit_policy(policy)
            .batch_length(4)
            .build()
            .await
            .unwrap();
        loop {
            let record = c.next().await.unwrap().unwrap();
            handle(&record);
            if explicit {
                c.commit(&record).await.unwrap();
            }
        }
    } else {
        let mut c = t
            .consumer_group("crash")
            .commit_policy(policy)
            .batch_length(4)
            .poll_interval(Duration::from_millis(5))
            .build()
            .await
            .unwrap();
        loop {
            let record = c.next().await.unwrap().unwrap();
            handle(&record);
            if explicit {
                c.commit(&record).await.unwrap();
            }
        }
    }
}
