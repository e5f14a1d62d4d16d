//! One partition's task (docs/EVENTS.md §6, §7): read the retry partition to the end,
//! run the keys whose retry is due, poll the main partition, divert quarantined keys,
//! plan, execute, write retry work and dead letters, store offsets.
//!
//! The retry partition is the only record of pending work: the task never keeps what it
//! appended, it reads it back before its next step, so a restart rebuilds exactly the
//! state of before.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_client::{ClientError, Message, Position, Record, partition_for_key};
use tokio::sync::watch;

use super::Shared;
use super::execute::{KeyOutcome, KeyWork, ReadyRun, Retrying, run_key};
use super::records::{
    WorkRecord, dead_letter, done_marker, event_header, now_us, raw_dead_letter, retry_header,
    time_of,
};
use crate::config::{DeliveryMode, Unhandled};
use crate::header::{DeadLetterReason, ErrorClass, EventHeader, RetryHeader, RetryKind};
use crate::plan::{self, Entry, Failure, Piece, rewritten};
use crate::registry::{RawItem, Source};

/// Bytes asked for per fetch.
const FETCH_BYTES_MAX: u32 = 4 << 20;
/// Pause after a failed step before the next.
const ERROR_PAUSE_MAX: Duration = Duration::from_secs(1);

/// A quarantined key: its pending retry records, in retry-partition order.
struct Quarantined {
    fifo: VecDeque<(u64, RetryHeader, Record)>,
    /// The main records (partition, first, last offset) the pending records stand for.
    sources: std::collections::HashSet<(u32, u64, u64)>,
    /// Failed attempts so far (the largest of its records').
    attempt: u32,
    first_failure_us: i64,
    last_failure_us: i64,
    /// The highest main offset of this partition its pending records stand for.
    diverted_through: Option<u64>,
}

impl Quarantined {
    fn new() -> Self {
        Self {
            fifo: VecDeque::new(),
            sources: std::collections::HashSet::new(),
            attempt: 0,
            first_failure_us: 0,
            last_failure_us: 0,
            diverted_through: None,
        }
    }

    /// Recomputes the key's attempt, failure times and diversion mark from its records.
    fn settle(&mut self, partition: u32) {
        self.attempt = self
            .fifo
            .iter()
            .map(|(_, h, _)| h.attempt)
            .max()
            .unwrap_or(0);
        self.first_failure_us = self
            .fifo
            .iter()
            .map(|(_, h, _)| h.first_failure_us)
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(0);
        self.last_failure_us = self
            .fifo
            .iter()
            .map(|(_, h, _)| h.last_failure_us)
            .max()
            .unwrap_or(0);
        self.diverted_through = self
            .fifo
            .iter()
            .filter(|(_, h, _)| h.source_partition == partition)
            .map(|(_, h, _)| h.source_last)
            .max();
    }

    /// When the key's next attempt is due, µs since the epoch.
    fn due_us(&self, delays: &[Duration]) -> i64 {
        if self.attempt == 0 {
            return 0;
        }
        let i = (self.attempt as usize).min(delays.len()).saturating_sub(1);
        let delay = delays.get(i).copied().unwrap_or(Duration::ZERO);
        self.last_failure_us
            .saturating_add(i64::try_from(delay.as_micros()).unwrap_or(i64::MAX))
    }
}

/// What a batch (main or retry) wants written before its offsets may be stored.
#[derive(Default)]
struct Writes {
    retry: Vec<Message>,
    dead: Vec<Message>,
}

/// Why a partition task ended.
#[derive(Debug)]
pub(crate) enum TaskError {
    Client(ClientError),
}

pub(crate) struct PartitionTask {
    shared: Arc<Shared>,
    partition: u32,
    main_next: u64,
    retry_next: u64,
    retry_stored: Option<u64>,
    keys: HashMap<Bytes, Quarantined>,
    pending: usize,
    /// Whether the retry partition may hold records not read yet: at start and after
    /// this task appended to it (nothing else writes to it).
    retry_unread: bool,
    /// The main offset store in flight under `NoEventLose` (at most one: the next
    /// batch runs while it completes, and the next store waits for it).
    main_store: Option<tokio::task::JoinHandle<Result<(), ClientError>>>,
    stop: watch::Receiver<bool>,
}

impl PartitionTask {
    /// A task for `partition`, reading the main partition from `main_start` (a group's
    /// position) or else from the named consumer's stored offset.
    pub(crate) async fn start(
        shared: Arc<Shared>,
        partition: u32,
        main_start: Option<u64>,
        stop: watch::Receiver<bool>,
    ) -> Result<Self, ClientError> {
        let name = shared.config.name.clone();
        let main_next = match main_start {
            Some(next) => next,
            None => match shared.main.stored_offset(&name, partition).await? {
                Some(consumed) => consumed + 1,
                None => shared.main.first_offset(partition).await?,
            },
        };
        let retry_stored = shared.retry.stored_offset(&name, partition).await?;
        let retry_next = match retry_stored {
            Some(consumed) => consumed + 1,
            None => shared.retry.first_offset(partition).await?,
        };
        Ok(Self {
            shared,
            partition,
            main_next,
            retry_next,
            retry_stored,
            keys: HashMap::new(),
            pending: 0,
            retry_unread: true,
            main_store: None,
            stop,
        })
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Runs until stopped. A failed step (the broker unreachable, say) is retried after
    /// a pause; nothing is dropped and no offset moves past unfinished work.
    pub(crate) async fn run(mut self) -> Result<(), TaskError> {
        let mut failures = 0u32;
        while !self.stopping() {
            match self.step().await {
                Ok(()) => failures = 0,
                Err(e) if fatal(&e) => return Err(TaskError::Client(e)),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    self.shared.metrics.errors.fetch_add(1, ORD);
                    tracing::warn!(partition = self.partition, error = %e, "events step failed; trying again");
                    let pause = (self.shared.config.poll_interval * failures).min(ERROR_PAUSE_MAX);
                    self.sleep(pause).await;
                }
            }
        }
        // A last store of what is done; a failure here leaves work to run again.
        if let Err(e) = self.settle_main_store().await {
            tracing::warn!(partition = self.partition, error = %e, "storing the main offset at shutdown failed");
        }
        if let Err(e) = self.store_retry_offset().await {
            tracing::warn!(partition = self.partition, error = %e, "storing the retry offset at shutdown failed");
        }
        Ok(())
    }

    async fn sleep(&mut self, d: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    async fn step(&mut self) -> Result<(), ClientError> {
        if self.retry_unread {
            self.read_retry().await?;
        }
        let due = self.due_keys();
        if !due.is_empty() {
            let mut writes = Writes::default();
            self.run_attempts(due, &mut writes).await?;
            self.write(writes).await?;
            self.read_retry().await?;
        }
        self.store_retry_offset().await?;
        self.publish_gauges();
        if self.pending >= self.shared.config.max_pending_retry {
            // Backpressure: the main partition waits until retries drain.
            let wait = self.until_next_due().min(self.shared.config.poll_interval);
            self.sleep(wait).await;
            return Ok(());
        }
        let wait = self.until_next_due().min(self.shared.config.poll_interval);
        let records = self.poll_main(wait).await?;
        if records.is_empty() {
            return Ok(());
        }
        let next = records.last().map_or(self.main_next, |r| r.offset + 1);
        if self.shared.config.mode == DeliveryMode::NoDoubleConsume {
            self.store_main(next).await?;
        }
        let mut writes = Writes::default();
        self.run_main(records, &mut writes).await?;
        self.write(writes).await?;
        if self.shared.config.mode == DeliveryMode::NoEventLose {
            // The batch is done; its store may complete while the next batch runs (a
            // crash before it does runs the batch again: at least once).
            self.settle_main_store().await?;
            let Some(consumed) = next.checked_sub(1) else {
                return Ok(());
            };
            let shared = Arc::clone(&self.shared);
            let p = self.partition;
            self.main_store = Some(tokio::spawn(async move {
                shared.store_main(Position::new(p, consumed)).await
            }));
        }
        self.main_next = next;
        Ok(())
    }

    /// Waits for the main offset store in flight, if any.
    async fn settle_main_store(&mut self) -> Result<(), ClientError> {
        match self.main_store.take() {
            None => Ok(()),
            Some(h) => match h.await {
                Ok(result) => result,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Ok(()),
            },
        }
    }

    fn until_next_due(&self) -> Duration {
        let now = now_us();
        self.keys
            .values()
            .map(|q| q.due_us(&self.shared.config.retry_delays))
            .min()
            .map_or(Duration::MAX, |due| {
                Duration::from_micros(u64::try_from(due.saturating_sub(now)).unwrap_or(0))
            })
    }

    fn due_keys(&self) -> Vec<Bytes> {
        let now = now_us();
        let mut due: Vec<(i64, Bytes)> = self
            .keys
            .iter()
            .map(|(k, q)| (q.due_us(&self.shared.config.retry_delays), k.clone()))
            .filter(|(d, _)| *d <= now)
            .collect();
        due.sort();
        due.into_iter().map(|(_, k)| k).collect()
    }

    /// Reads the retry partition to its end into the quarantine.
    async fn read_retry(&mut self) -> Result<(), ClientError> {
        let mut dead = Vec::new();
        loop {
            let fetched = match self
                .shared
                .retry
                .fetch(
                    Position::new(self.partition, self.retry_next),
                    FETCH_BYTES_MAX,
                    Duration::ZERO,
                )
                .await
            {
                Ok(f) => f,
                Err(e) => match skip_to(&e, self.partition) {
                    Some(to) => {
                        tracing::error!(partition = self.partition, error = %e, "retry records lost; going on after them");
                        self.retry_next = to.max(self.retry_next);
                        continue;
                    }
                    None => return Err(e),
                },
            };
            for record in fetched.records {
                self.retry_next = record.offset + 1;
                let header = match retry_header(&record) {
                    Ok(h) => h,
                    Err(e) => {
                        dead.push(raw_dead_letter(
                            &record,
                            DeadLetterReason::BadHeader,
                            &e.to_string(),
                            now_us(),
                            None,
                        ));
                        continue;
                    }
                };
                let Some(key) = record.key.clone().filter(|k| !k.is_empty()) else {
                    dead.push(raw_dead_letter(
                        &record,
                        DeadLetterReason::BadHeader,
                        "a retry record has no key",
                        now_us(),
                        None,
                    ));
                    continue;
                };
                match header.kind {
                    RetryKind::Done => {
                        if let Some(q) = self.keys.get_mut(&key) {
                            while q.fifo.front().is_some_and(|(o, _, _)| *o < record.offset) {
                                if let Some((_, h, _)) = q.fifo.pop_front() {
                                    q.sources.remove(&(
                                        h.source_partition,
                                        h.source_first,
                                        h.source_last,
                                    ));
                                }
                                self.pending -= 1;
                            }
                            if q.fifo.is_empty() {
                                self.keys.remove(&key);
                            } else {
                                q.settle(self.partition);
                            }
                        }
                    }
                    RetryKind::Work => {
                        let q = self.keys.entry(key).or_insert_with(Quarantined::new);
                        // Work standing for exactly the main records of a pending one
                        // is a second copy: a killed predecessor's append that landed
                        // after this task started (and failed or diverted the same
                        // records again), or the other way round. The first stands.
                        let source = (
                            header.source_partition,
                            header.source_first,
                            header.source_last,
                        );
                        if !q.sources.insert(source) {
                            continue;
                        }
                        q.fifo.push_back((record.offset, header, record));
                        q.settle(self.partition);
                        self.pending += 1;
                    }
                }
            }
            self.retry_next = self.retry_next.max(fetched.next_offset);
            if self.retry_next >= fetched.log_end {
                break;
            }
        }
        self.retry_unread = false;
        if self.pending > self.shared.config.max_pending_retry + self.shared.config.poll_count {
            tracing::warn!(
                partition = self.partition,
                pending = self.pending,
                "more retry records are pending than max_pending_retry allows (a lowered bound?)"
            );
        }
        if !dead.is_empty() {
            self.write(Writes {
                retry: Vec::new(),
                dead,
            })
            .await?;
        }
        Ok(())
    }

    /// Stores the retry offset just below the lowest pending record.
    async fn store_retry_offset(&mut self) -> Result<(), ClientError> {
        let lowest = self
            .keys
            .values()
            .filter_map(|q| q.fifo.front().map(|(o, _, _)| *o))
            .min()
            .unwrap_or(self.retry_next);
        let Some(consumed) = lowest.checked_sub(1) else {
            return Ok(());
        };
        if self.retry_stored.is_some_and(|s| s >= consumed) {
            return Ok(());
        }
        self.shared
            .retry
            .store_offset(
                &self.shared.config.name,
                Position::new(self.partition, consumed),
            )
            .await?;
        self.retry_stored = Some(consumed);
        Ok(())
    }

    async fn store_main(&mut self, next: u64) -> Result<(), ClientError> {
        let Some(consumed) = next.checked_sub(1) else {
            return Ok(());
        };
        self.shared
            .store_main(Position::new(self.partition, consumed))
            .await
    }

    /// Polls the main partition: up to `poll_count` records, waiting up to `wait`.
    async fn poll_main(&mut self, wait: Duration) -> Result<Vec<Record>, ClientError> {
        let mut stop = self.stop.clone();
        let fetch = self.shared.main.fetch(
            Position::new(self.partition, self.main_next),
            FETCH_BYTES_MAX,
            wait,
        );
        let fetched = tokio::select! {
            f = fetch => f,
            _ = stop.wait_for(|s| *s) => return Ok(Vec::new()),
        };
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => match skip_to(&e, self.partition) {
                Some(to) => {
                    tracing::error!(partition = self.partition, error = %e, "main records lost; going on after them");
                    self.main_next = to.max(self.main_next);
                    return Ok(Vec::new());
                }
                None => return Err(e),
            },
        };
        self.shared.set_lag(
            self.partition,
            fetched.log_end.saturating_sub(self.main_next),
        );
        let mut records = fetched.records;
        records.retain(|r| r.offset >= self.main_next);
        records.truncate(self.shared.config.poll_count);
        if records.is_empty() {
            self.main_next = self.main_next.max(fetched.next_offset);
        }
        Ok(records)
    }

    /// Dead letters first, then retry records (one batch: a key's remainder and its
    /// marker are appended together or not at all).
    async fn write(&mut self, writes: Writes) -> Result<(), ClientError> {
        let p = self.partition;
        if !writes.dead.is_empty() {
            let n = writes.dead.len() as u64;
            send_to(
                &self.shared.dlq_producer,
                p,
                self.shared.partitions,
                writes.dead,
            )
            .await?;
            self.shared.metrics.dead_letters.fetch_add(n, ORD);
        }
        if !writes.retry.is_empty() {
            self.retry_unread = true;
            let n = writes.retry.len() as u64;
            send_to(
                &self.shared.retry_producer,
                p,
                self.shared.partitions,
                writes.retry,
            )
            .await?;
            self.shared.metrics.retry_records.fetch_add(n, ORD);
        }
        Ok(())
    }

    /// A main batch: dead-letters what cannot be handled, diverts quarantined keys,
    /// plans and executes the rest.
    async fn run_main(
        &mut self,
        records: Vec<Record>,
        writes: &mut Writes,
    ) -> Result<(), ClientError> {
        let now = now_us();
        let mut batch = Batch::default();
        for record in records {
            let Some((key, header)) = self.admit(&record, now, writes) else {
                continue;
            };
            if let Some(q) = self.keys.get(&key) {
                if q.diverted_through.is_some_and(|d| record.offset <= d) {
                    // Already in the retry partition: a re-read after a crash.
                    continue;
                }
                let retry = RetryHeader {
                    kind: RetryKind::Work,
                    attempt: q.attempt,
                    first_failure_us: q.first_failure_us,
                    last_failure_us: q.last_failure_us,
                    last_error: ErrorClass::None,
                    source_partition: self.partition,
                    source_first: record.offset,
                    source_last: record.offset,
                };
                writes.retry.push(
                    WorkRecord {
                        key: &key,
                        body: record.value.to_vec(),
                        event: header,
                        ordering: header.ordering,
                        retry,
                        error: None,
                    }
                    .message(),
                );
                continue;
            }
            let source = Source {
                first: record.offset,
                last: record.offset,
            };
            batch.push(key, header, record, source);
        }
        let outcomes = self.execute(batch, writes).await;
        for outcome in outcomes {
            self.settle_outcome(outcome, None, now, writes);
        }
        Ok(())
    }

    /// Checks a record's header, handler and algebra; dead-letters (or skips) it if it
    /// cannot be handled.
    fn admit(
        &self,
        record: &Record,
        now: i64,
        writes: &mut Writes,
    ) -> Option<(Bytes, EventHeader)> {
        let (key, header) = match event_header(record) {
            Ok(h) => h,
            Err(e) => {
                writes.dead.push(raw_dead_letter(
                    record,
                    DeadLetterReason::BadHeader,
                    &e.to_string(),
                    now,
                    None,
                ));
                return None;
            }
        };
        let Some(handler) = self.shared.handlers.get(&header.tag) else {
            if self.shared.config.unhandled == Unhandled::DeadLetter {
                let why = format!("no handler of this consumer takes tag {}", header.tag);
                writes.dead.push(raw_dead_letter(
                    record,
                    DeadLetterReason::UnknownTag,
                    &why,
                    now,
                    None,
                ));
            }
            return None;
        };
        if handler.algebra() != header.algebra {
            let why = format!(
                "the record's algebra is {:?}, {}'s is {:?}",
                header.algebra,
                handler.type_name(),
                handler.algebra()
            );
            writes.dead.push(raw_dead_letter(
                record,
                DeadLetterReason::AlgebraMismatch,
                &why,
                now,
                None,
            ));
            return None;
        }
        Some((key, header))
    }

    /// Plans a batch, prepares its runs and executes its keys at once (each key a task
    /// of its own, at most `handler_concurrency` running).
    async fn execute(&self, batch: Batch, writes: &mut Writes) -> Vec<KeyOutcome> {
        let now = now_us();
        let plans = plan::plan(&batch.entries);
        let retrying = Retrying {
            transient_max: self.shared.config.transient_max,
            delays: self.shared.config.retry_delays.clone(),
        };
        let mut tasks = tokio::task::JoinSet::new();
        let mut works = Vec::new();
        for kp in plans {
            let first = kp.segments[0]
                .head
                .iter()
                .chain(&kp.segments[0].body)
                .chain(&kp.segments[0].tail)
                .next()
                .expect("a segment holds a record")
                .records[0];
            let key = batch.keys[first].clone();
            let mut stages = Vec::with_capacity(kp.segments.len());
            for segment in &kp.segments {
                let mut prepared = Vec::new();
                for (rank, runs) in segment.stages() {
                    let mut ready = Vec::with_capacity(runs.len());
                    for run in runs {
                        let handler = Arc::clone(&self.shared.handlers[&run.tag]);
                        let items: Vec<RawItem> = run
                            .records
                            .iter()
                            .map(|&i| RawItem {
                                value: batch.records[i].value.clone(),
                                codec: batch.headers[i].codec,
                                source: batch.sources[i],
                                record: i,
                            })
                            .collect();
                        let (items, failed) = handler.prepare(items);
                        for (item, why) in failed {
                            writes.dead.push(raw_dead_letter(
                                &batch.records[item.record],
                                DeadLetterReason::UndecodableBody,
                                &why,
                                now,
                                Some((item.source.first, item.source.last)),
                            ));
                        }
                        ready.push(ReadyRun { handler, items });
                    }
                    prepared.push((rank, ready));
                }
                stages.push(prepared);
            }
            let (attempt, first_failure_us) = self
                .keys
                .get(&key)
                .map_or((0, 0), |q| (q.attempt, q.first_failure_us));
            let work = KeyWork {
                key_hash: crate::key_hash(&key),
                key,
                partition: self.partition,
                attempt,
                first_failure: time_of(first_failure_us),
                plan: kp,
                stages,
            };
            works.push(work);
        }
        // Keys run at once, spread over a few tasks (one per runtime thread), each
        // running its keys concurrently: CPU-heavy handlers of different keys run in
        // parallel, without a task and a cross-thread wake-up per key.
        let groups = std::thread::available_parallelism()
            .map_or(2, std::num::NonZeroUsize::get)
            .clamp(1, 16)
            .min(works.len().max(1));
        let mut shares: Vec<Vec<KeyWork>> = (0..groups).map(|_| Vec::new()).collect();
        for (i, w) in works.into_iter().enumerate() {
            shares[i % groups].push(w);
        }
        for share in shares.into_iter().filter(|s| !s.is_empty()) {
            let permits = Arc::clone(&self.shared.permits);
            let retrying = retrying.clone();
            tasks.spawn(async move {
                let mut running = futures::stream::FuturesUnordered::new();
                let mut out = Vec::with_capacity(share.len());
                for work in share {
                    // At most `handler_concurrency` keys run at once over the consumer.
                    let permit = loop {
                        if let Ok(p) = Arc::clone(&permits).try_acquire_owned() {
                            break p;
                        }
                        match futures::StreamExt::next(&mut running).await {
                            Some(done) => out.push(done),
                            None => {
                                break Arc::clone(&permits)
                                    .acquire_owned()
                                    .await
                                    .expect("the semaphore is never closed");
                            }
                        }
                    };
                    let retrying = &retrying;
                    running.push(async move {
                        let outcome = run_key(work, retrying).await;
                        drop(permit);
                        outcome
                    });
                }
                while let Some(done) = futures::StreamExt::next(&mut running).await {
                    out.push(done);
                }
                out
            });
        }
        let mut outcomes = Vec::new();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(mut share) => outcomes.append(&mut share),
                // A panicking handler ends this partition's task: reported by `closed`,
                // and the batch is not committed.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("a key task was cancelled: {e}"),
            }
        }
        outcomes
    }

    /// Turns a key's outcome into writes: unrecoverable chunks to dead letters, a
    /// failure's remainder to retry (or, past the last attempt, its failed runs to dead
    /// letters and the rest to retry as new work). `attempt` is the key's failed
    /// attempts before this run, `None` for a main batch.
    fn settle_outcome(
        &self,
        outcome: KeyOutcome,
        retry_of: Option<&Quarantined>,
        now: i64,
        writes: &mut Writes,
    ) {
        let m = &self.shared.metrics;
        m.handled.fetch_add(outcome.handled, ORD);
        m.calls.fetch_add(outcome.calls, ORD);
        m.call_us.fetch_add(
            u64::try_from(outcome.call_time.as_micros()).unwrap_or(u64::MAX),
            ORD,
        );
        let work = &outcome.work;
        let before = retry_of.map_or(0, |q| q.attempt);
        let first_failure = retry_of
            .map(|q| q.first_failure_us)
            .filter(|&t| t > 0)
            .unwrap_or(now);
        for dead in &outcome.dead {
            for i in dead.range.clone() {
                let retry = self.retry_header(
                    &dead.run,
                    i,
                    before,
                    first_failure,
                    now,
                    ErrorClass::Unrecoverable,
                );
                writes.dead.push(dead_letter(
                    self.work_message(
                        work,
                        &dead.run,
                        i,
                        crate::Ordering::Relaxed,
                        retry,
                        Some(&dead.error),
                    ),
                    DeadLetterReason::Unrecoverable,
                ));
            }
        }
        let Some((failure, class, error)) = &outcome.failure else {
            return;
        };
        let attempt = before + 1;
        let exhausted =
            retry_of.is_some() && attempt as usize > self.shared.config.retry_delays.len();
        for piece in plan::remainder(&work.plan, failure) {
            let run = work.run(piece.segment, piece.rank, piece.run);
            let n = run.items.len() - piece.from;
            let failed_piece = is_failed(failure, &piece);
            for (i, ordering) in (piece.from..run.items.len()).zip(rewritten(piece.rank, n)) {
                if exhausted && failed_piece {
                    let retry = self.retry_header(run, i, attempt, first_failure, now, *class);
                    writes.dead.push(dead_letter(
                        self.work_message(
                            work,
                            run,
                            i,
                            crate::Ordering::Relaxed,
                            retry,
                            Some(error),
                        ),
                        DeadLetterReason::RetriesExhausted,
                    ));
                } else if exhausted {
                    // The rest of the key's work goes on as new work, due at once.
                    let retry = self.retry_header(run, i, 0, 0, 0, ErrorClass::None);
                    writes
                        .retry
                        .push(self.work_message(work, run, i, ordering, retry, None));
                } else {
                    let retry = self.retry_header(run, i, attempt, first_failure, now, *class);
                    writes.retry.push(self.work_message(
                        work,
                        run,
                        i,
                        ordering,
                        retry,
                        Some(error),
                    ));
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn retry_header(
        &self,
        run: &ReadyRun,
        i: usize,
        attempt: u32,
        first_failure_us: i64,
        last_failure_us: i64,
        class: ErrorClass,
    ) -> RetryHeader {
        let source = run.items.source(i);
        RetryHeader {
            kind: RetryKind::Work,
            attempt,
            first_failure_us,
            last_failure_us,
            last_error: class,
            source_partition: self.partition,
            source_first: source.first,
            source_last: source.last,
        }
    }

    /// The record of item `i` of a run: re-encoded, with the given ordering.
    fn work_message(
        &self,
        work: &KeyWork,
        run: &ReadyRun,
        i: usize,
        ordering: crate::Ordering,
        retry: RetryHeader,
        error: Option<&str>,
    ) -> Message {
        let (body, codec, error) = match run.items.encode(i) {
            Ok((body, codec)) => (body, codec, error.map(str::to_owned)),
            // Decoded with this codec a moment ago; kept, empty, with why, if not.
            Err(e) => (
                Vec::new(),
                crate::BodyCodec::Json,
                Some(format!("the body does not encode again: {e}")),
            ),
        };
        let event = EventHeader {
            tag: run.handler.tag(),
            key_hash: work.key_hash,
            ordering,
            algebra: run.handler.algebra(),
            codec,
        };
        WorkRecord {
            key: &work.key,
            body,
            event,
            ordering,
            retry,
            error: error.as_deref(),
        }
        .message()
    }

    /// Runs the due keys' attempts at once: each key's whole pending work planned,
    /// reduced and executed as one batch; then a done marker closes the key's old
    /// records and the remainder, if any, follows it (in the same append).
    async fn run_attempts(
        &mut self,
        due: Vec<Bytes>,
        writes: &mut Writes,
    ) -> Result<(), ClientError> {
        let now = now_us();
        let mut batch = Batch::default();
        for key in &due {
            let Some(q) = self.keys.get(key) else {
                continue;
            };
            for (_, header, record) in &q.fifo {
                let Some((k, h)) = self.admit(record, now, writes) else {
                    continue;
                };
                let source = Source {
                    first: header.source_first,
                    last: header.source_last,
                };
                batch.push(k, h, record.clone(), source);
            }
        }
        self.shared
            .metrics
            .attempts
            .fetch_add(due.len() as u64, ORD);
        let outcomes = self.execute(batch, writes).await;
        let mut remainders: HashMap<Bytes, Vec<Message>> = HashMap::new();
        for outcome in outcomes {
            let key = outcome.work.key.clone();
            let mut own = Writes::default();
            self.settle_outcome(outcome, self.keys.get(&key), now, &mut own);
            writes.dead.append(&mut own.dead);
            remainders.entry(key).or_default().append(&mut own.retry);
        }
        for key in due {
            writes.retry.push(done_marker(&key, self.partition));
            writes.retry.append(remainders.entry(key).or_default());
        }
        Ok(())
    }

    fn publish_gauges(&self) {
        let mut gauges = self.shared.metrics.partitions.lock();
        let g = gauges.entry(self.partition).or_default();
        g.quarantined_keys = self.keys.len() as u64;
        g.pending_retry = self.pending as u64;
        g.max_attempt = self.keys.values().map(|q| q.attempt).max().unwrap_or(0);
    }
}

fn is_failed(failure: &Failure, piece: &Piece) -> bool {
    piece.segment == failure.segment
        && piece.rank == failure.rank
        && failure.failed.iter().any(|(r, _)| *r == piece.run)
}

/// Records of a batch with what the planner needs.
#[derive(Default)]
struct Batch {
    entries: Vec<Entry>,
    keys: Vec<Bytes>,
    headers: Vec<EventHeader>,
    records: Vec<Record>,
    sources: Vec<Source>,
    ids: HashMap<Bytes, u64>,
}

impl Batch {
    fn push(&mut self, key: Bytes, header: EventHeader, record: Record, source: Source) {
        let next = self.ids.len() as u64;
        // The planner's key is an id of the key's bytes, so two keys with one hash are
        // still two keys.
        let id = *self.ids.entry(key.clone()).or_insert(next);
        self.entries.push(Entry {
            key: id,
            tag: header.tag,
            ordering: header.ordering,
        });
        self.keys.push(key);
        self.headers.push(header);
        self.records.push(record);
        self.sources.push(source);
    }
}

/// Sends messages to partition `p` of `topic`: keyed ones whose key routes there by key
/// (one batch, in order), others unkeyed to `p` with the key kept in a header.
async fn send_to(
    producer: &rill_client::Producer,
    p: u32,
    partitions: u32,
    messages: Vec<Message>,
) -> Result<(), ClientError> {
    let (keyed, other): (Vec<Message>, Vec<Message>) = messages.into_iter().partition(|m| {
        m.key
            .as_ref()
            .is_some_and(|k| partition_for_key(k, partitions) == p)
    });
    if !keyed.is_empty() {
        producer.send_batch(keyed).await?;
    }
    for mut m in other {
        if let Some(k) = m.key.take() {
            m = m.with_header(crate::KEY_HEADER, rill_client::Value::Bytes(k));
        }
        producer.send_to_partition(m, p).await?;
    }
    Ok(())
}

/// Where to go on after an error that names records that cannot be delivered.
fn skip_to(e: &ClientError, partition: u32) -> Option<u64> {
    let (p, _from, to) = e.lost_range()?;
    (p == partition).then_some(to).flatten()
}

/// Errors after which the task cannot go on: the topic or partition is gone.
fn fatal(e: &ClientError) -> bool {
    matches!(
        e.code(),
        Some(
            rill_client::ErrorCode::TopicNotFound
                | rill_client::ErrorCode::PartitionNotFound
                | rill_client::ErrorCode::StreamNotFound
        )
    ) || matches!(e, ClientError::Closed | ClientError::Shutdown)
}

const ORD: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;
