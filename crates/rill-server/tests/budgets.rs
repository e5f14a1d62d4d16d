//! Memory and time bounds on clients that misbehave: one that never reads its
//! responses, ones that announce huge frames and stall, one that stops reading for
//! good. What is checked is bytes — answered, sent, held — never how fast anything
//! goes; waits are "until it happens, within a generous bound".

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use rill_proto::pb::{self, TopicOptions};
use rill_proto::{Kind, Request, RequestBody};
use rill_server::{CloseReason, ServerConfig};
use tokio::io::AsyncWriteExt;

/// Bytes a test allows for what the kernel holds in one connection's socket buffers
/// (the server's send or receive buffer grows on its own; the test client's are
/// 64 KiB). Generous: the bounds below hold with this much unaccounted per connection.
const KERNEL_SLACK_BYTES: usize = 6 << 20;
/// Bytes of one fetch response in these tests: two batches of one record each.
const RECORD_BYTES: usize = (1 << 20) - (4 << 10);
const FETCH_MAX_BYTES: u32 = 2 << 20;

/// A topic whose partition holds `batches` batches of one `RECORD_BYTES` record.
async fn big_topic(client: &mut TestClient, batches: usize) {
    ok(client
        .call(&create_topic(
            "shop",
            "big",
            TopicOptions {
                max_record_bytes: Some(4 << 20),
                ..TopicOptions::default()
            },
        ))
        .await);
    let value = vec![7u8; RECORD_BYTES];
    for _ in 0..batches {
        ok(client.call(&produce("shop", "big", 0, &[&value])).await);
    }
}

fn big_fetch() -> Request {
    Request::new(RequestBody::Fetch(pb::FetchRequest {
        stream: "shop".into(),
        topic: "big".into(),
        partition: 0,
        offset: 0,
        max_bytes: FETCH_MAX_BYTES,
        max_wait_ms: 0,
        min_bytes: 1,
    }))
}

/// The wire size of a `big_fetch` response, measured on a client that reads.
async fn fetch_response_bytes(client: &mut TestClient) -> usize {
    let (_, payload) = ok(client.call(&big_fetch()).await);
    assert!(
        payload.len() > (3 << 20) / 2,
        "two batches: {}",
        payload.len()
    );
    payload.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_held_to_its_connection_budget() {
    const BUDGET: usize = 16 << 20;
    const FETCHES: usize = 64;
    let server = Harness::start(ServerConfig {
        max_frame_bytes: 8 << 20,
        connection_buffer_bytes_max: BUDGET,
        ..config()
    })
    .await;
    let mut reader = server.client().await;
    big_topic(&mut reader, 4).await;
    let response_bytes = fetch_response_bytes(&mut reader).await;
    let fetched_before = server.metrics.requests_total(Kind::Fetch);

    // 64 pipelined 2 MiB fetches, 128 MiB of answers, on a socket never read.
    let mut deaf = TestClient::connect_small(server.addr).await;
    for _ in 0..FETCHES {
        deaf.send(&big_fetch()).await;
    }
    let metrics = Arc::clone(&server.metrics);
    let answered = || (metrics.requests_total(Kind::Fetch) - fetched_before) as usize;
    // Until the budget is spent (or, without one, every fetch was answered).
    eventually("the budget fills or every fetch is answered", || {
        answered() == FETCHES || metrics.buffer_bytes() as usize > BUDGET / 2
    })
    .await;
    // Let whatever can still move fill the socket buffers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = metrics.buffer_bytes() as usize;
    assert!(
        held <= BUDGET,
        "{held} bytes held, over the {BUDGET}-byte budget"
    );
    // Each answered fetch read its data from the log: what was not written to the
    // socket is held in memory. Only the budget and the kernel's buffers can hold it.
    let produced = answered() * response_bytes;
    eprintln!("{} fetches answered, {held} bytes held", answered());
    assert!(
        produced <= BUDGET + KERNEL_SLACK_BYTES,
        "{} of {FETCHES} fetches answered ({produced} bytes) for a client that reads nothing",
        answered()
    );

    // Another connection is served, large fetches included, while the first is stuck.
    assert_eq!(fetch_response_bytes(&mut reader).await, response_bytes);
    assert_serves(server.addr).await;

    // The stuck connection's budget comes back when it goes away.
    drop(deaf);
    eventually("the budget is given back", || metrics.buffer_bytes() == 0).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_announced_huge_then_stalled_hold_no_more_than_the_budget() {
    const FRAME: usize = 16 << 20;
    const STALLERS: usize = 6;
    const GRANTED: usize = 2;
    let per_connection = FRAME + (64 << 10);
    let server = Harness::start(ServerConfig {
        max_frame_bytes: FRAME as u32,
        connection_buffer_bytes_max: per_connection,
        // Room for two whole frames, and some for everyone else.
        buffer_bytes_max: GRANTED * per_connection + (1 << 20),
        ..config()
    })
    .await;
    let mut bystander = server.client().await;
    assert_serves_on(&mut bystander).await;

    // Each staller announces a 16 MiB frame and sends all of it but the last byte, as
    // fast as the server takes it.
    let body = Bytes::from(vec![0u8; FRAME - 5]);
    let sent = Arc::new(AtomicUsize::new(0));
    let mut stallers = Vec::new();
    for _ in 0..STALLERS {
        let mut stream = TestClient::connect_small(server.addr).await.into_stream();
        let (body, sent) = (body.clone(), Arc::clone(&sent));
        stallers.push(tokio::spawn(async move {
            stream
                .write_all(&(FRAME as u32).to_le_bytes())
                .await
                .unwrap();
            for chunk in body.chunks(64 << 10) {
                if stream.write_all(chunk).await.is_err() {
                    break;
                }
                sent.fetch_add(chunk.len(), Ordering::Relaxed);
            }
            // Stalled: hold the connection open until the test ends it.
            std::future::pending::<()>().await;
        }));
    }
    let metrics = Arc::clone(&server.metrics);
    // Until the frames that got a grant are in (without budgets, all of them are).
    eventually("the granted frames are sent", || {
        sent.load(Ordering::Relaxed) >= GRANTED * body.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent_bytes = sent.load(Ordering::Relaxed);
    // The server read the granted frames; the others only got as far as the kernel's
    // buffers and the 64 KiB the reader reads ahead.
    let bound = GRANTED * FRAME + (STALLERS - GRANTED) * (KERNEL_SLACK_BYTES + (64 << 10));
    assert!(
        sent_bytes <= bound,
        "{sent_bytes} bytes of stalled frames taken in, more than {bound}"
    );
    let held = metrics.buffer_bytes() as usize;
    assert!(held <= GRANTED * per_connection + (1 << 20), "{held}");
    assert!(
        held >= GRANTED * FRAME,
        "the granted frames are counted: {held}"
    );
    eprintln!("{sent_bytes} bytes of stalled frames taken in, {held} held");

    // Everyone else is still served, on old and new connections.
    assert_serves_on(&mut bystander).await;
    assert_serves(server.addr).await;

    for staller in &stallers {
        staller.abort();
    }
    for staller in stallers {
        let _ = staller.await;
    }
    eventually("the stalled frames' budget is given back", || {
        metrics.buffer_bytes() == 0
    })
    .await;
    assert_serves_on(&mut bystander).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_read_is_closed_after_the_write_timeout() {
    let server = Harness::start(ServerConfig {
        max_frame_bytes: 8 << 20,
        connection_buffer_bytes_max: 16 << 20,
        write_timeout: Duration::from_millis(300),
        ..config()
    })
    .await;
    let mut reader = server.client().await;
    big_topic(&mut reader, 4).await;
    let mut deaf = TestClient::connect_small(server.addr).await;
    for _ in 0..32 {
        deaf.send(&big_fetch()).await;
    }
    let metrics = Arc::clone(&server.metrics);
    eventually("the connection is closed for not reading", || {
        metrics.connections_closed_total(CloseReason::WriteTimeout) == 1
    })
    .await;
    // Its requests are cancelled and its budget given back; it is gone.
    eventually("the budget is given back", || metrics.buffer_bytes() == 0).await;
    eventually("only the reader is left", || metrics.connections() == 1).await;
    // The client finds the connection closed after whatever had reached it.
    let got = deaf.until_closed().await;
    assert!(got.len() < 32, "{} answers", got.len());
    assert!(
        server
            .metrics
            .render()
            .contains("rill_connections_closed_total{reason=\"write_timeout\"} 1\n")
    );
    assert_serves_on(&mut reader).await;
    server.stop().await;
}

// One thread, so the reader reaches the frame before the fetches' tasks run: the
// order that would deadlock.
#[tokio::test(flavor = "current_thread")]
async fn a_frame_waiting_for_an_in_flight_slot_holds_no_budget() {
    // The smallest budget the configuration allows, two slots: a 3 MiB frame and two
    // 2 MiB fetches cannot all hold their bytes at once. Were the frame's bytes held
    // while it waits for a slot, and the fetches' slots held while they wait for
    // bytes, nothing would move.
    const FRAME_MAX: u32 = 4 << 20;
    let server = Harness::start(ServerConfig {
        max_frame_bytes: FRAME_MAX,
        connection_buffer_bytes_max: FRAME_MAX as usize + 20,
        max_in_flight_per_connection: 2,
        ..config()
    })
    .await;
    let mut client = server.client().await;
    big_topic(&mut client, 4).await;
    let big = vec![9u8; 3 << 20];
    let first = client.send(&big_fetch()).await;
    let second = client.send(&big_fetch()).await;
    let third = client.send(&produce("shop", "big", 0, &[&big])).await;
    let mut answered = Vec::new();
    for _ in 0..3 {
        let (id, response) = client.recv().await.expect("every request is answered");
        ok(response);
        answered.push(id);
    }
    answered.sort_unstable();
    assert_eq!(answered, vec![first, second, third]);
    assert_serves_on(&mut client).await;
    server.stop().await;
}
