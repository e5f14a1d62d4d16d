//! The producer against an embedded broker that forgets producers: a one-slot producer
//! table (every other producer evicts it) that remembers two batches per producer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rill_broker::BrokerConfig;

use crate::{Client, Message, Producer};

/// Counts a lane's batches in flight (between taking a slot and ending the send), the
/// most there ever were, and every batch sent: the test seam for the per-partition
/// bound and for coalescing.
#[derive(Debug, Default)]
pub(super) struct InFlightSeen {
    now: AtomicUsize,
    most: AtomicUsize,
    batches: AtomicUsize,
}

impl InFlightSeen {
    pub(super) fn enter(&self) -> impl Drop + '_ {
        self.batches.fetch_add(1, Ordering::AcqRel);
        let now = self.now.fetch_add(1, Ordering::AcqRel) + 1;
        self.most.fetch_max(now, Ordering::AcqRel);
        Leave(self)
    }
}

struct Leave<'a>(&'a InFlightSeen);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::AcqRel);
    }
}

fn most_in_flight(producer: &Producer, partition: u32) -> usize {
    producer
        .core
        .lane(partition)
        .seen
        .most
        .load(Ordering::Acquire)
}

fn batches_sent(producer: &Producer, partition: u32) -> usize {
    producer
        .core
        .lane(partition)
        .seen
        .batches
        .load(Ordering::Acquire)
}

async fn forgetful_broker(dir: &std::path::Path) -> Client {
    let mut config = BrokerConfig::new(dir.join("data"));
    config.producers_per_partition_max = 1;
    config.producer_batches_remembered = 2;
    config.sequence_wait = Duration::from_millis(100);
    Client::builder().open_with(config).await.unwrap()
}

/// Issue 9: a producer the broker forgot (evicted by another) got UNKNOWN_PRODUCER_ID
/// for its next batch, and its send failed although nothing was stored. Now it starts
/// a new epoch and sends the batch again; every acknowledged record is stored once, in
/// order. And it keeps no more batches of a partition in flight than the broker
/// remembers (2 here, where it used to keep 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_producer_starts_a_new_epoch_and_stores_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let client = forgetful_broker(dir.path()).await;
    let t = client.stream("s").topic("t");
    t.ensure(1).await.unwrap();
    let producers = [
        t.producer().batch_length(10).build().await.unwrap(),
        t.producer().batch_length(10).build().await.unwrap(),
    ];
    let mut acknowledged = Vec::new();
    for round in 0..4 {
        for (name, producer) in ["a", "b"].iter().zip(&producers) {
            let messages: Vec<Message> = (0..50)
                .map(|i| Message::new(format!("{name}:{round}:{i:02}")))
                .collect();
            let values: Vec<String> = messages
                .iter()
                .map(|m| String::from_utf8(m.value.to_vec()).unwrap())
                .collect();
            let positions = producer.send_batch(messages).await.unwrap();
            assert_eq!(positions.len(), 50);
            acknowledged.extend(positions.into_iter().map(|p| p.offset).zip(values));
        }
    }
    let mut stored = Vec::new();
    let mut reader = t.records("check");
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        stored.push((r.offset, String::from_utf8(r.value.to_vec()).unwrap()));
    }
    acknowledged.sort();
    assert_eq!(
        stored, acknowledged,
        "every acknowledged record once, where it was acknowledged"
    );
    // Per producer, in the order sent.
    for name in ["a", "b"] {
        let mine: Vec<&String> = stored
            .iter()
            .map(|(_, v)| v)
            .filter(|v| v.starts_with(name))
            .collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
        assert_eq!(mine.len(), 200);
    }
    for producer in &producers {
        assert_eq!(
            most_in_flight(producer, 0),
            2,
            "pipelined, within what the broker remembers"
        );
    }
    for producer in producers {
        producer.shutdown().await.unwrap();
    }
    client.close().await.unwrap();
}

/// The producer's own bound wins when it is lower than the broker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_caps_the_batches_per_partition() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path().join("data")).await.unwrap();
    let t = client.stream("s").topic("t");
    t.ensure(1).await.unwrap();
    let capped = t
        .producer()
        .batch_length(1)
        .max_in_flight(3)
        .build()
        .await
        .unwrap();
    let default = t.producer().batch_length(1).build().await.unwrap();
    for producer in [&capped, &default] {
        let messages: Vec<Message> = (0..200).map(|i| Message::new(format!("{i}"))).collect();
        producer.send_batch(messages).await.unwrap();
    }
    assert_eq!(most_in_flight(&capped, 0), 3);
    assert_eq!(
        most_in_flight(&default, 0),
        5,
        "what the broker remembers by default"
    );
    client.close().await.unwrap();
}

/// A panic while a partition's sequence numbers were being changed leaves them in
/// doubt: sends to that partition fail rather than risk reusing a sequence (which the
/// broker would acknowledge as a duplicate without storing it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_fail_once_a_panic_left_the_sequence_numbers_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path().join("data")).await.unwrap();
    let t = client.stream("s").topic("t");
    t.ensure(2).await.unwrap();
    let producer = t.producer().build().await.unwrap();
    producer
        .send_to_partition(Message::new("before"), 0)
        .await
        .unwrap();
    let lane = producer.core.lane(0);
    let panicked = std::thread::scope(|s| {
        s.spawn(|| {
            let _held = lane.sequencer.as_ref().unwrap().lock();
            panic!("a bug while renumbering");
        })
        .join()
    });
    assert!(panicked.is_err());
    let err = producer
        .send_to_partition(Message::new("after"), 0)
        .await
        .unwrap_err();
    assert!(matches!(err, crate::ClientError::Poisoned { .. }), "{err}");
    // Other partitions are not affected.
    producer
        .send_to_partition(Message::new("elsewhere"), 1)
        .await
        .unwrap();
    client.close().await.unwrap();
}

/// With a linger of 0, sends that arrive before their partition could send go out
/// together: on one thread, the sends polled together all join before the lane's driver
/// runs, and make one batch. A lone sender after them gets a batch of its own at once.
#[tokio::test]
async fn with_no_linger_sends_that_arrive_before_the_lane_can_send_coalesce() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path().join("data")).await.unwrap();
    let t = client.stream("s").topic("t");
    t.ensure(1).await.unwrap();
    let producer = t.producer().build().await.unwrap();
    let sends = (0..20).map(|i| producer.send(Message::new(format!("{i}"))));
    let offsets: Vec<u64> = futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap().offset)
        .collect();
    assert_eq!(offsets, (0..20).collect::<Vec<u64>>());
    assert_eq!(batches_sent(&producer, 0), 1);
    let lone = producer.send(Message::new("lone")).await.unwrap().unwrap();
    assert_eq!(lone.offset, 20);
    assert_eq!(batches_sent(&producer, 0), 2);
    client.close().await.unwrap();
}

/// A lane holds at most `per_partition + 1` unsent batches: a non-idempotent producer
/// (one batch in flight) with one record per batch makes most of 100 concurrent senders
/// wait for room. Every one gets through, once, with its own offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_beyond_the_lanes_bound_wait_for_room_and_all_get_through() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::open(dir.path().join("data")).await.unwrap();
    let t = client.stream("s").topic("t");
    t.ensure(1).await.unwrap();
    let producer = std::sync::Arc::new(
        t.producer()
            .idempotence(false)
            .batch_length(1)
            .build()
            .await
            .unwrap(),
    );
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let producer = std::sync::Arc::clone(&producer);
            tokio::spawn(async move { producer.send(Message::new(format!("{i}"))).await })
        })
        .collect();
    let mut offsets = Vec::new();
    for task in tasks {
        offsets.push(task.await.unwrap().unwrap().unwrap().offset);
    }
    offsets.sort_unstable();
    assert_eq!(offsets, (0..100).collect::<Vec<u64>>());
    assert_eq!(most_in_flight(&producer, 0), 1);
    assert_eq!(batches_sent(&producer, 0), 100);
    client.close().await.unwrap();
}

/// Coalesced single sends keep the idempotent sequencing: with a broker that forgets
/// producers, many concurrent senders on two producers still store each acknowledged
/// record once, where it was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_to_a_forgetful_broker_store_each_acknowledged_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let client = forgetful_broker(dir.path()).await;
    let t = client.stream("s").topic("t");
    t.ensure(1).await.unwrap();
    let producers = [
        std::sync::Arc::new(t.producer().batch_length(4).build().await.unwrap()),
        std::sync::Arc::new(t.producer().batch_length(4).build().await.unwrap()),
    ];
    let mut tasks = Vec::new();
    for (name, producer) in ["a", "b"].into_iter().zip(&producers) {
        for sender in 0..16 {
            let producer = std::sync::Arc::clone(producer);
            tasks.push(tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0..10 {
                    let value = format!("{name}:{sender:02}:{i:02}");
                    let at = producer.send(Message::new(value.clone())).await;
                    acknowledged.push((at.unwrap().unwrap().offset, value));
                }
                acknowledged
            }));
        }
    }
    let mut acknowledged = Vec::new();
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }
    acknowledged.sort();
    let mut stored = Vec::new();
    let mut reader = t.records("check");
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        stored.push((r.offset, String::from_utf8(r.value.to_vec()).unwrap()));
    }
    assert_eq!(stored.len(), 320);
    assert_eq!(
        stored, acknowledged,
        "every acknowledged record once, where it was acknowledged"
    );
    // One sender's records, sent one after another, are stored in that order.
    for (name, sender) in [("a", 3), ("b", 11)] {
        let prefix = format!("{name}:{sender:02}:");
        let mine: Vec<&String> = stored
            .iter()
            .map(|(_, v)| v)
            .filter(|v| v.starts_with(&prefix))
            .collect();
        assert_eq!(mine.len(), 10);
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
    }
    for producer in &producers {
        assert!(
            most_in_flight(producer, 0) <= 2,
            "what the broker remembers"
        );
    }
    client.close().await.unwrap();
}
