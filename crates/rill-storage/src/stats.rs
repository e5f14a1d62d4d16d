//! Process-wide fsync latency, for the server's `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the fsync-duration buckets, in seconds; a last `+Inf` bucket follows.
pub const FSYNC_BUCKETS_SECONDS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

static BUCKETS: [AtomicU64; 15] = [const { AtomicU64::new(0) }; 15];
static SUM_NANOS: AtomicU64 = AtomicU64::new(0);
static COUNT: AtomicU64 = AtomicU64::new(0);

pub(crate) fn observe_fsync(elapsed: Duration) {
    let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    let seconds = elapsed.as_secs_f64();
    let slot = FSYNC_BUCKETS_SECONDS.partition_point(|&b| b < seconds);
    BUCKETS[slot].fetch_add(1, Ordering::Relaxed);
    SUM_NANOS.fetch_add(nanos, Ordering::Relaxed);
    COUNT.fetch_add(1, Ordering::Relaxed);
}

/// A snapshot of every data fsync of this process so far.
#[derive(Debug, Clone, PartialEq)]
pub struct FsyncStats {
    /// Non-cumulative counts per bucket of [`FSYNC_BUCKETS_SECONDS`], then `+Inf`.
    pub buckets: [u64; 15],
    /// Total time spent in fsync, seconds.
    pub sum_seconds: f64,
    /// Number of fsyncs.
    pub count: u64,
}

/// The fsync latency histogram of this process.
pub fn fsync_stats() -> FsyncStats {
    FsyncStats {
        buckets: std::array::from_fn(|i| BUCKETS[i].load(Ordering::Relaxed)),
        sum_seconds: SUM_NANOS.load(Ordering::Relaxed) as f64 / 1e9,
        count: COUNT.load(Ordering::Relaxed),
    }
}
