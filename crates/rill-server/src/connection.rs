//! One client connection.
//!
//! The read half splits frames off a `BytesMut` buffer and spawns one task per request,
//! so a long poll never holds up the requests pipelined behind it. Each task calls
//! `Broker::handle` and queues its encoded response on a channel; a single writer drains
//! the channel, so responses go out in the order they finish, each tagged with its
//! request's correlation id.
//!
//! Bounds: a request holds a permit of the connection's in-flight semaphore from the
//! moment its frame is taken off the buffer until its response has been handed to the
//! socket. When every permit is taken the reader waits instead of reading, so a client
//! that pipelines faster than it is served (or does not read its responses) is pushed
//! back through TCP flow control, and the response queue never holds more than
//! `max_in_flight_per_connection` frames.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rill_broker::{Broker, Session};
use rill_format::BatchHeader;
use rill_proto::{
    EncodedFrame, ErrorCode, Frame, FrameDecoder, Kind, ProtoError, Request, RequestBody, Response,
    ResponseBody,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::Metrics;

/// Capacity of the write buffer. Larger writes (most fetch payloads) bypass it.
const WRITE_BUFFER_BYTES: usize = 64 << 10;
/// Read buffer growth step; a frame larger than this reserves its whole length.
const READ_BUFFER_BYTES: usize = 64 << 10;
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
}

/// A response ready for the socket, with the in-flight permit its request held.
#[derive(Debug)]
struct Outgoing {
    frame: EncodedFrame,
    _permit: Option<OwnedSemaphorePermit>,
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
/// idle timeout, or shutdown (see [`Phase`]); in-flight requests are answered first.
pub(crate) async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Context>,
    mut phase: watch::Receiver<Phase>,
) {
    let (read_half, write_half) = socket.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut reader = Reader {
        socket: read_half,
        buf: BytesMut::with_capacity(READ_BUFFER_BYTES),
        decoder: FrameDecoder::new(ctx.max_frame_bytes),
        in_flight: Arc::new(Semaphore::new(ctx.max_in_flight)),
        tasks: JoinSet::new(),
        tx,
        ctx: Arc::clone(&ctx),
        peer,
        session: Arc::new(Session::default()),
    };
    let session = Arc::clone(&reader.session);
    let read_side = async {
        let end = reader.read_loop(&mut phase).await;
        reader.drain(&mut phase).await;
        let Reader { socket, tx, .. } = reader;
        // The last sender: the writer finishes once the queue is empty.
        drop(tx);
        (end, socket)
    };
    let ((end, mut read_half), written) = tokio::join!(read_side, write_loop(write_half, rx));
    if let Err(e) = written {
        tracing::debug!(%peer, error = %e, "writing to a client failed");
    }
    match &end {
        End::Truncated { buffered } => {
            tracing::warn!(%peer, buffered, "client closed the connection inside a frame");
        }
        End::Io(e) => tracing::debug!(%peer, error = %e, "reading from a client failed"),
        End::BadFrame => {
            let _ = tokio::time::timeout(LINGER, discard(&mut read_half, LINGER_BYTES_MAX)).await;
        }
        End::Eof | End::Shutdown | End::Idle | End::WriterGone => {}
    }
    // Group members that joined over this connection leave with it.
    ctx.broker.end_session(&session);
    tracing::debug!(%peer, reason = ?end, "connection closed");
}

/// The frame sent to a connection refused because `max_connections` are open.
pub(crate) fn busy_frame(max_connections: usize) -> EncodedFrame {
    let response = Response::error(
        NO_KIND,
        ErrorCode::Busy,
        format!("the server has {max_connections} connections open, its limit"),
    );
    response.encode(0).expect("an error frame is small")
}

#[derive(Debug)]
struct Reader {
    socket: OwnedReadHalf,
    buf: BytesMut,
    decoder: FrameDecoder,
    in_flight: Arc<Semaphore>,
    tasks: JoinSet<()>,
    tx: mpsc::UnboundedSender<Outgoing>,
    ctx: Arc<Context>,
    peer: SocketAddr,
    /// Group members that joined over this connection.
    session: Arc<Session>,
}

impl Reader {
    async fn read_loop(&mut self, phase: &mut watch::Receiver<Phase>) -> End {
        loop {
            // Every whole frame already buffered, before reading more.
            loop {
                let frame = match self.decoder.decode(&mut self.buf) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => {
                        self.reject_stream(&e);
                        return End::BadFrame;
                    }
                };
                // Waiting here, rather than reading on, is the backpressure.
                let permit = tokio::select! {
                    biased;
                    () = reached(phase, Phase::Draining) => return End::Shutdown,
                    () = self.tx.closed() => return End::WriterGone,
                    permit = Arc::clone(&self.in_flight).acquire_owned() => {
                        permit.expect("the in-flight semaphore is never closed")
                    }
                };
                if !self.dispatch(frame, permit) {
                    return End::BadFrame;
                }
                self.reap();
            }
            if self.buf.capacity() - self.buf.len() < READ_SPARE_BYTES_MIN {
                self.buf.reserve(READ_BUFFER_BYTES);
            }
            let idle = async {
                match self.ctx.idle_timeout {
                    Some(timeout) => tokio::time::sleep(timeout).await,
                    None => std::future::pending().await,
                }
            };
            let read = tokio::select! {
                biased;
                () = reached(phase, Phase::Draining) => return End::Shutdown,
                () = self.tx.closed() => return End::WriterGone,
                read = self.socket.read_buf(&mut self.buf) => read,
                () = idle => {
                    if self.in_flight.available_permits() == self.ctx.max_in_flight {
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

    /// Starts handling one frame; false if the connection must close after the reply.
    fn dispatch(&mut self, frame: Frame, permit: OwnedSemaphorePermit) -> bool {
        let correlation_id = frame.correlation_id;
        let raw_kind = frame.kind;
        match Request::decode(frame) {
            Ok(request) => {
                let reply = Reply::new(self.tx.clone(), correlation_id, raw_kind, permit);
                self.tasks.spawn(handle(
                    Arc::clone(&self.ctx),
                    Arc::clone(&self.session),
                    request,
                    reply,
                ));
                true
            }
            Err(e) => {
                let recoverable = e.is_recoverable();
                tracing::warn!(peer = %self.peer, error = %e, recoverable, "bad request frame");
                self.ctx.metrics.rejected(Kind::from_u16(raw_kind));
                let cid = e.correlation_id().unwrap_or(correlation_id);
                let reply = Reply::new(self.tx.clone(), cid, raw_kind, permit);
                reply.send(&Response::error(raw_kind, e.code(), e.to_string()));
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
        // Without a permit: this is the connection's last frame.
        let _ = self.tx.send(Outgoing {
            frame,
            _permit: None,
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

/// One request: ask the broker, record metrics, queue the reply.
async fn handle(ctx: Arc<Context>, session: Arc<Session>, request: Request, reply: Reply) {
    let kind = request.body.kind();
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
    let started = Instant::now();
    let response = ctx.broker.handle_in(&session, request).await;
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
            ResponseBody::Fetch(_) => metrics.fetched(&stream, &topic, payload.len() as u64),
            _ => {}
        }
    }
    reply.send(&response);
}

/// The obligation to answer one request. Dropped unanswered — the task panicked or was
/// cancelled — it still answers, so a client never waits on a correlation id forever.
#[derive(Debug)]
struct Reply {
    tx: mpsc::UnboundedSender<Outgoing>,
    correlation_id: u64,
    kind: u16,
    permit: Option<OwnedSemaphorePermit>,
}

impl Reply {
    fn new(
        tx: mpsc::UnboundedSender<Outgoing>,
        correlation_id: u64,
        kind: u16,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        Self {
            tx,
            correlation_id,
            kind,
            permit: Some(permit),
        }
    }

    fn send(mut self, response: &Response) {
        let permit = self.permit.take();
        self.push(response, permit);
    }

    fn push(&self, response: &Response, permit: Option<OwnedSemaphorePermit>) {
        let frame = response.encode(self.correlation_id).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "a response could not be encoded");
            Response::error(self.kind, ErrorCode::Internal, e.to_string())
                .encode(self.correlation_id)
                .expect("an error frame is small")
        });
        // Fails only when the writer is gone: then nobody is listening for the answer.
        let _ = self.tx.send(Outgoing {
            frame,
            _permit: permit,
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
        self.push(&response, Some(permit));
    }
}

/// The single writer: writes responses as they come, flushing only when none is waiting,
/// so a burst of pipelined responses leaves in few system calls.
async fn write_loop(
    half: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, half);
    while let Some(next) = rx.recv().await {
        write_frame(&mut out, next).await?;
        while let Ok(next) = rx.try_recv() {
            write_frame(&mut out, next).await?;
        }
        out.flush().await?;
    }
    out.shutdown().await
}

/// Writes the two parts of a frame without joining them; `BufWriter` passes a payload at
/// least as large as its buffer straight to the socket.
async fn write_frame(
    out: &mut BufWriter<OwnedWriteHalf>,
    outgoing: Outgoing,
) -> std::io::Result<()> {
    out.write_all(&outgoing.frame.head).await?;
    if !outgoing.frame.payload.is_empty() {
        out.write_all(&outgoing.frame.payload).await?;
    }
    // The permit drops here: the response has left the queue.
    Ok(())
}

/// Reads and throws away up to `limit` bytes, until EOF.
async fn discard(half: &mut OwnedReadHalf, limit: usize) {
    let mut scratch = vec![0; 16 << 10];
    let mut seen = 0;
    while seen < limit {
        match half.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen += n,
        }
    }
}
