//! The tasks of one run and their coordinator: the start signal of the measured phase,
//! the state the tasks share, what each measured, and waiting on them.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{POLL, STALL};
use crate::measure::{Latency, now_us};

/// The instant a phase starts, with the same moment in µs since the Unix epoch (for the
/// stamps e2e values carry).
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    pub(super) at: Instant,
    pub(super) epoch_us: u64,
}

impl Start {
    pub(super) fn now() -> Self {
        Self {
            at: Instant::now(),
            epoch_us: now_us(),
        }
    }
}

/// What a phase measured: merged latency, and when it started and ended.
#[derive(Debug)]
pub(super) struct Measured {
    pub(super) latency: Latency,
    pub(super) start: Instant,
    pub(super) end: Instant,
}

impl Measured {
    /// Merges the tasks' latencies; the end is the last task's (or `start`).
    pub(super) fn merge(start: Instant, outs: &[Outcome]) -> Self {
        let mut latency = Latency::new();
        let mut end = start;
        for out in outs {
            latency.merge(&out.latency);
            end = end.max(out.end.unwrap_or(start));
        }
        Self {
            latency,
            start,
            end,
        }
    }
}

/// What one task of a run measured.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) latency: Latency,
    /// When it finished its measured work.
    pub(super) end: Option<Instant>,
    /// Records sent to each partition (fill).
    pub(super) per_partition: Vec<u64>,
}

/// State the tasks of one run share with the coordinator.
#[derive(Debug)]
pub(super) struct Shared {
    /// Tasks done with their warm-up (or fill).
    pub(super) warmed: AtomicU32,
    /// Records received by all followers (e2e).
    pub(super) received: AtomicU64,
    /// Milliseconds since `origin` of the last receipt (e2e), for stall detection.
    progress_ms: AtomicU64,
    origin: Instant,
}

impl Shared {
    pub(super) fn new() -> Self {
        Self {
            warmed: AtomicU32::new(0),
            received: AtomicU64::new(0),
            progress_ms: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    pub(super) fn mark_progress(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.progress_ms.fetch_max(ms, Ordering::Relaxed);
    }

    pub(super) fn since_progress(&self) -> Duration {
        self.origin.elapsed().saturating_sub(Duration::from_millis(
            self.progress_ms.load(Ordering::Relaxed),
        ))
    }
}

/// Waits for the start signal of the measured phase.
pub(super) async fn started(rx: &mut watch::Receiver<Option<Start>>) -> anyhow::Result<Start> {
    let start = rx
        .wait_for(Option::is_some)
        .await
        .context("the run was abandoned before its measured phase")?;
    start.ok_or_else(|| anyhow::anyhow!("start signal without a start"))
}

/// Moves a finished task's outcome into `done`, or returns its error.
pub(super) fn collect(
    joined: Option<Result<anyhow::Result<Outcome>, tokio::task::JoinError>>,
    done: &mut Vec<Outcome>,
) -> anyhow::Result<()> {
    match joined {
        None => Ok(()),
        Some(Ok(Ok(out))) => {
            done.push(out);
            Ok(())
        }
        Some(Ok(Err(e))) => Err(e),
        Some(Err(e)) => Err(anyhow::anyhow!("a benchmark task failed: {e}")),
    }
}

/// Waits until `ready()`, failing as soon as a task fails.
pub(super) async fn wait_until(
    set: &mut JoinSet<anyhow::Result<Outcome>>,
    done: &mut Vec<Outcome>,
    what: &str,
    ready: impl Fn() -> bool,
) -> anyhow::Result<()> {
    let began = Instant::now();
    while !ready() {
        tokio::select! {
            r = set.join_next(), if !set.is_empty() => collect(r, done)?,
            () = tokio::time::sleep(POLL) => {}
        }
        if set.is_empty() && !ready() {
            anyhow::bail!("every task ended before {what} was over");
        }
        // Every task has its own stall timeout; this only guards against a bug.
        anyhow::ensure!(
            began.elapsed() < 10 * STALL,
            "{what} did not end within {:?}",
            10 * STALL
        );
    }
    Ok(())
}

/// Waits for every task, failing on the first error.
pub(super) async fn finish(
    set: &mut JoinSet<anyhow::Result<Outcome>>,
    done: &mut Vec<Outcome>,
) -> anyhow::Result<()> {
    while let Some(r) = set.join_next().await {
        collect(Some(r), done)?;
    }
    Ok(())
}
