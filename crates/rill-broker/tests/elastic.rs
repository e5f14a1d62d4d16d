//! Elastic topics on one node (docs/RANGES.md §3–§5), through `Broker::handle` as a
//! client sends requests and through the broker's own split and merge calls: a split
//! seals its parent at its end and opens its halves; a sealed range refuses appends
//! with `NOT_OWNER` after the idempotence check (a retried batch it took is still
//! acknowledged, a new one is refused at once); a merge; refusals; what survives a
//! reopen; and a crash at every operation of a split, on a simulated disk, recovering
//! to before or after it, never between.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rill_broker::{Broker, BrokerConfig};
use rill_format::{BatchBuilder, NewRecord, ProducerInfo};
use rill_proto::pb::{self, ErrorCode, ErrorResponse};
use rill_proto::{Request, RequestBody, Response, ResponseBody};
use rill_storage::Io;
use rill_storage::sim::{SimIo, SimRng};

fn batch(values: &[&str]) -> Bytes {
    let mut b = BatchBuilder::new();
    for v in values {
        b.push(NewRecord::value(v.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

fn idempotent(id: u64, sequence: u32, values: &[&str]) -> Bytes {
    let mut b = BatchBuilder::new();
    b.producer(ProducerInfo {
        id,
        epoch: 0,
        base_sequence: sequence,
    });
    for v in values {
        b.push(NewRecord::value(v.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

fn create(broker: &Arc<Broker>, ranges: u32, durability: pb::Durability) {
    broker
        .create_topic(
            "s",
            "t",
            &pb::TopicOptions {
                partitions: ranges,
                elastic: true,
                durability: durability as i32,
                ..Default::default()
            },
            false,
            true,
        )
        .unwrap();
}

async fn call(
    broker: &Arc<Broker>,
    body: RequestBody,
    payload: Bytes,
) -> Result<ResponseBody, ErrorResponse> {
    match broker.handle(Request::with_payload(body, payload)).await {
        Response::Ok { body, .. } => Ok(body),
        Response::Err { error, .. } => Err(error),
    }
}

fn code(e: &ErrorResponse) -> ErrorCode {
    ErrorCode::try_from(e.code).unwrap()
}

async fn produce(
    broker: &Arc<Broker>,
    partition: u32,
    ranged: bool,
    payload: Bytes,
) -> Result<pb::ProduceResponse, ErrorResponse> {
    let body = RequestBody::Produce(pb::ProduceRequest {
        stream: "s".into(),
        topic: "t".into(),
        partition,
        ranged,
    });
    match call(broker, body, payload).await {
        Ok(ResponseBody::Produce(r)) => Ok(r),
        Ok(other) => panic!("produce answered {other:?}"),
        Err(e) => Err(e),
    }
}

async fn describe(broker: &Arc<Broker>) -> pb::DescribeTopicResponse {
    let body = RequestBody::DescribeTopic(pb::DescribeTopicRequest {
        stream: "s".into(),
        topic: "t".into(),
    });
    match call(broker, body, Bytes::new()).await {
        Ok(ResponseBody::DescribeTopic(r)) => r,
        other => panic!("describe answered {other:?}"),
    }
}

/// A range as described: id, bounds, parents, seal.
type Described = (u32, u64, u64, Vec<u32>, Option<u64>);

fn bounds(d: &pb::DescribeTopicResponse) -> Vec<Described> {
    d.ranges
        .iter()
        .map(|r| (r.id, r.lo, r.hi, r.parents.clone(), r.sealed_at))
        .collect()
}

#[tokio::test]
async fn an_elastic_topic_starts_with_even_ranges_and_needs_ranged_produces() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    create(&broker, 2, pb::Durability::Never);
    let d = describe(&broker).await;
    assert!(d.options.as_ref().unwrap().elastic);
    assert_eq!(d.partitions.len(), 2);
    assert_eq!(d.range_epoch, 0);
    assert_eq!(
        bounds(&d),
        vec![
            (0, 0, (1 << 63) - 1, vec![], None),
            (1, 1 << 63, u64::MAX, vec![], None)
        ]
    );
    // A client that routes keys by `% partitions` cannot write to it.
    let e = produce(&broker, 0, false, batch(&["a"])).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidRequest);
    assert!(e.message.contains("elastic"), "{}", e.message);
    assert_eq!(
        produce(&broker, 0, true, batch(&["a"]))
            .await
            .unwrap()
            .base_offset,
        0
    );
    // Creating it again the same way is idempotent; as a plain topic it conflicts.
    let again = |elastic: bool, partitions: u32| {
        broker.create_topic(
            "s",
            "t",
            &pb::TopicOptions {
                partitions,
                elastic,
                durability: pb::Durability::Never as i32,
                ..Default::default()
            },
            true,
            false,
        )
    };
    assert!(!again(true, 2).unwrap().0);
    assert!(again(false, 2).is_err());
    assert!(again(true, 3).is_err());
    // It grows by splitting, not by adding partitions.
    let alter = RequestBody::AlterTopic(pb::AlterTopicRequest {
        stream: "s".into(),
        topic: "t".into(),
        partitions: Some(3),
        ..Default::default()
    });
    let e = call(&broker, alter, Bytes::new()).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidConfig);
    // A plain topic's produces need no flag, and it does not split.
    broker
        .create_topic("s", "plain", &pb::TopicOptions::default(), false, false)
        .unwrap();
    let e = broker.split_range("s", "plain", None, None).unwrap_err();
    assert!(e.to_string().contains("not an elastic topic"), "{e}");
}

#[tokio::test]
async fn a_split_seals_the_parent_at_its_end_and_the_children_take_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    create(&broker, 2, pb::Durability::Always);
    produce(&broker, 0, true, batch(&["a", "b", "c"]))
        .await
        .unwrap();
    // An idempotent producer's batch, appended before the split.
    let first = produce(&broker, 0, true, idempotent(77, 0, &["p0"]))
        .await
        .unwrap();
    assert_eq!(first.base_offset, 3);

    let change = broker.split_range("s", "t", Some(0), None).unwrap();
    assert_eq!(change.sealed, vec![(0, 4)]);
    assert_eq!(change.opened, vec![2, 3]);
    assert_eq!(change.epoch, 1);
    let d = describe(&broker).await;
    assert_eq!(d.range_epoch, 1);
    assert_eq!(d.partitions.len(), 4);
    assert_eq!(
        bounds(&d)[2..],
        [
            (2, 0, (1 << 62) - 1, vec![0], None),
            (3, 1 << 62, (1 << 63) - 1, vec![0], None)
        ]
    );
    assert_eq!(bounds(&d)[0].4, Some(4));

    // The sealed parent: a retry of a batch it took is acknowledged as before...
    let retry = produce(&broker, 0, true, idempotent(77, 0, &["p0"]))
        .await
        .unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, 3);
    // ...a new batch is refused, at once (it does not wait for anything), and so is
    // one whose predecessor never came.
    let started = std::time::Instant::now();
    for (sequence, payload) in [
        (1, idempotent(77, 1, &["p1"])),
        (5, idempotent(77, 5, &["p5"])),
    ] {
        let e = produce(&broker, 0, true, payload).await.unwrap_err();
        assert_eq!(
            code(&e),
            ErrorCode::NotOwner,
            "sequence {sequence}: {}",
            e.message
        );
        assert!(e.message.contains("sealed at offset 4"), "{}", e.message);
    }
    let e = produce(&broker, 0, true, batch(&["late"]))
        .await
        .unwrap_err();
    assert_eq!(code(&e), ErrorCode::NotOwner);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "a batch for a sealed range waited for its predecessor"
    );
    // Its records stay readable, up to the seal.
    let fetched = broker
        .fetch(
            "s",
            "t",
            0,
            rill_broker::Fetch {
                offset: 0,
                max_bytes: 1 << 20,
                max_wait: std::time::Duration::ZERO,
                min_bytes: 0,
            },
        )
        .await
        .unwrap();
    assert_eq!(fetched.next_offset, 4);
    // The children take appends from offset 0; the other initial range is untouched.
    assert_eq!(
        produce(&broker, 3, true, batch(&["x"]))
            .await
            .unwrap()
            .base_offset,
        0
    );
    assert_eq!(
        produce(&broker, 2, true, idempotent(77, 0, &["q"]))
            .await
            .unwrap()
            .base_offset,
        0
    );
    assert_eq!(
        produce(&broker, 1, true, batch(&["y"]))
            .await
            .unwrap()
            .base_offset,
        0
    );

    // A sealed range does not split again; bad points and ids are refused.
    for (range, at) in [(Some(0), None), (Some(9), None), (Some(2), Some(0))] {
        let e = broker.split_range("s", "t", range, at).unwrap_err();
        assert!(
            matches!(
                e.code(),
                ErrorCode::InvalidRequest | ErrorCode::PartitionNotFound
            ),
            "{range:?} {at:?}: {e}"
        );
    }
    assert_eq!(describe(&broker).await.range_epoch, 1);
}

/// A batch waiting for its predecessor when its range is sealed is answered
/// `NOT_OWNER` by the seal, not by its wait running out, whether it waits on the
/// blocking pool (`always`) or on its request's task (`never`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waiting_for_its_predecessor_is_answered_by_the_seal() {
    for durability in [pb::Durability::Always, pb::Durability::Never] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = BrokerConfig::new(dir.path());
        config.sequence_wait = std::time::Duration::from_secs(90);
        let broker = Arc::new(Broker::open(config).unwrap());
        create(&broker, 2, durability);
        produce(&broker, 0, true, idempotent(78, 0, &["p0"]))
            .await
            .unwrap();
        let waiting = {
            let broker = Arc::clone(&broker);
            tokio::spawn(async move { produce(&broker, 0, true, idempotent(78, 3, &["p3"])).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "{durability:?}: it did not wait");
        broker.split_range("s", "t", Some(0), None).unwrap();
        let answered = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
            .await
            .unwrap_or_else(|_| panic!("{durability:?}: the seal did not answer it"))
            .unwrap();
        let e = answered.unwrap_err();
        assert_eq!(
            code(&e),
            ErrorCode::NotOwner,
            "{durability:?}: {}",
            e.message
        );
        assert!(e.message.contains("sealed at offset 1"), "{}", e.message);
    }
}

#[tokio::test]
async fn merges_and_splits_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
        create(&broker, 2, pb::Durability::Never);
        produce(&broker, 1, true, batch(&["a", "b"])).await.unwrap();
        // Without a range: the busiest (range 1 holds the bytes).
        let split = broker.split_range("s", "t", None, None).unwrap();
        assert_eq!(split.sealed, vec![(1, 2)]);
        // Not neighbours: 0 and 3 (range 3 is the top half of 1).
        let e = broker.merge_ranges("s", "t", 0, 3).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest);
        let e = broker.merge_ranges("s", "t", 0, 1).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest, "{e}");
        produce(&broker, 2, true, batch(&["c"])).await.unwrap();
        let merged = broker.merge_ranges("s", "t", 2, 0).unwrap();
        assert_eq!(merged.sealed, vec![(0, 0), (2, 1)]);
        assert_eq!(merged.opened, vec![4]);
        broker.shutdown().unwrap();
    }
    let catalog = std::fs::read_to_string(dir.path().join("catalog.json")).unwrap();
    assert!(catalog.contains("\"version\": 2"), "{catalog}");
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    let d = describe(&broker).await;
    assert_eq!(d.range_epoch, 2);
    assert_eq!(
        bounds(&d),
        vec![
            (0, 0, (1 << 63) - 1, vec![], Some(0)),
            (1, 1 << 63, u64::MAX, vec![], Some(2)),
            (2, 1 << 63, (3 << 62) - 1, vec![1], Some(1)),
            (3, 3 << 62, u64::MAX, vec![1], None),
            (4, 0, (3 << 62) - 1, vec![0, 2], None),
        ]
    );
    for sealed in [0, 1, 2] {
        let e = produce(&broker, sealed, true, batch(&["z"]))
            .await
            .unwrap_err();
        assert_eq!(code(&e), ErrorCode::NotOwner, "range {sealed}");
    }
    assert_eq!(
        produce(&broker, 4, true, batch(&["z"]))
            .await
            .unwrap()
            .base_offset,
        0
    );
    assert_eq!(
        produce(&broker, 3, true, batch(&["z"]))
            .await
            .unwrap()
            .base_offset,
        0
    );
    assert!(d.partitions.iter().all(|p| p.failure.is_empty()));
}

#[tokio::test]
async fn a_sealed_range_whose_log_does_not_end_at_its_seal_opens_failed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
        create(&broker, 1, pb::Durability::Always);
        produce(&broker, 0, true, batch(&["a", "b"])).await.unwrap();
        broker.split_range("s", "t", Some(0), None).unwrap();
        broker.shutdown().unwrap();
    }
    // A catalog edited by hand (or restored from elsewhere) names another seal.
    let path = dir.path().join("catalog.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replacen("\"sealed_at\": 2", "\"sealed_at\": 1", 1);
    assert_ne!(text, edited);
    std::fs::write(&path, edited).unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    let d = describe(&broker).await;
    let failure = &d.partitions[0].failure;
    assert!(
        failure.contains("sealed at offset 1") && failure.contains("ends at 2"),
        "{failure:?}"
    );
    // Still never appended to.
    let e = produce(&broker, 0, true, batch(&["z"])).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::NotOwner);
}

/// The outcome a reopened broker shows: whether the split happened.
async fn split_happened(broker: &Arc<Broker>, acked: u64) -> bool {
    let d = describe(broker).await;
    assert!(d.partitions.iter().all(|p| p.failure.is_empty()), "{d:?}");
    let ranges = bounds(&d);
    // Every acknowledged record of range 0 is there (`always`).
    assert!(d.partitions[0].next_offset >= acked, "{d:?}");
    match ranges.len() {
        1 => {
            assert_eq!(d.range_epoch, 0);
            assert_eq!(ranges[0].4, None);
            // Appends resume where the log ends.
            let end = d.partitions[0].next_offset;
            let r = produce(broker, 0, true, batch(&["after"])).await.unwrap();
            assert_eq!(r.base_offset, end);
            false
        }
        3 => {
            assert_eq!(d.range_epoch, 1);
            assert_eq!(ranges[0].4, Some(d.partitions[0].next_offset));
            let e = produce(broker, 0, true, batch(&["after"]))
                .await
                .unwrap_err();
            assert_eq!(code(&e), ErrorCode::NotOwner);
            for child in [1, 2] {
                let r = produce(broker, child, true, batch(&["after"]))
                    .await
                    .unwrap();
                assert_eq!(r.base_offset, d.partitions[child as usize].next_offset);
            }
            true
        }
        n => panic!("{n} ranges after a split: between before and after"),
    }
}

/// A split of a range holding three records, with the disk dying after each of its
/// operations in turn; every crash recovered three ways.
async fn crash_every_step_of_a_split(durability: pb::Durability) {
    let dir = Path::new("/sim/data");
    let config = |io: &SimIo| {
        let mut c = BrokerConfig::new(dir);
        c.io = Arc::new(io.clone());
        c.reserved_space_bytes = 64 << 10;
        c
    };
    let mut outcomes = [0u32; 2];
    let mut rng = SimRng::new(17);
    let mut step = 0u64;
    loop {
        let io = SimIo::new(step);
        io.create_dir_all(Path::new("/sim")).unwrap();
        io.sync_dir(Path::new("/")).unwrap();
        let broker = Arc::new(Broker::open(config(&io)).unwrap());
        create(&broker, 1, durability);
        produce(&broker, 0, true, batch(&["a", "b", "c"]))
            .await
            .unwrap();
        io.crash_after(step);
        let result = broker.split_range("s", "t", Some(0), None);
        let finished = !io.crashed();
        if finished {
            result.as_ref().unwrap();
        }
        drop(broker);
        // The process killed, a clean power loss, a torn one: before or after, never
        // between; an acknowledged split is after. Under `never` a power loss may take
        // records that were never synced, but never ones a seal names (the split syncs
        // its parent before it commits: a sealed range's log ends exactly at its seal).
        let disks = [
            (io.process_crash(), 3),
            (
                io.power_loss_durable(),
                if durability == pb::Durability::Always {
                    3
                } else {
                    0
                },
            ),
            (
                io.power_loss(&mut rng),
                if durability == pb::Durability::Always {
                    3
                } else {
                    0
                },
            ),
        ];
        for (disk, acked) in disks {
            let broker = Arc::new(Broker::open(config(&disk)).unwrap());
            let after = split_happened(&broker, acked).await;
            if result.is_ok() {
                assert!(after, "step {step}: an acknowledged split was undone");
            }
            outcomes[usize::from(after)] += 1;
            // No directory of a child the catalog does not name is left.
            let topic = dir.join("streams/s/t");
            let entries = disk.read_dir(&topic).unwrap();
            let expected = if after { 3 } else { 1 };
            assert_eq!(entries.len(), expected, "step {step}: {entries:?}");
        }
        if finished {
            break;
        }
        step += 1;
        assert!(step < 500, "the split never finished");
    }
    // Both outcomes were reached, and the split took several operations to finish.
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
    assert!(step > 5, "{step}");
}

#[tokio::test]
async fn a_crash_at_any_step_of_a_split_recovers_to_before_or_after_it() {
    crash_every_step_of_a_split(pb::Durability::Always).await;
}

#[tokio::test]
async fn a_crash_at_any_step_of_a_split_of_a_never_topic_keeps_the_seal_true() {
    crash_every_step_of_a_split(pb::Durability::Never).await;
}

#[tokio::test]
async fn splits_and_merges_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    create(&broker, 1, pb::Durability::Never);
    produce(&broker, 0, true, batch(&["a", "b"])).await.unwrap();
    let split = |range: Option<u32>, at: Option<u64>| {
        RequestBody::SplitRange(pb::SplitRangeRequest {
            stream: "s".into(),
            topic: "t".into(),
            range,
            at,
        })
    };
    let change = match call(&broker, split(None, Some(1 << 60)), Bytes::new()).await {
        Ok(ResponseBody::SplitRange(r)) => r.change.unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(change.opened, vec![1, 2]);
    assert_eq!(change.epoch, 1);
    assert_eq!(
        (change.sealed[0].partition, change.sealed[0].offset),
        (0, Some(2))
    );
    assert_eq!(
        bounds(&describe(&broker).await)[1..],
        [
            (1, 0, (1 << 60) - 1, vec![0], None),
            (2, 1 << 60, u64::MAX, vec![0], None)
        ]
    );
    let merge = RequestBody::MergeRanges(pb::MergeRangesRequest {
        stream: "s".into(),
        topic: "t".into(),
        first: 2,
        second: 1,
    });
    let change = match call(&broker, merge, Bytes::new()).await {
        Ok(ResponseBody::MergeRanges(r)) => r.change.unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(change.opened, vec![3]);
    assert_eq!(change.epoch, 2);
    // Refusals, with their codes; none changes the map.
    for (body, want) in [
        (split(Some(0), None), ErrorCode::InvalidRequest), // sealed
        (split(Some(42), None), ErrorCode::PartitionNotFound),
        (split(Some(3), Some(0)), ErrorCode::InvalidRequest), // not inside
        (
            RequestBody::SplitRange(pb::SplitRangeRequest {
                stream: "s".into(),
                topic: "nope".into(),
                range: None,
                at: None,
            }),
            ErrorCode::TopicNotFound,
        ),
        (
            RequestBody::MergeRanges(pb::MergeRangesRequest {
                stream: "s".into(),
                topic: "t".into(),
                first: 3,
                second: 3,
            }),
            ErrorCode::InvalidRequest,
        ),
    ] {
        let e = call(&broker, body, Bytes::new()).await.unwrap_err();
        assert_eq!(code(&e), want, "{}", e.message);
    }
    assert_eq!(describe(&broker).await.range_epoch, 2);
}

/// The automatic policy (docs/RANGES.md §7), ticked by hand at chosen instants with real
/// appends between them: a range written above the threshold for a whole window splits
/// at its middle (once per window, not while its children are young); a dip in one
/// interval holds it off; ranges cold for a window merge back to the initial count and
/// no further; turning the policy off stops it.
#[tokio::test]
async fn the_automatic_policy_splits_a_hot_range_and_merges_cold_ones() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    broker
        .create_topic(
            "s",
            "t",
            &pb::TopicOptions {
                partitions: 2,
                elastic: true,
                durability: pb::Durability::Never as i32,
                auto_split: Some(2_000),
                auto_split_window_ms: Some(3_000),
                auto_split_cooldown_ms: Some(6_000),
                ..Default::default()
            },
            false,
            true,
        )
        .unwrap();
    let options = describe(&broker).await.options.unwrap();
    assert_eq!(
        (
            options.auto_split,
            options.auto_split_window_ms,
            options.auto_split_cooldown_ms
        ),
        (Some(2_000), Some(3_000), Some(6_000))
    );
    let value = "x".repeat(1_000);
    // About 3 KB a second into `range` (three records of 1 KB and the batch framing).
    let write = |range: u32| {
        let broker = Arc::clone(&broker);
        let value = value.clone();
        async move {
            produce(&broker, range, true, batch(&[&value, &value, &value]))
                .await
                .unwrap();
        }
    };
    let t0 = std::time::Instant::now();
    let at = |s: u64| t0 + std::time::Duration::from_secs(s);
    let epoch = |d: &pb::DescribeTopicResponse| d.range_epoch;
    // Range 0 hot for 3 s but for a dip at the second interval: no split.
    assert!(broker.range_policy_tick(at(0)).is_empty());
    write(0).await;
    assert!(broker.range_policy_tick(at(1)).is_empty());
    assert!(broker.range_policy_tick(at(2)).is_empty());
    write(0).await;
    assert!(broker.range_policy_tick(at(3)).is_empty());
    // Hot over the whole window from t=2 (the dip was before it): split at its middle.
    write(0).await;
    assert!(broker.range_policy_tick(at(4)).is_empty());
    write(0).await;
    let made = broker.range_policy_tick(at(5));
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0].2.sealed.len(), 1);
    assert_eq!(made[0].2.sealed[0].0, 0);
    assert_eq!(made[0].2.opened, vec![2, 3]);
    // The children stay hot, but are young (a 6 s cooldown): nothing before t=11, then
    // one of them splits.
    let mut s = 6;
    let made = loop {
        write(2).await;
        write(3).await;
        let made = broker.range_policy_tick(at(s));
        if !made.is_empty() {
            break made;
        }
        s += 1;
        assert!(s < 20, "no second split");
    };
    assert!(s >= 11, "a child split at {s}, younger than the cooldown");
    assert_eq!(made.len(), 1, "{made:?}");
    assert!([2, 3].contains(&made[0].2.sealed[0].0), "{made:?}");
    assert_eq!(epoch(&describe(&broker).await), 2);
    let open =
        |d: &pb::DescribeTopicResponse| d.ranges.iter().filter(|r| r.sealed_at.is_none()).count();
    assert_eq!(open(&describe(&broker).await), 4);
    // All cold from now on: merges, one per window once ranges are old, back to the
    // initial two ranges and no further.
    let mut s = s + 1;
    while open(&describe(&broker).await) > 2 {
        broker.range_policy_tick(at(s));
        s += 1;
        assert!(
            s < 60,
            "still {} open ranges",
            open(&describe(&broker).await)
        );
    }
    for later in s..s + 20 {
        assert!(broker.range_policy_tick(at(later)).is_empty());
    }
    let d = describe(&broker).await;
    assert_eq!(open(&d), 2);
    assert!(d.range_epoch >= 4, "{}", d.range_epoch);

    // Off: a hot range stays as it is. A plain topic refuses the policy.
    let alter = |auto_split: Option<u64>, topic: &str| pb::AlterTopicRequest {
        stream: "s".into(),
        topic: topic.into(),
        auto_split: Some(pb::LimitChange { value: auto_split }),
        ..Default::default()
    };
    call(
        &broker,
        RequestBody::AlterTopic(alter(None, "t")),
        Bytes::new(),
    )
    .await
    .unwrap();
    let before = describe(&broker).await.range_epoch;
    let hot = describe(&broker)
        .await
        .ranges
        .iter()
        .find(|r| r.sealed_at.is_none())
        .unwrap()
        .id;
    for later in s + 20..s + 30 {
        write(hot).await;
        broker.range_policy_tick(at(later));
    }
    assert_eq!(describe(&broker).await.range_epoch, before);
    broker
        .create_topic("s", "plain", &pb::TopicOptions::default(), false, true)
        .unwrap();
    let e = call(
        &broker,
        RequestBody::AlterTopic(alter(Some(1_000), "plain")),
        Bytes::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidConfig, "{e:?}");
    assert!(e.message.contains("elastic"), "{e:?}");
    for (rate, window, cooldown) in [
        (Some(0), None, None),
        (Some(1), Some(10), None),
        (Some(1), Some(5_000), Some(6_000)),
        (None, Some(5_000), None),
    ] {
        let e = broker
            .create_topic(
                "s",
                "bad",
                &pb::TopicOptions {
                    elastic: true,
                    auto_split: rate,
                    auto_split_window_ms: window,
                    auto_split_cooldown_ms: cooldown,
                    ..Default::default()
                },
                false,
                true,
            )
            .unwrap_err();
        assert!(e.to_string().contains("auto_split"), "{e}");
    }
}

async fn group_call(
    broker: &Arc<Broker>,
    body: RequestBody,
) -> Result<pb::GroupAssignment, ErrorCode> {
    match call(broker, body, Bytes::new()).await {
        Ok(ResponseBody::JoinGroup(r)) => Ok(r.assignment.unwrap()),
        Ok(ResponseBody::GroupHeartbeat(r)) => Ok(r.assignment.unwrap()),
        Ok(ResponseBody::CommitGroupOffset(_)) => Ok(pb::GroupAssignment::default()),
        Ok(other) => panic!("answered {other:?}"),
        Err(e) => Err(code(&e)),
    }
}

fn join(member: &str) -> RequestBody {
    RequestBody::JoinGroup(pb::JoinGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
        session_timeout_ms: None,
        create_group: None,
    })
}

fn heartbeat(member: &str, revoked: &[u32]) -> RequestBody {
    RequestBody::GroupHeartbeat(pb::GroupHeartbeatRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
        revoked: revoked.to_vec(),
        metrics: Vec::new(),
    })
}

fn commit(member: &str, generation: u64, partition: u32, offset: u64) -> RequestBody {
    RequestBody::CommitGroupOffset(pb::CommitGroupOffsetRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
        generation,
        partition,
        offset,
    })
}

/// Owned ranges, and the seals the assignment names.
fn owned(a: &pb::GroupAssignment) -> (Vec<u32>, Vec<(u32, u64)>) {
    (
        a.owned.clone(),
        a.sealed
            .iter()
            .map(|o| (o.partition, o.offset.unwrap()))
            .collect(),
    )
}

/// A consumer group over an elastic topic (docs/RANGES.md §6.3), driven by hand: the
/// group is given only the ranges that are ready and not finished for it; a split's
/// children wait until the group stores the parent's seal; a range sealed empty is
/// finished at once; a merge's child waits for both parents; a second member shares
/// what is ready; the set survives a reopen through the stored offsets.
#[tokio::test]
async fn a_group_is_given_a_child_only_once_it_stored_the_parents_seal() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    create(&broker, 2, pb::Durability::Always);
    produce(&broker, 0, true, batch(&["a", "b", "c"]))
        .await
        .unwrap();
    let a = group_call(&broker, join("m")).await.unwrap();
    assert_eq!(owned(&a), (vec![0, 1], vec![]));

    // Range 0 splits at offset 3 into 2 and 3: the member keeps 0, now told its seal;
    // the children are not the group's yet.
    broker.split_range("s", "t", Some(0), None).unwrap();
    let a = group_call(&broker, heartbeat("m", &[])).await.unwrap();
    assert_eq!(owned(&a), (vec![0, 1], vec![(0, 3)]));
    assert_eq!(
        group_call(&broker, commit("m", a.generation, 2, 0)).await,
        Err(ErrorCode::NotAssigned)
    );
    // Stored short of the seal: still not finished.
    group_call(&broker, commit("m", a.generation, 0, 2))
        .await
        .unwrap();
    let a = group_call(&broker, heartbeat("m", &[])).await.unwrap();
    assert_eq!(owned(&a).0, vec![0, 1]);
    // The seal stored: 0 is asked back and its children handed out at once.
    group_call(&broker, commit("m", a.generation, 0, 3))
        .await
        .unwrap();
    let a = group_call(&broker, heartbeat("m", &[])).await.unwrap();
    assert_eq!(a.revoke, vec![0]);
    assert_eq!(owned(&a), (vec![0, 1, 2, 3], vec![(0, 3)]));
    let a = group_call(&broker, heartbeat("m", &[0])).await.unwrap();
    assert_eq!(owned(&a), (vec![1, 2, 3], vec![]));

    // Range 1 never took a record: split, it is sealed at 0 and finished at once.
    broker.split_range("s", "t", Some(1), None).unwrap();
    let a = group_call(&broker, heartbeat("m", &[])).await.unwrap();
    assert_eq!(a.revoke, vec![1]);
    let a = group_call(&broker, heartbeat("m", &[1])).await.unwrap();
    assert_eq!(owned(&a), (vec![2, 3, 4, 5], vec![]));

    // 3 and 4 are neighbours (the middle of the key space): merged into 6, which
    // waits for both. 3 has records, 4 none: 4 finishes at once, 3 when stored.
    let d = describe(&broker).await;
    let (r3, r4) = (&d.ranges[3], &d.ranges[4]);
    assert_eq!(r3.hi + 1, r4.lo, "{:?}", bounds(&d));
    produce(&broker, 3, true, batch(&["x"])).await.unwrap();
    broker.merge_ranges("s", "t", 3, 4).unwrap();
    let a = group_call(&broker, heartbeat("m", &[])).await.unwrap();
    assert_eq!(a.revoke, vec![4]);
    let a = group_call(&broker, heartbeat("m", &[4])).await.unwrap();
    assert_eq!(owned(&a), (vec![2, 3, 5], vec![(3, 1)]));

    // A second member: the ready ranges are shared, balanced.
    let b = group_call(&broker, join("n")).await.unwrap();
    let a = group_call(&broker, heartbeat("m", &[])).await.unwrap();
    let give: Vec<u32> = a.revoke.clone();
    assert_eq!(give.len(), 1, "{a:?}");
    let a = group_call(&broker, heartbeat("m", &give)).await.unwrap();
    let b = group_call(&broker, heartbeat(&b.member_id, &[]))
        .await
        .unwrap();
    assert_eq!(a.owned.len() + b.owned.len(), 3);
    // Whoever owns 3 stores its seal; 6 then goes to one of them.
    let (owner, generation) = if a.owned.contains(&3) {
        ("m", a.generation)
    } else {
        (b.member_id.as_str(), b.generation)
    };
    group_call(&broker, commit(owner, generation, 3, 1))
        .await
        .unwrap();
    let x = group_call(&broker, heartbeat(owner, &[])).await.unwrap();
    assert_eq!(x.revoke, vec![3]);
    group_call(&broker, heartbeat(owner, &[3])).await.unwrap();
    let a = group_call(&broker, heartbeat("m", &[])).await.unwrap();
    let b = group_call(&broker, heartbeat(&b.member_id, &[]))
        .await
        .unwrap();
    let mut all: Vec<u32> = a.owned.iter().chain(&b.owned).copied().collect();
    all.sort_unstable();
    assert_eq!(all, vec![2, 5, 6]);

    // After a reopen, the stored seals say the same: 0, 1, 3 and 4 are finished.
    drop(broker);
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    let a = group_call(&broker, join("m")).await.unwrap();
    assert_eq!(owned(&a), (vec![2, 5, 6], vec![]));
}

fn keyed(keys: &[&str]) -> Bytes {
    let mut b = BatchBuilder::new();
    for k in keys {
        b.push(NewRecord::value(b"v").key(k.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

/// A key whose hash its range does not cover, and the range that does.
fn keys_of(ranges: &[(u64, u64)], range: usize) -> (String, String) {
    let (lo, hi) = ranges[range];
    let inside = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| (lo..=hi).contains(&rill_proto::ranges::key_hash(k.as_bytes())))
        .unwrap();
    let outside = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| !(lo..=hi).contains(&rill_proto::ranges::key_hash(k.as_bytes())))
        .unwrap();
    (inside, outside)
}

/// A ranged produce whose batch holds a key its range does not cover is refused whole
/// (`INVALID_REQUEST`, nothing appended): a range's bounds never change, so the record
/// was routed wrong, and storing it would put a key's records in two ranges read
/// independently. Keys it covers and unkeyed records are taken.
#[tokio::test]
async fn a_ranged_produce_of_a_key_outside_its_range_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    create(&broker, 2, pb::Durability::Never);
    let d = describe(&broker).await;
    let ranges: Vec<(u64, u64)> = d.ranges.iter().map(|r| (r.lo, r.hi)).collect();
    let (inside, outside) = keys_of(&ranges, 0);
    produce(&broker, 0, true, keyed(&[&inside, &inside]))
        .await
        .unwrap();
    produce(&broker, 0, true, batch(&["unkeyed"]))
        .await
        .unwrap();
    let e = produce(&broker, 0, true, keyed(&[&inside, &outside, &inside]))
        .await
        .unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidRequest, "{e:?}");
    assert!(e.message.contains("outside range 0"), "{}", e.message);
    // Nothing of the refused batch was appended.
    assert_eq!(describe(&broker).await.partitions[0].next_offset, 3);
    // The key goes to the other range, which covers it.
    produce(&broker, 1, true, keyed(&[&outside])).await.unwrap();
    // After a split, a child's bounds are checked the same way.
    broker.split_range("s", "t", Some(1), None).unwrap();
    let d = describe(&broker).await;
    let ranges: Vec<(u64, u64)> = d.ranges.iter().map(|r| (r.lo, r.hi)).collect();
    let (inside, outside) = keys_of(&ranges, 2);
    produce(&broker, 2, true, keyed(&[&inside])).await.unwrap();
    let e = produce(&broker, 2, true, keyed(&[&outside]))
        .await
        .unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidRequest, "{e:?}");
}
