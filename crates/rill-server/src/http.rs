//! The HTTP admin endpoint: `GET /health` (200 `ok`, or 503 with every partition that
//! refuses appends and why), `GET /health/live` (200 while the process answers) and
//! `GET /metrics`, nothing else.
//!
//! A minimal HTTP/1.1 responder rather than an HTTP library: one request per
//! connection, the request head read up to 8 KiB, a response with `Content-Length` and
//! `Connection: close`. Every exchange is bounded in bytes and time.
//!
//! With TLS configured it speaks HTTPS only. With authentication required, every path
//! but `/health`, `/health/live` and `/metrics` needs `Authorization: Basic` (checked
//! with Argon2id, at most [`PASSWORD_CHECKS_MAX`] at once) or `Authorization: Bearer`
//! (docs/SECURITY.md §6).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rill_broker::{Broker, HttpCredential};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::Metrics;
use crate::tls::{Accepted, Tls};

/// Paths served without a credential.
const PUBLIC_PATHS: &[&str] = &["/health", "/health/live", "/metrics"];
/// Argon2id checks of HTTP Basic passwords run at once (each takes ~19 MiB and a core
/// for a few tens of ms); more wait.
pub(crate) const PASSWORD_CHECKS_MAX: usize = 2;

/// What every admin connection shares.
#[derive(Debug)]
pub(crate) struct Context {
    broker: Arc<Broker>,
    metrics: Arc<Metrics>,
    tls: Option<Arc<Tls>>,
    password_checks: Semaphore,
}

impl Context {
    pub(crate) fn new(broker: Arc<Broker>, metrics: Arc<Metrics>, tls: Option<Arc<Tls>>) -> Self {
        Self {
            broker,
            metrics,
            tls,
            password_checks: Semaphore::new(PASSWORD_CHECKS_MAX),
        }
    }
}

/// Largest request head read.
const REQUEST_HEAD_BYTES_MAX: usize = 8 << 10;
/// Longest one exchange (read the head, write the response) may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Content type of the Prometheus text exposition format.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// Serves one admin connection (after the TLS handshake, on a TLS port).
pub(crate) async fn serve(socket: TcpStream, peer: SocketAddr, ctx: Arc<Context>) {
    match &ctx.tls {
        None => serve_stream(socket, peer, &ctx).await,
        Some(tls) => match crate::tls::accept(tls, socket, peer).await {
            Accepted::Tls(stream, _) => serve_stream(*stream, peer, &ctx).await,
            Accepted::Plaintext(mut socket) => {
                let reply = response(
                    400,
                    "Bad Request",
                    TEXT_CONTENT_TYPE,
                    b"this port requires TLS; use https://\n",
                    true,
                );
                let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, async {
                    socket.write_all(&reply).await?;
                    socket.shutdown().await
                })
                .await;
            }
            Accepted::Gone => {}
        },
    }
}

async fn serve_stream<S>(mut socket: S, peer: SocketAddr, ctx: &Context)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(EXCHANGE_TIMEOUT, exchange(&mut socket, peer, ctx)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "admin HTTP exchange failed"),
        Err(_) => tracing::debug!("admin HTTP exchange timed out"),
    }
}

async fn exchange<S>(socket: &mut S, peer: SocketAddr, ctx: &Context) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let response = loop {
        if let Some(end) = head_end(&head) {
            let head = &head[..end];
            break match check_credential(head, peer, ctx).await {
                Ok(()) => respond(head, &ctx.metrics),
                Err(refusal) => refusal,
            };
        }
        if head.len() >= REQUEST_HEAD_BYTES_MAX {
            break response(
                431,
                "Request Header Fields Too Large",
                TEXT_CONTENT_TYPE,
                b"request head too large\n",
                false,
            );
        }
        let room = (REQUEST_HEAD_BYTES_MAX - head.len()).min(chunk.len());
        let n = socket.read(&mut chunk[..room]).await?;
        if n == 0 {
            // Closed before sending a whole request head: nothing to answer.
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    };
    socket.write_all(&response).await?;
    socket.shutdown().await
}

/// Lets a request through if its path is public, the server does not require
/// authentication, or it carries a good credential; otherwise the `401` to send.
async fn check_credential(head: &[u8], peer: SocketAddr, ctx: &Context) -> Result<(), Vec<u8>> {
    let Some((_, target)) = request_line(head) else {
        // `respond` answers 400.
        return Ok(());
    };
    let path = target.split('?').next().unwrap_or(target);
    if PUBLIC_PATHS.contains(&path) || !ctx.broker.auth_required() {
        return Ok(());
    }
    let credential = match credential(head) {
        Ok(Some(credential)) => credential,
        Ok(None) => {
            return Err(unauthorized(
                "this path needs a credential: HTTP Basic or a Bearer token",
            ));
        }
        Err(why) => return Err(unauthorized(why)),
    };
    let broker = Arc::clone(&ctx.broker);
    let ip = Some(peer.ip());
    let outcome = match &credential {
        // Argon2id: off the runtime's threads, a bounded number at once.
        HttpCredential::Basic { .. } => {
            let _slot = ctx
                .password_checks
                .acquire()
                .await
                .expect("the semaphore is never closed");
            tokio::task::spawn_blocking(move || broker.authenticate_http(ip, &credential))
                .await
                .map_err(|_| unauthorized("the credential check failed"))?
        }
        HttpCredential::Bearer(_) => broker.authenticate_http(ip, &credential),
    };
    match outcome {
        Ok(_) => Ok(()),
        Err(e) => Err(unauthorized(&e.to_string())),
    }
}

/// The `Authorization` header's credential: `None` without the header, an error for
/// one that cannot be read.
fn credential(head: &[u8]) -> Result<Option<HttpCredential>, &'static str> {
    let Ok(text) = std::str::from_utf8(head) else {
        return Err("the request head is not UTF-8");
    };
    let Some(value) = text.split("\r\n").skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("authorization")
            .then(|| value.trim())
    }) else {
        return Ok(None);
    };
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
        return Ok(Some(HttpCredential::bearer(rest)));
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("the Authorization header must be Basic or Bearer");
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest)
        .map_err(|_| "the Basic credential is not base64")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "the Basic credential is not UTF-8")?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or("the Basic credential is not USER:PASSWORD")?;
    Ok(Some(HttpCredential::basic(user, password)))
}

fn unauthorized(why: &str) -> Vec<u8> {
    response(
        401,
        "Unauthorized",
        TEXT_CONTENT_TYPE,
        format!("unauthenticated: {why}\n").as_bytes(),
        true,
    )
}

/// The length of the request head through its blank line, if it is complete.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The whole response to a request head.
fn respond(head: &[u8], metrics: &Metrics) -> Vec<u8> {
    let Some((method, target)) = request_line(head) else {
        return response(
            400,
            "Bad Request",
            TEXT_CONTENT_TYPE,
            b"bad request\n",
            false,
        );
    };
    let path = target.split('?').next().unwrap_or(target);
    let with_body = method != "HEAD";
    let known = matches!(path, "/health" | "/health/live" | "/metrics");
    if known && !matches!(method, "GET" | "HEAD") {
        return response(
            405,
            "Method Not Allowed",
            TEXT_CONTENT_TYPE,
            b"method not allowed\n",
            true,
        );
    }
    match path {
        "/health" => match metrics.health_problems() {
            // Every partition takes appends.
            None => response(200, "OK", TEXT_CONTENT_TYPE, b"ok\n", with_body),
            // The server serves, but some partitions refuse appends: a monitor should
            // alert; restarting the process would not help.
            Some(problems) => response(
                503,
                "Service Unavailable",
                TEXT_CONTENT_TYPE,
                problems.as_bytes(),
                with_body,
            ),
        },
        // The process is up and answering (for a liveness probe, which must not restart
        // a server because one partition is damaged).
        "/health/live" => response(200, "OK", TEXT_CONTENT_TYPE, b"ok\n", with_body),
        "/metrics" => response(
            200,
            "OK",
            METRICS_CONTENT_TYPE,
            metrics.render().as_bytes(),
            with_body,
        ),
        _ => response(
            404,
            "Not Found",
            TEXT_CONTENT_TYPE,
            b"not found\n",
            with_body,
        ),
    }
}

/// Method and target of an `HTTP/1.x` request line.
fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return None;
    }
    Some((method, target))
}

/// A `Connection: close` response; a 405 names the allowed methods.
fn response(
    status: u16,
    reason: &str,
    content_type: &str,
    body: &[u8],
    with_body: bool,
) -> Vec<u8> {
    let allow = match status {
        405 => "Allow: GET, HEAD\r\n",
        401 => "WWW-Authenticate: Basic realm=\"rill\", charset=\"UTF-8\"\r\n",
        _ => "",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(request: &str) -> String {
        String::from_utf8(respond(request.as_bytes(), &Metrics::new())).unwrap()
    }

    #[test]
    fn health_is_ok() {
        let r = answer("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Length: 3\r\n"));
        assert!(r.ends_with("\r\n\r\nok\n"));
    }

    #[test]
    fn metrics_is_prometheus_text() {
        let r = answer("GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"));
        assert!(r.contains("# TYPE rill_requests_total counter"));
    }

    #[test]
    fn head_has_no_body() {
        let r = answer("HEAD /health HTTP/1.1\r\n\r\n");
        assert!(r.ends_with("Connection: close\r\n\r\n"), "{r}");
    }

    #[test]
    fn other_paths_methods_and_garbage() {
        assert!(answer("GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(answer("GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        let post = answer("POST /health HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "));
        assert!(post.contains("Allow: GET, HEAD\r\n"));
        assert!(answer("\u{1}\u{2}\r\n\r\n").starts_with("HTTP/1.1 400 "));
        assert!(answer("GET /health SPDY/3\r\n\r\n").starts_with("HTTP/1.1 400 "));
        assert!(answer("GET  /health HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400 "));
    }

    #[tokio::test]
    async fn health_names_failed_partitions_and_live_does_not_care() {
        let dir = tempfile::tempdir().unwrap();
        let config = rill_broker::BrokerConfig::new(dir.path());
        {
            let broker = Broker::open(config.clone()).unwrap();
            let options = rill_proto::pb::TopicOptions {
                partitions: 2,
                segment_bytes: Some(1024),
                ..Default::default()
            };
            broker
                .create_topic("s", "t", &options, false, true)
                .unwrap();
            for _ in 0..12 {
                let mut b = rill_format::BatchBuilder::new();
                b.push(rill_format::NewRecord::value(&[7u8; 300])).unwrap();
                let batch = bytes::Bytes::from(b.finish().unwrap());
                broker.produce("s", "t", 1, batch).await.unwrap();
            }
            broker.shutdown().unwrap();
        }
        // Partition 1 loses a segment file in the middle of its offsets.
        let part = dir.path().join("streams/s/t/1");
        let mut logs: Vec<_> = std::fs::read_dir(&part)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        std::fs::remove_file(&logs[1]).unwrap();
        let broker = Arc::new(Broker::open(config).unwrap());
        let metrics = Metrics::new();
        assert!(answer_with("GET /health HTTP/1.1\r\n\r\n", &metrics).starts_with("HTTP/1.1 200 "));
        metrics.attach_broker(Arc::clone(&broker));
        let health = answer_with("GET /health HTTP/1.1\r\n\r\n", &metrics);
        assert!(health.starts_with("HTTP/1.1 503 "), "{health}");
        assert!(health.contains("degraded: 1 partition"), "{health}");
        assert!(health.contains("s/t/1: "), "{health}");
        let live = answer_with("GET /health/live HTTP/1.1\r\n\r\n", &metrics);
        assert!(live.starts_with("HTTP/1.1 200 "), "{live}");
        let m = answer_with("GET /metrics HTTP/1.1\r\n\r\n", &metrics);
        assert!(m.contains("rill_partitions_failed 1"), "{m}");
        assert!(
            m.contains("rill_partition_failed{stream=\"s\",topic=\"t\",partition=\"1\"} 1"),
            "{m}"
        );
    }

    fn answer_with(request: &str, metrics: &Metrics) -> String {
        String::from_utf8(respond(request.as_bytes(), metrics)).unwrap()
    }

    #[test]
    fn authorization_headers_are_read() {
        let head = |h: &str| format!("GET /api HTTP/1.1\r\nHost: x\r\n{h}\r\n\r\n");
        assert!(matches!(
            credential(head("X-Other: 1").as_bytes()),
            Ok(None)
        ));
        // "alice:pa:ss" in base64.
        match credential(head("authorization:  Basic YWxpY2U6cGE6c3M=").as_bytes()) {
            Ok(Some(HttpCredential::Basic { user, password })) => {
                assert_eq!(user, "alice");
                assert_eq!(password.expose(), "pa:ss");
            }
            other => panic!("{other:?}"),
        }
        match credential(head("Authorization: Bearer rill_abc").as_bytes()) {
            Ok(Some(HttpCredential::Bearer(t))) => assert_eq!(t.expose(), "rill_abc"),
            other => panic!("{other:?}"),
        }
        for bad in [
            "Authorization: Digest abc",
            "Authorization: Basic !!!",
            "Authorization: Basic YWxpY2U=",
            "Authorization: Bearer",
        ] {
            assert!(credential(head(bad).as_bytes()).is_err(), "{bad}");
        }
        let r = String::from_utf8(unauthorized("no")).unwrap();
        assert!(r.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{r}");
        assert!(r.contains("WWW-Authenticate: Basic realm=\"rill\""), "{r}");
    }

    #[test]
    fn head_end_is_found() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
