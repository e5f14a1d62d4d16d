//! `Topic::subscribe` (push streaming, docs/PROTOCOL.md §3.32) against the real binary:
//! every record once and in order while records are appended, through a window small
//! enough that credit goes back and forth hundreds of times; across a server killed
//! (SIGKILL) and restarted mid-stream, and across connections cut mid-frame by a proxy;
//! `None` where push streaming is not served (the embedded transport), so a caller
//! falls back to fetching; and named consumers and group members reading by push.

#[macro_use]
mod common;

use std::time::Duration;

use common::{FixedServer, Harness, free_port};
use rill_client::{Client, Message, Position, RetryPolicy, Subscription, Topic};

over_both_transports!(
    a_named_consumer_reads_by_push_over_tcp_and_by_fetch_embedded,
    a_group_member_reads_by_push_over_tcp_and_by_fetch_embedded,
);

/// Reads from `sub` until records up to `until` have come (a push may bring more);
/// checks offsets run on from `first` without a gap or a repeat and each value names
/// its offset. Returns the offset after the last record read.
async fn read(sub: &mut Subscription, first: u64, until: u64) -> u64 {
    let mut next = first;
    while next < until {
        let fetched = tokio::time::timeout(Duration::from_secs(30), sub.next())
            .await
            .expect("records within 30 s")
            .expect("next");
        for r in &fetched.records {
            assert_eq!(r.offset, next, "every record once, in order");
            assert_eq!(&r.value[..], format!("v{next}").as_bytes());
            next += 1;
        }
        assert_eq!(sub.next_offset(), next);
    }
    next
}

/// Publishes records `from..to` (values `v{n}`) in batches of 50.
async fn publish(t: &Topic, from: u64, to: u64, pause: Duration) {
    let mut n = from;
    while n < to {
        let end = (n + 50).min(to);
        t.publish_batch((n..end).map(|i| Message::new(format!("v{i}"))))
            .await
            .unwrap();
        n = end;
        tokio::time::sleep(pause).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_reads_every_record_once_while_records_are_appended() {
    let h = Harness::tcp().await;
    let t = h.client.stream("push").topic("t");
    t.ensure(1).await.unwrap();
    publish(&t, 0, 500, Duration::ZERO).await;
    // About four batches of 50 small records: credit goes back every other batch.
    let mut sub = t
        .subscribe(Position::new(0, 0), 4096)
        .await
        .unwrap()
        .expect("a server serves push streaming");
    let producer = {
        let t = t.clone();
        tokio::spawn(async move { publish(&t, 500, 5000, Duration::from_millis(1)).await })
    };
    assert_eq!(read(&mut sub, 0, 5000).await, 5000);
    producer.await.unwrap();
    // A subscription from the middle starts there, whatever its batch, and reads on to
    // the end.
    let mut mid = t
        .subscribe(Position::new(0, 1234), 1 << 20)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read(&mut mid, 1234, 5000).await, 5000);
    assert_eq!(mid.close().await.unwrap(), 5000);
    assert_eq!(sub.close().await.unwrap(), 5000);
    // Beyond the end: the error a fetch gets, once the stream says so.
    let mut beyond = t
        .subscribe(Position::new(0, 9999), 4096)
        .await
        .unwrap()
        .unwrap();
    let e = beyond.next().await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(rill_client::ErrorCode::OffsetBeyondEnd),
        "{e}"
    );
}

/// `next` is cancel-safe: a caller that gives up on it again and again (a timeout far
/// shorter than a push takes) still gets every record once and in order, and the window
/// keeps being granted back (a lost credit would stall the stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_whose_next_is_cancelled_again_and_again_loses_nothing() {
    let h = Harness::tcp().await;
    let t = h.client.stream("push").topic("cancel");
    t.ensure(1).await.unwrap();
    let mut sub = t
        .subscribe(Position::new(0, 0), 2048)
        .await
        .unwrap()
        .unwrap();
    let producer = {
        let t = t.clone();
        tokio::spawn(async move { publish(&t, 0, 3000, Duration::from_millis(1)).await })
    };
    let (mut next, mut gave_up) = (0u64, 0u32);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while next < 3000 {
        assert!(tokio::time::Instant::now() < deadline, "stalled at {next}");
        match tokio::time::timeout(Duration::from_micros(300), sub.next()).await {
            Err(_) => gave_up += 1,
            Ok(fetched) => {
                for r in fetched.unwrap().records {
                    assert_eq!(r.offset, next, "every record once, in order");
                    assert_eq!(&r.value[..], format!("v{next}").as_bytes());
                    next += 1;
                }
            }
        }
    }
    producer.await.unwrap();
    assert!(gave_up > 0, "the test cancelled no call");
    assert_eq!(sub.close().await.unwrap(), 3000);
}

/// A named consumer reads through a subscription over TCP (no `Fetch` at all) and by
/// fetching embedded, with the same records either way: every one once, in order, while
/// they are appended, and its stored offset where it stopped.
async fn a_named_consumer_reads_by_push_over_tcp_and_by_fetch_embedded(client: &Client) {
    let tcp = !client.is_embedded();
    let t = client.stream("push").topic("named");
    t.ensure(1).await.unwrap();
    publish(&t, 0, 300, Duration::ZERO).await;
    let (fetches, subscribes) = (
        client.requests_sent("Fetch"),
        client.requests_sent("Subscribe"),
    );
    let mut consumer = t
        .consumer("c", 0)
        .batch_length(100)
        .commit_policy(rill_client::CommitPolicy::All)
        .build()
        .await
        .unwrap();
    let producer = {
        let t = t.clone();
        tokio::spawn(async move { publish(&t, 300, 2000, Duration::from_millis(1)).await })
    };
    for n in 0..2000u64 {
        let r = consumer.next_within(Duration::from_secs(30)).await.unwrap();
        assert_eq!(r.offset, n, "every record once, in order");
        assert_eq!(&r.value[..], format!("v{n}").as_bytes());
    }
    producer.await.unwrap();
    consumer.shutdown().await.unwrap();
    assert_eq!(consumer.last_stored_offset(0), Some(1999));
    let (fetches, subscribes) = (
        client.requests_sent("Fetch") - fetches,
        client.requests_sent("Subscribe") - subscribes,
    );
    if tcp {
        assert_eq!(fetches, 0, "read by push");
        assert!(subscribes >= 1);
    } else {
        assert!(fetches > 0, "read by fetching");
        assert_eq!(subscribes, 1, "asked once, then fetched: {subscribes}");
    }
}

/// A group member reads each partition it owns through a subscription over TCP (no
/// `Fetch` at all) and by fetching embedded: every record of both partitions once and
/// in order while they are appended. Then a second member joins: the first gives a
/// partition up (its subscription ends with it) and the two read on; every record
/// comes, each member's in order, and a record comes twice only if it was handed out
/// and not yet stored when its partition moved (at most a poll result's worth).
async fn a_group_member_reads_by_push_over_tcp_and_by_fetch_embedded(client: &Client) {
    let tcp = !client.is_embedded();
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let t = client.stream("push").topic("group");
    t.ensure(2).await.unwrap();
    let (fetches, subscribes) = (
        client.requests_sent("Fetch"),
        client.requests_sent("Subscribe"),
    );
    let member = |t: Topic| async move {
        t.consumer_group("g")
            .batch_length(50)
            .commit_policy(rill_client::CommitPolicy::Each)
            .build()
            .await
            .unwrap()
    };
    let value = |p: u32, offset: u64| format!("v{}", offset * 2 + u64::from(p));
    let mut a = member(t.clone()).await;
    let producer = {
        let t = t.clone();
        tokio::spawn(async move {
            for n in 0..2000u64 {
                t.publish()
                    .value(format!("v{n}"))
                    .partition((n % 2) as u32)
                    .send()
                    .await
                    .unwrap();
                if n % 100 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        })
    };
    let mut next = [0u64; 2];
    while next.iter().sum::<u64>() < 1000 {
        let r = a.next_within(Duration::from_secs(30)).await.unwrap();
        let p = r.partition as usize;
        assert_eq!(
            r.offset, next[p],
            "every record once, in order (partition {p})"
        );
        assert_eq!(&r.value[..], value(r.partition, r.offset).as_bytes());
        next[p] += 1;
    }
    // Two members, each in a task of its own, report what they read until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = |mut m: rill_client::GroupConsumer, id: usize| {
        let (stop, tx) = (Arc::clone(&stop), tx.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match m.next_within(Duration::from_millis(200)).await {
                    Ok(r) => tx.send((id, r)).unwrap(),
                    Err(rill_client::ClientError::Timeout(_)) => {}
                    Err(e) => panic!("member {id}: {e}"),
                }
            }
            m.shutdown().await.unwrap();
        })
    };
    let b = member(t.clone()).await;
    let (a, b) = (run(a, 0), run(b, 1));
    let mut seen: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut last: BTreeMap<(usize, u32), u64> = BTreeMap::new();
    let mut missing = 2000 - next.iter().sum::<u64>();
    while missing > 0 {
        let (id, r) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("records within 30 s")
            .expect("members run");
        assert_eq!(&r.value[..], value(r.partition, r.offset).as_bytes());
        assert!(
            r.offset >= next[r.partition as usize].saturating_sub(1),
            "only what was not read before"
        );
        if let Some(prev) = last.insert((id, r.partition), r.offset) {
            assert!(r.offset > prev, "member {id}'s records in order");
        }
        let n = seen.entry((r.partition, r.offset)).or_default();
        *n += 1;
        if *n == 1 && r.offset >= next[r.partition as usize] {
            missing -= 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    a.await.unwrap();
    b.await.unwrap();
    producer.await.unwrap();
    let twice = seen.values().filter(|&&n| n > 1).count();
    assert!(twice <= 50, "{twice} records came twice");
    let (fetches, subscribes) = (
        client.requests_sent("Fetch") - fetches,
        client.requests_sent("Subscribe") - subscribes,
    );
    if tcp {
        assert_eq!(fetches, 0, "read by push");
        assert!(
            subscribes >= 2,
            "a subscription per partition: {subscribes}"
        );
    } else {
        assert!(fetches > 0, "read by fetching");
        assert!(
            subscribes <= 4,
            "asked once per partition taken, then fetched: {subscribes}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_transport_has_no_subscriptions() {
    let h = Harness::embedded().await;
    let t = h.client.stream("push").topic("t");
    t.ensure(1).await.unwrap();
    assert!(
        t.subscribe(Position::new(0, 0), 4096)
            .await
            .unwrap()
            .is_none()
    );
    let e = t.subscribe(Position::new(0, 0), 0).await.unwrap_err();
    assert!(e.to_string().contains("window"), "{e}");
    h.client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_goes_on_across_a_server_killed_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let mut server = FixedServer::start(&data, port);
    // Retries long enough to ride out a restart.
    let client = Client::builder()
        .retry(RetryPolicy {
            retries: 60,
            backoff: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        })
        .connect(&format!("rill://127.0.0.1:{port}"))
        .await
        .unwrap();
    let t = client.stream("push").topic("t");
    t.ensure(1).await.unwrap();
    publish(&t, 0, 1000, Duration::ZERO).await;
    let mut sub = t
        .subscribe(Position::new(0, 0), 8192)
        .await
        .unwrap()
        .unwrap();
    let reached = read(&mut sub, 0, 400).await;
    assert!(reached < 1000, "the window held the stream back: {reached}");
    server.kill9();
    let restart = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(300));
        FixedServer::start(&data, port)
    });
    // The rest of what was there (the stream is opened again from 400 on the restarted
    // server), then what is published after the restart.
    let reader = tokio::spawn(async move {
        read(&mut sub, reached, 1500).await;
        sub
    });
    let _server = restart.await.unwrap();
    publish(&t, 1000, 1500, Duration::ZERO).await;
    let sub = reader.await.unwrap();
    assert_eq!(sub.next_offset(), 1500);
    client.close().await.unwrap();
}

/// A proxy between a client and the server on `server`: it forwards both ways, and on
/// each of its first `cuts` connections closes both sides in the middle of the second
/// pushed frame (flags `RESPONSE | MORE`) on its way to the client, after sending the
/// frame's length and half of the rest. Returns its port and the number of cuts made.
async fn cutting_proxy(
    server: u16,
    cuts: usize,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let made = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&made);
    tokio::spawn(async move {
        for n in 0.. {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let upstream = tokio::net::TcpStream::connect(("127.0.0.1", server))
                .await
                .unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = upstream.into_split();
            let to_server = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
            });
            let cut = n < cuts;
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut pushed = 0;
                loop {
                    let mut len = [0u8; 4];
                    if server_read.read_exact(&mut len).await.is_err() {
                        break;
                    }
                    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
                    if server_read.read_exact(&mut body).await.is_err() {
                        break;
                    }
                    if body.get(3) == Some(&0x05) {
                        pushed += 1;
                    }
                    if cut && pushed == 2 {
                        let _ = client_write.write_all(&len).await;
                        let _ = client_write.write_all(&body[..body.len() / 2]).await;
                        let _ = client_write.flush().await;
                        counter.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    if client_write.write_all(&len).await.is_err()
                        || client_write.write_all(&body).await.is_err()
                    {
                        break;
                    }
                }
                // Both sides go: the client sees its connection end mid-frame.
                to_server.abort();
            });
        }
    });
    (port, made)
}

/// A connection cut in the middle of a pushed frame (by a proxy) loses nothing and
/// repeats nothing: the subscription, and a named consumer reading through one, open
/// their streams again on a new connection from their own positions, three times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_mid_frame_loses_and_repeats_nothing() {
    use std::sync::atomic::Ordering;

    let dir = tempfile::tempdir().unwrap();
    let server = free_port();
    let _server = FixedServer::start(&dir.path().join("data"), server);
    let direct = Client::connect(&format!("rill://127.0.0.1:{server}"))
        .await
        .unwrap();
    let t = direct.stream("push").topic("cut");
    t.ensure(1).await.unwrap();
    publish(&t, 0, 3000, Duration::ZERO).await;
    let retry = RetryPolicy {
        retries: 20,
        backoff: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
    };

    let (port, cuts) = cutting_proxy(server, 3).await;
    let client = Client::builder()
        .retry(retry)
        .connect(&format!("rill://127.0.0.1:{port}"))
        .await
        .unwrap();
    let tc = client.stream("push").topic("cut");
    let mut sub = tc
        .subscribe(Position::new(0, 0), 8192)
        .await
        .unwrap()
        .expect("served through the proxy");
    assert_eq!(read(&mut sub, 0, 3000).await, 3000);
    assert_eq!(cuts.load(Ordering::SeqCst), 3, "three frames were cut");
    client.close().await.unwrap();

    let (port, cuts) = cutting_proxy(server, 3).await;
    let client = Client::builder()
        .retry(retry)
        .connect(&format!("rill://127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut consumer = client
        .stream("push")
        .topic("cut")
        .consumer("through-a-proxy", 0)
        .max_bytes(1024)
        .build()
        .await
        .unwrap();
    for n in 0..3000u64 {
        let r = consumer.next_within(Duration::from_secs(30)).await.unwrap();
        assert_eq!(r.offset, n, "every record once, in order");
        assert_eq!(&r.value[..], format!("v{n}").as_bytes());
    }
    assert_eq!(cuts.load(Ordering::SeqCst), 3, "three frames were cut");
    assert_eq!(client.requests_sent("Fetch"), 0, "read by push throughout");
    consumer.shutdown().await.unwrap();
    client.close().await.unwrap();
    direct.close().await.unwrap();
}

/// A connection holds at most half its in-flight requests in subscriptions (here 4 of
/// 8): a further `subscribe` answers `None` (the server said `BUSY`), and a group member
/// of six partitions on one connection reads the two beyond the limit by fetching —
/// every record of every partition once, in order, none stuck behind the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_beyond_a_connections_limit_fall_back_to_fetching() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(
        &dir.path().join("data"),
        &[],
        &[("RILL_MAX_IN_FLIGHT_PER_CONNECTION", "8")],
    );
    let client = Client::connect(&format!("rill://{}", server.addr))
        .await
        .unwrap();
    let t = client.stream("push").topic("many");
    t.ensure(6).await.unwrap();
    for p in 0..6u32 {
        for n in 0..100u64 {
            t.publish()
                .value(format!("p{p}-{n}"))
                .partition(p)
                .send()
                .await
                .unwrap();
        }
    }
    let mut open = Vec::new();
    for p in 0..4u32 {
        open.push(
            t.subscribe(Position::new(p, 0), 4096)
                .await
                .unwrap()
                .expect("room"),
        );
    }
    assert!(
        t.subscribe(Position::new(4, 0), 4096)
            .await
            .unwrap()
            .is_none(),
        "a fifth subscription on the connection is refused"
    );
    for sub in open {
        sub.close().await.unwrap();
    }

    let fetches = client.requests_sent("Fetch");
    let mut member = t
        .consumer_group("g")
        .max_wait(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let mut next = [0u64; 6];
    while next.iter().sum::<u64>() < 600 {
        let r = member.next_within(Duration::from_secs(30)).await.unwrap();
        let p = r.partition as usize;
        assert_eq!(
            r.offset, next[p],
            "every record once, in order (partition {p})"
        );
        assert_eq!(&r.value[..], format!("p{p}-{}", r.offset).as_bytes());
        next[p] += 1;
    }
    assert!(
        client.requests_sent("Fetch") > fetches,
        "the partitions beyond the limit were fetched"
    );
    member.shutdown().await.unwrap();
    client.close().await.unwrap();
}
