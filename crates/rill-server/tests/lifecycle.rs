//! Binding, the connection limit, the idle timeout, the HTTP admin endpoint and
//! graceful shutdown.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rill_broker::{Broker, BrokerConfig};
use rill_proto::{ErrorCode, Kind};
use rill_server::{CloseReason, Server, ServerConfig, ServerError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_a_taken_port_is_a_typed_error() {
    let server = Harness::start(config()).await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    let taken = ServerConfig {
        listen: server.addr,
        http: None,
        ..ServerConfig::default()
    };
    match Server::bind(taken, Arc::clone(&broker)).await {
        Err(ServerError::Bind { addr, .. }) => assert_eq!(addr, server.addr),
        other => panic!("expected a bind error, got {other:?}"),
    }
    let invalid = ServerConfig {
        max_connections: 0,
        ..config()
    };
    assert!(matches!(
        Server::bind(invalid, Arc::clone(&broker)).await,
        Err(ServerError::InvalidConfig { .. })
    ));
    let no_http = Server::bind(
        ServerConfig {
            http: None,
            ..config()
        },
        broker,
    )
    .await
    .unwrap();
    assert_eq!(no_http.http_addr(), None);
    assert_ne!(no_http.local_addr().port(), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_refused_with_busy() {
    let server = Harness::start(ServerConfig {
        max_connections: 2,
        ..config()
    })
    .await;
    let mut first = server.client().await;
    let mut second = server.client().await;
    // Both accepted and holding their slots once they have been answered.
    assert_serves_on(&mut first).await;
    assert_serves_on(&mut second).await;

    let mut third = server.client().await;
    for (id, response) in third.until_closed().await {
        assert_eq!(id, 0);
        assert_eq!(code(&err(response).1), ErrorCode::Busy);
    }
    assert_serves_on(&mut first).await;
    assert_serves_on(&mut second).await;

    // A slot frees when a connection ends (asynchronously, so retry for a while).
    drop(first);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut again = server.client().await;
        let id = again.send(&list_streams()).await;
        match again.recv().await {
            Some((got, response)) if got == id => {
                ok(response);
                break;
            }
            _ => {
                assert!(Instant::now() < deadline, "the freed slot is never reused");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert_serves_on(&mut second).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_but_a_long_poll_is_not_idle() {
    let server = Harness::start(ServerConfig {
        idle_timeout: Some(Duration::from_millis(200)),
        ..config()
    })
    .await;
    let mut idle = server.client().await;
    assert!(idle.until_closed().await.is_empty());
    let metrics = Arc::clone(&server.metrics);
    eventually("the idle close is counted", || {
        metrics.connections_closed_total(CloseReason::Idle) == 1
    })
    .await;

    let mut polling = server.client().await;
    setup_topic(&mut polling, "shop", "orders").await;
    let id = polling.send(&fetch("shop", "orders", 0, 1000)).await;
    let (got, response) = polling.recv().await.expect("the long poll is answered");
    assert_eq!(got, id);
    let (_, payload) = ok(response);
    assert!(payload.is_empty());
    // Five idle timeouts passed during the long poll: the connection is still open.
    assert_serves_on(&mut polling).await;
    assert_eq!(metrics.connections_closed_total(CloseReason::Idle), 1);
    assert!(
        metrics
            .render()
            .contains("rill_connections_closed_total{reason=\"idle\"} 1\n")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_time_out_by_default_and_the_timeout_can_be_disabled() {
    assert_eq!(
        ServerConfig::default().idle_timeout,
        Some(Duration::from_secs(10 * 60))
    );
    let server = Harness::start(ServerConfig {
        idle_timeout: None,
        ..config()
    })
    .await;
    let mut quiet = server.client().await;
    assert_serves_on(&mut quiet).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_serves_on(&mut quiet).await;
    assert_eq!(
        server.metrics.connections_closed_total(CloseReason::Idle),
        0
    );
    server.stop().await;
}

/// One HTTP/1.1 exchange: status code and body.
async fn http_get(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nHost: rill\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_admin_serves_health_and_metrics() {
    let server = Harness::start(config()).await;
    let http = server.http.unwrap();
    let (status, _, body) = http_get(http, "GET", "/health").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    let mut client = server.client().await;
    assert_serves_on(&mut client).await;
    let (status, head, body) = http_get(http, "GET", "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    let length = format!("Content-Length: {}\r\n", body.len());
    assert!(head.contains(length.trim_end()), "{head}");
    assert!(
        body.contains("rill_requests_total{kind=\"ListStreams\"} 1\n"),
        "{body}"
    );
    assert!(body.contains("rill_connections 1\n"), "{body}");
    assert!(body.contains("rill_request_duration_seconds_count{kind=\"ListStreams\"} 1\n"));

    assert_eq!(http_get(http, "GET", "/nope").await.0, 404);
    assert_eq!(http_get(http, "POST", "/health").await.0, 405);
    assert_eq!(server.metrics.requests_total(Kind::ListStreams), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_in_flight_long_polls_then_closes() {
    let mut server = Harness::start(config()).await;
    let mut client = server.client().await;
    setup_topic(&mut client, "shop", "orders").await;
    let fetch_id = client.send(&fetch("shop", "orders", 0, 1000)).await;
    // Once this is answered the fetch before it has been read and is in flight.
    assert_serves_on(&mut client).await;

    server.begin_shutdown();
    let got = client.until_closed().await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, fetch_id);
    let (_, payload) = ok(got[0].1.clone());
    assert!(payload.is_empty());
    server.wait_stopped().await;

    // The listener is closed: a new connection is refused or closed at once.
    if let Ok(stream) = TcpStream::connect(server.addr).await {
        let mut stream = stream;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(PATIENCE, stream.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_requests_that_outlast_the_drain_timeout() {
    let mut server = Harness::start(ServerConfig {
        drain_timeout: Duration::from_millis(200),
        ..config()
    })
    .await;
    let mut client = server.client().await;
    setup_topic(&mut client, "shop", "orders").await;
    let fetch_id = client.send(&fetch("shop", "orders", 0, 30_000)).await;
    assert_serves_on(&mut client).await;

    let started = Instant::now();
    server.begin_shutdown();
    server.wait_stopped().await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "run returned after the drain timeout, not after the 30 s long poll"
    );
    let got = client.until_closed().await;
    assert_eq!(got.len(), 1, "the cut long poll is told why: {got:?}");
    assert_eq!(got[0].0, fetch_id);
    assert_eq!(code(&err(got[0].1.clone()).1), ErrorCode::ShuttingDown);
}
