//! One scenario suite, run over both transports: the real `rill` binary on a free port
//! (`tcp::*`) and an in-process broker (`embedded::*`).

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use rill_client::{
    Background, Client, ClientError, CommitPolicy, ErrorCode, Message, Offsets, Position, StartAt,
    Topic, Value, partition_for_key,
};
use serde::{Deserialize, Serialize};

over_both_transports!(
    admin_round_trip,
    keyed_routing_keeps_per_key_order,
    keys_and_typed_headers_round_trip,
    cursor_offsets_save_and_restore,
    every_start_at,
    allow_replay,
    commit_policies_store_where_they_say,
    long_poll_wakes_on_append_and_times_out_empty,
    idempotent_producer_batches,
    a_partly_failed_send_never_acknowledges_records_it_did_not_store,
    background_producer_flushes,
    explicit_batching,
    typed_codecs_and_decode_errors,
    avro_codec,
    consumer_group_shares_and_moves_partitions,
    consumer_group_resumes_from_committed_offsets,
    bad_requests_are_typed_errors,
    a_call_after_close_fails_at_once_with_closed,
);

async fn topic(client: &Client, name: &str, partitions: u32) -> Topic {
    let t = client.stream("scen").topic(name);
    t.ensure(partitions).await.unwrap();
    t
}

async fn admin_round_trip(client: &Client) {
    let t = topic(client, "admin", 3).await;
    // ensure is idempotent; another partition count is an error that says so.
    t.ensure(3).await.unwrap();
    let err = t.ensure(4).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicExists));
    assert!(err.to_string().contains("3 partitions"), "{err}");
    let streams = client.list_streams().await.unwrap();
    assert!(streams.iter().any(|s| s.name == "scen"));
    let d = t.describe().await.unwrap();
    assert_eq!(d.partitions.len(), 3);
    t.publish().value("x").partition(2).send().await.unwrap();
    let d = t.describe().await.unwrap();
    assert_eq!(d.partitions[2].next_offset, 1);
    t.delete().await.unwrap();
    let err = t.describe().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicNotFound));
}

async fn keyed_routing_keeps_per_key_order(client: &Client) {
    let t = topic(client, "routing", 4).await;
    let keys = ["a", "b", "c", "d", "e", "f"];
    for i in 0..60 {
        let key = keys[i % keys.len()];
        let pos = t
            .publish()
            .key(key)
            .value(format!("{key}-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(pos.partition, partition_for_key(key.as_bytes(), 4));
    }
    let mut reader = t.records("routing");
    let mut seen: HashMap<String, Vec<usize>> = HashMap::new();
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
        assert_eq!(r.partition, partition_for_key(key.as_bytes(), 4));
        let value = String::from_utf8(r.value.to_vec()).unwrap();
        let i: usize = value.split('-').nth(1).unwrap().parse().unwrap();
        seen.entry(key).or_default().push(i);
    }
    assert_eq!(seen.len(), keys.len());
    for (key, order) in seen {
        assert_eq!(order.len(), 10, "{key}");
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{key}: {order:?}");
    }
}

/// One value of every header type, with edge values. The `match` has no `_` arm, so a
/// new header type does not compile until it is added here.
fn one_of_each_header_type() -> Vec<(String, Value)> {
    let values = vec![
        Value::Str("text \u{e9}".into()),
        Value::Bytes(Bytes::from_static(b"\x00\x01\xff")),
        Value::Bool(true),
        Value::I8(i8::MIN),
        Value::I16(-12_345),
        Value::I32(i32::MIN + 1),
        Value::I64(i64::MIN),
        Value::I128(i128::MIN),
        Value::U8(u8::MAX),
        Value::U16(65_000),
        Value::U32(u32::MAX - 1),
        Value::U64(u64::MAX),
        Value::U128(u128::MAX),
        Value::F32(-1.5e-3),
        Value::F64(f64::MAX),
    ];
    values
        .into_iter()
        .map(|v| {
            let name = match &v {
                Value::Str(_) => "str",
                Value::Bytes(_) => "bytes",
                Value::Bool(_) => "bool",
                Value::I8(_) => "i8",
                Value::I16(_) => "i16",
                Value::I32(_) => "i32",
                Value::I64(_) => "i64",
                Value::I128(_) => "i128",
                Value::U8(_) => "u8",
                Value::U16(_) => "u16",
                Value::U32(_) => "u32",
                Value::U64(_) => "u64",
                Value::U128(_) => "u128",
                Value::F32(_) => "f32",
                Value::F64(_) => "f64",
            };
            (name.to_owned(), v)
        })
        .collect()
}

async fn keys_and_typed_headers_round_trip(client: &Client) {
    let t = topic(client, "headers", 1).await;
    let mut expected = one_of_each_header_type();
    expected.push(("str".into(), Value::Str("repeated".into())));
    expected.push(("bool".into(), Value::Bool(false)));
    let mut publish = t
        .publish()
        .key(Bytes::from_static(b"\x00\xffkey"))
        .value(Bytes::from_static(b"\x01\x02"));
    for (name, value) in &expected {
        publish = publish.header(name.clone(), value.clone());
    }
    publish.send().await.unwrap();
    // The same headers through a batch and the producer.
    let message = expected.iter().fold(Message::new("batched"), |m, (n, v)| {
        m.with_header(n.clone(), v.clone())
    });
    t.publish_batch([message.clone()]).await.unwrap();
    let producer = t.producer().build().await.unwrap();
    producer.send(message.with_key("p")).await.unwrap();
    producer.shutdown().await.unwrap();

    let mut reader = t.records("h");
    let r = reader.next().await.unwrap().unwrap();
    assert_eq!(r.key.as_deref(), Some(&b"\x00\xffkey"[..]));
    assert_eq!(&r.value[..], b"\x01\x02");
    // Every type comes back as itself: same variant, same value, same order.
    assert_eq!(r.headers, expected);
    assert_eq!(r.header("str"), Some(&Value::Str("text \u{e9}".into())));
    assert!(r.timestamp_us > 1_600_000_000_000_000);
    for _ in 0..2 {
        let r = reader.next().await.unwrap().unwrap();
        assert_eq!(r.headers, expected, "{r:?}");
    }
    assert!(reader.next().await.is_none());
}

async fn cursor_offsets_save_and_restore(client: &Client) {
    let t = topic(client, "cursor", 2).await;
    let messages: Vec<Message> = (0..40)
        .map(|i| Message::new(format!("m{i}")).with_key(format!("k{}", i % 5)))
        .collect();
    let positions = t.publish_batch(messages).await.unwrap();
    assert_eq!(positions.len(), 40);
    let mut reader = t.records("first-half");
    let mut first = Vec::new();
    for _ in 0..15 {
        first.push(reader.next().await.unwrap().unwrap());
    }
    let saved: Offsets = reader.offsets();
    let json = serde_json::to_string(&saved).unwrap();
    let restored: Offsets = serde_json::from_str(&json).unwrap();
    let mut rest = Vec::new();
    let mut reader = t.records("second-half").from_offsets(restored);
    while let Some(r) = reader.next().await {
        rest.push(r.unwrap());
    }
    assert_eq!(first.len() + rest.len(), 40);
    let mut all: Vec<(u32, u64)> = first
        .iter()
        .chain(&rest)
        .map(|r| (r.partition, r.offset))
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 40, "no record twice, none missing");
    // A caught-up reader returns None, and again after new data only the new record.
    assert!(reader.next().await.is_none());
    let pos = t.publish().value("late").partition(0).send().await.unwrap();
    let late = reader.next().await.unwrap().unwrap();
    assert_eq!((late.partition, late.offset), (pos.partition, pos.offset));
}

async fn every_start_at(client: &Client) {
    let t = topic(client, "start", 1).await;
    for i in 0..10 {
        t.publish().value(format!("v{i}")).send().await.unwrap();
        // Spread timestamps so a time lookup has something to find.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_eq!(first_offset(&t, StartAt::First).await, 0);
    assert_eq!(first_offset(&t, StartAt::Last).await, 9);
    assert_eq!(
        first_offset(&t, StartAt::Next).await,
        0,
        "nothing stored: the beginning"
    );
    assert_eq!(first_offset(&t, StartAt::Offset(6)).await, 6);
    let all = t
        .fetch(Position::new(0, 0), 1 << 20, Duration::ZERO)
        .await
        .unwrap()
        .records;
    let ts = all[4].timestamp_us;
    let expected = all.iter().position(|r| r.timestamp_us >= ts).unwrap() as u64;
    assert_eq!(
        first_offset(&t, StartAt::TimestampMicros(ts)).await,
        expected
    );
    // Next after a stored offset.
    let mut c = t
        .consumer("resume", 0)
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    let r = c.next_within(Duration::from_secs(5)).await.unwrap();
    let r2 = c.next_within(Duration::from_secs(5)).await.unwrap();
    c.commit(&r2).await.unwrap();
    assert_eq!((r.offset, r2.offset), (0, 1));
    assert_eq!(c.last_stored_offset(0), Some(1));
    let mut c = t.consumer("resume", 0).build().await.unwrap();
    assert_eq!(
        c.next_within(Duration::from_secs(5)).await.unwrap().offset,
        2
    );
}

async fn first_offset(t: &Topic, start: StartAt) -> u64 {
    let mut c = t
        .consumer(&format!("start-{}", rand::random::<u32>()), 0)
        .start_at(start)
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    c.next_within(Duration::from_secs(5)).await.unwrap().offset
}

async fn allow_replay(client: &Client) {
    let t = topic(client, "replay", 1).await;
    for i in 0..5 {
        t.publish().value(format!("v{i}")).send().await.unwrap();
    }
    let mut c = t
        .consumer("rp", 0)
        .commit_policy(CommitPolicy::Each)
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        c.next_within(Duration::from_secs(5)).await.unwrap();
    }
    // The third record is still with the caller: `Each` stored the first two.
    assert_eq!(c.last_stored_offset(0), Some(1));
    // Without allow_replay, the stored offset wins over `start_at`.
    let mut c = t
        .consumer("rp", 0)
        .start_at(StartAt::Offset(0))
        .build()
        .await
        .unwrap();
    assert_eq!(
        c.next_within(Duration::from_secs(5)).await.unwrap().offset,
        2
    );
    let mut c = t
        .consumer("rp", 0)
        .start_at(StartAt::Offset(0))
        .allow_replay()
        .build()
        .await
        .unwrap();
    assert_eq!(
        c.next_within(Duration::from_secs(5)).await.unwrap().offset,
        0
    );
}

async fn commit_policies_store_where_they_say(client: &Client) {
    let t = topic(client, "commits", 1).await;
    for i in 0..12 {
        t.publish().value(format!("v{i}")).send().await.unwrap();
    }
    // (policy, records read, stored offset expected before shutdown). The record read
    // last is still with the caller, so no policy has stored it yet.
    let cases: Vec<(CommitPolicy, usize, Option<u64>)> = vec![
        (CommitPolicy::Disabled, 5, None),
        (CommitPolicy::Each, 5, Some(3)),
        (CommitPolicy::Every(2), 5, Some(3)),
        (
            CommitPolicy::IntervalOrEvery(Duration::from_secs(3600), 4),
            5,
            Some(3),
        ),
        (
            CommitPolicy::IntervalOrEach(Duration::from_secs(3600)),
            3,
            Some(1),
        ),
        // The poll result is batch_length = 4 records here.
        (CommitPolicy::All, 5, Some(3)),
        (
            CommitPolicy::IntervalOrAll(Duration::from_secs(3600)),
            4,
            None,
        ),
        (
            CommitPolicy::IntervalOrAll(Duration::from_secs(3600)),
            5,
            Some(3),
        ),
        // Polling stores the previous batch when the next poll starts.
        (CommitPolicy::Polling, 5, Some(3)),
        (
            CommitPolicy::IntervalOrPolling(Duration::from_secs(3600)),
            3,
            None,
        ),
        (CommitPolicy::Interval(Duration::from_secs(3600)), 5, None),
    ];
    for (i, (policy, reads, expected)) in cases.into_iter().enumerate() {
        let name = format!("policy-{i}");
        let mut c = t
            .consumer(&name, 0)
            .commit_policy(policy)
            .batch_length(4)
            .build()
            .await
            .unwrap();
        for _ in 0..reads {
            c.next_within(Duration::from_secs(5)).await.unwrap();
        }
        assert_eq!(c.last_stored_offset(0), expected, "{policy:?}");
        // The broker agrees: a new consumer resumes right after the stored offset.
        let resume = t
            .consumer(&name, 0)
            .commit_policy(CommitPolicy::Disabled)
            .build()
            .await
            .unwrap()
            .next_within(Duration::from_secs(5))
            .await
            .unwrap()
            .offset;
        assert_eq!(resume, expected.map_or(0, |o| o + 1), "{policy:?}");
        // Shutdown: the last record counts as handled, and is stored unless disabled.
        c.shutdown().await.unwrap();
        let after = if policy == CommitPolicy::Disabled {
            expected
        } else {
            Some(reads as u64 - 1)
        };
        assert_eq!(c.last_stored_offset(0), after, "{policy:?} at shutdown");
        assert!(c.next().await.is_none());
    }
    // A short interval stores on its own once it elapses.
    let mut c = t
        .consumer("interval", 0)
        .commit_policy(CommitPolicy::Interval(Duration::from_millis(50)))
        .build()
        .await
        .unwrap();
    c.next_within(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    c.next_within(Duration::from_secs(5)).await.unwrap();
    // The first record was done with once the second was asked for; the second is
    // still with the caller.
    assert_eq!(c.last_stored_offset(0), Some(0));
    // Zero durations and n = 0 are rejected.
    for bad in [
        CommitPolicy::Interval(Duration::ZERO),
        CommitPolicy::Every(0),
    ] {
        let err = t
            .consumer("bad", 0)
            .commit_policy(bad)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::InvalidArgument(_)), "{err}");
    }
}

async fn long_poll_wakes_on_append_and_times_out_empty(client: &Client) {
    let t = topic(client, "poll", 1).await;
    // Nothing arrives: an empty answer after max_wait.
    let started = Instant::now();
    let empty = t
        .fetch(Position::new(0, 0), 1 << 20, Duration::from_millis(300))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(empty.records.is_empty());
    assert!(
        waited >= Duration::from_millis(250),
        "returned after {waited:?}"
    );
    // An append wakes a waiting poll long before its 10 s max_wait.
    let poller = {
        let t = t.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let fetched = t
                .fetch(Position::new(0, 0), 1 << 20, Duration::from_secs(10))
                .await
                .unwrap();
            (fetched, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let appended_at = Instant::now();
    t.publish().value("wake").send().await.unwrap();
    let (fetched, _) = poller.await.unwrap();
    let woke_after_append = appended_at.elapsed();
    assert_eq!(fetched.records.len(), 1);
    assert!(
        woke_after_append < Duration::from_secs(3),
        "woke {woke_after_append:?} after the append"
    );
    // A consumer's long poll too.
    let mut c = t
        .consumer("lp", 0)
        .start_at(StartAt::Offset(1))
        .max_wait(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let publisher = {
        let t = t.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            t.publish().value("second").send().await.unwrap();
        })
    };
    let r = c.next_within(Duration::from_secs(5)).await.unwrap();
    assert_eq!(&r.value[..], b"second");
    publisher.await.unwrap();
}

async fn idempotent_producer_batches(client: &Client) {
    let t = topic(client, "producer", 3).await;
    let producer = t.producer().batch_length(100).build().await.unwrap();
    let messages: Vec<Message> = (0..1000)
        .map(|i| Message::new(format!("p{i}")).with_key(format!("key{}", i % 17)))
        .collect();
    let positions = producer.send_batch(messages).await.unwrap();
    assert_eq!(positions.len(), 1000);
    let single = producer
        .send_keyed(Message::new("one"), "key3")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(single.partition, partition_for_key(b"key3", 3));
    let to_p = producer
        .send_to_partition(Message::new("two"), 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to_p.partition, 2);
    producer.shutdown().await.unwrap();
    let mut reader = t.records("count");
    let mut n = 0;
    while let Some(r) = reader.next().await {
        r.unwrap();
        n += 1;
    }
    assert_eq!(n, 1002, "every record exactly once");
}

/// A regression: one partition's failure used to cancel the other partitions' sends
/// mid-flight without moving their sequence on, so the next batch reused a sequence
/// and was "acknowledged" as a duplicate of records it did not contain.
async fn a_partly_failed_send_never_acknowledges_records_it_did_not_store(client: &Client) {
    let t = client.stream("scen").topic("partly");
    t.create_with(
        &rill_client::TopicOptions {
            partitions: Some(2),
            max_record_bytes: Some(1024),
            ..Default::default()
        },
        false,
    )
    .await
    .unwrap();
    let key_for = |p: u32| {
        (0..)
            .map(|i| format!("key{i}"))
            .find(|k| partition_for_key(k.as_bytes(), 2) == p)
            .unwrap()
    };
    let (k0, k1) = (key_for(0), key_for(1));
    let producer = t.producer().build().await.unwrap();
    for round in 0..5 {
        let mut first = vec![Message::new(vec![b'x'; 4000]).with_key(k0.clone())];
        first.extend(
            (0..100).map(|i| Message::new(format!("old:{round}:{i}")).with_key(k1.clone())),
        );
        let err = producer.send_batch(first).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::RecordTooLarge), "{err}");
        let second: Vec<Message> = (0..100)
            .map(|i| Message::new(format!("new:{round}:{i}")).with_key(k1.clone()))
            .collect();
        let positions = producer.send_batch(second).await.unwrap();
        let fetched = t
            .fetch(
                Position::new(1, positions[0].offset),
                1 << 20,
                Duration::ZERO,
            )
            .await
            .unwrap();
        let at = &fetched.records[0];
        assert_eq!(at.offset, positions[0].offset);
        assert_eq!(
            std::str::from_utf8(&at.value).unwrap(),
            format!("new:{round}:0")
        );
    }
    producer.shutdown().await.unwrap();
}

async fn background_producer_flushes(client: &Client) {
    let t = topic(client, "background", 2).await;
    let producer = t
        .producer()
        .batch_length(50)
        .linger(Duration::from_millis(5))
        .background(Background::default())
        .build()
        .await
        .unwrap();
    for i in 0..500 {
        let sent = producer
            .send(Message::new(format!("b{i}")).with_key(format!("k{}", i % 7)))
            .await
            .unwrap();
        assert!(sent.is_none(), "background sends return once buffered");
    }
    producer.flush().await.unwrap();
    let d = t.describe().await.unwrap();
    let total: u64 = d.partitions.iter().map(|p| p.next_offset).sum();
    assert_eq!(total, 500);
    // Per-key order is kept with ordered sharding.
    let mut reader = t.records("bg");
    let mut last: HashMap<Bytes, usize> = HashMap::new();
    while let Some(r) = reader.next().await {
        let r = r.unwrap();
        let i: usize = std::str::from_utf8(&r.value[1..]).unwrap().parse().unwrap();
        if let Some(prev) = last.insert(r.key.unwrap(), i) {
            assert!(prev < i);
        }
    }
    producer.shutdown().await.unwrap();
}

async fn explicit_batching(client: &Client) {
    let t = topic(client, "batching", 2).await;
    let mut batching = t.batching().build().await.unwrap();
    for i in 0..300 {
        batching.send(Message::new(format!("m{i}"))).await.unwrap();
    }
    batching.flush().await.unwrap();
    let d = t.describe().await.unwrap();
    assert_eq!(d.partitions.iter().map(|p| p.next_offset).sum::<u64>(), 300);
    batching.close().await.unwrap();
    // A failed send is reported by the call that sent it (there is no background).
    let mut broken = t
        .batching()
        .routing(rill_client::Routing::Partition(9))
        .build()
        .await
        .unwrap();
    broken.send(Message::new("lost")).await.unwrap();
    let err = broken.flush().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PartitionNotFound), "{err}");
    assert!(matches!(
        t.batching().linger(Duration::ZERO).build().await,
        Err(ClientError::InvalidArgument(_))
    ));
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u32,
    total: f64,
}

async fn typed_codecs_and_decode_errors(client: &Client) {
    let t = topic(client, "typed", 1).await;
    let orders = t.json::<Order>();
    orders.publish(&Order { id: 1, total: 9.5 }).await.unwrap();
    t.publish().value("not json").send().await.unwrap();
    orders
        .publish_keyed("o3", &Order { id: 3, total: 1.0 })
        .await
        .unwrap();
    let mut reader = orders.records("typed").unwrap();
    let a = reader.next().await.unwrap().unwrap();
    assert_eq!(a.value, Order { id: 1, total: 9.5 });
    match reader.next().await.unwrap() {
        Err(ClientError::Decode {
            partition: 0,
            offset: 1,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let c = reader.next().await.unwrap().unwrap();
    assert_eq!(c.value.id, 3);
    assert!(reader.next().await.is_none());
    // MessagePack round trip.
    let m = client.stream("scen").topic("typed-mp");
    m.ensure(1).await.unwrap();
    m.msgpack::<Order>()
        .publish(&Order { id: 7, total: 2.0 })
        .await
        .unwrap();
    let got = m
        .msgpack::<Order>()
        .records("mp")
        .unwrap()
        .next()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, Order { id: 7, total: 2.0 });
    t.publish()
        .json(&Order { id: 9, total: 0.5 })
        .send()
        .await
        .unwrap();
}

async fn avro_codec(client: &Client) {
    let schema = rill_client::AvroSchema::parse_str(
        r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"total","type":"double"}]}"#,
    )
    .unwrap();
    let t = topic(client, "avro", 1).await;
    let orders = t.avro::<Order>(schema.clone());
    orders.publish(&Order { id: 4, total: 8.25 }).await.unwrap();
    t.publish()
        .avro(&Order { id: 5, total: 1.0 }, &schema)
        .send()
        .await
        .unwrap();
    let mut reader = orders.records("avro").unwrap();
    assert_eq!(
        reader.next().await.unwrap().unwrap().value,
        Order { id: 4, total: 8.25 }
    );
    assert_eq!(reader.next().await.unwrap().unwrap().value.id, 5);
    // A value that does not fit the schema is refused before anything is sent.
    let err = t
        .publish()
        .avro(&serde_json::json!({"id": "not a number"}), &schema)
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Encode(_)), "{err}");
    assert_eq!(t.end_offset(0).await.unwrap(), 2);
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

async fn consumer_group_shares_and_moves_partitions(client: &Client) {
    let t = topic(client, "group", 4).await;
    let messages: Vec<Message> = (0..40)
        .map(|i| Message::new(format!("g{i}")).with_key(format!("k{i}")))
        .collect();
    t.publish_batch(messages).await.unwrap();
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let member = |name: &str| {
        let (a, r) = (Arc::clone(&events), Arc::clone(&events));
        let n1 = name.to_owned();
        let n2 = name.to_owned();
        t.consumer_group("billing")
            .member_id(name)
            .commit_policy(CommitPolicy::Each)
            .session_timeout(Duration::from_secs(3))
            .on_assigned(move |ps| {
                a.lock()
                    .unwrap()
                    .push((n1.clone(), "assigned", ps.to_vec()))
            })
            .on_revoked(move |ps| r.lock().unwrap().push((n2.clone(), "revoked", ps.to_vec())))
    };
    let mut one = member("one").build().await.unwrap();
    assert_eq!(one.assignment(), vec![0, 1, 2, 3]);
    let mut two = member("two").build().await.unwrap();
    // Cooperative: `two` gets its partitions once `one` has let them go.
    wait_for("a balanced assignment", || {
        one.assignment().len() == 2 && two.assignment().len() == 2
    })
    .await;
    let mut mine: Vec<u32> = one.assignment();
    mine.extend(two.assignment());
    mine.sort_unstable();
    assert_eq!(mine, vec![0, 1, 2, 3], "no partition twice, none missing");
    // Together they read every record exactly once (each record is committed as it
    // is handed out, and the partitions did not move while reading).
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 40 {
        for c in [&mut one, &mut two] {
            if let Ok(r) = c.next_within(Duration::from_millis(300)).await {
                assert!(seen.insert((r.partition, r.offset)), "read twice: {r:?}");
            }
        }
    }
    // A graceful shutdown hands everything to the other member at once.
    let started = Instant::now();
    one.shutdown().await.unwrap();
    wait_for("the partitions to move", || two.assignment().len() == 4).await;
    let moved_after = started.elapsed();
    assert!(
        moved_after < Duration::from_secs(3),
        "moved after {moved_after:?}"
    );
    let log = events.lock().unwrap().clone();
    assert!(
        log.iter().any(|(m, e, _)| m == "one" && *e == "revoked"),
        "{log:?}"
    );
    assert!(
        log.iter().any(|(m, e, _)| m == "two" && *e == "assigned"),
        "{log:?}"
    );
    two.shutdown().await.unwrap();
}

async fn consumer_group_resumes_from_committed_offsets(client: &Client) {
    let t = topic(client, "group-resume", 1).await;
    for i in 0..10 {
        t.publish().value(format!("v{i}")).send().await.unwrap();
    }
    let mut a = t
        .consumer_group("resume")
        .commit_policy(CommitPolicy::Disabled)
        .build()
        .await
        .unwrap();
    let mut last = None;
    for _ in 0..5 {
        last = Some(a.next_within(Duration::from_secs(5)).await.unwrap());
    }
    let last = last.unwrap();
    a.commit(&last).await.unwrap();
    assert_eq!(a.last_stored_offset(0), Some(4));
    a.shutdown().await.unwrap();
    let mut b = t.consumer_group("resume").build().await.unwrap();
    assert_eq!(
        b.next_within(Duration::from_secs(5)).await.unwrap().offset,
        5
    );
    // A member that no longer owns a partition cannot move the group's offset.
    let err = a.commit(&last).await.unwrap_err();
    assert!(
        matches!(
            err.code(),
            Some(ErrorCode::NotMember | ErrorCode::NotAssigned)
        ),
        "{err}"
    );
    b.shutdown().await.unwrap();
    // allow_replay starts at `start_at` even where the group stored an offset; a member
    // built with auto_join(false) reads nothing until it joins.
    let mut c = t
        .consumer_group("resume")
        .start_at(StartAt::First)
        .allow_replay()
        .auto_join(false)
        .build()
        .await
        .unwrap();
    assert!(matches!(
        c.next().await,
        Some(Err(ClientError::InvalidArgument(_)))
    ));
    c.join().await.unwrap();
    assert_eq!(
        c.next_within(Duration::from_secs(5)).await.unwrap().offset,
        0
    );
    c.shutdown().await.unwrap();
}

async fn bad_requests_are_typed_errors(client: &Client) {
    let bad = client.stream("has space").topic("t");
    let err = bad.ensure(1).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidName));
    let t = topic(client, "limits", 1).await;
    let err = t
        .publish()
        .value("x")
        .partition(5)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PartitionNotFound));
    let err = t
        .publish()
        .key("k")
        .partition(0)
        .value("x")
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)));
    let big = vec![b'x'; 2 << 20];
    let err = t.publish().value(big).send().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::RecordTooLarge), "{err}");
    let err = t
        .fetch(Position::new(0, 99), 1024, Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::OffsetBeyondEnd));
    let missing = client.stream("scen").topic("missing");
    let err = missing.publish().value("x").send().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicNotFound));
}

/// A regression: an embedded client's `close` left it usable in name only — a later call
/// retried SHUTTING_DOWN for about 7 s before failing — and over TCP it closed nothing.
async fn a_call_after_close_fails_at_once_with_closed(client: &Client) {
    let t = topic(client, "closing", 1).await;
    t.publish().value("before").send().await.unwrap();
    let producer = t.producer().build().await.unwrap();
    let mut reader = t.records("after-close");
    let clone = client.clone();
    client.close().await.unwrap();
    assert!(client.is_closed() && clone.is_closed());
    let started = Instant::now();
    let closed = |what: &str, e: ClientError| {
        assert!(matches!(e, ClientError::Closed), "{what}: {e:?}");
    };
    closed(
        "publish",
        t.publish().value("after").send().await.unwrap_err(),
    );
    closed("list_streams", clone.list_streams().await.unwrap_err());
    closed("describe", t.describe().await.unwrap_err());
    closed(
        "fetch",
        t.fetch(Position::new(0, 0), 1024, Duration::ZERO)
            .await
            .unwrap_err(),
    );
    closed(
        "producer",
        producer.send(Message::new("after")).await.unwrap_err(),
    );
    closed("reader", reader.next().await.unwrap().unwrap_err());
    closed("consumer", t.consumer("c", 0).build().await.unwrap_err());
    closed("group", t.consumer_group("g").build().await.unwrap_err());
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // Closing again is harmless.
    client.close().await.unwrap();
}
