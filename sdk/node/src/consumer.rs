//! Named consumers of one partition (`rill_client::Consumer`), and what they share with
//! group members: options, and the one async lock every call takes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;
use rill_client::{
    ClientError, CommitPolicy, Consumer, ConsumerBuilder, Position, Record, StartAt, Topic,
};
use tokio::sync::watch;

use crate::convert::{PackedRecords, RecordOut, offset_in, offset_out, pack_records, record_out};
use crate::error::{invalid, to_napi};
use crate::runtime::{Cancel, Canceller, Fail, InRuntime, spawn};

/// The options both kinds of consumer take (JS flattens `startFrom` and
/// `commitPolicy` into these).
#[napi(object)]
#[derive(Debug, Default, Clone)]
pub struct CommonOptions {
    pub batch_length: Option<u32>,
    pub poll_interval_ms: Option<u32>,
    /// `first`, `last`, `next`, `offset` or `timestamp`.
    pub start_kind: Option<String>,
    pub start_offset: Option<i64>,
    pub start_timestamp_micros: Option<i64>,
    pub allow_replay: Option<bool>,
    /// A `CommitPolicy` variant in camelCase (`disabled`, `intervalOrEvery`, ...).
    pub commit_policy: Option<String>,
    pub commit_interval_ms: Option<u32>,
    pub commit_every: Option<u32>,
    pub max_wait_ms: Option<u32>,
    pub polling_retry_interval_ms: Option<u32>,
}

/// Named-consumer options.
#[napi(object)]
#[derive(Debug, Default)]
pub struct ConsumerOptions {
    pub common: Option<CommonOptions>,
    pub max_bytes: Option<u32>,
}

fn ms(n: u32) -> Duration {
    Duration::from_millis(u64::from(n))
}

/// Where to start, from its parts.
pub(crate) fn start_at(c: &CommonOptions) -> Result<Option<StartAt>, ClientError> {
    let kind = c.start_kind.as_deref();
    match (kind, c.start_offset, c.start_timestamp_micros) {
        (None, None, None) => Ok(None),
        (Some("first"), None, None) => Ok(Some(StartAt::First)),
        (Some("last"), None, None) => Ok(Some(StartAt::Last)),
        (Some("end"), None, None) => Ok(Some(StartAt::End)),
        (Some("next"), None, None) => Ok(Some(StartAt::Next)),
        (Some("offset"), Some(n), None) => {
            Ok(Some(StartAt::Offset(offset_in("startFrom.offset", n)?)))
        }
        (Some("timestamp"), None, Some(t)) => Ok(Some(StartAt::TimestampMicros(t))),
        (Some("offset"), None, _) => Err(invalid("startFrom { kind: \"offset\" } needs offset")),
        (Some("timestamp"), _, None) => Err(invalid(
            "startFrom { kind: \"timestamp\" } needs timestampMicros",
        )),
        (Some(k @ ("first" | "last" | "end" | "next" | "offset" | "timestamp")), _, _) => {
            Err(invalid(format!(
                "startFrom {{ kind: {k:?} }} takes only the field of its kind"
            )))
        }
        (Some(other), _, _) => Err(invalid(format!(
            "startFrom kind {other:?}: expected \"first\", \"last\", \"end\", \"next\", \"offset\" or \"timestamp\""
        ))),
        (None, _, _) => Err(invalid("startFrom needs a kind")),
    }
}

/// The commit policy `name` names, with its interval and count.
pub(crate) fn commit_policy(c: &CommonOptions) -> Result<Option<CommitPolicy>, ClientError> {
    let Some(name) = c.commit_policy.as_deref() else {
        if c.commit_interval_ms.is_some() || c.commit_every.is_some() {
            return Err(invalid("intervalMs and every go with a commit policy kind"));
        }
        return Ok(None);
    };
    let wants_interval = name.starts_with("interval");
    let wants_every = name == "every" || name.ends_with("Every");
    let interval = match (wants_interval, c.commit_interval_ms) {
        (true, Some(t)) => ms(t),
        (true, None) => return Err(invalid(format!("commit policy {name:?} needs intervalMs"))),
        (false, Some(_)) => {
            return Err(invalid(format!(
                "commit policy {name:?} takes no intervalMs"
            )));
        }
        (false, None) => Duration::ZERO,
    };
    let n = match (wants_every, c.commit_every) {
        (true, Some(n)) => n,
        (true, None) => return Err(invalid(format!("commit policy {name:?} needs every"))),
        (false, Some(_)) => return Err(invalid(format!("commit policy {name:?} takes no every"))),
        (false, None) => 0,
    };
    let policy = match name {
        "disabled" => CommitPolicy::Disabled,
        "interval" => CommitPolicy::Interval(interval),
        "polling" => CommitPolicy::Polling,
        "intervalOrPolling" => CommitPolicy::IntervalOrPolling(interval),
        "all" => CommitPolicy::All,
        "intervalOrAll" => CommitPolicy::IntervalOrAll(interval),
        "each" => CommitPolicy::Each,
        "intervalOrEach" => CommitPolicy::IntervalOrEach(interval),
        "every" => CommitPolicy::Every(n),
        "intervalOrEvery" => CommitPolicy::IntervalOrEvery(interval, n),
        other => {
            return Err(invalid(format!(
                "commit policy {other:?}: expected one of disabled, interval, polling, \
                 intervalOrPolling, all, intervalOrAll, each, intervalOrEach, every, \
                 intervalOrEvery"
            )));
        }
    };
    policy.validate()?;
    Ok(Some(policy))
}

/// The SDK's builder of a named consumer.
pub(crate) fn builder(
    topic: &Topic,
    name: &str,
    partition: u32,
    o: ConsumerOptions,
) -> napi::Result<ConsumerBuilder> {
    let c = o.common.unwrap_or_default();
    let start = start_at(&c).map_err(to_napi)?;
    let policy = commit_policy(&c).map_err(to_napi)?;
    let mut b = topic.consumer(name, partition);
    if let Some(n) = c.batch_length {
        b = b.batch_length(n);
    }
    if let Some(t) = c.poll_interval_ms {
        b = b.poll_interval(ms(t));
    }
    if let Some(start) = start {
        b = b.start_at(start);
    }
    if c.allow_replay.unwrap_or(false) {
        b = b.allow_replay();
    }
    if let Some(policy) = policy {
        b = b.commit_policy(policy);
    }
    if let Some(t) = c.max_wait_ms {
        b = b.max_wait(ms(t));
    }
    if let Some(n) = o.max_bytes {
        b = b.max_bytes(n);
    }
    if let Some(t) = c.polling_retry_interval_ms {
        b = b.polling_retry_interval(ms(t));
    }
    Ok(b)
}

/// What a consumer shares between the calls made on it: the consumer behind one lock
/// that one call holds at a time (`None` once shut down), and the flag that `shutdown`
/// raises to end a `next` that waits for records.
#[derive(Debug)]
pub(crate) struct Shared<C> {
    pub(crate) state: tokio::sync::Mutex<InRuntime<C>>,
    stop: watch::Sender<bool>,
}

impl<C: Send + 'static> Shared<C> {
    pub(crate) fn new(consumer: C) -> Arc<Self> {
        Arc::new(Self {
            state: tokio::sync::Mutex::new(InRuntime::new(consumer)),
            stop: watch::channel(false).0,
        })
    }

    /// Raises the stop flag: `next` calls waiting now and later end.
    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// The consumer, if it runs, no call holds it and the stop flag is down: for the
    /// calls that do not wait (`tryNext`).
    pub(crate) fn try_running(&self) -> Option<tokio::sync::MutexGuard<'_, InRuntime<C>>> {
        if *self.stop.borrow() {
            return None;
        }
        let state = self.state.try_lock().ok()?;
        state.get()?;
        Some(state)
    }

    /// Up to `max` records of `try_next` while the consumer runs, no call holds it and
    /// the stop flag is down, packed (`tryTake`).
    pub(crate) fn try_take(
        &self,
        max_results: u32,
        mut try_next: impl FnMut(&mut C) -> Option<Record>,
    ) -> PackedRecords {
        let max = max_results.clamp(1, crate::reader::POLL_RESULTS_MAX) as usize;
        let records: Vec<Record> = match self.try_running() {
            Some(mut state) => match state.get_mut() {
                Some(c) => std::iter::from_fn(|| try_next(c)).take(max).collect(),
                None => Vec::new(),
            },
            None => Vec::new(),
        };
        pack_records(&records)
    }

    /// Waits for the next record with `next`, unless the stop flag is raised (then
    /// `None`) or `cancel` fires (then `Aborted`). The SDK's `next` is cancel-safe.
    /// `snapshot` runs before (records `tryNext` handed out count while this call
    /// holds the consumer) and after.
    pub(crate) async fn next<F>(
        &self,
        cancel: &mut Cancel,
        next: F,
        snapshot: impl Fn(&C),
    ) -> Result<Option<Record>, Fail>
    where
        F: for<'a> FnOnce(
            &'a mut C,
        )
            -> futures::future::BoxFuture<'a, Option<Result<Record, ClientError>>>,
    {
        let mut stop = self.stop.subscribe();
        if *stop.borrow() {
            return Ok(None);
        }
        let mut state = tokio::select! {
            state = self.state.lock() => state,
            _ = stop.wait_for(|s| *s) => return Ok(None),
            () = cancel.fired() => return Err(Fail::Aborted),
        };
        let Some(consumer) = state.get_mut() else {
            return Ok(None);
        };
        snapshot(consumer);
        let result = tokio::select! {
            r = next(consumer) => r.transpose().map_err(Fail::from),
            _ = stop.wait_for(|s| *s) => Ok(None),
            () = cancel.fired() => Err(Fail::Aborted),
        };
        snapshot(consumer);
        result
    }
}

/// `next` within `timeout_ms`, or a `TimeoutError`; `ShutdownError` after shutdown.
pub(crate) async fn within<T>(
    timeout_ms: u32,
    next: impl Future<Output = Result<Option<T>, Fail>>,
) -> Result<T, Fail> {
    let timeout = ms(timeout_ms);
    match tokio::time::timeout(timeout, next).await {
        Ok(r) => r?.ok_or(Fail::Client(ClientError::Shutdown)),
        Err(_) => Err(Fail::Client(ClientError::Timeout(timeout))),
    }
}

/// A named consumer of one partition whose offsets the broker stores.
#[napi]
#[derive(Debug)]
pub struct NativeConsumer {
    shared: Arc<Shared<Consumer>>,
    /// `(last consumed, last stored)` as of the last call, for reads while a call
    /// holds the consumer.
    snapshot: Arc<parking_lot::Mutex<Snapshot>>,
    partition: u32,
}

type Snapshot = (Option<u64>, Option<u64>);

fn snapshot_of(c: &Consumer, partition: u32) -> Snapshot {
    (
        c.last_consumed_offset(partition),
        c.last_stored_offset(partition),
    )
}

impl NativeConsumer {
    pub(crate) fn new(consumer: Consumer, partition: u32) -> Self {
        let snapshot = snapshot_of(&consumer, partition);
        Self {
            shared: Shared::new(consumer),
            snapshot: Arc::new(parking_lot::Mutex::new(snapshot)),
            partition,
        }
    }

    fn snapshot_now(&self) -> Snapshot {
        if let Ok(state) = self.shared.state.try_lock()
            && let Some(c) = state.get()
        {
            let now = snapshot_of(c, self.partition);
            *self.snapshot.lock() = now;
            return now;
        }
        *self.snapshot.lock()
    }
}

async fn consumer_next(
    shared: &Shared<Consumer>,
    snapshot: &parking_lot::Mutex<Snapshot>,
    partition: u32,
    cancel: &mut Cancel,
) -> Result<Option<Record>, Fail> {
    shared
        .next(
            cancel,
            |c| Box::pin(c.next()),
            |c| {
                *snapshot.lock() = snapshot_of(c, partition);
            },
        )
        .await
}

#[napi]
impl NativeConsumer {
    /// The partition it reads.
    #[napi(getter)]
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The next record, waiting for one; `null` after `shutdown()`.
    #[napi]
    pub fn next<'env>(
        &self,
        env: &'env Env,
        canceller: Option<&Canceller>,
    ) -> napi::Result<PromiseRaw<'env, Option<RecordOut>>> {
        let (shared, snapshot, p) = (
            Arc::clone(&self.shared),
            Arc::clone(&self.snapshot),
            self.partition,
        );
        let mut cancel = Cancel::of(canceller);
        spawn(env, async move {
            Ok(consumer_next(&shared, &snapshot, p, &mut cancel)
                .await?
                .map(record_out))
        })
    }

    /// The next record if one was fetched already and nothing must be stored first,
    /// without a promise; else `null`, and `next()` is needed. Hands out as `next()`
    /// does (`rill_client::Consumer::try_next`).
    #[napi]
    pub fn try_next(&self) -> Option<RecordOut> {
        let mut state = self.shared.try_running()?;
        state.get_mut()?.try_next().map(record_out)
    }

    /// Up to `maxResults` records as `tryNext` hands them out, packed, in one call
    /// (`poll()` in JS): it stops where a store is due, and none says `next()` is
    /// needed.
    #[napi]
    pub fn try_take(&self, max_results: u32) -> PackedRecords {
        self.shared.try_take(max_results, Consumer::try_next)
    }

    /// Like `next()`, failing with `TimeoutError` after `timeoutMs`.
    #[napi]
    pub fn next_within<'env>(
        &self,
        env: &'env Env,
        timeout_ms: u32,
        canceller: Option<&Canceller>,
    ) -> napi::Result<PromiseRaw<'env, RecordOut>> {
        let (shared, snapshot, p) = (
            Arc::clone(&self.shared),
            Arc::clone(&self.snapshot),
            self.partition,
        );
        let mut cancel = Cancel::of(canceller);
        spawn(env, async move {
            let r = within(
                timeout_ms,
                consumer_next(&shared, &snapshot, p, &mut cancel),
            )
            .await?;
            Ok(record_out(r))
        })
    }

    /// Stores the record at `offset` as consumed.
    #[napi]
    pub fn commit<'env>(
        &self,
        env: &'env Env,
        partition: u32,
        offset: i64,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let offset = offset_in("offset", offset).map_err(to_napi)?;
        let (shared, snapshot, p) = (
            Arc::clone(&self.shared),
            Arc::clone(&self.snapshot),
            self.partition,
        );
        spawn(env, async move {
            let mut state = shared.state.lock().await;
            let c = state.get_mut().ok_or(ClientError::Shutdown)?;
            let r = c.store_offset(Position::new(partition, offset)).await;
            *snapshot.lock() = snapshot_of(c, p);
            Ok(r?)
        })
    }

    /// Deletes the stored offset of `partition`.
    #[napi]
    pub fn delete_offset<'env>(
        &self,
        env: &'env Env,
        partition: u32,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let shared = Arc::clone(&self.shared);
        spawn(env, async move {
            let mut state = shared.state.lock().await;
            let c = state.get_mut().ok_or(ClientError::Shutdown)?;
            Ok(c.delete_offset(partition).await?)
        })
    }

    /// The offset of the last record of `partition` handed out.
    #[napi]
    pub fn last_consumed_offset(&self, partition: u32) -> Option<i64> {
        (partition == self.partition)
            .then(|| self.snapshot_now().0.map(offset_out))
            .flatten()
    }

    /// The last offset of `partition` stored as consumed, as this consumer knows it.
    #[napi]
    pub fn last_stored_offset(&self, partition: u32) -> Option<i64> {
        (partition == self.partition)
            .then(|| self.snapshot_now().1.map(offset_out))
            .flatten()
    }

    /// Stops: a waiting `next()` ends, the final offset is stored as the policy says.
    /// Again: nothing.
    #[napi]
    pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let (shared, snapshot, p) = (
            Arc::clone(&self.shared),
            Arc::clone(&self.snapshot),
            self.partition,
        );
        spawn(env, async move {
            shared.stop();
            let mut state = shared.state.lock().await;
            let result = match state.get_mut() {
                Some(c) => {
                    let r = c.shutdown().await;
                    *snapshot.lock() = snapshot_of(c, p);
                    r
                }
                None => Ok(()),
            };
            drop(state.take());
            Ok(result?)
        })
    }
}
