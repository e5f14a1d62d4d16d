//! The wire protocol end to end: round trip, pipelining, backpressure, and bad input
//! that must never take the server (or another connection) down.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use rill_proto::pb::{self, TopicOptions};
use rill_proto::{ErrorCode, FLAG_RESPONSE, Request, RequestBody, ResponseBody, encode_frame};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_then_fetch_round_trips_the_records() {
    let server = Harness::start(config()).await;
    let mut client = server.client().await;
    let (body, _) = ok(client
        .call(&create_topic(
            "shop",
            "orders",
            TopicOptions {
                partitions: 2,
                ..TopicOptions::default()
            },
        ))
        .await);
    let ResponseBody::CreateTopic(created) = body else {
        panic!("{body:?}")
    };
    assert!(created.created);

    let (body, _) = ok(client
        .call(&produce("shop", "orders", 1, &[b"one", b"two", b"three"]))
        .await);
    let ResponseBody::Produce(produced) = body else {
        panic!("{body:?}")
    };
    assert_eq!((produced.base_offset, produced.last_offset), (0, 2));
    assert!(!produced.duplicate);

    let mut request = fetch("shop", "orders", 0, 0);
    if let RequestBody::Fetch(f) = &mut request.body {
        f.partition = 1;
    }
    let (body, payload) = ok(client.call(&request).await);
    let ResponseBody::Fetch(fetched) = body else {
        panic!("{body:?}")
    };
    assert_eq!(fetched.next_offset, 3);
    assert_eq!(
        records(&payload),
        vec![
            (0, b"one".to_vec()),
            (1, b"two".to_vec()),
            (2, b"three".to_vec())
        ]
    );

    let text = server.metrics.render();
    assert!(text.contains("rill_records_in_total{stream=\"shop\",topic=\"orders\"} 3\n"));
    let bytes_out = format!(
        "rill_bytes_out_total{{stream=\"shop\",topic=\"orders\"}} {}\n",
        payload.len()
    );
    assert!(text.contains(&bytes_out), "{text}");
    assert_eq!(server.metrics.requests_total(rill_proto::Kind::Produce), 1);
    assert_eq!(server.metrics.connections(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_does_not_block_the_requests_behind_it() {
    let server = Harness::start(config()).await;
    let mut consumer = server.client().await;
    setup_topic(&mut consumer, "shop", "orders").await;

    let asked = Instant::now();
    let fetch_id = consumer.send(&fetch("shop", "orders", 0, 2000)).await;
    let list_id = consumer.send(&list_streams()).await;
    let (first, response) = consumer.recv().await.unwrap();
    assert_eq!(first, list_id, "the pipelined request is answered first");
    ok(response);

    let mut producer = server.client().await;
    ok(producer
        .call(&produce("shop", "orders", 0, &[b"wake"]))
        .await);

    let (id, response) = consumer.recv().await.unwrap();
    assert_eq!(id, fetch_id);
    let (_, payload) = ok(response);
    assert_eq!(records(&payload), vec![(0, b"wake".to_vec())]);
    assert!(
        asked.elapsed() < Duration::from_millis(1500),
        "the append woke the long poll before its 2 s wait ran out ({:?})",
        asked.elapsed()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_in_flight_window_holds_back_further_requests() {
    let server = Harness::start(rill_server::ServerConfig {
        max_in_flight_per_connection: 1,
        ..config()
    })
    .await;
    let mut client = server.client().await;
    setup_topic(&mut client, "shop", "orders").await;
    let fetch_id = client.send(&fetch("shop", "orders", 0, 300)).await;
    let list_id = client.send(&list_streams()).await;
    // With one slot, the second request is not even read until the first is answered.
    assert_eq!(client.recv().await.unwrap().0, fetch_id);
    assert_eq!(client.recv().await.unwrap().0, list_id);
    server.stop().await;
}

/// Deterministic bytes from a seed (xorshift64).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bytes_get_replies_or_a_close_and_the_server_goes_on() {
    let server = Harness::start(config()).await;
    let mut bystander = server.client().await;
    assert_serves_on(&mut bystander).await;
    for seed in 1..=16u64 {
        let mut bytes = noise(seed, 4096);
        if seed % 2 == 0 {
            // A plausible length prefix, so the garbage reaches the header checks.
            bytes[..4].copy_from_slice(&(seed as u32 * 16).to_le_bytes());
        }
        if seed % 4 == 0 {
            // A plausible header too (known kind, version 1, no flags, short control
            // part), so the garbage reaches the protobuf decoder.
            bytes[4..6].copy_from_slice(&(1 + seed as u16 % 15).to_le_bytes());
            bytes[6] = rill_proto::PROTOCOL_VERSION;
            bytes[7] = 0;
            bytes[16..20].copy_from_slice(&(seed as u32 % 8).to_le_bytes());
        }
        let mut client = server.client().await;
        client.send_raw(&bytes).await;
        client.finish_sending().await;
        // Whatever was answered decoded as a response (garbage can also happen to
        // be a valid request); then the connection closed.
        let answered = client.until_closed().await;
        assert!(answered.len() <= 4096 / 20, "{answered:?}");
        assert_serves_on(&mut bystander).await;
    }
    assert_serves(server.addr).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_length_prefix_is_answered_then_closed() {
    let server = Harness::start(config()).await;
    let mut bystander = server.client().await;
    let mut client = server.client().await;
    client.send_raw(&u32::MAX.to_le_bytes()).await;
    client.send_raw(&[0; 64]).await;
    let got = client.until_closed().await;
    assert_eq!(got.len(), 1, "{got:?}");
    let (id, response) = got.into_iter().next().unwrap();
    assert_eq!(id, 0);
    assert_eq!(code(&err(response).1), ErrorCode::FrameTooLarge);
    assert_serves_on(&mut bystander).await;
    assert_serves(server.addr).await;
    server.stop().await;
}

/// docs/PROTOCOL.md §1.5: the reply to a framing error is sent at once, so it can come
/// before the answers to requests read before the bad frame; those answers still
/// follow, and only then does the server close the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framing_error_reply_may_overtake_earlier_answers_which_still_come() {
    let server = Harness::start(config()).await;
    let mut client = server.client().await;
    setup_topic(&mut client, "shop", "orders").await;
    let poll = client.send(&fetch("shop", "orders", 0, 700)).await;
    client.send_raw(&u32::MAX.to_le_bytes()).await;
    let got = client.until_closed().await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, 0, "the framing-error reply first: {got:?}");
    assert_eq!(code(&err(got[0].1.clone()).1), ErrorCode::FrameTooLarge);
    assert_eq!(got[1].0, poll, "then the long poll read before it");
    let (body, payload) = ok(got[1].1.clone());
    assert!(matches!(body, ResponseBody::Fetch(_)), "{body:?}");
    assert!(payload.is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_length_prefix_is_answered_then_closed() {
    let server = Harness::start(config()).await;
    let mut client = server.client().await;
    client.send_raw(&3u32.to_le_bytes()).await;
    let got = client.until_closed().await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(code(&err(got[0].1.clone()).1), ErrorCode::InvalidRequest);
    assert_serves(server.addr).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kinds_and_versions_get_errors_and_the_connection_goes_on() {
    let server = Harness::start(config()).await;
    let mut bystander = server.client().await;
    let mut client = server.client().await;

    let unknown = encode_frame(999, 0, 42, &pb::ListStreamsRequest {}, Bytes::new()).unwrap();
    client.send_raw(&unknown.to_bytes()).await;
    let (id, response) = client.recv().await.unwrap();
    assert_eq!(id, 42);
    let (kind, error) = err(response);
    assert_eq!((kind, code(&error)), (999, ErrorCode::UnknownKind));
    assert_serves_on(&mut client).await;

    let mut future = list_streams().encode(43).unwrap().to_bytes().to_vec();
    future[6] = 9; // the version byte
    client.send_raw(&future).await;
    let (id, response) = client.recv().await.unwrap();
    assert_eq!(id, 43);
    assert_eq!(code(&err(response).1), ErrorCode::UnsupportedVersion);
    assert_serves_on(&mut client).await;

    // A control part that is not the kind's message.
    let garbage = encode_frame(5, 0, 44, &pb::ListStreamsRequest {}, Bytes::new()).unwrap();
    let mut garbage = garbage.to_bytes().to_vec();
    let control = [0xff, 0xff, 0xff];
    garbage[16..20].copy_from_slice(&(control.len() as u32).to_le_bytes());
    garbage.extend_from_slice(&control);
    let length = (garbage.len() - 4) as u32;
    garbage[..4].copy_from_slice(&length.to_le_bytes());
    client.send_raw(&garbage).await;
    let (id, response) = client.recv().await.unwrap();
    assert_eq!(id, 44);
    assert_eq!(code(&err(response).1), ErrorCode::InvalidRequest);
    assert_serves_on(&mut client).await;

    assert_serves_on(&mut bystander).await;
    assert!(
        server
            .metrics
            .render()
            .contains("rill_request_errors_total{kind=\"unknown\"} 1\n")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_frame_sent_as_a_request_is_answered_then_closed() {
    let server = Harness::start(config()).await;
    let mut client = server.client().await;
    let frame = encode_frame(
        4,
        FLAG_RESPONSE,
        7,
        &pb::ListStreamsResponse::default(),
        Bytes::new(),
    )
    .unwrap();
    client.send_raw(&frame.to_bytes()).await;
    let got = client.until_closed().await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 7);
    assert_eq!(code(&err(got[0].1.clone()).1), ErrorCode::InvalidRequest);
    assert_serves(server.addr).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_frame_then_eof_is_closed_after_earlier_replies() {
    let server = Harness::start(config()).await;
    let mut bystander = server.client().await;
    let mut client = server.client().await;
    let first = client.send(&list_streams()).await;
    let whole = list_streams().encode(99).unwrap().to_bytes();
    client.send_raw(&whole[..whole.len() / 2 + 1]).await;
    client.finish_sending().await;
    let got = client.until_closed().await;
    assert_eq!(got.len(), 1, "only the whole request is answered: {got:?}");
    assert_eq!(got[0].0, first);
    assert_serves_on(&mut bystander).await;
    assert_serves(server.addr).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_topic_name_is_an_error_reply() {
    let server = Harness::start(config()).await;
    let mut bystander = server.client().await;
    let mut client = server.client().await;
    let (kind, error) = err(client
        .call(&create_topic("shop", "no/slashes", TopicOptions::default()))
        .await);
    assert_eq!(kind, rill_proto::Kind::CreateTopic as u16);
    assert_eq!(code(&error), ErrorCode::InvalidName);
    assert_serves_on(&mut client).await;
    assert_serves_on(&mut bystander).await;
    assert_eq!(
        server
            .metrics
            .request_errors_total(rill_proto::Kind::CreateTopic),
        1
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_over_the_topic_limit_is_an_error_reply() {
    let server = Harness::start(config()).await;
    let mut bystander = server.client().await;
    let mut client = server.client().await;
    ok(client
        .call(&create_topic(
            "shop",
            "small",
            TopicOptions {
                max_record_bytes: Some(1024),
                ..TopicOptions::default()
            },
        ))
        .await);
    let big = vec![7u8; 4096];
    let (_, error) = err(client.call(&produce("shop", "small", 0, &[&big])).await);
    assert_eq!(code(&error), ErrorCode::RecordTooLarge);
    ok(client.call(&produce("shop", "small", 0, &[b"fits"])).await);
    assert_serves_on(&mut bystander).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_max_frame_bytes_is_refused() {
    let server = Harness::start(rill_server::ServerConfig {
        max_frame_bytes: 1024,
        ..config()
    })
    .await;
    let mut client = server.client().await;
    setup_topic(&mut client, "shop", "orders").await;
    let big = vec![1u8; 2048];
    let request = Request::with_payload(
        RequestBody::Produce(pb::ProduceRequest {
            stream: "shop".into(),
            topic: "orders".into(),
            partition: 0,
            ranged: false,
        }),
        batch(&[&big]),
    );
    client.send(&request).await;
    let got = client.until_closed().await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(code(&err(got[0].1.clone()).1), ErrorCode::FrameTooLarge);
    assert_serves(server.addr).await;
    server.stop().await;
}
