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
use rill_client::{Client, ClientError, ErrorCode, Position, Producer, Topic, TopicOptions};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::config::{Assignment, ConsumerConfig, dead_letter_topic, name_problem, retry_topic};
use crate::registry::Erased;
use crate::{Handlers, StartError};

/// What the partition tasks of one consumer share.
pub(crate) struct Shared {
    pub(crate) config: ConsumerConfig,
    pub(crate) main: Topic,
    pub(crate) retry: Topic,
    pub(crate) dlq: Topic,
    pub(crate) partitions: u32,
    pub(crate) retry_producer: Producer,
    pub(crate) dlq_producer: Producer,
    pub(crate) handlers: HashMap<u32, Arc<dyn Erased>>,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) metrics: MetricsInner,
}

impl Shared {
    pub(crate) async fn store_main(&self, consumed: Position) -> Result<(), ClientError> {
        self.main.store_offset(&self.config.name, consumed).await
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
    tasks: JoinSet<(u32, Ended)>,
}

impl std::fmt::Debug for EventConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventConsumer")
            .field("name", &self.shared.config.name)
            .field("tasks", &self.tasks.len())
            .finish()
    }
}

impl EventConsumer {
    /// Stops polling, lets every partition finish the batch in flight and its due
    /// retries and store its offsets, then returns; what is still running at `deadline`
    /// is aborted (and runs again after a restart). Returns how each task ended.
    pub async fn shutdown(mut self, deadline: Duration) -> Vec<(u32, Ended)> {
        let _ = self.stop.send(true);
        let mut ended = Vec::new();
        let finish = async {
            while let Some(done) = self.tasks.join_next().await {
                ended.push(joined(done));
            }
        };
        if tokio::time::timeout(deadline, finish).await.is_err() {
            self.tasks.abort_all();
            while let Some(done) = self.tasks.join_next().await {
                ended.push(joined(done));
            }
        }
        ended.sort_by_key(|(p, _)| *p);
        ended
    }

    /// Stops every partition task at once; unfinished work runs again after a restart.
    pub fn abort(&mut self) {
        let _ = self.stop.send(true);
        self.tasks.abort_all();
    }

    /// Waits until a partition task ends, and says which and why; `None` once every
    /// task has been reported.
    pub async fn closed(&mut self) -> Option<(u32, Ended)> {
        self.tasks.join_next().await.map(joined)
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

fn joined(done: Result<(u32, Ended), tokio::task::JoinError>) -> (u32, Ended) {
    match done {
        Ok(ended) => ended,
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a handler panicked".to_owned());
            // The task's partition is lost with the panic; tasks name themselves first.
            (u32::MAX, Ended::Panicked(text))
        }
        Err(_) => (u32::MAX, Ended::Shutdown),
    }
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
            if let Some(reason) = name_problem(name) {
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
        let shared = Arc::new(Shared {
            permits: Arc::new(Semaphore::new(config.handler_concurrency)),
            config,
            main,
            retry,
            dlq,
            partitions,
            retry_producer,
            dlq_producer,
            handlers,
            metrics: MetricsInner::default(),
        });
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let Some(list) = listed else {
            return Err(StartError::Client(ClientError::InvalidArgument(
                "group assignment is not built yet: list the partitions".into(),
            )));
        };
        for p in list {
            let task =
                partition::PartitionTask::start(Arc::clone(&shared), p, stopped.clone()).await?;
            tasks.spawn(async move {
                let ended = match task.run().await {
                    Ok(()) => Ended::Shutdown,
                    Err(partition::TaskError::Client(e)) => Ended::Failed(e.to_string()),
                };
                (p, ended)
            });
        }
        Ok(EventConsumer {
            shared,
            stop,
            tasks,
        })
    }
}
