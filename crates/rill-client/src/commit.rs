//! When a consumer stores its offset: the ten commit policies as a pure state machine
//! (events in, "store this offset" out), tested without I/O.

use std::time::{Duration, Instant};

use crate::ClientError;

/// When a consumer stores its offset on its own.
///
/// Automatic policies are at least once: they store only records the caller is done
/// with. A record handed out by `next()` counts as handled once the caller asks for the
/// next record (or calls `commit`, `store_offset` or `shutdown`), so a crash while
/// handling a record re-delivers it, with at most the policy's window before it, and
/// never skips it. `Disabled` plus [`Consumer::commit`](crate::Consumer::commit) after
/// handling a record is the commit-after-success mode, with a window of one record.
///
/// The interval of the `Interval…` policies is checked each time the consumer is asked
/// for a record, so a store can come up to one long poll (`max_wait`) late while the
/// consumer waits for data; `shutdown` stores whatever is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitPolicy {
    /// Never by itself: call `commit(&record)` after handling.
    Disabled,
    /// On a timer.
    Interval(Duration),
    /// At the next poll, for the batch already handed out (the default).
    #[default]
    Polling,
    /// Timer or next poll.
    IntervalOrPolling(Duration),
    /// Once every record of a poll result has been handled.
    All,
    /// Timer or that.
    IntervalOrAll(Duration),
    /// After each record handled.
    Each,
    /// Timer or that.
    IntervalOrEach(Duration),
    /// After every n records handled.
    Every(u32),
    /// Timer or that.
    IntervalOrEvery(Duration, u32),
}

impl CommitPolicy {
    /// Rejects zero durations and `n = 0`.
    pub fn validate(self) -> Result<(), ClientError> {
        let interval = self.interval();
        if interval.is_some_and(|d| d.is_zero()) {
            return Err(ClientError::InvalidArgument(format!(
                "commit policy {self:?}: the interval must be positive"
            )));
        }
        if matches!(self, Self::Every(0) | Self::IntervalOrEvery(_, 0)) {
            return Err(ClientError::InvalidArgument(format!(
                "commit policy {self:?}: n must be positive"
            )));
        }
        Ok(())
    }

    fn interval(self) -> Option<Duration> {
        match self {
            Self::Interval(d)
            | Self::IntervalOrPolling(d)
            | Self::IntervalOrAll(d)
            | Self::IntervalOrEach(d)
            | Self::IntervalOrEvery(d, _) => Some(d),
            _ => None,
        }
    }

    fn on_poll(self) -> bool {
        matches!(self, Self::Polling | Self::IntervalOrPolling(_))
    }

    fn on_all(self) -> bool {
        matches!(self, Self::All | Self::IntervalOrAll(_))
    }

    fn on_each(self) -> bool {
        matches!(self, Self::Each | Self::IntervalOrEach(_))
    }

    fn every(self) -> Option<u32> {
        match self {
            Self::Every(n) | Self::IntervalOrEvery(_, n) => Some(n),
            _ => None,
        }
    }
}

/// Tracks handed-out, handled and stored offsets of one partition and says when to store.
///
/// A record handed out is *pending* until the caller is done with it, which it says by
/// asking for the next record, committing, storing an offset or shutting down
/// ([`Committer::done`]); only then is it *handled*, and automatic policies store only
/// handled records. So a crash while the caller handles a record re-delivers it (and at
/// most the policy's window before it) and never skips it.
#[derive(Debug, Clone)]
pub(crate) struct Committer {
    policy: CommitPolicy,
    /// The last record handed out.
    handed: Option<u64>,
    /// Whether `handed` is still with the caller (not handled yet).
    pending: bool,
    /// The last record the caller is done with (or skipped past).
    handled: Option<u64>,
    stored: Option<u64>,
    /// Records handled since the last store.
    since_store: u32,
    last_store: Instant,
    /// Records of the latest poll result not handled yet.
    poll_remaining: usize,
}

impl Committer {
    pub(crate) fn new(policy: CommitPolicy, stored: Option<u64>, now: Instant) -> Self {
        Self {
            policy,
            handed: None,
            pending: false,
            handled: None,
            stored,
            since_store: 0,
            last_store: now,
            poll_remaining: 0,
        }
    }

    fn unstored(&self) -> Option<u64> {
        match (self.handled, self.stored) {
            (Some(h), Some(s)) if h <= s => None,
            (h, _) => h,
        }
    }

    /// A poll result of `count` records arrived.
    pub(crate) fn polled(&mut self, count: usize) {
        self.poll_remaining = count;
    }

    /// A record was handed out to the caller: it is pending until [`Committer::done`].
    pub(crate) fn handed_out(&mut self, offset: u64) {
        self.handed = Some(offset);
        self.pending = true;
    }

    /// The caller is done with the record handed out last (it asks for the next one,
    /// commits, stores or shuts down); returns the offset to store, if the policy says
    /// so now.
    pub(crate) fn done(&mut self, now: Instant) -> Option<u64> {
        if !self.finish_pending() {
            return self.tick(now);
        }
        let due = self.policy.on_each()
            || (self.policy.on_all() && self.poll_remaining == 0)
            || self.policy.every().is_some_and(|n| self.since_store >= n);
        if due { self.take(now) } else { self.tick(now) }
    }

    /// Counts the pending record as handled, without storing (the caller stores
    /// explicitly); returns whether one was pending.
    pub(crate) fn finish_pending(&mut self) -> bool {
        if !std::mem::take(&mut self.pending) {
            return false;
        }
        self.handled = self.handed;
        self.since_store = self.since_store.saturating_add(1);
        self.poll_remaining = self.poll_remaining.saturating_sub(1);
        true
    }

    /// Records up to `last` cannot be delivered, and the caller was told so (a data loss
    /// or a corrupt batch): they count as handled, so automatic policies store past them
    /// and a restart does not meet them again. Not a record: no policy is due.
    pub(crate) fn skipped(&mut self, last: u64) {
        if self.handed.is_none_or(|h| h < last) {
            self.handed = Some(last);
            self.pending = false;
        }
        if self.handled.is_none_or(|h| h < last) {
            self.handled = Some(last);
        }
    }

    /// A new poll starts; returns the offset to store, if any.
    pub(crate) fn polling(&mut self, now: Instant) -> Option<u64> {
        if self.policy.on_poll() {
            self.take(now)
        } else {
            self.tick(now)
        }
    }

    /// Time passed; returns the offset to store if the interval elapsed.
    pub(crate) fn tick(&mut self, now: Instant) -> Option<u64> {
        match self.policy.interval() {
            Some(d) if now.duration_since(self.last_store) >= d => self.take(now),
            _ => None,
        }
    }

    /// The caller stops the consumer: the record handed out last counts as handled, and
    /// automatic policies store what was handled.
    pub(crate) fn shutdown(&mut self, now: Instant) -> Option<u64> {
        self.finish_pending();
        if self.policy == CommitPolicy::Disabled {
            return None;
        }
        self.take(now)
    }

    /// The partition is taken away (a rebalance) while the caller may still be handling
    /// its last record: automatic policies store what was handled, never the pending
    /// record, so the next owner re-delivers it rather than skip it.
    pub(crate) fn revoke(&mut self, now: Instant) -> Option<u64> {
        if self.policy == CommitPolicy::Disabled {
            return None;
        }
        self.take(now)
    }

    fn take(&mut self, now: Instant) -> Option<u64> {
        let offset = self.unstored()?;
        self.since_store = 0;
        self.last_store = now;
        Some(offset)
    }

    /// Records a successful store (automatic or explicit).
    pub(crate) fn stored(&mut self, offset: u64) {
        self.stored = Some(offset);
    }

    /// Forgets the stored offset (after `delete_offset`).
    pub(crate) fn forget_stored(&mut self) {
        self.stored = None;
    }

    pub(crate) fn last_handed(&self) -> Option<u64> {
        self.handed
    }

    pub(crate) fn last_stored(&self) -> Option<u64> {
        self.stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer's `next()` calls over polls of `batch` records, one record handled
    /// every `step`: each call first says the previous record is done, polls when the
    /// poll result is used up, then hands out a record. After the last record, one more
    /// `next()` (the caller is done with it) finds nothing new. Returns the offsets
    /// stored, in order, each with the record still with the caller when it was stored.
    fn run(
        policy: CommitPolicy,
        batch: u64,
        polls: u64,
        step: Duration,
    ) -> Vec<(u64, Option<u64>)> {
        let start = Instant::now();
        let mut now = start;
        let mut c = Committer::new(policy, None, start);
        let mut stores = Vec::new();
        let mut push = |c: &mut Committer, s: Option<u64>| {
            if let Some(o) = s {
                c.stored(o);
                let with_caller = c.pending.then(|| c.last_handed().unwrap());
                stores.push((o, with_caller));
            }
        };
        for offset in 0..batch * polls {
            now += step;
            let s = c.done(now);
            push(&mut c, s);
            if offset % batch == 0 {
                let s = c.polling(now);
                push(&mut c, s);
                c.polled(batch as usize);
            }
            c.handed_out(offset);
        }
        now += step;
        let s = c.done(now);
        push(&mut c, s);
        let s = c.polling(now);
        push(&mut c, s);
        stores
    }

    fn offsets(stores: Vec<(u64, Option<u64>)>) -> Vec<u64> {
        stores.into_iter().map(|(stored, _)| stored).collect()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn each_policy_stores_where_it_says() {
        let run = |p| offsets(run(p, 3, 2, MS));
        assert_eq!(run(CommitPolicy::Disabled), Vec::<u64>::new());
        assert_eq!(run(CommitPolicy::Polling), vec![2, 5]);
        assert_eq!(run(CommitPolicy::All), vec![2, 5]);
        assert_eq!(run(CommitPolicy::Each), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(run(CommitPolicy::Every(2)), vec![1, 3, 5]);
        // A 2.5 ms timer with a record handled every 1 ms: due at 3 ms (records 0-1
        // handled) and at 6 ms (0-4).
        let d = Duration::from_micros(2500);
        assert_eq!(run(CommitPolicy::Interval(d)), vec![1, 4]);
        assert_eq!(run(CommitPolicy::IntervalOrEach(d)), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(run(CommitPolicy::IntervalOrEvery(d, 4)), vec![1, 4]);
        assert_eq!(run(CommitPolicy::IntervalOrPolling(d)), vec![1, 2, 5]);
        assert_eq!(
            run(CommitPolicy::IntervalOrAll(Duration::from_secs(9))),
            vec![2, 5]
        );
    }

    /// The at-least-once rule, for every policy: a store never covers the record handed
    /// out last, which the caller may still be handling.
    #[test]
    fn no_policy_stores_the_record_the_caller_still_has() {
        let d = Duration::from_micros(2500);
        for policy in [
            CommitPolicy::Polling,
            CommitPolicy::All,
            CommitPolicy::Each,
            CommitPolicy::Every(1),
            CommitPolicy::Every(2),
            CommitPolicy::Interval(d),
            CommitPolicy::IntervalOrEach(d),
            CommitPolicy::IntervalOrEvery(d, 1),
            CommitPolicy::IntervalOrPolling(d),
            CommitPolicy::IntervalOrAll(d),
        ] {
            for batch in [1, 2, 3, 7] {
                let stores = run(policy, batch, 3, MS);
                assert!(!stores.is_empty(), "{policy:?} stores something");
                for (stored, with_caller) in stores {
                    assert!(
                        with_caller.is_none_or(|h| stored < h),
                        "{policy:?} batch {batch}: stored {stored} while {with_caller:?} was with the caller"
                    );
                }
            }
        }
    }

    #[test]
    fn polling_stores_the_previous_batch_only_when_polling_again() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Polling, None, now);
        c.polled(2);
        c.handed_out(10);
        assert_eq!(c.done(now), None);
        c.handed_out(11);
        assert_eq!(c.done(now), None);
        assert_eq!(c.polling(now), Some(11));
        c.stored(11);
        assert_eq!(c.polling(now), None, "nothing new to store");
    }

    #[test]
    fn shutdown_counts_the_last_record_as_handled_unless_disabled() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Every(100), Some(4), now);
        assert_eq!(
            c.shutdown(now),
            None,
            "nothing handed out beyond the stored offset"
        );
        c.handed_out(7);
        assert_eq!(c.shutdown(now), Some(7));
        let mut d = Committer::new(CommitPolicy::Disabled, None, now);
        d.handed_out(7);
        assert_eq!(d.shutdown(now), None);
    }

    #[test]
    fn a_revocation_stores_only_what_was_handled() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Every(100), None, now);
        c.polled(3);
        c.handed_out(0);
        assert_eq!(c.done(now), None);
        c.handed_out(1);
        assert_eq!(
            c.revoke(now),
            Some(0),
            "record 1 may still be in the caller's hands"
        );
        c.stored(0);
        assert_eq!(c.revoke(now), None);
        let mut d = Committer::new(CommitPolicy::Disabled, None, now);
        d.handed_out(0);
        d.done(now);
        assert_eq!(d.revoke(now), None);
    }

    #[test]
    fn a_failed_store_is_retried_by_the_next_due_store() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Each, None, now);
        c.polled(3);
        c.handed_out(0);
        assert_eq!(c.done(now), Some(0));
        // The store of 0 failed: `stored` is not called.
        c.handed_out(1);
        assert_eq!(c.done(now), Some(1), "covers 0 too");
        assert_eq!(c.shutdown(now), Some(1), "still unstored");
    }

    #[test]
    fn a_skipped_range_counts_as_handled_without_making_a_store_due() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Each, Some(4), now);
        c.skipped(3);
        assert_eq!(c.shutdown(now), None, "below the stored offset");
        c.skipped(9);
        assert_eq!(c.last_handed(), Some(9));
        c.handed_out(10);
        assert_eq!(c.done(now), Some(10));
        let mut p = Committer::new(CommitPolicy::Polling, None, now);
        p.skipped(9);
        assert_eq!(p.polling(now), Some(9));
    }

    #[test]
    fn zero_durations_and_counts_are_rejected() {
        assert!(CommitPolicy::Interval(Duration::ZERO).validate().is_err());
        assert!(CommitPolicy::IntervalOrEvery(MS, 0).validate().is_err());
        assert!(CommitPolicy::Every(0).validate().is_err());
        assert!(CommitPolicy::IntervalOrAll(MS).validate().is_ok());
    }
}
