//! One client connection.
//!
//! The read half splits frames off a `BytesMut` buffer and spawns one task per request,
//! so a long poll never holds up the requests pipelined behind it. Each task calls
//! `Broker::handle` and queues its encoded response on a channel; a single writer
//! (`writer.rs`) drains the channel, so responses go out in the order they finish, each
//! tagged with its request's correlation id.
//!
//! Bounds: a request holds a permit of the connection's in-flight semaphore from the
//! moment its frame is taken off the buffer until its response has been handed to the
//! socket. When every permit is taken the reader waits instead of reading, so a client
//! that pipelines faster than it is served is pushed back through TCP flow control.
//!
//! Memory (`budget.rs`): a frame's bytes are granted before its body is read, as soon
//! as its length prefix is in; the grant travels with the request into its task and
//! becomes the response's, which holds it until the writer has written it. A fetch
//! first waits for a grant as large as the response it may get, *before* the broker
//! reads anything. So a client that does not read its responses stops being served
//! once its budget is spent — its fetches wait, its socket is not read — and the write
//! timeout closes it; and a client that announces a huge frame and stalls holds at most
//! that frame's grant. Outside the budget: one read buffer's worth (64 KiB) per
//! connection beyond the frame being read, the writer's 64 KiB buffer, the kernel's
//! socket buffers, and the few error frames of requests cancelled at shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use rill_broker::{Broker, Session};
use rill_format::BatchHeader;
use rill_proto::{
    EncodedFrame, ErrorCode, Frame, FrameDecoder, Kind, ProtoError, Request, RequestBody, Response,
    ResponseBody,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::budget::{Budget, Grant, Pool};
use crate::subscribe::{self, Subscriptions};
use crate::tls::{Accepted, Sniffed, Tls};
use crate::writer::{Outgoing, is_write_timeout, write_loop};
use crate::{CloseReason, Metrics};

/// Read buffer growth step, and how far the reader may read past the frame it holds a
/// grant for (the next frames' beginnings, granted once their prefixes are seen).
const READ_BUFFER_BYTES: usize = 64 << 10;
/// What a fetch response has besides its batches: the frame header and a
/// `FetchResponse` (three varints), with room to spare.
pub(crate) const FETCH_RESPONSE_HEAD_BYTES_MAX: usize = 256;
/// Grow the read buffer when less than this is free.
const READ_SPARE_BYTES_MIN: usize = 4 << 10;
/// After a fatal framing error, how long and how much unread input is discarded before
/// closing, so the peer reads the error reply instead of a connection reset.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES_MAX: usize = 1 << 20;
/// The `kind` of replies to frames whose kind could not be read.
const NO_KIND: u16 = 0;

/// Where the server is in its life; connections watch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Serving.
    Running,
    /// Shutting down: read no more requests, answer those in flight.
    Draining,
    /// The drain timed out: cancel what is in flight (each gets a `SHUTTING_DOWN`
    /// reply), flush and close.
    Cutting,
}

/// What every connection of a server shares.
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) broker: Arc<Broker>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) max_frame_bytes: u32,
    pub(crate) max_in_flight: usize,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) write_timeout: Duration,
    /// Each connection's own budget.
    pub(crate) connection_buffer_bytes_max: usize,
    /// The budget all connections share.
    pub(crate) buffer: Arc<Pool>,
    /// TLS, if the port speaks it.
    pub(crate) tls: Option<Arc<Tls>>,
}

/// Why the reader stopped.
#[derive(Debug)]
enum End {
    /// The client closed its side between frames.
    Eof,
    /// The client closed its side in the middle of a frame.
    Truncated { buffered: usize },
    /// The byte stream cannot be trusted any more; an error reply was queued.
    BadFrame,
    /// The server is shutting down.
    Shutdown,
    /// Nothing arrived for `idle_timeout` and nothing was in flight.
    Idle,
    /// The writer failed, so nothing more can be answered.
    WriterGone,
    /// Reading failed (typically a reset).
    Io(std::io::Error),
}

/// Serves one accepted connection until the client leaves, a fatal framing error, the
/// idle timeout, or shutdown (see [`Phase`]); in-flight requests are answered first. On
/// a TLS port the handshake comes first; a client certificate naming a user
/// authenticates the session as that user.
pub(crate) async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Context>,
    phase: watch::Receiver<Phase>,
) {
    let Some(tls) = ctx.tls.clone() else {
        match crate::tls::sniff(&socket).await {
            // A quiet client is served as usual: the idle timeout governs it.
            Sniffed::Plain | Sniffed::Quiet => {}
            Sniffed::Tls => {
                refuse(socket, peer, &ctx, TLS_ON_PLAINTEXT).await;
                return;
            }
            Sniffed::Gone => return,
        }
        let session = ctx.broker.session(Some(peer.ip()));
        let (read_half, write_half) = socket.into_split();
        serve_stream(read_half, write_half, peer, session, ctx, phase).await;
        return;
    };
    match crate::tls::accept(&tls, socket, peer).await {
        Accepted::Tls(stream, common_name) => {
            let session = match common_name {
                Some(name) => ctx.broker.session_with_certificate(Some(peer.ip()), &name),
                None => ctx.broker.session(Some(peer.ip())),
            };
            let (read_half, write_half) = tokio::io::split(*stream);
            serve_stream(read_half, write_half, peer, session, ctx, phase).await;
        }
        Accepted::Plaintext(socket) => refuse(socket, peer, &ctx, PLAINTEXT_ON_TLS).await,
        Accepted::Gone => {}
    }
}

/// Tells a client that speaks the wrong layer (plaintext on a TLS port, TLS on a
/// plaintext port) what is wrong in a plaintext frame, and closes (after reading what it
/// sent, so that it reads the reply rather than a reset).
async fn refuse(mut socket: TcpStream, peer: SocketAddr, ctx: &Context, message: &str) {
    tracing::info!(%peer, message, "connection refused");
    ctx.metrics.rejected(None);
    let frame = Response::error(NO_KIND, ErrorCode::InvalidRequest, message)
        .encode(0)
        .expect("an error frame is small")
        .to_bytes();
    let reply = async {
        socket.write_all(&frame).await?;
        socket.flush().await
    };
    if tokio::time::timeout(LINGER, reply).await.is_ok() {
        let _ = tokio::time::timeout(LINGER, discard(&mut socket, LINGER_BYTES_MAX)).await;
    }
}

/// What a plaintext client on a TLS port is told (docs/SECURITY.md §5).
pub(crate) const PLAINTEXT_ON_TLS: &str = "this port requires TLS; connect with rills://";
/// What a TLS client on a plaintext port is sent (its TLS stack cannot read it).
pub(crate) const TLS_ON_PLAINTEXT: &str = "this port does not speak TLS; connect with rill://";

async fn serve_stream<R, W>(
    read_half: R,
    write_half: W,
    peer: SocketAddr,
    session: Session,
    ctx: Arc<Context>,
    mut phase: watch::Receiver<Phase>,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let budget = Budget::new(
        Arc::new(Pool::new(ctx.connection_buffer_bytes_max)),
        Arc::clone(&ctx.buffer),
    );
    let mut reader = Reader {
        socket: read_half,
        buf: BytesMut::with_capacity(READ_BUFFER_BYTES),
        slot: None,
        held: budget.none(),
        budget,
        decoder: FrameDecoder::new(ctx.max_frame_bytes),
        in_flight: Arc::new(Semaphore::new(ctx.max_in_flight)),
        tasks: JoinSet::new(),
        tx,
        ctx: Arc::clone(&ctx),
        peer,
        session: Arc::new(session),
        // Half the in-flight slots at most, so subscriptions never take them all.
        subs: Arc::new(Subscriptions::new(ctx.max_in_flight / 2)),
        phase: phase.clone(),
    };
    let session = Arc::clone(&reader.session);
    let read_side = async {
        let end = reader.read_loop(&mut phase).await;
        // Nothing more will be asked: each subscription sends its last frame, so the
        // drain below is not held up by streams that would never end.
        reader.subs.stop_all();
        reader.drain(&mut phase).await;
        let Reader { socket, tx, .. } = reader;
        // The last sender: the writer finishes once the queue is empty.
        drop(tx);
        (end, socket)
    };
    // When the writer fails (the write timeout included) it drops the queue, whose
    // grants go back; the reader sees the queue closed, stops, and cancels what is in
    // flight.
    let ((end, mut read_half), written) =
        tokio::join!(read_side, write_loop(write_half, rx, ctx.write_timeout));
    match written {
        Ok(()) => {}
        Err(e) if is_write_timeout(&e) => {
            ctx.metrics.connection_closed(CloseReason::WriteTimeout);
            tracing::warn!(%peer, error = %e, "closing a connection that does not read");
        }
        Err(e) => tracing::debug!(%peer, error = %e, "writing to a client failed"),
    }
    match &end {
        End::Truncated { buffered } => {
            tracing::warn!(%peer, buffered, "client closed the connection inside a frame");
        }
        End::Io(e) => tracing::debug!(%peer, error = %e, "reading from a client failed"),
        End::BadFrame => {
            let _ = tokio::time::timeout(LINGER, discard(&mut read_half, LINGER_BYTES_MAX)).await;
        }
        End::Idle => ctx.metrics.connection_closed(CloseReason::Idle),
        End::Eof | End::Shutdown | End::WriterGone => {}
    }
    // Group members that joined over this connection leave with it.
    ctx.broker.end_session(&session);
    tracing::debug!(%peer, reason = ?end, "connection closed");
}

/// The frame sent to a connection refused because `max_connections` are open.
pub(crate) fn busy_frame(max_connections: usize) -> EncodedFrame {
    busy(format!(
        "the server has {max_connections} connections open, its limit"
    ))
}

/// The frame sent to a connection refused because the server is out of file
/// descriptors.
pub(crate) fn out_of_fds_frame() -> EncodedFrame {
    busy("the server is out of file descriptors".to_owned())
}

fn busy(message: String) -> EncodedFrame {
    let response = Response::error(NO_KIND, ErrorCode::Busy, message);
    response.encode(0).expect("an error frame is small")
}

#[derive(Debug)]
struct Reader<R> {
    socket: R,
    buf: BytesMut,
    /// The in-flight slot and the grant for the frame at the front of `buf`, taken in
    /// that order once its length prefix is in (empty between frames).
    slot: Option<OwnedSemaphorePermit>,
    held: Grant,
    budget: Budget,
    decoder: FrameDecoder,
    in_flight: Arc<Semaphore>,
    tasks: JoinSet<()>,
    tx: mpsc::UnboundedSender<Outgoing>,
    ctx: Arc<Context>,
    peer: SocketAddr,
    /// Group members that joined over this connection.
    session: Arc<Session>,
    /// Its open subscriptions (push streaming).
    subs: Arc<Subscriptions>,
    /// The server's phase, for the subscriptions (which end when it drains).
    phase: watch::Receiver<Phase>,
}

impl<R: AsyncRead + Unpin + Send> Reader<R> {
    async fn read_loop(&mut self, phase: &mut watch::Receiver<Phase>) -> End {
        loop {
            // Every whole frame already buffered, before reading more.
            loop {
                let pending = self.decoder.pending_frame_len(&self.buf);
                let buffered = self.buf.len();
                let frame = match pending {
                    Some(_) => None,
                    None => match self.decoder.decode(&mut self.buf) {
                        Ok(Some(frame)) => Some(frame),
                        Ok(None) => break,
                        Err(e) => {
                            self.reject_stream(&e);
                            return End::BadFrame;
                        }
                    },
                };
                // A frame is at the front (pending) or in hand (whole): its in-flight
                // slot first, then its bytes. Waiting for a slot while holding budget
                // could deadlock: the requests that would free the slot may be waiting
                // for that budget. Waiting here, rather than reading on, is the
                // backpressure.
                if let Err(end) = self.take_slot(phase).await {
                    return end;
                }
                let Some(frame) = frame else {
                    // Only part of the frame is here: hold its whole size before reading
                    // the rest.
                    let total = pending.expect("no frame in hand means one is pending");
                    if let Err(end) = self.hold(total, phase).await {
                        return end;
                    }
                    self.buf.reserve(total - self.buf.len());
                    break;
                };
                // A frame that came whole in one read (it fitted the read buffer) is
                // granted now; one granted while pending already is.
                let frame_bytes = buffered - self.buf.len();
                if let Err(end) = self.hold(frame_bytes, phase).await {
                    return end;
                }
                let mut grant = self.held.take();
                grant.shrink_to(frame_bytes);
                let permit = self.slot.take().expect("taken above");
                if !self.dispatch(frame, permit, grant) {
                    return End::BadFrame;
                }
                self.reap();
            }
            if self.buf.capacity() - self.buf.len() < READ_SPARE_BYTES_MIN {
                self.buf.reserve(READ_BUFFER_BYTES);
            }
            // Past the granted frame, at most one read buffer of what follows.
            let room = (self.held.bytes() + READ_BUFFER_BYTES).saturating_sub(self.buf.len());
            debug_assert!(room > 0, "the granted frame is not whole yet");
            let idle = async {
                match self.ctx.idle_timeout {
                    Some(timeout) => tokio::time::sleep(timeout).await,
                    None => std::future::pending().await,
                }
            };
            let mut limited = (&mut self.buf).limit(room);
            let read = tokio::select! {
                biased;
                () = reached(phase, Phase::Draining) => return End::Shutdown,
                () = self.tx.closed() => return End::WriterGone,
                read = self.socket.read_buf(&mut limited) => read,
                () = idle => {
                    // The slot of a frame not yet whole is no request in flight.
                    let waiting = usize::from(self.slot.is_some());
                    if self.in_flight.available_permits() + waiting == self.ctx.max_in_flight {
                        return End::Idle;
                    }
                    // Quiet, but waiting on its own requests (a long poll): not idle.
                    continue;
                }
            };
            match read {
                Ok(0) if self.buf.is_empty() => return End::Eof,
                Ok(0) => {
                    return End::Truncated {
                        buffered: self.buf.len(),
                    };
                }
                Ok(_) => {}
                Err(e) => return End::Io(e),
            }
        }
    }

    /// Takes an in-flight slot for the frame at the front, unless it has one.
    async fn take_slot(&mut self, phase: &mut watch::Receiver<Phase>) -> Result<(), End> {
        if self.slot.is_some() {
            return Ok(());
        }
        let permit = tokio::select! {
            biased;
            () = reached(phase, Phase::Draining) => return Err(End::Shutdown),
            () = self.tx.closed() => return Err(End::WriterGone),
            permit = Arc::clone(&self.in_flight).acquire_owned() => {
                permit.expect("the in-flight semaphore is never closed")
            }
        };
        self.slot = Some(permit);
        Ok(())
    }

    /// Makes `held` cover `bytes`, waiting for the budgets if need be; fails when the
    /// connection must stop instead.
    async fn hold(&mut self, bytes: usize, phase: &mut watch::Receiver<Phase>) -> Result<(), End> {
        let Some(more) = bytes.checked_sub(self.held.bytes()).filter(|&n| n > 0) else {
            return Ok(());
        };
        // The configuration makes every frame fit one grant, so none is clamped.
        debug_assert!(bytes <= self.budget.grant_bytes_max());
        let grant = tokio::select! {
            biased;
            () = reached(phase, Phase::Draining) => return Err(End::Shutdown),
            () = self.tx.closed() => return Err(End::WriterGone),
            grant = self.budget.acquire(more) => grant,
        };
        self.held.merge(grant);
        Ok(())
    }

    /// Starts handling one frame; false if the connection must close after the reply.
    fn dispatch(&mut self, frame: Frame, permit: OwnedSemaphorePermit, grant: Grant) -> bool {
        let correlation_id = frame.correlation_id;
        let raw_kind = frame.kind;
        match Request::decode(frame) {
            Ok(request) => {
                let reply = Reply::new(
                    self.tx.clone(),
                    self.budget.clone(),
                    correlation_id,
                    raw_kind,
                    permit,
                );
                let conn = Conn {
                    ctx: Arc::clone(&self.ctx),
                    session: Arc::clone(&self.session),
                    subs: Arc::clone(&self.subs),
                    phase: self.phase.clone(),
                };
                self.tasks.spawn(handle(conn, request, reply, grant));
                true
            }
            Err(e) => {
                let recoverable = e.is_recoverable();
                tracing::warn!(peer = %self.peer, error = %e, recoverable, "bad request frame");
                self.ctx.metrics.rejected(Kind::from_u16(raw_kind));
                let cid = e.correlation_id().unwrap_or(correlation_id);
                let reply = Reply::new(self.tx.clone(), self.budget.clone(), cid, raw_kind, permit);
                reply.send_now(&Response::error(raw_kind, e.code(), e.to_string()), grant);
                recoverable
            }
        }
    }

    /// Answers a framing error (bad length prefix or header) before the connection closes.
    fn reject_stream(&self, e: &ProtoError) {
        tracing::warn!(peer = %self.peer, error = %e, "unreadable frame, closing the connection");
        self.ctx.metrics.rejected(None);
        let response = Response::error(NO_KIND, e.code(), e.to_string());
        let frame = response
            .encode(e.correlation_id().unwrap_or(0))
            .expect("an error frame is small");
        // Without a permit or a grant: this is the connection's last frame.
        let _ = self.tx.send(Outgoing {
            frame,
            permit: None,
            grant: None,
        });
    }

    /// Collects finished request tasks so the set does not grow with the connection's age.
    fn reap(&mut self) {
        while let Some(done) = self.tasks.try_join_next() {
            log_task_end(self.peer, done);
        }
    }

    /// Waits for every request in flight to be answered. They are cancelled instead if
    /// the writer is gone (nobody would read the answers) or the server cuts the drain
    /// short (each then answers `SHUTTING_DOWN` as its task is dropped).
    async fn drain(&mut self, phase: &mut watch::Receiver<Phase>) {
        loop {
            tokio::select! {
                done = self.tasks.join_next() => match done {
                    Some(done) => log_task_end(self.peer, done),
                    None => return,
                },
                () = self.tx.closed() => break,
                () = reached(phase, Phase::Cutting) => break,
            }
        }
        self.tasks.shutdown().await;
    }
}

fn log_task_end(peer: SocketAddr, done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::warn!(%peer, error = %e, "a request task panicked");
    }
}

/// Resolves once the server's phase is `at_least` (or the server is gone).
async fn reached(phase: &mut watch::Receiver<Phase>, at_least: Phase) {
    let _ = phase.wait_for(|now| *now >= at_least).await;
}

/// What a request's task needs of its connection.
struct Conn {
    ctx: Arc<Context>,
    session: Arc<Session>,
    subs: Arc<Subscriptions>,
    phase: watch::Receiver<Phase>,
}

/// One request: wait for the budget of its response if it is a fetch, ask the broker,
/// record metrics, queue the reply. `grant` holds the request frame's bytes. The
/// requests of push streaming are the connection's own (`subscribe.rs`).
async fn handle(conn: Conn, request: Request, reply: Reply, mut grant: Grant) {
    let Conn {
        ctx,
        session,
        subs,
        phase,
    } = conn;
    let kind = request.body.kind();
    let started = Instant::now();
    match request.body {
        RequestBody::Subscribe(r) => {
            subscribe::serve(Arc::clone(&ctx), session, subs, phase, r, reply, grant).await;
            ctx.metrics.request(kind, started.elapsed(), false);
            return;
        }
        RequestBody::Credit(c) => {
            let response = subs.credit(&c);
            ctx.metrics.request(
                kind,
                started.elapsed(),
                matches!(response, Response::Err { .. }),
            );
            reply.send(&response, grant).await;
            return;
        }
        RequestBody::Unsubscribe(u) => {
            let response = subs.unsubscribe(u.subscription).await;
            ctx.metrics.request(kind, started.elapsed(), false);
            reply.send(&response, grant).await;
            return;
        }
        _ => {}
    }
    if let RequestBody::Fetch(f) = &request.body {
        // What the broker may return, granted before it reads anything: so a client
        // that does not read makes its fetches wait here rather than pile up data.
        // (The first batch may be larger than `max_bytes`; `Reply::send` grants the
        // difference then.)
        let fetch_bytes_max = ctx.broker.config().max_fetch_bytes;
        let batches = f.max_bytes.clamp(1, fetch_bytes_max) as usize;
        // The request's own few bytes go back first: waiting for a grant while holding
        // one is what could deadlock.
        drop(grant);
        grant = reply
            .budget
            .acquire(batches + FETCH_RESPONSE_HEAD_BYTES_MAX)
            .await;
    }
    // Per-topic traffic, taken before the request moves into the broker.
    let topic = match &request.body {
        RequestBody::Produce(r) => Some((
            r.stream.clone(),
            r.topic.clone(),
            BatchHeader::parse(&request.payload).map_or(0, |h| h.record_count),
            request.payload.len(),
        )),
        RequestBody::Fetch(r) => Some((r.stream.clone(), r.topic.clone(), 0, 0)),
        _ => None,
    };
    let mut response = ctx.broker.handle_in(&session, request).await;
    if let Response::Ok {
        body: ResponseBody::Hello(hello),
        ..
    } = &mut response
    {
        // What this connection serves beyond the broker's requests.
        hello.features |= rill_proto::FEATURE_SUBSCRIBE;
    }
    let elapsed = started.elapsed();
    let metrics = &ctx.metrics;
    metrics.request(kind, elapsed, matches!(response, Response::Err { .. }));
    if let (Some((stream, topic, records, bytes)), Response::Ok { body, payload }) =
        (topic, &response)
    {
        match body {
            // A duplicate was acknowledged again, not appended again.
            ResponseBody::Produce(p) if !p.duplicate => {
                metrics.produced(&stream, &topic, u64::from(records), bytes as u64);
            }
            ResponseBody::Fetch(_) => metrics.fetched(
                &stream,
                &topic,
                batch_records(payload),
                payload.len() as u64,
            ),
            _ => {}
        }
    }
    reply.send(&response, grant).await;
}

/// Records in the stored batches of a fetch answer, by their headers alone (a batch
/// counts whole, also when the fetch began inside it); stops at a header that does not
/// check out.
pub(crate) fn batch_records(mut payload: &[u8]) -> u64 {
    let mut records = 0;
    while let Ok(h) = BatchHeader::parse(payload) {
        records += u64::from(h.record_count);
        match payload.get(h.batch_length as usize..) {
            Some(rest) => payload = rest,
            None => break,
        }
    }
    records
}

/// The obligation to answer one request. Dropped unanswered — the task panicked or was
/// cancelled — it still answers, so a client never waits on a correlation id forever.
#[derive(Debug)]
pub(crate) struct Reply {
    tx: mpsc::UnboundedSender<Outgoing>,
    budget: Budget,
    correlation_id: u64,
    kind: u16,
    permit: Option<OwnedSemaphorePermit>,
}

impl Reply {
    fn new(
        tx: mpsc::UnboundedSender<Outgoing>,
        budget: Budget,
        correlation_id: u64,
        kind: u16,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        Self {
            tx,
            budget,
            correlation_id,
            kind,
            permit: Some(permit),
        }
    }

    /// The correlation id of the request it answers.
    pub(crate) fn correlation_id(&self) -> u64 {
        self.correlation_id
    }

    /// The connection's budget.
    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Queues one of several responses to its request (a subscription's pushes, with
    /// the flag `MORE`) once `grant` covers its bytes, as [`Reply::send`] does; the
    /// request stays in flight.
    pub(crate) async fn push_more(&self, response: &Response, mut grant: Grant) {
        let frame = response
            .encode_more(self.correlation_id)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "a pushed response could not be encoded");
                Response::error(self.kind, ErrorCode::Internal, e.to_string())
                    .encode_more(self.correlation_id)
                    .expect("an error frame is small")
            });
        let bytes = frame.len();
        if !self.top_up(&mut grant, bytes) {
            drop(grant);
            grant = self.budget.acquire(bytes).await;
        }
        self.push(frame, None, Some(grant));
    }

    /// Queues the response once `grant` covers its bytes: the unused part of the grant
    /// goes back; a shortfall is taken at once if free, else the grant is given back
    /// and the whole size waited for (never waiting while holding).
    pub(crate) async fn send(mut self, response: &Response, mut grant: Grant) {
        let frame = self.encode(response);
        let bytes = frame.len();
        if !self.top_up(&mut grant, bytes) {
            drop(grant);
            grant = self.budget.acquire(bytes).await;
        }
        let permit = self.permit.take();
        self.push(frame, permit, Some(grant));
    }

    /// Queues the response without waiting (the reader's own error replies): `grant`
    /// is what the bad frame held, topped up if the budget has the bytes free now.
    fn send_now(mut self, response: &Response, mut grant: Grant) {
        let frame = self.encode(response);
        self.top_up(&mut grant, frame.len());
        let permit = self.permit.take();
        self.push(frame, permit, Some(grant));
    }

    /// Makes `grant` exactly `bytes` if it can without waiting.
    fn top_up(&self, grant: &mut Grant, bytes: usize) -> bool {
        match bytes.checked_sub(grant.bytes()) {
            None | Some(0) => {
                grant.shrink_to(bytes);
                true
            }
            Some(more) => match self.budget.try_acquire(more) {
                Some(extra) => {
                    grant.merge(extra);
                    true
                }
                None => false,
            },
        }
    }

    fn encode(&self, response: &Response) -> EncodedFrame {
        response.encode(self.correlation_id).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "a response could not be encoded");
            Response::error(self.kind, ErrorCode::Internal, e.to_string())
                .encode(self.correlation_id)
                .expect("an error frame is small")
        })
    }

    fn push(
        &self,
        frame: EncodedFrame,
        permit: Option<OwnedSemaphorePermit>,
        grant: Option<Grant>,
    ) {
        // Fails only when the writer is gone: then nobody is listening for the answer.
        let _ = self.tx.send(Outgoing {
            frame,
            permit,
            grant,
        });
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let response = if std::thread::panicking() {
            Response::error(
                self.kind,
                ErrorCode::Internal,
                "the request failed unexpectedly",
            )
        } else {
            Response::error(
                self.kind,
                ErrorCode::ShuttingDown,
                "the request was cancelled: the server is shutting down",
            )
        };
        // Without a grant: cancelled requests answer at shutdown or when the writer
        // is gone, a few dozen bytes each, at most one per in-flight slot.
        let frame = self.encode(&response);
        self.push(frame, Some(permit), None);
    }
}

/// Reads and throws away up to `limit` bytes, until EOF.
async fn discard(half: &mut (impl AsyncRead + Unpin), limit: usize) {
    let mut scratch = vec![0; 16 << 10];
    let mut seen = 0;
    while seen < limit {
        match half.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen += n,
        }
    }
}
