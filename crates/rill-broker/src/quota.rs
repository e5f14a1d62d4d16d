//! Per-user byte rates (docs/SECURITY.md §7): a token bucket per user, kind and node.
//! A request that takes its bucket below zero is done, and its response is held back
//! until the bucket is back at zero (at most [`THROTTLE_MAX`]), as Kafka throttles.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The longest a response is held back.
pub const THROTTLE_MAX: Duration = Duration::from_secs(30);

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    /// Bytes of record batches produced.
    Produce,
    /// Bytes of record batches fetched.
    Fetch,
}

impl QuotaKind {
    /// The `kind` label of the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
        }
    }
}

/// One user's use of one quota on this node, for `/metrics`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaUsage {
    /// The user.
    pub user: String,
    /// Which quota.
    pub kind: QuotaKind,
    /// Bytes counted against it since the broker opened.
    pub bytes: u64,
    /// Time its responses were held back, in total.
    pub throttled: Duration,
}

/// A token bucket of `rate` bytes per second holding at most one second's worth. Pure:
/// the caller passes the time.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    /// Bytes that may go without delay; negative is a debt.
    tokens: f64,
    last: Option<Instant>,
    bytes: u64,
    throttled: Duration,
}

impl Bucket {
    pub(crate) fn new() -> Self {
        Self {
            tokens: 0.0,
            last: None,
            bytes: 0,
            throttled: Duration::ZERO,
        }
    }

    /// Counts `bytes` at `now` against `rate` bytes/s and returns how long to hold the
    /// response back. The debt is bounded by [`THROTTLE_MAX`]'s worth, so a bucket
    /// recovers within that time however large the requests were.
    pub(crate) fn record(&mut self, now: Instant, rate: u64, bytes: u64) -> Duration {
        let rate = rate.max(1) as f64;
        let burst = rate;
        let tokens = match self.last {
            // A new bucket starts full.
            None => burst,
            // A lowered rate takes effect at once: the bucket holds one second of it.
            Some(last) => {
                let elapsed = now.saturating_duration_since(last).as_secs_f64();
                (self.tokens + elapsed * rate).min(burst)
            }
        };
        let floor = -(THROTTLE_MAX.as_secs_f64() * rate);
        self.tokens = (tokens - bytes as f64).max(floor);
        self.last = Some(now);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        let delay = Duration::from_secs_f64(-self.tokens / rate).min(THROTTLE_MAX);
        self.throttled = self.throttled.saturating_add(delay);
        delay
    }
}

#[derive(Debug)]
struct UserBuckets {
    produce: Bucket,
    fetch: Bucket,
}

/// The buckets of every user with a quota who made a request on this node. Bounded:
/// at most `users_max` entries, those of deleted users dropped when it fills.
#[derive(Debug)]
pub(crate) struct Quotas {
    users: Mutex<HashMap<String, UserBuckets>>,
    users_max: usize,
}

impl Quotas {
    pub(crate) fn new(users_max: usize) -> Self {
        Self {
            users: Mutex::new(HashMap::new()),
            users_max,
        }
    }

    /// Counts a request's bytes for `user` and returns the delay of its response.
    /// `exists` tells which users still exist, for pruning.
    pub(crate) fn record(
        &self,
        user: &str,
        kind: QuotaKind,
        rate: u64,
        bytes: u64,
        now: Instant,
        exists: impl Fn(&str) -> bool,
    ) -> Duration {
        let mut users = self.users.lock();
        if !users.contains_key(user) && users.len() >= self.users_max {
            users.retain(|u, _| exists(u));
            if users.len() >= self.users_max {
                // Every entry is a live user: the bound is the user bound, so this is
                // a user made since; count nothing rather than grow.
                return Duration::ZERO;
            }
        }
        let buckets = users.entry(user.to_owned()).or_insert_with(|| UserBuckets {
            produce: Bucket::new(),
            fetch: Bucket::new(),
        });
        match kind {
            QuotaKind::Produce => buckets.produce.record(now, rate, bytes),
            QuotaKind::Fetch => buckets.fetch.record(now, rate, bytes),
        }
    }

    /// Every user's use, sorted by user then kind.
    pub(crate) fn usage(&self) -> Vec<QuotaUsage> {
        let users = self.users.lock();
        let mut out = Vec::with_capacity(users.len() * 2);
        for (user, b) in users.iter() {
            for (kind, bucket) in [
                (QuotaKind::Produce, &b.produce),
                (QuotaKind::Fetch, &b.fetch),
            ] {
                if bucket.last.is_some() {
                    out.push(QuotaUsage {
                        user: user.clone(),
                        kind,
                        bytes: bucket.bytes,
                        throttled: bucket.throttled,
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.user, a.kind.as_str()).cmp(&(&b.user, b.kind.as_str())));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KIB: u64 = 1024;

    #[test]
    fn a_burst_of_one_second_goes_at_once_and_the_rest_waits_for_its_share() {
        let t0 = Instant::now();
        let mut b = Bucket::new();
        // 100 KiB/s: the first 100 KiB go without delay.
        assert_eq!(b.record(t0, 100 * KIB, 60 * KIB), Duration::ZERO);
        assert_eq!(b.record(t0, 100 * KIB, 40 * KIB), Duration::ZERO);
        // 50 KiB more at once: a debt of half a second.
        let d = b.record(t0, 100 * KIB, 50 * KIB);
        assert!((d.as_secs_f64() - 0.5).abs() < 1e-9, "{d:?}");
        // A quarter second later, 25 KiB was repaid: another 50 KiB owes 0.75 s.
        let d = b.record(t0 + Duration::from_millis(250), 100 * KIB, 50 * KIB);
        assert!((d.as_secs_f64() - 0.75).abs() < 1e-9, "{d:?}");
        // After a long pause the bucket is full again, never more than one second's worth.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(b.record(later, 100 * KIB, 100 * KIB), Duration::ZERO);
        assert!(b.record(later, 100 * KIB, 1) > Duration::ZERO);
        assert_eq!(b.bytes, 200 * KIB + 100 * KIB + 1);
    }

    #[test]
    fn a_huge_request_is_held_at_most_the_cap_and_the_debt_is_bounded() {
        let t0 = Instant::now();
        let mut b = Bucket::new();
        assert_eq!(b.record(t0, KIB, 1 << 30), THROTTLE_MAX);
        // The debt is at most THROTTLE_MAX's worth: after it, the bucket is at zero.
        let after = t0 + THROTTLE_MAX;
        assert_eq!(b.record(after, KIB, 0), Duration::ZERO);
    }

    #[test]
    fn the_table_is_bounded_and_drops_deleted_users_first() {
        let q = Quotas::new(2);
        let now = Instant::now();
        q.record("a", QuotaKind::Produce, KIB, 1, now, |_| true);
        q.record("b", QuotaKind::Fetch, KIB, 1, now, |_| true);
        // Full of live users: a third is not counted.
        q.record("c", QuotaKind::Fetch, KIB, 1, now, |_| true);
        assert_eq!(q.usage().len(), 2);
        // "a" was deleted: it makes room.
        q.record("c", QuotaKind::Fetch, KIB, 1, now, |u| u != "a");
        let users: Vec<_> = q.usage().into_iter().map(|u| u.user).collect();
        assert_eq!(users, ["b", "c"]);
    }

    proptest! {
        /// Over any sequence of requests, the bytes let through without being paid
        /// for by time or delay never exceed one second's burst: what the bucket
        /// admits by `t + delay` is at most `rate × (t + delay) + burst`.
        #[test]
        fn no_schedule_outruns_the_rate(
            rate in 1024u64..1_000_000,
            steps in proptest::collection::vec((0u64..2_000, 0u64..2_000_000), 1..60),
        ) {
            let t0 = Instant::now();
            let mut b = Bucket::new();
            let mut t = Duration::ZERO;
            let mut sent = 0u64;
            for (gap_ms, bytes) in steps {
                t += Duration::from_millis(gap_ms);
                let delay = b.record(t0 + t, rate, bytes);
                prop_assert!(delay <= THROTTLE_MAX);
                sent += bytes;
                // Unless the cap cut the delay short, the answer comes no earlier
                // than the rate allows.
                if delay < THROTTLE_MAX {
                    let allowed = rate as f64 * (t + delay).as_secs_f64() + rate as f64;
                    prop_assert!(sent as f64 <= allowed + 1.0, "sent {sent} allowed {allowed}");
                } else {
                    break;
                }
            }
        }
    }
}
