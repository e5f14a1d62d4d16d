//! Helpers shared by the cluster tests.

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::Config;

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
