//! The client itself: the low-level `raw` escape hatch (both transports) and how long
//! `connect` keeps trying to reach a server (`init_retries`, TCP).

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use rill_client::raw::{Bytes, Request, Response, messages};
use rill_client::{Client, ClientError, Codec, ErrorCode};

over_both_transports!(
    raw_sends_any_request_and_returns_its_typed_answer,
    a_codec_is_a_value_with_its_own_state,
);

/// A codec with state: JSON behind a tag, which reading checks.
struct Tagged {
    tag: &'static str,
}

impl Codec for Tagged {
    fn encode<T: serde::Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, ClientError> {
        let mut out = format!("{}:", self.tag).into_bytes();
        out.extend(serde_json::to_vec(value).map_err(|e| ClientError::Encode(e.to_string()))?);
        Ok(out)
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, String> {
        let body = bytes
            .strip_prefix(format!("{}:", self.tag).as_bytes())
            .ok_or_else(|| format!("not tagged {}", self.tag))?;
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }
}

async fn a_codec_is_a_value_with_its_own_state(client: &Client) {
    let t = client.stream("codec").topic("tagged");
    t.ensure(1).await.unwrap();
    let v1 = t.typed::<u32, _>(Tagged { tag: "v1" });
    let at = v1.publish(&7).await.unwrap();
    t.publish()
        .encoded(&Tagged { tag: "v2" }, &8u32)
        .send()
        .await
        .unwrap();
    let mut reader = v1.records("tagged").unwrap();
    let first = reader.next().await.unwrap().unwrap();
    assert_eq!((first.value, first.offset), (7, at.offset));
    // The second was written by another codec value: a decode error with its position.
    match reader.next().await.unwrap() {
        Err(ClientError::Decode { offset, reason, .. }) => {
            assert_eq!(offset, at.offset + 1);
            assert!(reason.contains("not tagged v1"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let v2 = t.typed::<u32, _>(Tagged { tag: "v2" });
    assert_eq!(v2.codec().tag, "v2");
}

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
