//! How long a split of an elastic topic's range takes on one node: the window in which
//! appends to the range answer `MIGRATING` (docs/RANGES.md §3: fence, sync the parent,
//! create the children, commit the catalog, publish). The parent holds `MIB` MiB
//! appended under `never` and not yet synced, so the split's own sync has that much to
//! write; the baseline writes the same bytes to a new file and `fdatasync`s it, the
//! least any durable seal of them can cost. Run: `cargo bench -p rill-broker --bench
//! split`.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use rill_broker::{Broker, BrokerConfig};
use rill_format::{BatchBuilder, NewRecord};
use rill_proto::pb;

/// Unsynced MiB in the parent when it is split.
const MIB: usize = 16;

fn batch() -> Bytes {
    let value = vec![b'v'; 1024];
    let mut b = BatchBuilder::new();
    for _ in 0..1000 {
        b.push(NewRecord::value(&value)).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

fn split(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let template = batch();
    let mut group = c.benchmark_group(format!("split_with_{MIB}MiB_unsynced"));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("split_range", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let broker = Broker::open(BrokerConfig::new(dir.path())).unwrap();
                broker
                    .create_topic(
                        "s",
                        "t",
                        &pb::TopicOptions {
                            partitions: 1,
                            elastic: true,
                            durability: pb::Durability::Never as i32,
                            ..Default::default()
                        },
                        false,
                        true,
                    )
                    .unwrap();
                runtime.block_on(async {
                    for _ in 0..MIB {
                        broker.produce("s", "t", 0, template.clone()).await.unwrap();
                    }
                });
                let started = Instant::now();
                broker.split_range("s", "t", Some(0), None).unwrap();
                total += started.elapsed();
                broker.shutdown().unwrap();
            }
            total
        });
    });
    group.bench_function("write_and_fdatasync_baseline", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let file = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(dir.path().join("f"))
                    .unwrap();
                let mut at = 0u64;
                for _ in 0..MIB {
                    file.write_all_at(&template, at).unwrap();
                    at += template.len() as u64;
                }
                let started = Instant::now();
                file.sync_data().unwrap();
                total += started.elapsed();
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, split);
criterion_main!(benches);
