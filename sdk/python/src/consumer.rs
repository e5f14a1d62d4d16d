//! Named consumers of one partition (`rill_client::Consumer`), and the options they
//! share with group members: where to start and when to store offsets.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rill_client::{ClientError, CommitPolicy, Consumer, ConsumerBuilder, Position, StartAt, Topic};
use tokio::sync::watch;

use crate::convert::{Kwargs, PyRecord};
use crate::error::{invalid, to_py};
use crate::runtime::{InRuntime, spawn};

/// The options both kinds of consumer take.
#[derive(Debug, Clone, Default)]
pub(crate) struct Common {
    pub(crate) batch_length: Option<u32>,
    pub(crate) poll_interval_ms: Option<u64>,
    pub(crate) start_at: Option<StartAt>,
    pub(crate) allow_replay: bool,
    pub(crate) commit_policy: Option<CommitPolicy>,
    pub(crate) max_wait_ms: Option<u64>,
    pub(crate) polling_retry_interval_ms: Option<u64>,
}

impl Common {
    /// Takes the shared options out of `kw`.
    pub(crate) fn take(kw: &mut Kwargs<'_>, py: Python<'_>) -> PyResult<Self> {
        let polling: Option<String> = kw.take("polling")?;
        let offset: Option<u64> = kw.take("offset")?;
        let timestamp_micros: Option<i64> = kw.take("timestamp_micros")?;
        let auto_commit: Option<String> = kw.take("auto_commit")?;
        let commit_interval_ms: Option<u64> = kw.take("commit_interval_ms")?;
        let commit_every: Option<u32> = kw.take("commit_every")?;
        let start_at = start_at(polling.as_deref(), offset, timestamp_micros);
        let commit_policy = commit_policy(auto_commit.as_deref(), commit_interval_ms, commit_every);
        Ok(Self {
            batch_length: kw.take("batch_length")?,
            poll_interval_ms: kw.take("poll_interval_ms")?,
            start_at: start_at.map_err(|e| to_py(py, e))?,
            allow_replay: kw.take("allow_replay")?.unwrap_or(false),
            commit_policy: commit_policy.map_err(|e| to_py(py, e))?,
            max_wait_ms: kw.take("max_wait_ms")?,
            polling_retry_interval_ms: kw.take("polling_retry_interval_ms")?,
        })
    }
}

/// Where to start: `polling` names a `StartAt` variant (`first`, `last`, `end`, `next`,
/// `offset`, `timestamp`), `offset` and `timestamp_micros` give the value of the last
/// two (either alone implies its variant).
pub(crate) fn start_at(
    polling: Option<&str>,
    offset: Option<u64>,
    timestamp_micros: Option<i64>,
) -> Result<Option<StartAt>, ClientError> {
    let extra = |what: &str| {
        Err(invalid(format!(
            "polling={what:?} takes neither offset nor timestamp_micros"
        )))
    };
    match (polling, offset, timestamp_micros) {
        (_, Some(_), Some(_)) => Err(invalid("give offset or timestamp_micros, not both")),
        (None, None, None) => Ok(None),
        (None | Some("offset"), Some(n), None) => Ok(Some(StartAt::Offset(n))),
        (None | Some("timestamp"), None, Some(t)) => Ok(Some(StartAt::TimestampMicros(t))),
        (Some("offset"), None, None) => Err(invalid("polling=\"offset\" needs offset=")),
        (Some("timestamp"), None, None) => {
            Err(invalid("polling=\"timestamp\" needs timestamp_micros="))
        }
        (Some(p @ ("first" | "last" | "end" | "next")), None, None) => Ok(Some(match p {
            "first" => StartAt::First,
            "last" => StartAt::Last,
            "end" => StartAt::End,
            _ => StartAt::Next,
        })),
        (Some(p @ ("first" | "last" | "end" | "next" | "offset" | "timestamp")), _, _) => extra(p),
        (Some(other), _, _) => Err(invalid(format!(
            "polling {other:?}: expected \"first\", \"last\", \"end\", \"next\", \"offset\" or \"timestamp\""
        ))),
    }
}

/// The commit policy `auto_commit` names (a `CommitPolicy` variant in snake case), with
/// `commit_interval_ms` for the `interval…` ones and `commit_every` for the `…every`
/// ones. Zero intervals and counts are refused by the SDK when the consumer is built.
pub(crate) fn commit_policy(
    auto_commit: Option<&str>,
    interval_ms: Option<u64>,
    every: Option<u32>,
) -> Result<Option<CommitPolicy>, ClientError> {
    let Some(name) = auto_commit else {
        if interval_ms.is_some() || every.is_some() {
            return Err(invalid(
                "commit_interval_ms and commit_every go with an auto_commit policy",
            ));
        }
        return Ok(None);
    };
    let wants_interval = name.starts_with("interval");
    let wants_every = name.ends_with("every");
    let interval = match (wants_interval, interval_ms) {
        (true, Some(ms)) => Duration::from_millis(ms),
        (true, None) => {
            return Err(invalid(format!(
                "auto_commit={name:?} needs commit_interval_ms"
            )));
        }
        (false, Some(_)) => {
            return Err(invalid(format!(
                "auto_commit={name:?} takes no commit_interval_ms"
            )));
        }
        (false, None) => Duration::ZERO,
    };
    let n = match (wants_every, every) {
        (true, Some(n)) => n,
        (true, None) => return Err(invalid(format!("auto_commit={name:?} needs commit_every"))),
        (false, Some(_)) => {
            return Err(invalid(format!(
                "auto_commit={name:?} takes no commit_every"
            )));
        }
        (false, None) => 0,
    };
    let policy = match name {
        "disabled" => CommitPolicy::Disabled,
        "interval" => CommitPolicy::Interval(interval),
        "polling" => CommitPolicy::Polling,
        "interval_or_polling" => CommitPolicy::IntervalOrPolling(interval),
        "all" => CommitPolicy::All,
        "interval_or_all" => CommitPolicy::IntervalOrAll(interval),
        "each" => CommitPolicy::Each,
        "interval_or_each" => CommitPolicy::IntervalOrEach(interval),
        "every" => CommitPolicy::Every(n),
        "interval_or_every" => CommitPolicy::IntervalOrEvery(interval, n),
        other => {
            return Err(invalid(format!(
                "auto_commit {other:?}: expected one of disabled, interval, polling, \
                 interval_or_polling, all, interval_or_all, each, interval_or_each, every, \
                 interval_or_every"
            )));
        }
    };
    policy.validate()?;
    Ok(Some(policy))
}

/// A timeout in seconds, as Python gives one.
pub(crate) fn timeout_of(seconds: f64) -> Result<Duration, ClientError> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        invalid(format!(
            "a timeout is a finite number of seconds >= 0, not {seconds}"
        ))
    })
}

/// Named-consumer options, as `topic.consumer(name, partition, **options)` takes them.
#[derive(Debug, Clone)]
pub(crate) struct ConsumerOptions {
    common: Common,
    max_bytes: Option<u32>,
}

impl ConsumerOptions {
    /// Options from keyword arguments; unknown names and bad values are errors.
    pub(crate) fn from_py(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut kw = Kwargs::new(py, "consumer", options)?;
        let common = Common::take(&mut kw, py)?;
        let max_bytes = kw.take("max_bytes")?;
        kw.finish()?;
        Ok(Self { common, max_bytes })
    }

    fn builder(&self, topic: &Topic, name: &str, partition: u32) -> ConsumerBuilder {
        let c = &self.common;
        let mut b = topic.consumer(name, partition);
        if let Some(n) = c.batch_length {
            b = b.batch_length(n);
        }
        if let Some(ms) = c.poll_interval_ms {
            b = b.poll_interval(Duration::from_millis(ms));
        }
        if let Some(start) = c.start_at {
            b = b.start_at(start);
        }
        if c.allow_replay {
            b = b.allow_replay();
        }
        if let Some(policy) = c.commit_policy {
            b = b.commit_policy(policy);
        }
        if let Some(ms) = c.max_wait_ms {
            b = b.max_wait(Duration::from_millis(ms));
        }
        if let Some(n) = self.max_bytes {
            b = b.max_bytes(n);
        }
        if let Some(ms) = c.polling_retry_interval_ms {
            b = b.polling_retry_interval(Duration::from_millis(ms));
        }
        b
    }
}

/// The lifecycle of a consumer: not built yet, running, or shut down.
#[derive(Debug)]
pub(crate) enum State<C> {
    New,
    Running(InRuntime<C>),
    ShutDown,
}

impl<C> State<C> {
    /// The running consumer, or why there is none.
    pub(crate) fn running(&mut self) -> Result<&mut C, ClientError> {
        match self {
            State::Running(c) => c.get_mut().ok_or(ClientError::Shutdown),
            State::New => Err(invalid(
                "the consumer is not initialized: await init() first",
            )),
            State::ShutDown => Err(ClientError::Shutdown),
        }
    }
}

/// What a consumer shares between the calls made on it: its state behind a lock that
/// one call holds at a time, and the flag that `shutdown` raises to end a `next` that
/// waits for records.
#[derive(Debug)]
pub(crate) struct Shared<C> {
    pub(crate) state: tokio::sync::Mutex<State<C>>,
    stop: watch::Sender<bool>,
}

impl<C: Send + 'static> Shared<C> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: tokio::sync::Mutex::new(State::New),
            stop: watch::channel(false).0,
        })
    }

    /// Raises the stop flag: `next` calls waiting now and later end.
    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// The consumer, if it runs, no call holds it and the stop flag is down: for the
    /// calls that do not wait (`try_next`).
    pub(crate) fn try_running(&self) -> Option<tokio::sync::MutexGuard<'_, State<C>>> {
        if *self.stop.borrow() {
            return None;
        }
        let mut state = self.state.try_lock().ok()?;
        state.running().ok()?;
        Some(state)
    }

    /// Up to `max` records of `try_next` while the consumer runs, no call holds it and
    /// the stop flag is down (`try_take`).
    pub(crate) fn try_take(
        &self,
        max: usize,
        mut try_next: impl FnMut(&mut C) -> Option<rill_client::Record>,
    ) -> Vec<PyRecord> {
        let Some(mut state) = self.try_running() else {
            return Vec::new();
        };
        let Ok(c) = state.running() else {
            return Vec::new();
        };
        std::iter::from_fn(|| try_next(c))
            .take(max)
            .map(PyRecord)
            .collect()
    }

    /// The consumer's state, locked, with the stop flag to watch while waiting on
    /// it; `None` if the stop flag is raised first (a `next` waiting for another call
    /// ends when `shutdown` is called).
    pub(crate) async fn lock_unless_stopped(
        &self,
    ) -> Option<(tokio::sync::MutexGuard<'_, State<C>>, watch::Receiver<bool>)> {
        let mut stop = self.stop.subscribe();
        if *stop.borrow() {
            return None;
        }
        let state = tokio::select! {
            state = self.state.lock() => state,
            _ = stop.wait_for(|s| *s) => return None,
        };
        Some((state, stop))
    }
}

/// Waits for `future` unless the stop flag is raised first (then `None`). Only for
/// cancel-safe work: the SDK's `next` is.
pub(crate) async fn unless_stopped<T>(
    stop: &mut watch::Receiver<bool>,
    future: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        r = future => Some(r),
        _ = stop.wait_for(|s| *s) => None,
    }
}

/// What a consumer reports about itself while a call holds it (`last_*_offset`).
#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    last_consumed: Option<u64>,
    last_stored: Option<u64>,
}

/// A named consumer of one partition whose offsets the broker stores.
#[pyclass(frozen, module = "rill._native", name = "Consumer")]
#[derive(Debug)]
pub(crate) struct PyConsumer {
    topic: Topic,
    name: String,
    partition: u32,
    options: ConsumerOptions,
    shared: Arc<Shared<Consumer>>,
    snapshot: Arc<parking_lot::Mutex<Snapshot>>,
}

impl PyConsumer {
    pub(crate) fn new(
        topic: Topic,
        name: String,
        partition: u32,
        options: ConsumerOptions,
    ) -> Self {
        Self {
            topic,
            name,
            partition,
            options,
            shared: Shared::new(),
            snapshot: Arc::new(parking_lot::Mutex::new(Snapshot::default())),
        }
    }
}

fn snapshot_of(c: &Consumer, partition: u32) -> Snapshot {
    Snapshot {
        last_consumed: c.last_consumed_offset(partition),
        last_stored: c.last_stored_offset(partition),
    }
}

#[pymethods]
impl PyConsumer {
    /// The consumer's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The partition it reads.
    #[getter]
    fn partition(&self) -> u32 {
        self.partition
    }

    /// Validates the options, reads the stored offset and resolves the start. Calling
    /// it again does nothing.
    fn init<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let builder = self
            .options
            .builder(&self.topic, &self.name, self.partition);
        let (shared, snapshot, p) = self.parts();
        spawn(py, async move {
            let mut state = shared.state.lock().await;
            match &*state {
                State::Running(_) => Ok(()),
                State::ShutDown => Err(ClientError::Shutdown),
                State::New => {
                    let consumer = builder.build().await?;
                    *snapshot.lock() = snapshot_of(&consumer, p);
                    *state = State::Running(InRuntime::new(consumer));
                    Ok(())
                }
            }
        })
    }

    /// The next record as a tuple, waiting for one; `None` after `shutdown()` (which
    /// also ends a `next()` that is waiting).
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot, p) = self.parts();
        spawn(py, async move {
            Ok(next(&shared, &snapshot, p).await?.map(PyRecord))
        })
    }

    /// The next record if one was fetched already and nothing must be stored first,
    /// without an awaitable; else `None`, and `next()` is needed. Hands out as
    /// `next()` does (`rill_client::Consumer::try_next`).
    fn try_next(&self) -> Option<PyRecord> {
        let mut state = self.shared.try_running()?;
        state.running().ok()?.try_next().map(PyRecord)
    }

    /// Up to `max` records as `try_next` hands them out, in one call (`poll()` in
    /// Python): it stops where a store is due, and an empty list says `next()` is needed.
    fn try_take(&self, max: usize) -> Vec<PyRecord> {
        self.shared.try_take(max, Consumer::try_next)
    }

    /// Like `next()`, raising `TimeoutError` if no record arrives within `timeout`
    /// seconds, and `ShutdownError` after `shutdown()`.
    fn next_within<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let timeout = timeout_of(timeout).map_err(|e| to_py(py, e))?;
        let (shared, snapshot, p) = self.parts();
        spawn(py, async move {
            match tokio::time::timeout(timeout, next(&shared, &snapshot, p)).await {
                Ok(record) => record?.map(PyRecord).ok_or(ClientError::Shutdown),
                Err(_) => Err(ClientError::Timeout(timeout)),
            }
        })
    }

    /// Stores the record at `offset` of `partition` as consumed (a restart resumes after
    /// it); the record handed out last counts as handled from then on.
    fn commit<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        offset: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot, p) = self.parts();
        spawn(py, async move {
            let mut state = shared.state.lock().await;
            let c = state.running()?;
            let result = c.store_offset(Position::new(partition, offset)).await;
            *snapshot.lock() = snapshot_of(c, p);
            result
        })
    }

    /// Deletes the stored offset of `partition`.
    fn delete_offset<'py>(&self, py: Python<'py>, partition: u32) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot, p) = self.parts();
        spawn(py, async move {
            let mut state = shared.state.lock().await;
            let c = state.running()?;
            let result = c.delete_offset(partition).await;
            *snapshot.lock() = snapshot_of(c, p);
            result
        })
    }

    /// The offset of the last record handed out of `partition`.
    fn last_consumed_offset(&self, partition: u32) -> Option<u64> {
        if partition != self.partition {
            return None;
        }
        self.snapshot_now().last_consumed
    }

    /// The last offset of `partition` stored as consumed, as this consumer knows it.
    fn last_stored_offset(&self, partition: u32) -> Option<u64> {
        if partition != self.partition {
            return None;
        }
        self.snapshot_now().last_stored
    }

    /// Stops: a waiting `next()` ends, the record handed out last counts as handled,
    /// and the final offset is stored as the policy says. Again: nothing.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot, p) = self.parts();
        spawn(py, async move {
            shared.stop();
            let mut state = shared.state.lock().await;
            let result = match &mut *state {
                State::Running(c) => match c.get_mut() {
                    Some(consumer) => {
                        let r = consumer.shutdown().await;
                        *snapshot.lock() = snapshot_of(consumer, p);
                        r
                    }
                    None => Ok(()),
                },
                State::New | State::ShutDown => Ok(()),
            };
            *state = State::ShutDown;
            result
        })
    }
}

impl PyConsumer {
    /// What the awaitables share.
    fn parts(
        &self,
    ) -> (
        Arc<Shared<Consumer>>,
        Arc<parking_lot::Mutex<Snapshot>>,
        u32,
    ) {
        (
            Arc::clone(&self.shared),
            Arc::clone(&self.snapshot),
            self.partition,
        )
    }

    /// The consumer's offsets now if no call holds it, else as of the last call.
    fn snapshot_now(&self) -> Snapshot {
        if let Ok(mut state) = self.shared.state.try_lock()
            && let Ok(c) = state.running()
        {
            let now = snapshot_of(c, self.partition);
            *self.snapshot.lock() = now;
            return now;
        }
        *self.snapshot.lock()
    }
}

/// The next record of a named consumer, or `None` once it is shut down.
async fn next(
    shared: &Shared<Consumer>,
    snapshot: &parking_lot::Mutex<Snapshot>,
    partition: u32,
) -> Result<Option<rill_client::Record>, ClientError> {
    let Some((mut state, mut stop)) = shared.lock_unless_stopped().await else {
        return Ok(None);
    };
    let c = state.running()?;
    // Records handed out by `try_next` since the last call count for `last_*_offset`
    // while this one waits.
    *snapshot.lock() = snapshot_of(c, partition);
    let next = unless_stopped(&mut stop, c.next()).await;
    *snapshot.lock() = snapshot_of(c, partition);
    next.flatten().transpose()
}
