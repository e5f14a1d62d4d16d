//! Broker behaviour without a network: idempotent producers (pipelining, retries,
//! restarts), catalog persistence, offsets.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_broker::{Broker, BrokerConfig, BrokerError, Fetch};
use rill_format::{BatchBuilder, BatchView, NewRecord, ProducerInfo, stamp};
use rill_proto::pb;

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

fn open(dir: &std::path::Path) -> Arc<Broker> {
    Arc::new(Broker::open(BrokerConfig::new(dir)).unwrap())
}

fn create(broker: &Broker, partitions: u32) {
    create_with(broker, partitions, pb::Durability::Unspecified);
}

/// The topic `s/t`, with a durability (`Unspecified`: the broker's default, `always`).
fn create_with(broker: &Broker, partitions: u32, durability: pb::Durability) {
    broker
        .create_topic(
            "s",
            "t",
            &pb::TopicOptions {
                partitions,
                durability: durability as i32,
                durability_interval_ms: (durability == pb::Durability::Interval).then_some(50),
                ..Default::default()
            },
            false,
            true,
        )
        .unwrap();
}

/// The durabilities an idempotent batch takes different paths under: `always` appends
/// on the blocking pool; `never` and `interval` inline on the caller's task, unless the
/// batch must wait for its predecessor.
const DURABILITIES: [pb::Durability; 3] = [
    pb::Durability::Always,
    pb::Durability::Never,
    pb::Durability::Interval,
];

/// The stored batches of `s/t` partition 0 from `offset`, up to 1 MiB, without waiting.
async fn read_now(broker: &Broker, offset: u64) -> Vec<u8> {
    let fetch = Fetch {
        offset,
        max_bytes: 1 << 20,
        max_wait: Duration::ZERO,
        min_bytes: 0,
    };
    broker.fetch("s", "t", 0, fetch).await.unwrap().bytes
}

/// The error code of a refused request; panics with `stored` if it was answered.
fn refusal(answer: rill_proto::Response, stored: &str) -> i32 {
    let rill_proto::Response::Err { error, .. } = answer else {
        panic!("{stored}: {answer:?}");
    };
    error.code
}

fn info(id: u64, epoch: u16, seq: u32) -> ProducerInfo {
    ProducerInfo {
        id,
        epoch,
        base_sequence: seq,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_batches_that_arrive_out_of_order_are_appended_in_sequence() {
    for durability in DURABILITIES {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path());
        create_with(&broker, 1, durability);
        let second = {
            let broker = Arc::clone(&broker);
            tokio::spawn(async move {
                broker
                    .produce("s", "t", 0, batch(Some(info(9, 0, 3)), &["d", "e"]))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !second.is_finished(),
            "{durability:?}: the second batch did not wait"
        );
        let first = broker
            .produce("s", "t", 0, batch(Some(info(9, 0, 0)), &["a", "b", "c"]))
            .await
            .unwrap();
        let second = second.await.unwrap().unwrap();
        assert_eq!(
            (first.base_offset, second.base_offset),
            (0, 3),
            "{durability:?}"
        );
        // A retry of either is acknowledged with its original offsets, appending nothing.
        for (seq, values, base) in [(3, &["d", "e"][..], 3), (0, &["a", "b", "c"][..], 0)] {
            let again = broker
                .produce("s", "t", 0, batch(Some(info(9, 0, seq)), values))
                .await
                .unwrap();
            assert!(again.duplicate, "{durability:?}");
            assert_eq!(again.base_offset, base, "{durability:?}");
        }
        // The next in sequence goes in after them.
        let next = broker
            .produce("s", "t", 0, batch(Some(info(9, 0, 5)), &["f"]))
            .await
            .unwrap();
        assert_eq!(
            (next.base_offset, next.duplicate),
            (5, false),
            "{durability:?}"
        );
        let (_, partitions) = broker.describe_topic("s", "t").unwrap();
        assert_eq!(partitions[0].next_offset, 6, "{durability:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_that_never_fills_is_out_of_order_and_a_stale_epoch_is_fenced() {
    for durability in DURABILITIES {
        let dir = tempfile::tempdir().unwrap();
        let mut config = BrokerConfig::new(dir.path());
        config.sequence_wait = Duration::from_millis(200);
        let broker = Arc::new(Broker::open(config).unwrap());
        create_with(&broker, 1, durability);
        broker
            .produce("s", "t", 0, batch(Some(info(5, 1, 0)), &["a"]))
            .await
            .unwrap();
        let err = broker
            .produce("s", "t", 0, batch(Some(info(5, 0, 1)), &["b"]))
            .await
            .unwrap_err();
        assert!(
            matches!(err, BrokerError::ProducerFenced { .. }),
            "{durability:?}: {err}"
        );
        let gap = broker.produce("s", "t", 0, batch(Some(info(5, 1, 7)), &["late"]));
        let err = gap.await.unwrap_err();
        assert!(
            matches!(
                err,
                BrokerError::OutOfOrderSequence {
                    expected: 1,
                    got: 7,
                    ..
                }
            ),
            "{durability:?}: {err}"
        );
        let (_, partitions) = broker.describe_topic("s", "t").unwrap();
        assert_eq!(partitions[0].next_offset, 1, "{durability:?}");
    }
}

/// Many idempotent producers pipelining into one partition at once, every batch sent
/// twice: each producer's records are stored once each, in its sequence order, under
/// every durability (inline appends and the blocking pool's interleave).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pipelined_producers_keep_their_order_and_store_each_batch_once() {
    const PRODUCERS: u64 = 4;
    const BATCHES: u32 = 40;
    const WINDOW: usize = 4;
    for durability in DURABILITIES {
        let dir = tempfile::tempdir().unwrap();
        // A batch that waits for its predecessor is woken when that one is appended,
        // not by its wait running out: far longer than the test is given.
        let mut config = BrokerConfig::new(dir.path());
        config.sequence_wait = Duration::from_secs(90);
        let broker = Arc::new(Broker::open(config).unwrap());
        create_with(&broker, 1, durability);
        // Each producer keeps up to WINDOW batches (and their copies) in flight, as a
        // pipelining client does: within the batches the broker remembers, so a copy
        // is always recognised.
        let mut producers = tokio::task::JoinSet::new();
        for id in 1..=PRODUCERS {
            let broker = Arc::clone(&broker);
            producers.spawn(async move {
                // Oldest first, so every batch in flight is within the last WINDOW.
                let mut in_flight = std::collections::VecDeque::new();
                let mut duplicates = 0u32;
                for seq in 0..BATCHES {
                    for _copy in 0..2 {
                        let broker = Arc::clone(&broker);
                        in_flight.push_back(tokio::spawn(async move {
                            let value = format!("{id}:{seq}");
                            broker
                                .produce("s", "t", 0, batch(Some(info(id, 0, seq)), &[&value]))
                                .await
                        }));
                    }
                    while in_flight.len() >= 2 * WINDOW {
                        let oldest = in_flight.pop_front().unwrap();
                        duplicates += u32::from(oldest.await.unwrap()?.duplicate);
                    }
                }
                for rest in in_flight {
                    duplicates += u32::from(rest.await.unwrap()?.duplicate);
                }
                Ok::<_, BrokerError>(duplicates)
            });
        }
        let mut duplicates = 0;
        let all = async {
            while let Some(joined) = producers.join_next().await {
                duplicates += joined
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{durability:?}: {e}"));
            }
        };
        tokio::time::timeout(Duration::from_secs(60), all)
            .await
            .unwrap_or_else(|_| {
                panic!("{durability:?}: a batch waited for a predecessor already appended")
            });
        let mut next = vec![0u32; PRODUCERS as usize + 1];
        let mut offset = 0;
        while offset < u64::from(BATCHES) * PRODUCERS {
            let read = read_now(&broker, offset).await;
            let mut rest = &read[..];
            while !rest.is_empty() {
                let view = BatchView::parse(rest).unwrap();
                for record in view.records() {
                    let text = std::str::from_utf8(record.value).unwrap();
                    let (id, seq) = text.split_once(':').unwrap();
                    let (id, seq): (usize, u32) = (id.parse().unwrap(), seq.parse().unwrap());
                    assert_eq!(seq, next[id], "{durability:?}: producer {id} out of order");
                    next[id] += 1;
                    offset += 1;
                }
                rest = &rest[view.as_bytes().len()..];
            }
        }
        assert!(
            next[1..].iter().all(|&n| n == BATCHES),
            "{durability:?}: {next:?}"
        );
        let (_, partitions) = broker.describe_topic("s", "t").unwrap();
        assert_eq!(
            partitions[0].next_offset,
            u64::from(BATCHES) * PRODUCERS,
            "{durability:?}"
        );
    }
}

/// docs/FORMAT.md §1: the broker does not check a producer's `base_offset` and
/// `first_timestamp_us` (beyond validation rules 6 and 7); it overwrites both, keeping
/// the span to `max_timestamp_us`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producers_base_offset_and_first_timestamp_are_overwritten_unchecked() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    create(&broker, 1);
    let mut b = BatchBuilder::new();
    b.push(NewRecord::value(b"a")).unwrap();
    b.push(NewRecord::value(b"b").timestamp_delta_us(250))
        .unwrap();
    let mut bytes = b.finish().unwrap();
    // As a careless producer might send it: a made-up offset and first timestamp,
    // with `max_timestamp_us` moved along (rule 6 still holds).
    stamp(&mut bytes, 1 << 40, -5_000_000).unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let produced = broker
        .produce("s", "t", 0, Bytes::from(bytes))
        .await
        .unwrap();
    assert_eq!((produced.base_offset, produced.last_offset), (0, 1));
    assert!(produced.timestamp_us >= before, "{produced:?}");
    let read = read_now(&broker, 0).await;
    let stored = BatchView::parse(&read).unwrap();
    assert_eq!(stored.base_offset(), 0);
    assert_eq!(stored.first_timestamp_us(), produced.timestamp_us);
    assert_eq!(stored.max_timestamp_us(), produced.timestamp_us + 250);
}

/// docs/FORMAT.md §1: producer id 0 is never issued, so an idempotent batch naming it is
/// refused on produce (`INVALID_BATCH`) and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_batch_with_producer_id_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    create(&broker, 1);
    let err = broker
        .produce("s", "t", 0, batch(Some(info(0, 0, 0)), &["a"]))
        .await
        .unwrap_err();
    assert!(matches!(err, BrokerError::ProducerIdZero), "{err}");
    assert_eq!(err.code(), rill_proto::ErrorCode::InvalidBatch);
    let (_, partitions) = broker.describe_topic("s", "t").unwrap();
    assert_eq!(partitions[0].next_offset, 0);
    // The same batch with an issued id goes in.
    broker
        .produce("s", "t", 0, batch(Some(info(1, 0, 0)), &["a"]))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_deduplicated_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        create(&broker, 2);
        for seq in 0..4u32 {
            broker
                .produce("s", "t", 1, batch(Some(info(77, 0, seq * 2)), &["x", "y"]))
                .await
                .unwrap();
        }
        broker.shutdown().unwrap();
    }
    let broker = open(dir.path());
    // The last batch is retried after the restart: acknowledged, not appended.
    let retry = broker
        .produce("s", "t", 1, batch(Some(info(77, 0, 6)), &["x", "y"]))
        .await
        .unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, 6);
    let next = broker
        .produce("s", "t", 1, batch(Some(info(77, 0, 8)), &["z"]))
        .await
        .unwrap();
    assert_eq!((next.base_offset, next.duplicate), (8, false));
    // Non-idempotent batches are simply appended.
    let plain = broker
        .produce("s", "t", 0, batch(None, &["p"]))
        .await
        .unwrap();
    assert_eq!(plain.base_offset, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_and_offsets_survive_a_restart_and_one_broker_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        create(&broker, 3);
        broker.store_offset("s", "t", 2, "reader", 0).await.unwrap();
        // A second broker on the same directory is refused.
        let err = Broker::open(BrokerConfig::new(dir.path())).unwrap_err();
        assert!(err.to_string().contains("another rill"), "{err}");
        broker.shutdown().unwrap();
    }
    let broker = open(dir.path());
    let (config, partitions) = broker.describe_topic("s", "t").unwrap();
    assert_eq!((config.partitions, partitions.len()), (3, 3));
    assert_eq!(broker.get_offset("s", "t", 2, "reader").unwrap(), Some(0));
    // Offsets beyond the end are refused; bad names too.
    assert!(broker.store_offset("s", "t", 2, "reader", 5).await.is_err());
    assert!(matches!(
        broker.store_offset("s", "t", 2, "bad name", 0).await,
        Err(BrokerError::InvalidName { .. })
    ));
    // Deleting the topic deletes its offsets and data.
    broker.delete_topic("s", "t").unwrap();
    create(&broker, 1);
    assert!(broker.get_offset("s", "t", 0, "reader").unwrap().is_none());
    let read = broker
        .fetch(
            "s",
            "t",
            0,
            Fetch {
                offset: 0,
                max_bytes: 1024,
                max_wait: Duration::ZERO,
                min_bytes: 1,
            },
        )
        .await
        .unwrap();
    assert!(read.bytes.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_assign_fence_commits_and_keep_offsets_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        create(&broker, 4);
        for p in 0..4 {
            broker
                .produce("s", "t", p, batch(None, &["a", "b"]))
                .await
                .unwrap();
        }
        let a = broker.join_group("s", "t", "g", "", None).unwrap();
        assert_eq!(a.owned, vec![0, 1, 2, 3]);
        let a_id = a.member_id.clone();
        // b joins: a must revoke two partitions before b gets them.
        let b = broker.join_group("s", "t", "g", "b", None).unwrap();
        assert!(b.owned.is_empty());
        let a = broker
            .group_heartbeat("s", "t", "g", &a_id, &[], &[])
            .unwrap();
        assert_eq!(a.revoke.len(), 2);
        // a commits what it read of a partition it is giving up, then lets go.
        let giving = a.revoke[0];
        broker
            .commit_group_offset(&commit(&a_id, a.generation, giving, 1))
            .await
            .unwrap();
        broker
            .group_heartbeat("s", "t", "g", &a_id, &a.revoke, &[])
            .unwrap();
        let b = broker
            .group_heartbeat("s", "t", "g", "b", &[], &[])
            .unwrap();
        assert_eq!(b.owned, a.revoke);
        let resumed = b.offsets.iter().find(|o| o.partition == giving).unwrap();
        assert_eq!(resumed.offset, Some(1), "b resumes where a committed");
        // a no longer owns those partitions: its commits there are refused.
        let err = broker
            .commit_group_offset(&commit(&a_id, b.generation, giving, 2))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                BrokerError::Group(rill_broker::GroupError::NotAssigned { .. })
            ),
            "{err}"
        );
        // a leaves: b owns everything at once.
        broker.leave_group("s", "t", "g", &a_id).unwrap();
        let b = broker
            .group_heartbeat("s", "t", "g", "b", &[], &[])
            .unwrap();
        assert_eq!(b.owned, vec![0, 1, 2, 3]);
        // The zombie cannot commit, heartbeat or leave again.
        let err = broker
            .commit_group_offset(&commit(&a_id, b.generation, 0, 1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                BrokerError::Group(rill_broker::GroupError::NotMember(_))
            ),
            "{err}"
        );
        assert!(
            broker
                .group_heartbeat("s", "t", "g", &a_id, &[], &[])
                .is_err()
        );
        let d = broker.describe_group("s", "t", "g").unwrap();
        assert_eq!(d.members.len(), 1);
        let p = d.partitions.iter().find(|p| p.partition == giving).unwrap();
        assert_eq!((p.stored_offset, p.log_end, p.lag), (Some(1), 2, 1));
        assert!(matches!(
            broker.describe_group("s", "t", "nobody"),
            Err(BrokerError::GroupNotFound(_))
        ));
        broker.shutdown().unwrap();
    }
    // After a restart the stored offsets are intact; members rejoin and resume there.
    let broker = open(dir.path());
    let d = broker.describe_group("s", "t", "g").unwrap();
    assert!(d.members.is_empty());
    let again = broker.join_group("s", "t", "g", "c", None).unwrap();
    let stored = again.offsets.iter().filter(|o| o.offset.is_some()).count();
    assert_eq!(stored, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_expires_and_its_partitions_move() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    create(&broker, 2);
    let session = Some(Duration::from_secs(1));
    let a = broker.join_group("s", "t", "g", "a", session).unwrap();
    assert_eq!(a.session_timeout_ms, 1000);
    broker.join_group("s", "t", "g", "b", session).unwrap();
    // b keeps heartbeating, a goes silent.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        broker
            .group_heartbeat("s", "t", "g", "b", &[], &[])
            .unwrap();
    }
    let b = broker
        .group_heartbeat("s", "t", "g", "b", &[], &[])
        .unwrap();
    assert_eq!(b.owned, vec![0, 1]);
    assert!(matches!(
        broker.group_heartbeat("s", "t", "g", "a", &[], &[]),
        Err(BrokerError::Group(rill_broker::GroupError::NotMember(_)))
    ));
}

fn commit(
    member: &str,
    generation: u64,
    partition: u32,
    offset: u64,
) -> pb::CommitGroupOffsetRequest {
    pb::CommitGroupOffsetRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: member.into(),
        generation,
        partition,
        offset,
    }
}

/// docs/FORMAT.md §3, "Batches built in-process": an embedded client hands the broker
/// the batch its builder made, which is appended without its records being checked
/// again, under every durability, and read back whole. The proof counts only for its
/// own bytes: a payload that merely came from a built batch (a corrupted copy) is
/// checked and refused, and the log's limits hold for built batches too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_batch_is_trusted_only_as_the_payload_it_is() {
    let produce = |partition| {
        rill_proto::RequestBody::Produce(pb::ProduceRequest {
            stream: "s".into(),
            topic: "t".into(),
            partition,
            ranged: false,
        })
    };
    let built = |values: &[&[u8]]| {
        let mut b = BatchBuilder::new();
        for v in values {
            b.push(NewRecord::value(v)).unwrap();
        }
        b.finish_built().unwrap()
    };
    for durability in DURABILITIES {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path());
        create_with(&broker, 1, durability);
        let first = built(&[b"a", b"bb"]);
        let request = rill_proto::Request::with_payload(produce(0), first.bytes().clone());
        let answer = broker.handle_built(request, first.clone()).await;
        let rill_proto::Response::Ok {
            body: rill_proto::ResponseBody::Produce(p),
            ..
        } = answer
        else {
            panic!("{durability:?}: {answer:?}");
        };
        assert_eq!((p.base_offset, p.last_offset), (0, 1), "{durability:?}");

        // A copy of a built batch with one record byte changed, sent with the proof of
        // the original: not the proof's bytes, so checked, and its checksum fails.
        let mut copy = first.bytes().to_vec();
        let last = copy.len() - 1;
        copy[last] ^= 0x01;
        let request = rill_proto::Request::with_payload(produce(0), Bytes::from(copy));
        let answer = broker.handle_built(request, first.clone()).await;
        assert_eq!(
            refusal(answer, "a corrupted copy was stored"),
            rill_proto::ErrorCode::InvalidBatch as i32,
            "{durability:?}"
        );

        let read = read_now(&broker, 0).await;
        let stored = BatchView::parse(&read).unwrap();
        assert_eq!(read.len(), stored.as_bytes().len(), "one batch");
        let values: Vec<&[u8]> = stored.records().map(|r| r.value).collect();
        assert_eq!(values, [&b"a"[..], &b"bb"[..]], "{durability:?}");
    }

    // The topic's record limit holds for a built batch as for any.
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    broker
        .create_topic(
            "s",
            "t",
            &pb::TopicOptions {
                partitions: 1,
                durability: pb::Durability::Never as i32,
                max_record_bytes: Some(64),
                ..Default::default()
            },
            false,
            true,
        )
        .unwrap();
    let big = built(&[b"small", &[7u8; 200]]);
    let request = rill_proto::Request::with_payload(produce(0), big.bytes().clone());
    let answer = broker.handle_built(request, big).await;
    assert_eq!(
        refusal(answer, "a record over the topic's limit was stored"),
        rill_proto::ErrorCode::RecordTooLarge as i32
    );
    let small = built(&[b"small"]);
    let request = rill_proto::Request::with_payload(produce(0), small.bytes().clone());
    assert!(matches!(
        broker.handle_built(request, small).await,
        rill_proto::Response::Ok { .. }
    ));
}
