//! Direct-mode `send`: concurrent sends to a partition coalesce into batches.
//!
//! A `send` puts its record into the lane's [`Accumulator`] and awaits an answer. One
//! driver task per busy lane takes the front batch once it is ready and the lane has a
//! free in-flight slot, numbers it (under the lane's order lock, as every batch is, so
//! sequences and slots stay in order) and spawns its send; the send task answers every
//! caller in the batch. The driver ends when the lane is empty; the next record starts
//! another. Callers therefore never drive a send themselves: one dropping its future
//! cannot cancel a batch others wait on, and a batch, once numbered, always runs to
//! its end (an unacknowledged end ends its epoch, see `sequence.rs`).
//!
//! Bounds: a lane holds at most `per_partition + 1` unsent batches (senders beyond
//! wait for room), each within `batch_length` and `max_batch_bytes`; in flight, the
//! lane's slots and the producer's `max_in_flight`.

use std::pin::pin;
use std::sync::Arc;

use super::accumulator::{Join, Pending, Ready};
use super::{Admitted, Core, Lane};
use crate::{ClientError, Message, Position, Routing};

impl Core {
    /// Sends one message through its partition's accumulator and waits for its answer.
    pub(super) async fn send_one(
        self: &Arc<Self>,
        message: Message,
        routing: &Routing,
    ) -> Result<Position, ClientError> {
        let partition = match (&message.key, routing) {
            (None, Routing::Balanced) => {
                let shape = self
                    .topic
                    .client
                    .shape(&self.topic.stream, &self.topic.name)
                    .await?;
                *self
                    .sticky
                    .lock()
                    .get_or_insert_with(|| self.topic.balanced_in(&shape))
            }
            (_, Routing::Partition(p)) if self.elastic => {
                // A range the caller named is not routed again if it is sealed (its
                // refusal is the caller's), so it does not share batches with records
                // that are.
                let mut placed = self.send_partition(*p, vec![message], false, 0).await?;
                return placed
                    .pop()
                    .ok_or_else(|| ClientError::Protocol("a produce answered no position".into()));
            }
            _ => self.route(&message, routing).await?,
        };
        let lane = self.lane(partition);
        let mut message = message;
        let answer = loop {
            // Registered before looking, so a batch taken in between is not missed.
            let mut room = pin!(lane.room.notified());
            room.as_mut().enable();
            let joined = lane
                .accumulator
                .lock()
                .join(message, tokio::time::Instant::now());
            match joined {
                Join::Joined {
                    answer,
                    closed,
                    start_driver,
                } => {
                    if closed {
                        lane.ready.notify_one();
                        self.unstick(partition);
                    }
                    if start_driver {
                        tokio::spawn(drive(Arc::clone(self), Arc::clone(&lane)));
                    }
                    break answer;
                }
                Join::NoRoom(m) => {
                    message = m;
                    lane.ready.notify_one();
                    room.await;
                }
            }
        };
        // The send task answers every record it took; a dropped answer means it ended
        // without one (a panic, or the runtime shutting down) after it may have sent.
        answer.await.unwrap_or_else(|_| {
            Err(ClientError::Indeterminate(
                "the producer's send task ended without an answer".into(),
            ))
        })
    }

    /// Balanced sends move on from `partition` (its batch closed or was taken).
    fn unstick(&self, partition: u32) {
        let mut sticky = self.sticky.lock();
        if *sticky == Some(partition) {
            *sticky = None;
        }
    }

    /// Sends every batch of every lane at once and waits until they are answered.
    /// Batches opened after the call do not hold it up.
    pub(super) async fn flush(&self) {
        let lanes: Vec<Arc<Lane>> = self.lanes.lock().values().cloned().collect();
        let marks: Vec<(Arc<Lane>, Option<u64>)> = lanes
            .into_iter()
            .map(|lane| {
                let upto = lane.accumulator.lock().close_all();
                lane.ready.notify_one();
                (lane, upto)
            })
            .collect();
        for (lane, upto) in marks {
            let Some(upto) = upto else { continue };
            loop {
                let mut answered = pin!(lane.answered.notified());
                answered.as_mut().enable();
                if lane.accumulator.lock().done_through(upto) {
                    break;
                }
                answered.await;
            }
        }
    }
}

/// Clears the lane's driver mark if the driver panics, so a later record starts
/// another instead of waiting for a driver that is gone.
struct Driving(Arc<Lane>);

impl Drop for Driving {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.accumulator.lock().driver_lost();
        }
    }
}

/// A lane's driver: takes ready batches in order, admits and numbers them, and spawns
/// their sends, until the lane is empty.
async fn drive(core: Arc<Core>, lane: Arc<Lane>) {
    let _driving = Driving(Arc::clone(&lane));
    loop {
        loop {
            let mut ready = pin!(lane.ready.notified());
            ready.as_mut().enable();
            let now = tokio::time::Instant::now();
            let state = lane.accumulator.lock().poll_ready(now);
            match state {
                Ready::Empty => return,
                Ready::Go => break,
                Ready::Wait(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = ready => {}
                    }
                }
            }
        }
        let order = lane.order.lock().await;
        let slots = core.slots(&lane).await;
        // Taken only now, with slots: what joined while the lane waited goes with it.
        let batch = lane
            .accumulator
            .lock()
            .take()
            .expect("only the driver takes batches, and the lane was not empty");
        let owed = Owed(Arc::clone(&lane), batch.id);
        lane.room.notify_waiters();
        core.unstick(lane.partition);
        let admitted = slots.and_then(|(slot, permit)| {
            Ok(Admitted {
                registered: Core::register(&lane, batch.messages.len())?,
                _slot: slot,
                _permit: permit,
            })
        });
        drop(order);
        match admitted {
            Ok(admitted) => {
                let (core, lane) = (Arc::clone(&core), Arc::clone(&lane));
                tokio::spawn(async move {
                    let result = core
                        .transmit(lane.partition, &lane, admitted, &batch.messages)
                        .await;
                    match result {
                        Err(e) if core.resealed(&e) => {
                            // A sealed range refused the batch (an elastic topic's):
                            // it is certainly not stored; its records go to the ranges
                            // now covering them, in order.
                            let moved = core.reroute(batch.messages.clone(), 0).await;
                            answer_each(batch, moved);
                        }
                        result => answer(lane.partition, batch, result),
                    }
                    drop(owed);
                });
            }
            Err(e) => answer(lane.partition, batch, Err(e)),
        }
    }
}

/// A taken batch whose answers are owed: dropped once they are given (or their send
/// task ended without them, by a panic), so a flush never waits for it forever.
struct Owed(Arc<Lane>, u64);

impl Drop for Owed {
    fn drop(&mut self) {
        self.0.accumulator.lock().answered(self.1);
        self.0.answered.notify_waiters();
    }
}

/// Gives every caller of a taken batch its answer.
fn answer(partition: u32, batch: Pending, result: Result<u64, ClientError>) {
    match result {
        Ok(base) => {
            for (i, tx) in batch.answers.into_iter().enumerate() {
                let offset = base + i as u64;
                // A caller that dropped its future no longer wants the answer.
                let _ = tx.send(Ok(Position { partition, offset }));
            }
        }
        Err(e) => {
            let mut answers = batch.answers.into_iter().peekable();
            while let Some(tx) = answers.next() {
                let e = match answers.peek() {
                    Some(_) => duplicate(&e),
                    None => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                };
                let _ = tx.send(Err(e));
            }
        }
    }
}

/// Gives every caller of a batch whose records were routed again its own position.
fn answer_each(batch: Pending, result: Result<Vec<Position>, ClientError>) {
    match result {
        Ok(positions) => {
            for (tx, position) in batch.answers.into_iter().zip(positions) {
                let _ = tx.send(Ok(position));
            }
        }
        Err(e) => {
            for tx in batch.answers {
                let _ = tx.send(Err(duplicate(&e)));
            }
        }
    }
}

/// The same error again, for another caller of a failed batch. Exhaustive on purpose:
/// a new variant is considered here.
fn duplicate(e: &ClientError) -> ClientError {
    use ClientError as E;
    match e {
        E::Server {
            code,
            message,
            offset,
        } => E::Server {
            code: *code,
            message: message.clone(),
            offset: *offset,
        },
        E::Connection { addr, reason } => E::Connection {
            addr: addr.clone(),
            reason: reason.clone(),
        },
        E::Indeterminate(m) => E::Indeterminate(m.clone()),
        E::Protocol(m) => E::Protocol(m.clone()),
        E::InvalidUrl { url, reason } => E::InvalidUrl {
            url: url.clone(),
            reason,
        },
        E::InvalidArgument(m) => E::InvalidArgument(m.clone()),
        E::Encode(m) => E::Encode(m.clone()),
        E::Decode {
            partition,
            offset,
            reason,
        } => E::Decode {
            partition: *partition,
            offset: *offset,
            reason: reason.clone(),
        },
        E::InvalidBatch(f) => E::InvalidBatch(f.clone()),
        E::DataLoss {
            partition,
            from,
            to,
            reason,
        } => E::DataLoss {
            partition: *partition,
            from: *from,
            to: *to,
            reason: reason.clone(),
        },
        E::Corrupt {
            partition,
            from,
            to,
            reason,
        } => E::Corrupt {
            partition: *partition,
            from: *from,
            to: *to,
            reason: reason.clone(),
        },
        E::Timeout(d) => E::Timeout(*d),
        // Only opening an embedded broker fails this way, never a send; the broker's
        // error is not clonable, so its text stands in.
        #[cfg(feature = "embedded")]
        E::Embedded(b) => E::Protocol(format!("embedded broker: {b}")),
        E::Shutdown => E::Shutdown,
        E::Closed => E::Closed,
        E::Poisoned { what } => E::Poisoned { what },
        E::BufferFull => E::BufferFull,
        E::EpochsExhausted { partition } => E::EpochsExhausted {
            partition: *partition,
        },
        E::Background(m) => E::Background(m.clone()),
    }
}
