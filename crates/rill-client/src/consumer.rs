//! Named consumers: the broker stores the position.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use rill_proto::pb::{DeleteOffsetRequest, GetOffsetRequest, StoreOffsetRequest};
use rill_proto::{RequestBody, ResponseBody};

use crate::ahead::{Ahead, Shape};
use crate::client::{Retry, unexpected};
use crate::commit::Committer;
use crate::{ClientError, CommitPolicy, ErrorCode, Fetched, Position, Record, Subscription, Topic};

/// Where a consumer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartAt {
    /// The first stored record.
    First,
    /// The last record (or the end, if the partition is empty).
    Last,
    /// The end: only records appended after the start is resolved (when the consumer
    /// is built, or when a group member is assigned the partition).
    End,
    /// After the stored offset, or the beginning if none is stored (the default).
    #[default]
    Next,
    /// This offset.
    Offset(u64),
    /// The first record at or after this time, µs since the Unix epoch.
    TimestampMicros(i64),
}

/// Options of a named consumer; see [`Topic::consumer`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ConsumerBuilder {
    topic: Topic,
    name: String,
    partition: u32,
    batch_length: u32,
    poll_interval: Duration,
    start_at: StartAt,
    allow_replay: bool,
    commit_policy: CommitPolicy,
    max_wait: Duration,
    max_bytes: u32,
    polling_retry_interval: Duration,
}

impl ConsumerBuilder {
    pub(crate) fn new(topic: Topic, name: &str, partition: u32) -> Self {
        Self {
            topic,
            name: name.to_owned(),
            partition,
            batch_length: 1000,
            poll_interval: Duration::from_millis(100),
            start_at: StartAt::Next,
            allow_replay: false,
            commit_policy: CommitPolicy::default(),
            max_wait: Duration::from_secs(1),
            max_bytes: 1 << 20,
            polling_retry_interval: Duration::from_secs(1),
        }
    }

    /// Most records handed out per poll (default 1000).
    pub fn batch_length(mut self, n: u32) -> Self {
        self.batch_length = n;
        self
    }

    /// Pause between polls that found nothing, when long polling is off (default 100 ms).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// Where to start when no offset is stored (default [`StartAt::Next`]: the
    /// beginning). A stored offset wins: the consumer resumes after it, whatever
    /// `start_at` says, unless [`ConsumerBuilder::allow_replay`].
    pub fn start_at(mut self, start: StartAt) -> Self {
        self.start_at = start;
        self
    }

    /// Honour `start_at` even where an offset is stored, at, below or above it
    /// (re-reading what was consumed, or jumping ahead on purpose). Without it, a stored
    /// offset wins over `start_at`, so nothing is read twice or skipped.
    pub fn allow_replay(mut self) -> Self {
        self.allow_replay = true;
        self
    }

    /// When offsets are stored (default [`CommitPolicy::Polling`]).
    pub fn commit_policy(mut self, policy: CommitPolicy) -> Self {
        self.commit_policy = policy;
        self
    }

    /// Long-poll wait per fetch (default 1 s; zero polls every `poll_interval`).
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }

    /// Bytes per fetch (default 1 MiB). A consumer holds up to two answers: the records
    /// it hands out and the fetch it makes ahead meanwhile.
    pub fn max_bytes(mut self, n: u32) -> Self {
        self.max_bytes = n;
        self
    }

    /// Pause before polling again after a poll failed (default 1 s). The failed poll
    /// itself already retried transient errors within the client's retry budget
    /// ([`ClientBuilder::retry`](crate::ClientBuilder::retry)); this keeps a caller that
    /// calls `next` again at once from hammering a broker that keeps refusing.
    pub fn polling_retry_interval(mut self, d: Duration) -> Self {
        self.polling_retry_interval = d;
        self
    }

    /// The same options for range `id` of an elastic topic.
    pub(crate) fn for_range(&self, id: u32) -> Self {
        Self {
            partition: id,
            ..self.clone()
        }
    }

    /// The partition asked for, where it starts, and its long-poll wait.
    pub(crate) fn shape(&self) -> (u32, StartAt, Duration) {
        (self.partition, self.start_at, self.max_wait)
    }

    /// The topic and the consumer's name.
    pub(crate) fn names(&self) -> (&Topic, &str) {
        (&self.topic, &self.name)
    }

    /// Validates the options, resolves the start and returns the consumer.
    pub async fn build(self) -> Result<Consumer, ClientError> {
        if self.batch_length == 0 {
            return Err(ClientError::InvalidArgument(
                "batch_length must be positive".into(),
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(ClientError::InvalidArgument(
                "poll_interval must be positive".into(),
            ));
        }
        if self.max_bytes == 0 {
            return Err(ClientError::InvalidArgument(
                "max_bytes must be positive".into(),
            ));
        }
        if self.polling_retry_interval.is_zero() {
            return Err(ClientError::InvalidArgument(
                "polling_retry_interval must be positive".into(),
            ));
        }
        self.commit_policy.validate()?;
        // An elastic topic's named consumer reads every range in lineage order
        // (docs/RANGES.md §6.2). A topic that cannot be looked up now is the consumer's to
        // report when it reads, as before elastic topics.
        if let Ok((_, Some(map))) = self
            .topic
            .client
            .shape(&self.topic.stream, &self.topic.name)
            .await
        {
            return crate::ranged::Ranged::start(self, map).await;
        }
        self.build_one().await
    }

    /// The consumer of the one partition named (of an elastic topic: of one range, for
    /// [`crate::ranged::Ranged`]).
    pub(crate) async fn build_one(self) -> Result<Consumer, ClientError> {
        let mut consumer = Consumer {
            topic: self.topic,
            name: self.name,
            partition: self.partition,
            batch_length: self.batch_length as usize,
            poll_interval: self.poll_interval,
            max_wait: self.max_wait,
            max_bytes: self.max_bytes,
            position: 0,
            buffered: VecDeque::new(),
            poll_left: 0,
            committer: Committer::new(self.commit_policy, None, Instant::now()),
            closed: false,
            storing: None,
            reported: None,
            polling_retry_interval: self.polling_retry_interval,
            retry_at: None,
            ahead: None,
            sub: None,
            push: true,
            ranges: None,
        };
        let stored = consumer.fetch_stored().await?;
        consumer.committer = Committer::new(self.commit_policy, stored, Instant::now());
        let (topic, p) = (&consumer.topic, consumer.partition);
        consumer.position = match (self.start_at, stored) {
            // A stored offset wins over `start_at` unless replay is allowed (as Kafka's
            // `auto.offset.reset` applies only where nothing is committed).
            (StartAt::Next, Some(consumed)) => consumed + 1,
            (_, Some(consumed)) if !self.allow_replay => consumed + 1,
            (start, _) => topic.offset_for(p, start).await?,
        };
        Ok(consumer)
    }
}

/// A named consumer of one partition. The broker stores its offset per its
/// [`CommitPolicy`].
///
/// Records that cannot be delivered ([`ClientError::DataLoss`], [`ClientError::Corrupt`])
/// are returned once by [`Consumer::next`] as an error naming them; the consumer then
/// goes on after them, and they count as handed out (automatic policies store past
/// them). A loss whose end is not known yet is reported once; the consumer then polls
/// at its start every `poll_interval` until the end is known.
#[derive(Debug)]
pub struct Consumer {
    topic: Topic,
    name: String,
    partition: u32,
    batch_length: usize,
    poll_interval: Duration,
    max_wait: Duration,
    max_bytes: u32,
    /// Next offset to fetch.
    position: u64,
    /// Records fetched and not handed out yet: at most one fetch's answer. The first
    /// `poll_left` are the current poll result (`batch_length` at most); the rest make
    /// the poll results after it, so records are never fetched twice.
    buffered: VecDeque<Record>,
    /// Records of the current poll result not handed out yet.
    poll_left: usize,
    committer: Committer,
    closed: bool,
    /// The start of an open-ended loss already reported.
    reported: Option<u64>,
    polling_retry_interval: Duration,
    /// After a failed poll: the next one waits until then.
    retry_at: Option<tokio::time::Instant>,
    /// The fetch at `position`, started when a poll brought records (so it runs while
    /// the caller takes them); used by the next poll if `position` has not moved.
    ahead: Option<Ahead>,
    /// Push streaming (docs/STREAMING.md): the subscription polls read through, over
    /// TCP to a server that serves it; none yet, or none any more.
    sub: Option<Subscription>,
    /// Whether to read by push: cleared for good once the transport or the server
    /// says it does not serve it (polls then fetch, with a fetch ahead).
    push: bool,
    /// An elastic topic's consumer: the consumers of its ranges, which every method
    /// goes to (docs/RANGES.md §6.2); the fields above then go unused.
    ranges: Option<Box<crate::ranged::Ranged>>,
    /// The store in flight, as a task of its own: one whose caller stopped waiting (a
    /// timeout around `next`) still runs, and the next store or delete waits for it, so
    /// they reach the broker in the order they were made and an older offset never
    /// lands over a newer one.
    storing: Option<Storing>,
}

/// A store of the offset after `consumed`, running.
#[derive(Debug)]
struct Storing {
    consumed: u64,
    task: tokio::task::JoinHandle<Result<(), ClientError>>,
}

impl Consumer {
    /// The consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partition it reads (0 for an elastic topic's, which reads every range).
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// A consumer of every range of an elastic topic, reading through `ranges`.
    pub(crate) fn of_ranges(template: &ConsumerBuilder, ranges: crate::ranged::Ranged) -> Self {
        Self {
            topic: template.topic.clone(),
            name: template.name.clone(),
            partition: 0,
            batch_length: template.batch_length as usize,
            poll_interval: template.poll_interval,
            max_wait: template.max_wait,
            max_bytes: template.max_bytes,
            position: 0,
            buffered: VecDeque::new(),
            poll_left: 0,
            committer: Committer::new(template.commit_policy, None, Instant::now()),
            closed: false,
            storing: None,
            reported: None,
            polling_retry_interval: template.polling_retry_interval,
            retry_at: None,
            ahead: None,
            sub: None,
            push: false,
            ranges: Some(Box::new(ranges)),
        }
    }

    /// Whether records are fetched and not handed out yet.
    pub(crate) fn has_buffered(&self) -> bool {
        !self.buffered.is_empty()
    }

    /// The offset of the next record it hands out: every record below it was handed
    /// out (or skipped: deleted, lost).
    pub(crate) fn next_to_hand(&self) -> u64 {
        self.buffered.front().map_or(self.position, |r| r.offset)
    }

    /// The next record, waiting for one to arrive. `None` after [`Consumer::shutdown`].
    ///
    /// Asking for the next record says the caller is done with the one before: the
    /// commit policy may store it now (a failed store is returned as the error, and
    /// retried by the next store). Cancel-safe: dropping the future (as
    /// [`Consumer::next_within`] does on a timeout) loses no record.
    pub async fn next(&mut self) -> Option<Result<Record, ClientError>> {
        match self.ranges.as_mut() {
            Some(ranges) => ranges.next().await,
            None => self.next_one().await,
        }
    }

    /// [`Consumer::next`] of a single partition's consumer.
    pub(crate) async fn next_one(&mut self) -> Option<Result<Record, ClientError>> {
        if self.closed {
            return None;
        }
        if let Some(offset) = self.committer.done(Instant::now())
            && let Err(e) = self.store(offset).await
        {
            return Some(Err(e));
        }
        loop {
            if self.closed {
                return None;
            }
            // No await between taking a record and returning it: cancel-safe.
            if self.poll_left > 0 {
                return Some(Ok(self.hand_out()));
            }
            if let Some(offset) = self.committer.polling(Instant::now())
                && let Err(e) = self.store(offset).await
            {
                return Some(Err(e));
            }
            if !self.buffered.is_empty() {
                self.start_poll();
                continue;
            }
            if let Some(at) = self.retry_at.take() {
                tokio::time::sleep_until(at).await;
            }
            match self.poll().await {
                Ok(0) if self.max_wait.is_zero() => tokio::time::sleep(self.poll_interval).await,
                Ok(_) => {}
                Err(e) => {
                    if e.lost_range().is_none() {
                        self.retry_at =
                            Some(tokio::time::Instant::now() + self.polling_retry_interval);
                    }
                    return Some(Err(e));
                }
            }
        }
    }

    /// The next record of the current poll result if the commit policy has nothing to
    /// store first, without waiting: `None` says only that [`Consumer::next`] is needed
    /// now (the poll result is used up, a store is due, or the consumer is shut down).
    /// Hands out as [`Consumer::next`] does (the record before counts as handled), so
    /// the SDKs for other languages hand out a fetched batch without an `await` per
    /// record; mixing the two keeps the order.
    pub fn try_next(&mut self) -> Option<Record> {
        if let Some(ranges) = self.ranges.as_mut() {
            return ranges.try_next();
        }
        if self.closed || self.buffered.is_empty() {
            return None;
        }
        // A new poll result starts only in `next` (the poll the commit policies count).
        if self.poll_left == 0 {
            return None;
        }
        let now = Instant::now();
        if self.committer.clone().done(now).is_some() {
            return None;
        }
        let stored = self.committer.done(now);
        debug_assert!(stored.is_none(), "checked on a copy above");
        Some(self.hand_out())
    }

    /// Starts the next poll result: up to `batch_length` of the buffered records.
    fn start_poll(&mut self) {
        self.poll_left = self.batch_length.min(self.buffered.len());
        self.committer.polled(self.poll_left);
    }

    /// Hands out the next record of the poll result.
    fn hand_out(&mut self) -> Record {
        let record = self
            .buffered
            .pop_front()
            .expect("a record of the poll result");
        self.poll_left -= 1;
        self.committer.handed_out(record.offset);
        record
    }

    /// Like [`Consumer::next`], failing with [`ClientError::Timeout`] if no record
    /// arrives within `timeout`.
    pub async fn next_within(&mut self, timeout: Duration) -> Result<Record, ClientError> {
        match tokio::time::timeout(timeout, self.next()).await {
            Ok(Some(result)) => result,
            Ok(None) => Err(ClientError::Shutdown),
            Err(_) => Err(ClientError::Timeout(timeout)),
        }
    }

    /// The records as a `Stream`.
    pub fn into_stream(self) -> impl Stream<Item = Result<Record, ClientError>> {
        futures::stream::unfold(self, |mut c| async move { c.next().await.map(|r| (r, c)) })
    }

    fn shape(&self) -> Shape {
        Shape {
            max_bytes: self.max_bytes,
            max_wait: self.max_wait,
            min_bytes: 1,
        }
    }

    /// One poll through the subscription (docs/STREAMING.md §7); `None` when this
    /// consumer does not read by push (the embedded transport, a server without it, a
    /// node that does not lead the partition, or `max_wait` 0), and then for good.
    async fn poll_pushed(&mut self) -> Option<Result<Fetched, ClientError>> {
        if !self.push {
            return None;
        }
        self.ahead = None;
        // Four fetches' worth in flight: the server reads ahead while the caller takes
        // records, as a fetch ahead would.
        let window = self.max_bytes.saturating_mul(4);
        let from = Position::new(self.partition, self.position);
        let answer = crate::subscription::read_pushed(
            &self.topic,
            &mut self.sub,
            from,
            window,
            self.max_wait,
        )
        .await;
        match answer {
            None => {
                self.push = false;
                None
            }
            Some(Ok(mut fetched)) => {
                self.buffered.extend(fetched.records.drain(..));
                Some(Ok(fetched))
            }
            Some(Err(e)) => Some(Err(e)),
        }
    }

    async fn poll(&mut self) -> Result<usize, ClientError> {
        let pushed = self.poll_pushed().await;
        let fetched = match (pushed, &mut self.ahead) {
            (Some(pushed), _) => pushed,
            // Made ahead at this position: its answer counts as this poll's.
            (None, Some(ahead)) if ahead.is_for(self.partition, self.position) => {
                let answer = ahead.answer().await;
                self.ahead = None;
                answer.map(|(f, mut records)| {
                    self.buffered.append(&mut records);
                    f
                })
            }
            (None, _) => {
                self.ahead = None;
                let shape = self.shape();
                self.topic
                    .fetch_into(
                        self.partition,
                        self.position,
                        shape.max_bytes,
                        shape.max_wait,
                        shape.min_bytes,
                        &mut self.buffered,
                    )
                    .await
            }
        };
        let fetched = match fetched {
            Ok(f) => f,
            Err(ClientError::Server {
                code: ErrorCode::OffsetBeforeStart,
                offset: Some(start),
                ..
            }) => {
                tracing::warn!(consumer = %self.name, from = self.position, to = start, "records were deleted by retention; skipping ahead");
                self.position = start;
                return Ok(0);
            }
            Err(e) => {
                let Some((_, from, to)) = e.lost_range() else {
                    return Err(e);
                };
                match to {
                    Some(to) => {
                        // Nothing is buffered (a poll comes only once drained).
                        self.position = self.position.max(to);
                        if let Some(last) = to.checked_sub(1) {
                            self.committer.skipped(last);
                        }
                        self.reported = None;
                    }
                    None if self.reported == Some(from) => {
                        // Told already; wait for the end of the range to be known.
                        tokio::time::sleep(self.poll_interval).await;
                        return Ok(0);
                    }
                    None => self.reported = Some(from),
                }
                return Err(e);
            }
        };
        self.position = match self.buffered.back() {
            Some(last) => last.offset + 1,
            None => fetched.next_offset.max(self.position),
        };
        if !self.buffered.is_empty() && self.sub.is_none() {
            self.ahead = Some(Ahead::spawn(
                &self.topic,
                self.partition,
                self.position,
                self.shape(),
            ));
        }
        Ok(self.buffered.len())
    }

    /// Stores `record` as consumed (its offset + 1 is where a restart resumes).
    /// The record handed out last counts as handled from then on.
    pub async fn commit(&mut self, record: &Record) -> Result<(), ClientError> {
        self.store_offset(record.position()).await
    }

    /// Stores the record at `consumed` as consumed (a restart resumes after it). The
    /// record handed out last counts as handled from then on.
    pub async fn store_offset(&mut self, consumed: Position) -> Result<(), ClientError> {
        match self.ranges.as_mut() {
            Some(ranges) => ranges.store_offset(consumed).await,
            None => self.store_offset_one(consumed).await,
        }
    }

    /// [`Consumer::store_offset`] of a single partition's consumer.
    pub(crate) async fn store_offset_one(&mut self, consumed: Position) -> Result<(), ClientError> {
        self.check_partition(consumed.partition)?;
        self.committer.finish_pending();
        self.store(consumed.offset).await
    }

    /// Deletes the stored offset of `partition`.
    pub async fn delete_offset(&mut self, partition: u32) -> Result<(), ClientError> {
        match self.ranges.as_mut() {
            Some(ranges) => ranges.delete_offset(partition).await,
            None => self.delete_offset_one(partition).await,
        }
    }

    /// [`Consumer::delete_offset`] of a single partition's consumer.
    pub(crate) async fn delete_offset_one(&mut self, partition: u32) -> Result<(), ClientError> {
        self.check_partition(partition)?;
        // A store still running lands first, not over the delete.
        let _ = self.finish_storing().await;
        let body = RequestBody::DeleteOffset(DeleteOffsetRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            partition,
            consumer: self.name.clone(),
        });
        self.topic
            .client
            .call(body, Bytes::new(), Retry::Safe)
            .await?;
        self.committer.forget_stored();
        Ok(())
    }

    /// The offset of the last record handed out of `partition`.
    pub fn last_consumed_offset(&self, partition: u32) -> Option<u64> {
        if let Some(ranges) = &self.ranges {
            return ranges.consumer(partition)?.last_consumed_offset(partition);
        }
        (partition == self.partition)
            .then(|| self.committer.last_handed())
            .flatten()
    }

    /// The last offset of `partition` stored as consumed, as this consumer knows it.
    pub fn last_stored_offset(&self, partition: u32) -> Option<u64> {
        if let Some(ranges) = &self.ranges {
            return ranges.consumer(partition)?.last_stored_offset(partition);
        }
        (partition == self.partition)
            .then(|| self.committer.last_stored())
            .flatten()
    }

    /// Stops: the record handed out last counts as handled, and the final offset is
    /// stored as the policy says; `next` then returns `None`.
    pub async fn shutdown(&mut self) -> Result<(), ClientError> {
        match self.ranges.as_mut() {
            Some(ranges) => ranges.shutdown().await,
            None => self.shutdown_one().await,
        }
    }

    /// [`Consumer::shutdown`] of a single partition's consumer.
    pub(crate) async fn shutdown_one(&mut self) -> Result<(), ClientError> {
        if self.closed {
            return Ok(());
        }
        self.ahead = None;
        self.sub = None;
        // Closed only once the store is made: a shutdown cancelled during its store (a
        // caller's timeout around it, or a range of an elastic topic finished inside a
        // `next` that timed out) stores again when called again, instead of never (the
        // committer counts nothing stored until the broker answered).
        if let Some(offset) = self.committer.shutdown(Instant::now()) {
            self.store(offset).await?;
        }
        self.closed = true;
        Ok(())
    }

    fn check_partition(&self, partition: u32) -> Result<(), ClientError> {
        if partition != self.partition {
            return Err(ClientError::InvalidArgument(format!(
                "consumer {:?} reads partition {}, not {partition}",
                self.name, self.partition
            )));
        }
        Ok(())
    }

    async fn store(&mut self, consumed: u64) -> Result<(), ClientError> {
        // An earlier store its caller stopped waiting for lands first (its outcome
        // was nobody's to see: this one supersedes it).
        let _ = self.finish_storing().await;
        let body = RequestBody::StoreOffset(StoreOffsetRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            partition: self.partition,
            consumer: self.name.clone(),
            offset: consumed + 1,
        });
        let client = self.topic.client.clone();
        let task =
            tokio::spawn(
                async move { client.call(body, Bytes::new(), Retry::Safe).await.map(drop) },
            );
        self.storing = Some(Storing { consumed, task });
        self.finish_storing().await
    }

    /// Waits for the store in flight, if any, and counts it stored if the broker took
    /// it. Cancel-safe: the task stays with the consumer until it is waited out.
    async fn finish_storing(&mut self) -> Result<(), ClientError> {
        let Some(s) = self.storing.as_mut() else {
            return Ok(());
        };
        let result = match (&mut s.task).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(ClientError::Closed),
        };
        let consumed = s.consumed;
        self.storing = None;
        if result.is_ok() {
            self.committer.stored(consumed);
        }
        result
    }

    async fn fetch_stored(&self) -> Result<Option<u64>, ClientError> {
        let body = RequestBody::GetOffset(GetOffsetRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            partition: self.partition,
            consumer: self.name.clone(),
        });
        match self
            .topic
            .client
            .call(body, Bytes::new(), Retry::Safe)
            .await?
            .0
        {
            // The wire stores the next offset; this API speaks of the consumed one.
            ResponseBody::GetOffset(r) => Ok(r.offset.and_then(|next| next.checked_sub(1))),
            other => Err(unexpected(&other)),
        }
    }
}
