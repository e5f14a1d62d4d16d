//! The records of one partition that direct-mode `send` calls handed over and no batch
//! has taken yet, as a pure state machine (no I/O, no locks, time passed in): which
//! batch a record joins, when a batch is ready to go, and when a sender must wait for
//! room. `direct.rs` runs it.
//!
//! Batches queue in the order they opened; only the last may take records. A record
//! joins the last batch if it fits (`batch_length` records, `max_batch_bytes` bytes; a
//! record alone is always let in), else that batch closes and a new one opens behind
//! it — unless `queued_max` batches wait already: then the sender waits for room, so a
//! lane never holds more than `queued_max` batches. The front batch is ready once it is
//! closed (full, or flushed) or its first record has waited `linger`; with a linger of
//! 0 it is ready at once, and what coalesces is what joined while the lane had no free
//! in-flight slot.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::{ClientError, Message, Position};

/// Where one caller's answer goes: its record's position, or its batch's error.
pub(super) type Answer = oneshot::Sender<Result<Position, ClientError>>;

/// A batch being filled or waiting for an in-flight slot.
#[derive(Debug)]
pub(super) struct Pending {
    /// Batches of a lane are numbered in the order they open.
    pub(super) id: u64,
    /// The records, in the order they joined.
    pub(super) messages: Vec<Message>,
    /// One answer per record, at the same index (pushed together, so they stay aligned).
    pub(super) answers: Vec<Answer>,
    bytes: usize,
    opened: Instant,
    closed: bool,
}

/// The outcome of [`Accumulator::join`].
#[derive(Debug)]
pub(super) enum Join {
    /// The record is in a batch; its answer arrives on `answer`.
    Joined {
        answer: oneshot::Receiver<Result<Position, ClientError>>,
        /// A batch closed (the record filled it, or did not fit in it): the driver
        /// should look again, and a balanced producer moves on to another partition.
        closed: bool,
        /// No driver runs for the lane: the caller starts one.
        start_driver: bool,
    },
    /// `queued_max` batches wait and the last is full: wait for the driver to take one,
    /// then try again with the record handed back.
    NoRoom(Message),
}

/// What the driver does next, from [`Accumulator::poll_ready`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ready {
    /// Nothing waits: the driver ends (and is marked as not running).
    Empty,
    /// Nothing is ready before this instant (unless a batch closes first).
    Wait(Instant),
    /// The front batch may go as soon as it has an in-flight slot.
    Go,
}

/// The unsent batches of one partition.
#[derive(Debug)]
pub(super) struct Accumulator {
    batches: VecDeque<Pending>,
    batch_length: usize,
    max_batch_bytes: usize,
    linger: Duration,
    queued_max: usize,
    /// A driver task runs for this lane. Set when a record joins an idle lane, cleared
    /// by the driver when it finds the lane empty (under the same lock), so a lane
    /// with batches always has a driver.
    driving: bool,
    /// The id of the next batch to open.
    next_id: u64,
    /// Batches taken by the driver whose answers have not been given yet (their sends
    /// run concurrently and end in any order).
    sending: BTreeSet<u64>,
}

impl Accumulator {
    pub(super) fn new(
        batch_length: usize,
        max_batch_bytes: usize,
        linger: Duration,
        queued_max: usize,
    ) -> Self {
        assert!(
            batch_length > 0 && queued_max > 0,
            "validated by the builder"
        );
        Self {
            batches: VecDeque::new(),
            batch_length,
            max_batch_bytes,
            linger,
            queued_max,
            driving: false,
            next_id: 0,
            sending: BTreeSet::new(),
        }
    }

    /// Adds `message` to the lane's last batch, or to a new one behind it.
    pub(super) fn join(&mut self, message: Message, now: Instant) -> Join {
        let len = message.approx_len();
        let mut closed = false;
        let (batch_length, max_batch_bytes) = (self.batch_length, self.max_batch_bytes);
        let fits = match self.batches.back_mut() {
            Some(last)
                if !last.closed
                    && last.messages.len() < batch_length
                    && last.bytes + len <= max_batch_bytes =>
            {
                true
            }
            Some(last) => {
                closed = !last.closed;
                last.closed = true;
                false
            }
            None => false,
        };
        if !fits {
            if self.batches.len() >= self.queued_max {
                return Join::NoRoom(message);
            }
            self.batches.push_back(Pending {
                id: self.next_id,
                messages: Vec::new(),
                answers: Vec::new(),
                bytes: 0,
                opened: now,
                closed: false,
            });
            self.next_id += 1;
        }
        let (tx, answer) = oneshot::channel();
        let last = self
            .batches
            .back_mut()
            .expect("a batch was just found or opened");
        last.messages.push(message);
        last.answers.push(tx);
        last.bytes += len;
        if last.messages.len() >= batch_length || last.bytes >= max_batch_bytes {
            last.closed = true;
            closed = true;
        }
        let start_driver = !self.driving;
        self.driving = true;
        Join::Joined {
            answer,
            closed,
            start_driver,
        }
    }

    /// Whether the front batch may go now. An empty lane ends the driver.
    pub(super) fn poll_ready(&mut self, now: Instant) -> Ready {
        match self.batches.front() {
            None => {
                self.driving = false;
                Ready::Empty
            }
            Some(front) if front.closed || now >= front.opened + self.linger => Ready::Go,
            Some(front) => Ready::Wait(front.opened + self.linger),
        }
    }

    /// Takes the front batch for sending (it stops taking records); `None` if the lane
    /// is empty. Its answers are owed until [`Accumulator::answered`].
    pub(super) fn take(&mut self) -> Option<Pending> {
        let batch = self.batches.pop_front()?;
        self.sending.insert(batch.id);
        Some(batch)
    }

    /// The answers of taken batch `id` were given.
    pub(super) fn answered(&mut self, id: u64) {
        let owed = self.sending.remove(&id);
        assert!(owed, "answered batch {id}, which was not taken");
    }

    /// Closes every batch (a flush): each is ready at once. Returns the last batch
    /// opened so far, which [`Accumulator::done_through`] waits for; later batches do
    /// not hold up the flush.
    pub(super) fn close_all(&mut self) -> Option<u64> {
        for b in &mut self.batches {
            b.closed = true;
        }
        self.next_id.checked_sub(1)
    }

    /// Every batch up to `id` has been answered.
    pub(super) fn done_through(&self, id: u64) -> bool {
        let waiting = self.batches.front().is_some_and(|b| b.id <= id);
        let sending = self.sending.first().is_some_and(|&s| s <= id);
        !waiting && !sending
    }

    /// The driver ended without emptying the lane (it panicked): the next record to
    /// join starts another.
    pub(super) fn driver_lost(&mut self) {
        self.driving = false;
    }

    #[cfg(test)]
    fn lengths(&self) -> Vec<usize> {
        self.batches.iter().map(|b| b.messages.len()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(j: Join) -> (bool, bool) {
        match j {
            Join::Joined {
                closed,
                start_driver,
                ..
            } => (closed, start_driver),
            Join::NoRoom(_) => panic!("no room"),
        }
    }

    fn msg(bytes: usize) -> Message {
        // `approx_len` counts 16 bytes of overhead per record.
        Message::new(vec![b'x'; bytes - 16])
    }

    #[test]
    fn records_coalesce_up_to_the_batch_length_then_a_new_batch_opens() {
        let now = Instant::now();
        let mut a = Accumulator::new(3, 1 << 20, Duration::ZERO, 2);
        assert_eq!(joined(a.join(msg(100), now)), (false, true));
        assert_eq!(joined(a.join(msg(100), now)), (false, false));
        assert_eq!(joined(a.join(msg(100), now)), (true, false), "full");
        assert_eq!(joined(a.join(msg(100), now)), (false, false));
        assert_eq!(a.lengths(), vec![3, 1]);
    }

    #[test]
    fn a_record_that_does_not_fit_the_bytes_closes_the_batch() {
        let now = Instant::now();
        let mut a = Accumulator::new(100, 1000, Duration::ZERO, 3);
        joined(a.join(msg(600), now));
        assert_eq!(joined(a.join(msg(600), now)), (true, false));
        // A record over the limit alone is let in, and fills its batch.
        assert_eq!(joined(a.join(msg(5000), now)), (true, false));
        assert_eq!(a.lengths(), vec![1, 1, 1]);
    }

    #[test]
    fn a_sender_waits_for_room_once_queued_max_batches_wait() {
        let now = Instant::now();
        let mut a = Accumulator::new(1, 1 << 20, Duration::ZERO, 2);
        joined(a.join(msg(100), now));
        joined(a.join(msg(100), now));
        assert!(matches!(a.join(msg(100), now), Join::NoRoom(_)));
        assert_eq!(a.poll_ready(now), Ready::Go);
        let taken = a.take().unwrap();
        assert_eq!(taken.messages.len(), taken.answers.len());
        joined(a.join(msg(100), now));
        assert_eq!(a.lengths(), vec![1, 1]);
    }

    #[test]
    fn the_front_batch_is_ready_when_it_lingered_or_closed() {
        let t0 = Instant::now();
        let linger = Duration::from_millis(20);
        let mut a = Accumulator::new(2, 1 << 20, linger, 2);
        assert_eq!(a.poll_ready(t0), Ready::Empty);
        joined(a.join(msg(100), t0));
        assert_eq!(a.poll_ready(t0), Ready::Wait(t0 + linger));
        assert_eq!(a.poll_ready(t0 + linger), Ready::Go);
        joined(a.join(msg(100), t0));
        assert_eq!(a.poll_ready(t0), Ready::Go, "full");
        a.take();
        joined(a.join(msg(100), t0 + linger));
        a.close_all();
        assert_eq!(a.poll_ready(t0), Ready::Go, "flushed");
    }

    #[test]
    fn a_flush_waits_for_the_batches_opened_before_it_in_whatever_order_they_end() {
        let now = Instant::now();
        let mut a = Accumulator::new(1, 1 << 20, Duration::ZERO, 3);
        assert_eq!(a.close_all(), None, "nothing to wait for");
        for _ in 0..2 {
            joined(a.join(msg(100), now));
        }
        let upto = a.close_all().unwrap();
        // A batch opened after the flush does not hold it up.
        joined(a.join(msg(100), now));
        assert!(!a.done_through(upto));
        let first = a.take().unwrap();
        let second = a.take().unwrap();
        assert!(!a.done_through(upto), "sending");
        a.answered(second.id);
        assert!(!a.done_through(upto), "the first is still sending");
        a.answered(first.id);
        assert!(a.done_through(upto));
        let third = a.take().unwrap();
        a.answered(third.id);
        // The driver found it empty: the next record starts another.
        assert_eq!(a.poll_ready(now), Ready::Empty);
        assert_eq!(
            joined(a.join(msg(100), now)),
            (true, true),
            "full, and a driver"
        );
    }
}
