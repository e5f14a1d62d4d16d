//! Issue 9's broker defects, each with the test that failed before the fix: unknown
//! producers, errors answered before the sequence wait, timestamp bounds, deletes on a
//! full disk, failed partitions that do not stop the broker, healing after a failed
//! write, repair, and a damaged offsets log that loses only its damaged stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rill_broker::{Broker, BrokerConfig, BrokerError, Fetch};
use rill_format::{BatchBuilder, NewRecord, ProducerInfo};
use rill_proto::{ErrorCode, pb};
use rill_storage::StorageError;
use rill_storage::fault::FaultyIo;

fn batch(producer: Option<ProducerInfo>, values: &[&str]) -> Bytes {
    let mut b = BatchBuilder::new();
    if let Some(p) = producer {
        b.producer(p);
    }
    for v in values {
        b.push(NewRecord::value(v.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

fn info(id: u64, epoch: u16, seq: u32) -> ProducerInfo {
    ProducerInfo {
        id,
        epoch,
        base_sequence: seq,
    }
}

fn options(partitions: u32) -> pb::TopicOptions {
    pb::TopicOptions {
        partitions,
        ..Default::default()
    }
}

fn create(broker: &Broker, topic: &str, o: pb::TopicOptions) {
    broker.create_topic("s", topic, &o, false, true).unwrap();
}

async fn values(broker: &Broker, topic: &str, partition: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let read = broker
            .fetch(
                "s",
                topic,
                partition,
                Fetch {
                    offset: at,
                    max_bytes: 1 << 20,
                    max_wait: Duration::ZERO,
                    min_bytes: 0,
                },
            )
            .await;
        let read = match read {
            Ok(read) => read,
            // Step over a damaged range, as a consumer told of it would.
            Err(e) if e.code() == ErrorCode::DataLoss => {
                at = e.offset().expect("a damaged range with an end");
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        if read.bytes.is_empty() {
            return out;
        }
        for b in read.batches() {
            for r in b.unwrap().records() {
                if r.offset >= at {
                    out.push(String::from_utf8(r.value.to_vec()).unwrap());
                }
            }
        }
        at = read.next_offset;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_from_an_evicted_producer_is_refused_not_stored_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new(dir.path());
    config.producers_per_partition_max = 1;
    config.sequence_wait = Duration::from_millis(100);
    let broker = Arc::new(Broker::open(config).unwrap());
    create(&broker, "t", options(1));
    let a = batch(Some(info(7, 0, 3)), &["a3", "a4"]);
    broker
        .produce("s", "t", 0, batch(Some(info(7, 0, 0)), &["a0", "a1", "a2"]))
        .await
        .unwrap();
    broker.produce("s", "t", 0, a.clone()).await.unwrap();
    // Another producer takes the only slot: producer 7 is forgotten.
    broker
        .produce("s", "t", 0, batch(Some(info(8, 0, 0)), &["b0"]))
        .await
        .unwrap();
    // Its retry used to be appended after the wait, a second copy. Now it is refused.
    let retry = broker.produce("s", "t", 0, a).await;
    assert!(
        matches!(
            retry,
            Err(BrokerError::UnknownProducerId {
                producer_id: 7,
                sequence: 3,
                ..
            })
        ),
        "{retry:?}"
    );
    assert_eq!(retry.unwrap_err().code(), ErrorCode::UnknownProducerId);
    assert_eq!(
        values(&broker, "t", 0).await,
        ["a0", "a1", "a2", "a3", "a4", "b0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_older_than_what_a_restart_rebuilds_is_refused_not_stored_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new(dir.path());
    config.sequence_wait = Duration::from_millis(100);
    let o = pb::TopicOptions {
        partitions: 1,
        segment_bytes: Some(1024),
        ..Default::default()
    };
    let old = batch(Some(info(5, 0, 1)), &["p1"]);
    {
        let broker = Arc::new(Broker::open(config.clone()).unwrap());
        create(&broker, "t", o);
        broker
            .produce("s", "t", 0, batch(Some(info(5, 0, 0)), &["p0"]))
            .await
            .unwrap();
        broker.produce("s", "t", 0, old.clone()).await.unwrap();
        // Enough other data that producer 5's batches are older than the last two
        // segments the restart scans.
        let filler = "x".repeat(600);
        for _ in 0..6 {
            broker
                .produce("s", "t", 0, batch(None, &[&filler]))
                .await
                .unwrap();
        }
        broker.shutdown().unwrap();
    }
    let broker = Arc::new(Broker::open(config).unwrap());
    let before = values(&broker, "t", 0).await.len();
    let retry = broker.produce("s", "t", 0, old).await;
    assert!(
        matches!(retry, Err(BrokerError::UnknownProducerId { .. })),
        "{retry:?}"
    );
    assert_eq!(
        values(&broker, "t", 0).await.len(),
        before,
        "nothing stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_batch_out_of_sequence_is_answered_at_once_not_after_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new(dir.path());
    config.sequence_wait = Duration::from_secs(30);
    let broker = Arc::new(Broker::open(config).unwrap());
    create(
        &broker,
        "t",
        pb::TopicOptions {
            partitions: 1,
            max_record_bytes: Some(16),
            ..Default::default()
        },
    );
    broker
        .produce("s", "t", 0, batch(Some(info(3, 0, 0)), &["ok"]))
        .await
        .unwrap();
    // Sequence 9 is ahead (it would wait for 1..9) and its record is too large.
    let too_large = batch(
        Some(info(3, 0, 9)),
        &["a record much larger than sixteen bytes"],
    );
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        broker.produce("s", "t", 0, too_large),
    )
    .await
    .expect("answered without waiting 30 s for the sequence gap");
    assert!(
        matches!(
            answered,
            Err(BrokerError::Storage(StorageError::RecordTooLarge { .. }))
        ),
        "{answered:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_cannot_push_the_partition_clock_into_the_future() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    create(&broker, "t", options(1));
    let with_delta = |delta_us: u64| {
        let mut b = BatchBuilder::new();
        b.push(NewRecord::value(b"v")).unwrap();
        b.push(NewRecord::value(b"w").timestamp_delta_us(delta_us))
            .unwrap();
        Bytes::from(b.finish().unwrap())
    };
    // The reproduction: a delta near i64::MAX - now moved the clock to year 294,000.
    let far = broker
        .produce("s", "t", 0, with_delta(i64::MAX as u64 / 2))
        .await;
    assert!(
        matches!(&far, Err(e) if e.code() == ErrorCode::TimestampOutOfRange),
        "{far:?}"
    );
    // 59 minutes ahead is allowed once, but batches cannot ratchet the clock further.
    let minutes = |m: u64| m * 60 * 1_000_000;
    broker
        .produce("s", "t", 0, with_delta(minutes(59)))
        .await
        .unwrap();
    let again = broker.produce("s", "t", 0, with_delta(minutes(59))).await;
    assert!(
        matches!(&again, Err(e) if e.code() == ErrorCode::TimestampOutOfRange),
        "{again:?}"
    );
    // A batch without a span is fine, and its time is not pushed beyond an hour.
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let plain = broker
        .produce("s", "t", 0, batch(None, &["x"]))
        .await
        .unwrap();
    assert!(plain.timestamp_us < now_us + minutes(61) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_topic_on_a_full_disk_frees_its_space_and_stays_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    let mut config = BrokerConfig::new(dir.path());
    config.io = Arc::new(io);
    {
        let broker = Arc::new(Broker::open(config.clone()).unwrap());
        create(&broker, "big", options(2));
        create(&broker, "kept", options(1));
        broker
            .produce("s", "big", 0, batch(None, &["data"]))
            .await
            .unwrap();
        assert!(dir.path().join("reserved-space").exists());
        // The disk is full: nothing more can be written.
        faults.set_write_budget(Some(0));
        assert!(
            broker
                .produce("s", "kept", 0, batch(None, &["x"]))
                .await
                .is_err()
        );
        broker.delete_topic("s", "big").unwrap();
        assert!(
            !dir.path().join("streams/s/big").exists(),
            "its space is freed"
        );
        assert!(broker.describe_topic("s", "big").is_err());
        faults.set_write_budget(None);
        broker.shutdown().unwrap();
    }
    // It used to come back after a restart, with its space never freed.
    let broker = Arc::new(Broker::open(config).unwrap());
    assert!(matches!(
        broker.describe_topic("s", "big"),
        Err(BrokerError::TopicNotFound { .. })
    ));
    assert!(broker.describe_topic("s", "kept").is_ok());
    assert!(
        dir.path().join("reserved-space").exists(),
        "the reserve is taken back once there is space"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_catalog_save_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    let mut config = BrokerConfig::new(dir.path());
    config.io = Arc::new(io);
    config.reserved_space_bytes = 0;
    let broker = Arc::new(Broker::open(config.clone()).unwrap());
    create(&broker, "t", options(1));
    faults.set_write_budget(Some(0));
    // Without a reserve the save fails: write-ahead means the topic is still there, in
    // memory and on disk.
    assert!(broker.delete_topic("s", "t").is_err());
    assert!(broker.describe_topic("s", "t").is_ok());
    faults.set_write_budget(None);
    broker
        .produce("s", "t", 0, batch(None, &["still here"]))
        .await
        .unwrap();
    broker.shutdown().unwrap();
    drop(broker);
    let broker = Arc::new(Broker::open(config).unwrap());
    assert_eq!(values(&broker, "t", 0).await, ["still here"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_poisoned_by_a_full_disk_heals_once_space_is_freed() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    let mut config = BrokerConfig::new(dir.path());
    config.io = Arc::new(io);
    let broker = Arc::new(Broker::open(config).unwrap());
    create(&broker, "t", options(1));
    broker
        .produce("s", "t", 0, batch(None, &["before"]))
        .await
        .unwrap();
    broker.store_offset("s", "t", 0, "c", 1).await.unwrap();
    faults.set_write_budget(Some(10));
    assert!(
        broker
            .produce("s", "t", 0, batch(None, &["lost"]))
            .await
            .is_err()
    );
    // The offsets log is poisoned too by the full disk.
    assert!(broker.store_offset("s", "t", 0, "c", 1).await.is_err());
    assert_eq!(
        broker.failed_partitions().len(),
        2,
        "{:?}",
        broker.failed_partitions()
    );
    faults.set_write_budget(None);
    // No restart: the upkeep reopens both once their back-off passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !broker.failed_partitions().is_empty() {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            broker.failed_partitions()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let b = Arc::clone(&broker);
        tokio::task::spawn_blocking(move || b.heal()).await.unwrap();
    }
    broker
        .produce("s", "t", 0, batch(None, &["after"]))
        .await
        .unwrap();
    broker.store_offset("s", "t", 0, "c", 2).await.unwrap();
    assert_eq!(values(&broker, "t", 0).await, ["before", "after"]);
    assert_eq!(broker.get_offset("s", "t", 0, "c").unwrap(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_appending_fails_the_partition_until_it_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    faults.only_files_ending_with(".log");
    let mut config = BrokerConfig::new(dir.path());
    config.io = Arc::new(io);
    let broker = Arc::new(Broker::open(config).unwrap());
    create(&broker, "t", options(1));
    broker
        .produce("s", "t", 0, batch(None, &["before"]))
        .await
        .unwrap();
    faults.panic_on_next_writes(1);
    let panicked = broker.produce("s", "t", 0, batch(None, &["boom"])).await;
    assert!(panicked.is_err(), "{panicked:?}");
    // The writer's state is in doubt: appends are refused (it used to carry on).
    let refused = broker.produce("s", "t", 0, batch(None, &["next"])).await;
    assert!(
        matches!(
            refused,
            Err(BrokerError::Storage(StorageError::Poisoned { .. }))
        ),
        "{refused:?}"
    );
    assert_eq!(broker.failed_partitions().len(), 1);
    broker.repair_partition("s", "t", 0, false).unwrap();
    broker
        .produce("s", "t", 0, batch(None, &["after"]))
        .await
        .unwrap();
    assert_eq!(values(&broker, "t", 0).await, ["before", "after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_partition_opens_failed_while_everything_else_serves() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::new(dir.path());
    {
        let broker = Arc::new(Broker::open(config.clone()).unwrap());
        create(
            &broker,
            "bad",
            pb::TopicOptions {
                partitions: 2,
                segment_bytes: Some(1024),
                ..Default::default()
            },
        );
        create(&broker, "good", options(1));
        for i in 0..20 {
            let v = format!("{i:03}{}", "x".repeat(200));
            broker
                .produce("s", "bad", 0, batch(None, &[&v]))
                .await
                .unwrap();
        }
        broker
            .produce("s", "good", 0, batch(None, &["fine"]))
            .await
            .unwrap();
        broker
            .store_offset("s", "bad", 0, "reader", 20)
            .await
            .unwrap();
        broker.shutdown().unwrap();
    }
    // A sealed segment loses its end: `rill serve` used to exit 1 here.
    let part = dir.path().join("streams/s/bad/0");
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    assert!(logs.len() >= 3);
    let len = std::fs::metadata(&logs[0]).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&logs[0])
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let broker = Arc::new(Broker::open(config).unwrap());
    assert_eq!(values(&broker, "good", 0).await, ["fine"]);
    let failed = broker.failed_partitions();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!((failed[0].topic.as_str(), failed[0].partition), ("bad", 0));
    let (_, states) = broker.describe_topic("s", "bad").unwrap();
    assert!(states[0].failure.is_some());
    assert_eq!(states[0].damaged.len(), 1);
    assert!(states[1].failure.is_none());
    let lost = states[0].damaged[0].clone();
    let refused = broker.produce("s", "bad", 0, batch(None, &["x"])).await;
    assert!(
        matches!(
            refused,
            Err(BrokerError::Storage(StorageError::Damaged { .. }))
        ),
        "{refused:?}"
    );
    let read = broker
        .fetch(
            "s",
            "bad",
            0,
            Fetch {
                offset: lost.from_offset,
                max_bytes: 1 << 20,
                max_wait: Duration::ZERO,
                min_bytes: 0,
            },
        )
        .await;
    let err = read.unwrap_err();
    assert_eq!(err.code(), ErrorCode::DataLoss);
    assert_eq!(err.range_start(), Some(lost.from_offset));
    assert_eq!(err.offset(), lost.to_offset);
    // Records after the damage are still served.
    let after = values(&broker, "bad", 0).await;
    assert!(after.len() >= 17, "{after:?}");
    let state = broker.repair_partition("s", "bad", 0, true).unwrap();
    assert!(state.failure.is_none(), "{state:?}");
    let appended = broker
        .produce("s", "bad", 0, batch(None, &["new"]))
        .await
        .unwrap();
    assert_eq!(appended.base_offset, 20);
}

/// Reads, timestamp lookups and admin changes run on the blocking pool: on a runtime
/// with one thread, a fetch stuck on a slow disk used to stall every other request.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_disk_does_not_stall_the_runtime() {
    use rill_proto::{Request, RequestBody, Response};
    let dir = tempfile::tempdir().unwrap();
    let (io, faults) = FaultyIo::new();
    faults.only_files_ending_with(".log");
    let mut config = BrokerConfig::new(dir.path());
    config.io = Arc::new(io);
    let broker = Arc::new(Broker::open(config).unwrap());
    create(&broker, "t", options(1));
    broker
        .produce("s", "t", 0, batch(None, &["x"]))
        .await
        .unwrap();
    faults.delay_reads(Some(Duration::from_secs(3)));
    let slow = {
        let broker = Arc::clone(&broker);
        tokio::spawn(async move {
            broker
                .fetch(
                    "s",
                    "t",
                    0,
                    Fetch {
                        offset: 0,
                        max_bytes: 1 << 20,
                        max_wait: Duration::ZERO,
                        min_bytes: 0,
                    },
                )
                .await
        })
    };
    // Let the fetch reach its read.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let listed = broker
        .handle(Request::new(RequestBody::ListStreams(
            pb::ListStreamsRequest {},
        )))
        .await;
    assert!(matches!(listed, Response::Ok { .. }));
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "another request waited {waited:?} behind a slow read"
    );
    faults.delay_reads(None);
    slow.await.unwrap().unwrap();
}

/// A commit sent just before the broker died, resent to the restarted broker after
/// the member rejoined, used to be accepted: the new session had started from the
/// older durable offset, and its next commit moved the group's offset backward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_from_before_a_restart_is_refused_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::new(dir.path());
    let old_generation = {
        let broker = Arc::new(Broker::open(config.clone()).unwrap());
        create(&broker, "t", options(1));
        for i in 0..10 {
            broker
                .produce("s", "t", 0, batch(None, &[&i.to_string()]))
                .await
                .unwrap();
        }
        let a = broker.join_group("s", "t", "g", "m1", None).unwrap();
        broker
            .commit_group_offset(&pb::CommitGroupOffsetRequest {
                stream: "s".into(),
                topic: "t".into(),
                group: "g".into(),
                member_id: "m1".into(),
                generation: a.generation,
                partition: 0,
                offset: 4,
            })
            .await
            .unwrap();
        broker.shutdown().unwrap();
        a.generation
    };
    let broker = Arc::new(Broker::open(config).unwrap());
    let a = broker.join_group("s", "t", "g", "m1", None).unwrap();
    assert!(a.generation > old_generation, "generations never repeat");
    assert_eq!(a.offsets[0].offset, Some(4));
    let stale = broker
        .commit_group_offset(&pb::CommitGroupOffsetRequest {
            stream: "s".into(),
            topic: "t".into(),
            group: "g".into(),
            member_id: "m1".into(),
            generation: old_generation,
            partition: 0,
            offset: 8,
        })
        .await;
    assert!(
        matches!(&stale, Err(e) if e.code() == ErrorCode::StaleGeneration),
        "{stale:?}"
    );
    assert_eq!(
        broker.describe_group("s", "t", "g").unwrap().partitions[0].stored_offset,
        Some(4)
    );
}

/// Found by the broker_open fuzz target: `Broker::open` trusted the names and options
/// in `catalog.json`, and created directories outside the data directory for a stream
/// named `../../escaped` (the reproducers are in fuzz/regressions/broker_open/).
#[test]
fn a_catalog_with_unsafe_names_or_invalid_options_is_refused() {
    let root = env!("CARGO_MANIFEST_DIR");
    for (file, escaped) in [
        ("catalog-stream-outside-data-dir.json", true),
        ("catalog-zero-partitions.json", false),
    ] {
        let path = format!("{root}/../../fuzz/regressions/broker_open/{file}");
        let catalog = std::fs::read(&path).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let data = scratch.path().join("a").join("b").join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("catalog.json"), &catalog).unwrap();
        let opened = Broker::open(BrokerConfig::new(&data));
        assert!(
            matches!(opened, Err(BrokerError::Catalog { .. })),
            "{file}: {opened:?}"
        );
        if escaped {
            assert!(
                !scratch.path().join("a").join("escaped").exists(),
                "{file}: nothing is created outside the data directory"
            );
        }
    }
}

/// A damaged batch in the middle of the offsets log: the stores in it are lost, every
/// other one is kept, and the broker still takes new stores (it would otherwise refuse
/// every consumer's commit, with no operator command to accept the loss). `at` is the
/// damaged byte within the second of three batches of equal length.
async fn damaged_offsets_log(at: impl Fn(usize) -> usize, keep_recovery_point: bool) {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::new(dir.path());
    {
        let broker = Arc::new(Broker::open(config.clone()).unwrap());
        create(&broker, "t", options(1));
        let values: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        broker
            .produce("s", "t", 0, batch(None, &values))
            .await
            .unwrap();
        for (i, consumer) in ["a", "b", "c"].iter().enumerate() {
            broker
                .store_offset("s", "t", 0, consumer, 10 + i as u64)
                .await
                .unwrap();
        }
        broker.shutdown().unwrap();
    }
    let offsets = dir.path().join("offsets");
    let seg = offsets.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    let len = bytes.len() / 3;
    bytes[len + at(len)] ^= 0x5a;
    std::fs::write(&seg, &bytes).unwrap();
    if !keep_recovery_point {
        std::fs::remove_file(offsets.join("recovery-point")).unwrap();
    }
    let broker = Arc::new(Broker::open(config.clone()).unwrap());
    let mut stored = broker.stored_offsets("s", "t");
    stored.sort();
    assert_eq!(
        stored,
        [(0, "a".to_owned(), 10), (0, "c".to_owned(), 12)],
        "the damaged store is lost, the later one kept"
    );
    broker
        .store_offset("s", "t", 0, "b", 21)
        .await
        .expect("a damaged offsets log still takes stores");
    broker
        .store_offset("s", "t", 0, "c", 22)
        .await
        .expect("a damaged offsets log still takes stores");
    broker.shutdown().unwrap();
    drop(broker);
    let again = Broker::open(config).unwrap();
    let mut stored = again.stored_offsets("s", "t");
    stored.sort();
    assert_eq!(
        stored,
        [
            (0, "a".to_owned(), 10),
            (0, "b".to_owned(), 21),
            (0, "c".to_owned(), 22)
        ],
        "the new stores survive a restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_offsets_batch_body_loses_only_its_stores() {
    // Below the recovery point, a body is not checked at open: the replay finds it.
    damaged_offsets_log(|len| len - 1, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_offsets_batch_header_loses_only_its_stores() {
    damaged_offsets_log(|_| 6, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_offsets_batch_without_a_recovery_point_loses_only_its_stores() {
    damaged_offsets_log(|len| len - 1, false).await;
}
