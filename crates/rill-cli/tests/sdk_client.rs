//! The client itself: the low-level `raw` escape hatch (both transports) and how long
//! `connect` keeps trying to reach a server (`init_retries`, TCP).

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use rill_client::raw::{Bytes, Request, Response, messages};
use rill_client::{Client, ClientError, ErrorCode};

over_both_transports!(raw_sends_any_request_and_returns_its_typed_answer);

async fn raw_sends_any_request_and_returns_its_typed_answer(client: &Client) {
    let t = client.stream("raw").topic("t");
    t.ensure(2).await.unwrap();
    let at = t
        .publish()
        .value("hello")
        .partition(1)
        .send()
        .await
        .unwrap();
    // A request the typed API wraps, to compare: the same answer through both.
    let (answer, payload) = client
        .raw(
            Request::DescribeTopic(messages::DescribeTopicRequest {
                stream: "raw".into(),
                topic: "t".into(),
            }),
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(payload.is_empty());
    let Response::DescribeTopic(d) = answer else {
        panic!("{answer:?}");
    };
    assert_eq!(d.partitions.len(), 2);
    assert_eq!(d.partitions[1].next_offset, at.offset + 1);
    // Hello, which the typed API only uses inside connect: the server's limits.
    let (answer, _) = client
        .raw(
            Request::Hello(messages::HelloRequest {
                client: "raw-test".into(),
                protocol_version: 1,
            }),
            Bytes::new(),
        )
        .await
        .unwrap();
    let Response::Hello(h) = answer else {
        panic!("{answer:?}");
    };
    assert!(h.max_batch_bytes > 0, "{h:?}");
    // A raw fetch returns the batches as the payload.
    let (answer, payload) = client
        .raw(
            Request::Fetch(messages::FetchRequest {
                stream: "raw".into(),
                topic: "t".into(),
                partition: 1,
                offset: 0,
                max_bytes: 1 << 20,
                max_wait_ms: 0,
                min_bytes: 0,
            }),
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(matches!(answer, Response::Fetch(_)), "{answer:?}");
    assert!(
        payload.windows(5).any(|w| w == b"hello"),
        "the batch holds the record"
    );
    // An error answer is typed as everywhere else.
    let err = client
        .raw(
            Request::DescribeTopic(messages::DescribeTopicRequest {
                stream: "raw".into(),
                topic: "missing".into(),
            }),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicNotFound), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_without_init_retries_fails_at_once_when_nothing_listens() {
    let port = common::free_port();
    let started = Instant::now();
    let err = Client::builder()
        .init_retries(0, Duration::from_secs(10))
        .connect(&format!("rill://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Connection { .. }), "{err}");
    // No retry pause was taken (a generous bound: one 10 s pause would exceed it).
    assert!(started.elapsed() < Duration::from_secs(8), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_waits_for_a_server_that_is_starting() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let data = dir.path().join("data");
    // The server comes up a little after the client starts trying.
    let server = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        common::FixedServer::start(&data, port)
    });
    let client = Client::builder()
        .init_retries(300, Duration::from_millis(100))
        .connect(&format!("rill://127.0.0.1:{port}"))
        .await
        .unwrap();
    client.stream("s").topic("t").ensure(1).await.unwrap();
    let _server = server.join().unwrap();
}
