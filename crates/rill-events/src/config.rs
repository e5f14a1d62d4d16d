//! A consumer's configuration (docs/EVENTS.md §8).

use std::time::Duration;

/// Which partitions a consumer processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// These partitions (non-empty, no duplicates, all existing).
    Partitions(Vec<u32>),
    /// The broker assigns and rebalances partitions among the members of the consumer
    /// group named after the consumer.
    Group,
}

/// When the main offset is stored (docs/EVENTS.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliveryMode {
    /// After the batch is handled, dead-lettered or durably in the retry topic: after a
    /// crash the batch runs again (at least once).
    #[default]
    NoEventLose,
    /// Right after the poll: after a crash the batch and pending retries are lost (at
    /// most once).
    NoDoubleConsume,
}

/// What happens to a record whose tag no registered handler takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unhandled {
    /// It goes to the dead-letter topic (reason `unknown-tag`): a forgotten handler is
    /// never a silent loss.
    #[default]
    DeadLetter,
    /// It is skipped, for a consumer that means to see only some of a topic's types.
    Skip,
}

/// The configuration of an events consumer.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub(crate) stream: String,
    pub(crate) name: String,
    pub(crate) assignment: Assignment,
    pub(crate) mode: DeliveryMode,
    pub(crate) retry_delays: Vec<Duration>,
    pub(crate) poll_count: usize,
    pub(crate) poll_interval: Duration,
    pub(crate) commit_interval: Duration,
    pub(crate) max_pending_retry: usize,
    pub(crate) transient_max: u32,
    pub(crate) handler_concurrency: usize,
    pub(crate) unhandled: Unhandled,
}

impl ConsumerConfig {
    /// A consumer named `name` of `stream`, with the defaults of docs/EVENTS.md §8.
    pub fn new(stream: impl Into<String>, name: impl Into<String>, assignment: Assignment) -> Self {
        Self {
            stream: stream.into(),
            name: name.into(),
            assignment,
            mode: DeliveryMode::default(),
            retry_delays: [2, 4, 8, 16].map(Duration::from_secs).to_vec(),
            poll_count: 1000,
            poll_interval: Duration::from_millis(100),
            commit_interval: Duration::from_millis(100),
            max_pending_retry: 100_000,
            transient_max: 3,
            handler_concurrency: 1024,
            unhandled: Unhandled::default(),
        }
    }

    /// The delivery mode (default `NoEventLose`).
    pub fn mode(mut self, mode: DeliveryMode) -> Self {
        self.mode = mode;
        self
    }

    /// The delays before each retry attempt (default 2, 4, 8, 16 s): a failing key gets
    /// `1 + len` calls in all.
    pub fn retry_delays(mut self, delays: impl IntoIterator<Item = Duration>) -> Self {
        self.retry_delays = delays.into_iter().collect();
        self
    }

    /// Records per poll of a main partition (default 1,000).
    pub fn poll_count(mut self, n: usize) -> Self {
        self.poll_count = n;
        self
    }

    /// The longest wait of a poll for new records (default 100 ms).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// Under `NoEventLose`, the least time between two stores of a main partition's
    /// offset (default 100 ms; zero stores after every batch, one store in flight). A
    /// store waits for an fsync of the offsets log, so storing after every batch costs
    /// the consumer time; what a crash runs again is at most this much more work. The
    /// last offset done is stored at shutdown and when a partition is revoked.
    pub fn commit_interval(mut self, d: Duration) -> Self {
        self.commit_interval = d;
        self
    }

    /// Pending retry records of a partition above which its main partition is not
    /// polled (default 100,000).
    pub fn max_pending_retry(mut self, n: usize) -> Self {
        self.max_pending_retry = n;
        self
    }

    /// Transient failures of one chunk retried in place before it counts as retryable
    /// (default 3).
    pub fn transient_max(mut self, n: u32) -> Self {
        self.transient_max = n;
        self
    }

    /// Keys that may wait in their handlers at once, over all partitions (default
    /// 1,024; plus, per runtime thread, one that has begun and waits for its turn). A
    /// key whose handlers finish without waiting takes no turn.
    pub fn handler_concurrency(mut self, n: usize) -> Self {
        self.handler_concurrency = n;
        self
    }

    /// What happens to records no handler takes (default `DeadLetter`).
    pub fn unhandled(mut self, unhandled: Unhandled) -> Self {
        self.unhandled = unhandled;
        self
    }

    /// The consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }
}

/// The retry topic of consumer `name` of `topic`.
pub fn retry_topic(topic: &str, name: &str) -> String {
    format!("{topic}.retry.{name}")
}

/// The dead-letter topic of consumer `name` of `topic`.
pub fn dead_letter_topic(topic: &str, name: &str) -> String {
    format!("{topic}.dlq.{name}")
}
