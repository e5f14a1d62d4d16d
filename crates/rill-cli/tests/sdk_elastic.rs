//! Publishing to an elastic topic through the SDK (docs/RANGES.md §4), over both
//! transports: keyed records go to the open range covering their hash, unkeyed ones to
//! open ranges only; after a split the SDK, still holding the old map, is refused by the
//! sealed range (`NOT_OWNER`), reads the ranges anew and sends the records to the
//! children, so nothing lands in a sealed range past its seal and every record is
//! stored exactly once.
//!
//! Then every way of producing at once (a direct-mode and a background `Producer`,
//! `Batching`, `publish_batch`) while ranges split and merge under them, with cursors
//! reading along: every acknowledged record is read exactly once, and each key's records
//! in the order they were sent (docs/RANGES.md §4, §6.1). Consumer groups read along
//! too, two members with one joining and leaving midway (§6.3): every acknowledged record
//! is delivered, and each key's records are first delivered in their order, whichever
//! member holds the range.

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rill_client::{Client, ErrorCode, Message, Position, Topic, key_hash};
use rill_proto::pb;
use rill_proto::{RequestBody, ResponseBody};

over_both_transports!(
    publishes_follow_the_ranges_across_splits,
    producers_and_readers_keep_each_keys_order_across_splits,
    the_automatic_policy_splits_a_hot_range_under_a_producer
);

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

    // An offset names a place in one range, not in the topic; neither does a partition.
    for e in [
        topic
            .consumer_group("g")
            .start_at(rill_client::StartAt::Offset(3))
            .build()
            .await
            .map(drop)
            .unwrap_err(),
        topic.consumer("c", 1).build().await.map(drop).unwrap_err(),
        topic
            .consumer("c", 0)
            .start_at(rill_client::StartAt::Offset(3))
            .build()
            .await
            .map(drop)
            .unwrap_err(),
    ] {
        assert!(
            matches!(&e, rill_client::ClientError::InvalidArgument(m) if m.contains("elastic")),
            "{e}"
        );
    }
}

/// Half the records of `topic` (what the first half of a reader takes).
async fn acked_len_half(topic: &Topic) -> usize {
    let d = topic.describe().await.unwrap();
    let total: u64 = d
        .partitions
        .iter()
        .map(|p| p.next_offset - p.first_offset)
        .sum();
    usize::try_from(total / 2).unwrap()
}

/// Keys per way of producing.
const KEYS: u32 = 12;
/// Records per key.
const PER_KEY: u32 = 60;

/// A record's value: who sent it, its key, and its number in the key's sequence.
fn value(way: &str, key: u32, n: u32) -> String {
    format!("{way}/{key}/{n}")
}

/// The records of a producer named `way` (keys `way-k0`…), sent the way it names, in
/// each key's order. Returns the values acknowledged.
async fn produce(topic: Topic, way: &'static str) -> Vec<String> {
    let key = move |k: u32| format!("{way}-k{k}");
    let mut acked = Vec::new();
    match way {
        "direct" => {
            // A task per key, each sending its records one after another.
            let producer = Arc::new(
                topic
                    .producer()
                    .retries(20, Duration::from_millis(20))
                    .build()
                    .await
                    .unwrap(),
            );
            let tasks: Vec<_> = (0..KEYS)
                .map(|k| {
                    let producer = Arc::clone(&producer);
                    tokio::spawn(async move {
                        let mut acked = Vec::new();
                        for n in 0..PER_KEY {
                            let v = value(way, k, n);
                            producer
                                .send(Message::new(v.clone()).with_key(key(k)))
                                .await
                                .unwrap();
                            acked.push(v);
                        }
                        acked
                    })
                })
                .collect();
            for t in tasks {
                acked.extend(t.await.unwrap());
            }
        }
        "background" => {
            let producer = topic
                .producer()
                .retries(20, Duration::from_millis(20))
                .linger(Duration::from_millis(2))
                .background(rill_client::Background::default())
                .build()
                .await
                .unwrap();
            for n in 0..PER_KEY {
                for k in 0..KEYS {
                    let v = value(way, k, n);
                    producer
                        .send(Message::new(v.clone()).with_key(key(k)))
                        .await
                        .unwrap();
                    acked.push(v);
                }
                if n % 10 == 9 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            producer.shutdown().await.unwrap();
        }
        "batching" => {
            let mut batching = topic
                .batching()
                .batch_length(16)
                .linger(Duration::from_millis(3))
                .build()
                .await
                .unwrap();
            for n in 0..PER_KEY {
                for k in 0..KEYS {
                    let v = value(way, k, n);
                    batching
                        .send(Message::new(v.clone()).with_key(key(k)))
                        .await
                        .unwrap();
                    acked.push(v);
                }
            }
            batching.close().await.unwrap();
        }
        _ => {
            for n in (0..PER_KEY).step_by(3) {
                let batch: Vec<Message> = (n..n + 3)
                    .flat_map(|n| (0..KEYS).map(move |k| (n, k)))
                    .map(|(n, k)| Message::new(value(way, k, n)).with_key(key(k)))
                    .collect();
                let values: Vec<String> = batch
                    .iter()
                    .map(|m| String::from_utf8(m.value.to_vec()).unwrap())
                    .collect();
                topic.publish_batch(batch).await.unwrap();
                acked.extend(values);
            }
        }
    }
    acked
}

/// Takes records from a named consumer until `want` have come (or none came for
/// `quiet`, which is then a failure unless `want` is `None`); positions and values.
async fn consume(
    consumer: &mut rill_client::Consumer,
    want: Option<usize>,
    quiet: Duration,
) -> Vec<(Position, String)> {
    let mut out = Vec::new();
    while want.is_none_or(|w| out.len() < w) {
        match consumer.next_within(quiet).await {
            Ok(r) => out.push((r.position(), String::from_utf8(r.value.to_vec()).unwrap())),
            Err(rill_client::ClientError::Timeout(_)) if want.is_none() => break,
            Err(e) => panic!("after {} records: {e}", out.len()),
        }
    }
    out
}

/// A named consumer built again from the offsets `name` stored reads nothing more.
async fn nothing_more(topic: &Topic, name: &str) {
    let mut again = topic.consumer(name, 0).build().await.unwrap();
    let more = consume(&mut again, None, Duration::from_millis(1500)).await;
    assert!(
        more.is_empty(),
        "{name}: {} records again, first {:?}",
        more.len(),
        more.first()
    );
}

/// Reads with `reader` until it has caught up; the values read, in order.
async fn read_all(reader: &mut rill_client::Reader<bytes::Bytes>) -> Vec<(Position, String)> {
    let mut out = Vec::new();
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        out.push((r.position(), String::from_utf8(r.value.to_vec()).unwrap()));
    }
    out
}

/// One record a group member handed out: the order of handing out across all members
/// (a counter taken as `next` returns), the member, where it was and its value.
type Delivery = (u64, String, Position, String);

/// A group member reading in a task of its own until `stop` is set and nothing has
/// come for `quiet`, then shutting down (storing what it handled); what it handed out.
fn member(
    topic: &Topic,
    group: &str,
    id: &str,
    clock: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    quiet: Duration,
) -> tokio::task::JoinHandle<Vec<Delivery>> {
    let builder = topic
        .consumer_group(group)
        .member_id(id)
        .max_bytes(256)
        .session_timeout(Duration::from_secs(5));
    let id = id.to_owned();
    tokio::spawn(async move {
        let mut c = builder.build().await.unwrap();
        let mut out = Vec::new();
        loop {
            match c.next_within(quiet).await {
                Ok(r) => out.push((
                    clock.fetch_add(1, Ordering::SeqCst),
                    id.clone(),
                    r.position(),
                    String::from_utf8(r.value.to_vec()).unwrap(),
                )),
                Err(rill_client::ClientError::Timeout(_)) if stop.load(Ordering::SeqCst) => break,
                Err(rill_client::ClientError::Timeout(_)) => {}
                Err(e) => panic!("member {id} after {} records: {e}", out.len()),
            }
        }
        c.shutdown().await.unwrap();
        out
    })
}

/// Checks what a group's members handed out: every acknowledged record at least once,
/// nothing else, and each key's records first handed out in their order — across
/// members, by the order of handing out. Returns how many were handed out again (after
/// a rebalance, at least once).
fn check_group(deliveries: &mut [Delivery], acked: &[String], what: &str) -> usize {
    deliveries.sort_by_key(|d| d.0);
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut last: BTreeMap<(&str, &str), (u32, &Delivery)> = BTreeMap::new();
    let mut again = 0;
    for d in deliveries.iter() {
        if !seen.insert(d.3.as_str()) {
            again += 1;
            continue;
        }
        let mut parts = d.3.split('/');
        let (way, key, n) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let n: u32 = n.parse().unwrap();
        if let Some((before, at)) = last.insert((way, key), (n, d)) {
            assert!(
                before < n,
                "{what}: {way}/{key}: {n} ({d:?}) first handed out after {before} ({at:?})"
            );
        }
    }
    let acked_set: BTreeSet<&str> = acked.iter().map(String::as_str).collect();
    let missing: Vec<&&str> = acked_set.difference(&seen).take(5).collect();
    assert!(missing.is_empty(), "{what}: never handed out: {missing:?}");
    assert_eq!(
        seen.len(),
        acked.len(),
        "{what}: records never acknowledged"
    );
    again
}

/// Checks that `read` holds each of `acked` exactly once and each key's records in
/// their order.
fn check_read(read: &[(Position, String)], acked: &[String], what: &str) {
    let mut count: BTreeMap<&str, u32> = BTreeMap::new();
    let mut last: BTreeMap<(String, String), (u32, Position, usize)> = BTreeMap::new();
    for (i, (p, v)) in read.iter().enumerate() {
        *count.entry(v).or_default() += 1;
        let mut parts = v.split('/');
        let (way, key, n) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let n: u32 = n.parse().unwrap();
        if let Some((before, in_range, j)) =
            last.insert((way.to_owned(), key.to_owned()), (n, *p, i))
        {
            assert!(
                before < n,
                "{what}: {way}/{key}: {n} (at {p:?}, read {i}) after {before} (at {in_range:?}, read {j})"
            );
        }
    }
    for v in acked {
        assert_eq!(count.get(v.as_str()), Some(&1), "{what}: {v}");
    }
    assert_eq!(
        count.len(),
        acked.len(),
        "{what}: records never acknowledged"
    );
}

async fn producers_and_readers_keep_each_keys_order_across_splits(client: &Client) {
    let topic = client.stream("s").topic("order");
    let config = topic
        .create_with(
            &rill_client::TopicOptions {
                partitions: Some(2),
                elastic: true,
                durability: Some(rill_client::Durability::Never),
                ..Default::default()
            },
            false,
        )
        .await
        .unwrap();
    assert!(config.elastic);
    // A reader that follows along while ranges split, and its position halfway.
    // Small fetches, so the reader goes round its ranges many times and would reach a
    // child before its parent's end if it did not hold the child back.
    let mut live = topic.records("live").max_bytes(256);
    // A named consumer following along too (it reads every range, parents first), and
    // one that stops halfway and is built again.
    let mut named = topic
        .consumer("named", 0)
        .max_bytes(256)
        .build()
        .await
        .unwrap();
    let mut read_named = Vec::new();
    // A consumer group reading along: member "a" from the start, "b" joining once
    // records flow and leaving before the end, so ranges move between members while
    // their parents are being finished.
    let clock = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let quiet = Duration::from_secs(3);
    let a = member(&topic, "live", "a", clock.clone(), stop.clone(), quiet);
    let mut b = None;
    let b_stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = ["direct", "background", "batching", "publish"]
        .into_iter()
        .map(|way| tokio::spawn(produce(topic.clone(), way)))
        .collect();
    let admin = topic.clone();
    let changes = tokio::spawn(async move {
        let mut made = Vec::new();
        for step in 0..8 {
            tokio::time::sleep(Duration::from_millis(15)).await;
            let d = admin.describe().await.unwrap();
            let open: Vec<&rill_client::RangeInfo> =
                d.ranges.iter().filter(|r| r.sealed_at.is_none()).collect();
            let change = if step % 3 == 2 && open.len() >= 2 {
                // Neighbours: open ranges by their first hash.
                let mut open = open.clone();
                open.sort_by_key(|r| r.lo);
                admin.merge_ranges(open[0].id, open[1].id).await.unwrap()
            } else {
                admin.split_range(None, None).await.unwrap()
            };
            made.push(change);
        }
        made
    });
    let mut read_live = Vec::new();
    let mut token = None;
    let mut acked = Vec::new();
    let mut producers = producers.into_iter().peekable();
    while producers.peek().is_some() {
        read_live.extend(read_all(&mut live).await);
        read_named.extend(consume(&mut named, None, Duration::from_millis(5)).await);
        if token.is_none() && read_live.len() > 200 {
            token = Some((read_live.len(), live.offsets()));
        }
        if b.is_none() && read_live.len() > 100 {
            b = Some(member(
                &topic,
                "live",
                "b",
                clock.clone(),
                b_stop.clone(),
                Duration::from_millis(300),
            ));
        }
        if read_live.len() > 1500 {
            b_stop.store(true, Ordering::SeqCst);
        }
        if producers.peek().is_some_and(|p| p.is_finished()) {
            acked.extend(producers.next().unwrap().await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let made = changes.await.unwrap();
    assert_eq!(made.len(), 8);
    read_live.extend(read_all(&mut live).await);
    assert_eq!(acked.len() as u32, 4 * KEYS * PER_KEY);
    // Every sealed range ends at its seal, and no record came after one.
    let d = topic.describe().await.unwrap();
    assert_eq!(d.range_epoch, 8);
    // Shown when a check below fails.
    eprintln!("ranges: {:?}", d.ranges);
    for r in &d.ranges {
        if let Some(end) = r.sealed_at {
            assert_eq!(
                d.partitions[r.id as usize].next_offset, end,
                "range {}",
                r.id
            );
        }
    }
    check_read(&read_live, &acked, "a reader following along");
    stop.store(true, Ordering::SeqCst);
    b_stop.store(true, Ordering::SeqCst);
    let mut delivered = a.await.unwrap();
    let from_b = match b {
        Some(b) => b.await.unwrap(),
        None => Vec::new(),
    };
    let b_read = from_b.len();
    delivered.extend(from_b);
    let again = check_group(&mut delivered, &acked, "a group of two following along");
    eprintln!(
        "group: {} handed out, {b_read} by b, {again} again after rebalances",
        delivered.len()
    );
    // One member alone from the start, stopped halfway and built again: exactly once.
    let clock = Arc::new(AtomicU64::new(0));
    let solo = tokio::spawn({
        let topic = topic.clone();
        async move {
            let mut c = topic
                .consumer_group("solo")
                .max_bytes(256)
                .build()
                .await
                .unwrap();
            let mut out = Vec::new();
            for _ in 0..acked_len_half(&topic).await {
                let r = c.next_within(Duration::from_secs(5)).await.unwrap();
                out.push((r.position(), String::from_utf8(r.value.to_vec()).unwrap()));
            }
            c.shutdown().await.unwrap();
            out
        }
    });
    let mut solo_read = solo.await.unwrap();
    let rest = member(
        &topic,
        "solo",
        "again",
        clock,
        Arc::new(AtomicBool::new(true)),
        Duration::from_millis(1500),
    )
    .await
    .unwrap();
    solo_read.extend(rest.into_iter().map(|d| (d.2, d.3)));
    check_read(&solo_read, &acked, "a group member built again halfway");
    let left = acked.len() - read_named.len();
    read_named.extend(consume(&mut named, Some(left), Duration::from_secs(5)).await);
    check_read(&read_named, &acked, "a named consumer following along");
    named.shutdown().await.unwrap();
    // From its stored offsets: nothing more.
    nothing_more(&topic, "named").await;
    // A named consumer stopped halfway and built again reads the rest, in order.
    let mut first = topic
        .consumer("halves", 0)
        .max_bytes(256)
        .build()
        .await
        .unwrap();
    let mut halves = consume(&mut first, Some(acked.len() / 2), Duration::from_secs(5)).await;
    first.shutdown().await.unwrap();
    let mut second = topic
        .consumer("halves", 0)
        .max_bytes(256)
        .build()
        .await
        .unwrap();
    let rest = acked.len() - halves.len();
    halves.extend(consume(&mut second, Some(rest), Duration::from_secs(5)).await);
    check_read(&halves, &acked, "a named consumer built again halfway");
    // Committed by hand, each record after the next one came (so a finished range's
    // last record is committed after its consumer is gone): nothing is read again.
    let mut manual = topic
        .consumer("manual", 0)
        .commit_policy(rill_client::CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    let mut previous: Option<rill_client::Record> = None;
    for _ in 0..acked.len() {
        let r = manual.next_within(Duration::from_secs(5)).await.unwrap();
        if let Some(p) = previous.replace(r) {
            manual.commit(&p).await.unwrap();
        }
    }
    manual.commit(&previous.unwrap()).await.unwrap();
    manual.shutdown().await.unwrap();
    nothing_more(&topic, "manual").await;

    // A fresh reader from the beginning, and one resumed from the saved position.
    let mut fresh = topic.records("fresh").max_bytes(256);
    check_read(&read_all(&mut fresh).await, &acked, "a fresh reader");
    let (already, offsets) = token.expect("the live reader saved a position");
    let mut resumed = topic
        .records("resumed")
        .max_bytes(256)
        .from_offsets(offsets);
    let mut read = read_live[..already].to_vec();
    read.extend(read_all(&mut resumed).await);
    check_read(&read, &acked, "a reader resumed halfway");

    // Records were spread over more than the initial ranges.
    assert!(read_live.iter().any(|(p, _)| p.partition >= 2));

    // A new group starting at the end finishes every sealed range at once and reads
    // only what comes next, in order.
    let mut late = topic
        .consumer_group("late")
        .start_at(rill_client::StartAt::End)
        .build()
        .await
        .unwrap();
    let batch: Vec<Message> = (0..KEYS)
        .map(|k| Message::new(value("late", k, 0)).with_key(format!("late{k}")))
        .collect();
    topic.publish_batch(batch).await.unwrap();
    let mut late_read = BTreeSet::new();
    while late_read.len() < KEYS as usize {
        let r = late.next_within(Duration::from_secs(5)).await.unwrap();
        assert!(
            late_read.insert(String::from_utf8(r.value.to_vec()).unwrap()),
            "read twice"
        );
    }
    assert!(late_read.iter().all(|v| v.starts_with("late/")));
    // Nothing else comes; meanwhile the member finishes what is left of the lineage.
    assert!(matches!(
        late.next_within(Duration::from_secs(2)).await,
        Err(rill_client::ClientError::Timeout(_))
    ));
    late.shutdown().await.unwrap();
    let g = topic.describe_group("late").await.unwrap();
    let d = topic.describe().await.unwrap();
    for r in d.ranges.iter().filter(|r| r.sealed_at.is_some()) {
        let stored = g.partitions[r.id as usize].stored_offset;
        assert!(
            stored.is_some_and(|s| Some(s) >= r.sealed_at) || r.sealed_at == Some(0),
            "range {} sealed at {:?}: the late group stored {stored:?}",
            r.id,
            r.sealed_at
        );
    }
}

/// The broker's policy (docs/RANGES.md §7) splits a range a producer keeps hot: a 1 s
/// window and a 2 s cooldown, 10 KB/s, and a producer writing one key's records as
/// fast as it can until the topic has split twice (the second time a child, once it
/// was old enough). Every record acknowledged is read once, in order.
async fn the_automatic_policy_splits_a_hot_range_under_a_producer(client: &Client) {
    let topic = client.stream("s").topic("auto");
    let config = topic
        .create_with(
            &rill_client::TopicOptions {
                partitions: Some(1),
                elastic: true,
                durability: Some(rill_client::Durability::Never),
                auto_split: Some(
                    rill_client::AutoSplit::new(10_000)
                        .window(Duration::from_secs(1))
                        .cooldown(Duration::from_secs(2)),
                ),
                ..Default::default()
            },
            false,
        )
        .await
        .unwrap();
    let auto = config.auto_split.expect("the policy is on");
    assert_eq!(auto.bytes_per_s, 10_000);
    assert_eq!(auto.window, Some(Duration::from_secs(1)));
    assert_eq!(auto.cooldown, Some(Duration::from_secs(2)));
    let producer = topic
        .producer()
        .retries(20, Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut sent = 0u32;
    let payload = "v".repeat(500);
    loop {
        let batch: Vec<Message> = (0..20)
            .map(|i| {
                let n = sent + i;
                Message::new(format!("{n}/{payload}")).with_key(format!("k{}", n % 8))
            })
            .collect();
        producer.send_batch(batch).await.unwrap();
        sent += 20;
        if topic.describe().await.unwrap().range_epoch >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no automatic split after {sent} records"
        );
    }
    let d = topic.describe().await.unwrap();
    assert!(d.ranges[0].sealed_at.is_some(), "{:?}", d.ranges);
    let mut reader = topic.records("check").max_bytes(4096);
    let mut seen = BTreeMap::new();
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        let v = String::from_utf8(r.value.to_vec()).unwrap();
        let n: u32 = v.split_once('/').unwrap().0.parse().unwrap();
        let key = r.key.clone().unwrap();
        if let Some(before) = seen.insert(key, n) {
            assert!(before < n, "{n} after {before}");
        }
    }
    assert_eq!(seen.len(), 8);
}
