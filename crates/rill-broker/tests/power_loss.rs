//! Power loss through catalog changes (issue 9): the broker on a simulated disk
//! ([`SimIo`]) creates and deletes topics, appends (`always`) and stores consumer
//! offsets, until the disk dies at a seeded operation. The disk is then restarted as a
//! torn power loss, a clean one and a killed process, and the broker reopened on it:
//!
//! * it opens (a crash never leaves a catalog or a data directory it refuses), with no
//!   partition failed (under `always` a crash alone never damages anything);
//! * a topic whose create was acknowledged exists, one whose delete was acknowledged
//!   does not (and its files are gone), unless the operation in flight was on it;
//! * every acknowledged batch of a topic that still exists is there at its offset;
//! * every acknowledged stored offset reads back (or the one in flight, if it was a
//!   store of the same key).
//!
//! Sequential on purpose: at most one operation is in flight when the disk dies, so the
//! model knows exactly which outcome is uncertain. `RILL_SEED=<n>` replays one seed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_broker::{Broker, BrokerConfig, Fetch};
use rill_format::{BatchBuilder, NewRecord};
use rill_proto::pb;
use rill_storage::Io;
use rill_storage::sim::{SimIo, SimRng};

const SEEDS: u64 = 400;
const TOPICS: u32 = 3;
const STEPS_MAX: u64 = 40;

fn data_dir() -> PathBuf {
    PathBuf::from("/sim/data")
}

fn config(io: &SimIo) -> BrokerConfig {
    let mut config = BrokerConfig::new(data_dir());
    config.io = Arc::new(io.clone());
    // A small reserve keeps the simulated disk small.
    config.reserved_space_bytes = 64 << 10;
    config
}

/// A topic's state: whether it exists, and its acknowledged batches (partition, offset,
/// value).
type TopicState = (bool, Vec<(u32, u64, String)>);

/// What the workload knows was acknowledged.
#[derive(Debug, Default)]
struct Model {
    topics: BTreeMap<String, TopicState>,
    /// (topic, partition, consumer) → acknowledged stored offset.
    offsets: BTreeMap<(String, u32), u64>,
    /// The operation in flight when the disk died.
    in_flight: Option<Op>,
}

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Delete(String),
    Produce(String, u32, String),
    Store(String, u32, u64),
}

impl Op {
    fn topic(&self) -> &str {
        match self {
            Op::Create(t) | Op::Delete(t) | Op::Produce(t, ..) | Op::Store(t, ..) => t,
        }
    }
}

fn batch(value: &str) -> Bytes {
    let mut b = BatchBuilder::new();
    b.push(NewRecord::value(value.as_bytes())).unwrap();
    Bytes::from(b.finish().unwrap())
}

fn options() -> pb::TopicOptions {
    pb::TopicOptions {
        partitions: 2,
        segment_bytes: Some(1024),
        durability: pb::Durability::Always as i32,
        ..Default::default()
    }
}

async fn run_workload(io: &SimIo, rng: &mut SimRng, model: &mut Model, seed: u64) {
    let Ok(broker) = Broker::open(config(io)) else {
        return;
    };
    let broker = Arc::new(broker);
    for step in 0..STEPS_MAX {
        let topic = format!("t{}", rng.below(u64::from(TOPICS)));
        let exists = model.topics.get(&topic).is_some_and(|t| t.0);
        let op = match rng.below(10) {
            0 | 1 if !exists => Op::Create(topic),
            0 if exists => Op::Delete(topic),
            _ if !exists => Op::Create(topic),
            2..=3 => {
                let p = rng.below(2) as u32;
                let next = model.offsets.get(&(topic.clone(), p)).copied().unwrap_or(0);
                Op::Store(topic, p, next + 1 + rng.below(3))
            }
            _ => Op::Produce(topic, rng.below(2) as u32, format!("s{seed}-{step}")),
        };
        model.in_flight = Some(op.clone());
        let ok = match &op {
            Op::Create(t) => broker.create_topic("s", t, &options(), true, true).is_ok(),
            Op::Delete(t) => broker.delete_topic("s", t).is_ok(),
            Op::Produce(t, p, v) => match broker.produce("s", t, *p, batch(v)).await {
                Ok(produced) => {
                    model.topics.get_mut(t).expect("exists").1.push((
                        *p,
                        produced.base_offset,
                        v.clone(),
                    ));
                    true
                }
                Err(_) => false,
            },
            Op::Store(t, p, o) => {
                // Only offsets within the log may be stored.
                let end = broker
                    .describe_topic("s", t)
                    .map(|(_, ps)| ps[*p as usize].next_offset)
                    .unwrap_or(0);
                let o = (*o).min(end);
                model.in_flight = Some(Op::Store(t.clone(), *p, o));
                match broker.store_offset("s", t, *p, "c", o).await {
                    Ok(()) => {
                        model.offsets.insert((t.clone(), *p), o);
                        true
                    }
                    Err(_) => false,
                }
            }
        };
        if !ok {
            // The disk died (the only failure this workload meets): the outcome of this
            // operation is unknown.
            return;
        }
        model.in_flight = None;
        match &op {
            Op::Create(t) => {
                model.topics.entry(t.clone()).or_default().0 = true;
            }
            Op::Delete(t) => {
                model.topics.insert(t.clone(), (false, Vec::new()));
                model.offsets.retain(|(topic, _), _| topic != t);
            }
            Op::Produce(..) | Op::Store(..) => {}
        }
    }
}

async fn check(io: SimIo, model: &Model, what: &str) {
    let broker = Broker::open(config(&io))
        .unwrap_or_else(|e| panic!("{what}: the broker must open after a crash: {e}"));
    let failed = broker.failed_partitions();
    assert!(failed.is_empty(), "{what}: {failed:?}");
    let uncertain = model.in_flight.as_ref().map(|op| op.topic().to_owned());
    for (topic, (exists, batches)) in &model.topics {
        if uncertain.as_deref() == Some(topic.as_str())
            && matches!(model.in_flight, Some(Op::Create(_) | Op::Delete(_)))
        {
            continue;
        }
        let found = broker.describe_topic("s", topic).is_ok();
        assert_eq!(found, *exists, "{what}: topic {topic} exists");
        if !exists {
            let dir = data_dir().join("streams/s").join(topic);
            assert!(!io.exists(&dir), "{what}: a deleted topic's files are gone");
            continue;
        }
        for (p, offset, value) in batches {
            let read = broker
                .fetch(
                    "s",
                    topic,
                    *p,
                    Fetch {
                        offset: *offset,
                        max_bytes: 1,
                        max_wait: Duration::ZERO,
                        min_bytes: 0,
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("{what}: {topic}/{p} at {offset}: {e}"));
            let batch = read.batches().next().expect("a batch").expect("valid");
            let record = batch
                .records()
                .find(|r| r.offset == *offset)
                .expect("the record");
            assert_eq!(
                record.value,
                value.as_bytes(),
                "{what}: {topic}/{p} at {offset}"
            );
        }
    }
    for ((topic, p), offset) in &model.offsets {
        if !model.topics.get(topic).is_some_and(|t| t.0) {
            continue;
        }
        if uncertain.as_deref() == Some(topic.as_str())
            && matches!(model.in_flight, Some(Op::Create(_) | Op::Delete(_)))
        {
            continue;
        }
        let stored = broker.get_offset("s", topic, *p, "c").unwrap();
        let in_flight = match &model.in_flight {
            Some(Op::Store(t, q, o)) if t == topic && q == p => Some(*o),
            _ => None,
        };
        assert!(
            stored == Some(*offset) || (stored.is_some() && stored == in_flight),
            "{what}: stored offset of {topic}/{p} is {stored:?}, acknowledged {offset}"
        );
    }
    broker.shutdown().unwrap();
}

fn seeds() -> Vec<u64> {
    match std::env::var("RILL_SEED") {
        Ok(s) => vec![s.parse().expect("RILL_SEED is a number")],
        Err(_) => (0..SEEDS).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_changes_appends_and_offsets_survive_power_loss() {
    let (mut topics_checked, mut batches_checked, mut offsets_checked) = (0, 0, 0);
    for seed in seeds() {
        let mut rng = SimRng::new(seed);
        let io = SimIo::new(seed);
        io.create_dir_all(Path::new("/sim")).unwrap();
        io.sync_dir(Path::new("/")).unwrap();
        io.crash_after(rng.between(20, 900));
        let mut model = Model::default();
        run_workload(&io, &mut rng, &mut model, seed).await;
        topics_checked += model.topics.len();
        batches_checked += model.topics.values().map(|t| t.1.len()).sum::<usize>();
        offsets_checked += model.offsets.len();
        io.crash_now();
        let torn = io.power_loss(&mut rng);
        for (image, what) in [
            (torn, "torn power loss"),
            (io.power_loss_durable(), "power loss"),
            (io.process_crash(), "process crash"),
        ] {
            let what = format!("seed {seed} ({what}; replay with RILL_SEED={seed})");
            check(image, &model, &what).await;
        }
    }
    eprintln!(
        "checked {topics_checked} topics, {batches_checked} acknowledged batches and {offsets_checked} stored offsets, each after 3 restarts"
    );
    // The workload must reach the states it checks, or the test proves nothing.
    assert!(topics_checked > 100 && batches_checked > 500 && offsets_checked > 100);
}
