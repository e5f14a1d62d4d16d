//! When a consumer stores its offset: the ten commit policies as a pure state machine
//! (events in, "store this offset" out), tested without I/O.

use std::time::{Duration, Instant};

use crate::ClientError;

/// When a consumer stores its offset on its own.
///
/// Automatic policies store what was *handed out*; `Disabled` plus
/// [`Consumer::commit`](crate::Consumer::commit) after handling a record is the
/// crash-safe, commit-after-success mode.
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
    /// Once every record of a poll result has been handed out.
    All,
    /// Timer or that.
    IntervalOrAll(Duration),
    /// After each record handed out.
    Each,
    /// Timer or that.
    IntervalOrEach(Duration),
    /// After every n records handed out.
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

/// Tracks handed-out and stored offsets (the *consumed* offset: the last record handed
/// out) and says when to store.
#[derive(Debug, Clone)]
pub(crate) struct Committer {
    policy: CommitPolicy,
    handed: Option<u64>,
    stored: Option<u64>,
    since_store: u32,
    last_store: Instant,
    poll_remaining: usize,
}

impl Committer {
    pub(crate) fn new(policy: CommitPolicy, stored: Option<u64>, now: Instant) -> Self {
        Self {
            policy,
            handed: None,
            stored,
            since_store: 0,
            last_store: now,
            poll_remaining: 0,
        }
    }

    fn unstored(&self) -> Option<u64> {
        match (self.handed, self.stored) {
            (Some(h), Some(s)) if h <= s => None,
            (h, _) => h,
        }
    }

    /// A poll result of `count` records arrived.
    pub(crate) fn polled(&mut self, count: usize) {
        self.poll_remaining = count;
    }

    /// A record was handed out; returns the offset to store, if any.
    pub(crate) fn handed_out(&mut self, offset: u64, now: Instant) -> Option<u64> {
        self.handed = Some(offset);
        self.since_store += 1;
        self.poll_remaining = self.poll_remaining.saturating_sub(1);
        let due = self.policy.on_each()
            || (self.policy.on_all() && self.poll_remaining == 0)
            || self.policy.every().is_some_and(|n| self.since_store >= n);
        if due { self.take(now) } else { self.tick(now) }
    }

    /// Records up to `last` cannot be delivered, and the caller was told so (a data loss
    /// or a corrupt batch): they count as handed out, so automatic policies store past
    /// them and a restart does not meet them again. Not a record: no policy is due.
    pub(crate) fn skipped(&mut self, last: u64) {
        if self.handed.is_none_or(|h| h < last) {
            self.handed = Some(last);
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

    /// The consumer stops: automatic policies store what was handed out.
    pub(crate) fn shutdown(&mut self, now: Instant) -> Option<u64> {
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

    /// Runs: a poll of `batch` records, hands them all out, then polls again.
    /// Returns the store points (offsets stored) in order.
    fn run(policy: CommitPolicy, batch: u64, step: Duration) -> Vec<u64> {
        let start = Instant::now();
        let mut now = start;
        let mut c = Committer::new(policy, None, start);
        let mut stores = Vec::new();
        let mut push = |c: &mut Committer, s: Option<u64>| {
            if let Some(o) = s {
                c.stored(o);
                stores.push(o);
            }
        };
        for poll in 0..2u64 {
            let s = c.polling(now);
            push(&mut c, s);
            c.polled(batch as usize);
            for i in 0..batch {
                now += step;
                let s = c.handed_out(poll * batch + i, now);
                push(&mut c, s);
            }
        }
        let s = c.polling(now);
        push(&mut c, s);
        stores
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn each_policy_stores_where_it_says() {
        assert_eq!(run(CommitPolicy::Disabled, 3, MS), Vec::<u64>::new());
        assert_eq!(run(CommitPolicy::Polling, 3, MS), vec![2, 5]);
        assert_eq!(run(CommitPolicy::All, 3, MS), vec![2, 5]);
        assert_eq!(run(CommitPolicy::Each, 3, MS), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(run(CommitPolicy::Every(2), 3, MS), vec![1, 3, 5]);
        // A 2.5 ms timer with a record every 1 ms.
        let d = Duration::from_micros(2500);
        assert_eq!(run(CommitPolicy::Interval(d), 3, MS), vec![2, 5]);
        assert_eq!(
            run(CommitPolicy::IntervalOrEach(d), 3, MS),
            vec![0, 1, 2, 3, 4, 5]
        );
        assert_eq!(run(CommitPolicy::IntervalOrEvery(d, 4), 3, MS), vec![2, 5]);
        assert_eq!(run(CommitPolicy::IntervalOrPolling(d), 3, MS), vec![2, 5]);
        assert_eq!(
            run(CommitPolicy::IntervalOrAll(Duration::from_secs(9)), 3, MS),
            vec![2, 5]
        );
    }

    #[test]
    fn polling_stores_the_previous_batch_only_when_polling_again() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Polling, None, now);
        c.polled(2);
        assert_eq!(c.handed_out(10, now), None);
        assert_eq!(c.handed_out(11, now), None);
        assert_eq!(c.polling(now), Some(11));
        c.stored(11);
        assert_eq!(c.polling(now), None, "nothing new to store");
    }

    #[test]
    fn shutdown_stores_unless_disabled() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Every(100), Some(4), now);
        assert_eq!(
            c.shutdown(now),
            None,
            "nothing handed out beyond the stored offset"
        );
        c.handed_out(7, now);
        assert_eq!(c.shutdown(now), Some(7));
        let mut d = Committer::new(CommitPolicy::Disabled, None, now);
        d.handed_out(7, now);
        assert_eq!(d.shutdown(now), None);
    }

    #[test]
    fn a_skipped_range_counts_as_handed_out_without_making_a_store_due() {
        let now = Instant::now();
        let mut c = Committer::new(CommitPolicy::Each, Some(4), now);
        c.skipped(3);
        assert_eq!(c.shutdown(now), None, "below the stored offset");
        c.skipped(9);
        assert_eq!(c.last_handed(), Some(9));
        assert_eq!(c.handed_out(10, now), Some(10));
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
