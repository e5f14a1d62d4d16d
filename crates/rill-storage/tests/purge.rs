//! A purge (docs/FORMAT.md §4, "Purge: a logical log start"): the records below an
//! offset gone for readers exactly, inside a segment or a batch; whole segments below
//! it deleted; the start kept across reopens and at every crash point of a purge on the
//! simulated disk (a killed process, a power loss of what was not synced, torn power
//! losses); a damaged or stray `log-start` file; damage below the start no longer
//! failing the log.

use std::path::Path;
use std::sync::Arc;

use rill_format::BatchView;
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

/// Appends `n` batches of 3 records each (offsets `3i..3i+3`), 300 bytes a record.
fn fill(log: &PartitionLog, n: usize) {
    for i in 0..n {
        log.append(&batch(&format!("b{i}"), 3, 300)).unwrap();
    }
}

/// The offsets of every record a reader gets from the start on.
fn offsets(log: &PartitionLog) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = log.log_start();
    loop {
        let read = log.read(at, 1 << 20).unwrap();
        if read.bytes.is_empty() {
            return out;
        }
        for b in read.batches() {
            let b: BatchView<'_> = b.unwrap();
            out.extend(b.records().map(|r| r.offset).filter(|&o| o >= at));
        }
        at = read.next_offset;
    }
}

#[test]
fn a_purge_hides_exactly_the_records_below_it_and_deletes_whole_segments() {
    let disk = sim_disk(1);
    let log = open(&disk, Durability::Always).unwrap();
    fill(&log, 12); // 36 records, about 1 KiB a batch: several segments
    let segments = log.segment_count();
    assert!(segments >= 4, "{segments} segments");
    // Inside a batch: 3 * 7 + 1 = 22.
    assert_eq!(log.purge_before(22).unwrap(), 22);
    assert_eq!(log.log_start(), 22);
    assert!(
        log.segment_count() < segments,
        "whole segments below 22 are deleted"
    );
    match log.read(21, 1) {
        Err(StorageError::OffsetBeforeStart {
            requested: 21,
            log_start: 22,
        }) => {}
        other => panic!("a read below the start: {other:?}"),
    }
    // A read at the start returns its whole batch; the records below are not counted.
    let read = log.read(22, 1).unwrap();
    assert_eq!(read.log_start, 22);
    let first = read.batches().next().unwrap().unwrap();
    assert_eq!((first.base_offset(), first.next_offset()), (21, 24));
    assert_eq!(offsets(&log), (22..36).collect::<Vec<_>>());
    // A time before every record answers the start, not a purged record.
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some(22));
    // Below the start: nothing; past the end: refused.
    assert_eq!(log.purge_before(10).unwrap(), 22);
    assert!(matches!(
        log.purge_before(37),
        Err(StorageError::OffsetBeyondEnd {
            requested: 37,
            next_offset: 36
        })
    ));
    // The end: nothing left to read, appends go on.
    assert_eq!(log.purge_before(36).unwrap(), 36);
    assert!(offsets(&log).is_empty());
    assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    assert_eq!(log.append(&batch("after", 2, 10)).unwrap().base_offset, 36);
    assert_eq!(offsets(&log), [36, 37]);
    log.close().unwrap();
    drop(log);
    let log = open(&disk.power_loss_durable(), Durability::Always).unwrap();
    assert_eq!(log.log_start(), 36);
    assert_eq!(offsets(&log), [36, 37]);
}

#[test]
fn a_closed_or_poisoned_log_refuses_to_purge() {
    let disk = sim_disk(2);
    let log = open(&disk, Durability::Always).unwrap();
    fill(&log, 2);
    log.close().unwrap();
    assert!(matches!(log.purge_before(1), Err(StorageError::Closed)));
    drop(log);
    let log = open(&disk, Durability::Always).unwrap();
    // The disk dies under the next append: the log is poisoned.
    disk.crash_after(0);
    assert!(log.append(&batch("x", 1, 10)).is_err());
    assert!(matches!(
        log.purge_before(1),
        Err(StorageError::Poisoned { .. })
    ));
}

/// At every crash point of a purge the restarted log starts at the old start or the
/// purged one (at the purged one once the purge returned), serves every record from
/// there, holds no damage, and a retry finishes it; retention then deletes the
/// segments a crash left below the start.
#[test]
fn a_crash_at_any_point_of_a_purge_leaves_the_old_start_or_the_new_one() {
    let mut checked = 0;
    for (seed, durability) in (0..4).zip([Durability::Always, Durability::Never].iter().cycle()) {
        let durability = *durability;
        for crash_at in 0.. {
            assert!(crash_at < 1000, "a purge takes fewer operations");
            let mut rng = SimRng::new(seed);
            let disk = sim_disk(crash_at);
            let log = open(&disk, durability).unwrap();
            fill(&log, 16);
            // The old log durable (under `never` sealed segments sync in the background:
            // a close waits for them), so what a crash takes is the purge's doing; then
            // a tail written but not synced under `never`, which the purge syncs first.
            log.close().unwrap();
            drop(log);
            let log = open(&disk, durability).unwrap();
            log.append(&batch("tail", 1, 10)).unwrap();
            let to = rng.between(1, 49);
            disk.crash_after(crash_at);
            let finished = log.purge_before(to).is_ok();
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
                let what = format!(
                    "seed {seed}, {durability:?}, purge to {to}, crash at {crash_at}, {how}"
                );
                let log = open(&restarted, durability).unwrap();
                assert!(log.damage().is_empty(), "{what}: {:?}", log.damage());
                let start = log.log_start();
                assert!(start == 0 || start == to, "{what}: starts at {start}");
                if finished {
                    assert_eq!(start, to, "{what}: an acknowledged purge came back");
                    assert_eq!(log.next_offset(), 49, "{what}: the log was synced first");
                }
                let end = log.next_offset();
                assert_eq!(offsets(&log), (start..end).collect::<Vec<_>>(), "{what}");
                if end >= to {
                    assert_eq!(log.purge_before(to).unwrap(), to, "{what}");
                    log.apply_retention().unwrap();
                    let first = log.read(to, 1).unwrap();
                    if to < end {
                        let b = first.batches().next().unwrap().unwrap();
                        assert!(b.base_offset() <= to && b.next_offset() > to, "{what}");
                    }
                    drop(log);
                    let log = open(&restarted.power_loss_durable(), durability).unwrap();
                    assert_eq!(log.log_start(), to, "{what}: after the retry");
                    assert_eq!(offsets(&log), (to..end).collect::<Vec<_>>(), "{what}");
                }
                checked += 1;
            }
            if finished {
                break;
            }
        }
    }
    eprintln!("{checked} restarts checked");
    assert!(checked > 4 * 3 * 5, "the purge had crash points to test");
}

#[test]
fn a_damaged_log_start_file_is_ignored_and_a_stray_temporary_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    {
        let log = PartitionLog::open(path, config(Durability::Always)).unwrap();
        fill(&log, 4);
        log.purge_before(5).unwrap();
        log.close().unwrap();
    }
    std::fs::write(path.join("log-start.tmp"), b"half").unwrap();
    let log = PartitionLog::open(path, config(Durability::Always)).unwrap();
    assert_eq!(log.log_start(), 5);
    assert!(!path.join("log-start.tmp").exists());
    drop(log);
    // A flipped byte: the file is ignored, and the records it hid are served again.
    let mut bytes = std::fs::read(path.join("log-start")).unwrap();
    bytes[6] ^= 1;
    std::fs::write(path.join("log-start"), bytes).unwrap();
    let log = PartitionLog::open(path, config(Durability::Always)).unwrap();
    assert_eq!(log.log_start(), 0);
    assert_eq!(offsets(&log), (0..12).collect::<Vec<_>>());
}

#[test]
fn damage_below_the_start_no_longer_fails_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    {
        let log = PartitionLog::open(path, config(Durability::Always)).unwrap();
        fill(&log, 12);
        log.close().unwrap();
    }
    // Damage in the first (sealed) segment: the log refuses appends.
    let first = path.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[8] ^= 0xff; // inside the first batch's header
    std::fs::write(&first, bytes).unwrap();
    let log = PartitionLog::open(path, config(Durability::Always)).unwrap();
    // A read finds it (an open checks only a sealed segment's last headers).
    assert!(matches!(log.read(0, 1), Err(StorageError::DataLoss { .. })));
    let damage = log.damage();
    assert_eq!(damage.len(), 1, "{damage:?}");
    let to = damage[0]
        .to_offset
        .expect("damage in a sealed segment has an end");
    assert!(log.failure().is_some());
    assert!(log.append(&batch("refused", 1, 10)).is_err());
    // Purged past it: no reader can reach it, and appends go on.
    log.purge_before(to).unwrap();
    assert!(log.damage().is_empty());
    assert!(log.failure().is_none());
    log.append(&batch("taken", 1, 10)).unwrap();
    log.close().unwrap();
    drop(log);
    let log = PartitionLog::open(path, config(Durability::Always)).unwrap();
    assert_eq!(log.log_start(), to);
    // Every record from the start reads, and the damage below it stays out of reach.
    assert_eq!(offsets(&log).first(), Some(&to));
    assert!(log.damage().is_empty(), "{:?}", log.damage());
    assert!(log.failure().is_none());
}
