//! Fault injection through the I/O seam: a failed fsync or write poisons the partition
//! (appends refused, reads served), and nothing acknowledged is lost.

mod common;

use std::sync::Arc;

use common::*;
use rill_storage::fault::FaultyIo;
use rill_storage::{Durability, LogConfig, PartitionLog, StorageError, SystemClock};

fn always() -> LogConfig {
    LogConfig {
        durability: Durability::Always,
        ..small_config()
    }
}

#[test]
fn fsync_failure_poisons_the_partition_and_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    faults.only_files_ending_with(".log");
    let log =
        PartitionLog::open_with(dir.path(), always(), Arc::new(io), Arc::new(SystemClock)).unwrap();
    log.append(&batch("ok", 2, 10)).unwrap();
    faults.fail_next_syncs(1);
    let err = log.append(&batch("lost", 2, 10)).unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::Io {
                op: "sync segment",
                ..
            }
        ),
        "{err}"
    );
    let syncs = faults.sync_count();
    // The next sync would succeed, but the log must not try: it is poisoned.
    let err = log.append(&batch("refused", 1, 1)).unwrap_err();
    assert!(
        matches!(err, StorageError::Poisoned { cause: "fsync" }),
        "{err}"
    );
    assert_eq!(faults.sync_count(), syncs, "no fsync after the failure");
    assert_eq!(log.poisoned(), Some("fsync"));
    // Reads still serve what was acknowledged, and not the unacknowledged batch.
    assert_eq!(log.next_offset(), 2);
    assert_eq!(read_all(&log, 0).len(), 2);
    drop(log);
    // Reopening recovers from what is on disk and accepts appends again.
    let log = PartitionLog::open(dir.path(), always()).unwrap();
    assert!(log.next_offset() >= 2);
    let next = log.next_offset();
    assert_eq!(log.append(&batch("new", 1, 1)).unwrap().base_offset, next);
}

#[test]
fn enospc_during_append_fails_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    faults.only_files_ending_with(".log");
    let log =
        PartitionLog::open_with(dir.path(), always(), Arc::new(io), Arc::new(SystemClock)).unwrap();
    let mut acked = Vec::new();
    for i in 0..5 {
        acked.push(log.append(&batch(&format!("a{i}"), 3, 20)).unwrap());
    }
    // The disk fills up halfway through the next batch.
    faults.set_write_budget(Some(50));
    let err = log.append(&batch("full", 3, 40)).unwrap_err();
    match &err {
        StorageError::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(28)),
        other => panic!("{other}"),
    }
    assert!(matches!(
        log.append(&batch("after", 1, 1)),
        Err(StorageError::Poisoned { cause: "write" })
    ));
    assert_eq!(read_all(&log, 0).len(), 15);
    drop(log);
    faults.set_write_budget(None);
    let log = PartitionLog::open(dir.path(), always()).unwrap();
    assert_eq!(log.next_offset(), 15, "the torn half batch was truncated");
    let values: Vec<_> = read_all(&log, 0);
    for (i, a) in acked.iter().enumerate() {
        assert!(
            values[a.base_offset as usize]
                .1
                .starts_with(format!("a{i}-0").as_bytes())
        );
    }
    assert_eq!(log.append(&batch("next", 1, 1)).unwrap().base_offset, 15);
}

#[test]
fn write_error_poisons_without_acknowledging() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    faults.only_files_ending_with(".log");
    let log = PartitionLog::open_with(
        dir.path(),
        small_config(),
        Arc::new(io),
        Arc::new(SystemClock),
    )
    .unwrap();
    log.append(&batch("ok", 1, 1)).unwrap();
    faults.fail_next_writes(1);
    assert!(matches!(
        log.append(&batch("x", 1, 1)),
        Err(StorageError::Io {
            op: "write segment",
            ..
        })
    ));
    assert!(matches!(
        log.append(&batch("y", 1, 1)),
        Err(StorageError::Poisoned { cause: "write" })
    ));
    assert_eq!(log.next_offset(), 1);
}

#[test]
fn a_failed_group_sync_fails_every_append_it_covered() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    faults.only_files_ending_with(".log");
    let log = Arc::new(
        PartitionLog::open_with(dir.path(), always(), Arc::new(io), Arc::new(SystemClock)).unwrap(),
    );
    faults.fail_all_syncs(true);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || log.append(&batch(&format!("t{t}"), 1, 1)))
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap().is_err(), "no append may be acknowledged");
    }
    assert_eq!(log.next_offset(), 0, "nothing unsynced became visible");
}

#[test]
fn fsync_failure_while_rolling_a_segment_poisons() {
    // `always` syncs the old segment inline when rolling; `never` seals it in the
    // background. Either way a failed sync poisons the partition and nothing that was
    // acknowledged is lost.
    for durability in [Durability::Always, Durability::Never] {
        let dir = tempfile::tempdir().unwrap();
        let (io, faults) = FaultyIo::new();
        faults.only_files_ending_with(".log");
        let config = LogConfig {
            durability,
            ..small_config()
        };
        let log = PartitionLog::open_with(dir.path(), config, Arc::new(io), Arc::new(SystemClock))
            .unwrap();
        let mut appended = 0;
        faults.fail_all_syncs(true);
        let err = loop {
            match log.append(&batch("r", 4, 100)) {
                Ok(_) => appended += 4,
                Err(e) => break e,
            }
            assert!(
                appended < 4000,
                "{durability:?}: the failed sync was never noticed"
            );
            // Give a background seal the time to fail.
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert!(
            matches!(
                err,
                StorageError::Io {
                    op: "sync segment",
                    ..
                } | StorageError::Poisoned { cause: "fsync" }
            ),
            "{durability:?}: {err}"
        );
        assert!(matches!(
            log.append(&batch("r", 1, 1)),
            Err(StorageError::Poisoned { .. })
        ));
        assert_eq!(read_all(&log, 0).len(), appended, "{durability:?}");
    }
}
