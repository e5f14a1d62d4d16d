//! Failed authentication attempts per source address (`docs/SECURITY.md` §3.4): after
//! [`Limiter::failures_max`] failures within [`Limiter::window`], an address is refused
//! without being checked until the window has passed since the failure that filled it.
//! The table keeps at most [`Limiter::addresses_max`] addresses, dropping the one that
//! failed least recently, so it has a bound whatever is sent.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use lru::LruCache;

/// The limiter's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimiterConfig {
    /// Failures that close an address.
    pub failures_max: usize,
    /// How long a failure counts.
    pub window: Duration,
    /// Addresses remembered.
    pub addresses_max: usize,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self {
            failures_max: 5,
            window: Duration::from_secs(60),
            addresses_max: 10_000,
        }
    }
}

/// The failure table. Not synchronised: the server keeps it behind a mutex.
#[derive(Debug)]
pub struct Limiter {
    config: LimiterConfig,
    failures: LruCache<IpAddr, VecDeque<Instant>>,
}

impl Limiter {
    /// An empty table. `failures_max` and `addresses_max` of 0 count as 1.
    pub fn new(config: LimiterConfig) -> Self {
        let config = LimiterConfig {
            failures_max: config.failures_max.max(1),
            addresses_max: config.addresses_max.max(1),
            ..config
        };
        let cap = NonZeroUsize::new(config.addresses_max).expect("at least 1");
        Self {
            config,
            failures: LruCache::new(cap),
        }
    }

    /// The settings.
    pub fn config(&self) -> LimiterConfig {
        self.config
    }

    /// Failures that close an address.
    pub fn failures_max(&self) -> usize {
        self.config.failures_max
    }

    /// How long a failure counts.
    pub fn window(&self) -> Duration {
        self.config.window
    }

    /// Addresses remembered.
    pub fn addresses_max(&self) -> usize {
        self.config.addresses_max
    }

    /// Addresses with a failure in the table.
    pub fn len(&self) -> usize {
        self.failures.len()
    }

    /// Whether no address has a failure in the table.
    pub fn is_empty(&self) -> bool {
        self.failures.is_empty()
    }

    /// `None` if `addr` may try now; else how long until it may.
    pub fn check(&mut self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let window = self.config.window;
        let max = self.config.failures_max;
        let recent = self.failures.peek_mut(&addr)?;
        while recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= window)
        {
            recent.pop_front();
        }
        if recent.is_empty() {
            self.failures.pop(&addr);
            return None;
        }
        if recent.len() < max {
            return None;
        }
        // Closed until the oldest failure that still counts leaves the window... which
        // is when the count drops below the maximum.
        let oldest = *recent.front().expect("not empty");
        Some(window.saturating_sub(now.saturating_duration_since(oldest)))
    }

    /// Counts a failure of `addr` at `now`.
    pub fn fail(&mut self, addr: IpAddr, now: Instant) {
        let max = self.config.failures_max;
        let recent = self.failures.get_or_insert_mut(addr, VecDeque::new);
        recent.push_back(now);
        while recent.len() > max {
            recent.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    #[test]
    fn the_fifth_failure_closes_an_address_for_the_window_and_others_are_unaffected() {
        let mut l = Limiter::new(LimiterConfig::default());
        let t0 = Instant::now();
        for i in 0..4 {
            assert_eq!(l.check(ip(1), t0), None);
            l.fail(ip(1), t0 + Duration::from_secs(i));
        }
        assert_eq!(l.check(ip(1), t0 + Duration::from_secs(4)), None);
        l.fail(ip(1), t0 + Duration::from_secs(4));
        assert_eq!(
            l.check(ip(1), t0 + Duration::from_secs(10)),
            Some(Duration::from_secs(50))
        );
        assert_eq!(l.check(ip(2), t0 + Duration::from_secs(10)), None);
        // The first failure leaves the window at 60 s: four remain, so it may try.
        assert_eq!(l.check(ip(1), t0 + Duration::from_secs(60)), None);
        // One more failure closes it again until the second failure leaves (61 s).
        l.fail(ip(1), t0 + Duration::from_secs(60));
        assert_eq!(
            l.check(ip(1), t0 + Duration::from_secs(60)),
            Some(Duration::from_secs(1))
        );
        // Long after, the address is forgotten.
        assert_eq!(l.check(ip(1), t0 + Duration::from_secs(600)), None);
        assert!(l.is_empty());
    }

    #[test]
    fn the_table_keeps_at_most_its_bound_of_addresses() {
        let mut l = Limiter::new(LimiterConfig {
            addresses_max: 3,
            failures_max: 1,
            ..LimiterConfig::default()
        });
        let t = Instant::now();
        for n in 0..10 {
            l.fail(ip(n), t);
        }
        assert_eq!(l.len(), 3);
        assert!(l.check(ip(9), t).is_some());
        assert_eq!(l.check(ip(0), t), None, "the oldest addresses were dropped");
    }
}
