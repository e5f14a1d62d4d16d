//! Executing one key's plan (docs/EVENTS.md §3.3): segments in order, each stage's runs
//! at once, each run's chunks one after the other, transient failures retried in place.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use crate::handler::{Context, ErrorKind};
use crate::header::ErrorClass;
use crate::plan::{Failure, KeyPlan, Rank};
use crate::registry::{Erased, Prepared};

/// The handlers of a consumer, by tag.
pub(crate) type Handlers = std::collections::HashMap<u32, Arc<dyn Erased>>;

/// A run ready to execute: its handler's entry and the decoded, reduced items.
#[derive(Clone)]
pub(crate) struct ReadyRun {
    /// The handler's event type's tag and algebra (for re-encoding into the retry
    /// topic).
    pub(crate) tag: u32,
    pub(crate) algebra: crate::Algebra,
    pub(crate) items: Arc<dyn Prepared>,
}

/// One key's work: its plan with every run prepared, and the context of its calls.
pub(crate) struct KeyWork {
    pub(crate) key: Bytes,
    pub(crate) key_hash: u64,
    pub(crate) partition: u32,
    pub(crate) attempt: u32,
    pub(crate) first_failure: Option<SystemTime>,
    pub(crate) plan: KeyPlan,
    /// Every run of the plan, prepared, in execution order: by segment, then stage
    /// (as `Segment::stages`), then position in the stage. One list, so a key of one
    /// run (the usual case) costs one.
    pub(crate) runs: smallvec::SmallVec<[StagedRun; 1]>,
}

/// A prepared run and where it is in its key's plan.
pub(crate) struct StagedRun {
    pub(crate) segment: usize,
    pub(crate) rank: Rank,
    /// Its position among the runs of its stage.
    pub(crate) index: usize,
    pub(crate) run: ReadyRun,
}

impl KeyWork {
    /// The prepared run of a piece.
    pub(crate) fn run(&self, segment: usize, rank: Rank, run: usize) -> &ReadyRun {
        &self
            .runs
            .iter()
            .find(|r| r.segment == segment && r.rank == rank && r.index == run)
            .expect("a piece names a run of the plan")
            .run
    }
}

/// What the limits of in-place retries are.
#[derive(Debug, Clone)]
pub(crate) struct Retrying {
    pub(crate) transient_max: u32,
    pub(crate) delays: Vec<Duration>,
}

/// A chunk that went to the dead-letter topic as unrecoverable.
pub(crate) struct DeadChunk {
    pub(crate) run: ReadyRun,
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) error: String,
}

/// How a key's execution ended.
pub(crate) struct KeyOutcome {
    pub(crate) key: Bytes,
    /// The work, while anything of it is to be written (`None` once released: done
    /// with nothing failed or dead).
    pub(crate) work: Option<KeyWork>,
    /// Where it stopped, the class and text of the first error, if it did.
    pub(crate) failure: Option<(Failure, ErrorClass, String)>,
    pub(crate) dead: Vec<DeadChunk>,
    /// Events handled (items of completed chunks).
    pub(crate) handled: u64,
    /// Handler calls and their total time.
    pub(crate) calls: u64,
    pub(crate) call_time: Duration,
}

impl KeyOutcome {
    /// Drops the work if nothing of it is to be written, where the key ran (so the
    /// partition's task does not spend its time freeing it).
    pub(crate) fn release_if_done(&mut self) {
        if self.failure.is_none() && self.dead.is_empty() {
            self.work = None;
        }
    }
}

enum RunEnd {
    Completed,
    Failed {
        done: usize,
        class: ErrorClass,
        error: String,
    },
}

struct RunResult {
    end: RunEnd,
    dead: Vec<DeadChunk>,
    handled: u64,
    calls: u64,
    call_time: Duration,
}

async fn run_one(
    run: &ReadyRun,
    handlers: &Handlers,
    base: &Context,
    retrying: &Retrying,
) -> RunResult {
    let handler = &*handlers[&run.tag];
    let len = run.items.len();
    let step = run.items.max_batch().max(1);
    let mut result = RunResult {
        end: RunEnd::Completed,
        dead: Vec::new(),
        handled: 0,
        calls: 0,
        call_time: Duration::ZERO,
    };
    let mut start = 0;
    while start < len {
        let range = start..(start + step).min(len);
        let mut ctx = base.clone();
        let (first, last) = range
            .clone()
            .map(|i| run.items.source(i))
            .fold((u64::MAX, 0), |(f, l), s| (f.min(s.first), l.max(s.last)));
        ctx.offsets = (first, last);
        let mut transient = 0u32;
        loop {
            let began = Instant::now();
            let outcome = handler.call(&*run.items, &ctx, range.clone()).await;
            result.calls += 1;
            result.call_time += began.elapsed();
            match outcome {
                Ok(()) => {
                    result.handled += range.len() as u64;
                    break;
                }
                Err(e)
                    if e.kind() == ErrorKind::Transient && transient < retrying.transient_max =>
                {
                    let i = (transient as usize).min(retrying.delays.len().saturating_sub(1));
                    let delay = retrying.delays.get(i).copied().unwrap_or(Duration::ZERO);
                    tracing::debug!(error = %e, attempt = transient + 1, "transient failure; calling the chunk again");
                    transient += 1;
                    tokio::time::sleep(delay).await;
                }
                Err(e) => {
                    let class = match e.kind() {
                        ErrorKind::Transient => ErrorClass::Transient,
                        ErrorKind::Retryable => ErrorClass::Retryable,
                        ErrorKind::Unrecoverable => {
                            result.dead.push(DeadChunk {
                                run: run.clone(),
                                range: range.clone(),
                                error: e.to_string(),
                            });
                            break;
                        }
                    };
                    result.end = RunEnd::Failed {
                        done: start,
                        class,
                        error: e.to_string(),
                    };
                    return result;
                }
            }
        }
        start = range.end;
    }
    result
}

/// Executes a key's work to its end or its first failing stage.
pub(crate) async fn run_key(work: KeyWork, handlers: &Handlers, retrying: &Retrying) -> KeyOutcome {
    let base = Context {
        key: work.key.clone(),
        key_hash: work.key_hash,
        partition: work.partition,
        offsets: (0, 0),
        attempt: work.attempt,
        first_failure: work.first_failure,
    };
    let mut dead = Vec::new();
    let (mut handled, mut calls, mut call_time) = (0, 0, Duration::ZERO);
    let mut failure = None;
    let mut at = 0;
    while at < work.runs.len() {
        // The stage: the runs of one segment and rank, executed at once.
        let (s, rank) = (work.runs[at].segment, work.runs[at].rank);
        let len = work.runs[at..]
            .iter()
            .take_while(|r| r.segment == s && r.rank == rank)
            .count();
        let stage = &work.runs[at..at + len];
        at += len;
        let (one, several) = if let [one] = stage {
            // One run: no join to set up, no list of results.
            (
                Some(run_one(&one.run, handlers, &base, retrying).await),
                Vec::new(),
            )
        } else {
            let all = stage
                .iter()
                .map(|r| run_one(&r.run, handlers, &base, retrying));
            (None, futures_join_all(all).await)
        };
        let results = one.into_iter().chain(several);
        let mut failed = Vec::new();
        let mut first_error: Option<(ErrorClass, String)> = None;
        for (i, r) in results.enumerate() {
            if !r.dead.is_empty() {
                dead.extend(r.dead);
            }
            handled += r.handled;
            calls += r.calls;
            call_time += r.call_time;
            if let RunEnd::Failed { done, class, error } = r.end {
                failed.push((i, done));
                first_error.get_or_insert((class, error));
            }
        }
        if let Some((class, error)) = first_error {
            failure = Some((
                Failure {
                    segment: s,
                    rank,
                    failed,
                },
                class,
                error,
            ));
            break;
        }
    }
    KeyOutcome {
        key: work.key.clone(),
        work: Some(work),
        failure,
        dead,
        handled,
        calls,
        call_time,
    }
}

/// Runs the futures at once in this task and waits for all of them.
async fn futures_join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    futures::future::join_all(futures).await
}
