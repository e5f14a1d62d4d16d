//! Crash test of elastic topics with the real `rill` binary (docs/RANGES.md §3, §10):
//! keyed producers send to an `always` elastic topic while its ranges are split and
//! merged, and the server is killed with SIGKILL a random few milliseconds into each
//! change, then restarted on the same port and data directory. After every restart the
//! change is there whole or not at all: the range epoch is the one before or the one
//! after (after, if the change was answered), every sealed range ends exactly at its
//! seal, and no range opens failed. At the end a cursor reads every acknowledged record
//! exactly once, each key's records in the order they were sent.
//!
//! Prints its seed; replay the kill schedule with `RILL_SEED=<seed>`.

mod common;

use common::{FixedServer, free_port};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rill_client::{Client, Durability, Message, RetryPolicy, Topic, TopicOptions};

/// Changes of the ranges, each with a SIGKILL somewhere in it.
const ROUNDS: usize = 16;
/// Producer tasks, each sending its keys' records one after another.
const PRODUCERS: u32 = 3;
/// Keys per producer task.
const KEYS: u32 = 4;
/// A hang is a failure, not a stuck test.
const DEADLINE: Duration = Duration::from_secs(120);

async fn describe(topic: &Topic) -> rill_client::TopicDescription {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match topic.describe().await {
            Ok(d) => return d,
            Err(e) if Instant::now() < deadline => {
                eprintln!("[elastic-crash] describe: {e}; again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the topic cannot be described after a restart: {e}"),
        }
    }
}

/// The checks after a restart: the epoch is `before` or `before + 1` (`+ 1` if the
/// change was answered); every sealed range ends at its seal; no range failed.
fn check_restart(d: &rill_client::TopicDescription, before: u64, answered: bool, seed: u64) {
    let expected: &[u64] = if answered {
        &[before + 1]
    } else {
        &[before, before + 1]
    };
    assert!(
        expected.contains(&d.range_epoch),
        "seed {seed}: epoch {} after a change from epoch {before} (answered: {answered})",
        d.range_epoch
    );
    assert_eq!(d.ranges.len(), d.partitions.len(), "seed {seed}");
    for r in &d.ranges {
        let p = &d.partitions[r.id as usize];
        assert_eq!(p.failure, None, "seed {seed}: range {} failed", r.id);
        if let Some(end) = r.sealed_at {
            assert_eq!(
                p.next_offset, end,
                "seed {seed}: range {} ends at {} but was sealed at {end}",
                r.id, p.next_offset
            );
        }
    }
}

/// Sends `KEYS` keys' records, each key's one after another, until told to stop.
/// Returns the values acknowledged and those whose send failed (stored or not).
async fn produce(topic: Topic, task: u32, stop: Arc<AtomicBool>) -> (Vec<String>, Vec<String>) {
    let producer = topic
        .producer()
        .retries(200, Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    let mut n = 0u32;
    while !stop.load(Ordering::Acquire) {
        for k in 0..KEYS {
            let key = format!("p{task}k{k}");
            let value = format!("{key}/{n}");
            match producer
                .send(Message::new(value.clone()).with_key(key))
                .await
            {
                Ok(_) => acked.push(value),
                Err(e) => {
                    eprintln!("[elastic-crash] {value}: {e}");
                    failed.push(value);
                }
            }
        }
        n += 1;
    }
    (acked, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_in_the_middle_of_splits_and_merges_leaves_each_whole_or_absent() {
    let seed: u64 = std::env::var("RILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("[elastic-crash] seed: RILL_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let mut server = FixedServer::start(&data, port);
    let client = Client::builder()
        .retry(RetryPolicy {
            retries: 200,
            backoff: Duration::from_millis(20),
            backoff_max: Duration::from_millis(200),
        })
        .connect(&format!("rill://127.0.0.1:{port}"))
        .await
        .unwrap();
    let topic = client.stream("s").topic("t");
    topic
        .create_with(
            &TopicOptions {
                partitions: Some(2),
                elastic: true,
                durability: Some(Durability::Always),
                ..Default::default()
            },
            false,
        )
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|task| tokio::spawn(produce(topic.clone(), task, Arc::clone(&stop))))
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Changes kept, kept though never answered (the process died between the commit
    // and the answer), and lost with the process.
    let (mut committed, mut unanswered, mut unknown) = (0, 0, 0);
    for round in 0..ROUNDS {
        let before = describe(&topic).await;
        let epoch = before.range_epoch;
        // A split of the busiest range, or every third round a merge of the two open
        // ranges lowest in the hash space (neighbours: open ranges tile the hashes).
        let admin = topic.clone();
        let mut open: Vec<&rill_client::RangeInfo> = before
            .ranges
            .iter()
            .filter(|r| r.sealed_at.is_none())
            .collect();
        open.sort_by_key(|r| r.lo);
        let change = if round % 3 == 2 && open.len() >= 2 {
            let (a, b) = (open[0].id, open[1].id);
            tokio::spawn(async move { admin.merge_ranges(a, b).await })
        } else {
            tokio::spawn(async move { admin.split_range(None, None).await })
        };
        // A split takes a few milliseconds (one fdatasync of the range, the children's
        // directories, the catalog's rename): the kill lands before, inside or after.
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..12_000))).await;
        server.kill9();
        let answered = change.await.unwrap().is_ok();
        let pause = Duration::from_millis(rng.random_range(50..200));
        tokio::time::sleep(pause).await;
        server = FixedServer::start(&data, port);
        let after = describe(&topic).await;
        check_restart(&after, epoch, answered, seed);
        if after.range_epoch > epoch {
            committed += 1;
            unanswered += usize::from(!answered);
        } else {
            unknown += 1;
        }
        eprintln!(
            "[elastic-crash] round {round}: epoch {epoch} -> {} (answered: {answered})",
            after.range_epoch
        );
        assert!(started.elapsed() < DEADLINE, "seed {seed}: too slow");
    }
    eprintln!(
        "[elastic-crash] changes kept: {committed} ({unanswered} never answered), lost with the process: {unknown}"
    );
    // Let the producers write to the ranges as they are now, then stop them.
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::Release);
    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    for p in producers {
        let (a, f) = tokio::time::timeout(DEADLINE, p)
            .await
            .expect("the producers stop")
            .unwrap();
        acked.extend(a);
        failed.extend(f);
    }
    assert!(
        acked.len() > 100,
        "seed {seed}: {} acknowledged",
        acked.len()
    );

    // Every acknowledged record once, each key's in order; a failed send's record at
    // most once.
    let mut reader = topic.records("verify");
    let mut count: BTreeMap<String, u32> = BTreeMap::new();
    let mut last: BTreeMap<String, u32> = BTreeMap::new();
    while let Some(record) = reader.next().await {
        let record = record.expect("read back a record");
        let value = String::from_utf8(record.value.to_vec()).unwrap();
        let (key, n) = value.split_once('/').unwrap();
        let n: u32 = n.parse().unwrap();
        if let Some(before) = last.insert(key.to_owned(), n) {
            assert!(
                before < n,
                "seed {seed}: {key}: {n} at {:?} after {before}",
                record.position()
            );
        }
        *count.entry(value).or_default() += 1;
    }
    for v in &acked {
        assert_eq!(count.get(v), Some(&1), "seed {seed}: acknowledged {v}");
    }
    for v in &failed {
        assert!(
            count.get(v).is_none_or(|&n| n == 1),
            "seed {seed}: {v} twice"
        );
    }
    let known = acked.len() + failed.len();
    assert!(
        count.len() <= known,
        "seed {seed}: {} records read, {known} sent",
        count.len()
    );
    eprintln!(
        "[elastic-crash] {} acknowledged, {} failed sends, {} read; {:?}",
        acked.len(),
        failed.len(),
        count.len(),
        started.elapsed()
    );
}
