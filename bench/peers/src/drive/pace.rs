//! The fixed-rate schedule: when each record of a paced producer is due, and a sleep
//! precise enough to send it then.

use std::time::{Duration, Instant};

use anyhow::Context as _;

/// A fixed rate: `per_second` records/s spread over `producers`, so each producer's
/// record `i` is due `i * producers / per_second` seconds after the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pace {
    per_second: u64,
    producers: u32,
}

impl Pace {
    pub(super) fn new(per_second: u64, producers: u32) -> anyhow::Result<Self> {
        anyhow::ensure!(per_second > 0, "a fixed rate must be above 0 records/s");
        Ok(Self {
            per_second,
            producers: producers.max(1),
        })
    }

    /// When record `i` is due, after the start (rounded up to the nanosecond, so that
    /// `i < due(offset(i))`).
    pub(super) fn offset(self, i: u64) -> Duration {
        let num = u128::from(i) * 1_000_000_000 * u128::from(self.producers);
        let ns = num.div_ceil(u128::from(self.per_second));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// How many records are due `elapsed` after the start (those whose offset is at
    /// most `elapsed`), at most `total`.
    pub(super) fn due(self, elapsed: Duration, total: u64) -> u64 {
        let num = elapsed.as_nanos() * u128::from(self.per_second);
        let count = num / (1_000_000_000 * u128::from(self.producers)) + 1;
        u64::try_from(count).unwrap_or(u64::MAX).min(total)
    }
}

/// Sleeps until `deadline` with the OS timer (tens of µs late), not tokio's, which
/// rounds up to the next millisecond and would add up to 1 ms to every fixed-rate
/// latency (`rill bench` paces the same way). The last few ms sleep on a blocking-pool
/// thread, so no runtime worker is held.
pub(super) async fn pause_until(deadline: Instant) -> anyhow::Result<()> {
    let wait = deadline.saturating_duration_since(Instant::now());
    if wait.is_zero() {
        return Ok(());
    }
    if wait > Duration::from_millis(5) {
        tokio::time::sleep_until((deadline - Duration::from_millis(3)).into()).await;
    }
    tokio::task::spawn_blocking(move || {
        let wait = deadline.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    })
    .await
    .context("the pacing thread failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_spreads_the_rate_over_producers() {
        let pace = Pace::new(100_000, 2).unwrap();
        // 50 000 records/s each: one every 20 µs.
        assert_eq!(pace.offset(0), Duration::ZERO);
        assert_eq!(pace.offset(1), Duration::from_micros(20));
        assert_eq!(pace.offset(50_000), Duration::from_secs(1));
        assert_eq!(pace.due(Duration::ZERO, 1000), 1);
        assert_eq!(pace.due(Duration::from_nanos(19_999), 1000), 1);
        assert_eq!(pace.due(Duration::from_micros(20), 1000), 2);
        assert_eq!(pace.due(Duration::from_secs(1), 1_000_000), 50_001);
        assert_eq!(pace.due(Duration::from_secs(100), 1000), 1000);
        assert!(Pace::new(0, 1).is_err());
    }

    #[test]
    fn due_and_offset_agree() {
        // A rate that does not divide a second evenly.
        let pace = Pace::new(7_000, 3).unwrap();
        for i in [0, 1, 2, 3, 999, 1_000, 12_345] {
            let at = pace.offset(i);
            assert_eq!(
                pace.due(at, u64::MAX),
                i + 1,
                "record {i} is due at its offset"
            );
            if let Some(before) = at.checked_sub(Duration::from_nanos(1)) {
                assert_eq!(
                    pace.due(before, u64::MAX),
                    i,
                    "record {i} not due before it"
                );
            }
        }
    }
}
