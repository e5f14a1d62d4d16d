//! A real broker in a temp dir behind a real server on port 0, and a tiny protocol
//! client over a raw `TcpStream`.

#![allow(dead_code, unreachable_pub)] // each test file uses a part of it

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rill_broker::{Broker, BrokerConfig};
use rill_format::{BatchBuilder, Batches, NewRecord};
use rill_proto::pb::{self, ErrorResponse};
use rill_proto::{ErrorCode, FrameDecoder, Request, RequestBody, Response, ResponseBody};
use rill_server::{Metrics, Server, ServerConfig, ServerError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Long enough never to fire on a loaded machine; short enough that a hang fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Defaults, both listeners on port 0.
pub fn config() -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        http: Some("127.0.0.1:0".parse().unwrap()),
        ..ServerConfig::default()
    }
}

pub struct Harness {
    pub addr: SocketAddr,
    pub http: Option<SocketAddr>,
    pub broker: Arc<Broker>,
    pub metrics: Arc<Metrics>,
    shutdown: Option<oneshot::Sender<()>>,
    run: Option<JoinHandle<Result<(), ServerError>>>,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start(config: ServerConfig) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
        let server = Server::bind(config, Arc::clone(&broker)).await.unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let (addr, http, metrics) = (server.local_addr(), server.http_addr(), server.metrics());
        let run = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Harness {
            addr,
            http,
            broker,
            metrics,
            shutdown: Some(tx),
            run: Some(run),
            _dir: dir,
        }
    }

    pub async fn client(&self) -> TestClient {
        TestClient::connect(self.addr).await
    }

    /// Resolves the shutdown future without waiting for `run`.
    pub fn begin_shutdown(&mut self) {
        let _ = self.shutdown.take().expect("shut down once").send(());
    }

    /// Waits for `run` to return and checks it returned `Ok`.
    pub async fn wait_stopped(&mut self) {
        let run = self.run.take().expect("waited once");
        tokio::time::timeout(PATIENCE, run)
            .await
            .expect("run returns after shutdown")
            .expect("run does not panic")
            .expect("run returns Ok");
        self.broker.shutdown().unwrap();
    }

    pub async fn stop(mut self) {
        self.begin_shutdown();
        self.wait_stopped().await;
    }
}

/// One protocol connection.
pub struct TestClient {
    stream: TcpStream,
    buf: BytesMut,
    decoder: FrameDecoder,
    next_id: u64,
}

impl TestClient {
    pub async fn connect(addr: SocketAddr) -> TestClient {
        Self::over(TcpStream::connect(addr).await.unwrap())
    }

    /// A connection whose kernel buffers are small (64 KiB each way), so that what a
    /// test counts as sent or answered is not hidden in socket buffers.
    pub async fn connect_small(addr: SocketAddr) -> TestClient {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(64 << 10).unwrap();
        socket.set_send_buffer_size(64 << 10).unwrap();
        Self::over(socket.connect(addr).await.unwrap())
    }

    fn over(stream: TcpStream) -> TestClient {
        TestClient {
            stream,
            buf: BytesMut::new(),
            decoder: FrameDecoder::default(),
            next_id: 1,
        }
    }

    /// The socket, for tests that write raw bytes at their own pace.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Sends a request and returns its correlation id.
    pub async fn send(&mut self, request: &Request) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let frame = request.encode(id).unwrap();
        self.send_raw(&frame.to_bytes()).await;
        id
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Closes the sending side (the server sees EOF).
    pub async fn finish_sending(&mut self) {
        self.stream.shutdown().await.unwrap();
    }

    /// The next response and its correlation id, or `None` once the server has closed
    /// the connection (cleanly or by reset).
    pub async fn recv(&mut self) -> Option<(u64, Response)> {
        tokio::time::timeout(PATIENCE, async {
            loop {
                if let Some(frame) = self.decoder.decode(&mut self.buf).unwrap() {
                    let id = frame.correlation_id;
                    return Some((id, Response::decode(frame).unwrap()));
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("the server answers or closes in time")
    }

    /// The next response with its correlation id and whether its flag `MORE` is set
    /// (a subscription's pushes), or `None` if nothing comes within `wait` or the
    /// server closed the connection.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<(u64, bool, Response)> {
        tokio::time::timeout(wait, async {
            loop {
                if let Some(frame) = self.decoder.decode(&mut self.buf).unwrap() {
                    let (id, more) = (frame.correlation_id, frame.has_more());
                    return Some((id, more, Response::decode(frame).unwrap()));
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    pub async fn call(&mut self, request: &Request) -> Response {
        let id = self.send(request).await;
        let (got, response) = self.recv().await.expect("a response");
        assert_eq!(got, id, "correlation id echoed");
        response
    }

    /// Waits until the server closes the connection, collecting whatever it still sent.
    pub async fn until_closed(&mut self) -> Vec<(u64, Response)> {
        let mut got = Vec::new();
        while let Some(r) = self.recv().await {
            got.push(r);
        }
        got
    }
}

pub fn ok(response: Response) -> (ResponseBody, Bytes) {
    match response {
        Response::Ok { body, payload } => (body, payload),
        Response::Err { error, .. } => panic!("expected success, got {error:?}"),
    }
}

pub fn err(response: Response) -> (u16, ErrorResponse) {
    match response {
        Response::Err { kind, error } => (kind, error),
        Response::Ok { body, .. } => panic!("expected an error, got {body:?}"),
    }
}

pub fn code(error: &ErrorResponse) -> ErrorCode {
    ErrorCode::try_from(error.code).unwrap()
}

pub fn create_topic(stream: &str, topic: &str, options: pb::TopicOptions) -> Request {
    Request::new(RequestBody::CreateTopic(pb::CreateTopicRequest {
        stream: stream.into(),
        topic: topic.into(),
        options: Some(options),
        if_missing: false,
        create_stream: true,
    }))
}

pub fn batch(values: &[&[u8]]) -> Bytes {
    let mut builder = BatchBuilder::new();
    for value in values {
        builder.push(NewRecord::value(value)).unwrap();
    }
    Bytes::from(builder.finish().unwrap())
}

pub fn produce(stream: &str, topic: &str, partition: u32, values: &[&[u8]]) -> Request {
    Request::with_payload(
        RequestBody::Produce(pb::ProduceRequest {
            stream: stream.into(),
            topic: topic.into(),
            partition,
            ranged: false,
        }),
        batch(values),
    )
}

pub fn fetch(stream: &str, topic: &str, offset: u64, max_wait_ms: u32) -> Request {
    Request::new(RequestBody::Fetch(pb::FetchRequest {
        stream: stream.into(),
        topic: topic.into(),
        partition: 0,
        offset,
        max_bytes: 1 << 20,
        max_wait_ms,
        min_bytes: 1,
    }))
}

pub fn list_streams() -> Request {
    Request::new(RequestBody::ListStreams(pb::ListStreamsRequest {}))
}

/// `(offset, value)` of every record in fetched batch bytes.
pub fn records(payload: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    for batch in Batches::new(payload) {
        for record in batch.unwrap().records() {
            out.push((record.offset, record.value.to_vec()));
        }
    }
    out
}

/// Polls `condition` every 10 ms until it holds; panics after [`PATIENCE`].
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks that a fresh connection is served.
pub async fn assert_serves(addr: SocketAddr) {
    let mut client = TestClient::connect(addr).await;
    assert_serves_on(&mut client).await;
}

/// Checks that an open connection is still served.
pub async fn assert_serves_on(client: &mut TestClient) {
    let (body, _) = ok(client.call(&list_streams()).await);
    assert!(matches!(body, ResponseBody::ListStreams(_)), "{body:?}");
}

/// Creates a one-partition topic through the protocol.
pub async fn setup_topic(client: &mut TestClient, stream: &str, topic: &str) {
    ok(client
        .call(&create_topic(stream, topic, pb::TopicOptions::default()))
        .await);
}
