//! Publishing to an elastic topic through the SDK (docs/RANGES.md §4), over both
//! transports: keyed records go to the open range covering their hash, unkeyed ones to
//! open ranges only; after a split the SDK, still holding the old map, is refused by the
//! sealed range (`NOT_OWNER`), reads the ranges anew and sends the records to the
//! children, so nothing lands in a sealed range past its seal and every record is
//! stored exactly once. The idempotent `Producer` does not route by range yet: the
//! broker refuses it rather than take keys into the wrong range.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use rill_client::{Client, ErrorCode, Message, Position, Topic, key_hash};
use rill_proto::pb;
use rill_proto::{RequestBody, ResponseBody};

over_both_transports!(publishes_follow_the_ranges_across_splits);

async fn create_elastic(client: &Client, topic: &str, ranges: u32) -> Topic {
    let body = RequestBody::CreateTopic(pb::CreateTopicRequest {
        stream: "s".into(),
        topic: topic.into(),
        options: Some(pb::TopicOptions {
            partitions: ranges,
            elastic: true,
            durability: pb::Durability::Never as i32,
            ..Default::default()
        }),
        if_missing: false,
        create_stream: true,
    });
    match client.call_raw(body).await.unwrap() {
        ResponseBody::CreateTopic(r) => assert!(r.options.unwrap().elastic),
        other => panic!("{other:?}"),
    }
    client.stream("s").topic(topic)
}

async fn split(client: &Client, topic: &str, range: u32) -> Vec<u32> {
    let body = RequestBody::SplitRange(pb::SplitRangeRequest {
        stream: "s".into(),
        topic: topic.into(),
        range: Some(range),
        at: None,
    });
    match client.call_raw(body).await.unwrap() {
        ResponseBody::SplitRange(r) => r.change.unwrap().opened,
        other => panic!("{other:?}"),
    }
}

/// Every record of every partition: partition → (offset, key, value).
async fn everything(topic: &Topic) -> BTreeMap<u32, Vec<(u64, String, String)>> {
    let d = topic.describe().await.unwrap();
    let mut out = BTreeMap::new();
    for p in &d.partitions {
        let mut at = 0;
        let mut records = Vec::new();
        while at < p.next_offset {
            let f = topic
                .fetch(Position::new(p.partition, at), 1 << 20, Duration::ZERO)
                .await
                .unwrap();
            for r in &f.records {
                let key = r
                    .key
                    .as_ref()
                    .map_or(String::new(), |k| String::from_utf8(k.to_vec()).unwrap());
                records.push((r.offset, key, String::from_utf8(r.value.to_vec()).unwrap()));
            }
            at = f.next_offset;
        }
        out.insert(p.partition, records);
    }
    out
}

async fn publishes_follow_the_ranges_across_splits(client: &Client) {
    // A second client keeps the map it read first: the one the split goes stale.
    let topic = create_elastic(client, "t", 2).await;
    let keyed = |round: u32| {
        (0..40).map(move |i| Message::new(format!("r{round}-{i}")).with_key(format!("k{i}")))
    };
    let first = topic.publish_batch(keyed(0)).await.unwrap();
    let d = topic.describe().await.unwrap();
    let covering = |ranges: &[rill_client::RangeInfo], key: &str| {
        let h = key_hash(key.as_bytes());
        ranges
            .iter()
            .find(|r| r.sealed_at.is_none() && r.lo <= h && h <= r.hi)
            .unwrap()
            .id
    };
    for (i, pos) in first.iter().enumerate() {
        assert_eq!(pos.partition, covering(&d.ranges, &format!("k{i}")), "k{i}");
    }
    // Split both initial ranges; this client still holds the old map.
    assert_eq!(split(client, "t", 0).await, vec![2, 3]);
    assert_eq!(split(client, "t", 1).await, vec![4, 5]);
    let second = topic.publish_batch(keyed(1)).await.unwrap();
    let d = topic.describe().await.unwrap();
    assert_eq!(d.range_epoch, 2);
    for (i, pos) in second.iter().enumerate() {
        assert!(
            pos.partition >= 2,
            "k{i} went to sealed range {}",
            pos.partition
        );
        assert_eq!(pos.partition, covering(&d.ranges, &format!("k{i}")), "k{i}");
    }
    // Single publishes and unkeyed ones, after one more split under the cached map.
    assert_eq!(split(client, "t", 2).await, vec![6, 7]);
    for i in 0..8 {
        let pos = topic
            .publish()
            .key(format!("k{i}"))
            .value(format!("r2-{i}"))
            .send()
            .await
            .unwrap();
        let d = topic.describe().await.unwrap();
        assert_eq!(pos.partition, covering(&d.ranges, &format!("k{i}")));
    }
    for i in 0..6 {
        let pos = topic.publish().value(format!("u{i}")).send().await.unwrap();
        assert!([1, 3, 4, 5, 6, 7].contains(&pos.partition) || pos.partition > 7);
        let d = topic.describe().await.unwrap();
        assert_eq!(d.ranges[pos.partition as usize].sealed_at, None, "{pos:?}");
    }
    // An explicit partition is the caller's: a sealed one is an error, not re-routed.
    let e = topic
        .publish()
        .partition(0)
        .value("explicit")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotOwner), "{e}");

    // What is stored: each record once; each sealed range ends at its seal; every key's
    // records in the order published, following the lineage (round 0 in the initial
    // ranges, later rounds in their descendants).
    let d = topic.describe().await.unwrap();
    let all = everything(&topic).await;
    for r in &d.ranges {
        if let Some(end) = r.sealed_at {
            assert_eq!(
                d.partitions[r.id as usize].next_offset, end,
                "range {}",
                r.id
            );
        }
    }
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for records in all.values() {
        for (_, key, value) in records {
            *seen.entry(format!("{key}/{value}")).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 40 + 40 + 8 + 6);
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");

    // The idempotent producer is refused, not misrouted.
    let producer = topic.producer().build().await.unwrap();
    let e = producer
        .send(Message::new("p").with_key("k1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidRequest), "{e}");
}
