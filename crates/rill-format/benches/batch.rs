//! The per-record work of the batch format: building a batch (what a producer does),
//! validating one (what the broker does to every produced batch, and a reader to every
//! fetched one) and iterating its records (what a reader does next), or both in one
//! pass (`BatchView::parse_with`, what a reader does now). Batches of 1,000
//! records of 100 B and of 1 KiB values, as in `rill bench`.
//! Run: `cargo bench -p rill-format --bench batch`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rill_format::{BatchBuilder, BatchView, NewRecord};
use std::hint::black_box;

const RECORDS: usize = 1000;

fn build(value: &[u8]) -> Vec<u8> {
    let mut builder = BatchBuilder::with_capacity(RECORDS * (value.len() + 16));
    for i in 0..RECORDS {
        // Timestamps a few microseconds apart, as a producer's records get them.
        let record = NewRecord::value(value).timestamp_delta_us(i as u64 * 3);
        builder.push(record).unwrap();
    }
    builder.finish().unwrap()
}

fn batches(c: &mut Criterion) {
    for size in [100usize, 1024] {
        let value = vec![b'v'; size];
        let batch = build(&value);
        let mut group = c.benchmark_group(format!("batch_1000x{size}B"));
        group.throughput(Throughput::Elements(RECORDS as u64));
        group.bench_function("build", |b| b.iter(|| build(black_box(&value))));
        group.bench_function("validate", |b| {
            b.iter(|| BatchView::parse(black_box(&batch)).unwrap())
        });
        group.bench_function("validate_and_iterate", |b| {
            b.iter(|| {
                let view = BatchView::parse(black_box(&batch)).unwrap();
                view.records().map(|r| r.value.len()).sum::<usize>()
            })
        });
        group.bench_function("validate_visiting", |b| {
            b.iter(|| {
                let mut sum = 0usize;
                BatchView::parse_with(black_box(&batch), |r| sum += r.value.len()).unwrap();
                sum
            })
        });
        group.finish();
    }
}

criterion_group!(benches, batches);
criterion_main!(benches);
