//! Recovery on arbitrary segment contents: opening must never panic or hang; it
//! recovers or returns a typed error. Input builds valid batches, then corrupts,
//! truncates and appends garbage, so recovery sees realistic damage. After a
//! successful open, everything readable must parse (damaged ranges fail with
//! `DataLoss` and are stepped over), a log with damage refuses appends until the loss is
//! accepted, appends then continue at or after the old end, and a second open agrees
//! with the first.
#![no_main]

mod common;

use std::path::Path;
use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rill_format::{BatchBuilder, NewRecord};
use rill_storage::{Durability, LogConfig, ManualClock, PartitionLog, StdIo, StorageError};

/// Opens with a fixed clock, so the bytes written depend on the input only.
fn open(dir: &Path, config: &LogConfig) -> Result<PartitionLog, StorageError> {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
    PartitionLog::open_with(dir, config.clone(), Arc::new(StdIo), clock)
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    batches: Vec<Vec<&'a [u8]>>,
    flips: Vec<(u16, u8)>,
    truncate_to: Option<u16>,
    garbage: &'a [u8],
    index: Option<&'a [u8]>,
    time_index: Option<&'a [u8]>,
    /// Keep the recovery point of the clean close (damage below it is bit rot that
    /// reads must report), or delete it (a crash: recovery validates everything).
    keep_recovery_point: bool,
}

fuzz_target!(|input: Input<'_>| {
    let dir = common::scratch_dir();
    let config = LogConfig {
        durability: Durability::Never,
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    {
        // Write valid batches through the engine, so offsets and index are real.
        let log = open(dir.path(), &config).unwrap();
        for records in input.batches.iter().take(50) {
            if records.is_empty() {
                continue;
            }
            let mut builder = BatchBuilder::new();
            for value in records.iter().take(20) {
                builder.push(NewRecord::value(value)).unwrap();
            }
            log.append(&builder.finish().unwrap()).unwrap();
        }
        log.close().unwrap();
    }
    let seg = dir.path().join("00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    for (at, flip) in input.flips.iter().take(4) {
        if !bytes.is_empty() {
            let i = usize::from(*at) % bytes.len();
            bytes[i] ^= flip;
        }
    }
    if let Some(t) = input.truncate_to {
        bytes.truncate(usize::from(t));
    }
    bytes.extend_from_slice(input.garbage);
    std::fs::write(&seg, &bytes).unwrap();
    if let Some(index) = input.index {
        std::fs::write(dir.path().join("00000000000000000000.index"), index).unwrap();
    }
    if let Some(time_index) = input.time_index {
        std::fs::write(
            dir.path().join("00000000000000000000.timeindex"),
            time_index,
        )
        .unwrap();
    }

    if !input.keep_recovery_point {
        let _ = std::fs::remove_file(dir.path().join("recovery-point"));
    }
    let Ok(log) = open(dir.path(), &config) else {
        return;
    };
    let next = log.next_offset();
    let mut at = log.log_start();
    while at < next {
        let read = match log.read(at, 4096) {
            Ok(read) => read,
            // A damaged range names where reading resumes.
            Err(StorageError::DataLoss {
                from, to: Some(to), ..
            }) => {
                assert!(from <= at && to > at, "{at} in {from}..{to}");
                at = to;
                continue;
            }
            // Only damage the recovery point vouched for may surface at read time.
            Err(e) if input.keep_recovery_point => {
                assert!(matches!(e, StorageError::Corrupt { .. }), "{e}");
                break;
            }
            Err(e) => panic!("recovered data is readable: {e}"),
        };
        for batch in read.batches() {
            if !input.keep_recovery_point {
                batch.expect("recovered batches are valid");
            }
        }
        assert!(read.next_offset > at);
        at = read.next_offset;
    }
    if !input.keep_recovery_point {
        let _ = log.offset_for_timestamp(0).unwrap();
        let _ = log.offset_for_timestamp(i64::MAX).unwrap();
    }
    let mut builder = BatchBuilder::new();
    builder.push(NewRecord::value(b"after")).unwrap();
    let batch = builder.finish().unwrap();
    let damaged = log.failure().is_some();
    let appended = if damaged {
        assert!(
            matches!(log.append(&batch), Err(StorageError::Damaged { .. })),
            "a damaged log refuses appends"
        );
        log.accept_damage(0).unwrap();
        let appended = log.append(&batch).unwrap();
        assert!(appended.base_offset >= next, "no offset is used twice");
        appended
    } else {
        let appended = log.append(&batch).unwrap();
        assert_eq!(appended.base_offset, next);
        appended
    };
    drop(log);
    let log = open(dir.path(), &config).expect("a recovered log reopens");
    assert_eq!(log.next_offset(), appended.base_offset + 1);
    assert!(
        log.failure().is_none(),
        "accepted damage stays accepted: {:?}",
        log.failure()
    );
});
