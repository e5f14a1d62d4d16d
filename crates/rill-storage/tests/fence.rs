//! `PartitionLog::fence`: what sealing an elastic topic's range rests on
//! (docs/RANGES.md §3) — once it returns, no append completes, and it names where the
//! log ends; reads, syncs and a reopen are unaffected, and a lifted fence resumes
//! appends at the same offset.

mod common;

use std::sync::{Arc, Barrier};

use common::*;
use rill_storage::{PartitionLog, StorageError};

#[test]
fn a_fenced_log_refuses_appends_and_names_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), small_config()).unwrap();
    log.append(&batch("a", 3, 10)).unwrap();
    assert_eq!(log.fence().unwrap(), 3);
    // Idempotent.
    assert_eq!(log.fence().unwrap(), 3);
    for _ in 0..2 {
        assert!(matches!(
            log.append(&batch("b", 1, 10)),
            Err(StorageError::Fenced { next_offset: 3 })
        ));
    }
    assert_eq!(log.next_offset(), 3);
    // Reads and syncs go on.
    assert_eq!(read_all(&log, 0).len(), 3);
    log.sync().unwrap();
    // Lifted: appends resume where the log ended.
    log.unfence().unwrap();
    assert_eq!(log.append(&batch("c", 2, 10)).unwrap().base_offset, 3);
    assert_eq!(log.fence().unwrap(), 5);
    // A reopened log is not fenced (the fence lives in memory; the broker fences a
    // sealed range again when it opens it).
    log.close().unwrap();
    drop(log);
    let log = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.append(&batch("d", 1, 10)).unwrap().base_offset, 5);
    log.close().unwrap();
    assert!(matches!(log.fence(), Err(StorageError::Closed)));
}

#[test]
fn no_append_completes_after_the_fence_returns() {
    // Appenders race a fence: every append that succeeded took an offset below the
    // fence's answer, and the log ends exactly there.
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(PartitionLog::open(dir.path(), small_config()).unwrap());
        let start = Arc::new(Barrier::new(4));
        let appenders: Vec<_> = (0..3)
            .map(|t| {
                let (log, start) = (Arc::clone(&log), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    let mut last = Vec::new();
                    loop {
                        match log.append(&batch(&format!("r{round}t{t}"), 2, 10)) {
                            Ok(a) => last.push(a.last_offset),
                            Err(StorageError::Fenced { .. }) => return last,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(std::time::Duration::from_micros(200 * (round % 5)));
        let end = log.fence().unwrap();
        let mut appended: Vec<u64> = appenders
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        appended.sort_unstable();
        assert!(appended.iter().all(|&o| o < end), "round {round}");
        assert_eq!(appended.len() as u64 * 2, end, "round {round}");
        assert_eq!(log.next_offset(), end);
        assert_eq!(read_all(&log, 0).len() as u64, end);
    }
}
