//! The producer coalesces (issue 10, item 3), over both transports: concurrent
//! direct-mode sends share batches, `batching()` batches in the caller's task, and a
//! key is never empty nor combined with an explicit partition, in any write path.
//!
//! Batch boundaries are read from a partition's size: a stored batch is a fixed header
//! plus its records (docs/FORMAT.md), and both sizes are measured on a scratch topic.

#[macro_use]
mod common;

use std::time::Duration;

use futures::FutureExt;
use rill_client::{
    Background, Client, ClientError, ErrorCode, Message, Position, Routing, Topic, TopicOptions,
};

over_both_transports!(
    concurrent_sends_within_the_linger_share_one_batch,
    batch_length_splits_coalesced_sends_and_flush_sends_a_lingering_batch,
    an_error_reaches_every_caller_of_the_failing_batch,
    a_dropped_send_still_goes_out_with_its_batch,
    batching_sends_when_full_on_flush_and_after_the_linger_at_the_next_call,
    a_failed_batching_send_is_returned_by_the_call_that_sent_it,
    a_key_and_an_explicit_partition_are_an_error_in_every_write_path,
    an_empty_key_is_an_error_in_every_write_path,
);

/// A long linger: long enough that a test never depends on its passing.
const LONG: Duration = Duration::from_secs(60);

async fn topic(client: &Client, name: &str, partitions: u32) -> Topic {
    let t = client.stream("sdkp").topic(name);
    t.ensure(partitions).await.unwrap();
    t
}

/// Values of one length, so every record has one size.
fn value(i: usize) -> String {
    format!("v{i:04}")
}

/// The bytes of a batch header and of one record holding a [`value`], as stored.
struct Sizes {
    header: u64,
    record: u64,
}

impl Sizes {
    async fn measure(client: &Client, name: &str) -> Self {
        let t = topic(client, name, 1).await;
        t.publish().value(value(0)).send().await.unwrap();
        let one = size(&t, 0).await;
        t.publish_batch([Message::new(value(1)), Message::new(value(2))])
            .await
            .unwrap();
        let two = size(&t, 0).await - one;
        Self {
            header: 2 * one - two,
            record: two - one,
        }
    }

    /// Batches holding `records` records of `partition` (fewer than 128 per batch, so a
    /// record's offset delta takes one byte whatever its place).
    async fn batches(&self, t: &Topic, partition: u32, records: u64) -> u64 {
        let bytes = size(t, partition).await - records * self.record;
        assert_eq!(bytes % self.header, 0, "whole batches");
        bytes / self.header
    }
}

async fn size(t: &Topic, partition: u32) -> u64 {
    t.describe().await.unwrap().partitions[partition as usize].size_bytes
}

async fn stored_values(t: &Topic, partition: u32) -> Vec<String> {
    let fetched = t
        .fetch(Position::new(partition, 0), 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    fetched
        .records
        .iter()
        .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
        .collect()
}

/// Sixteen sends polled together with a linger go out as one batch; balanced, they all
/// join one partition's batch, and each caller gets its own record's position.
async fn concurrent_sends_within_the_linger_share_one_batch(client: &Client) {
    let sizes = Sizes::measure(client, "linger-sizes").await;
    let t = topic(client, "linger", 2).await;
    let producer = t
        .producer()
        .linger(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let sends = (0..16).map(|i| producer.send(Message::new(value(i))));
    let positions: Vec<Position> = futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    let p = positions[0].partition;
    let expected: Vec<Position> = (0..16)
        .map(|offset| Position {
            partition: p,
            offset,
        })
        .collect();
    assert_eq!(positions, expected, "one partition, a position per caller");
    assert_eq!(sizes.batches(&t, p, 16).await, 1);
    let values: Vec<String> = (0..16).map(value).collect();
    assert_eq!(
        stored_values(&t, p).await,
        values,
        "each record where its caller was told"
    );
    producer.shutdown().await.unwrap();
}

/// Ten sends joined with a batch length of 4: two full batches go at once, and the
/// third, lingering, goes on `flush`.
async fn batch_length_splits_coalesced_sends_and_flush_sends_a_lingering_batch(client: &Client) {
    let sizes = Sizes::measure(client, "split-sizes").await;
    let t = topic(client, "split", 1).await;
    let producer = t
        .producer()
        .batch_length(4)
        .linger(LONG)
        .build()
        .await
        .unwrap();
    let sends = futures::future::join_all((0..10).map(|i| producer.send(Message::new(value(i)))));
    // `join!` polls the sends first, so all ten joined before the flush starts.
    let (results, ()) = tokio::join!(sends, async {
        producer.flush().await.unwrap();
    });
    let offsets: Vec<u64> = results
        .into_iter()
        .map(|r| r.unwrap().unwrap().offset)
        .collect();
    assert_eq!(offsets, (0..10).collect::<Vec<u64>>());
    assert_eq!(sizes.batches(&t, 0, 10).await, 3, "4 + 4 + 2");
    producer.shutdown().await.unwrap();
}

/// One record too large for the topic fails its whole batch: every caller in the batch
/// gets the broker's error, nothing of it is stored, and the producer goes on.
async fn an_error_reaches_every_caller_of_the_failing_batch(client: &Client) {
    let t = client.stream("sdkp").topic("failing");
    t.create_with(
        &TopicOptions {
            partitions: Some(1),
            max_record_bytes: Some(1024),
            ..TopicOptions::default()
        },
        false,
    )
    .await
    .unwrap();
    let producer = t
        .producer()
        .batch_length(5)
        .linger(LONG)
        .build()
        .await
        .unwrap();
    let messages = (0..5).map(|i| match i {
        2 => Message::new(vec![b'x'; 4000]),
        _ => Message::new(value(i)),
    });
    let results = futures::future::join_all(messages.map(|m| producer.send(m))).await;
    for (i, r) in results.into_iter().enumerate() {
        let err = r.unwrap_err();
        assert_eq!(
            err.code(),
            Some(ErrorCode::RecordTooLarge),
            "caller {i}: {err}"
        );
    }
    assert_eq!(t.end_offset(0).await.unwrap(), 0);
    let (after, ()) = tokio::join!(producer.send(Message::new("after")), async {
        producer.flush().await.unwrap();
    });
    assert_eq!(after.unwrap().unwrap().offset, 0);
    assert_eq!(stored_values(&t, 0).await, ["after"]);
    producer.shutdown().await.unwrap();
}

/// A caller that drops its send once the record joined a batch does not take the
/// record back, nor cancel the batch the others wait on.
async fn a_dropped_send_still_goes_out_with_its_batch(client: &Client) {
    let t = topic(client, "dropped", 1).await;
    let producer = t.producer().linger(LONG).build().await.unwrap();
    let mut dropped = Box::pin(producer.send(Message::new("dropped")));
    assert!(
        (&mut dropped).now_or_never().is_none(),
        "it waits for the linger"
    );
    drop(dropped);
    let (kept, ()) = tokio::join!(producer.send(Message::new("kept")), async {
        producer.flush().await.unwrap();
    });
    assert_eq!(kept.unwrap().unwrap().offset, 1);
    assert_eq!(stored_values(&t, 0).await, ["dropped", "kept"]);
    producer.shutdown().await.unwrap();
}

async fn batching_sends_when_full_on_flush_and_after_the_linger_at_the_next_call(client: &Client) {
    let sizes = Sizes::measure(client, "batching-sizes").await;
    let t = topic(client, "batching", 1).await;
    let mut full = t
        .batching()
        .batch_length(3)
        .linger(LONG)
        .build()
        .await
        .unwrap();
    for i in 0..2 {
        full.send(Message::new(value(i))).await.unwrap();
    }
    assert_eq!((full.buffered(), t.end_offset(0).await.unwrap()), (2, 0));
    // The third fills the batch: the call sends it.
    full.send(Message::new(value(2))).await.unwrap();
    assert_eq!((full.buffered(), t.end_offset(0).await.unwrap()), (0, 3));
    full.send(Message::new(value(3))).await.unwrap();
    assert_eq!(t.end_offset(0).await.unwrap(), 3);
    full.flush().await.unwrap();
    assert_eq!((full.buffered(), t.end_offset(0).await.unwrap()), (0, 4));
    full.send(Message::new(value(4))).await.unwrap();
    full.close().await.unwrap();
    assert_eq!(t.end_offset(0).await.unwrap(), 5, "close flushes");
    assert_eq!(sizes.batches(&t, 0, 5).await, 3, "3 + 1 + 1");

    // No timer: a batch that lingered long enough goes out with the next call.
    let linger = Duration::from_millis(50);
    let mut lingering = t.batching().linger(linger).build().await.unwrap();
    lingering.send(Message::new(value(5))).await.unwrap();
    tokio::time::sleep(linger * 2).await;
    assert_eq!(
        t.end_offset(0).await.unwrap(),
        5,
        "nothing is sent between calls"
    );
    lingering.send(Message::new(value(6))).await.unwrap();
    assert_eq!(
        (lingering.buffered(), t.end_offset(0).await.unwrap()),
        (0, 7)
    );
    assert_eq!(
        sizes.batches(&t, 0, 7).await,
        4,
        "the two records in one batch"
    );
    lingering.close().await.unwrap();
    let values: Vec<String> = (0..7).map(value).collect();
    assert_eq!(stored_values(&t, 0).await, values);
}

/// The call that sends a batch returns its error, typed as the broker said it; the
/// records of the failed batch are not kept, and later calls go on.
async fn a_failed_batching_send_is_returned_by_the_call_that_sent_it(client: &Client) {
    let t = topic(client, "batching-fails", 2).await;
    let mut broken = t
        .batching()
        .routing(Routing::Partition(9))
        .build()
        .await
        .unwrap();
    broken.send(Message::new("lost")).await.unwrap();
    let err = broken.flush().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PartitionNotFound), "{err}");
    assert_eq!(broken.buffered(), 0);
    broken.flush().await.unwrap();
    let mut full = t
        .batching()
        .routing(Routing::Partition(9))
        .batch_length(2)
        .build()
        .await
        .unwrap();
    full.send(Message::new("a")).await.unwrap();
    let err = full.send(Message::new("b")).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PartitionNotFound), "{err}");
    full.close().await.unwrap();
}

fn invalid(what: &str, result: Result<impl std::fmt::Debug, ClientError>, says: &str) {
    match result {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains(says), "{what}: {m}"),
        other => panic!("{what}: {other:?}"),
    }
}

async fn a_key_and_an_explicit_partition_are_an_error_in_every_write_path(client: &Client) {
    let t = topic(client, "key-and-partition", 2).await;
    let says = "a key or an explicit partition";
    let keyed = || Message::new("v").with_key("k");
    invalid(
        "publish key then partition",
        t.publish().key("k").partition(1).value("v").send().await,
        says,
    );
    invalid(
        "publish partition then key",
        t.publish().partition(1).key("k").value("v").send().await,
        says,
    );
    let producer = t.producer().build().await.unwrap();
    invalid(
        "send_to_partition",
        producer.send_to_partition(keyed(), 1).await,
        says,
    );
    let fixed = t
        .producer()
        .routing(Routing::Partition(1))
        .build()
        .await
        .unwrap();
    invalid("send, partition routing", fixed.send(keyed()).await, says);
    invalid(
        "send_keyed, partition routing",
        fixed.send_keyed(Message::new("v"), "k").await,
        says,
    );
    invalid(
        "send_batch, partition routing",
        fixed.send_batch(vec![Message::new("v"), keyed()]).await,
        says,
    );
    let background = t
        .producer()
        .background(Background::default())
        .build()
        .await
        .unwrap();
    invalid(
        "background send_to_partition",
        background.send_to_partition(keyed(), 1).await,
        says,
    );
    let mut batching = t
        .batching()
        .routing(Routing::Partition(1))
        .build()
        .await
        .unwrap();
    invalid(
        "batching, partition routing",
        batching.send(keyed()).await,
        says,
    );
    assert_eq!(batching.buffered(), 0);
    batching.close().await.unwrap();
    for p in [producer, fixed, background] {
        p.shutdown().await.unwrap();
    }
    let d = t.describe().await.unwrap();
    assert!(
        d.partitions.iter().all(|p| p.next_offset == 0),
        "nothing sent"
    );
}

async fn an_empty_key_is_an_error_in_every_write_path(client: &Client) {
    let t = topic(client, "empty-key", 2).await;
    let says = "must not be empty";
    let empty = || Message::new("v").with_key("");
    invalid("publish", t.publish().key("").value("v").send().await, says);
    invalid(
        "publish_keyed",
        t.json::<u32>().publish_keyed("", &1).await,
        says,
    );
    invalid(
        "publish_batch",
        t.publish_batch([Message::new("v"), empty()]).await,
        says,
    );
    let producer = t.producer().build().await.unwrap();
    invalid("send", producer.send(empty()).await, says);
    invalid(
        "send_keyed",
        producer.send_keyed(Message::new("v"), "").await,
        says,
    );
    invalid(
        "send_batch",
        producer.send_batch(vec![Message::new("v"), empty()]).await,
        says,
    );
    invalid(
        "producer routed by an empty key",
        t.producer().routing(Routing::Key("".into())).build().await,
        says,
    );
    let background = t
        .producer()
        .background(Background::default())
        .build()
        .await
        .unwrap();
    invalid("background send", background.send(empty()).await, says);
    let mut batching = t.batching().build().await.unwrap();
    invalid("batching", batching.send(empty()).await, says);
    batching.close().await.unwrap();
    for p in [producer, background] {
        p.shutdown().await.unwrap();
    }
    let d = t.describe().await.unwrap();
    assert!(
        d.partitions.iter().all(|p| p.next_offset == 0),
        "nothing sent"
    );
}
