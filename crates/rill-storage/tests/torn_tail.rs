//! Torn and corrupt tails: cut the last batch of the active segment at every byte, and
//! flip bytes inside it; reopening recovers to the last complete, valid batch and
//! appends continue at the right offset.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use rill_storage::{LogConfig, PartitionLog, StorageError};

const SEGMENT: &str = "00000000000000000000.log";

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1 << 20,
        // An index entry for nearly every batch, so one points at the torn batch.
        index_interval_bytes: 64,
        ..small_config()
    }
}

/// Writes a pristine log; returns (position of the last batch, its base offset, len).
fn pristine(dir: &Path) -> (u64, u64, u64) {
    let log = PartitionLog::open(dir, config()).unwrap();
    for i in 0..12 {
        log.append(&batch(&format!("b{i}"), 3, 20)).unwrap();
    }
    let before = fs::metadata(dir.join(SEGMENT)).unwrap().len();
    let last = log.append(&batch("last", 4, 30)).unwrap();
    // Dropped without `close`: as after a crash, the recovery point (never synced
    // since open, under `never`) does not cover these batches.
    drop(log);
    let len = fs::metadata(dir.join(SEGMENT)).unwrap().len();
    (before, last.base_offset, len)
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn check_recovered(dir: &Path, last_pos: u64, last_base: u64, what: &str) {
    let log = PartitionLog::open(dir, config()).unwrap();
    assert_eq!(log.next_offset(), last_base, "{what}: next offset");
    assert_eq!(
        fs::metadata(dir.join(SEGMENT)).unwrap().len(),
        last_pos,
        "{what}: truncated to the last valid batch"
    );
    let all = read_all(&log, 0);
    assert_eq!(
        all.len() as u64,
        last_base,
        "{what}: earlier records intact"
    );
    assert!(all.iter().enumerate().all(|(i, (o, _))| *o == i as u64));
    let appended = log.append(&batch("again", 2, 5)).unwrap();
    assert_eq!(appended.base_offset, last_base, "{what}: appends continue");
    drop(log);
    // And the repaired log reopens cleanly with the new batch.
    let log = PartitionLog::open(dir, config()).unwrap();
    assert_eq!(log.next_offset(), last_base + 2, "{what}: after reopen");
    assert_eq!(read_all(&log, 0).len() as u64, last_base + 2);
}

#[test]
fn truncation_at_every_byte_of_the_last_batch_recovers() {
    let src = tempfile::tempdir().unwrap();
    let (last_pos, last_base, len) = pristine(src.path());
    assert!(len - last_pos > 64);
    for cut in last_pos..len {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(src.path(), dir.path());
        let file = fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(SEGMENT))
            .unwrap();
        file.set_len(cut).unwrap();
        drop(file);
        check_recovered(dir.path(), last_pos, last_base, &format!("cut at {cut}"));
    }
}

#[test]
fn a_flipped_byte_anywhere_in_the_last_batch_is_truncated() {
    let src = tempfile::tempdir().unwrap();
    let (last_pos, last_base, len) = pristine(src.path());
    for at in last_pos..len {
        for flip in [0x01u8, 0x80, 0xff] {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(src.path(), dir.path());
            let path = dir.path().join(SEGMENT);
            let mut bytes = fs::read(&path).unwrap();
            bytes[at as usize] ^= flip;
            fs::write(&path, bytes).unwrap();
            check_recovered(
                dir.path(),
                last_pos,
                last_base,
                &format!("flip {flip:#x} at {at}"),
            );
        }
    }
}

#[test]
fn damage_below_the_recovery_point_is_reported_by_reads_not_hidden() {
    let src = tempfile::tempdir().unwrap();
    pristine(src.path());
    // A clean close moves the recovery point to the end: recovery trusts synced data.
    PartitionLog::open(src.path(), config())
        .unwrap()
        .close()
        .unwrap();
    let path = src.path().join(SEGMENT);
    let mut bytes = fs::read(&path).unwrap();
    bytes[100] ^= 0x40; // inside an early, synced batch: bit rot, not a torn write
    fs::write(&path, bytes).unwrap();
    let log = PartitionLog::open(src.path(), config()).unwrap();
    assert!(log.next_offset() > 0);
    // Either the log refuses the damaged header, or the batch fails its CRC where the
    // reader checks it.
    let mut at = 0;
    let mut corrupt = false;
    while at < log.next_offset() && !corrupt {
        match log.read(at, 64) {
            Ok(read) => {
                corrupt = read.batches().any(|b| b.is_err());
                at = read.next_offset;
            }
            Err(StorageError::Corrupt { .. } | StorageError::DataLoss { .. }) => corrupt = true,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(corrupt, "the damaged batch is reported, not served");
}

#[test]
fn garbage_after_the_last_batch_is_truncated() {
    let src = tempfile::tempdir().unwrap();
    let (_, last_base, len) = pristine(src.path());
    for garbage in [vec![0u8; 1], vec![0u8; 100], vec![0xab; 4096]] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(src.path(), dir.path());
        let path = dir.path().join(SEGMENT);
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(&garbage);
        fs::write(&path, bytes).unwrap();
        // The last batch is intact this time: recovery keeps it.
        check_recovered(dir.path(), len, last_base + 4, "garbage tail");
    }
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_is_quarantined_not_cut() {
    // The reproduction of issue 9: without a recovery point, one flipped byte in a
    // sealed segment used to truncate it there and delete every later segment.
    // Recovery now quarantines the damaged batch and keeps everything else.
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
    for i in 0..60 {
        log.append(&batch(&format!("b{i}"), 3, 50)).unwrap();
    }
    assert!(log.segment_count() >= 4);
    log.close().unwrap();
    drop(log);
    fs::remove_file(dir.path().join("recovery-point")).unwrap();
    let mut logs: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let second = &logs[1];
    let mut bytes = fs::read(second).unwrap();
    let flip_at = bytes.len() / 2;
    bytes[flip_at] ^= 0x10;
    fs::write(second, bytes).unwrap();

    let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
    for path in &logs {
        assert!(path.exists(), "{} must not be deleted", path.display());
    }
    assert_eq!(log.segment_count(), logs.len());
    assert_eq!(log.next_offset(), 180, "no record after the damage is lost");
    let damage = log.damage();
    assert_eq!(damage.len(), 1, "{damage:?}");
    let d = &damage[0];
    assert_eq!(
        d.to_offset,
        Some(d.from_offset + 3),
        "exactly one batch is lost"
    );
    assert!(!d.accepted);
    assert!(log.failure().is_some());
    assert!(matches!(
        log.read(d.from_offset + 1, 1 << 20),
        Err(StorageError::DataLoss { from, to: Some(to), .. }) if from == d.from_offset && to == d.from_offset + 3
    ));
    let before = read_until(&log, 0, d.from_offset);
    assert_eq!(before.len() as u64, d.from_offset);
    let after = read_all(&log, d.from_offset + 3);
    assert_eq!(after.len() as u64, 180 - d.from_offset - 3);
    assert!(matches!(
        log.append(&batch("x", 1, 1)),
        Err(StorageError::Damaged { .. })
    ));
    let accepted = log.accept_damage(0).unwrap();
    assert!(accepted.iter().all(|d| d.accepted));
    assert_eq!(log.append(&batch("after", 1, 1)).unwrap().base_offset, 180);
    log.close().unwrap();
    drop(log);
    let log = PartitionLog::open(dir.path(), config).unwrap();
    assert_eq!(log.next_offset(), 181);
    assert!(log.failure().is_none(), "{:?}", log.failure());
    assert!(log.damage().iter().all(|d| d.accepted));
    assert!(matches!(
        log.read(d.from_offset, 1 << 20),
        Err(StorageError::DataLoss { .. })
    ));
}

#[test]
fn damage_after_the_recovery_point_is_reported_again_after_a_restart() {
    // Found by the power-loss test (with the fix reverted, RILL_SEED=485 fails, an
    // `interval` seed, most runs): a power loss while a sealed segment's background
    // sync was pending tore a batch's records; recovery quarantined it, then moved the
    // recovery point to the end of the log (and so did `close`), so the next open took
    // the segment for durable, checked only its batch headers, and forgot the damage:
    // the partition took appends again and served the torn batch.
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let open = || PartitionLog::open(dir.path(), config.clone()).unwrap();
    let log = open();
    for i in 0..2 {
        log.append(&batch(&format!("a{i}"), 3, 50)).unwrap();
    }
    log.close().unwrap();
    drop(log);
    // A recovery point naming the first segment, as a lost write-back of later points
    // leaves it.
    let point = fs::read(dir.path().join("recovery-point")).unwrap();
    let log = open();
    let torn_batch = batch("torn", 3, 50);
    let torn = log.append(&torn_batch).unwrap();
    while log.segment_count() < 2 {
        log.append(&batch("more", 3, 50)).unwrap();
    }
    log.append(&batch("last", 3, 50)).unwrap();
    let end = log.next_offset();
    log.close().unwrap();
    drop(log);
    fs::write(dir.path().join("recovery-point"), point).unwrap();
    // Tear a record of the batch after the point (its records are stored as they were
    // appended); its header still parses.
    let path = dir.path().join(SEGMENT);
    let mut bytes = fs::read(&path).unwrap();
    let records = &torn_batch[64..];
    let at = bytes
        .windows(records.len())
        .position(|w| w == records)
        .unwrap();
    bytes[at + 10] ^= 0x20;
    fs::write(&path, bytes).unwrap();
    for restart in 0..3 {
        let log = open();
        assert_eq!(log.next_offset(), end, "restart {restart}");
        let damage = log.damage();
        assert_eq!(damage.len(), 1, "restart {restart}: {damage:?}");
        assert_eq!(damage[0].from_offset, torn.base_offset, "restart {restart}");
        assert!(log.failure().is_some(), "restart {restart}");
        assert!(
            matches!(
                log.read(torn.base_offset, 1 << 20),
                Err(StorageError::DataLoss { .. })
            ),
            "restart {restart}"
        );
        if restart == 1 {
            log.close().unwrap();
        }
    }
}
