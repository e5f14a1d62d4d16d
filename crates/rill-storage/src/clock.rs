//! Time comes through a seam so tests can pause and move it.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in µs since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, µs since the Unix epoch.
    fn now_us(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `now_us`.
    pub fn new(now_us: i64) -> Self {
        Self(AtomicI64::new(now_us))
    }

    /// Sets the time.
    pub fn set_us(&self, now_us: i64) {
        self.0.store(now_us, Ordering::SeqCst);
    }

    /// Moves the time forward by `us`.
    pub fn advance_us(&self, us: i64) {
        self.0.fetch_add(us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
