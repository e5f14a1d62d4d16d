//! Helpers shared by the cluster tests.

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{Config, SnapshotPolicy};

/// The Raft timing of the tests: elections slow enough for a loaded 2-core machine.
pub(crate) fn config() -> Arc<Config> {
    Arc::new(
        Config {
            heartbeat_interval: 100,
            election_timeout_min: 500,
            election_timeout_max: 1000,
            ..Config::default()
        }
        .validate()
        .expect("a valid config"),
    )
}

/// Waits until `done` holds, failing after 15 s with `what`.
pub(crate) async fn until<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A partition group's Raft timing in the tests: [`config`]'s, with snapshots and purges
/// left to the caller, as a partition's retention decides them (docs/REPLICATION.md §7.5).
pub(crate) fn partition_config() -> Arc<Config> {
    Arc::new(
        Config {
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: 0,
            ..(*config()).clone()
        }
        .validate()
        .expect("a valid config"),
    )
}

/// The seeds a seeded test runs: `RILL_SEED=<n>` replays one, `RILL_SEEDS=<a>..<b>` a
/// range, else `default`.
pub(crate) fn seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    if let Ok(s) = std::env::var("RILL_SEED") {
        let seed: u64 = s.parse().expect("RILL_SEED is a number");
        return seed..seed + 1;
    }
    if let Ok(s) = std::env::var("RILL_SEEDS") {
        let (a, b) = s.split_once("..").expect("RILL_SEEDS is <a>..<b>");
        return a.parse().expect("a number")..b.parse().expect("a number");
    }
    default
}
