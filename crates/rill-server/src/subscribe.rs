//! Push streaming with credit-based flow control (docs/PROTOCOL.md §3.32–3.34).
//!
//! A `Subscribe` runs in its request's task for the subscription's whole life, holding
//! the request's in-flight slot. It is a loop of the broker's own fetches — each one
//! authorized, rate-limited and routed as a client's `Fetch` would be — whose answers are
//! pushed as `SubscribeResponse` frames with the flag `MORE`, and it pushes only while
//! the client has granted window: `pushed < granted`, in bytes and in batches. Each push
//! first takes a budget grant as large as what the read may return (as a `Fetch` does),
//! released when the frame has been written.
//!
//! `Credit` and `Unsubscribe` are answered by the connection from [`Subscriptions`], the
//! table of its open subscriptions; they never reach the broker. A subscription ends with
//! one last frame without `MORE`: a `SubscribeResponse` with `last` after an
//! `Unsubscribe` or when the client closed its side, or an error (the fetch's, or
//! `SHUTTING_DOWN`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rill_broker::Session;
use rill_proto::pb::{
    CreditRequest, CreditResponse, FetchRequest, SubscribeRequest, SubscribeResponse,
    UnsubscribeResponse,
};
use rill_proto::{ErrorCode, Kind, Request, RequestBody, Response, ResponseBody};
use tokio::sync::watch;

use crate::budget::Grant;
use crate::connection::{Context, FETCH_RESPONSE_HEAD_BYTES_MAX, Phase, Reply, batch_records};

/// How long one of the subscription's reads waits for appends before it reads again
/// (the broker caps waits at its `max_wait`, 60 s by default).
const LONG_POLL_MS: u32 = 30_000;
/// A push carries at most the `Subscribe`'s grant in bytes divided by this (its first
/// batch whole), so a window is several pushes (docs/STREAMING.md §3).
const PUSHES_PER_WINDOW: u64 = 4;
/// How long an `Unsubscribe` waits for the subscription's last frame to be queued.
const UNSUBSCRIBE_WAIT: Duration = Duration::from_secs(10);

/// What a subscription has been granted (running totals: they only grow), and whether
/// it must stop. Written by `Credit` and `Unsubscribe`, read by the subscription.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Window {
    bytes: u64,
    frames: u64,
    stop: bool,
}

impl Window {
    /// Adds a grant; `None` if either total would overflow (nothing changes then).
    fn grant(&self, bytes: u64, frames: u64) -> Option<Window> {
        Some(Window {
            bytes: self.bytes.checked_add(bytes)?,
            frames: self.frames.checked_add(frames)?,
            stop: self.stop,
        })
    }

    /// The payload bytes the next push may carry, given what was pushed (`None`: the
    /// window is full, wait for credit). A push holds whole batches: its first goes
    /// whole even when larger than this, so the pushes run at most one batch past the
    /// window (docs/PROTOCOL.md §3.32).
    fn room(&self, pushed: Pushed) -> Option<u64> {
        let bytes = self.bytes.checked_sub(pushed.bytes).filter(|&b| b > 0)?;
        (pushed.frames < self.frames).then_some(bytes)
    }
}

/// What a subscription pushed: payload bytes and frames (running totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pushed {
    bytes: u64,
    frames: u64,
}

/// One open subscription, as the connection sees it.
#[derive(Debug)]
struct Open {
    window: watch::Sender<Window>,
    /// `Some(next offset)` once the subscription has queued its last frame.
    ended: watch::Receiver<Option<u64>>,
}

/// A connection's open subscriptions, by the correlation id of their `Subscribe`.
#[derive(Debug)]
pub(crate) struct Subscriptions {
    /// A non-poisoning lock: each use is one insert, remove, lookup or drain.
    open: parking_lot::Mutex<HashMap<u64, Open>>,
    max: usize,
}

impl Subscriptions {
    /// A table that holds at most `max` subscriptions at once.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            open: parking_lot::Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    /// Registers subscription `id` with its first window; `Err` with the reason when
    /// it cannot be opened.
    fn open(
        &self,
        id: u64,
        first: Window,
    ) -> Result<(watch::Receiver<Window>, watch::Sender<Option<u64>>), String> {
        let mut open = self.open.lock();
        if open.len() >= self.max {
            return Err(format!(
                "this connection has {} subscriptions open, the most it may: end one, or \
                 read with Fetch",
                open.len()
            ));
        }
        if open.contains_key(&id) {
            return Err(format!(
                "subscription {id} is open already on this connection"
            ));
        }
        let (window, window_rx) = watch::channel(first);
        let (ended_tx, ended) = watch::channel(None);
        open.insert(id, Open { window, ended });
        Ok((window_rx, ended_tx))
    }

    fn close(&self, id: u64) {
        self.open.lock().remove(&id);
    }

    /// Adds a `Credit`'s grant to its subscription's window. A grant for a
    /// subscription that is not open (it may have ended meanwhile) is ignored.
    pub(crate) fn credit(&self, c: &CreditRequest) -> Response {
        let open = self.open.lock();
        let Some(sub) = open.get(&c.subscription) else {
            return Response::ok(ResponseBody::Credit(CreditResponse {}));
        };
        let mut overflow = false;
        sub.window
            .send_if_modified(|w| match w.grant(c.bytes, u64::from(c.frames)) {
                Some(more) => {
                    let changed = more != *w;
                    *w = more;
                    changed
                }
                None => {
                    overflow = true;
                    false
                }
            });
        if overflow {
            return Response::error(
                Kind::Credit as u16,
                ErrorCode::InvalidRequest,
                format!(
                    "the credit would overflow subscription {}'s window",
                    c.subscription
                ),
            );
        }
        Response::ok(ResponseBody::Credit(CreditResponse {}))
    }

    /// Stops subscription `id` and waits until its last frame is queued; answers with
    /// where it stopped (0 when it was not open).
    pub(crate) async fn unsubscribe(&self, id: u64) -> Response {
        let ended = {
            let open = self.open.lock();
            open.get(&id).map(|sub| {
                sub.window.send_modify(|w| w.stop = true);
                sub.ended.clone()
            })
        };
        let next_offset = match ended {
            None => 0,
            Some(mut ended) => {
                match tokio::time::timeout(UNSUBSCRIBE_WAIT, ended.wait_for(Option::is_some)).await
                {
                    Ok(Ok(next)) => next.unwrap_or(0),
                    // Its task is gone (the connection is closing) or slow to stop.
                    _ => 0,
                }
            }
        };
        Response::ok(ResponseBody::Unsubscribe(UnsubscribeResponse {
            next_offset,
        }))
    }

    /// Stops every subscription (the client closed its side: nothing more is asked, so
    /// each sends its last frame).
    pub(crate) fn stop_all(&self) {
        for sub in self.open.lock().values() {
            sub.window.send_modify(|w| w.stop = true);
        }
    }
}

/// Serves one `Subscribe` until it ends: pushes, within the window, what the broker's
/// fetches return; `grant` holds the request frame's bytes.
pub(crate) async fn serve(
    ctx: Arc<Context>,
    session: Arc<Session>,
    subs: Arc<Subscriptions>,
    mut phase: watch::Receiver<Phase>,
    request: SubscribeRequest,
    reply: Reply,
    grant: Grant,
) {
    let id = reply.correlation_id();
    let kind = Kind::Subscribe as u16;
    if request.credit_bytes == 0 || request.credit_frames == 0 {
        let refusal = Response::error(
            kind,
            ErrorCode::InvalidRequest,
            "a subscription needs a window of at least 1 byte and 1 frame",
        );
        reply.send(&refusal, grant).await;
        return;
    }
    let first = Window {
        bytes: request.credit_bytes,
        frames: u64::from(request.credit_frames),
        stop: false,
    };
    let (mut window, ended) = match subs.open(id, first) {
        Ok(opened) => opened,
        Err(reason) => {
            reply
                .send(&Response::error(kind, ErrorCode::Busy, reason), grant)
                .await;
            return;
        }
    };
    drop(grant);
    let mut sub = Subscription {
        ctx,
        session,
        request,
        next: 0,
        pushed: Pushed::default(),
    };
    sub.next = sub.request.offset;
    let last = sub.run(&reply, &mut window, &mut phase).await;
    subs.close(id);
    let next = sub.next;
    let grant = reply.budget().none();
    reply.send(&last, grant).await;
    // Queued: an Unsubscribe waiting for it may answer now.
    let _ = ended.send(Some(next));
}

/// The state of one subscription's loop.
struct Subscription {
    ctx: Arc<Context>,
    session: Arc<Session>,
    request: SubscribeRequest,
    /// Where the next read starts.
    next: u64,
    pushed: Pushed,
}

/// Why a wait ended early.
enum Interrupt {
    Stop,
    Shutdown,
}

impl Subscription {
    /// Pushes until the subscription must end; returns its last frame.
    async fn run(
        &mut self,
        reply: &Reply,
        window: &mut watch::Receiver<Window>,
        phase: &mut watch::Receiver<Phase>,
    ) -> Response {
        let max_fetch = u64::from(self.ctx.broker.config().max_fetch_bytes);
        let mut first = true;
        loop {
            // Room in the window, waiting for credit if there is none.
            let room = loop {
                let w = *window.borrow_and_update();
                if w.stop {
                    return self.last();
                }
                if let Some(room) = w.room(self.pushed) {
                    break room;
                }
                tokio::select! {
                    biased;
                    () = reached(phase) => return shutting_down(),
                    changed = window.changed() => {
                        if changed.is_err() {
                            return self.last();
                        }
                    }
                }
            };
            // A quarter of the first grant at most, so a window holds several pushes:
            // the next is read and sent while the client's credit for this one comes.
            let max_bytes = room
                .min(max_fetch)
                .min(self.request.credit_bytes / PUSHES_PER_WINDOW)
                .max(1);
            // What the read may return, granted before it reads (as for a Fetch); the
            // first batch may be larger, and the push tops the grant up then.
            let budget = reply.budget();
            let want =
                usize::try_from(max_bytes).unwrap_or(usize::MAX) + FETCH_RESPONSE_HEAD_BYTES_MAX;
            let grant = match interruptible(budget.acquire(want), window, phase).await {
                Ok(grant) => grant,
                Err(Interrupt::Stop) => return self.last(),
                Err(Interrupt::Shutdown) => return shutting_down(),
            };
            let fetch = Request::new(RequestBody::Fetch(FetchRequest {
                stream: self.request.stream.clone(),
                topic: self.request.topic.clone(),
                partition: self.request.partition,
                offset: self.next,
                max_bytes: u32::try_from(max_bytes).unwrap_or(u32::MAX),
                // The first read answers at once, so the client learns the
                // subscription is open; later ones wait for appends.
                max_wait_ms: if first { 0 } else { LONG_POLL_MS },
                min_bytes: 1,
            }));
            let answer = self.ctx.broker.handle_in(&self.session, fetch);
            let response = match interruptible(answer, window, phase).await {
                Ok(response) => response,
                Err(Interrupt::Stop) => return self.last(),
                Err(Interrupt::Shutdown) => return shutting_down(),
            };
            let (fetched, payload) = match response {
                Response::Ok {
                    body: ResponseBody::Fetch(f),
                    payload,
                } => (f, payload),
                Response::Ok { body, .. } => {
                    return Response::error(
                        Kind::Subscribe as u16,
                        ErrorCode::Internal,
                        format!("a subscription's read was answered with {:?}", body.kind()),
                    );
                }
                Response::Err { error, .. } => {
                    return Response::Err {
                        kind: Kind::Subscribe as u16,
                        error,
                    };
                }
            };
            if payload.is_empty() && !first {
                // The wait ended with nothing new: read again.
                continue;
            }
            first = false;
            let records = batch_records(&payload);
            let bytes = payload.len() as u64;
            self.ctx
                .metrics
                .fetched(&self.request.stream, &self.request.topic, records, bytes);
            self.next = fetched.next_offset.max(self.next);
            self.pushed.bytes += bytes;
            self.pushed.frames += 1;
            let push = Response::Ok {
                body: ResponseBody::Subscribe(SubscribeResponse {
                    next_offset: fetched.next_offset,
                    log_start: fetched.log_start,
                    log_end: fetched.log_end,
                    last: false,
                }),
                payload,
            };
            reply.push_more(&push, grant).await;
        }
    }

    /// The last frame of a subscription that was told to stop.
    fn last(&self) -> Response {
        Response::Ok {
            body: ResponseBody::Subscribe(SubscribeResponse {
                next_offset: self.next,
                log_start: 0,
                log_end: 0,
                last: true,
            }),
            payload: bytes::Bytes::new(),
        }
    }
}

fn shutting_down() -> Response {
    Response::error(
        Kind::Subscribe as u16,
        ErrorCode::ShuttingDown,
        "the server is shutting down: subscribe again once it is back",
    )
}

/// Runs `work` unless the subscription is told to stop or the server starts shutting
/// down first (a change of credit alone does not interrupt it).
async fn interruptible<T>(
    work: impl Future<Output = T>,
    window: &mut watch::Receiver<Window>,
    phase: &mut watch::Receiver<Phase>,
) -> Result<T, Interrupt> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            () = reached(phase) => return Err(Interrupt::Shutdown),
            changed = window.changed() => {
                if changed.is_err() || window.borrow_and_update().stop {
                    return Err(Interrupt::Stop);
                }
            }
            done = &mut work => return Ok(done),
        }
    }
}

async fn reached(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|now| *now >= Phase::Draining).await;
}

#[cfg(test)]
mod tests {
    //! The window's arithmetic against a model of the pushes: grants arrive at random,
    //! batches of random sizes are appended, and whenever the window has room a push
    //! takes whole batches as a fetch does (the first whole, then as many as fit the
    //! room, PROTOCOL.md §3.11). Whatever the order, the pushes never run more than one
    //! batch past the bytes granted nor past the frames granted, every batch is pushed
    //! once and in order, and a window with room and batches waiting always pushes.

    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Grant { bytes: u64, frames: u64 },
        Append(u64),
        Push,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..5_000u64, 0..3u64).prop_map(|(bytes, frames)| Step::Grant { bytes, frames }),
            (1..3_000u64).prop_map(Step::Append),
            Just(Step::Push),
        ]
    }

    proptest! {
        #[test]
        fn pushes_stay_within_the_window_and_lose_nothing(
            first_bytes in 1..5_000u64,
            first_frames in 1..4u64,
            steps in prop::collection::vec(step(), 0..200),
        ) {
            let mut window = Window { bytes: first_bytes, frames: first_frames, stop: false };
            let mut pushed = Pushed::default();
            let mut waiting: std::collections::VecDeque<(usize, u64)> = Default::default();
            let (mut appended, mut delivered, mut largest) = (0usize, Vec::new(), 0u64);
            for s in steps {
                match s {
                    Step::Grant { bytes, frames } => {
                        window = window.grant(bytes, frames).expect("small grants never overflow");
                    }
                    Step::Append(size) => {
                        waiting.push_back((appended, size));
                        appended += 1;
                        largest = largest.max(size);
                    }
                    Step::Push => {
                        let Some(room) = window.room(pushed) else {
                            continue;
                        };
                        prop_assert!(room > 0);
                        let Some(&(_, size)) = waiting.front() else {
                            continue;
                        };
                        // The first batch whole, then whole batches within the room.
                        let mut bytes = size;
                        delivered.push(waiting.pop_front().unwrap().0);
                        while let Some(&(n, size)) = waiting.front() {
                            if bytes + size > room {
                                break;
                            }
                            bytes += size;
                            delivered.push(n);
                            waiting.pop_front();
                        }
                        pushed.bytes += bytes;
                        pushed.frames += 1;
                    }
                }
                prop_assert!(pushed.bytes <= window.bytes + largest, "{pushed:?} {window:?}");
                prop_assert!(pushed.frames <= window.frames, "{pushed:?} {window:?}");
            }
            prop_assert!(delivered.iter().copied().eq(0..delivered.len()), "in order, once");
            // With room left, nothing waits: pushes continue until the window is full.
            if window.room(pushed).is_some() {
                prop_assert!(window.bytes > pushed.bytes && window.frames > pushed.frames);
            }
        }
    }

    #[test]
    fn a_grant_that_would_overflow_changes_nothing() {
        let w = Window {
            bytes: u64::MAX - 1,
            frames: 1,
            stop: false,
        };
        assert_eq!(w.grant(2, 0), None);
        assert_eq!(w.grant(0, u64::MAX), None);
        assert_eq!(
            w.grant(1, 1).map(|w| (w.bytes, w.frames)),
            Some((u64::MAX, 2))
        );
        let full = Window {
            bytes: 10,
            frames: 2,
            stop: false,
        };
        assert_eq!(
            full.room(Pushed {
                bytes: 10,
                frames: 0
            }),
            None
        );
        assert_eq!(
            full.room(Pushed {
                bytes: 14,
                frames: 1
            }),
            None,
            "one batch past it"
        );
        assert_eq!(
            full.room(Pushed {
                bytes: 3,
                frames: 2
            }),
            None
        );
        assert_eq!(
            full.room(Pushed {
                bytes: 3,
                frames: 1
            }),
            Some(7)
        );
    }
}
