//! Damage recovery must not cut (docs/FORMAT.md, "What recovery does with each kind of
//! damage"): each row of that table, plus damage a read finds after open, acceptance
//! that survives a reopen, and the bound on open files.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use rill_storage::{Durability, LogConfig, PartitionLog, StorageError};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 4096,
        index_interval_bytes: 256,
        durability: Durability::Always,
        ..LogConfig::default()
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

/// A closed log of `batches` batches of 3 records (about 240 bytes each).
fn written(dir: &Path, batches: usize) -> u64 {
    let log = PartitionLog::open(dir, config()).unwrap();
    for i in 0..batches {
        log.append(&batch(&format!("b{i}"), 3, 60)).unwrap();
    }
    log.close().unwrap();
    log.next_offset()
}

/// (position, length) of every batch of a segment file, from its headers.
fn batches_of(path: &Path) -> Vec<(usize, usize)> {
    let bytes = fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at + 64 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        out.push((at, len));
        at += len;
    }
    out
}

/// Damages the header of batch `i` of a segment (its stored base offset).
fn break_header(path: &Path, i: usize) {
    let (at, _) = batches_of(path)[i];
    flip(path, at + 8);
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x20;
    fs::write(path, bytes).unwrap();
}

/// Every readable offset, stepping over damaged ranges as a consumer told of them.
fn readable(log: &PartitionLog) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = log.log_start();
    while at < log.next_offset() {
        match log.read(at, 64 * 1024) {
            Ok(read) => {
                for b in read.batches() {
                    for r in b.unwrap().records() {
                        if r.offset >= at {
                            out.push(r.offset);
                        }
                    }
                }
                at = read.next_offset;
            }
            Err(StorageError::DataLoss { to: Some(to), .. }) => at = to,
            Err(e) => panic!("{e}"),
        }
    }
    out
}

#[test]
fn an_incomplete_last_batch_is_cut_even_without_a_recovery_point() {
    // What a kill -9 between the two writes of an append leaves.
    let dir = tempfile::tempdir().unwrap();
    let next = written(dir.path(), 5);
    fs::remove_file(dir.path().join("recovery-point")).unwrap();
    let path = &segments(dir.path())[0];
    let len = fs::metadata(path).unwrap().len();
    let mut bytes = fs::read(path).unwrap();
    // The first 100 bytes of a batch again: a header whose records never came.
    let head = bytes[..100].to_vec();
    bytes.extend_from_slice(&head);
    fs::write(path, &bytes).unwrap();
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.damage().is_empty(), "{:?}", log.damage());
    assert_eq!(fs::metadata(path).unwrap().len(), len);
    assert_eq!(log.append(&batch("x", 1, 1)).unwrap().base_offset, next);
    // The recovery point is back, durable.
    assert!(dir.path().join("recovery-point").exists());
}

#[test]
fn an_invalid_complete_batch_without_a_recovery_point_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let next = written(dir.path(), 5);
    fs::remove_file(dir.path().join("recovery-point")).unwrap();
    let path = segments(dir.path())[0].clone();
    let len = fs::metadata(&path).unwrap().len() as usize;
    flip(&path, len - 5); // inside the last batch's records
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len() as usize, len, "not cut");
    let damage = log.damage();
    assert_eq!(damage.len(), 1);
    assert_eq!(damage[0].from_offset, next - 3);
    assert!(log.failure().is_some());
    assert_eq!(readable(&log).len() as u64, next - 3);
    // The end is not known; accepting resumes past every offset it may have used.
    let accepted = log.accept_damage(next + 10).unwrap();
    assert_eq!(accepted[0].to_offset, Some(next + 10));
    assert_eq!(
        log.append(&batch("x", 1, 1)).unwrap().base_offset,
        next + 10
    );
    drop(log);
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.failure().is_none(), "{:?}", log.failure());
    assert_eq!(log.next_offset(), next + 11);
    assert!(matches!(
        log.read(next - 3, 1 << 20),
        Err(StorageError::DataLoss { from, to: Some(to), .. }) if from == next - 3 && to == next + 10
    ));
}

#[test]
fn damage_below_the_recovery_point_of_the_last_segment_is_quarantined_by_reads() {
    let dir = tempfile::tempdir().unwrap();
    let next = written(dir.path(), 5);
    let path = segments(dir.path())[0].clone();
    let len = fs::metadata(&path).unwrap().len();
    // The second batch is synced (the recovery point is past it): recovery does not
    // look below the point, and the read that meets it quarantines it, never cuts.
    break_header(&path, 1);
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.damage().is_empty());
    assert!(matches!(
        log.read(3, 1 << 20),
        Err(StorageError::DataLoss {
            from: 3,
            to: Some(6),
            ..
        })
    ));
    assert_eq!(log.next_offset(), next);
    assert_eq!(fs::metadata(&path).unwrap().len(), len);
    assert_eq!(readable(&log).len() as u64, next - 3);
    assert!(matches!(
        log.append(&batch("x", 1, 1)),
        Err(StorageError::Damaged { .. })
    ));
}

#[test]
fn segments_missing_at_the_end_are_a_damaged_range() {
    let dir = tempfile::tempdir().unwrap();
    let next = written(dir.path(), 60);
    let logs = segments(dir.path());
    assert!(logs.len() >= 3);
    let last = logs.last().unwrap();
    let last_base: u64 = last.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    fs::remove_file(last).unwrap();
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    let damage = log.damage();
    assert_eq!(damage.len(), 1, "{damage:?}");
    assert_eq!(
        (damage[0].from_offset, damage[0].to_offset),
        (last_base, Some(next))
    );
    assert!(matches!(
        log.append(&batch("x", 1, 1)),
        Err(StorageError::Damaged { .. })
    ));
    // Accepting resumes at the old end: no offset is used twice.
    log.accept_damage(0).unwrap();
    assert_eq!(log.append(&batch("x", 1, 1)).unwrap().base_offset, next);
    drop(log);
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.failure().is_none(), "{:?}", log.failure());
}

#[test]
fn a_lost_accepted_damage_file_fails_the_partition_again() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 60);
    let logs = segments(dir.path());
    // The last batch of a durable segment: after its last index entry, so recovery's
    // chain check meets it.
    let last = batches_of(&logs[1]).len() - 1;
    break_header(&logs[1], last);
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert_eq!(log.damage().len(), 1, "{:?}", log.damage());
    log.accept_damage(0).unwrap();
    assert!(log.failure().is_none());
    drop(log);
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.failure().is_none(), "{:?}", log.failure());
    drop(log);
    fs::remove_file(dir.path().join("accepted-damage")).unwrap();
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.failure().is_some(), "damage is never hidden");
}

#[test]
fn damage_a_read_finds_is_recorded_and_its_acceptance_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let next = written(dir.path(), 60);
    let logs = segments(dir.path());
    // A header early in a durable segment: recovery checks a durable segment only from
    // its last index entry, so only a read finds this.
    break_header(&logs[0], 0);
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.damage().is_empty(), "not seen by recovery");
    let err = log.read(0, 1 << 20).unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::DataLoss {
                from: 0,
                to: Some(3),
                ..
            }
        ),
        "{err}"
    );
    assert!(log.failure().is_some());
    assert_eq!(readable(&log).len() as u64, next - 3);
    log.accept_damage(0).unwrap();
    log.append(&batch("x", 1, 1)).unwrap();
    drop(log);
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(log.failure().is_none(), "{:?}", log.failure());
    assert!(matches!(
        log.read(0, 1 << 20),
        Err(StorageError::DataLoss {
            from: 0,
            to: Some(3),
            ..
        })
    ));
    assert_eq!(readable(&log).len() as u64, next - 2);
}

#[cfg(target_os = "linux")]
#[test]
fn open_files_stay_bounded_whatever_the_number_of_segments() {
    fn open_fds() -> usize {
        fs::read_dir("/proc/self/fd").unwrap().count()
    }
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes_max: 1024,
        durability: Durability::Never,
        ..LogConfig::default()
    };
    {
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        for i in 0..300 {
            log.append(&batch(&format!("b{i}"), 3, 100)).unwrap();
        }
        log.close().unwrap();
    }
    assert!(segments(dir.path()).len() >= 100);
    let before = open_fds();
    let env = rill_storage::LogEnv::default()
        .with_files(std::sync::Arc::new(rill_storage::FileCache::new(8)));
    let log = PartitionLog::open_in(dir.path(), config, &env).unwrap();
    // Every segment was opened and scanned; read them all again.
    assert_eq!(readable(&log).len(), 900);
    let held = open_fds() - before;
    // The active segment's three files, the cached sealed ones, and a few transient.
    assert!(
        held <= 3 + 8 + 2,
        "{held} files open for {} segments",
        log.segment_count()
    );
}

/// Found by the segment_recovery fuzz target: damage at the end of the last segment
/// (a batch whose records are damaged, then garbage) was accepted; on the next open the
/// check from the old recovery point, which falls inside that damage, found only its
/// tail and reported it as new damage.
#[test]
fn accepted_damage_at_the_end_is_not_found_again_inside_itself() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        durability: Durability::Never,
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    {
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        for i in 0..6 {
            log.append(&batch(&format!("b{i}"), 2, 20)).unwrap();
        }
        log.close().unwrap();
    }
    let path = segments(dir.path())[0].clone();
    let batches = batches_of(&path);
    let (last, len) = *batches.last().unwrap();
    flip(&path, last + len - 3); // the last batch's records
    // A broken header and no index: the recovery point cannot be checked, so the first
    // open validates the whole segment and quarantines the last batch to the end.
    break_header(&path, 1);
    fs::remove_file(path.with_extension("index")).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(&[7u8; 22]);
    fs::write(&path, bytes).unwrap();
    let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
    assert!(log.failure().is_some());
    let old_point = fs::read(dir.path().join("recovery-point")).unwrap();
    log.accept_damage(0).unwrap();
    let appended = log.append(&batch("after", 1, 1)).unwrap();
    drop(log);
    // The roll's new recovery point was not written (its segment's background seal was
    // still running; or a power loss took the write back): the old one names the end of
    // the damaged segment, inside the accepted damage.
    fs::write(dir.path().join("recovery-point"), old_point).unwrap();
    let log = PartitionLog::open(dir.path(), config).unwrap();
    assert!(log.failure().is_none(), "{:?}", log.failure());
    assert_eq!(log.next_offset(), appended.base_offset + 1);
}

/// Each offset read on its own (so reads start from every index entry) returns the
/// batch holding it; everything reads back, with no damage and no failure.
fn every_offset_reads_its_batch(log: &PartitionLog, next: u64) {
    for from in 0..next {
        let read = log
            .read(from, 1)
            .unwrap_or_else(|e| panic!("read at {from}: {e}"));
        let batch = read.batches().next().expect("a batch").expect("valid");
        assert!(
            batch.records().any(|r| r.offset == from),
            "offset {from} read the batch at {}",
            batch.base_offset()
        );
    }
    assert_eq!(readable(log), (0..next).collect::<Vec<_>>());
    assert!(log.damage().is_empty(), "{:?}", log.damage());
    assert_eq!(log.failure(), None);
}

/// An index entry naming an offset one below that of the batch it points to (both index
/// files agree, so recovery keeps it): a read of that offset used to start at the entry
/// and return the next batch, skipping the records of the one that holds it.
#[test]
fn an_index_entry_naming_the_wrong_offset_does_not_skip_records() {
    let dir = tempfile::tempdir().unwrap();
    let next = written(dir.path(), 12);
    let seg = &segments(dir.path())[0];
    let index = seg.with_extension("index");
    let timeindex = seg.with_extension("timeindex");
    let mut entries = fs::read(&index).unwrap();
    let mut times = fs::read(&timeindex).unwrap();
    assert!(entries.len() >= 16, "the test needs a second index entry");
    // The second entry's relative offset: bytes 8..12 of the index, 20..24 of the
    // time index.
    let rel = u32::from_le_bytes(entries[8..12].try_into().unwrap());
    assert!(rel > 1, "the entry stays above the first one");
    let wrong = (rel - 1).to_le_bytes();
    entries[8..12].copy_from_slice(&wrong);
    times[20..24].copy_from_slice(&wrong);
    fs::write(&index, entries).unwrap();
    fs::write(&timeindex, times).unwrap();
    every_offset_reads_its_batch(&PartitionLog::open(dir.path(), config()).unwrap(), next);
}

/// An index entry moved a few bytes into its batch (well formed, increasing, inside the
/// file, so recovery keeps it): reads that start from it used to record a damaged range
/// in intact data and fail with `DATA_LOSS`. An index entry is a hint; the data is fine.
#[test]
fn an_index_entry_pointing_inside_a_batch_does_not_make_intact_data_lost() {
    let dir = tempfile::tempdir().unwrap();
    let next = written(dir.path(), 12);
    let seg = &segments(dir.path())[0];
    let index = seg.with_extension("index");
    let mut entries = fs::read(&index).unwrap();
    assert!(entries.len() >= 16, "the test needs a second index entry");
    // The second entry's position (bytes 12..16), 3 bytes further.
    let pos = u32::from_le_bytes(entries[12..16].try_into().unwrap()) + 3;
    entries[12..16].copy_from_slice(&pos.to_le_bytes());
    fs::write(&index, entries).unwrap();
    every_offset_reads_its_batch(&PartitionLog::open(dir.path(), config()).unwrap(), next);
}
