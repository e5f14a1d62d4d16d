//! A replica's log operations (docs/FORMAT.md §4, "Replicated appends and truncation"):
//! stamped appends that keep the leader's offsets and timestamps, and truncation of a
//! tail back to a batch boundary — against a model, across reopens, and at every crash
//! point of a truncation on the simulated disk (a killed process, a power loss that
//! kept only what was synced, and torn power losses).

use std::path::Path;
use std::sync::Arc;

use rill_format::{BatchView, stamp};
use rill_storage::sim::{SimIo, SimRng};
use rill_storage::{Durability, Io, LogConfig, ManualClock, PartitionLog, StorageError};

mod common;

use common::batch;

const DIR: &str = "/data/s/t/0";

fn config(durability: Durability) -> LogConfig {
    LogConfig {
        durability,
        segment_bytes_max: 2048,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn sim_disk(seed: u64) -> SimIo {
    let disk = SimIo::new(seed);
    disk.create_dir_all(Path::new(DIR)).unwrap();
    for dir in Path::new(DIR).ancestors().skip(1) {
        disk.sync_dir(dir).unwrap();
    }
    disk
}

fn open(disk: &SimIo, durability: Durability) -> Result<PartitionLog, StorageError> {
    PartitionLog::open_with(
        DIR,
        config(durability),
        Arc::new(disk.clone()),
        Arc::new(ManualClock::new(1_000_000)),
    )
}

/// Every stored batch from the log start: (base offset, bytes).
fn batches(log: &PartitionLog) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = log.log_start();
    loop {
        let read = log.read(at, 1 << 20).unwrap();
        if read.bytes.is_empty() {
            return out;
        }
        for b in read.batches() {
            let b: BatchView<'_> = b.unwrap();
            out.push((b.base_offset(), b.as_bytes().to_vec()));
        }
        at = read.next_offset;
    }
}

/// Appends `n` batches of 1–4 records each; returns their base offsets.
fn fill(log: &PartitionLog, n: usize, rng: &mut SimRng) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let records = rng.between(1, 4) as usize;
            let b = batch(&format!("b{i}"), records, rng.between(20, 200) as usize);
            log.append(&b).unwrap().base_offset
        })
        .collect()
}

#[test]
fn truncation_cuts_at_any_batch_boundary_and_appends_continue_there() {
    for durability in [Durability::Always, Durability::Never] {
        let mut rng = SimRng::new(7);
        let disk = sim_disk(0);
        let log = open(&disk, durability).unwrap();
        let bases = fill(&log, 40, &mut rng);
        assert!(log.segment_count() > 3, "several segments");
        let before = batches(&log);
        // Every boundary from the end back to the start, one cut after another.
        for &cut in bases.iter().rev().step_by(3) {
            log.truncate_from(cut).unwrap();
            assert_eq!(log.next_offset(), cut);
            let expected: Vec<_> = before.iter().filter(|(b, _)| *b < cut).cloned().collect();
            assert_eq!(batches(&log), expected, "cut at {cut}");
        }
        // Appends continue at the cut, and a reopen finds exactly that.
        let end = log.next_offset();
        let appended = log.append(&batch("after", 2, 50)).unwrap();
        assert_eq!(appended.base_offset, end);
        let kept = batches(&log);
        log.close().unwrap();
        drop(log);
        let log = open(&disk.process_crash(), durability).unwrap();
        assert_eq!(batches(&log), kept);
        assert!(log.damage().is_empty());
    }
}

#[test]
fn truncation_refuses_points_that_are_not_batch_boundaries_or_outside_the_log() {
    let disk = sim_disk(0);
    let log = open(&disk, Durability::Always).unwrap();
    let a = log.append(&batch("a", 3, 10)).unwrap();
    let b = log.append(&batch("b", 3, 10)).unwrap();
    assert!(matches!(
        log.truncate_from(a.base_offset + 1),
        Err(StorageError::NotBatchBoundary { offset: 1 })
    ));
    assert!(matches!(
        log.truncate_from(b.last_offset + 2),
        Err(StorageError::OffsetBeyondEnd { .. })
    ));
    // At the end: nothing to do.
    log.truncate_from(b.last_offset + 1).unwrap();
    assert_eq!(log.next_offset(), 6);
    log.truncate_from(b.base_offset).unwrap();
    assert_eq!(log.next_offset(), 3);
    log.truncate_from(0).unwrap();
    assert_eq!(log.next_offset(), 0);
    assert!(batches(&log).is_empty());
    log.close().unwrap();
    assert!(matches!(log.truncate_from(0), Err(StorageError::Closed)));
}

/// A batch as a leader stamped it.
fn stamped(tag: &str, base: u64, ts: i64) -> Vec<u8> {
    let mut b = batch(tag, 2, 30);
    stamp(&mut b, base, ts).unwrap();
    b
}

#[test]
fn a_stamped_append_keeps_the_leader_s_bytes_and_must_continue_the_log() {
    let disk = sim_disk(0);
    let log = open(&disk, Durability::Always).unwrap();
    let first = stamped("x", 0, 5_000_000);
    let (done, ticket) = log.append_stamped(&first).unwrap();
    log.wait_durable(ticket).unwrap();
    assert_eq!((done.base_offset, done.timestamp_us), (0, 5_000_000));
    assert_eq!(batches(&log), vec![(0, first.clone())]);
    // Not at the next offset, or going back in time: refused, nothing written.
    for bad in [stamped("y", 3, 6_000_000), stamped("y", 2, 4_000_000)] {
        assert!(matches!(
            log.append_stamped(&bad),
            Err(StorageError::NotContiguous { .. })
        ));
    }
    let second = stamped("z", 2, 5_000_000);
    let (_, ticket) = log.append_stamped(&second).unwrap();
    log.wait_durable(ticket).unwrap();
    // A follower truncates the second batch and takes another leader's instead.
    log.truncate_from(2).unwrap();
    let other = stamped("w", 2, 7_000_000);
    let (_, ticket) = log.append_stamped(&other).unwrap();
    log.wait_durable(ticket).unwrap();
    assert_eq!(batches(&log), vec![(0, first), (2, other)]);
    // The time index agrees with the stamps.
    assert_eq!(log.offset_for_timestamp(6_000_000).unwrap(), Some(2));
}

/// Random appends, stamped appends, truncations and reopens against a model of the
/// batches the log must hold.
#[test]
fn appends_truncations_and_reopens_agree_with_a_model() {
    for seed in 0..40 {
        let mut rng = SimRng::new(seed);
        let durability = *rng.pick(&[Durability::Always, Durability::Never]);
        let mut disk = sim_disk(seed);
        let mut log = open(&disk, durability).unwrap();
        let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut ts = 2_000_000;
        for step in 0..120 {
            let next = model.last().map_or(0, |(b, bytes)| {
                b + u64::from(BatchView::parse(bytes).unwrap().record_count())
            });
            match rng.below(10) {
                0..=4 => {
                    let b = batch(&format!("{seed}-{step}"), rng.between(1, 3) as usize, 60);
                    let done = log.append(&b).unwrap();
                    assert_eq!(done.base_offset, next);
                    let stored = batches(&log).pop().unwrap();
                    model.push(stored);
                }
                5..=6 => {
                    ts += 1_000;
                    let b = stamped(&format!("{seed}-{step}"), next, ts.max(3_000_000));
                    let (_, ticket) = log.append_stamped(&b).unwrap();
                    log.wait_durable(ticket).unwrap();
                    model.push((next, b));
                }
                7..=8 if !model.is_empty() => {
                    let keep = rng.below(model.len() as u64) as usize;
                    let cut = model[keep].0;
                    log.truncate_from(cut).unwrap();
                    model.truncate(keep);
                }
                _ => {
                    log.close().unwrap();
                    drop(log);
                    disk = disk.process_crash();
                    log = open(&disk, durability).unwrap();
                }
            }
            assert_eq!(batches(&log), model, "seed {seed} step {step}");
        }
    }
}

/// Every crash point of a truncation, each restart kind: the log is the old one or a
/// prefix of it at least as long as the cut, undamaged, and a retried truncation ends
/// it at the cut, durably.
#[test]
fn a_crash_at_any_point_of_a_truncation_leaves_a_prefix_that_a_retry_finishes() {
    let mut checked = 0;
    for (seed, durability) in (0..6).zip([Durability::Always, Durability::Never].iter().cycle()) {
        let durability = *durability;
        // Every crash point of the same truncation, until it finishes before its crash.
        for crash_at in 0.. {
            assert!(crash_at < 1000, "a truncation takes fewer operations");
            let mut rng = SimRng::new(seed);
            let disk = sim_disk(crash_at);
            let log = open(&disk, durability).unwrap();
            let bases = fill(&log, 30, &mut rng);
            // The old log durable (under `never` sealed segments sync in the
            // background: a close waits for them), so what a crash takes is the
            // truncation's doing.
            log.close().unwrap();
            drop(log);
            let log = open(&disk, durability).unwrap();
            let old = batches(&log);
            let cut = bases[rng.between(1, bases.len() as u64 - 2) as usize];
            disk.crash_after(crash_at);
            let finished = log.truncate_from(cut).is_ok();
            drop(log);
            let restarts = [
                ("a killed process", disk.process_crash()),
                (
                    "a power loss of what was not synced",
                    disk.power_loss_durable(),
                ),
                (
                    "a torn power loss",
                    disk.power_loss(&mut SimRng::new(crash_at)),
                ),
            ];
            for (how, restarted) in restarts {
                let what = format!("seed {seed}, {durability:?}, crash at {crash_at}, {how}");
                let log = open(&restarted, durability).unwrap();
                assert!(log.damage().is_empty(), "{what}: {:?}", log.damage());
                let found = batches(&log);
                assert!(
                    found.len() <= old.len() && found[..] == old[..found.len()],
                    "{what}: not a prefix of the old log"
                );
                assert!(log.next_offset() >= cut, "{what}: cut below the point");
                if finished {
                    assert_eq!(log.next_offset(), cut, "{what}: a finished cut came back");
                }
                log.truncate_from(cut).unwrap();
                drop(log);
                let log = open(&restarted.power_loss_durable(), durability).unwrap();
                let expected: Vec<_> = old.iter().filter(|(b, _)| *b < cut).cloned().collect();
                let after = batches(&log);
                assert!(
                    after == expected,
                    "{what}: after the retry at {cut}: {:?}",
                    after.iter().map(|(b, _)| *b).collect::<Vec<_>>()
                );
                checked += 1;
            }
            if finished {
                break;
            }
        }
    }
    eprintln!("{checked} restarts checked");
    assert!(
        checked > 2 * 3 * 10,
        "the truncation had crash points to test"
    );
}
