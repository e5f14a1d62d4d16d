//! Scenario 6 of docs/EVENTS.md: an events consumer killed with SIGKILL mid-batch under
//! `NoEventLose` loses nothing — after restarts every event is applied at least once,
//! within each run every key's events are applied in log order, and pending retries and
//! quarantines survive (a key quarantined at the kill is not overtaken by its later
//! events after the restart). Over TCP (the broker survives the consumer) and embedded
//! (the broker dies with it).
//!
//! The consuming process is this test binary run again (`child_events_consumer`,
//! ignored in normal runs). Its handler prints `applied KEY SEQ` for each event of a
//! successful call, and fails the first call of every run that holds a key's event 3
//! (so keys go through the retry topic, and some are quarantined when the kill comes).
//! The parent kills it after a seeded number of lines, three times, then lets a last run
//! finish.

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rill_client::{Client, TopicOptions};
use rill_events::{
    Assignment, ConsumerConfig, Context, Event, EventHandler, EventKey, HandleError, Handlers,
    Publisher,
};
use serde::{Deserialize, Serialize};

const ENV: &str = "RILL_EVENTS_CRASH_CHILD";
const PREFIX: &str = "events-crash:";
const KEYS: u32 = 6;
const PER_KEY: u32 = 10;
const KILLS: u32 = 3;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EventKey)]
#[event_key(topic = "steps")]
struct Key(String);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(name = "step")]
struct Step {
    #[event(key)]
    key: Key,
    seq: u32,
}

struct Print {
    /// Keys whose call holding event 3 already failed in this run.
    failed: Mutex<BTreeSet<String>>,
}

impl EventHandler<Step> for Print {
    const MAX_BATCH: usize = 4;

    async fn handle(&self, ctx: &Context, run: &[Step]) -> Result<(), HandleError> {
        let key = ctx.key::<Key>().unwrap().0;
        if run.iter().any(|s| s.seq == 3) && self.failed.lock().insert(key.clone()) {
            return Err(HandleError::retryable(
                "event 3 fails on its first try of a run",
            ));
        }
        for s in run {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{PREFIX} applied {key} {} {}", s.seq, ctx.partition()).unwrap();
            out.flush().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        Ok(())
    }
}

/// One consuming process; killed when dropped.
struct ChildConsumer(common::ChildTest);

impl ChildConsumer {
    fn start(broker: &str) -> Self {
        Self::start_as(broker, "partitions")
    }

    /// `assignment` is `partitions` (both, listed) or `group`.
    fn start_as(broker: &str, assignment: &str) -> Self {
        let config = format!("{broker}|{assignment}");
        Self(common::ChildTest::spawn(
            "child_events_consumer",
            (ENV, &config),
            PREFIX,
        ))
    }

    /// The next `applied KEY SEQ`, or `None` after `quiet` without one.
    fn applied(&self, quiet: Duration) -> Option<(String, u32)> {
        self.applied_at(quiet).map(|(k, s, _)| (k, s))
    }

    /// The next `applied KEY SEQ PARTITION`, or `None` after `quiet` without one.
    fn applied_at(&self, quiet: Duration) -> Option<(String, u32, u32)> {
        let line = self.0.line(quiet)?;
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some("applied"));
        let key = parts.next().unwrap().to_owned();
        let seq = parts.next().unwrap().parse().unwrap();
        Some((key, seq, parts.next().unwrap().parse().unwrap()))
    }
}

async fn client_of(broker: &str) -> Client {
    if broker.starts_with("rill://") {
        Client::connect(broker).await.unwrap()
    } else {
        Client::open(Path::new(broker)).await.unwrap()
    }
}

fn run(tcp: bool, seed: u64) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = tcp.then(|| common::ServerProcess::start(&data));
    let broker = match &server {
        Some(s) => s.url(),
        None => data.display().to_string(),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = client_of(&broker).await;
        client
            .stream("crash")
            .topic("steps")
            .create_with(&TopicOptions::partitions(2), false)
            .await
            .unwrap();
        let publisher = Publisher::new(&client, "crash");
        let steps: Vec<Step> = (0..PER_KEY)
            .flat_map(|seq| {
                (0..KEYS).map(move |k| Step {
                    key: Key(format!("k{k}")),
                    seq,
                })
            })
            .collect();
        // In a few batches, so polls and kills fall between them too.
        for chunk in steps.chunks(13) {
            publisher.publish_batch(chunk).await.unwrap();
        }
        publisher.close().await.unwrap();
        client.close().await.unwrap();
    });
    let mut rng = StdRng::seed_from_u64(seed);
    let mut problems = Vec::new();
    let mut applied: BTreeSet<(String, u32)> = BTreeSet::new();
    for kill in 0..=KILLS {
        let last = kill == KILLS;
        let kill_after = rng.random_range(3..20);
        let child = ChildConsumer::start(&broker);
        // Per key, what this run applied, in order.
        let mut order: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        let mut lines = 0;
        loop {
            let quiet = Duration::from_secs(if last { 15 } else { 60 });
            let Some((key, seq)) = child.applied(quiet) else {
                if !last {
                    problems.push(format!("run {kill}: the consumer went quiet"));
                }
                break;
            };
            lines += 1;
            order.entry(key.clone()).or_default().push(seq);
            applied.insert((key, seq));
            if !last && lines == kill_after {
                break;
            }
            if last && applied.len() as u32 == KEYS * PER_KEY {
                break;
            }
        }
        drop(child);
        for (key, seqs) in order {
            if seqs.windows(2).any(|w| w[0] >= w[1]) {
                problems.push(format!(
                    "run {kill}: {key}'s events were applied out of order: {seqs:?}"
                ));
            }
        }
    }
    let missing: Vec<(u32, u32)> = (0..KEYS)
        .flat_map(|k| (0..PER_KEY).map(move |s| (k, s)))
        .filter(|(k, s)| !applied.contains(&(format!("k{k}"), *s)))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("events never applied (key, seq): {missing:?}"));
    }
    if !problems.is_empty() && std::env::var("RILL_EVENTS_DUMP").is_ok() {
        runtime.block_on(async {
            let client = client_of(&broker).await;
            for t in ["steps", "steps.retry.steps"] {
                let topic = client.stream("crash").topic(t);
                for p in 0..2 {
                    let f = topic
                        .fetch(rill_client::Position::new(p, 0), 1 << 20, Duration::ZERO)
                        .await
                        .unwrap();
                    for r in f.records {
                        let retry = match r.header(rill_events::RETRY_HEADER) {
                            Some(rill_client::Value::Bytes(b)) => format!(
                                "{:?}",
                                rill_events::RetryHeader::decode(b).ok().map(|h| (
                                    h.kind,
                                    h.attempt,
                                    h.source_first,
                                    h.source_last
                                ))
                            ),
                            _ => "-".into(),
                        };
                        let body = String::from_utf8_lossy(&r.value);
                        eprintln!(
                            "DUMP {t} {p}/{} key={:?} {retry} {body}",
                            r.offset,
                            r.key.as_deref().map(String::from_utf8_lossy)
                        );
                    }
                }
            }
        });
    }
    drop(server);
    problems
}

fn check(tcp: bool) {
    let seed = std::env::var("RILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (replay with RILL_SEED={seed})");
    let problems = run(tcp, seed);
    assert!(problems.is_empty(), "seed {seed}:\n{}", problems.join("\n"));
}

#[test]
fn killed_consumer_loses_no_event_and_keeps_key_order_tcp() {
    check(true);
}

#[test]
fn killed_consumer_loses_no_event_and_keeps_key_order_embedded() {
    check(false);
}

/// The consuming process of the tests above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the consuming process of the events crash tests, run by them"]
async fn child_events_consumer() {
    let Ok(config) = std::env::var(ENV) else {
        eprintln!("{ENV} is not set: this is run by the events crash tests only");
        return;
    };
    let (broker, assignment) = config.split_once('|').expect("BROKER|ASSIGNMENT");
    let assignment = match assignment {
        "group" => Assignment::Group,
        _ => Assignment::Partitions(vec![0, 1]),
    };
    let client = client_of(broker).await;
    let consumer = Handlers::new()
        .handle::<Step, _>(Print {
            failed: Mutex::default(),
        })
        .start(
            &client,
            ConsumerConfig::new("crash", "steps", assignment)
                // Each run fails a key once: enough attempts that 4 runs never exhaust them.
                .retry_delays([Duration::from_millis(30); 10])
                .poll_count(7)
                .poll_interval(Duration::from_millis(10)),
        )
        .await
        .unwrap();
    let mut consumer = consumer;
    // A group member's tasks end when their partitions move; anything else is fatal.
    loop {
        match consumer.closed().await {
            Some((_, rill_events::Ended::Shutdown)) => {}
            None => std::future::pending::<()>().await,
            Some(ended) => panic!("a partition task ended: {ended:?}"),
        }
    }
}

/// Two consuming processes in one consumer group split the partitions; when one is
/// killed (SIGKILL: its connection closes and the broker drops it at once), the other
/// takes its partitions over, and no event is skipped.
#[test]
fn a_group_member_takes_over_the_partitions_of_one_killed() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"));
    let url = server.url();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let publish = |from: u32, to: u32| {
        runtime.block_on(async {
            let client = client_of(&url).await;
            let publisher = Publisher::new(&client, "crash");
            let steps: Vec<Step> = (from..to)
                .flat_map(|seq| {
                    (0..KEYS).map(move |k| Step {
                        key: Key(format!("k{k}")),
                        seq,
                    })
                })
                .collect();
            publisher.publish_batch(&steps).await.unwrap();
            publisher.close().await.unwrap();
            client.close().await.unwrap();
        });
    };
    runtime.block_on(async {
        let client = client_of(&url).await;
        client
            .stream("crash")
            .topic("steps")
            .create_with(&TopicOptions::partitions(2), false)
            .await
            .unwrap();
        client.close().await.unwrap();
    });
    publish(0, 5);
    let mut published = 5;
    let a = ChildConsumer::start_as(&url, "group");
    let b = ChildConsumer::start_as(&url, "group");
    let mut applied: BTreeSet<(String, u32)> = BTreeSet::new();
    let mut by_a: BTreeSet<u32> = BTreeSet::new();
    let mut by_b: BTreeSet<u32> = BTreeSet::new();
    let (mut events_a, mut events_b) = (BTreeSet::new(), BTreeSet::new());
    // Until both have applied something (each owns a partition), publishing more
    // while one member holds everything.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while by_a.is_empty() || by_b.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the members never split the partitions: a {by_a:?}, b {by_b:?}"
        );
        while let Some((k, s, p)) = a.applied_at(Duration::from_millis(50)) {
            events_a.insert((k.clone(), s));
            applied.insert((k, s));
            by_a.insert(p);
        }
        while let Some((k, s, p)) = b.applied_at(Duration::from_millis(50)) {
            events_b.insert((k.clone(), s));
            applied.insert((k, s));
            by_b.insert(p);
        }
        if applied.len() as u32 == KEYS * published && (by_a.is_empty() || by_b.is_empty()) {
            publish(published, published + 1);
            published += 1;
        }
    }
    // A partition moved between live members only after its old owner stopped and
    // stored its offset: nothing was applied by both.
    let twice: Vec<_> = events_a.intersection(&events_b).collect();
    assert!(twice.is_empty(), "applied by both members: {twice:?}");
    // The member that now owns fewer gives them up by dying.
    drop(a);
    publish(published, published + 5);
    published += 5;
    let mut after: BTreeSet<u32> = BTreeSet::new();
    while let Some((k, s, p)) = b.applied_at(Duration::from_secs(15)) {
        applied.insert((k, s));
        if s >= published - 5 {
            after.insert(p);
        }
        if applied.len() as u32 == KEYS * published {
            break;
        }
    }
    let missing: Vec<(String, u32)> = (0..KEYS)
        .flat_map(|k| (0..published).map(move |s| (format!("k{k}"), s)))
        .filter(|e| !applied.contains(e))
        .collect();
    assert!(missing.is_empty(), "events never applied: {missing:?}");
    assert!(
        by_a.iter().all(|p| after.contains(p)),
        "the survivor took over the killed member's partitions: a had {by_a:?}, b then applied {after:?}"
    );
    drop(b);
}
