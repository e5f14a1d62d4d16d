//! `PurgeTopic` through `Broker::handle` (docs/PROTOCOL.md §3.31): the records below a
//! point gone for readers exactly, by offset, time or to the end, for one partition or
//! all; its refusals, which change nothing; and purges surviving a reopen.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rill_broker::{Broker, BrokerConfig, Fetch};
use rill_format::{BatchBuilder, NewRecord};
use rill_proto::pb::{self, ErrorCode, ErrorResponse};
use rill_proto::{Request, RequestBody, Response, ResponseBody};

fn open(dir: &Path) -> Arc<Broker> {
    Arc::new(Broker::open(BrokerConfig::new(dir)).unwrap())
}

fn batch(values: &[&str]) -> Bytes {
    let mut b = BatchBuilder::new();
    for v in values {
        b.push(NewRecord::value(v.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

/// Topic s/t of two partitions, each with batches of 3 records: `batches` on partition
/// 0 and one on partition 1.
async fn setup(broker: &Arc<Broker>, batches: usize) {
    broker
        .create_topic(
            "s",
            "t",
            &pb::TopicOptions {
                partitions: 2,
                ..Default::default()
            },
            false,
            true,
        )
        .unwrap();
    for i in 0..batches {
        let values: Vec<String> = (0..3).map(|j| format!("{i}.{j}")).collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        broker.produce("s", "t", 0, batch(&values)).await.unwrap();
    }
    broker
        .produce("s", "t", 1, batch(&["a", "b", "c"]))
        .await
        .unwrap();
}

async fn call(broker: &Arc<Broker>, body: RequestBody) -> Result<ResponseBody, ErrorResponse> {
    match broker.handle(Request::new(body)).await {
        Response::Ok { body, .. } => Ok(body),
        Response::Err { error, .. } => Err(error),
    }
}

fn purge(before: pb::PurgeTo, value: i64, partition: Option<u32>) -> RequestBody {
    RequestBody::PurgeTopic(pb::PurgeTopicRequest {
        stream: "s".into(),
        topic: "t".into(),
        partition,
        before: before as i32,
        offset: value.max(0) as u64,
        timestamp_us: value,
    })
}

fn starts(body: Result<ResponseBody, ErrorResponse>) -> Vec<(u32, u64)> {
    match body {
        Ok(ResponseBody::PurgeTopic(r)) => r
            .log_starts
            .into_iter()
            .map(|s| (s.partition, s.offset.unwrap()))
            .collect(),
        other => panic!("purge: {other:?}"),
    }
}

fn code(e: &ErrorResponse) -> ErrorCode {
    ErrorCode::try_from(e.code).unwrap()
}

fn first_offsets(broker: &Broker) -> Vec<u64> {
    broker
        .describe_topic("s", "t")
        .unwrap()
        .1
        .iter()
        .map(|p| p.first_offset)
        .collect()
}

async fn fetch(broker: &Arc<Broker>, offset: u64) -> Result<Vec<u64>, ErrorResponse> {
    let body = RequestBody::Fetch(pb::FetchRequest {
        stream: "s".into(),
        topic: "t".into(),
        partition: 0,
        offset,
        max_bytes: 1 << 20,
        max_wait_ms: 0,
        min_bytes: 0,
    });
    match broker.handle(Request::new(body)).await {
        Response::Ok { payload, .. } => Ok(rill_format::Batches::new(&payload)
            .flat_map(|b| b.unwrap().records().map(|r| r.offset).collect::<Vec<_>>())
            .filter(|&o| o >= offset)
            .collect()),
        Response::Err { error, .. } => Err(error),
    }
}

#[tokio::test]
async fn a_purge_makes_exactly_the_records_below_it_gone() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 4).await; // partition 0: offsets 0..12, partition 1: 0..3
    // Inside the second batch of partition 0.
    assert_eq!(
        starts(call(&broker, purge(pb::PurgeTo::Offset, 4, Some(0))).await),
        [(0, 4)]
    );
    assert_eq!(first_offsets(&broker), [4, 0]);
    let below = fetch(&broker, 3).await.unwrap_err();
    assert_eq!(code(&below), ErrorCode::OffsetBeforeStart);
    assert_eq!(
        below.offset,
        Some(4),
        "the error names where reading goes on"
    );
    assert_eq!(
        fetch(&broker, 4).await.unwrap(),
        (4..12).collect::<Vec<_>>()
    );
    let first = broker
        .resolve_offset("s", "t", 0, pb::OffsetSpec::First, 0)
        .unwrap();
    assert_eq!(first, 4);
    // By time: every record is older than a far future time, so everything goes.
    let all = starts(call(&broker, purge(pb::PurgeTo::Timestamp, i64::MAX, None)).await);
    assert_eq!(all, [(0, 12), (1, 3)]);
    // Below the start now: nothing changes; the end: nothing more to go.
    let again = starts(call(&broker, purge(pb::PurgeTo::Offset, 2, None)).await);
    assert_eq!(again, [(0, 12), (1, 3)]);
    assert_eq!(
        starts(call(&broker, purge(pb::PurgeTo::End, 0, None)).await),
        [(0, 12), (1, 3)]
    );
    // Appends go on at the end, and are read.
    let produced = broker.produce("s", "t", 0, batch(&["new"])).await.unwrap();
    assert_eq!(produced.base_offset, 12);
    assert_eq!(fetch(&broker, 12).await.unwrap(), [12]);
}

#[tokio::test]
async fn a_refused_purge_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path());
    setup(&broker, 4).await;
    // 5 is within partition 0 (12 records) but past partition 1's end (3).
    let past = call(&broker, purge(pb::PurgeTo::Offset, 5, None))
        .await
        .unwrap_err();
    assert_eq!(code(&past), ErrorCode::OffsetBeyondEnd);
    assert_eq!(past.offset, Some(3));
    assert!(past.message.contains("partition 1"), "{}", past.message);
    assert_eq!(first_offsets(&broker), [0, 0], "no partition was purged");
    let bad = [
        (
            purge(pb::PurgeTo::Unspecified, 0, None),
            ErrorCode::InvalidRequest,
        ),
        (
            purge(pb::PurgeTo::End, 0, Some(2)),
            ErrorCode::PartitionNotFound,
        ),
        (
            RequestBody::PurgeTopic(pb::PurgeTopicRequest {
                stream: "s".into(),
                topic: "nope".into(),
                before: pb::PurgeTo::End as i32,
                ..Default::default()
            }),
            ErrorCode::TopicNotFound,
        ),
        (
            RequestBody::PurgeTopic(pb::PurgeTopicRequest {
                stream: "s".into(),
                topic: "t".into(),
                before: 99,
                ..Default::default()
            }),
            ErrorCode::InvalidRequest,
        ),
    ];
    for (body, want) in bad {
        let e = call(&broker, body).await.unwrap_err();
        assert_eq!(code(&e), want, "{}", e.message);
    }
    assert_eq!(first_offsets(&broker), [0, 0]);
}

#[tokio::test]
async fn purges_survive_a_reopen_and_stored_offsets_below_them_read_on_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        setup(&broker, 4).await;
        broker.store_offset("s", "t", 0, "c", 2).await.unwrap();
        starts(call(&broker, purge(pb::PurgeTo::Offset, 7, Some(0))).await);
        starts(call(&broker, purge(pb::PurgeTo::End, 0, Some(1))).await);
        broker.shutdown().unwrap();
    }
    let broker = open(dir.path());
    assert_eq!(first_offsets(&broker), [7, 3]);
    assert_eq!(
        fetch(&broker, 7).await.unwrap(),
        (7..12).collect::<Vec<_>>()
    );
    // A stored offset is left as it was: a fetch from it is told the start.
    assert_eq!(broker.get_offset("s", "t", 0, "c").unwrap(), Some(2));
    let read = broker
        .fetch(
            "s",
            "t",
            0,
            Fetch {
                offset: 2,
                max_bytes: 1 << 20,
                max_wait: std::time::Duration::ZERO,
                min_bytes: 0,
            },
        )
        .await;
    assert!(matches!(&read, Err(e) if e.offset() == Some(7)), "{read:?}");
}
