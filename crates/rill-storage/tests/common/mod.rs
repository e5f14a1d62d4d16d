//! Helpers shared by the storage tests.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rill_format::{BatchBuilder, BatchView, NewRecord};
use rill_storage::{Durability, LogConfig, LogRead, ManualClock, PartitionLog, StdIo};

/// A batch whose record values are `"{tag}-{i}"` padded to `value_len` bytes.
pub fn batch(tag: &str, records: usize, value_len: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new();
    for i in 0..records {
        let mut value = format!("{tag}-{i}").into_bytes();
        value.resize(value_len.max(value.len()), b'.');
        builder
            .push(NewRecord::value(&value).key(tag.as_bytes()))
            .unwrap();
    }
    builder.finish().unwrap()
}

/// Records values of every batch from `from` to the end of the log, with offsets.
pub fn read_all(log: &PartitionLog, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = from;
    loop {
        let read: LogRead = log.read(at, 64 * 1024).unwrap();
        if read.bytes.is_empty() {
            break;
        }
        for batch in read.batches() {
            let batch: BatchView<'_> = batch.unwrap();
            for r in batch.records() {
                if r.offset >= at {
                    out.push((r.offset, r.value.to_vec()));
                }
            }
        }
        at = read.next_offset;
    }
    out
}

/// Like [`read_all`], but stops before offset `end`.
pub fn read_until(log: &PartitionLog, from: u64, end: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < end {
        let read: LogRead = log.read(at, 64 * 1024).unwrap();
        if read.bytes.is_empty() {
            break;
        }
        for batch in read.batches() {
            let batch: BatchView<'_> = batch.unwrap();
            for r in batch.records() {
                if r.offset >= at && r.offset < end {
                    out.push((r.offset, r.value.to_vec()));
                }
            }
        }
        at = read.next_offset;
    }
    out
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 4096,
        index_interval_bytes: 256,
        durability: Durability::Never,
        ..LogConfig::default()
    }
}

pub fn open_manual(dir: &Path, config: LogConfig, clock: &Arc<ManualClock>) -> PartitionLog {
    PartitionLog::open_with(dir, config, Arc::new(StdIo), clock.clone()).unwrap()
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
