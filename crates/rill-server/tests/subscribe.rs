//! Push streaming on the wire (docs/PROTOCOL.md §3.32–3.34): the window holds the
//! server's pushes, credit resumes them, every record comes once and in order, and a
//! subscription ends with one last frame (after an Unsubscribe, the client's EOF, an
//! error, or shutdown).

mod common;

use std::time::Duration;

use common::*;
use rill_proto::pb;
use rill_proto::{ErrorCode, FEATURE_SUBSCRIBE, Request, RequestBody, Response, ResponseBody};
use rill_server::ServerConfig;

/// Bytes of each record value in these tests (one record per batch).
const VALUE_BYTES: usize = 10_000;
/// How long "nothing more comes" is waited for.
const QUIET: Duration = Duration::from_millis(300);

fn subscribe(topic: &str, offset: u64, bytes: u64, frames: u32) -> Request {
    Request::new(RequestBody::Subscribe(pb::SubscribeRequest {
        stream: "shop".into(),
        topic: topic.into(),
        partition: 0,
        offset,
        credit_bytes: bytes,
        credit_frames: frames,
    }))
}

fn credit(subscription: u64, bytes: u64, frames: u32) -> Request {
    Request::new(RequestBody::Credit(pb::CreditRequest {
        subscription,
        bytes,
        frames,
    }))
}

fn unsubscribe(subscription: u64) -> Request {
    Request::new(RequestBody::Unsubscribe(pb::UnsubscribeRequest {
        subscription,
    }))
}

/// Publishes `n` one-record batches of `VALUE_BYTES`, values tagged with their number
/// from `first`.
async fn publish(client: &mut TestClient, topic: &str, first: u64, n: u64) {
    for i in first..first + n {
        let mut value = vec![b'x'; VALUE_BYTES];
        value[..8].copy_from_slice(&i.to_le_bytes());
        ok(client.call(&produce("shop", topic, 0, &[&value])).await);
    }
}

/// What a subscription delivered: records in order, payload bytes, frames.
#[derive(Debug, Default)]
struct Seen {
    records: Vec<u64>,
    bytes: u64,
    batches: u32,
}

impl Seen {
    /// Takes one pushed frame of subscription `id`; returns it for the caller's checks.
    fn take(&mut self, id: u64, frame: (u64, bool, Response)) -> (bool, pb::SubscribeResponse) {
        let (got, more, response) = frame;
        assert_eq!(got, id, "a push carries the Subscribe's correlation id");
        let (body, payload) = ok(response);
        let ResponseBody::Subscribe(r) = body else {
            panic!("not a SubscribeResponse: {body:?}");
        };
        self.bytes += payload.len() as u64;
        for (offset, value) in records(&payload) {
            assert_eq!(
                u64::from_le_bytes(value[..8].try_into().unwrap()),
                offset,
                "values tagged with their offsets"
            );
            if offset >= self.records.last().map_or(0, |l| l + 1) {
                self.records.push(offset);
            }
            self.batches += 1;
        }
        (more, r)
    }

    /// Takes pushes until none comes for `QUIET`.
    async fn drain(&mut self, client: &mut TestClient, id: u64) {
        while let Some(frame) = client.recv_within(QUIET).await {
            let (more, _) = self.take(id, frame);
            assert!(more, "the stream goes on");
        }
    }
}

#[tokio::test]
async fn pushes_stay_within_the_window_and_credit_resumes_them_in_order() {
    let h = Harness::start(config()).await;
    let mut client = h.client().await;
    let hello = Request::new(RequestBody::Hello(pb::HelloRequest {
        client: "test".into(),
        protocol_version: 1,
    }));
    let (body, _) = ok(client.call(&hello).await);
    let ResponseBody::Hello(hello) = body else {
        panic!("{body:?}")
    };
    assert_eq!(hello.features & FEATURE_SUBSCRIBE, FEATURE_SUBSCRIBE);
    // A single node serves elastic topics (docs/RANGES.md §5).
    assert_eq!(
        hello.features & rill_proto::FEATURE_RANGES,
        rill_proto::FEATURE_RANGES
    );

    setup_topic(&mut client, "shop", "orders").await;
    publish(&mut client, "orders", 0, 50).await;

    // A window of three and a half records' batches.
    let window = 35_000;
    let id = client.send(&subscribe("orders", 0, window, 1000)).await;
    let mut seen = Seen::default();
    seen.drain(&mut client, id).await;
    let batch_bytes = seen.bytes / u64::from(seen.batches.max(1));
    assert!(seen.bytes > 0, "the window's first part came");
    assert!(
        seen.bytes <= window + batch_bytes,
        "at most the window and one batch: {seen:?}"
    );
    assert!(seen.records.len() < 50, "held back by the window: {seen:?}");
    // The connection serves other requests meanwhile.
    assert_serves_on(&mut client).await;

    // Credit what was taken, again and again: everything comes, in order, once.
    let mut granted = seen.bytes;
    while seen.records.len() < 50 {
        let before = seen.bytes;
        let credit_id = client.send(&credit(id, granted, 1000)).await;
        // The Credit's answer, and a push (the credit resumed the stream).
        let mut answered = false;
        while !answered || seen.bytes == before {
            let frame = client
                .recv_within(PATIENCE)
                .await
                .expect("the credit's answer and a push");
            if frame.0 == credit_id {
                ok(frame.2);
                answered = true;
            } else {
                seen.take(id, frame);
            }
        }
        // Then whatever else the credit allows.
        seen.drain(&mut client, id).await;
        granted = seen.bytes - before;
    }
    assert_eq!(seen.records, (0..50).collect::<Vec<_>>());

    // The live tail: records appended now are pushed as they come.
    client.send(&credit(id, 1 << 20, 1000)).await;
    let mut producer = h.client().await;
    publish(&mut producer, "orders", 50, 5).await;
    while seen.records.len() < 55 {
        let frame = client.recv_within(PATIENCE).await.expect("the new records");
        if frame.0 == id {
            seen.take(id, frame);
        }
    }
    assert_eq!(seen.records, (0..55).collect::<Vec<_>>());

    // Unsubscribe: the stream's last frame, then the answer with where it stopped.
    let unsub = client.send(&unsubscribe(id)).await;
    let mut last = None;
    let mut stopped = None;
    while stopped.is_none() {
        let (got, more, response) = client.recv_within(PATIENCE).await.expect("the answer");
        if got == unsub {
            assert!(!more);
            assert!(last.is_some(), "the last frame comes before the answer");
            let (body, _) = ok(response);
            let ResponseBody::Unsubscribe(u) = body else {
                panic!("{body:?}")
            };
            stopped = Some(u.next_offset);
        } else if got == id {
            let (more, r) = seen.take(id, (got, more, response));
            if r.last {
                assert!(!more, "the last frame has no MORE");
                last = Some(r.next_offset);
            }
        } else {
            ok(response); // a Credit's answer
        }
    }
    assert_eq!(last, Some(55));
    assert_eq!(stopped, Some(55));
    // Credit for a subscription that ended is answered and ignored.
    ok(client.call(&credit(id, 10, 1)).await);
    assert_serves_on(&mut client).await;
    h.stop().await;
}

/// A push carries at most a quarter of the Subscribe's grant (its first batch whole), so
/// a large window is several pushes: the server sends the next while the client's
/// credit for the one before is on its way.
#[tokio::test]
async fn a_window_is_several_pushes() {
    let h = Harness::start(config()).await;
    let mut client = h.client().await;
    setup_topic(&mut client, "shop", "wide").await;
    publish(&mut client, "wide", 0, 40).await;
    // Room for all 40 batches at once: one push would carry them all.
    let window = 1_000_000;
    let id = client.send(&subscribe("wide", 0, window, 1000)).await;
    let mut seen = Seen::default();
    let mut frames = Vec::new();
    while let Some(frame) = client.recv_within(QUIET).await {
        let before = seen.bytes;
        let (more, _) = seen.take(id, frame);
        assert!(more, "the stream goes on");
        frames.push(seen.bytes - before);
    }
    assert_eq!(seen.records, (0..40).collect::<Vec<_>>());
    assert!(frames.len() >= 2, "one window, several pushes: {frames:?}");
    assert!(
        frames.iter().all(|&bytes| bytes <= window / 4),
        "each push at most a quarter of the window: {frames:?}"
    );
    h.stop().await;
}

/// The window counts frames too: with two frames granted, the first (at once, empty at
/// the tail) and the next append are pushed, a further append waits for credit.
#[tokio::test]
async fn the_frames_of_the_window_hold_the_live_tail() {
    let h = Harness::start(config()).await;
    let mut client = h.client().await;
    setup_topic(&mut client, "shop", "tail").await;
    publish(&mut client, "tail", 0, 3).await;
    let id = client.send(&subscribe("tail", 3, 1 << 30, 2)).await;
    let mut seen = Seen::default();
    let (more, first) = seen.take(id, client.recv_within(PATIENCE).await.expect("the first"));
    assert!(more);
    assert_eq!((first.next_offset, first.log_end), (3, 3), "{first:?}");
    let mut producer = h.client().await;
    publish(&mut producer, "tail", 3, 1).await;
    seen.take(id, client.recv_within(PATIENCE).await.expect("the append"));
    publish(&mut producer, "tail", 4, 1).await;
    assert!(
        client.recv_within(QUIET).await.is_none(),
        "two frames granted, two pushed"
    );
    let c = client.send(&credit(id, 0, 1)).await;
    let mut answered = false;
    while seen.records.len() < 2 {
        let frame = client
            .recv_within(PATIENCE)
            .await
            .expect("pushed after credit");
        if frame.0 == c {
            ok(frame.2);
            answered = true;
        } else {
            seen.take(id, frame);
        }
    }
    assert_eq!(seen.records, vec![3, 4]);
    if !answered {
        let (got, _, response) = client.recv_within(PATIENCE).await.expect("the answer");
        assert_eq!(got, c);
        ok(response);
    }
    h.stop().await;
}

#[tokio::test]
async fn a_subscription_that_cannot_be_served_ends_with_its_error() {
    let config = ServerConfig {
        max_in_flight_per_connection: 4,
        ..config()
    };
    let h = Harness::start(config).await;
    let mut client = h.client().await;
    setup_topic(&mut client, "shop", "orders").await;
    publish(&mut client, "orders", 0, 2).await;
    let ended = |response: (u64, bool, Response)| {
        let (_, more, response) = response;
        assert!(!more, "an error ends the stream");
        code(&err(response).1)
    };
    for (request, expected) in [
        (subscribe("nope", 0, 1000, 10), ErrorCode::TopicNotFound),
        (subscribe("orders", 7, 1000, 10), ErrorCode::OffsetBeyondEnd),
        (subscribe("orders", 0, 0, 10), ErrorCode::InvalidRequest),
        (subscribe("orders", 0, 1000, 0), ErrorCode::InvalidRequest),
    ] {
        client.send(&request).await;
        let frame = client.recv_within(PATIENCE).await.expect("an answer");
        assert_eq!(ended(frame), expected, "{request:?}");
    }

    // Half the in-flight slots (2 of 4) at most.
    let a = client.send(&subscribe("orders", 0, 1 << 20, 10)).await;
    let b = client.send(&subscribe("orders", 0, 1 << 20, 10)).await;
    let mut seen_a = Seen::default();
    let mut seen_b = Seen::default();
    for _ in 0..2 {
        let frame = client.recv_within(PATIENCE).await.unwrap();
        if frame.0 == a {
            seen_a.take(a, frame);
        } else {
            seen_b.take(b, frame);
        }
    }
    client.send(&subscribe("orders", 0, 1 << 20, 10)).await;
    let frame = client.recv_within(PATIENCE).await.unwrap();
    assert_eq!(ended(frame), ErrorCode::Busy);
    assert_eq!(seen_a.records, vec![0, 1]);
    assert_eq!(seen_b.records, vec![0, 1]);
    // A credit that would overflow the window is refused; the stream goes on.
    let (_, e) = err(client.call(&credit(a, u64::MAX, 1)).await);
    assert_eq!(code(&e), ErrorCode::InvalidRequest);
    assert_serves_on(&mut client).await;
    // Deleting the topic ends both, with the fetch's error.
    let delete = Request::new(RequestBody::DeleteTopic(pb::DeleteTopicRequest {
        stream: "shop".into(),
        topic: "orders".into(),
    }));
    let mut admin = h.client().await;
    ok(admin.call(&delete).await);
    let mut ends = Vec::new();
    while ends.len() < 2 {
        let frame = client.recv_within(PATIENCE).await.expect("the ends");
        let id = frame.0;
        let code = ended(frame);
        ends.push((id, code));
    }
    ends.sort_unstable();
    assert_eq!(
        ends,
        vec![(a, ErrorCode::TopicNotFound), (b, ErrorCode::TopicNotFound)]
    );
    h.stop().await;
}

#[tokio::test]
async fn the_clients_eof_and_the_servers_shutdown_end_subscriptions() {
    let h = Harness::start(config()).await;
    let mut client = h.client().await;
    setup_topic(&mut client, "shop", "orders").await;
    publish(&mut client, "orders", 0, 1).await;

    // EOF from the client: the subscription's last frame, then the server closes.
    let id = client.send(&subscribe("orders", 0, 1 << 20, 10)).await;
    let mut seen = Seen::default();
    seen.take(id, client.recv_within(PATIENCE).await.unwrap());
    client.finish_sending().await;
    let rest = client.until_closed().await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    let (got, response) = rest.into_iter().next().unwrap();
    assert_eq!(got, id);
    let (body, _) = ok(response);
    assert!(
        matches!(
            body,
            ResponseBody::Subscribe(pb::SubscribeResponse {
                last: true,
                next_offset: 1,
                ..
            })
        ),
        "{body:?}"
    );

    // Shutdown: SHUTTING_DOWN, and the server stops without waiting out its drain.
    let mut client = h.client().await;
    let id = client.send(&subscribe("orders", 0, 1 << 20, 10)).await;
    seen.take(id, client.recv_within(PATIENCE).await.unwrap());
    let mut h = h;
    h.begin_shutdown();
    let (got, more, response) = client.recv_within(PATIENCE).await.expect("the end");
    assert_eq!(got, id);
    assert!(!more);
    assert_eq!(code(&err(response).1), ErrorCode::ShuttingDown);
    tokio::time::timeout(Duration::from_secs(10), h.wait_stopped())
        .await
        .expect("the server stops while a subscription was open");
}
