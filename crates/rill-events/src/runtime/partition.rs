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
use super::execute::{KeyOutcome, KeyWork, ReadyRun, Retrying, StagedRun, run_key};
use super::records::{
    WorkRecord, dead_letter, done_marker, event_header, now_us, raw_dead_letter, retry_header,
    time_of,
};
use crate::config::{DeliveryMode, Unhandled};
use crate::header::{DeadLetterReason, ErrorClass, EventHeader, RetryHeader, RetryKind};
use crate::plan::{self, Entry, Failure, Piece, rewritten};
use crate::registry::{Erased, RawItem, Source};

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
    /// The main offset store in flight under `NoEventLose`: at most one; batches run
    /// on while it completes (a durable store waits for an fsync).
    main_store: Option<tokio::task::JoinHandle<Result<(), ClientError>>>,
    /// The last main offset done and not stored yet: stored when the store in flight
    /// ends, so stores coalesce to one per fsync rather than one per batch.
    main_unstored: Option<u64>,
    /// When the last main offset store began (`commit_interval` apart at least).
    main_stored_at: Option<std::time::Instant>,
    /// Main records fetched and not polled yet, from `main_next` on (at most one
    /// fetch, `FETCH_BYTES_MAX`): a fetch feeds several polls of `poll_count`.
    ahead: VecDeque<Record>,
    /// Where the fetch that filled `ahead` ends: the next read ahead starts there.
    ahead_next: u64,
    /// The main partition's end when `ahead` was fetched.
    ahead_log_end: u64,
    /// The read ahead in flight, if any (one fetch, `FETCH_BYTES_MAX`).
    prefetch: Option<tokio::task::JoinHandle<Result<rill_client::Fetched, ClientError>>>,
    /// The next main batch, admitted while this one's last keys ran elsewhere.
    admitted: Option<Admitted>,
    /// The last batch executed, freed while the next one's keys run elsewhere.
    finished: Option<Arc<Batch>>,
    stop: watch::Receiver<bool>,
}

/// A main batch admitted ahead of its turn: what can be handled, and the dead letters
/// of what cannot. Admission depends only on the records and the handlers; keys that
/// are quarantined when it runs are diverted then.
struct Admitted {
    /// Its first offset, and the offset after its last record.
    first: u64,
    next: u64,
    batch: Batch,
    dead: Vec<Message>,
    now: i64,
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
            main_stored_at: None,
            main_unstored: None,
            ahead: VecDeque::new(),
            ahead_next: 0,
            ahead_log_end: 0,
            prefetch: None,
            admitted: None,
            finished: None,
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
        if let Some(prefetch) = self.prefetch.take() {
            prefetch.abort();
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
        self.start_main_store().await?;
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
        let admitted = match self.admitted.take().filter(|a| a.first == self.main_next) {
            Some(admitted) => admitted,
            None => {
                let wait = self.until_next_due().min(self.shared.config.poll_interval);
                let records = self.poll_main(wait).await?;
                if records.is_empty() {
                    return Ok(());
                }
                self.admit_main(records)
            }
        };
        let next = admitted.next;
        if self.shared.config.mode == DeliveryMode::NoDoubleConsume {
            self.store_main(next).await?;
        }
        let mut writes = Writes::default();
        self.run_main(admitted, &mut writes).await?;
        self.write(writes).await?;
        self.main_next = next;
        if self.shared.config.mode == DeliveryMode::NoEventLose
            && let Some(consumed) = next.checked_sub(1)
        {
            // The batch is done; its store completes while the next batches run (a
            // crash before it does runs them again: at least once).
            self.main_unstored = Some(consumed);
            self.start_main_store().await?;
        }
        Ok(())
    }

    /// Starts a store of the last main offset done, unless one is in flight or began
    /// less than `commit_interval` ago (it starts in a later step). A failed store in
    /// flight fails here, and its offset is stored again.
    async fn start_main_store(&mut self) -> Result<(), ClientError> {
        if self.main_store.as_ref().is_some_and(|h| !h.is_finished()) {
            return Ok(());
        }
        if let Some(h) = self.main_store.take() {
            // Finished: this does not wait.
            Self::store_result(h.await)?;
        }
        if self
            .main_stored_at
            .is_some_and(|t| t.elapsed() < self.shared.config.commit_interval)
        {
            // Stored a moment ago: this offset waits for a later step.
            return Ok(());
        }
        let Some(consumed) = self.main_unstored.take() else {
            return Ok(());
        };
        self.main_stored_at = Some(std::time::Instant::now());
        let shared = Arc::clone(&self.shared);
        let p = self.partition;
        self.main_store = Some(tokio::spawn(async move {
            shared.store_main(Position::new(p, consumed)).await
        }));
        Ok(())
    }

    fn store_result(
        result: Result<Result<(), ClientError>, tokio::task::JoinError>,
    ) -> Result<(), ClientError> {
        match result {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Ok(()),
        }
    }

    /// Waits for the main offset store in flight, then stores the last offset done if
    /// that one did not.
    async fn settle_main_store(&mut self) -> Result<(), ClientError> {
        if let Some(h) = self.main_store.take() {
            Self::store_result(h.await)?;
        }
        if let Some(consumed) = self.main_unstored.take() {
            self.shared
                .store_main(Position::new(self.partition, consumed))
                .await?;
        }
        Ok(())
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

    /// Polls the main partition: up to `poll_count` records, from what was fetched
    /// ahead, or else a fetch waiting up to `wait`. While records are left ahead, the
    /// next fetch runs in the background (one at most), so fetching and decoding
    /// records overlaps running the keys.
    async fn poll_main(&mut self, wait: Duration) -> Result<Vec<Record>, ClientError> {
        if let Some(records) = self.take_ahead(self.main_next) {
            return Ok(records);
        }
        if let Some(mut prefetch) = self.prefetch.take() {
            let mut stop = self.stop.clone();
            let fetched = tokio::select! {
                f = &mut prefetch => f,
                _ = stop.wait_for(|s| *s) => {
                    prefetch.abort();
                    return Ok(Vec::new());
                }
            };
            // A failed or stale read ahead is read again below, which reports errors.
            if let Ok(Ok(fetched)) = fetched
                && fetched
                    .records
                    .first()
                    .is_some_and(|r| r.offset == self.main_next)
            {
                self.fill_ahead(fetched);
                if let Some(records) = self.take_ahead(self.main_next) {
                    return Ok(records);
                }
            }
        }
        self.ahead.clear();
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
        if !fetched.records.iter().any(|r| r.offset >= self.main_next) {
            self.main_next = self.main_next.max(fetched.next_offset);
            return Ok(Vec::new());
        }
        self.fill_ahead(fetched);
        Ok(self.take_ahead(self.main_next).unwrap_or_default())
    }

    /// Up to `poll_count` records from the read-ahead, if it goes on from `main_next`;
    /// starts the next read ahead when this one runs low.
    fn take_ahead(&mut self, from: u64) -> Option<Vec<Record>> {
        while self.ahead.front().is_some_and(|r| r.offset < from) {
            self.ahead.pop_front();
        }
        if self.ahead.front().is_none_or(|r| r.offset != from) {
            // Empty, or not contiguous with where the task is (it skipped lost records).
            self.ahead.clear();
            return None;
        }
        let n = self.shared.config.poll_count.min(self.ahead.len());
        let records: Vec<Record> = self.ahead.drain(..n).collect();
        self.shared
            .set_lag(self.partition, self.ahead_log_end.saturating_sub(from));
        Some(records)
    }

    /// Starts the next read ahead, unless one is in flight or the read-ahead reaches
    /// the log's end; says whether it did.
    fn start_prefetch(&mut self) -> bool {
        if self.prefetch.is_some() || self.ahead_next >= self.ahead_log_end {
            return false;
        }
        let main = self.shared.main.clone();
        let from = Position::new(self.partition, self.ahead_next);
        self.prefetch = Some(tokio::spawn(async move {
            main.fetch(from, FETCH_BYTES_MAX, Duration::ZERO).await
        }));
        true
    }

    /// Appends a fetch's records from `main_next` on to the read-ahead.
    fn fill_ahead(&mut self, fetched: rill_client::Fetched) {
        let main_next = self.main_next;
        if self.ahead.is_empty() {
            // The fetch's list becomes the read-ahead: no record is moved.
            self.ahead = VecDeque::from(fetched.records);
            while self.ahead.front().is_some_and(|r| r.offset < main_next) {
                self.ahead.pop_front();
            }
        } else {
            let records = fetched.records.into_iter();
            self.ahead.extend(records.filter(|r| r.offset >= main_next));
        }
        self.ahead_next = fetched.next_offset;
        self.ahead_log_end = fetched.log_end;
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

    /// Admits main records: what can be handled goes in a batch, dead letters (or
    /// nothing) for the rest.
    fn admit_main(&self, records: Vec<Record>) -> Admitted {
        let now = now_us();
        let first = records.first().map_or(self.main_next, |r| r.offset);
        let next = records.last().map_or(self.main_next, |r| r.offset + 1);
        let mut batch = Batch::with_capacity(records.len());
        let mut dead = Vec::new();
        for record in records {
            let Some(header) = self.admit(&record, now, &mut dead) else {
                continue;
            };
            let source = Source {
                first: record.offset,
                last: record.offset,
            };
            batch.push(header, record, source);
        }
        Admitted {
            first,
            next,
            batch,
            dead,
            now,
        }
    }

    /// A main batch: dead-letters what cannot be handled, diverts quarantined keys,
    /// plans and executes the rest.
    async fn run_main(
        &mut self,
        admitted: Admitted,
        writes: &mut Writes,
    ) -> Result<(), ClientError> {
        let Admitted {
            next,
            mut batch,
            mut dead,
            now,
            ..
        } = admitted;
        writes.dead.append(&mut dead);
        if !self.keys.is_empty()
            && batch
                .first_of
                .iter()
                .any(|&f| self.keys.contains_key(batch.key(f as usize)))
        {
            batch = self.divert(batch, writes);
        }
        let outcomes = self.execute(batch, writes, next).await;
        for outcome in outcomes {
            self.settle_outcome(outcome, None, now, writes);
        }
        Ok(())
    }

    /// The batch without the records of quarantined keys: those go to the retry
    /// partition behind the key's pending work (or nowhere, if they are there already).
    fn divert(&self, batch: Batch, writes: &mut Writes) -> Batch {
        let mut kept = Batch::default();
        let records = batch
            .headers
            .into_iter()
            .zip(batch.records)
            .zip(batch.sources);
        for ((header, record), source) in records {
            let Some(q) = record.key.as_ref().and_then(|k| self.keys.get(k)) else {
                kept.push(header, record, source);
                continue;
            };
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
            let key = record.key.as_ref().expect("an admitted record has a key");
            writes.retry.push(
                WorkRecord {
                    key,
                    body: record.value.to_vec(),
                    event: header,
                    ordering: header.ordering,
                    retry,
                    error: None,
                }
                .message(),
            );
        }
        kept
    }

    /// Checks a record's header, handler and algebra; dead-letters (or skips) it if it
    /// cannot be handled.
    fn admit(&self, record: &Record, now: i64, dead: &mut Vec<Message>) -> Option<EventHeader> {
        let header = match event_header(record) {
            Ok(h) => h,
            Err(e) => {
                dead.push(raw_dead_letter(
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
                dead.push(raw_dead_letter(
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
            dead.push(raw_dead_letter(
                record,
                DeadLetterReason::AlgebraMismatch,
                &why,
                now,
                None,
            ));
            return None;
        }
        Some(header)
    }

    /// Executes a batch's keys at once: its keys are shared out over a few tasks (one
    /// per runtime thread), each of which plans its keys, decodes and reduces their
    /// runs and runs them concurrently (at most `handler_concurrency` keys over the
    /// consumer). Planning, decoding and CPU-heavy handlers of different keys so run in
    /// parallel, without a task and a cross-thread wake-up per key.
    async fn execute(&mut self, batch: Batch, writes: &mut Writes, ahead: u64) -> Vec<KeyOutcome> {
        let retrying = Retrying {
            transient_max: self.shared.config.transient_max,
            delays: self.shared.config.retry_delays.clone(),
        };
        // The attempts so far of keys with pending work (only retries have any).
        let attempts: HashMap<Bytes, (u32, i64)> = if self.keys.is_empty() {
            HashMap::new()
        } else {
            batch
                .first_of
                .iter()
                .filter_map(|&first| {
                    let k = batch.key(first as usize);
                    self.keys
                        .get(k)
                        .map(|q| (k.clone(), (q.attempt, q.first_failure_us)))
                })
                .collect()
        };
        let attempts = Arc::new(attempts);
        let groups = self.shared.shards.min(batch.first_of.len().max(1));
        let shards = batch.shard(groups);
        // The shards read the batch in place: each has the indexes of its keys'
        // records, so no record is moved or copied to share the batch out.
        let batch = Arc::new(batch);
        let mut tasks = tokio::task::JoinSet::new();
        let mut shards = shards.into_iter();
        // The first shard runs in this task, the others in tasks of their own, which
        // other runtime threads take while this one works.
        let here = shards.next().unwrap_or_default();
        for shard in shards {
            let batch = Arc::clone(&batch);
            let shared = Arc::clone(&self.shared);
            let attempts = Arc::clone(&attempts);
            let retrying = retrying.clone();
            let partition = self.partition;
            tasks.spawn(async move {
                run_shard(&batch, &shard, &shared, partition, &attempts, &retrying).await
            });
        }
        // The task spawned last waits in this runtime thread's own slot (tokio's LIFO
        // slot, which other threads do not take from) until this task yields: the read
        // ahead goes there (decoded here after this shard), or else a task that does
        // nothing, so that no shard waits there.
        if !self.start_prefetch() && !tasks.is_empty() {
            tokio::spawn(async {});
        }
        let (mut outcomes, mut dead) = run_shard(
            &batch,
            &here,
            &self.shared,
            self.partition,
            &attempts,
            &retrying,
        )
        .await;
        writes.dead.append(&mut dead);
        // While the other shards end: free the last batch and admit the next.
        drop(self.finished.take());
        if self.admitted.is_none()
            && let Some(records) = self.take_ahead(ahead)
        {
            self.admitted = Some(self.admit_main(records));
        }
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((mut share, mut dead)) => {
                    outcomes.append(&mut share);
                    writes.dead.append(&mut dead);
                }
                // A panicking handler ends this partition's task: reported by `closed`,
                // and the batch is not committed.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("a key task was cancelled: {e}"),
            }
        }
        // Freed by this task, not the shards' (its records' reference counts are one
        // per fetched buffer, shared by all), while the next batch runs.
        self.finished = Some(batch);
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
        let Some(work) = &outcome.work else {
            // Done with nothing failed: nothing to write.
            return;
        };
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
            tag: run.tag,
            key_hash: work.key_hash,
            ordering,
            algebra: run.algebra,
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
                let Some(h) = self.admit(record, now, &mut writes.dead) else {
                    continue;
                };
                let source = Source {
                    first: header.source_first,
                    last: header.source_last,
                };
                batch.push(h, record.clone(), source);
            }
        }
        self.shared
            .metrics
            .attempts
            .fetch_add(due.len() as u64, ORD);
        let main_next = self.main_next;
        let outcomes = self.execute(batch, writes, main_next).await;
        let mut remainders: HashMap<Bytes, Vec<Message>> = HashMap::new();
        for outcome in outcomes {
            let key = outcome.key.clone();
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

/// Plans one shard of a batch (the records at `shard`, all of some keys) and runs its
/// keys concurrently: the keys' outcomes and the dead letters of records whose body
/// did not decode.
async fn run_shard(
    batch: &Batch,
    shard: &[u32],
    shared: &Shared,
    partition: u32,
    attempts: &HashMap<Bytes, (u32, i64)>,
    retrying: &Retrying,
) -> (Vec<KeyOutcome>, Vec<Message>) {
    let now = now_us();
    let entries: Vec<Entry> = shard.iter().map(|&i| batch.entries[i as usize]).collect();
    let plans = plan::plan(&entries);
    let mut running = futures::stream::FuturesUnordered::new();
    let mut out = Vec::with_capacity(plans.len());
    let mut dead = Vec::new();
    // Reused for every run's items.
    let mut items: Vec<RawItem<'_>> = Vec::new();
    let mut undecodable = Vec::new();
    for kp in plans {
        let work = prepare(
            batch,
            shard,
            shared,
            attempts,
            partition,
            kp,
            &mut items,
            &mut undecodable,
        );
        for (record, why) in undecodable.drain(..) {
            let source = batch.sources[record];
            dead.push(raw_dead_letter(
                &batch.records[record],
                DeadLetterReason::UndecodableBody,
                &why,
                now,
                Some((source.first, source.last)),
            ));
        }
        let mut key = Box::pin(async move {
            let mut outcome = run_key(work, &shared.handlers, retrying).await;
            outcome.release_if_done();
            outcome
        });
        // A key whose handlers finish without waiting is done here and then, without
        // a permit or joining the others.
        if let std::task::Poll::Ready(outcome) = futures::poll!(key.as_mut()) {
            out.push(outcome);
            continue;
        }
        // It waits: at most `handler_concurrency` waiting keys over the consumer (this
        // one has begun; it goes on once it has its permit).
        let permit = loop {
            if let Ok(p) = Arc::clone(&shared.permits).try_acquire_owned() {
                break p;
            }
            match futures::StreamExt::next(&mut running).await {
                Some(done) => out.push(done),
                None => {
                    break Arc::clone(&shared.permits)
                        .acquire_owned()
                        .await
                        .expect("the semaphore is never closed");
                }
            }
        };
        running.push(async move {
            let outcome = key.await;
            drop(permit);
            outcome
        });
    }
    while let Some(done) = futures::StreamExt::next(&mut running).await {
        out.push(done);
    }
    (out, dead)
}

/// Decodes and reduces the runs of one key's plan (its records are `shard[i]` of
/// `batch` for the plan's indexes `i`): the work to execute. Records whose body did
/// not decode go to `undecodable` (indexes into the batch, with why).
#[allow(clippy::too_many_arguments)]
fn prepare<'a>(
    batch: &'a Batch,
    shard: &[u32],
    shared: &Shared,
    attempts: &HashMap<Bytes, (u32, i64)>,
    partition: u32,
    kp: plan::KeyPlan,
    items: &mut Vec<RawItem<'a>>,
    undecodable: &mut Vec<(usize, String)>,
) -> KeyWork {
    let first = kp.segments[0]
        .in_order()
        .next()
        .expect("a segment holds a record")
        .2
        .records[0];
    // A copy of its own: a slice of the fetched buffer would share one reference count
    // with every record of the fetch, which the keys' clones (one per handler call's
    // context) would then contend for across threads.
    let key = Bytes::copy_from_slice(batch.key(shard[first] as usize));
    let mut runs =
        smallvec::SmallVec::with_capacity(kp.segments.iter().map(plan::Segment::len).sum());
    for (s, segment) in kp.segments.iter().enumerate() {
        for (rank, index, run) in segment.in_order() {
            let handler: &dyn Erased = &*shared.handlers[&run.tag];
            items.clear();
            items.extend(run.records.iter().map(|&i| {
                let at = shard[i] as usize;
                RawItem {
                    value: &batch.records[at].value,
                    codec: batch.headers[at].codec,
                    source: batch.sources[at],
                    record: at,
                }
            }));
            runs.push(StagedRun {
                segment: s,
                rank,
                index,
                run: ReadyRun {
                    tag: handler.tag(),
                    algebra: handler.algebra(),
                    items: handler.prepare(items, undecodable),
                },
            });
        }
    }
    let (attempt, first_failure_us) = attempts.get(&key).copied().unwrap_or((0, 0));
    KeyWork {
        key_hash: crate::key_hash(&key),
        key,
        partition,
        attempt,
        first_failure: time_of(first_failure_us),
        plan: kp,
        runs,
    }
}

/// Records of a batch with what the planner needs.
#[derive(Default)]
struct Batch {
    entries: Vec<Entry>,
    headers: Vec<EventHeader>,
    records: Vec<Record>,
    sources: Vec<Source>,
    /// The batch's keys, each as its id (the planner's key) and its hash.
    ids: hashbrown::HashTable<(u64, u32)>,
    /// Per id, the index of the key's first record.
    first_of: Vec<u32>,
    hasher: foldhash::fast::RandomState,
}

impl Batch {
    fn with_capacity(n: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
            headers: Vec::with_capacity(n),
            records: Vec::with_capacity(n),
            sources: Vec::with_capacity(n),
            ids: hashbrown::HashTable::with_capacity(n),
            first_of: Vec::with_capacity(n),
            ..Self::default()
        }
    }

    /// The batch's records shared out by key into at most `n` shards, each the indexes
    /// of its records in log order (all records of a key in one).
    fn shard(&self, n: usize) -> Vec<Vec<u32>> {
        let n = n.max(1);
        let mut shards: Vec<Vec<u32>> = (0..n)
            .map(|_| Vec::with_capacity(self.entries.len() / n + 1))
            .collect();
        for (i, entry) in self.entries.iter().enumerate() {
            shards[(entry.key % n as u64) as usize].push(i as u32);
        }
        shards.retain(|s| !s.is_empty());
        shards
    }

    /// The key of record `i` (an admitted record has one).
    fn key(&self, i: usize) -> &Bytes {
        self.records[i]
            .key
            .as_ref()
            .expect("an admitted record has a key")
    }

    /// Adds an admitted record (its key there and checked against its header's hash).
    fn push(&mut self, header: EventHeader, record: Record, source: Source) {
        use std::hash::BuildHasher;
        // The planner's key is an id of the key's bytes, so two keys with one hash are
        // still two keys. The key hash is the key's (checked when it was admitted).
        let hash = self.hasher.hash_one(header.key_hash);
        let key = record.key.as_ref().expect("an admitted record has a key");
        let (records, first_of) = (&self.records, &mut self.first_of);
        let next = first_of.len() as u32;
        let entry = self.ids.entry(
            hash,
            |&(h, id)| {
                h == hash && records[first_of[id as usize] as usize].key.as_ref() == Some(key)
            },
            |&(h, _)| h,
        );
        let id = match entry {
            hashbrown::hash_table::Entry::Occupied(o) => o.get().1,
            hashbrown::hash_table::Entry::Vacant(v) => {
                first_of.push(self.records.len() as u32);
                v.insert((hash, next));
                next
            }
        };
        self.entries.push(Entry {
            key: u64::from(id),
            tag: header.tag,
            ordering: header.ordering,
        });
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
