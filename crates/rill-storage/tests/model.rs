//! Random sequences of append / read / timestamp lookup / close + reopen / retention /
//! purge, checked against an in-memory model. Prints the seed on failure; replay one with
//! `RILL_SEED=<seed> cargo test -p rill-storage --test model`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use rill_format::{BatchBuilder, NewRecord};
use rill_storage::{Durability, LogConfig, ManualClock, PartitionLog, StdIo, StorageError};

#[derive(Debug, Clone)]
enum Op {
    /// Records as (value length, timestamp delta).
    Append(Vec<(usize, u64)>),
    Read {
        at: f64,
        max_bytes: usize,
    },
    Lookup {
        at: f64,
    },
    Advance(i64),
    Reopen,
    Retention,
    /// Purges below the offset this far between the start and the end (above 1.0: past
    /// the end, refused).
    Purge(f64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec((0..300usize, prop_oneof![3 => Just(0u64), 1 => 0..5_000u64]), 1..6)
            .prop_map(Op::Append),
        3 => (0.0..=1.0f64, 1..3000usize).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        2 => (0.0..=1.2f64).prop_map(|at| Op::Lookup { at }),
        2 => (0..20_000i64).prop_map(Op::Advance),
        1 => Just(Op::Reopen),
        1 => Just(Op::Retention),
        1 => (0.0..=1.1f64).prop_map(Op::Purge),
    ]
}

fn config() -> impl Strategy<Value = LogConfig> {
    (
        1024..6000u64,
        prop_oneof![Just(64u64), Just(512), Just(4096)],
        prop::option::of(3000..20_000u64),
        prop::option::of(10_000..100_000u64),
    )
        .prop_map(|(segment, interval, retention_bytes, age_us)| LogConfig {
            segment_bytes_max: segment,
            index_interval_bytes: interval,
            retention_bytes,
            retention_age: age_us.map(Duration::from_micros),
            durability: Durability::Never,
            ..LogConfig::default()
        })
}

#[derive(Debug, Clone, PartialEq)]
struct ModelRecord {
    offset: u64,
    timestamp_us: i64,
    value: Vec<u8>,
}

fn run(config: &LogConfig, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let open = || {
        PartitionLog::open_with(dir.path(), config.clone(), Arc::new(StdIo), clock.clone()).unwrap()
    };
    let mut log = open();
    let mut model: Vec<ModelRecord> = Vec::new();
    let mut next = 0u64;
    let mut start = 0u64;
    let mut last_batch_base = 0u64;
    let mut purged = false;
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append(records) => {
                let mut builder = BatchBuilder::new();
                let values: Vec<Vec<u8>> = records
                    .iter()
                    .enumerate()
                    .map(|(i, (len, _))| {
                        let mut v = format!("{step}/{i}:").into_bytes();
                        v.resize(v.len() + len, b'x');
                        v
                    })
                    .collect();
                for (v, (_, delta)) in values.iter().zip(&records) {
                    builder
                        .push(NewRecord::value(v).timestamp_delta_us(*delta))
                        .unwrap();
                }
                let appended = log.append(&builder.finish().unwrap()).unwrap();
                prop_assert_eq!(appended.base_offset, next);
                last_batch_base = next;
                for (v, (_, delta)) in values.into_iter().zip(&records) {
                    model.push(ModelRecord {
                        offset: next,
                        timestamp_us: appended.timestamp_us + *delta as i64,
                        value: v,
                    });
                    next += 1;
                }
            }
            Op::Read { at, max_bytes } => {
                let from = start + ((next - start) as f64 * at) as u64;
                let read = log.read(from, max_bytes).unwrap();
                prop_assert_eq!(read.log_end, next);
                prop_assert_eq!(read.log_start, start);
                let got: Vec<ModelRecord> = read
                    .batches()
                    .flat_map(|b| {
                        let b = b.unwrap();
                        b.records()
                            .map(|r| ModelRecord {
                                offset: r.offset,
                                timestamp_us: r.timestamp_us,
                                value: r.value.to_vec(),
                            })
                            .collect::<Vec<_>>()
                    })
                    .filter(|r| r.offset >= from)
                    .collect();
                let want: Vec<ModelRecord> = model
                    .iter()
                    .filter(|r| r.offset >= from)
                    .take(got.len())
                    .cloned()
                    .collect();
                prop_assert_eq!(&got, &want);
                if from < next {
                    prop_assert!(!got.is_empty(), "a read before the end returns records");
                    prop_assert_eq!(read.next_offset, got.last().unwrap().offset + 1);
                } else {
                    prop_assert!(read.bytes.is_empty());
                }
                if start > 0 {
                    let below = log.read(start - 1, max_bytes);
                    let is_before_start =
                        matches!(below, Err(StorageError::OffsetBeforeStart { .. }));
                    prop_assert!(is_before_start, "{:?}", below);
                }
            }
            Op::Lookup { at } => {
                let (lo, hi) = match (model.first(), model.last()) {
                    (Some(f), Some(l)) => (f.timestamp_us, l.timestamp_us + 10_000),
                    _ => (0, 10),
                };
                let ts = lo + ((hi - lo) as f64 * at) as i64;
                let want = model
                    .iter()
                    .find(|r| r.timestamp_us >= ts)
                    .map(|r| r.offset);
                prop_assert_eq!(log.offset_for_timestamp(ts).unwrap(), want, "ts {}", ts);
            }
            Op::Advance(us) => clock.advance_us(us),
            Op::Reopen => {
                log.close().unwrap();
                drop(log);
                log = open();
                prop_assert_eq!(log.next_offset(), next);
                prop_assert_eq!(log.log_start(), start);
            }
            Op::Retention => {
                let outcome = log.apply_retention().unwrap();
                prop_assert!(outcome.log_start >= start);
                prop_assert!(
                    outcome.log_start <= last_batch_base.max(start),
                    "the active segment stays"
                );
                start = outcome.log_start;
                model.retain(|r| r.offset >= start);
                // (Segments wholly below a purged start go whatever the limits.)
                if let Some(max) = config.retention_bytes
                    && outcome.segments_deleted > 0
                    && config.retention_age.is_none()
                    && !purged
                {
                    prop_assert!(log.size_bytes() >= max, "bytes retention keeps the limit");
                }
            }
            Op::Purge(at) => {
                let to = start + ((next - start) as f64 * at) as u64;
                match log.purge_before(to) {
                    Ok(new_start) => {
                        prop_assert!(to <= next);
                        purged |= to > start;
                        prop_assert_eq!(new_start, start.max(to));
                        start = new_start;
                        model.retain(|r| r.offset >= start);
                        prop_assert_eq!(log.log_start(), start);
                    }
                    Err(StorageError::OffsetBeyondEnd { next_offset, .. }) => {
                        prop_assert!(to > next);
                        prop_assert_eq!(next_offset, next);
                        prop_assert_eq!(log.log_start(), start, "a refused purge changes nothing");
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("purge to {to}: {e}"))),
                }
                // Every segment left holds a record at or after the start, but the
                // active one (which may be empty, or wholly below the start).
                let (segments, read) = (log.segment_count(), log.read(start, 1).unwrap());
                prop_assert!(segments >= 1);
                if start < next {
                    let first = read.batches().next().unwrap().unwrap();
                    prop_assert!(first.base_offset() <= start && first.next_offset() > start);
                }
            }
        }
    }
    Ok(())
}

#[test]
fn log_matches_model() {
    let seed: u64 = std::env::var("RILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let cases = std::env::var("RILL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let result = runner.run(
        &(config(), prop::collection::vec(op(), 1..120)),
        |(config, ops)| run(&config, ops),
    );
    if let Err(e) = result {
        panic!("model test failed; replay with RILL_SEED={seed}\n{e}");
    }
}
