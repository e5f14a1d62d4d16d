//! Changing an open log's durability and retention (an altered topic, without a
//! restart): what was written before the change is durable or visible as the new
//! policy promises, and retention uses the new limits at its next pass.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{batch, read_all, small_config};
use rill_storage::sim::SimIo;
use rill_storage::{
    Durability, Io, LogConfig, ManualClock, PartitionLog, StorageError, SystemClock,
};

const DIR: &str = "/data/s/t/0";

fn open_on(io: &SimIo, config: LogConfig) -> PartitionLog {
    PartitionLog::open_with(
        Path::new(DIR),
        config,
        Arc::new(io.clone()) as Arc<dyn Io>,
        Arc::new(SystemClock),
    )
    .unwrap()
}

#[test]
fn entering_always_makes_what_was_written_before_durable() {
    let io = SimIo::new(1);
    let log = open_on(&io, small_config());
    log.append(&batch("a", 3, 10)).unwrap();
    log.append(&batch("b", 2, 10)).unwrap();
    log.set_durability(Durability::Always).unwrap();
    assert_eq!(log.durability(), Durability::Always);
    assert_eq!(log.config().durability, Durability::Always);
    // A power loss now keeps only what was synced: the switch synced both batches.
    let after = io.power_loss_durable();
    drop(log);
    let log = open_on(&after, small_config());
    assert_eq!(log.next_offset(), 5);
    assert_eq!(read_all(&log, 0).len(), 5);
}

#[test]
fn leaving_always_stops_syncing_each_append() {
    let io = SimIo::new(2);
    let config = LogConfig {
        durability: Durability::Always,
        ..small_config()
    };
    let log = open_on(&io, config);
    log.append(&batch("a", 2, 10)).unwrap();
    log.set_durability(Durability::Never).unwrap();
    log.append(&batch("b", 2, 10)).unwrap();
    // Acknowledged and visible at once, under the new policy.
    assert_eq!(log.next_offset(), 4);
    assert_eq!(read_all(&log, 0).len(), 4);
    // Not synced: a power loss that keeps only synced bytes takes it back.
    let after = io.power_loss_durable();
    drop(log);
    let log = open_on(&after, small_config());
    assert_eq!(
        log.next_offset(),
        2,
        "the batch appended under `never` was not synced"
    );
}

#[test]
fn a_zero_interval_is_refused_and_a_closed_log_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), small_config()).unwrap();
    let zero = log.set_durability(Durability::Interval(Duration::ZERO));
    assert!(matches!(zero, Err(StorageError::Config(_))), "{zero:?}");
    assert!(matches!(
        log.set_retention(Some(Duration::ZERO), None),
        Err(StorageError::Config(_))
    ));
    assert_eq!(log.durability(), Durability::Never);
    log.close().unwrap();
    assert!(matches!(
        log.set_durability(Durability::Always),
        Err(StorageError::Closed)
    ));
}

#[test]
fn retention_uses_the_limits_set_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let log = common::open_manual(dir.path(), small_config(), &clock);
    for i in 0..12 {
        log.append(&batch(&format!("r{i}"), 4, 200)).unwrap();
    }
    assert!(log.segment_count() > 2, "{} segments", log.segment_count());
    assert_eq!(log.apply_retention().unwrap().segments_deleted, 0);
    log.set_retention(None, Some(1)).unwrap();
    assert_eq!(log.config().retention_bytes, Some(1));
    let outcome = log.apply_retention().unwrap();
    assert!(outcome.segments_deleted > 0);
    assert_eq!(log.segment_count(), 1, "only the active segment stays");
    // Cleared again: nothing more goes.
    log.set_retention(None, None).unwrap();
    log.append(&batch("more", 40, 200)).unwrap();
    log.append(&batch("more2", 4, 200)).unwrap();
    assert_eq!(log.apply_retention().unwrap().segments_deleted, 0);
}
