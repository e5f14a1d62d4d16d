//! Crash test with the real `rill` binary: a producer with retries sends 100,000 keyed
//! records to an `always` topic while the server is killed with SIGKILL at three random
//! moments and restarted on the same port and data directory. Afterwards (and after one
//! more SIGKILL and restart) every acknowledged record must be stored exactly once at
//! the position it was acknowledged with, no record may be stored twice (the idempotent
//! producer across retries and restarts), and each key's records must be in send order.
//!
//! Prints its seed; replay the kill schedule with `RILL_SEED=<seed>`.

mod common;

use common::{FixedServer, free_port};

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rill_client::{
    Client, Durability, Message, Position, RetryPolicy, Topic, TopicOptions, partition_for_key,
};

/// Records to have acknowledged.
const RECORDS: u64 = 100_000;
/// Records per `send_batch` call.
const BATCH: u64 = 500;
/// Keys `k0..k49`, round-robin, so each batch holds 10 records of every key.
const KEYS: u64 = 50;
const PARTITIONS: u32 = 4;
/// SIGKILLs while the producer runs.
const KILLS: usize = 3;
/// Sends that may fail after exhausting their retries.
const FAILED_SENDS_MAX: usize = 3;
/// The producer must be done by then (a hang is a failure, not a stuck test).
const PRODUCE_DEADLINE: Duration = Duration::from_secs(90);
/// A send slower than this waited out a restart (the pause alone is 200 ms or more).
const SLOW_SEND: Duration = Duration::from_millis(150);

fn record_value(key: u64, seq: u64) -> String {
    format!("k{key}:{seq}")
}

/// Record `i` of the run: key `i % KEYS`, sequence `i / KEYS` within its key.
fn record_of(i: u64) -> (u64, u64) {
    (i % KEYS, i / KEYS)
}

#[derive(Debug, Default)]
struct Produced {
    /// (key, seq) → where the broker said it stored the record.
    acked: HashMap<(u64, u64), Position>,
    /// Records of failed sends: may be stored (at most once), or not.
    unacked: Vec<(u64, u64)>,
    /// Why each failed send failed.
    failures: Vec<String>,
    /// Records generated (acknowledged or not).
    generated: u64,
    /// Send calls made.
    sends: u64,
    /// Sends that took over `SLOW_SEND` (they waited out a restart, retrying).
    slow_sends: u64,
    /// The longest send.
    longest_send: Duration,
}

async fn produce(topic: Topic, progress: Arc<AtomicU64>) -> Produced {
    let producer = topic
        .producer()
        .batch_length(BATCH as usize)
        .retries(200, Duration::from_millis(50))
        .build()
        .await
        .expect("build the producer");
    let mut out = Produced::default();
    while (out.acked.len() as u64) < RECORDS && out.failures.len() <= FAILED_SENDS_MAX {
        let range = out.generated..out.generated + BATCH;
        out.generated += BATCH;
        out.sends += 1;
        let messages = range
            .clone()
            .map(|i| {
                let (key, seq) = record_of(i);
                Message::new(record_value(key, seq)).with_key(format!("k{key}"))
            })
            .collect();
        let sent_at = Instant::now();
        let result = producer.send_batch(messages).await;
        let took = sent_at.elapsed();
        out.longest_send = out.longest_send.max(took);
        if took > SLOW_SEND {
            out.slow_sends += 1;
        }
        match result {
            Ok(positions) => {
                assert_eq!(positions.len() as u64, BATCH, "one position per record");
                for (i, position) in range.zip(positions) {
                    out.acked.insert(record_of(i), position);
                }
                progress.store(out.acked.len() as u64, Ordering::Release);
            }
            Err(e) => {
                eprintln!(
                    "[crash] send {} (records {}..{}) failed: {e}",
                    out.sends, range.start, range.end
                );
                out.failures.push(e.to_string());
                out.unacked.extend(range.map(record_of));
            }
        }
    }
    out
}

/// Kills the server `KILLS` times, each once the producer has acknowledged a random
/// number of records (one threshold in each of `KILLS` equal spans of the first 90% of
/// the run, plus a random few ms so the kill lands anywhere in a send), restarting it
/// after a random pause. Returns the running server and the kills done.
fn kill_and_restart(
    mut server: FixedServer,
    data: PathBuf,
    port: u16,
    progress: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    mut rng: StdRng,
) -> (FixedServer, usize) {
    // Spread over the first 90% of the run, so the last kill still finds sends to hit.
    let span = RECORDS * 9 / 10 / KILLS as u64;
    let thresholds: Vec<u64> = (0..KILLS as u64)
        .map(|k| k * span + rng.random_range(span / 10..span * 9 / 10))
        .collect();
    let mut kills = 0;
    for threshold in thresholds {
        while progress.load(Ordering::Acquire) < threshold && !done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(0..20)));
        if done.load(Ordering::Acquire) {
            break;
        }
        server.kill9();
        kills += 1;
        let pause = Duration::from_millis(rng.random_range(200..=500));
        eprintln!(
            "[crash] kill {kills}: SIGKILL at {} acknowledged records; restarting in {pause:?}",
            progress.load(Ordering::Acquire)
        );
        std::thread::sleep(pause);
        server = FixedServer::start(&data, port);
    }
    (server, kills)
}

/// One record read back.
#[derive(Debug, Clone, Copy)]
struct Stored {
    partition: u32,
    offset: u64,
    key: u64,
    seq: u64,
}

fn parse_value(value: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(value).ok()?;
    let (key, seq) = text.strip_prefix('k')?.split_once(':')?;
    Some((key.parse().ok()?, seq.parse().ok()?))
}

async fn read_back(topic: &Topic) -> Vec<Stored> {
    let mut reader = topic.records("verify");
    let mut stored = Vec::new();
    while let Some(record) = reader.next().await {
        let record = record.expect("read back a record");
        let (key, seq) = parse_value(&record.value).unwrap_or_else(|| {
            panic!(
                "record {}:{} has an unexpected value {:?}",
                record.partition, record.offset, record.value
            )
        });
        assert_eq!(
            record.key.as_deref(),
            Some(format!("k{key}").as_bytes()),
            "record {}:{} ({}) has the wrong key",
            record.partition,
            record.offset,
            record_value(key, seq)
        );
        stored.push(Stored {
            partition: record.partition,
            offset: record.offset,
            key,
            seq,
        });
    }
    stored
}

/// Every rule of the scenario; returns the problems found (at most a few per rule).
fn verify(produced: &Produced, stored: &[Stored]) -> Vec<String> {
    const SHOWN: usize = 10;
    let mut problems = Vec::new();
    let mut note = |kind: &str, count: &mut usize, message: String| {
        *count += 1;
        if *count <= SHOWN {
            problems.push(format!("{kind}: {message}"));
        }
    };

    // Each (key, seq) at most once; where it is stored.
    let mut copies: HashMap<(u64, u64), Vec<(u32, u64)>> = HashMap::new();
    for s in stored {
        copies
            .entry((s.key, s.seq))
            .or_default()
            .push((s.partition, s.offset));
    }
    let mut duplicated = 0;
    for ((key, seq), at) in &copies {
        if at.len() > 1 {
            let acked = produced.acked.contains_key(&(*key, *seq));
            note(
                "duplicate",
                &mut duplicated,
                format!(
                    "{} stored {} times at {at:?} (acknowledged: {acked})",
                    record_value(*key, *seq),
                    at.len()
                ),
            );
        }
    }

    // Every acknowledged record is stored where its acknowledgement said.
    let mut missing = 0;
    let mut misplaced = 0;
    let mut acked: Vec<_> = produced.acked.iter().collect();
    acked.sort_unstable_by_key(|&(&(key, seq), _)| (seq, key));
    for (&(key, seq), position) in acked {
        match copies.get(&(key, seq)) {
            None => note(
                "lost",
                &mut missing,
                format!(
                    "acknowledged {} at {}:{} is not stored",
                    record_value(key, seq),
                    position.partition,
                    position.offset
                ),
            ),
            Some(at) if !at.contains(&(position.partition, position.offset)) => note(
                "misplaced",
                &mut misplaced,
                format!(
                    "acknowledged {} at {}:{} is stored at {at:?}",
                    record_value(key, seq),
                    position.partition,
                    position.offset
                ),
            ),
            Some(_) => {}
        }
    }

    // Only records that were sent; each key in its partition, in send order.
    let mut strays = 0;
    let mut wrong_partition = 0;
    let mut out_of_order = 0;
    let mut by_partition: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for s in stored {
        by_partition.entry(s.partition).or_default().push(*s);
    }
    let mut last_seq: HashMap<u64, (u64, u64)> = HashMap::new();
    for records in by_partition.values_mut() {
        records.sort_unstable_by_key(|s| s.offset);
        for s in records.iter() {
            if s.seq * KEYS + s.key >= produced.generated {
                note(
                    "stray",
                    &mut strays,
                    format!(
                        "{} at {}:{} was never sent",
                        record_value(s.key, s.seq),
                        s.partition,
                        s.offset
                    ),
                );
            }
            let home = partition_for_key(format!("k{}", s.key).as_bytes(), PARTITIONS);
            if s.partition != home {
                note(
                    "partition",
                    &mut wrong_partition,
                    format!(
                        "{} is in partition {}, its key's is {home}",
                        record_value(s.key, s.seq),
                        s.partition
                    ),
                );
            }
            if let Some(&(prev_seq, prev_offset)) = last_seq.get(&s.key)
                && prev_seq >= s.seq
            {
                note(
                    "order",
                    &mut out_of_order,
                    format!(
                        "key k{}: seq {} at offset {} follows seq {prev_seq} at offset {prev_offset}",
                        s.key, s.seq, s.offset
                    ),
                );
            }
            last_seq.insert(s.key, (s.seq, s.offset));
        }
    }
    for (kind, count) in [
        ("duplicate", duplicated),
        ("lost", missing),
        ("misplaced", misplaced),
        ("stray", strays),
        ("partition", wrong_partition),
        ("order", out_of_order),
    ] {
        if count > SHOWN {
            problems.push(format!("{kind}: … {count} in all"));
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_produce_keeps_every_acknowledged_record_once_and_in_order() {
    let seed: u64 = std::env::var("RILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("[crash] seed: RILL_SEED={seed}");
    let rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let server = FixedServer::start(&data, port);
    let url = format!("rill://127.0.0.1:{port}");
    let client = Client::builder()
        .retry(RetryPolicy {
            retries: 200,
            backoff: Duration::from_millis(20),
            backoff_max: Duration::from_millis(200),
        })
        .connect(&url)
        .await
        .expect("connect");
    let topic = client.stream("crash").topic("t");
    topic
        .create_with(
            &TopicOptions {
                partitions: Some(PARTITIONS),
                durability: Some(Durability::Always),
                ..TopicOptions::default()
            },
            true,
        )
        .await
        .expect("create the topic");

    let progress = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(topic.clone(), Arc::clone(&progress)));
    let killer = {
        let (data, progress, done) = (data.clone(), Arc::clone(&progress), Arc::clone(&done));
        tokio::task::spawn_blocking(move || {
            kill_and_restart(server, data, port, progress, done, rng)
        })
    };
    let produced = tokio::time::timeout(PRODUCE_DEADLINE, producer).await;
    done.store(true, Ordering::Release);
    let (mut server, kills) = killer.await.expect("the kill task");
    let produced = match produced {
        Ok(joined) => joined.expect("the producer task"),
        Err(_) => panic!(
            "seed {seed}: the producer was not done after {PRODUCE_DEADLINE:?} \
             ({} records acknowledged, {kills} kills): a send hangs",
            progress.load(Ordering::Acquire)
        ),
    };
    let produce_time = started.elapsed();

    // One more SIGKILL once everything is acknowledged: the tail must survive it too.
    server.kill9();
    drop(server);
    let server = tokio::task::spawn_blocking(move || FixedServer::start(&data, port))
        .await
        .unwrap();

    let stored = read_back(&topic).await;
    let problems = verify(&produced, &stored);
    eprintln!(
        "[crash] seed {seed}: {} records sent in {} sends ({} acknowledged, {} in {} failed sends), \
         {kills} kills during produce + 1 after, {} sends waited out a restart (longest {:.1?}), \
         {} records read back; produce {produce_time:.1?}, total {:.1?}",
        produced.generated,
        produced.sends,
        produced.acked.len(),
        produced.unacked.len(),
        produced.failures.len(),
        produced.slow_sends,
        produced.longest_send,
        stored.len(),
        started.elapsed()
    );
    drop(server);

    assert!(
        problems.is_empty(),
        "seed {seed}: {} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert_eq!(
        kills, KILLS,
        "seed {seed}: the producer finished before every kill"
    );
    assert!(
        produced.failures.len() <= FAILED_SENDS_MAX,
        "seed {seed}: {} sends failed: {:?}",
        produced.failures.len(),
        produced.failures
    );
    assert!(
        produced.acked.len() as u64 >= RECORDS,
        "seed {seed}: only {} records acknowledged",
        produced.acked.len()
    );
    let stored_set: std::collections::HashSet<(u64, u64)> =
        stored.iter().map(|s| (s.key, s.seq)).collect();
    let unacked_stored = produced
        .unacked
        .iter()
        .filter(|r| stored_set.contains(r))
        .count();
    eprintln!(
        "[crash] {unacked_stored} of {} unacknowledged records were stored (allowed)",
        produced.unacked.len()
    );
}
