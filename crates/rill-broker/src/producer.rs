//! Idempotent-producer state of one partition: a pure state machine.
//!
//! Each producer id has an epoch and the next sequence it must send. A batch whose
//! base sequence is the next one is appended; a batch equal to one of the last
//! [`RECENT_BATCHES`] is a retry and is acknowledged again with its original offsets;
//! anything else is out of order. A lower epoch is fenced; a higher one resets.

use std::collections::VecDeque;
use std::num::NonZeroUsize;

use lru::LruCache;
use rill_format::{BatchHeader, ProducerInfo};
use rill_storage::DurableTicket;

use crate::BrokerError;

/// Batches remembered per producer and partition for retry detection by default (as
/// Kafka's in-flight bound). Clients learn the broker's number from `InitProducer`.
pub(crate) const RECENT_BATCHES: usize = 5;
/// The largest number of batches a broker may be configured to remember.
pub(crate) const RECENT_BATCHES_MAX: usize = 64;

/// Where a batch was appended, for acknowledging its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecentBatch {
    /// Base sequence of the batch.
    pub base_sequence: u32,
    /// Records in it.
    pub count: u32,
    /// Its first offset.
    pub base_offset: u64,
    /// Its stamped timestamp.
    pub timestamp_us: i64,
    /// Wait on this before acknowledging a retry of it.
    pub ticket: DurableTicket,
}

/// What to do with an idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The batch is the next in sequence: append it.
    Append,
    /// The batch was appended before: acknowledge it again.
    Duplicate(RecentBatch),
    /// A batch before it is missing: a pipelining client sent both, and the earlier one
    /// has not arrived yet. Wait for it (bounded), then check again.
    Wait {
        /// Whether the producer is known here. An unknown producer whose predecessor
        /// never comes is refused with `UnknownProducerId`: its state was forgotten
        /// (evicted, or older than what a restart rebuilt), so whether this batch is a
        /// retry of one already stored cannot be told.
        known: bool,
    },
}

#[derive(Debug, Clone)]
struct ProducerState {
    epoch: u16,
    next_sequence: u32,
    recent: VecDeque<RecentBatch>,
}

/// Per-producer state of one partition, bounded in the number of producers (the least
/// recently used is forgotten, in O(1)) and in the batches remembered per producer.
#[derive(Debug)]
pub(crate) struct ProducerTable {
    producers: LruCache<u64, ProducerState>,
    recent_max: usize,
}

impl ProducerTable {
    /// An empty table holding at most `producers_max` producers (least recently used
    /// ones are forgotten beyond that), each with its last [`RECENT_BATCHES`] batches.
    #[cfg(test)]
    pub(crate) fn new(producers_max: usize) -> Self {
        Self::with_recent(producers_max, RECENT_BATCHES)
    }

    /// Like [`ProducerTable::new`], remembering `recent_max` batches per producer
    /// (1 ..= [`RECENT_BATCHES_MAX`]).
    pub(crate) fn with_recent(producers_max: usize, recent_max: usize) -> Self {
        Self {
            producers: LruCache::new(NonZeroUsize::new(producers_max.max(1)).expect("positive")),
            recent_max: recent_max.clamp(1, RECENT_BATCHES_MAX),
        }
    }

    /// Batches remembered per producer.
    #[cfg(test)]
    pub(crate) fn recent_max(&self) -> usize {
        self.recent_max
    }

    /// Number of producers tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }

    /// Decides what to do with a batch of `count` records from `producer`.
    pub(crate) fn check(&self, producer: ProducerInfo, count: u32) -> Result<Check, BrokerError> {
        let Some(state) = self.producers.peek(&producer.id) else {
            // Unknown producer: its first batch (sequence 0), a later batch that overtook
            // the first, or a producer whose state is older than what a restart
            // recovered.
            return Ok(if producer.base_sequence == 0 {
                Check::Append
            } else {
                Check::Wait { known: false }
            });
        };
        if producer.epoch < state.epoch {
            return Err(BrokerError::ProducerFenced {
                producer_id: producer.id,
                epoch: producer.epoch,
                current: state.epoch,
            });
        }
        if producer.epoch > state.epoch || producer.base_sequence == state.next_sequence {
            return Ok(Check::Append);
        }
        if let Some(recent) = state
            .recent
            .iter()
            .find(|r| r.base_sequence == producer.base_sequence && r.count == count)
        {
            return Ok(Check::Duplicate(*recent));
        }
        // Ahead of the next sequence (within half the sequence space, which wraps):
        // an earlier batch is still on its way.
        if producer.base_sequence.wrapping_sub(state.next_sequence) < u32::MAX / 2 {
            return Ok(Check::Wait { known: true });
        }
        Err(BrokerError::OutOfOrderSequence {
            producer_id: producer.id,
            expected: state.next_sequence,
            got: producer.base_sequence,
        })
    }

    /// The next sequence expected from a producer, if it is known.
    pub(crate) fn next_sequence(&self, producer_id: u64) -> Option<u32> {
        self.producers.peek(&producer_id).map(|s| s.next_sequence)
    }

    /// Records an appended batch; the producer becomes the most recently used (the
    /// least recently used one is forgotten if the table is full).
    pub(crate) fn record(&mut self, producer: ProducerInfo, batch: RecentBatch) {
        let recent_max = self.recent_max;
        let state = self
            .producers
            .get_or_insert_mut(producer.id, || ProducerState {
                epoch: producer.epoch,
                next_sequence: 0,
                recent: VecDeque::with_capacity(recent_max),
            });
        if producer.epoch != state.epoch {
            state.epoch = producer.epoch;
            state.recent.clear();
        }
        state.next_sequence = batch.base_sequence.wrapping_add(batch.count);
        if state.recent.len() == recent_max {
            state.recent.pop_front();
        }
        state.recent.push_back(batch);
    }

    /// Sets where a batch recorded before its offsets were known was appended (a
    /// replicated partition records a batch as it proposes it).
    pub(crate) fn resolve(
        &mut self,
        producer_id: u64,
        base_sequence: u32,
        base_offset: u64,
        timestamp_us: i64,
    ) {
        if let Some(state) = self.producers.peek_mut(&producer_id)
            && let Some(recent) = state
                .recent
                .iter_mut()
                .find(|r| r.base_sequence == base_sequence)
        {
            recent.base_offset = base_offset;
            recent.timestamp_us = timestamp_us;
        }
    }

    /// Rebuilds the table from stored batch headers, oldest first (after a restart).
    pub(crate) fn rebuild(&mut self, headers: &[BatchHeader]) {
        for header in headers {
            if let Some(producer) = header.producer {
                self.record(
                    producer,
                    RecentBatch {
                        base_sequence: producer.base_sequence,
                        count: header.record_count,
                        base_offset: header.base_offset,
                        timestamp_us: header.first_timestamp_us,
                        ticket: DurableTicket::DURABLE,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: u64, epoch: u16, seq: u32) -> ProducerInfo {
        ProducerInfo {
            id,
            epoch,
            base_sequence: seq,
        }
    }

    fn batch(seq: u32, count: u32, offset: u64) -> RecentBatch {
        RecentBatch {
            base_sequence: seq,
            count,
            base_offset: offset,
            timestamp_us: 0,
            ticket: DurableTicket::DURABLE,
        }
    }

    #[test]
    fn sequences_duplicates_gaps_and_fencing() {
        let mut t = ProducerTable::new(10);
        assert_eq!(t.check(p(1, 0, 0), 3).unwrap(), Check::Append);
        t.record(p(1, 0, 0), batch(0, 3, 100));
        assert_eq!(t.check(p(1, 0, 3), 2).unwrap(), Check::Append);
        t.record(p(1, 0, 3), batch(3, 2, 103));
        // Retries of either batch are duplicates with their original offsets.
        assert_eq!(
            t.check(p(1, 0, 0), 3).unwrap(),
            Check::Duplicate(batch(0, 3, 100))
        );
        assert_eq!(
            t.check(p(1, 0, 3), 2).unwrap(),
            Check::Duplicate(batch(3, 2, 103))
        );
        // A batch ahead of the next sequence waits for those before it (pipelining);
        // an overlapping one is out of order.
        assert_eq!(t.check(p(1, 0, 9), 1).unwrap(), Check::Wait { known: true });
        assert!(matches!(
            t.check(p(1, 0, 1), 1),
            Err(BrokerError::OutOfOrderSequence {
                expected: 5,
                got: 1,
                ..
            })
        ));
        // An unknown producer's first batch is sequence 0; a later one waits.
        assert_eq!(
            t.check(p(2, 0, 3), 1).unwrap(),
            Check::Wait { known: false }
        );
        // A new epoch resets; the old epoch is then fenced.
        assert_eq!(t.check(p(1, 1, 0), 1).unwrap(), Check::Append);
        t.record(p(1, 1, 0), batch(0, 1, 105));
        assert!(matches!(
            t.check(p(1, 0, 5), 1),
            Err(BrokerError::ProducerFenced { .. })
        ));
    }

    #[test]
    fn remembers_only_the_last_batches_and_bounds_producers() {
        let mut t = ProducerTable::new(2);
        for i in 0..10u32 {
            t.record(p(7, 0, i), batch(i, 1, u64::from(i)));
        }
        assert!(matches!(
            t.check(p(7, 0, 9), 1).unwrap(),
            Check::Duplicate(_)
        ));
        assert!(matches!(
            t.check(p(7, 0, 4), 1),
            Err(BrokerError::OutOfOrderSequence { .. })
        ));
        t.record(p(8, 0, 0), batch(0, 1, 20));
        t.record(p(9, 0, 0), batch(0, 1, 21));
        assert_eq!(t.len(), 2);
        // Producer 7 was least recently used and is forgotten: its next batch waits for
        // a predecessor that will not come, and is then refused (see Partition).
        assert_eq!(
            t.check(p(7, 0, 4), 1).unwrap(),
            Check::Wait { known: false }
        );
    }

    #[test]
    fn eviction_is_least_recently_used_and_the_recent_bound_is_configurable() {
        let mut t = ProducerTable::with_recent(3, 2);
        for id in 1..=3 {
            t.record(p(id, 0, 0), batch(0, 1, id));
        }
        // Producer 1 is used again, so 2 is now the least recently used.
        t.record(p(1, 0, 1), batch(1, 1, 10));
        t.record(p(4, 0, 0), batch(0, 1, 11));
        assert_eq!(t.len(), 3);
        assert_eq!(t.next_sequence(2), None);
        assert_eq!(t.next_sequence(1), Some(2));
        // Two batches remembered: the third-last is no longer a duplicate.
        t.record(p(1, 0, 2), batch(2, 1, 12));
        assert!(matches!(
            t.check(p(1, 0, 2), 1).unwrap(),
            Check::Duplicate(_)
        ));
        assert!(matches!(
            t.check(p(1, 0, 1), 1).unwrap(),
            Check::Duplicate(_)
        ));
        assert!(matches!(
            t.check(p(1, 0, 0), 1),
            Err(BrokerError::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            ProducerTable::with_recent(1, 1000).recent_max(),
            RECENT_BATCHES_MAX
        );
    }

    #[test]
    fn sequences_wrap_around() {
        let mut t = ProducerTable::new(4);
        t.record(p(1, 0, u32::MAX - 1), batch(u32::MAX - 1, 3, 0));
        assert_eq!(t.check(p(1, 0, 1), 1).unwrap(), Check::Append);
    }
}
