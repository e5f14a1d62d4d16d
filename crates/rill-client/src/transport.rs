//! The one seam between the client and a broker: [`Transport`], with a TCP
//! implementation (multiplexed, pipelined, reconnecting) and an in-process one that
//! calls an embedded `rill_broker::Broker` directly (feature `embedded`). Every client feature is built on
//! `call`, so both transports behave the same.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use futures::future::BoxFuture;
use parking_lot::Mutex;
#[cfg(feature = "embedded")]
use rill_broker::Broker;
use rill_proto::pb::HelloRequest;
use rill_proto::{EncodedFrame, FrameDecoder, PROTOCOL_VERSION, Request, RequestBody, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Why a call did not produce a response.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// The request never left: safe to retry.
    NotSent(String),
    /// The connection broke after the request was sent: it may have been applied.
    Lost(String),
    /// The peer broke the protocol.
    Protocol(String),
}

/// A way to send requests to a broker.
pub(crate) trait Transport: Send + Sync + fmt::Debug {
    fn call(&self, request: Request) -> BoxFuture<'_, Result<Response, CallError>>;
    /// [`Transport::call`] of a `Produce` whose payload is `built`, a batch this process
    /// built. A broker in this process need not check it again (docs/FORMAT.md §3,
    /// "Batches built in-process"); over a socket it is sent as any payload is.
    fn call_built(
        &self,
        request: Request,
        built: rill_format::BuiltBatch,
    ) -> BoxFuture<'_, Result<Response, CallError>> {
        drop(built);
        self.call(request)
    }
    /// A human-readable peer name for errors.
    fn peer(&self) -> String;
    /// Releases what the transport holds: the TCP connection (calls still waiting on
    /// it fail as lost, and it is never made again), or the embedded broker (synced and
    /// shut down). Called once, by `Client::close`.
    fn close(&self) -> BoxFuture<'_, Result<(), crate::ClientError>>;
    /// Sends a `Subscribe` and returns the stream of its answers, or `None` where the
    /// transport or the server does not serve push streaming (docs/PROTOCOL.md §3.32).
    /// `capacity` bounds the frames the stream buffers: the window's batches and two.
    fn subscribe(
        &self,
        request: Request,
        capacity: usize,
    ) -> BoxFuture<'_, Result<Option<PushStream>, CallError>> {
        let _ = (request, capacity);
        Box::pin(async { Ok(None) })
    }
}

/// The frames answering one `Subscribe`, as they arrive on its connection, and the way
/// to send that connection the subscription's `Credit` and `Unsubscribe`.
#[derive(Debug)]
pub(crate) struct PushStream {
    /// The subscription: its `Subscribe`'s correlation id (0: none, or ended).
    pub(crate) id: u64,
    /// The answers, in order; `Err` when the connection broke. Ends after the frame
    /// without `MORE`, or when the server broke the window (more frames than granted).
    pub(crate) frames: mpsc::Receiver<Result<Response, CallError>>,
    /// The connection it lives on.
    pub(crate) link: Arc<dyn StreamLink>,
}

impl Drop for PushStream {
    /// Stops routing its frames, and ends it on the server (an `Unsubscribe` sent in a
    /// task, when a runtime is at hand; else the connection's end ends it). Whoever
    /// drops a stream — a subscription moving on, or a caller's future cancelled while
    /// one was opening — leaves nothing behind.
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        self.link.forget(self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let link = Arc::clone(&self.link);
            let request = Request::new(RequestBody::Unsubscribe(
                rill_proto::pb::UnsubscribeRequest {
                    subscription: self.id,
                },
            ));
            runtime.spawn(async move {
                let _ = link.request(request).await;
            });
        }
    }
}

/// The connection a subscription lives on.
pub(crate) trait StreamLink: Send + Sync + fmt::Debug {
    /// Sends a request on this connection (never another).
    fn request(&self, request: Request) -> BoxFuture<'_, Result<Response, CallError>>;
    /// Stops routing frames of subscription `id` (its reader is gone).
    fn forget(&self, id: u64);
}

// ---- embedded -----------------------------------------------------------------------

/// Calls an in-process broker: no sockets, no encoding (feature `embedded`).
#[cfg(feature = "embedded")]
#[derive(Debug)]
pub(crate) struct Embedded {
    /// `None` once closed: the broker is shut down and dropped, which releases its data
    /// directory (its lock) even while handles of the client live on.
    broker: parking_lot::RwLock<Option<Arc<Broker>>>,
    /// The broker's background upkeep (retention, group sessions, healing), stopped at
    /// close so that it lets go of the broker too.
    upkeep: Mutex<Option<tokio::task::JoinHandle<()>>>,
    data_dir: std::path::PathBuf,
}

#[cfg(feature = "embedded")]
impl Embedded {
    /// Serves calls with `broker` and starts its upkeep on the current runtime.
    pub(crate) fn start(broker: Arc<Broker>) -> Self {
        let upkeep = tokio::spawn(Arc::clone(&broker).run_upkeep());
        Self {
            data_dir: broker.config().data_dir.clone(),
            broker: parking_lot::RwLock::new(Some(broker)),
            upkeep: Mutex::new(Some(upkeep)),
        }
    }
}

#[cfg(feature = "embedded")]
impl Drop for Embedded {
    /// The last handle of a client that was not closed: the upkeep would otherwise keep
    /// the broker (and its directory lock) alive for as long as the runtime runs.
    fn drop(&mut self) {
        if let Some(upkeep) = self.upkeep.get_mut().take() {
            upkeep.abort();
        }
    }
}

#[cfg(feature = "embedded")]
impl Transport for Embedded {
    fn call(&self, request: Request) -> BoxFuture<'_, Result<Response, CallError>> {
        Box::pin(async move {
            let broker = self.broker.read().clone();
            match broker {
                Some(broker) => Ok(broker.handle(request).await),
                None => Err(CallError::NotSent("the client was closed".into())),
            }
        })
    }

    fn call_built(
        &self,
        request: Request,
        built: rill_format::BuiltBatch,
    ) -> BoxFuture<'_, Result<Response, CallError>> {
        Box::pin(async move {
            let broker = self.broker.read().clone();
            match broker {
                Some(broker) => Ok(broker.handle_built(request, built).await),
                None => Err(CallError::NotSent("the client was closed".into())),
            }
        })
    }

    fn peer(&self) -> String {
        format!("embedded broker at {}", self.data_dir.display())
    }

    fn close(&self) -> BoxFuture<'_, Result<(), crate::ClientError>> {
        Box::pin(async move {
            if let Some(upkeep) = self.upkeep.lock().take() {
                upkeep.abort();
            }
            let Some(broker) = self.broker.write().take() else {
                return Ok(());
            };
            // Calls still running hold their own reference; the broker is dropped, and
            // its directory unlocked, when the last of them ends.
            tokio::task::spawn_blocking(move || broker.shutdown())
                .await
                .map_err(|e| {
                    crate::ClientError::Protocol(format!("shutdown task failed: {e}"))
                })??;
            Ok(())
        })
    }
}

// ---- TCP ------------------------------------------------------------------------------

/// Calls waiting for their response, by correlation id. A non-poisoning lock: each use
/// is one insert, remove or drain, which a panic cannot leave half done.
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Response, CallError>>>>>;

/// Subscriptions receiving pushed frames, by correlation id. A non-poisoning lock, as
/// `Pending`'s.
type Streams = Arc<Mutex<HashMap<u64, mpsc::Sender<Result<Response, CallError>>>>>;

/// Options of the TCP transport.
#[derive(Debug, Clone)]
pub(crate) struct TcpOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) max_frame_bytes: u32,
    /// What each connection authenticates with, right after its handshake.
    pub(crate) credentials: Option<Credentials>,
    /// TLS (`rills://`), if the URL asks for it.
    pub(crate) tls: Option<crate::tls::Connector>,
}

/// What a client authenticates with to a server started with `--auth`
/// (docs/SECURITY.md §3): a user's password, by SCRAM-SHA-256 (the password never
/// crosses the wire), or an API token. `Debug` shows neither.
#[derive(Clone)]
pub enum Credentials {
    /// A user name and password.
    Password {
        /// The user.
        user: String,
        /// The password.
        password: rill_auth::Secret,
    },
    /// An API token (`rill_…`).
    Token(rill_auth::Secret),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Password { user, .. } => f
                .debug_struct("Password")
                .field("user", user)
                .finish_non_exhaustive(),
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// Why a connection could not be made ready.
enum ConnectError {
    /// As a call error.
    Call(CallError),
    /// The server refused the authentication: its answer stands for the call's.
    Refused(rill_proto::pb::ErrorResponse),
}

impl From<CallError> for ConnectError {
    fn from(e: CallError) -> Self {
        ConnectError::Call(e)
    }
}

#[derive(Debug)]
struct Connection {
    frames: mpsc::Sender<EncodedFrame>,
    pending: Pending,
    streams: Streams,
    /// `HelloResponse.features` of its server.
    features: std::sync::atomic::AtomicU32,
    health: Arc<Health>,
    /// The task routing responses; aborted when the client closes, which drops the
    /// socket's read half (the writer ends once `frames` is dropped).
    reader: tokio::task::JoinHandle<()>,
}

/// One multiplexed TCP connection, re-established on demand after it breaks.
#[derive(Debug)]
pub(crate) struct Tcp {
    addr: String,
    options: TcpOptions,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    next_id: Arc<AtomicU64>,
    /// Set by `close`: no connection is made again.
    closed: AtomicBool,
}

impl Tcp {
    pub(crate) fn new(addr: String, options: TcpOptions) -> Self {
        Self {
            addr,
            options,
            connection: tokio::sync::Mutex::new(None),
            next_id: Arc::new(AtomicU64::new(1)),
            closed: AtomicBool::new(false),
        }
    }

    /// The live connection, connecting (with a handshake, then the authentication if
    /// the client has credentials) if there is none. The connection is shared only once
    /// it is ready, so no request of another call goes out before it is authenticated.
    async fn connection(&self) -> Result<Arc<Connection>, ConnectError> {
        let mut slot = self.connection.lock().await;
        if self.closed.load(Ordering::Acquire) {
            return Err(CallError::NotSent("the client was closed".into()).into());
        }
        if let Some(c) = slot.as_ref()
            && c.health.is_alive()
        {
            return Ok(Arc::clone(c));
        }
        let stream =
            tokio::time::timeout(self.options.connect_timeout, TcpStream::connect(&self.addr))
                .await
                .map_err(|_| {
                    CallError::NotSent(format!(
                        "connect timed out after {:?}",
                        self.options.connect_timeout
                    ))
                })?
                .map_err(|e| CallError::NotSent(e.to_string()))?;
        stream
            .set_nodelay(true)
            .map_err(|e| CallError::NotSent(e.to_string()))?;
        let max_frame_bytes = self.options.max_frame_bytes;
        let connection = match &self.options.tls {
            None => {
                let (read, write) = stream.into_split();
                Arc::new(spawn_connection(read, write, max_frame_bytes))
            }
            Some(tls) => {
                let handshake = tls.connect(&self.addr, stream);
                let stream = tokio::time::timeout(self.options.connect_timeout, handshake)
                    .await
                    .map_err(|_| {
                        CallError::NotSent(format!(
                            "the TLS handshake timed out after {:?} (is it a rills:// port?)",
                            self.options.connect_timeout
                        ))
                    })?
                    .map_err(|e| match e {
                        crate::tls::TlsFailure::Io(m) => CallError::NotSent(m),
                        crate::tls::TlsFailure::Refused(m) => CallError::Protocol(m),
                    })?;
                let (read, write) = tokio::io::split(stream);
                Arc::new(spawn_connection(read, write, max_frame_bytes))
            }
        };
        // Handshake: checks that the peer speaks this protocol.
        let hello = Request::new(RequestBody::Hello(HelloRequest {
            client: format!("rill-client {}", env!("CARGO_PKG_VERSION")),
            protocol_version: u32::from(PROTOCOL_VERSION),
        }));
        match self.send(&connection, hello).await {
            Ok(Response::Ok {
                body: rill_proto::ResponseBody::Hello(hello),
                ..
            }) => connection.features.store(hello.features, Ordering::Release),
            Ok(Response::Ok { .. }) => {}
            Ok(Response::Err { error, .. }) => {
                return Err(
                    CallError::Protocol(format!("handshake refused: {}", error.message)).into(),
                );
            }
            Err(CallError::Lost(e)) => return Err(CallError::NotSent(e).into()),
            Err(e) => return Err(e.into()),
        }
        if let Some(credentials) = &self.options.credentials {
            self.authenticate(&connection, credentials).await?;
        }
        *slot = Some(Arc::clone(&connection));
        Ok(connection)
    }

    /// One `Authenticate` step: the server's answer, or its refusal.
    async fn auth_step(
        &self,
        connection: &Connection,
        mechanism: &str,
        data: Vec<u8>,
    ) -> Result<rill_proto::pb::AuthenticateResponse, ConnectError> {
        let request = Request::new(RequestBody::Authenticate(
            rill_proto::pb::AuthenticateRequest {
                mechanism: mechanism.to_owned(),
                data,
            },
        ));
        match self.send(connection, request).await {
            Ok(Response::Ok {
                body: rill_proto::ResponseBody::Authenticate(a),
                ..
            }) => Ok(a),
            Ok(Response::Ok { .. }) => {
                Err(CallError::Protocol("a response of another kind to Authenticate".into()).into())
            }
            Ok(Response::Err { error, .. }) => Err(ConnectError::Refused(error)),
            // Authentication changes nothing on the server: a lost step is safe to redo
            // on a new connection.
            Err(CallError::Lost(e)) => Err(CallError::NotSent(e).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Authenticates a fresh connection (docs/PROTOCOL.md §3.24).
    async fn authenticate(
        &self,
        connection: &Connection,
        credentials: &Credentials,
    ) -> Result<(), ConnectError> {
        let bad = |e: rill_auth::AuthError| {
            ConnectError::Call(CallError::Protocol(format!("authentication: {e}")))
        };
        match credentials {
            Credentials::Token(token) => {
                let a = self
                    .auth_step(connection, "TOKEN", token.expose().as_bytes().to_vec())
                    .await?;
                if !a.done {
                    return Err(CallError::Protocol(
                        "the server did not finish the token authentication".into(),
                    )
                    .into());
                }
            }
            Credentials::Password { user, password } => {
                let (client, first) =
                    rill_auth::scram::Client::start(user, password.clone()).map_err(bad)?;
                let a = self
                    .auth_step(connection, rill_auth::scram::MECHANISM, first)
                    .await?;
                let (client, last) = client.on_server_first(&a.data).map_err(bad)?;
                let a = self
                    .auth_step(connection, rill_auth::scram::MECHANISM, last)
                    .await?;
                if !a.done {
                    return Err(CallError::Protocol(
                        "the server did not finish the SCRAM exchange".into(),
                    )
                    .into());
                }
                // A server that does not know the password cannot sign: not ours.
                client.on_server_final(&a.data).map_err(bad)?;
            }
        }
        Ok(())
    }

    async fn send(&self, connection: &Connection, request: Request) -> Result<Response, CallError> {
        send_on(connection, &self.next_id, request).await
    }
}

/// Sends `request` on `connection` and waits for its answer.
async fn send_on(
    connection: &Connection,
    next_id: &AtomicU64,
    request: Request,
) -> Result<Response, CallError> {
    let id = next_id.fetch_add(1, Ordering::Relaxed);
    let frame = request
        .encode(id)
        .map_err(|e| CallError::NotSent(e.to_string()))?;
    let (tx, rx) = oneshot::channel();
    connection.pending.lock().insert(id, tx);
    // The reader marks the connection dead before failing what is pending; a call
    // registered after that sweep would wait forever, so it checks and leaves.
    if !connection.health.is_alive() {
        connection.pending.lock().remove(&id);
        return Err(connection.health.unsent());
    }
    if connection.frames.send(frame).await.is_err() {
        connection.pending.lock().remove(&id);
        connection
            .health
            .fail(&CallError::NotSent("connection closed".into()));
        return Err(connection.health.unsent());
    }
    match rx.await {
        Ok(result) => result,
        Err(_) => Err(connection.health.lost()),
    }
}

/// A subscription's connection.
#[derive(Debug)]
struct OnConnection {
    connection: Arc<Connection>,
    next_id: Arc<AtomicU64>,
}

impl StreamLink for OnConnection {
    fn request(&self, request: Request) -> BoxFuture<'_, Result<Response, CallError>> {
        Box::pin(send_on(&self.connection, &self.next_id, request))
    }

    fn forget(&self, id: u64) {
        self.connection.streams.lock().remove(&id);
    }
}

impl Transport for Tcp {
    fn call(&self, request: Request) -> BoxFuture<'_, Result<Response, CallError>> {
        Box::pin(async move {
            let kind = request.body.kind() as u16;
            let connection = match self.connection().await {
                Ok(c) => c,
                Err(ConnectError::Call(e)) => return Err(e),
                // The refusal of the authentication answers the call: the request was
                // not sent.
                Err(ConnectError::Refused(error)) => return Ok(Response::Err { kind, error }),
            };
            self.send(&connection, request).await
        })
    }

    fn peer(&self) -> String {
        self.addr.clone()
    }

    fn subscribe(
        &self,
        request: Request,
        capacity: usize,
    ) -> BoxFuture<'_, Result<Option<PushStream>, CallError>> {
        Box::pin(async move {
            let connection = match self.connection().await {
                Ok(c) => c,
                Err(ConnectError::Call(e)) => return Err(e),
                // Refused authentication: the subscription's first frame says so.
                Err(ConnectError::Refused(error)) => {
                    let (tx, frames) = mpsc::channel(1);
                    let kind = request.body.kind() as u16;
                    let _ = tx.try_send(Ok(Response::Err { kind, error }));
                    let link = Arc::new(OnConnection {
                        connection: Arc::new(dead_connection()),
                        next_id: Arc::clone(&self.next_id),
                    });
                    return Ok(Some(PushStream {
                        id: 0,
                        frames,
                        link,
                    }));
                }
            };
            if connection.features.load(Ordering::Acquire) & rill_proto::FEATURE_SUBSCRIBE == 0 {
                return Ok(None);
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let frame = request
                .encode(id)
                .map_err(|e| CallError::NotSent(e.to_string()))?;
            let (tx, frames) = mpsc::channel(capacity.max(2));
            connection.streams.lock().insert(id, tx);
            if !connection.health.is_alive() || connection.frames.send(frame).await.is_err() {
                connection.streams.lock().remove(&id);
                return Err(connection.health.unsent());
            }
            let link = Arc::new(OnConnection {
                connection,
                next_id: Arc::clone(&self.next_id),
            });
            Ok(Some(PushStream { id, frames, link }))
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), crate::ClientError>> {
        Box::pin(async move {
            // Under the connection lock, so a connect under way finishes first and is
            // then closed, and no later call connects again.
            let mut slot = self.connection.lock().await;
            self.closed.store(true, Ordering::Release);
            if let Some(connection) = slot.take() {
                connection.reader.abort();
                fail_all(
                    &connection.pending,
                    &connection.streams,
                    &connection.health,
                    &CallError::Lost("the client was closed".into()),
                );
            }
            Ok(())
        })
    }
}

/// Whether a connection still works, and if not, why it stopped: a call that finds it
/// dead fails with that reason, not a bare "connection closed" (a server that refused
/// the client's TLS certificate says so in an alert the reader may have taken before
/// the first request was even queued).
#[derive(Debug)]
struct Health {
    alive: AtomicBool,
    /// The first reason given, or a later one that is the peer's refusal
    /// ([`CallError::Protocol`]), which says more than a broken socket does.
    failure: Mutex<Option<CallError>>,
}

impl Health {
    fn new(alive: bool) -> Self {
        Self {
            alive: AtomicBool::new(alive),
            failure: Mutex::new(None),
        }
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Marks the connection dead with `error` as its reason.
    fn fail(&self, error: &CallError) {
        {
            let mut failure = self.failure.lock();
            let refused = |e: &CallError| matches!(e, CallError::Protocol(_));
            if failure.is_none() || (refused(error) && !failure.as_ref().is_some_and(refused)) {
                *failure = Some(error.clone());
            }
        }
        self.alive.store(false, Ordering::Release);
    }

    /// What a request that never left a dead connection fails with: safe to retry,
    /// unless the peer refused this client for good.
    fn unsent(&self) -> CallError {
        self.reason(CallError::NotSent)
    }

    /// What a request that was sent and then lost its answer fails with.
    fn lost(&self) -> CallError {
        self.reason(CallError::Lost)
    }

    /// The peer's refusal as it is; any other reason (or none) as `kind`.
    fn reason(&self, kind: fn(String) -> CallError) -> CallError {
        match &*self.failure.lock() {
            Some(CallError::Protocol(m)) => CallError::Protocol(m.clone()),
            Some(CallError::NotSent(m) | CallError::Lost(m)) => kind(m.clone()),
            None => kind("connection closed".into()),
        }
    }
}

/// Fails every pending call and subscription of a broken connection.
fn fail_all(pending: &Pending, streams: &Streams, health: &Health, error: &CallError) {
    health.fail(error);
    for (_, tx) in pending.lock().drain() {
        let _ = tx.send(Err(error.clone()));
    }
    for (_, tx) in streams.lock().drain() {
        // A full stream ends by the sender's drop alone, which its reader takes as lost.
        let _ = tx.try_send(Err(error.clone()));
    }
}

/// A connection that is already closed (it carries a refusal's frame only).
fn dead_connection() -> Connection {
    let (frames, _) = mpsc::channel(1);
    Connection {
        frames,
        pending: Arc::default(),
        streams: Arc::default(),
        features: std::sync::atomic::AtomicU32::new(0),
        health: Arc::new(Health::new(false)),
        reader: tokio::spawn(async {}),
    }
}

/// Hands a pushed frame to its subscription, or gives it back if `id` is no
/// subscription. The frame without `MORE` is its last. A subscription whose buffer is
/// full got more than its window: it is cut off (its reader sees the stream end, as
/// when a connection breaks, and subscribes again).
fn push_to(
    streams: &Streams,
    id: u64,
    more: bool,
    response: Result<Response, CallError>,
) -> Option<Result<Response, CallError>> {
    let mut streams = streams.lock();
    let Some(tx) = streams.get(&id) else {
        return Some(response);
    };
    let delivered = tx.try_send(response).is_ok();
    if !delivered {
        tracing::warn!(
            subscription = id,
            "the server pushed more than the window: ending the subscription"
        );
    }
    if !more || !delivered {
        streams.remove(&id);
    }
    None
}

/// What a connection's end fails its pending calls with: lost, unless the server said
/// why in a reply with correlation id 0 (docs/PROTOCOL.md §1.5) and the reason will not
/// pass on a retry (a plaintext client on a TLS port, a frame the server cannot read).
fn closed_error(reason: String, last_word: Option<&rill_proto::pb::ErrorResponse>) -> CallError {
    use rill_proto::ErrorCode;
    let Some(word) = last_word else {
        return CallError::Lost(reason);
    };
    let message = format!("the server closed the connection: {}", word.message);
    match ErrorCode::try_from(word.code) {
        Ok(code) if !code.is_transient() => CallError::Protocol(message),
        _ => CallError::Lost(message),
    }
}

fn spawn_connection<R, W>(mut read: R, write: W, max_frame_bytes: u32) -> Connection
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (frames, mut outgoing) = mpsc::channel::<EncodedFrame>(1024);
    let pending: Pending = Arc::default();
    let streams: Streams = Arc::default();
    let health = Arc::new(Health::new(true));

    // Writer: drains every queued frame before flushing, so pipelined requests share
    // syscalls; large payloads bypass the buffer.
    let (w_pending, w_streams, w_health) = (
        Arc::clone(&pending),
        Arc::clone(&streams),
        Arc::clone(&health),
    );
    tokio::spawn(async move {
        let mut out = BufWriter::with_capacity(64 * 1024, write);
        while let Some(frame) = outgoing.recv().await {
            let mut next = Some(frame);
            while let Some(frame) = next.take() {
                if let Err(e) = write_frame(&mut out, &frame).await {
                    let lost = CallError::Lost(e.to_string());
                    fail_all(&w_pending, &w_streams, &w_health, &lost);
                    return;
                }
                next = outgoing.try_recv().ok();
            }
            if let Err(e) = out.flush().await {
                let lost = CallError::Lost(e.to_string());
                fail_all(&w_pending, &w_streams, &w_health, &lost);
                return;
            }
        }
        let _ = out.shutdown().await;
    });

    // Reader: routes each response to its caller by correlation id.
    let (r_pending, r_streams, r_health) = (
        Arc::clone(&pending),
        Arc::clone(&streams),
        Arc::clone(&health),
    );
    let reader = tokio::spawn(async move {
        let decoder = FrameDecoder::new(max_frame_bytes);
        let mut buf = BytesMut::with_capacity(64 * 1024);
        // The server's reply with correlation id 0, which fails no request but tells
        // why it is closing the connection.
        let mut last_word = None;
        // Whether a frame came at all: a first answer that is no frame at all comes
        // from a peer that is not a Rill server (an HTTP port answers with text).
        let mut answered = false;
        let reason = loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    answered = true;
                    let id = frame.correlation_id;
                    let more = frame.has_more();
                    let response =
                        Response::decode(frame).map_err(|e| CallError::Protocol(e.to_string()));
                    let pending = if more {
                        None
                    } else {
                        r_pending.lock().remove(&id)
                    };
                    if let Some(tx) = pending {
                        let _ = tx.send(response);
                        continue;
                    }
                    let Some(response) = push_to(&r_streams, id, more, response) else {
                        continue;
                    };
                    if let (0, Ok(Response::Err { error, .. })) = (id, response) {
                        tracing::debug!(message = %error.message, "the server's last word");
                        last_word = Some(error);
                    } else {
                        tracing::debug!(correlation_id = id, "response for no pending request");
                    }
                    continue;
                }
                Ok(None) => {}
                Err(
                    e @ (rill_proto::ProtoError::FrameTooLarge { .. }
                    | rill_proto::ProtoError::Malformed(_)),
                ) if !answered => break Err(not_rill(&buf, e)),
                Err(e) => break Ok(format!("bad frame from server: {e}")),
            }
            if buf.capacity() - buf.len() < 16 * 1024 {
                buf.reserve(64 * 1024);
            }
            match read.read_buf(&mut buf).await {
                Ok(0) if !answered && buf.starts_with(b"HTTP/") => {
                    break Err(not_rill(&buf, "it closed the connection"));
                }
                Ok(0) => break Ok("connection closed by the server".to_owned()),
                Ok(_) => {}
                Err(e) => match crate::tls::describe_read_error(&e) {
                    (reason, true) => break Err(reason),
                    (reason, false) => break Ok(reason),
                },
            }
        };
        let error = match reason {
            Ok(reason) => closed_error(reason, last_word.as_ref()),
            Err(fatal) => CallError::Protocol(fatal),
        };
        fail_all(&r_pending, &r_streams, &r_health, &error);
    });

    Connection {
        frames,
        pending,
        streams,
        features: std::sync::atomic::AtomicU32::new(0),
        health,
        reader,
    }
}

/// Why a peer whose first answer is not a Rill frame is no Rill server: fatal, since
/// asking again would get the same answer.
fn not_rill(answer: &[u8], detail: impl fmt::Display) -> String {
    if answer.starts_with(b"HTTP/") {
        "the peer is not a Rill server: it answered in HTTP (is this the HTTP port? `rill serve` prints its client address as `rill listening on HOST:PORT`)".to_owned()
    } else {
        format!("the peer is not a Rill server: its first answer is not a Rill frame ({detail})")
    }
}

async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    frame: &EncodedFrame,
) -> std::io::Result<()> {
    out.write_all(&frame.head).await?;
    if frame.payload.len() >= 64 * 1024 {
        out.flush().await?;
        out.get_mut().write_all(&frame.payload).await
    } else {
        out.write_all(&frame.payload).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: &CallError) -> &str {
        match e {
            CallError::NotSent(m) | CallError::Lost(m) | CallError::Protocol(m) => m,
        }
    }

    #[test]
    fn a_dead_connection_says_why_and_a_refusal_outranks_a_broken_socket() {
        let fresh = Health::new(true);
        assert!(fresh.is_alive());
        assert!(matches!(fresh.unsent(), CallError::NotSent(m) if m == "connection closed"));

        let broken = Health::new(true);
        broken.fail(&CallError::Lost("connection reset by peer".into()));
        assert!(!broken.is_alive());
        // Never sent: safe to retry, with the socket's reason.
        assert!(
            matches!(broken.unsent(), CallError::NotSent(m) if m == "connection reset by peer")
        );
        assert!(matches!(broken.lost(), CallError::Lost(m) if m == "connection reset by peer"));
        // The peer's refusal, given later, replaces it; nothing replaces the refusal.
        broken.fail(&CallError::Protocol("certificate required".into()));
        broken.fail(&CallError::Lost("broken pipe".into()));
        assert!(matches!(broken.unsent(), CallError::Protocol(m) if m == "certificate required"));
        assert!(matches!(broken.lost(), CallError::Protocol(m) if m == "certificate required"));
        // The first of two socket reasons stays.
        let twice = Health::new(true);
        twice.fail(&CallError::Lost("first".into()));
        twice.fail(&CallError::NotSent("second".into()));
        assert_eq!(message(&twice.unsent()), "first");
    }

    /// A server that refuses the client for good and closes before the client queued a
    /// request (a TLS 1.3 server rejects a client certificate after the client's side of
    /// the handshake is done): the request fails with the server's reason, not with a
    /// bare "connection closed" (which a CI run of the TLS test once printed).
    #[tokio::test]
    async fn a_request_after_the_server_said_why_it_closed_gets_that_reason() {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(client);
        let connection = spawn_connection(read, write, 1 << 20);
        let refusal = Response::error(
            0,
            rill_proto::ErrorCode::InvalidRequest,
            "this server wants a client certificate",
        )
        .encode(0)
        .unwrap()
        .to_bytes();
        server.write_all(&refusal).await.unwrap();
        drop(server);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while connection.health.is_alive() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never saw the close"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let hello = Request::new(RequestBody::Hello(HelloRequest {
            client: "test".into(),
            protocol_version: u32::from(PROTOCOL_VERSION),
        }));
        let error = send_on(&connection, &AtomicU64::new(1), hello)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, CallError::Protocol(m) if m.contains("wants a client certificate")),
            "{error:?}"
        );
    }
}
