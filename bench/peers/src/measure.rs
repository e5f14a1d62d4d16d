//! Latency histograms and the result of one run, in the JSON shape `rill bench --json`
//! prints (so a Rill result is parsed and a peer's result built into the same type).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency recorded (longer counts as this): one hour, in µs.
const HIGHEST_US: u64 = 3_600_000_000;

/// A latency histogram in microseconds, 3 significant digits.
#[derive(Debug, Clone)]
pub(crate) struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub(crate) fn new() -> Self {
        Self(
            Histogram::new_with_bounds(1, HIGHEST_US, 3)
                .unwrap_or_else(|e| unreachable!("constant histogram bounds: {e}")),
        )
    }

    pub(crate) fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    pub(crate) fn record(&mut self, d: Duration) {
        self.record_us(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    pub(crate) fn merge(&mut self, other: &Self) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    pub(crate) fn summary(&self) -> LatencySummary {
        let h = &self.0;
        if h.is_empty() {
            return LatencySummary::default();
        }
        let q = |q: f64| h.value_at_quantile(q) as f64;
        LatencySummary {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: h.max() as f64,
        }
    }
}

/// Percentiles in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LatencySummary {
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) max: f64,
}

/// What one run of one workload on one system measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunResult {
    pub(crate) records: u64,
    pub(crate) bytes: u64,
    pub(crate) seconds: f64,
    pub(crate) records_per_s: f64,
    pub(crate) mb_per_s: f64,
    pub(crate) latency_us: LatencySummary,
}

impl RunResult {
    /// A result from counts, elapsed time and the headline latency histogram.
    pub(crate) fn new(records: u64, bytes: u64, elapsed: Duration, latency: &Latency) -> Self {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        Self {
            records,
            bytes,
            seconds,
            records_per_s: records as f64 / seconds,
            mb_per_s: bytes as f64 / 1e6 / seconds,
            latency_us: latency.summary(),
        }
    }
}

/// Microseconds since the Unix epoch (the send stamps e2e values carry).
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The send stamp in the first 8 bytes of an e2e value, if it has 8 bytes.
pub(crate) fn stamp_of(value: &[u8]) -> Option<u64> {
    value
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rill_bench_json() {
        let line = r#"{"workload":"produce","records":10,"bytes":1000,"seconds":0.5,
            "records_per_s":20.0,"mb_per_s":0.002,"latency_us":{"p50":1.0,"p90":2.0,
            "p99":3.0,"p999":4.0,"max":5.0,"mean":2.0,"samples":10},"size":100}"#;
        let r: RunResult = serde_json::from_str(line).unwrap();
        assert_eq!(r.records, 10);
        assert_eq!(r.latency_us.p99, 3.0);
    }

    #[test]
    fn summary_and_rates() {
        let mut l = Latency::new();
        for us in 1..=1000 {
            l.record_us(us);
        }
        let r = RunResult::new(1000, 1_000_000, Duration::from_millis(500), &l);
        assert_eq!(r.records_per_s, 2000.0);
        assert_eq!(r.mb_per_s, 2.0);
        assert!((r.latency_us.p99 - 990.0).abs() <= 1.0);
        assert_eq!(stamp_of(&7u64.to_le_bytes()), Some(7));
        assert_eq!(stamp_of(b"short"), None);
    }
}
