//! Append and read throughput of the partition log, with a plain `write + fdatasync`
//! loop as the baseline for `always`. Run: `cargo bench -p rill-storage --bench log`.
//!
//! Batches are 1,000 records of 1 KiB values (~1 MiB), as in the target.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rill_format::{BatchBuilder, NewRecord};
use rill_storage::{Durability, LogConfig, PartitionLog};

const RECORDS: usize = 1000;
const VALUE_BYTES: usize = 1024;

fn batch() -> Vec<u8> {
    let value = vec![b'v'; VALUE_BYTES];
    let mut builder = BatchBuilder::with_capacity(RECORDS * (VALUE_BYTES + 16));
    for _ in 0..RECORDS {
        builder.push(NewRecord::value(&value)).unwrap();
    }
    builder.finish().unwrap()
}

fn config(durability: Durability) -> LogConfig {
    LogConfig {
        durability,
        segment_bytes_max: 256 << 20,
        // Keep the disk footprint bounded while criterion runs many iterations.
        retention_bytes: Some(1 << 30),
        ..LogConfig::default()
    }
}

fn append(c: &mut Criterion) {
    let template = batch();
    let mut group = c.benchmark_group("append_1000x1KiB");
    group.throughput(Throughput::Bytes(template.len() as u64));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(3));
    group.measurement_time(Duration::from_secs(8));

    for (name, durability) in [("never", Durability::Never), ("always", Durability::Always)] {
        let dir = tempfile::tempdir_in(bench_dir()).unwrap();
        let log = PartitionLog::open(dir.path(), config(durability)).unwrap();
        let buf = template.clone();
        let mut n = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                log.append(&buf).unwrap();
                n += 1;
                if n.is_multiple_of(256) {
                    log.apply_retention().unwrap();
                }
            })
        });
    }

    // Baseline for `always`: the same bytes with a plain pwrite + fdatasync per batch.
    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("plain.log"))
        .unwrap();
    let mut pos = 0u64;
    group.bench_function("baseline_write_fdatasync", |b| {
        b.iter(|| {
            file.write_all_at(&template, pos).unwrap();
            file.sync_data().unwrap();
            pos += template.len() as u64;
            if pos > 256 << 20 {
                file.set_len(0).unwrap();
                pos = 0;
            }
        })
    });
    group.finish();
}

fn read(c: &mut Criterion) {
    let template = batch();
    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
    let log = PartitionLog::open(dir.path(), config(Durability::Never)).unwrap();
    let batches = 256u64;
    for _ in 0..batches {
        log.append(&template.clone()).unwrap();
    }
    let end = log.next_offset();
    // Warm the page cache.
    let mut at = 0;
    while at < end {
        at = log.read(at, 1 << 20).unwrap().next_offset;
    }
    let mut group = c.benchmark_group("read_page_cache");
    group.throughput(Throughput::Bytes(template.len() as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(6));
    group.bench_function("1MiB_reads", |b| {
        b.iter_custom(|iters| {
            let mut at = 0;
            let start = Instant::now();
            for _ in 0..iters {
                if at >= end {
                    at = 0;
                }
                let read = log.read(at, template.len()).unwrap();
                at = read.next_offset;
                std::hint::black_box(&read.bytes);
            }
            start.elapsed()
        })
    });
    group.finish();
}

fn format(c: &mut Criterion) {
    let template = batch();
    let mut group = c.benchmark_group("format_1000x1KiB");
    group.throughput(Throughput::Bytes(template.len() as u64));
    group.bench_function("build", |b| b.iter(batch));
    group.bench_function("parse_and_iterate", |b| {
        b.iter(|| {
            let view = rill_format::BatchView::parse(&template).unwrap();
            view.records().map(|r| r.value.len()).sum::<usize>()
        })
    });
    group.finish();
}

/// Benchmarks write to the system temp directory (a disk here, not tmpfs) unless
/// `RILL_BENCH_DIR` says otherwise.
fn bench_dir() -> std::path::PathBuf {
    std::env::var_os("RILL_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir)
}

criterion_group!(benches, append, read, format);
criterion_main!(benches);
