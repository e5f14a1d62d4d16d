//! The consumer runtime (docs/EVENTS.md §7): validation and start, one task per
//! partition, shutdown, abort, and the report of tasks that ended.

mod execute;
mod partition;
pub(crate) mod records;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parking_lot::Mutex;
use rill_client::{
    Client, ClientError, CommitPolicy, ErrorCode, GroupConsumer, Position, Producer, Topic,
    TopicOptions,
};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};

use crate::config::{Assignment, ConsumerConfig, dead_letter_topic, retry_topic};
use crate::registry::Erased;
use crate::{Handlers, StartError};

/// What the partition tasks of one consumer share.
pub(crate) struct Shared {
    pub(crate) config: ConsumerConfig,
    pub(crate) main: Topic,
    pub(crate) retry: Topic,
    pub(crate) partitions: u32,
    pub(crate) retry_producer: Producer,
    pub(crate) dlq_producer: Producer,
    pub(crate) handlers: HashMap<u32, Arc<dyn Erased>>,
    pub(crate) permits: Arc<Semaphore>,
    /// Shards a batch's keys are dealt into: the machine's parallelism (1 to 16), read
    /// once at start (on Linux it reads the affinity mask and cgroup files).
    pub(crate) shards: usize,
    pub(crate) metrics: MetricsInner,
    /// The group membership, with `Assignment::Group`: main offsets are its fenced
    /// commits.
    pub(crate) group: Option<tokio::sync::RwLock<GroupConsumer>>,
}

impl Shared {
    pub(crate) async fn store_main(&self, consumed: Position) -> Result<(), ClientError> {
        match &self.group {
            Some(g) => g.read().await.store_offset(consumed).await,
            None => self.main.store_offset(&self.config.name, consumed).await,
        }
    }

    pub(crate) fn set_lag(&self, partition: u32, lag: u64) {
        self.metrics
            .partitions
            .lock()
            .entry(partition)
            .or_default()
            .lag = lag;
    }
}

/// Counters and gauges of a consumer.
#[derive(Default)]
pub(crate) struct MetricsInner {
    pub(crate) handled: AtomicU64,
    pub(crate) calls: AtomicU64,
    pub(crate) call_us: AtomicU64,
    pub(crate) dead_letters: AtomicU64,
    pub(crate) retry_records: AtomicU64,
    pub(crate) attempts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) partitions: Mutex<BTreeMap<u32, PartitionGauges>>,
    /// The partitions whose tasks run now.
    pub(crate) running: Mutex<std::collections::BTreeSet<u32>>,
}

/// A partition's gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionGauges {
    /// Main records after the consumer's position, at its last poll.
    pub lag: u64,
    /// Keys with pending retry work.
    pub quarantined_keys: u64,
    /// Pending retry records.
    pub pending_retry: u64,
    /// The most failed attempts of a pending key.
    pub max_attempt: u32,
}

/// A snapshot of a consumer's counters (since it started) and gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Events handled (items of completed handler calls, after reduction).
    pub handled: u64,
    /// Handler calls, and their total time in µs.
    pub calls: u64,
    /// Total time in handler calls, µs.
    pub handler_us: u64,
    /// Records written to the dead-letter topic.
    pub dead_letters: u64,
    /// Records written to the retry topic (markers included).
    pub retry_records: u64,
    /// Retry attempts of keys.
    pub attempts: u64,
    /// Steps that failed and were tried again (broker unreachable, say).
    pub errors: u64,
    /// Per partition.
    pub partitions: BTreeMap<u32, PartitionGauges>,
}

/// Why a partition task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// It was asked to stop.
    Shutdown,
    /// A handler panicked; the batch was not committed and runs again after a restart.
    Panicked(String),
    /// It could not go on (its topic was deleted, the client closed).
    Failed(String),
}

/// A running events consumer; see [`Handlers::start`].
pub struct EventConsumer {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    ended: mpsc::UnboundedReceiver<(u32, Ended)>,
    aborts: Arc<Mutex<Vec<AbortHandle>>>,
}

impl std::fmt::Debug for EventConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventConsumer")
            .field("name", &self.shared.config.name)
            .finish()
    }
}

impl EventConsumer {
    /// Stops polling, lets every partition finish the batch in flight and its due
    /// retries and store its offsets (a group member then leaves its group), and
    /// returns how each partition's task ended; what is still running at `deadline` is
    /// aborted (and runs again after a restart).
    pub async fn shutdown(mut self, deadline: Duration) -> Vec<(u32, Ended)> {
        let _ = self.stop.send(true);
        let mut ended = Vec::new();
        let finish = async {
            while let Some(e) = self.ended.recv().await {
                ended.push(e);
            }
        };
        if tokio::time::timeout(deadline, finish).await.is_err() {
            for a in self.aborts.lock().iter() {
                a.abort();
            }
            while let Ok(Some(e)) =
                tokio::time::timeout(Duration::from_secs(1), self.ended.recv()).await
            {
                ended.push(e);
            }
        }
        ended.sort_by_key(|(p, _)| *p);
        ended
    }

    /// Stops every task at once; unfinished work runs again after a restart.
    pub fn abort(&mut self) {
        let _ = self.stop.send(true);
        for a in self.aborts.lock().iter() {
            a.abort();
        }
    }

    /// Waits until a partition task ends, and says which and why (a group member's
    /// tasks also end when their partitions move, with [`Ended::Shutdown`]); `None` once
    /// every task has ended and the consumer stopped.
    pub async fn closed(&mut self) -> Option<(u32, Ended)> {
        self.ended.recv().await
    }

    /// The partitions this consumer processes now.
    pub fn partitions(&self) -> Vec<u32> {
        self.shared.metrics.running.lock().iter().copied().collect()
    }

    /// The consumer's counters and gauges.
    pub fn metrics(&self) -> Metrics {
        use std::sync::atomic::Ordering::Relaxed;
        let m = &self.shared.metrics;
        Metrics {
            handled: m.handled.load(Relaxed),
            calls: m.calls.load(Relaxed),
            handler_us: m.call_us.load(Relaxed),
            dead_letters: m.dead_letters.load(Relaxed),
            retry_records: m.retry_records.load(Relaxed),
            attempts: m.attempts.load(Relaxed),
            errors: m.errors.load(Relaxed),
            partitions: m.partitions.lock().clone(),
        }
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a handler panicked".to_owned())
}

/// Spawns a partition's task and a watcher that reports how it ended; returns the
/// watcher (done once the task is).
fn spawn_partition(
    shared: &Arc<Shared>,
    task: partition::PartitionTask,
    p: u32,
    ended: &mpsc::UnboundedSender<(u32, Ended)>,
    aborts: &Arc<Mutex<Vec<AbortHandle>>>,
) -> JoinHandle<()> {
    let handle = tokio::spawn(task.run());
    aborts.lock().push(handle.abort_handle());
    shared.metrics.running.lock().insert(p);
    let ended = ended.clone();
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let how = match handle.await {
            Ok(Ok(())) => Ended::Shutdown,
            Ok(Err(partition::TaskError::Client(e))) => Ended::Failed(e.to_string()),
            Err(e) if e.is_panic() => Ended::Panicked(panic_text(e.into_panic())),
            Err(_) => Ended::Shutdown,
        };
        shared.metrics.running.lock().remove(&p);
        let _ = ended.send((p, how));
    })
}

/// A change of a group member's partitions.
enum Change {
    Assigned(Vec<u32>),
    Revoked(Vec<u32>),
}

/// A group member's partitions: starts a task for each partition gained; for each
/// revoked, stops its task (which finishes its batch and stores its offset) and only
/// then releases the partition to the broker, so its next owner starts after it.
async fn membership(
    shared: Arc<Shared>,
    mut changes: mpsc::UnboundedReceiver<Change>,
    mut stop: watch::Receiver<bool>,
    ended: mpsc::UnboundedSender<(u32, Ended)>,
    aborts: Arc<Mutex<Vec<AbortHandle>>>,
) {
    let group = shared.group.as_ref().expect("a group consumer");
    let mut running: BTreeMap<u32, (watch::Sender<bool>, JoinHandle<()>)> = BTreeMap::new();
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // `None`: time to report.
        let change = tokio::select! {
            c = changes.recv() => Some(c),
            _ = stop.wait_for(|s| *s) => Some(None),
            _ = report.tick() => None,
        };
        let Some(change) = change else {
            let numbers = member_report(&shared, running.keys().copied());
            if let Err(e) = group.read().await.report(numbers) {
                tracing::warn!(error = %e, "the member's report was refused");
            }
            continue;
        };
        match change {
            Some(Change::Assigned(ps)) => {
                for p in ps {
                    if running.contains_key(&p) {
                        continue;
                    }
                    let start = group.read().await.position(p);
                    let (tx, rx) = watch::channel(false);
                    match partition::PartitionTask::start(Arc::clone(&shared), p, start, rx).await {
                        Ok(task) => {
                            let watcher = spawn_partition(&shared, task, p, &ended, &aborts);
                            running.insert(p, (tx, watcher));
                        }
                        Err(e) => {
                            let _ = ended.send((p, Ended::Failed(e.to_string())));
                        }
                    }
                }
            }
            Some(Change::Revoked(ps)) => {
                for p in &ps {
                    if let Some((tx, watcher)) = running.remove(p) {
                        let _ = tx.send(true);
                        let _ = watcher.await;
                    }
                }
                if let Err(e) = group.read().await.release(&ps) {
                    tracing::error!(error = %e, "releasing revoked partitions failed");
                }
            }
            None => break,
        }
    }
    for (tx, _) in running.values() {
        let _ = tx.send(true);
    }
    for (_, (_, watcher)) in std::mem::take(&mut running) {
        let _ = watcher.await;
    }
    if let Err(e) = group.write().await.shutdown().await {
        tracing::warn!(error = %e, "leaving the group failed");
    }
}

/// How often a group member reports its numbers (sent with its next heartbeat).
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What a group member reports about itself (docs/EVENTS.md §10): the consumer's
/// counters, and its gauges summed (or, for attempts, the largest) over the partitions
/// it runs.
fn member_report(
    shared: &Shared,
    partitions: impl Iterator<Item = u32>,
) -> Vec<(&'static str, u64)> {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &shared.metrics;
    let (mut lag, mut quarantined, mut backlog, mut max_attempt) = (0u64, 0u64, 0u64, 0u32);
    {
        let gauges = m.partitions.lock();
        for p in partitions {
            if let Some(g) = gauges.get(&p) {
                lag += g.lag;
                quarantined += g.quarantined_keys;
                backlog += g.pending_retry;
                max_attempt = max_attempt.max(g.max_attempt);
            }
        }
    }
    let calls = m.calls.load(Relaxed);
    let call_us = m.call_us.load(Relaxed);
    vec![
        ("events_lag", lag),
        ("events_retry_backlog", backlog),
        ("events_quarantined_keys", quarantined),
        ("events_max_attempt", u64::from(max_attempt)),
        ("events_attempts_total", m.attempts.load(Relaxed)),
        ("events_dead_letters_total", m.dead_letters.load(Relaxed)),
        ("events_handled_total", m.handled.load(Relaxed)),
        ("events_handler_calls_total", calls),
        ("events_handler_us_total", call_us),
        (
            "events_handler_mean_us",
            call_us.checked_div(calls).unwrap_or(0),
        ),
        ("events_errors_total", m.errors.load(Relaxed)),
    ]
}

impl<D> Handlers<D> {
    /// Validates everything of docs/EVENTS.md §8, creates the consumer's retry and
    /// dead-letter topics if missing, and starts one task per partition. Creates
    /// nothing when validation fails.
    pub async fn start(
        self,
        client: &Client,
        config: ConsumerConfig,
    ) -> Result<EventConsumer, StartError> {
        if config.retry_delays.is_empty() {
            return Err(StartError::NoRetryDelays);
        }
        for (what, n) in [
            ("poll_count", config.poll_count),
            ("handler_concurrency", config.handler_concurrency),
            ("max_pending_retry", config.max_pending_retry),
        ] {
            if n == 0 {
                return Err(StartError::Zero(what));
            }
        }
        if config.poll_interval.is_zero() {
            return Err(StartError::Zero("poll_interval"));
        }
        let listed = match &config.assignment {
            Assignment::Partitions(list) => {
                if list.is_empty() {
                    return Err(StartError::NoPartitions);
                }
                let mut seen = HashSet::new();
                for &p in list {
                    if !seen.insert(p) {
                        return Err(StartError::DuplicatePartition(p));
                    }
                }
                Some(list.clone())
            }
            Assignment::Group => None,
        };
        let Some(first) = self.entries.first() else {
            return Err(StartError::NoHandlers);
        };
        let topic_name = first.topic();
        let mut handlers: HashMap<u32, Arc<dyn Erased>> = HashMap::new();
        for e in &self.entries {
            if e.topic() != topic_name {
                return Err(StartError::MixedTopics {
                    first: topic_name,
                    second: e.topic(),
                });
            }
            if let Some(other) = handlers.insert(e.tag(), Arc::clone(e)) {
                return Err(StartError::DuplicateTag {
                    tag: e.tag(),
                    first: other.type_name(),
                    second: e.type_name(),
                });
            }
        }
        let retry_name = retry_topic(topic_name, &config.name);
        let dlq_name = dead_letter_topic(topic_name, &config.name);
        for name in [&config.stream, &config.name, &retry_name, &dlq_name] {
            if let Some(reason) = rill_client::name_problem(name) {
                return Err(StartError::InvalidName {
                    name: name.clone(),
                    reason,
                });
            }
        }
        let stream = client.stream(config.stream.clone());
        let main = stream.topic(topic_name);
        let described = match main.describe().await {
            Ok(d) => d,
            Err(e)
                if matches!(
                    e.code(),
                    Some(ErrorCode::TopicNotFound | ErrorCode::StreamNotFound)
                ) =>
            {
                return Err(StartError::TopicNotFound {
                    stream: config.stream.clone(),
                    topic: topic_name.to_owned(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        if described.elastic {
            return Err(StartError::ElasticTopic {
                stream: config.stream.clone(),
                topic: topic_name.to_owned(),
            });
        }
        let partitions = described.config.partitions;
        if let Some(list) = &listed
            && let Some(&p) = list.iter().find(|&&p| p >= partitions)
        {
            return Err(StartError::PartitionNotFound {
                partition: p,
                topic: topic_name.to_owned(),
                partitions,
            });
        }
        let retry = stream.topic(retry_name.clone());
        let dlq = stream.topic(dlq_name.clone());
        let mut missing = Vec::new();
        for (t, name) in [(&retry, &retry_name), (&dlq, &dlq_name)] {
            match t.describe().await {
                Ok(d) if d.config.partitions != partitions => {
                    return Err(StartError::PartitionCountMismatch {
                        topic: name.clone(),
                        found: d.config.partitions,
                        expected: partitions,
                    });
                }
                Ok(_) => {}
                Err(e) if e.code() == Some(ErrorCode::TopicNotFound) => missing.push(t),
                Err(e) => return Err(e.into()),
            }
        }
        // Validation is over: from here on things are created.
        for t in missing {
            let options = TopicOptions {
                durability: Some(described.config.durability),
                ..TopicOptions::partitions(partitions)
            };
            // `if_missing`: another member may create it meanwhile.
            let made = t.create_with(&options, true).await?;
            if made.partitions != partitions {
                return Err(StartError::PartitionCountMismatch {
                    topic: t.name().to_owned(),
                    found: made.partitions,
                    expected: partitions,
                });
            }
        }
        let retry_producer = retry.producer().build().await?;
        let dlq_producer = dlq.producer().build().await?;
        let (group, changes) = if listed.is_none() {
            let (tx, rx) = mpsc::unbounded_channel();
            let revoked = tx.clone();
            let g = main
                .consumer_group(&config.name)
                .commit_policy(CommitPolicy::Disabled)
                .hold_revoked(true)
                .on_assigned(move |ps| {
                    let _ = tx.send(Change::Assigned(ps.to_vec()));
                })
                .on_revoked(move |ps| {
                    let _ = revoked.send(Change::Revoked(ps.to_vec()));
                })
                .build()
                .await?;
            (Some(tokio::sync::RwLock::new(g)), Some(rx))
        } else {
            (None, None)
        };
        let shared = Arc::new(Shared {
            permits: Arc::new(Semaphore::new(config.handler_concurrency)),
            shards: std::thread::available_parallelism()
                .map_or(2, std::num::NonZeroUsize::get)
                .clamp(1, 16),
            config,
            main,
            retry,
            partitions,
            retry_producer,
            dlq_producer,
            handlers,
            metrics: MetricsInner::default(),
            group,
        });
        let (stop, stopped) = watch::channel(false);
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let aborts = Arc::new(Mutex::new(Vec::new()));
        match listed {
            Some(list) => {
                // Every task is set up before any runs, so a failure starts nothing.
                let mut tasks = Vec::with_capacity(list.len());
                for p in list {
                    let task = partition::PartitionTask::start(
                        Arc::clone(&shared),
                        p,
                        None,
                        stopped.clone(),
                    )
                    .await?;
                    tasks.push((p, task));
                }
                for (p, task) in tasks {
                    spawn_partition(&shared, task, p, &ended_tx, &aborts);
                }
            }
            None => {
                let changes = changes.expect("a group has a change channel");
                let handle = tokio::spawn(membership(
                    Arc::clone(&shared),
                    changes,
                    stopped,
                    ended_tx.clone(),
                    Arc::clone(&aborts),
                ));
                aborts.lock().push(handle.abort_handle());
            }
        }
        drop(ended_tx);
        Ok(EventConsumer {
            shared,
            stop,
            ended,
            aborts,
        })
    }
}
