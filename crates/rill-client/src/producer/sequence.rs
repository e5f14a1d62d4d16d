//! Idempotent sequencing of one partition, as a pure state machine (no I/O, no
//! locks): which epoch and sequence each batch is sent under, and what to do when the
//! broker refuses one because it forgot the producer.
//!
//! Every batch is numbered in the order sends start: `(epoch, base_sequence)`, the
//! sequence growing by the batch's record count. A batch in flight stays registered
//! until its send ends. When an epoch must end — a send gave up with an unknown
//! outcome, or the broker forgot the producer (`UNKNOWN_PRODUCER_ID`) — the next
//! epoch starts at sequence 0 and every batch in flight that is *certainly not stored*
//! is renumbered into it, in the original order, so that resending them keeps the
//! partition's order and leaves no gap. A batch that may be stored (an attempt was lost
//! with the connection, or answered `SHUTTING_DOWN`) keeps its identity: resending it
//! under another one could store it twice.

use std::collections::BTreeMap;

use crate::ErrorCode;
use rill_format::ProducerInfo;

/// A registered batch.
pub(crate) type Ticket = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Batch {
    epoch: u16,
    base_sequence: u32,
    count: u32,
    /// An attempt may have been stored: its identity must not change.
    maybe_stored: bool,
}

/// What to do after the broker refused a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Nothing of it is stored and it has a new identity: send it again as that.
    Resend(ProducerInfo),
    /// The broker forgot the producer, but an earlier attempt may be stored: the
    /// outcome is unknown, and the batch must not be sent again.
    Unknown,
    /// Any other refusal: the send fails with it.
    Fail,
}

/// The sequencing state of one producer in one partition.
#[derive(Debug)]
pub(crate) struct Sequencer {
    producer_id: u64,
    epoch: u16,
    next_sequence: u32,
    next_ticket: Ticket,
    /// Batches in flight, in the order they were numbered.
    in_flight: BTreeMap<Ticket, Batch>,
    /// The last epoch (`u16::MAX`) ended: nothing more may be numbered, since any
    /// identity could repeat one already used.
    exhausted: bool,
}

impl Sequencer {
    pub(crate) fn new(producer_id: u64) -> Self {
        Self {
            producer_id,
            epoch: 0,
            next_sequence: 0,
            next_ticket: 0,
            in_flight: BTreeMap::new(),
            exhausted: false,
        }
    }

    fn info(&self, b: &Batch) -> ProducerInfo {
        ProducerInfo {
            id: self.producer_id,
            epoch: b.epoch,
            base_sequence: b.base_sequence,
        }
    }

    /// Numbers a batch of `count` records, next in line; `None` once every epoch has
    /// ended (see [`ClientError::EpochsExhausted`](crate::ClientError::EpochsExhausted)).
    pub(crate) fn number(&mut self, count: u32) -> Option<(Ticket, ProducerInfo)> {
        if self.exhausted {
            return None;
        }
        let batch = Batch {
            epoch: self.epoch,
            base_sequence: self.next_sequence,
            count,
            maybe_stored: false,
        };
        self.next_sequence = self.next_sequence.wrapping_add(count);
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.in_flight.insert(ticket, batch);
        Some((ticket, self.info(&batch)))
    }

    /// The identity the batch is to be sent under now (renumbering changes it).
    pub(crate) fn identity(&self, ticket: Ticket) -> Option<ProducerInfo> {
        self.in_flight.get(&ticket).map(|b| self.info(b))
    }

    /// An attempt may have been stored (its answer was lost, or it was `SHUTTING_DOWN`).
    pub(crate) fn maybe_stored(&mut self, ticket: Ticket) {
        if let Some(b) = self.in_flight.get_mut(&ticket) {
            b.maybe_stored = true;
        }
    }

    /// Ends `epoch`, unless it has ended already: the next epoch starts at sequence 0,
    /// and the batches in flight that are certainly not stored move into it in order.
    pub(crate) fn restart(&mut self, epoch: u16) {
        if self.epoch != epoch || self.exhausted {
            return;
        }
        let Some(next) = self.epoch.checked_add(1) else {
            // No epoch is left: batches in flight keep their identities (none is
            // renumbered, so none is resent as another), and nothing new is numbered.
            self.exhausted = true;
            return;
        };
        self.epoch = next;
        self.next_sequence = 0;
        for b in self.in_flight.values_mut().filter(|b| !b.maybe_stored) {
            b.epoch = self.epoch;
            b.base_sequence = self.next_sequence;
            self.next_sequence = self.next_sequence.wrapping_add(b.count);
        }
    }

    /// The broker refused the batch sent as `sent` with `code`.
    pub(crate) fn refused(
        &mut self,
        ticket: Ticket,
        sent: ProducerInfo,
        code: ErrorCode,
    ) -> Refusal {
        let Some(batch) = self.in_flight.get(&ticket).copied() else {
            return Refusal::Fail;
        };
        match code {
            // Nothing was stored by this attempt; the broker no longer knows the
            // producer, so only a new epoch starting at sequence 0 is taken.
            ErrorCode::UnknownProducerId if batch.maybe_stored => Refusal::Unknown,
            ErrorCode::UnknownProducerId => {
                self.restart(sent.epoch);
                match self.identity(ticket) {
                    Some(now) if now != sent => Refusal::Resend(now),
                    _ => Refusal::Fail,
                }
            }
            // Fenced by an epoch this producer started itself (a batch renumbered into
            // it got there first): nothing of this attempt was stored.
            ErrorCode::ProducerFenced if !batch.maybe_stored && batch.epoch > sent.epoch => {
                Refusal::Resend(self.info(&batch))
            }
            _ => Refusal::Fail,
        }
    }

    /// The batch's send ended. Unless it was acknowledged, its outcome may be unknown:
    /// the epoch it was last numbered in ends, so no later batch reuses its sequence.
    pub(crate) fn finish(&mut self, ticket: Ticket, acknowledged: bool) {
        if let Some(b) = self.in_flight.remove(&ticket)
            && !acknowledged
        {
            self.restart(b.epoch);
        }
    }

    #[cfg(test)]
    fn epoch(&self) -> u16 {
        self.epoch
    }

    #[cfg(test)]
    fn number_ok(&mut self, count: u32) -> (Ticket, ProducerInfo) {
        self.number(count).expect("epochs left")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(epoch: u16, base_sequence: u32) -> ProducerInfo {
        ProducerInfo {
            id: 7,
            epoch,
            base_sequence,
        }
    }

    #[test]
    fn batches_are_numbered_in_order_and_renumbered_in_order_into_a_new_epoch() {
        let mut s = Sequencer::new(7);
        let (a, ia) = s.number_ok(3);
        let (b, ib) = s.number_ok(2);
        let (c, _) = s.number_ok(4);
        assert_eq!((ia, ib), (at(0, 0), at(0, 3)));
        // `a` is forgotten by the broker: all three move into epoch 1, in order.
        assert_eq!(
            s.refused(a, ia, ErrorCode::UnknownProducerId),
            Refusal::Resend(at(1, 0))
        );
        assert_eq!(s.identity(b), Some(at(1, 3)));
        assert_eq!(s.identity(c), Some(at(1, 5)));
        // `b`'s first attempt comes back fenced by epoch 1: resend as renumbered.
        assert_eq!(
            s.refused(b, ib, ErrorCode::ProducerFenced),
            Refusal::Resend(at(1, 3))
        );
        // A second refusal of epoch 0 does not start yet another epoch.
        assert_eq!(
            s.refused(c, at(0, 5), ErrorCode::UnknownProducerId),
            Refusal::Resend(at(1, 5))
        );
        assert_eq!(s.epoch(), 1);
        let (_, next) = s.number_ok(1);
        assert_eq!(next, at(1, 9));
    }

    #[test]
    fn a_batch_that_may_be_stored_keeps_its_identity_and_its_outcome_is_unknown() {
        let mut s = Sequencer::new(7);
        let (a, ia) = s.number_ok(3);
        let (b, ib) = s.number_ok(2);
        s.maybe_stored(a);
        assert_eq!(
            s.refused(a, ia, ErrorCode::UnknownProducerId),
            Refusal::Unknown
        );
        // The broker forgot the producer for `b` too: `b` moves on, `a` does not.
        assert_eq!(
            s.refused(b, ib, ErrorCode::UnknownProducerId),
            Refusal::Resend(at(1, 0))
        );
        assert_eq!(s.identity(a), Some(ia));
        // Its send fails; the epoch it had (0) has already ended.
        s.finish(a, false);
        assert_eq!(s.epoch(), 1);
    }

    #[test]
    fn a_fence_by_someone_else_fails() {
        let mut s = Sequencer::new(7);
        let (a, ia) = s.number_ok(3);
        assert_eq!(s.refused(a, ia, ErrorCode::ProducerFenced), Refusal::Fail);
        assert_eq!(
            s.refused(a, ia, ErrorCode::OutOfOrderSequence),
            Refusal::Fail
        );
        assert_eq!(s.epoch(), 0, "a refusal alone ends no epoch");
    }

    #[test]
    fn a_send_that_ends_unacknowledged_ends_the_epoch_it_was_last_numbered_in() {
        let mut s = Sequencer::new(7);
        let (a, _) = s.number_ok(3);
        let (b, _) = s.number_ok(2);
        let (c, _) = s.number_ok(1);
        s.finish(a, true);
        assert_eq!(s.epoch(), 0);
        s.finish(b, false);
        assert_eq!(s.epoch(), 1);
        // `c` was renumbered into epoch 1 and then fails too: epoch 2.
        assert_eq!(s.identity(c), Some(at(1, 0)));
        s.finish(c, false);
        assert_eq!(s.epoch(), 2);
        assert_eq!(s.number_ok(5).1, at(2, 0));
    }

    #[test]
    fn after_the_last_epoch_nothing_more_is_numbered_and_nothing_renumbered() {
        let mut s = Sequencer::new(7);
        for epoch in 0..u16::MAX {
            s.restart(epoch);
        }
        assert_eq!(s.epoch(), u16::MAX);
        let (a, ia) = s.number_ok(3);
        assert_eq!(ia, at(u16::MAX, 0));
        // The broker forgets the producer: the last epoch cannot end into a new one.
        assert_eq!(
            s.refused(a, ia, ErrorCode::UnknownProducerId),
            Refusal::Fail,
            "not resent under a reused identity"
        );
        assert_eq!(s.identity(a), Some(ia));
        assert_eq!(s.number(1), None);
        s.finish(a, false);
        assert_eq!(s.number(1), None, "still none after the batch ended");
    }
}
