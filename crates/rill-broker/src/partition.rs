//! One partition in the broker: its log (which can be reopened after a failure), its
//! idempotent-producer table and the signal that wakes long polls. In a cluster, a
//! partition is a replica served through the cluster's seam ([`ReplicaLog`]), or held
//! on other nodes (docs/REPLICATION.md §11.1).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;
use rill_format::{BatchHeader, BuiltBatch, ProducerInfo};
use rill_storage::{
    Appended, CheckedBatch, DurableTicket, LogConfig, LogEnv, LogRead, PartitionLog, StorageError,
};
use tokio::sync::watch;

use crate::BrokerError;
use crate::cluster::{Placement, ReplicaLog};
use crate::producer::{Check, ProducerTable, RecentBatch};

mod tune;

/// Segments scanned at open to rebuild producer state: a retry that crosses a restart
/// targets a recent batch, which lives in the last segments.
const PRODUCER_SCAN_SEGMENTS: usize = 2;
/// First wait before a failed partition is reopened again; it doubles up to the max.
const HEAL_BACKOFF: Duration = Duration::from_secs(1);
const HEAL_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// What [`Partition::try_append_inline`] did.
#[derive(Debug)]
pub(crate) enum Inline {
    /// Appended (or acknowledged again, a retry's).
    Appended(Produced),
    /// An idempotent batch whose predecessor has not been appended yet.
    Wait,
    /// Needs the blocking pool: a segment roll, or a sealed range's answer.
    Blocking,
}

/// The outcome of a produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// First offset of the batch.
    pub base_offset: u64,
    /// Last offset of the batch.
    pub last_offset: u64,
    /// Its append time, µs.
    pub timestamp_us: i64,
    /// The batch was a retry of an appended one; nothing was appended.
    pub duplicate: bool,
}

impl Produced {
    /// The answer to a batch just appended.
    fn appended(appended: &Appended) -> Self {
        Self {
            base_offset: appended.base_offset,
            last_offset: appended.last_offset,
            timestamp_us: appended.timestamp_us,
            duplicate: false,
        }
    }

    /// The answer to a retry of a batch appended before: its original offsets.
    fn again(recent: &RecentBatch) -> Self {
        Self {
            base_offset: recent.base_offset,
            last_offset: recent.base_offset + u64::from(recent.count) - 1,
            timestamp_us: recent.timestamp_us,
            duplicate: true,
        }
    }
}

/// What stands behind a partition.
#[derive(Debug, Clone)]
enum State {
    Open(Arc<PartitionLog>),
    /// The log could not be opened at all (its files are unreadable): nothing is
    /// served until a reopen succeeds.
    Unavailable(String),
    /// A cluster's partition with a replica on this node.
    Replicated(Arc<dyn ReplicaLog>),
    /// A cluster's partition whose replicas are other nodes.
    Elsewhere(Vec<u64>),
}

/// Where an elastic topic's range stands (docs/RANGES.md §3). A plain topic's partitions
/// stay `Open`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seal {
    Open,
    /// A split or merge fenced its log and has not committed yet: appends get
    /// `MIGRATING`.
    Sealing,
    /// Sealed at `end`: appends get `NOT_OWNER`. `conflict` says why the log does not
    /// end at `end` (found at open), if it does not.
    Sealed {
        end: u64,
        conflict: Option<String>,
    },
}

/// A batch recorded in a replicated partition's producer table before its offsets
/// are known (they are stamped as the leader's log appends it).
const PENDING: u64 = u64::MAX;
/// How long a produce waits for its batch (or the original of a retry) to commit.
const COMMIT_WAIT: Duration = Duration::from_secs(30);

/// The outcome of a proposal, for the retries that wait on it.
type Outcome = Option<Result<(u64, u64, i64), Arc<BrokerError>>>;

/// A replicated partition's idempotent-producer state: valid for one leadership term.
#[derive(Debug)]
struct Replicated {
    /// The term the table was built for; `None` until the first produce of a term.
    term: Option<u64>,
    table: ProducerTable,
    /// Proposals not yet committed, by (producer id, base sequence).
    pending: std::collections::HashMap<(u64, u32), watch::Receiver<Outcome>>,
}

/// Options a partition's producer table and log are opened with.
#[derive(Debug, Clone)]
pub(crate) struct PartitionOptions {
    pub(crate) log: LogConfig,
    pub(crate) producers_max: usize,
    pub(crate) recent_batches: usize,
    pub(crate) sequence_wait: Duration,
}

#[derive(Debug)]
pub(crate) struct Partition {
    /// `stream/topic/partition`, for messages.
    name: (String, String, u32),
    dir: PathBuf,
    /// The options it is (re)opened with: a topic's alter changes the log's, which a
    /// reopen after a failure then keeps. Read, never held across a call.
    options: RwLock<PartitionOptions>,
    env: LogEnv,
    state: RwLock<State>,
    /// A std mutex on purpose: a panic while it is held leaves the table in doubt, and
    /// its poisoning then refuses appends until a reopen rebuilds the table.
    producers: Mutex<ProducerTable>,
    /// Signalled after every idempotent append (and when a seal is committed), for
    /// batches waiting on a predecessor: on the blocking pool (`sequenced`), and on a
    /// request's task (`sequenced_async`).
    sequenced: Condvar,
    sequenced_async: tokio::sync::Notify,
    /// Batches waiting on `sequenced`, changed and read under the table's lock: a
    /// condition variable's `notify_all` is a system call even with nobody to wake.
    sequence_waiters: AtomicUsize,
    /// The visible next offset, for long polls.
    appended: watch::Sender<u64>,
    /// Set by `close`: long polls waiting on the partition end at once.
    closed: std::sync::atomic::AtomicBool,
    /// An elastic topic's range: open, being sealed, or sealed.
    seal: RwLock<Seal>,
    /// Bytes of the batches appended since the partition was opened (duplicates not
    /// counted), for the range policy's write rates (docs/RANGES.md §7).
    written: std::sync::atomic::AtomicU64,
    /// When the next automatic reopen may be tried, and the back-off after it.
    heal: parking_lot::Mutex<(Instant, Duration)>,
    /// A replica's producer table (for this leadership term) and the signal that a
    /// batch was proposed.
    replicated: tokio::sync::Mutex<Replicated>,
    proposed: tokio::sync::Notify,
}

impl Partition {
    /// Opens the partition. A log that cannot be opened leaves the partition
    /// unavailable (with the reason), never fails the broker.
    pub(crate) fn open(
        name: (String, String, u32),
        dir: &Path,
        options: PartitionOptions,
        env: &LogEnv,
    ) -> Self {
        let (state, producers) = match open_log(dir, &options, env) {
            Ok((log, producers)) => (State::Open(Arc::new(log)), producers),
            Err(e) => {
                tracing::error!(partition = %format_name(&name), error = %e, "cannot open a partition: it is unavailable until repaired");
                (
                    State::Unavailable(e.to_string()),
                    ProducerTable::with_recent(options.producers_max, options.recent_batches),
                )
            }
        };
        let next = match &state {
            State::Open(log) => log.next_offset(),
            _ => 0,
        };
        if let State::Open(log) = &state
            && let Some(reason) = log.failure()
        {
            tracing::error!(partition = %format_name(&name), reason, "partition opened failed: it serves what is intact and refuses appends");
        }
        let (appended, _) = watch::channel(next);
        Self::with_state(name, dir, options, env, state, producers, appended)
    }

    fn with_state(
        name: (String, String, u32),
        dir: &Path,
        options: PartitionOptions,
        env: &LogEnv,
        state: State,
        producers: ProducerTable,
        appended: watch::Sender<u64>,
    ) -> Self {
        let replicated = Replicated {
            term: None,
            table: ProducerTable::with_recent(options.producers_max, options.recent_batches),
            pending: std::collections::HashMap::new(),
        };
        Self {
            name,
            dir: dir.to_path_buf(),
            options: RwLock::new(options),
            env: env.clone(),
            state: RwLock::new(state),
            producers: Mutex::new(producers),
            sequenced: Condvar::new(),
            sequenced_async: tokio::sync::Notify::new(),
            sequence_waiters: AtomicUsize::new(0),
            appended,
            closed: std::sync::atomic::AtomicBool::new(false),
            seal: RwLock::new(Seal::Open),
            written: std::sync::atomic::AtomicU64::new(0),
            heal: parking_lot::Mutex::new((Instant::now() + HEAL_BACKOFF, HEAL_BACKOFF)),
            replicated: tokio::sync::Mutex::new(replicated),
            proposed: tokio::sync::Notify::new(),
        }
    }

    /// A cluster's partition: its replica on this node, or a note of where it is.
    pub(crate) fn clustered(
        name: (String, String, u32),
        placement: &Placement,
        options: PartitionOptions,
        env: &LogEnv,
    ) -> Self {
        let (state, next) = match &placement.local {
            Some(replica) => (
                State::Replicated(Arc::clone(replica)),
                replica.high_watermark(),
            ),
            None => (State::Elsewhere(placement.replicas.clone()), 0),
        };
        let producers = ProducerTable::with_recent(options.producers_max, options.recent_batches);
        let (appended, _) = watch::channel(next);
        Self::with_state(
            name,
            Path::new(""),
            options,
            env,
            state,
            producers,
            appended,
        )
    }

    /// The replica, for a cluster's partition with one here.
    pub(crate) fn replica(&self) -> Option<Arc<dyn ReplicaLog>> {
        match &*self.state.read() {
            State::Replicated(r) => Some(Arc::clone(r)),
            _ => None,
        }
    }

    /// Whether this is a cluster's partition (replicated here or held elsewhere).
    pub(crate) fn is_clustered(&self) -> bool {
        matches!(
            &*self.state.read(),
            State::Replicated(_) | State::Elsewhere(_)
        )
    }

    fn not_leader(&self, leader: Option<u64>) -> BrokerError {
        BrokerError::NotLeader {
            what: format!("partition {}", format_name(&self.name)),
            leader,
            address: None,
        }
    }

    /// The open log, or why there is none. For a replica, its local log: reads of it
    /// must stay below the high watermark ([`Partition::fetch`] and the offset lookups
    /// do).
    pub(crate) fn log(&self) -> Result<Arc<PartitionLog>, BrokerError> {
        match &*self.state.read() {
            State::Open(log) => Ok(Arc::clone(log)),
            State::Replicated(r) => Ok(r.log()),
            State::Elsewhere(replicas) => Err(BrokerError::NotLeader {
                what: format!(
                    "partition {} (no replica of it runs on this node now; its replicas are nodes {replicas:?})",
                    format_name(&self.name)
                ),
                leader: None,
                address: None,
            }),
            State::Unavailable(reason) => Err(BrokerError::PartitionUnavailable {
                stream: self.name.0.clone(),
                topic: self.name.1.clone(),
                partition: self.name.2,
                reason: reason.clone(),
            }),
        }
    }

    /// The end readers may see: the log's next offset, or a replica's high watermark.
    pub(crate) fn visible_end(&self) -> Result<u64, BrokerError> {
        match &*self.state.read() {
            State::Replicated(r) => Ok(r.high_watermark()),
            _ => Ok(self.log()?.next_offset()),
        }
    }

    /// Why the partition refuses appends, if it does.
    pub(crate) fn failure(&self) -> Option<String> {
        if let Seal::Sealed {
            conflict: Some(conflict),
            ..
        } = &*self.seal.read()
        {
            return Some(conflict.clone());
        }
        match &*self.state.read() {
            State::Open(log) => log.failure().or_else(|| {
                self.producers
                    .is_poisoned()
                    .then(|| "producer table in doubt after a panic; reopen it".to_owned())
            }),
            State::Unavailable(reason) => Some(format!("cannot be opened: {reason}")),
            State::Replicated(r) => r.log().failure(),
            State::Elsewhere(_) => None,
        }
    }

    fn lock_producers(&self) -> Result<MutexGuard<'_, ProducerTable>, BrokerError> {
        self.producers.lock().map_err(|_| {
            StorageError::Poisoned {
                cause: "append (a panic while the producer table was held)",
            }
            .into()
        })
    }

    /// Whether appending to this partition waits for an fsync (`always`): such appends
    /// go to the blocking pool. Others are writes into the page cache, tried inline
    /// first ([`Partition::try_append_inline`]).
    pub(crate) fn append_waits_for_sync(&self) -> bool {
        self.options.read().log.durability == rill_storage::Durability::Always
    }

    /// Counts `bytes` of a batch appended (not a duplicate's).
    pub(crate) fn count_written(&self, bytes: u64) {
        self.written.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes appended since the partition was opened.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// The range's state (an elastic topic's; `Open` otherwise).
    pub(crate) fn seal(&self) -> Seal {
        self.seal.read().clone()
    }

    /// Step 1 of sealing (docs/RANGES.md §3): fences the log, so no append completes
    /// from now on, and returns where it ends. Appends get `MIGRATING` until
    /// [`Partition::finish_seal`] or [`Partition::abort_seal`].
    pub(crate) fn begin_seal(&self) -> Result<u64, BrokerError> {
        let log = self.log()?;
        *self.seal.write() = Seal::Sealing;
        match log.fence() {
            Ok(end) => Ok(end),
            Err(e) => {
                *self.seal.write() = Seal::Open;
                Err(e.into())
            }
        }
    }

    /// The seal was committed: appends get `NOT_OWNER` from now on, and batches waiting
    /// for a predecessor are answered at once.
    pub(crate) fn finish_seal(&self, end: u64) {
        *self.seal.write() = Seal::Sealed {
            end,
            conflict: None,
        };
        let _guard = self.producers.lock();
        self.wake_sequence_waiters();
    }

    /// The seal failed before it was committed: appends resume.
    pub(crate) fn abort_seal(&self) {
        if let Ok(log) = self.log()
            && let Err(e) = log.unfence()
        {
            tracing::warn!(partition = %format_name(&self.name), error = %e, "lifting a fence");
        }
        *self.seal.write() = Seal::Open;
    }

    /// A range the catalog says is sealed at `end`, at open or reopen: fenced, and
    /// failed with both offsets named if its log does not end exactly there (never
    /// truncated, never appended to).
    pub(crate) fn open_sealed(&self, end: u64) {
        let conflict = match self.log().and_then(|log| Ok(log.fence()?)) {
            Ok(next) if next == end => None,
            Ok(next) => {
                let reason = format!(
                    "range {} was sealed at offset {end} but its log ends at {next}",
                    format_name(&self.name)
                );
                tracing::error!(partition = %format_name(&self.name), reason, "a sealed range's log does not end at its seal");
                Some(reason)
            }
            // Unavailable (its own failure says why) or closed.
            Err(_) => None,
        };
        *self.seal.write() = Seal::Sealed { end, conflict };
    }

    /// In a cluster: the catalog says this range is sealed at `end` (its group holds
    /// the seal, which refuses every batch after it; docs/RANGES.md §9). Appends get
    /// `NOT_OWNER` from now on.
    pub(crate) fn mark_sealed(&self, end: u64) {
        if matches!(*self.seal.read(), Seal::Sealed { .. }) {
            return;
        }
        *self.seal.write() = Seal::Sealed {
            end,
            conflict: None,
        };
    }

    /// What a replica's refusal of a batch answers: `MIGRATING` while its range is
    /// being sealed, `NOT_OWNER` once the catalog says it is sealed.
    fn replica_refused(&self, e: BrokerError) -> BrokerError {
        match e {
            BrokerError::RangeMigrating { .. } => self.sealed_error().unwrap_or(e),
            e => e,
        }
    }

    /// The error a sealed range answers an append with, if it is sealed.
    fn sealed_error(&self) -> Option<BrokerError> {
        match &*self.seal.read() {
            Seal::Sealed { end, .. } => Some(BrokerError::RangeSealed {
                stream: self.name.0.clone(),
                topic: self.name.1.clone(),
                partition: self.name.2,
                end: *end,
            }),
            _ => None,
        }
    }

    /// What an append refused by the log answers: a fenced log is a range being sealed
    /// (`MIGRATING`) or sealed (`NOT_OWNER`).
    fn append_refused(&self, e: StorageError) -> BrokerError {
        if !matches!(e, StorageError::Fenced { .. }) {
            return e.into();
        }
        self.sealed_error()
            .unwrap_or_else(|| BrokerError::RangeMigrating {
                stream: self.name.0.clone(),
                topic: self.name.1.clone(),
                partition: self.name.2,
            })
    }

    /// Records an idempotent producer's appended batch in the table (held by the
    /// caller) and wakes batches waiting for their predecessor.
    fn record_appended(
        &self,
        table: &mut ProducerTable,
        p: ProducerInfo,
        count: u32,
        appended: &Appended,
        ticket: DurableTicket,
    ) {
        table.record(
            p,
            RecentBatch {
                base_sequence: p.base_sequence,
                count,
                base_offset: appended.base_offset,
                timestamp_us: appended.timestamp_us,
                ticket,
            },
        );
        self.wake_sequence_waiters();
    }

    /// Wakes the batches waiting for a predecessor; the caller holds the table's lock.
    fn wake_sequence_waiters(&self) {
        if self.sequence_waiters.load(Ordering::Relaxed) > 0 {
            self.sequenced.notify_all();
        }
        self.sequenced_async.notify_waiters();
    }

    /// Checks a produced batch whole (its CRC, its records, the log's size limit),
    /// once: the checked batch is what an append, or its retry, writes.
    pub(crate) fn check<'a>(&self, batch: &'a [u8]) -> Result<CheckedBatch<'a>, BrokerError> {
        Ok(self.log()?.check(batch)?)
    }

    /// [`Partition::check`] of `batch`, or of `built` when `built` is `batch` (a batch
    /// this process built: its records and body checksum are not checked again).
    pub(crate) fn check_as<'a>(
        &self,
        batch: &'a Bytes,
        built: Option<&'a BuiltBatch>,
    ) -> Result<CheckedBatch<'a>, BrokerError> {
        match built {
            Some(built) if built.is(batch) => Ok(self.log()?.check_built(built)?),
            _ => self.check(batch),
        }
    }

    /// When an idempotent batch arriving now stops waiting for its predecessor.
    pub(crate) fn sequence_deadline(&self) -> Instant {
        Instant::now() + self.options.read().sequence_wait
    }

    /// Resolves at the next idempotent append or committed seal; to be enabled before
    /// the batch is tried, so that one in between is not missed.
    pub(crate) fn sequenced(&self) -> tokio::sync::futures::Notified<'_> {
        self.sequenced_async.notified()
    }

    /// Appends a checked batch that waits for no fsync, if that needs no blocking work.
    /// Otherwise it answers why not, having appended and recorded nothing: the segment
    /// must roll first, which syncs and creates files (the blocking pool's work,
    /// [`Partition::append_blocking`]), or an idempotent producer's batch must wait for
    /// its predecessor (a pipelining client's requests are handled concurrently, so
    /// they may arrive out of order), which the caller awaits with
    /// [`Partition::sequenced`] before trying again.
    ///
    /// An idempotent batch is checked against the producer table and recorded in it
    /// under the table's lock, held across the write only, as on the blocking path; a
    /// retry of a batch already stored is acknowledged again without a second append.
    pub(crate) fn try_append_inline(
        &self,
        checked: &CheckedBatch<'_>,
        header: &BatchHeader,
    ) -> Result<Inline, BrokerError> {
        let log = self.log()?;
        let (producer, count) = (header.producer, header.record_count);
        let mut producers = match producer {
            Some(_) => Some(self.lock_producers()?),
            None => None,
        };
        if let (Some(p), Some(table)) = (producer, producers.as_mut()) {
            match table.check(p, count)? {
                Check::Append => {}
                Check::Duplicate(recent) => {
                    drop(producers);
                    log.wait_durable(recent.ticket)?;
                    return Ok(Inline::Appended(Produced::again(&recent)));
                }
                // A sealed range appends nothing more: the blocking path says so.
                Check::Wait { .. } if self.sealed_error().is_some() => {
                    return Ok(Inline::Blocking);
                }
                Check::Wait { .. } => return Ok(Inline::Wait),
            }
        }
        let Some((appended, ticket)) = log
            .try_append(checked)
            .map_err(|e| self.append_refused(e))?
        else {
            return Ok(Inline::Blocking);
        };
        if let (Some(p), Some(table)) = (producer, producers.as_mut()) {
            // Its successor may be waiting on the blocking pool.
            self.record_appended(table, p, count, &appended, ticket);
        }
        drop(producers);
        let durable = log.wait_durable(ticket);
        self.appended.send_replace(log.next_offset());
        durable?;
        Ok(Inline::Appended(Produced::appended(&appended)))
    }

    /// Appends a checked batch whose header was parsed from it (blocking: writes, and
    /// waits for the durability policy). An idempotent batch waits for its predecessor
    /// until `deadline` ([`Partition::sequence_deadline`], taken when it arrived); the
    /// producer-table lock is held across the write only (not across a roll's fsync or
    /// the durability wait).
    pub(crate) fn append_blocking(
        &self,
        checked: &CheckedBatch<'_>,
        header: &BatchHeader,
        deadline: Instant,
    ) -> Result<Produced, BrokerError> {
        let log = self.log()?;
        let (producer, count) = (header.producer, header.record_count);
        let (produced, ticket) = loop {
            let mut producers = self.lock_producers()?;
            while let Some(p) = producer {
                match producers.check(p, count)? {
                    Check::Append => break,
                    Check::Duplicate(recent) => {
                        drop(producers);
                        log.wait_durable(recent.ticket)?;
                        return Ok(Produced::again(&recent));
                    }
                    Check::Wait { known } => {
                        // A sealed range appends nothing more: its predecessor never
                        // will be either.
                        if let Some(sealed) = self.sealed_error() {
                            return Err(sealed);
                        }
                        let now = Instant::now();
                        if now >= deadline {
                            return Err(if known {
                                BrokerError::OutOfOrderSequence {
                                    producer_id: p.id,
                                    expected: producers.next_sequence(p.id).unwrap_or(0),
                                    got: p.base_sequence,
                                }
                            } else {
                                // Its predecessor never came: the state was forgotten.
                                BrokerError::UnknownProducerId {
                                    producer_id: p.id,
                                    epoch: p.epoch,
                                    sequence: p.base_sequence,
                                }
                            });
                        }
                        // Counted under the table's lock, as the notifier checks it.
                        self.sequence_waiters.fetch_add(1, Ordering::Relaxed);
                        let woken = self.sequenced.wait_timeout(producers, deadline - now);
                        self.sequence_waiters.fetch_sub(1, Ordering::Relaxed);
                        producers = woken
                            .map_err(|_| StorageError::Poisoned {
                                cause: "append (a panic while the producer table was held)",
                            })?
                            .0;
                    }
                }
            }
            let Some((appended, ticket)) = log
                .try_append(checked)
                .map_err(|e| self.append_refused(e))?
            else {
                // The segment must roll: do it without the producer lock, then decide
                // again (another batch may have come first).
                drop(producers);
                log.make_room(checked.len())?;
                continue;
            };
            if let Some(p) = producer {
                self.record_appended(&mut producers, p, count, &appended, ticket);
            }
            break (Produced::appended(&appended), ticket);
        };
        let durable = log.wait_durable(ticket);
        // Wake long polls whether or not this append succeeded: a group sync may have
        // published other batches.
        self.appended.send_replace(log.next_offset());
        durable?;
        Ok(produced)
    }

    /// Reads from `offset` on the blocking pool; waits up to `max_wait` for at least
    /// `min_bytes`.
    pub(crate) async fn fetch(
        &self,
        offset: u64,
        max_bytes: usize,
        max_wait: Duration,
        min_bytes: usize,
    ) -> Result<LogRead, BrokerError> {
        if let Some(replica) = self.replica() {
            return self
                .fetch_replicated(&replica, offset, max_bytes, max_wait, min_bytes)
                .await;
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut waiter = self.appended.subscribe();
        let mut read = read_blocking(self.log()?, offset, max_bytes).await?;
        loop {
            if read.bytes.len() >= min_bytes.max(1) || max_wait.is_zero() {
                return Ok(read);
            }
            // A closed partition (its topic deleted, the broker shutting down) has
            // nothing more to wait for: the caller finds out why.
            if self.closed.load(Ordering::Acquire) {
                return Err(StorageError::Closed.into());
            }
            // The waiter was subscribed before the read (and `changed` marks what it
            // saw), so an append between a read and this wait is never missed.
            match tokio::time::timeout_at(deadline, waiter.changed()).await {
                Ok(Ok(())) => {}
                // Timed out, or the partition is being dropped: answer with what we have.
                Ok(Err(_)) | Err(_) => {
                    return read_blocking(self.log()?, offset, max_bytes).await;
                }
            }
            read = read_blocking(self.log()?, offset, max_bytes).await?;
        }
    }

    /// Whether an automatic reopen is due: the log is poisoned (a failed write or
    /// fsync, or a panic) or could not be opened, and its back-off has passed. Damage
    /// is not healed automatically: an operator accepts it.
    pub(crate) fn heal_due(&self, now: Instant) -> bool {
        self.broken() && self.heal.lock().0 <= now
    }

    /// Whether only a reopen can make the partition take appends again: its log is
    /// poisoned or could not be opened, or a panic left the producer table in doubt.
    pub(crate) fn broken(&self) -> bool {
        match &*self.state.read() {
            State::Open(log) => log.poisoned().is_some() || self.producers.is_poisoned(),
            State::Unavailable(_) => true,
            // The cluster heals its replicas.
            State::Replicated(_) | State::Elsewhere(_) => false,
        }
    }

    /// Closes the log and opens it again with recovery, which reads what is really on
    /// disk, and rebuilds the producer table from it. On failure the back-off doubles.
    pub(crate) fn reopen(&self) -> Result<(), BrokerError> {
        if let State::Open(old) = &*self.state.read() {
            // A poisoned log does not sync at close: nothing it holds is trusted.
            if let Err(e) = old.close() {
                tracing::warn!(partition = %format_name(&self.name), error = %e, "closing a partition before reopening it");
            }
        }
        let options = self.options.read().clone();
        let opened = open_log(&self.dir, &options, &self.env);
        let mut heal = self.heal.lock();
        match opened {
            Ok((log, table)) => {
                let mut producers = self.producers.lock().unwrap_or_else(|poisoned| {
                    // Replaced below, so what the panic left does not matter.
                    poisoned.into_inner()
                });
                *producers = table;
                self.producers.clear_poison();
                let next = log.next_offset();
                *self.state.write() = State::Open(Arc::new(log));
                drop(producers);
                // A reopened log takes appends until fenced again.
                let seal = self.seal();
                match seal {
                    Seal::Open => {}
                    Seal::Sealing => {
                        if let Ok(log) = self.log() {
                            let _ = log.fence();
                        }
                    }
                    Seal::Sealed { end, .. } => self.open_sealed(end),
                }
                *heal = (Instant::now() + HEAL_BACKOFF, HEAL_BACKOFF);
                self.appended.send_replace(next);
                tracing::warn!(partition = %format_name(&self.name), "partition reopened with recovery");
                Ok(())
            }
            Err(e) => {
                let backoff = (heal.1 * 2).min(HEAL_BACKOFF_MAX);
                *heal = (Instant::now() + heal.1, backoff);
                // A closed old log still serves reads; keep it unless there was none.
                let mut state = self.state.write();
                if let State::Unavailable(reason) = &mut *state {
                    *reason = e.to_string();
                }
                Err(e)
            }
        }
    }

    pub(crate) fn close(&self) -> Result<(), BrokerError> {
        // A cluster's replicas are closed by the cluster node.
        if let State::Open(log) = &*self.state.read() {
            self.closed.store(true, Ordering::Release);
            log.close()?;
            // Wake long polls so they answer now.
            self.appended.send_replace(log.next_offset());
        }
        Ok(())
    }
}

impl Partition {
    /// Reads committed batches from `offset` (served by the leader only), waiting up to
    /// `max_wait` for `min_bytes` as the high watermark moves.
    async fn fetch_replicated(
        &self,
        replica: &Arc<dyn ReplicaLog>,
        offset: u64,
        max_bytes: usize,
        max_wait: Duration,
        min_bytes: usize,
    ) -> Result<LogRead, BrokerError> {
        if replica.leading().is_none() {
            return Err(self.not_leader(replica.leader()));
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut waiter = replica.watch_high_watermark();
        loop {
            let hwm = *waiter.borrow_and_update();
            let read = read_committed(replica.log(), offset, max_bytes, hwm).await?;
            if read.bytes.len() >= min_bytes.max(1) || max_wait.is_zero() {
                return Ok(read);
            }
            match tokio::time::timeout_at(deadline, waiter.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    let hwm = replica.high_watermark();
                    return read_committed(replica.log(), offset, max_bytes, hwm).await;
                }
            }
        }
    }

    /// Appends a batch through the partition's group (the leader only): returns once a
    /// majority holds it. An idempotent batch is checked against the table of this
    /// leadership term, recorded as it is proposed (docs/REPLICATION.md §11.1).
    pub(crate) async fn produce_replicated(
        &self,
        replica: &Arc<dyn ReplicaLog>,
        batch: Bytes,
        header: &BatchHeader,
    ) -> Result<Produced, BrokerError> {
        let log = replica.log();
        log.check(&batch)?;
        let Some(producer) = header.producer else {
            if let Some(e) = self.sealed_error() {
                return Err(e);
            }
            if replica.leading().is_none() {
                return Err(self.not_leader(replica.leader()));
            }
            let commit = replica
                .propose(batch)
                .await
                .map_err(|e| self.replica_refused(e))?;
            let (base_offset, last_offset, timestamp_us) =
                commit.await.map_err(|e| self.replica_refused(e))?;
            return Ok(Produced {
                base_offset,
                last_offset,
                timestamp_us,
                duplicate: false,
            });
        };
        let count = header.record_count;
        let deadline = Instant::now() + self.options.read().sequence_wait;
        loop {
            let mut st = self.replicated.lock().await;
            let Some(term) = replica.leading() else {
                return Err(self.not_leader(replica.leader()));
            };
            if st.term != Some(term) {
                // A new term: every batch in this leader's log will commit; the table
                // starts from them (synced, so the headers are readable).
                let scan = Arc::clone(&log);
                let headers = tokio::task::spawn_blocking(move || {
                    scan.sync()?;
                    scan.recent_batch_headers(PRODUCER_SCAN_SEGMENTS)
                })
                .await
                .map_err(|e| BrokerError::Internal(format!("producer scan failed: {e}")))??;
                let options = self.options.read();
                st.table =
                    ProducerTable::with_recent(options.producers_max, options.recent_batches);
                drop(options);
                st.table.rebuild(&headers);
                st.pending.clear();
                st.term = Some(term);
            }
            match st.table.check(producer, count)? {
                Check::Append => {
                    // A sealed range refuses new batches only after the check above:
                    // a retry of one it holds is answered as the duplicate it is, not
                    // sent on to a child (docs/RANGES.md §4).
                    if let Some(e) = self.sealed_error() {
                        return Err(e);
                    }
                    let commit = replica
                        .propose(batch)
                        .await
                        .map_err(|e| self.replica_refused(e))?;
                    st.table.record(
                        producer,
                        RecentBatch {
                            base_sequence: producer.base_sequence,
                            count,
                            base_offset: PENDING,
                            timestamp_us: 0,
                            ticket: DurableTicket::DURABLE,
                        },
                    );
                    let (tx, rx) = watch::channel::<Outcome>(None);
                    st.pending
                        .insert((producer.id, producer.base_sequence), rx.clone());
                    drop(st);
                    self.proposed.notify_waiters();
                    let outcome = tokio::time::timeout(COMMIT_WAIT, commit)
                        .await
                        .unwrap_or_else(|_| {
                            Err(BrokerError::ClusterTimeout(format!(
                                "a batch of {} was not committed within {COMMIT_WAIT:?}",
                                format_name(&self.name)
                            )))
                        });
                    let mut st = self.replicated.lock().await;
                    st.pending.remove(&(producer.id, producer.base_sequence));
                    match &outcome {
                        Ok((base, _, ts)) if st.term == Some(term) => {
                            st.table
                                .resolve(producer.id, producer.base_sequence, *base, *ts);
                        }
                        Ok(_) => {}
                        // Whether it is in the log is not known here: the next produce
                        // rebuilds the table from the log.
                        Err(_) => st.term = None,
                    }
                    drop(st);
                    let shared = outcome.map_err(Arc::new);
                    let _ = tx.send(Some(shared.clone()));
                    return produced(shared, false);
                }
                Check::Duplicate(recent) if recent.base_offset == PENDING => {
                    let rx = st
                        .pending
                        .get(&(producer.id, producer.base_sequence))
                        .cloned();
                    drop(st);
                    let Some(mut rx) = rx else {
                        // Resolved meanwhile: decide again.
                        continue;
                    };
                    let waited =
                        tokio::time::timeout(COMMIT_WAIT, rx.wait_for(Option::is_some)).await;
                    return match waited {
                        Ok(Ok(outcome)) => produced(outcome.clone().expect("some"), true),
                        _ => Err(BrokerError::ClusterTimeout(format!(
                            "the first copy of a retried batch of {} was not committed in time",
                            format_name(&self.name)
                        ))),
                    };
                }
                Check::Duplicate(recent) => {
                    drop(st);
                    let last = recent.base_offset + u64::from(recent.count) - 1;
                    let mut hwm = replica.watch_high_watermark();
                    let committed =
                        tokio::time::timeout(COMMIT_WAIT, hwm.wait_for(|&w| w > last)).await;
                    if !matches!(committed, Ok(Ok(_))) {
                        return Err(BrokerError::ClusterTimeout(format!(
                            "a retried batch of {} was not committed in time",
                            format_name(&self.name)
                        )));
                    }
                    return Ok(Produced {
                        base_offset: recent.base_offset,
                        last_offset: last,
                        timestamp_us: recent.timestamp_us,
                        duplicate: true,
                    });
                }
                Check::Wait { known } => {
                    let notified = self.proposed.notified();
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(if known {
                            BrokerError::OutOfOrderSequence {
                                producer_id: producer.id,
                                expected: st.table.next_sequence(producer.id).unwrap_or(0),
                                got: producer.base_sequence,
                            }
                        } else {
                            BrokerError::UnknownProducerId {
                                producer_id: producer.id,
                                epoch: producer.epoch,
                                sequence: producer.base_sequence,
                            }
                        });
                    }
                    drop(st);
                    let _ = tokio::time::timeout(deadline - now, notified).await;
                }
            }
        }
    }
}

/// A produce's answer from a proposal's outcome.
fn produced(
    outcome: Result<(u64, u64, i64), Arc<BrokerError>>,
    duplicate: bool,
) -> Result<Produced, BrokerError> {
    match outcome {
        Ok((base_offset, last_offset, timestamp_us)) => Ok(Produced {
            base_offset,
            last_offset,
            timestamp_us,
            duplicate,
        }),
        Err(e) => Err(match &*e {
            BrokerError::NotLeader {
                what,
                leader,
                address,
            } => BrokerError::NotLeader {
                what: what.clone(),
                leader: *leader,
                address: address.clone(),
            },
            other => BrokerError::ClusterTimeout(other.to_string()),
        }),
    }
}

/// Reads from a replica's log below the high watermark `hwm` (whole batches only).
async fn read_committed(
    log: Arc<PartitionLog>,
    offset: u64,
    max_bytes: usize,
    hwm: u64,
) -> Result<LogRead, BrokerError> {
    if offset >= hwm {
        if offset > hwm {
            return Err(StorageError::OffsetBeyondEnd {
                requested: offset,
                next_offset: hwm,
            }
            .into());
        }
        return Ok(LogRead {
            bytes: Vec::new(),
            next_offset: offset,
            log_start: log.log_start(),
            log_end: hwm,
        });
    }
    if offset >= log.next_offset() {
        // Committed (a majority holds it) but not yet synced here, so not yet visible
        // in this log: wait for the sync under way (the group commit of the appends)
        // rather than answer as if the log ended here.
        let syncing = Arc::clone(&log);
        tokio::task::spawn_blocking(move || syncing.sync())
            .await
            .map_err(|e| BrokerError::Internal(format!("sync task failed: {e}")))??;
    }
    let mut read = read_blocking(log, offset, max_bytes).await?;
    read.log_end = hwm;
    let mut keep = 0;
    let mut next = offset;
    for batch in read.batches() {
        let batch = batch.map_err(StorageError::from)?;
        if batch.next_offset() > hwm {
            break;
        }
        keep += batch.as_bytes().len();
        next = batch.next_offset();
    }
    read.bytes.truncate(keep);
    read.next_offset = next;
    read.log_end = hwm;
    Ok(read)
}

/// Opens a partition's log and rebuilds its producer table.
fn open_log(
    dir: &Path,
    options: &PartitionOptions,
    env: &LogEnv,
) -> Result<(PartitionLog, ProducerTable), BrokerError> {
    let log = PartitionLog::open_in(dir, options.log.clone(), env)?;
    let mut producers = ProducerTable::with_recent(options.producers_max, options.recent_batches);
    producers.rebuild(&log.recent_batch_headers(PRODUCER_SCAN_SEGMENTS)?);
    Ok((log, producers))
}

/// Reads from the page cache on the calling task when everything needed is there, and
/// otherwise on the blocking pool: a read that waits for the disk never runs on a
/// runtime worker, where a slow disk would stall unrelated connections.
async fn read_blocking(
    log: Arc<PartitionLog>,
    offset: u64,
    max_bytes: usize,
) -> Result<LogRead, BrokerError> {
    if let Some(read) = log.read_cached(offset, max_bytes) {
        return read.map_err(BrokerError::from);
    }
    tokio::task::spawn_blocking(move || log.read(offset, max_bytes))
        .await
        .map_err(|e| BrokerError::Internal(format!("read task failed: {e}")))?
        .map_err(BrokerError::from)
}

fn format_name(name: &(String, String, u32)) -> String {
    format!("{}/{}/{}", name.0, name.1, name.2)
}
