//! Readers and named consumers fetch the next batch while the caller takes the one
//! before (a fetch ahead). They must read exactly what they would without one: every
//! record once, in each partition's order, while records are appended; and one dropped
//! with a fetch ahead under way and resumed (from its offsets, or from the offset the
//! broker stored) neither loses nor repeats a record. Over both transports.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use rill_client::{Client, CommitPolicy, Message, Offsets};

const PARTITIONS: u32 = 3;
const BATCHES: u64 = 60;
const PER_BATCH: u64 = 50;

over_both_transports!(
    a_reader_reads_every_record_once_while_records_are_appended,
    a_named_consumer_rebuilt_again_and_again_reads_every_record_once
);

async fn a_reader_reads_every_record_once_while_records_are_appended(client: &Client) {
    let t = client.stream("ahead").topic("t");
    t.ensure(PARTITIONS).await.unwrap();
    let total = BATCHES * PER_BATCH;
    let producer = {
        let t = t.clone();
        tokio::spawn(async move {
            for b in 0..BATCHES {
                let batch = (0..PER_BATCH).map(|i| {
                    let n = b * PER_BATCH + i;
                    Message::new(format!("v{n}")).with_key(format!("k{}", n % 17))
                });
                t.publish_batch(batch).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    // A few records per fetch, so that most calls find a fetch ahead under way.
    let mut read: BTreeMap<u32, Vec<(u64, bytes::Bytes)>> = BTreeMap::new();
    let mut saved = Offsets::default();
    let mut count = 0u64;
    let mut resumes = 0;
    while count < total {
        let mut reader = t
            .records("ahead")
            .max_bytes(400)
            .from_offsets(saved.clone());
        // Read a stretch, then drop the reader (often with a fetch ahead in flight)
        // and go on from its offsets with a new one.
        for _ in 0..(97 + resumes * 31) {
            match reader.next().await {
                Some(Ok(r)) => {
                    read.entry(r.partition)
                        .or_default()
                        .push((r.offset, r.value));
                    count += 1;
                }
                Some(Err(e)) => panic!("read failed: {e}"),
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
        saved = reader.offsets();
        resumes += 1;
    }
    producer.await.unwrap();
    assert_eq!(count, total, "nothing read twice");
    assert!(resumes > 5, "the reader was dropped and resumed mid-way");

    // What a reader of the whole topic reads, without stops: the same, in order.
    let mut whole: BTreeMap<u32, Vec<(u64, bytes::Bytes)>> = BTreeMap::new();
    let mut reader = t.records("whole");
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        whole
            .entry(r.partition)
            .or_default()
            .push((r.offset, r.value));
    }
    assert_eq!(read, whole, "the same records in each partition's order");
    for (p, records) in &read {
        let offsets: Vec<u64> = records.iter().map(|(o, _)| *o).collect();
        let expected: Vec<u64> = (0..records.len() as u64).collect();
        assert_eq!(
            offsets, expected,
            "partition {p}: every offset once, in order"
        );
    }
    let end: u64 = read.values().map(|r| r.len() as u64).sum();
    assert_eq!(end, total);
    assert_eq!(
        saved.0.values().sum::<u64>(),
        total,
        "the offsets saved last are past every record"
    );
}

async fn a_named_consumer_rebuilt_again_and_again_reads_every_record_once(client: &Client) {
    let t = client.stream("ahead").topic("c");
    t.ensure(1).await.unwrap();
    let total = BATCHES * PER_BATCH;
    let producer = {
        let t = t.clone();
        tokio::spawn(async move {
            for b in 0..BATCHES {
                let batch = (0..PER_BATCH).map(|i| Message::new(format!("v{}", b * PER_BATCH + i)));
                t.publish_batch(batch).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut read: Vec<(u64, bytes::Bytes)> = Vec::new();
    let mut builds = 0;
    while (read.len() as u64) < total {
        // Small fetches, so that most records are handed out with a fetch ahead under
        // way; each record is committed once handled, and the consumer is dropped after
        // a stretch (its fetch ahead with it) and built again from the stored offset.
        let mut consumer = t
            .consumer("ahead", 0)
            .commit_policy(CommitPolicy::Disabled)
            .max_bytes(400)
            .max_wait(Duration::from_millis(50))
            .build()
            .await
            .unwrap();
        builds += 1;
        for _ in 0..(53 + builds * 17) {
            match consumer.next_within(Duration::from_millis(200)).await {
                Ok(r) => {
                    consumer.commit(&r).await.unwrap();
                    read.push((r.offset, r.value));
                }
                Err(rill_client::ClientError::Timeout(_)) => {}
                Err(e) => panic!("read failed: {e}"),
            }
            if read.len() as u64 == total {
                break;
            }
        }
    }
    producer.await.unwrap();
    assert!(
        builds > 5,
        "the consumer was dropped and built again mid-way"
    );
    let offsets: Vec<u64> = read.iter().map(|(o, _)| *o).collect();
    assert_eq!(
        offsets,
        (0..total).collect::<Vec<u64>>(),
        "every offset once, in order"
    );
    for (o, v) in &read {
        assert_eq!(v.as_ref(), format!("v{o}").as_bytes(), "the record at {o}");
    }
}
