//! Push streaming of one partition (docs/PROTOCOL.md §3.32–3.34): the server pushes
//! batches as they are appended, never more than the window this side has granted, and
//! [`Subscription::next`] grants the window back as it hands the records out. So a
//! reader that stops asking stops the stream, and what is buffered on either side is
//! bounded by the window (plus one batch).
//!
//! The subscription keeps its own position (`next`, the offset after the last record
//! handed out) and never trusts the stream for it: a broken connection, a server
//! restart or a stream the server ended is subscribed again from `next`, and records
//! below it that come again are skipped. So nothing is lost or handed out twice.

use std::collections::VecDeque;

use bytes::Bytes;
use rill_proto::pb::{self, CreditRequest, SubscribeRequest, UnsubscribeRequest};
use rill_proto::{Request, RequestBody, Response, ResponseBody};

use crate::client::unexpected;
use crate::transport::{CallError, PushStream};
use crate::{ClientError, ErrorCode, Fetched, Position, Topic};

/// Frames a window holds at most: the bound of the frames buffered for a stream.
const WINDOW_FRAMES: u32 = 1024;

/// A push subscription of one partition; see [`Topic::subscribe`].
#[derive(Debug)]
pub struct Subscription {
    topic: Topic,
    partition: u32,
    /// The offset after the last record handed out: where a new stream starts.
    next: u64,
    window_bytes: u64,
    stream: Option<PushStream>,
    /// A frame taken off the stream and not yet handed out (the first, read while
    /// opening).
    held: Option<Result<Response, CallError>>,
    /// Pushed bytes and frames handed out since the last `Credit`.
    owed_bytes: u64,
    owed_frames: u64,
}

impl Topic {
    /// Opens a push subscription of `from.partition` at `from.offset`: the server
    /// sends what is there and then each batch as it is appended, at most
    /// `window_bytes` of batches (plus one batch) ahead of what [`Subscription::next`]
    /// has handed out. `None` where the server or the transport does not serve push
    /// streaming (the embedded transport, an older server, or a cluster node that does
    /// not lead the partition), or where the connection holds as many subscriptions as
    /// the server allows one (`BUSY`): read with [`Topic::fetch`] then.
    pub async fn subscribe(
        &self,
        from: Position,
        window_bytes: u32,
    ) -> Result<Option<Subscription>, ClientError> {
        if window_bytes == 0 {
            return Err(ClientError::InvalidArgument(
                "a subscription's window must be at least 1 byte".into(),
            ));
        }
        let mut sub = Subscription {
            topic: self.clone(),
            partition: from.partition,
            next: from.offset,
            window_bytes: u64::from(window_bytes),
            stream: None,
            held: None,
            owed_bytes: 0,
            owed_frames: 0,
        };
        match sub.open().await? {
            Opened::Yes => Ok(Some(sub)),
            Opened::Unserved => Ok(None),
        }
    }
}

/// What an attempt to open a stream came to.
enum Opened {
    Yes,
    /// The server or the transport does not serve it here.
    Unserved,
}

impl Subscription {
    /// The partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The offset after the last record handed out.
    pub fn next_offset(&self) -> u64 {
        self.next
    }

    /// Continues at `offset` (after a [`ClientError::DataLoss`] or an offset before the
    /// log start, say): the stream is opened again from there.
    pub fn seek(&mut self, offset: u64) {
        self.next = offset;
        self.drop_stream();
    }

    /// The next pushed records, waiting for appends as a long poll does. Transient
    /// failures (a lost connection, a server shutting down) are subscribed again
    /// within the client's retry budget; other errors are returned as a fetch returns
    /// them ([`ClientError::DataLoss`] names the range: [`Subscription::seek`] past it).
    pub async fn next(&mut self) -> Result<Fetched, ClientError> {
        let policy = self.topic.client.retry_policy();
        let (mut attempt, mut backoff) = (0, policy.backoff);
        loop {
            let frame = match self.held.take() {
                Some(frame) => frame,
                None => match &mut self.stream {
                    Some(stream) => match stream.frames.recv().await {
                        Some(frame) => frame,
                        None => Err(CallError::Lost("the subscription's stream ended".into())),
                    },
                    None => match self.open().await {
                        Ok(Opened::Yes) => continue,
                        Ok(Opened::Unserved) => {
                            // Moved to another node, or a server without push streaming
                            // took over the address: the caller reads by fetching.
                            return Err(ClientError::Server {
                                code: ErrorCode::NotLeader,
                                message: "this node no longer serves the subscription: \
                                          read with fetch, which follows the leader"
                                    .into(),
                                offset: None,
                            });
                        }
                        Err(e) if e.is_transient() && attempt < policy.retries => {
                            attempt += 1;
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(policy.backoff_max);
                            continue;
                        }
                        Err(e) => return Err(e),
                    },
                },
            };
            match self.take(frame) {
                Ok(Some(fetched)) => return Ok(fetched),
                Ok(None) => {}
                Err(e) if e.is_transient() && attempt < policy.retries => {
                    self.drop_stream();
                    attempt += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(policy.backoff_max);
                }
                Err(e) => {
                    self.drop_stream();
                    return Err(e);
                }
            }
        }
    }

    /// Ends the subscription on the server, waiting for its answer, and returns where
    /// it stopped (the offset after the last record handed out).
    pub async fn close(mut self) -> Result<u64, ClientError> {
        if let Some(mut stream) = self.stream.take() {
            stream.link.forget(stream.id);
            let request = Request::new(RequestBody::Unsubscribe(UnsubscribeRequest {
                subscription: stream.id,
            }));
            // The stream's last frames are dropped with it; a broken connection ended
            // the subscription already.
            let _ = stream.link.request(request).await;
            stream.id = 0; // ended: its drop sends nothing more
        }
        Ok(self.next)
    }

    /// Sends `Subscribe` from `next` and waits for the first frame, which says whether
    /// the subscription is open.
    async fn open(&mut self) -> Result<Opened, ClientError> {
        self.drop_stream();
        let request = Request::new(RequestBody::Subscribe(SubscribeRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            partition: self.partition,
            offset: self.next,
            credit_bytes: self.window_bytes,
            credit_frames: WINDOW_FRAMES,
        }));
        // The window's frames, and the last frame (which the window does not count).
        let capacity = WINDOW_FRAMES as usize + 1;
        let Some(mut stream) = self.topic.client.open_stream(request, capacity).await? else {
            return Ok(Opened::Unserved);
        };
        let first = stream.frames.recv().await;
        self.owed_bytes = 0;
        self.owed_frames = 0;
        match first {
            // A node that does not lead the partition, a server that does not know the
            // kind after all, or a connection with as many subscriptions open as it may
            // hold (`BUSY`: a member of many partitions on one connection): read by
            // fetching.
            Some(Ok(Response::Err { error, .. }))
                if matches!(
                    ErrorCode::from_wire(error.code),
                    ErrorCode::NotLeader | ErrorCode::UnknownKind | ErrorCode::Busy
                ) =>
            {
                // Ended by that error: nothing to unsubscribe.
                stream.link.forget(stream.id);
                stream.id = 0;
                Ok(Opened::Unserved)
            }
            Some(frame) => {
                self.held = Some(frame);
                self.stream = Some(stream);
                Ok(Opened::Yes)
            }
            None => Err(ClientError::Connection {
                addr: self.topic.client.peer(),
                reason: "the connection closed before the subscription opened".into(),
            }),
        }
    }

    /// Hands out one frame: `Ok(None)` when it holds nothing new (the stream goes on,
    /// or it ended and is to be opened again). No await: `next` stays cancel-safe (a
    /// frame taken off the stream is always handed out).
    fn take(&mut self, frame: Result<Response, CallError>) -> Result<Option<Fetched>, ClientError> {
        let (r, payload) = match frame {
            Ok(Response::Ok {
                body: ResponseBody::Subscribe(r),
                payload,
            }) => (r, payload),
            Ok(Response::Ok { body, .. }) => return Err(unexpected(&body)),
            Ok(Response::Err { error, .. }) => {
                // The stream ended; its error is what a fetch from `next` would get.
                self.drop_stream();
                return Err(ClientError::from_response(error, &self.as_fetch()));
            }
            Err(CallError::NotSent(reason) | CallError::Lost(reason)) => {
                self.drop_stream();
                return Err(ClientError::Connection {
                    addr: self.topic.client.peer(),
                    reason,
                });
            }
            Err(CallError::Protocol(reason)) => return Err(ClientError::Protocol(reason)),
        };
        if r.last {
            // Ended by the server without a reason to give (it saw this side close):
            // opened again by the caller's next `next`.
            self.drop_stream();
            return Ok(None);
        }
        self.owe(&payload);
        let mut records = VecDeque::new();
        let next = match crate::message::decode_records(
            self.partition,
            &payload,
            self.next,
            &mut records,
        )? {
            None => r.next_offset.max(self.next),
            Some(corrupt) if records.is_empty() => {
                // Reported once; the stream goes on past it only after a seek.
                self.drop_stream();
                return Err(ClientError::Corrupt {
                    partition: self.partition,
                    from: corrupt.from,
                    to: corrupt.to,
                    reason: corrupt.reason,
                });
            }
            Some(corrupt) => {
                // The records before it now; the next stream starts at it and reports it.
                self.drop_stream();
                corrupt.from
            }
        };
        self.next = next;
        if records.is_empty() {
            return Ok(None);
        }
        Ok(Some(Fetched {
            records: records.into(),
            next_offset: self.next,
            log_start: r.log_start,
            log_end: r.log_end,
        }))
    }

    /// Counts a frame's payload as handed out, and grants it back once half the window
    /// is owed (so the server never waits while the other half is on its way). The
    /// `Credit` goes in a task of its own, so no caller's cancellation can lose it.
    fn owe(&mut self, payload: &Bytes) {
        self.owed_bytes += payload.len() as u64;
        self.owed_frames += 1;
        let Some(stream) = &self.stream else {
            return;
        };
        if self.owed_bytes * 2 < self.window_bytes
            && self.owed_frames * 2 < u64::from(WINDOW_FRAMES)
        {
            return;
        }
        let request = Request::new(RequestBody::Credit(CreditRequest {
            subscription: stream.id,
            bytes: self.owed_bytes,
            frames: u32::try_from(self.owed_frames).unwrap_or(u32::MAX),
        }));
        self.owed_bytes = 0;
        self.owed_frames = 0;
        let link = std::sync::Arc::clone(&stream.link);
        // A lost connection shows in the stream as well, which is where it is handled.
        tokio::spawn(async move {
            let _ = link.request(request).await;
        });
    }

    /// The fetch a stream's error stands for (how errors name ranges).
    fn as_fetch(&self) -> RequestBody {
        RequestBody::Fetch(pb::FetchRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            partition: self.partition,
            offset: self.next,
            max_bytes: 0,
            max_wait_ms: 0,
            min_bytes: 0,
        })
    }

    /// Stops listening to the current stream (its drop ends it on the server).
    fn drop_stream(&mut self) {
        self.held = None;
        self.stream = None;
    }
}

/// One read of a partition by push, for the readers that long-poll otherwise (named
/// consumers, group members): opens `sub` at `from` if there is none, follows `from`
/// if the reader moved (a loss skipped, records deleted), and waits up to `max_wait`
/// for records — an empty answer then, as a long poll's. `None` when the partition is
/// not served by push here (the embedded transport, a server without it, a node that
/// does not lead it): `sub` is cleared and the caller reads by fetching, which follows
/// leaders. A `max_wait` of 0 asks for answers that do not wait: also `None`.
pub(crate) async fn read_pushed(
    topic: &Topic,
    sub: &mut Option<Subscription>,
    from: Position,
    window_bytes: u32,
    max_wait: std::time::Duration,
) -> Option<Result<Fetched, ClientError>> {
    if max_wait.is_zero() {
        *sub = None;
        return None;
    }
    let stream = match sub {
        Some(stream) if stream.partition == from.partition => stream,
        _ => match topic.subscribe(from, window_bytes.max(1)).await {
            Ok(Some(opened)) => sub.insert(opened),
            Ok(None) => {
                *sub = None;
                return None;
            }
            Err(e) => return Some(Err(e)),
        },
    };
    if stream.next_offset() != from.offset {
        stream.seek(from.offset);
    }
    match tokio::time::timeout(max_wait, stream.next()).await {
        // Nothing within `max_wait`; the stream stays open (`next` is cancel-safe).
        Err(_) => Some(Ok(Fetched {
            records: Vec::new(),
            next_offset: from.offset,
            log_start: 0,
            log_end: 0,
        })),
        Ok(Err(e)) if e.code() == Some(ErrorCode::NotLeader) => {
            *sub = None;
            None
        }
        Ok(answer) => Some(answer),
    }
}
