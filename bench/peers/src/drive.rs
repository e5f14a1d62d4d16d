//! What the peer drivers (Redis, NATS) share: the records producers send, the fixed-rate
//! schedule, and the phases of each workload kind, written once over a [`Peer`] that
//! only knows how to send one request, fetch once, or wait once for new records.
//!
//! Phases (see the contract in [`crate::workload`]):
//!
//! - **Produce.** Every producer sends its share of `warmup`, then waits; once all are
//!   done the measured phase starts for all of them at one instant and each sends its
//!   share of `messages`. Elapsed time ends when the last producer's last request is
//!   acknowledged.
//! - **Consume.** The producers fill the log with `warmup + messages` records (not
//!   measured). Each consumer then reads its partitions' part of the warm-up (split in
//!   proportion to what each partition holds), and after a common start reads the rest,
//!   exactly, one fetch at a time.
//! - **E2e.** Consumers start first (positioned at the end of the log), then producers
//!   send the warm-up; the measured phase starts once the consumers have received all
//!   of it, so every record received afterwards is a measured one. It ends at the
//!   receipt that brings the total to `warmup + messages`.
//!
//! Anything that makes no progress for [`STALL`] fails the run instead of hanging it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::{Bytes, BytesMut};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::measure::{Latency, RunResult, now_us};
use crate::workload::{self, Kind, Workload};

/// A phase that makes no progress for this long fails.
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// How long a follower waits for new records before checking whether it is done.
pub(crate) const FOLLOW_WAIT: Duration = Duration::from_millis(500);

/// How often the coordinator checks a phase's condition.
const POLL: Duration = Duration::from_millis(2);

/// One record a producer sends.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) partition: u32,
    pub(crate) key: Option<String>,
    pub(crate) value: Bytes,
}

/// One producer's connection: sends one request (all of `records`, in one round trip
/// where the system allows it) and returns once all are acknowledged.
pub(crate) trait Sender: Send + 'static {
    fn send(&mut self, records: Vec<Record>) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// One consumer's connection for the consume workload, positioned at the start of its
/// partitions (created after the fill).
pub(crate) trait Reader: Send + 'static {
    /// One fetch request for at most `max` records of `partition`; how many came.
    fn fetch(
        &mut self,
        partition: u32,
        max: usize,
    ) -> impl Future<Output = anyhow::Result<usize>> + Send;
}

/// One consumer's connection for the e2e workload, following its partitions from the
/// end of the log (created before any producer sends).
pub(crate) trait Follower: Send + 'static {
    /// Waits up to about [`FOLLOW_WAIT`] for records and appends the send stamp of each
    /// one received (see [`crate::measure::stamp_of`]); appends nothing on a timeout.
    fn poll(&mut self, stamps: &mut Vec<u64>) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// A system under test, with a server already running.
pub(crate) trait Peer: Sync {
    type Producer: Sender;
    type Reader: Reader;
    type Follower: Follower;

    /// A producer on its own connection.
    fn producer(&self, index: u32) -> impl Future<Output = anyhow::Result<Self::Producer>> + Send;

    /// A consume-workload consumer of `partitions`, on its own connection.
    fn reader(
        &self,
        index: u32,
        partitions: &[u32],
    ) -> impl Future<Output = anyhow::Result<Self::Reader>> + Send;

    /// An e2e consumer of `partitions`, on its own connection, that will receive only
    /// records sent after this returns.
    fn follower(
        &self,
        index: u32,
        partitions: &[u32],
    ) -> impl Future<Output = anyhow::Result<Self::Follower>> + Send;
}

/// Records of `total` that worker `index` of `workers` handles: even shares, the first
/// `total % workers` workers one more.
pub(crate) fn share(total: u64, workers: u32, index: u32) -> u64 {
    let n = u64::from(workers.max(1));
    total / n + u64::from(u64::from(index) < total % n)
}

/// The partitions consumer `consumer` reads: those with `p % consumers == consumer`, so
/// no partition has two consumers (consumers beyond `partitions` get none).
pub(crate) fn partitions_of(consumer: u32, consumers: u32, partitions: u32) -> Vec<u32> {
    (0..partitions)
        .filter(|p| p % consumers.max(1) == consumer)
        .collect()
}

/// Splits `total` (at most the sum of `holdings`) over partitions in proportion to what
/// each holds, exactly: floors first, then one more to each of the first that have room.
pub(crate) fn split_by(total: u64, holdings: &[u64]) -> Vec<u64> {
    let sum: u128 = holdings.iter().map(|&h| u128::from(h)).sum();
    if sum == 0 {
        return vec![0; holdings.len()];
    }
    let total = u128::from(total).min(sum);
    let mut parts: Vec<u64> = holdings
        .iter()
        .map(|&h| u64::try_from(total * u128::from(h) / sum).unwrap_or(h))
        .collect();
    let mut left = u64::try_from(total).unwrap_or(u64::MAX) - parts.iter().sum::<u64>();
    // Fewer than `holdings.len()` are left, and there is room for them (total <= sum).
    while left > 0 {
        for (part, &h) in parts.iter_mut().zip(holdings) {
            if left > 0 && *part < h {
                *part += 1;
                left -= 1;
            }
        }
    }
    parts
}

/// A fixed rate: `per_second` records/s spread over `producers`, so each producer's
/// record `i` is due `i * producers / per_second` seconds after the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    per_second: u64,
    producers: u32,
}

impl Pace {
    pub(crate) fn new(per_second: u64, producers: u32) -> anyhow::Result<Self> {
        anyhow::ensure!(per_second > 0, "a fixed rate must be above 0 records/s");
        Ok(Self {
            per_second,
            producers: producers.max(1),
        })
    }

    /// When record `i` is due, after the start (rounded up to the nanosecond, so that
    /// `i < due(offset(i))`).
    pub(crate) fn offset(self, i: u64) -> Duration {
        let num = u128::from(i) * 1_000_000_000 * u128::from(self.producers);
        let ns = num.div_ceil(u128::from(self.per_second));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// How many records are due `elapsed` after the start (those whose offset is at
    /// most `elapsed`), at most `total`.
    pub(crate) fn due(self, elapsed: Duration, total: u64) -> u64 {
        let num = elapsed.as_nanos() * u128::from(self.per_second);
        let count = num / (1_000_000_000 * u128::from(self.producers)) + 1;
        u64::try_from(count).unwrap_or(u64::MAX).min(total)
    }
}

/// The instant a phase starts, with the same moment in µs since the Unix epoch (for the
/// stamps e2e values carry).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    at: Instant,
    epoch_us: u64,
}

impl Start {
    pub(crate) fn now() -> Self {
        Self {
            at: Instant::now(),
            epoch_us: now_us(),
        }
    }
}

/// The records of one producer, in order, across phases: values of `size` bytes in 26
/// rotations of `abc...z`, keys as [`workload::key`], and, unkeyed, each request to
/// the next partition round-robin from `producer % partitions`.
#[derive(Debug)]
pub(crate) struct Source {
    producer: u32,
    partitions: u32,
    keyed: bool,
    /// Write the send stamp into the first 8 bytes of each value (e2e).
    stamped: bool,
    values: Vec<Bytes>,
    /// Index of the next record.
    next: u64,
    /// Requests taken so far (for round-robin).
    requests: u64,
}

impl Source {
    pub(crate) fn new(w: &Workload, producer: u32) -> Self {
        let stamped = w.kind == Kind::E2e;
        // A stamp needs 8 bytes; e2e values are never shorter.
        let size = if stamped { w.size.max(8) } else { w.size };
        let values = (0..26u8)
            .map(|r| {
                (0..size)
                    .map(|k| b'a' + ((k % 26) as u8 + r) % 26)
                    .collect::<Vec<u8>>()
                    .into()
            })
            .collect();
        Self {
            producer,
            partitions: w.partitions.max(1),
            keyed: w.keyed,
            stamped,
            values,
            next: 0,
            requests: 0,
        }
    }

    /// The next `n` records, as one request; record `k` of them stamped `stamp(k)`.
    pub(crate) fn take(&mut self, n: usize, stamp: impl Fn(u64) -> u64) -> Vec<Record> {
        let round_robin =
            ((u64::from(self.producer) + self.requests) % u64::from(self.partitions)) as u32;
        self.requests += 1;
        let records = (0..n as u64)
            .map(|k| {
                let i = self.next + k;
                let base = &self.values[(i % 26) as usize];
                let value = if self.stamped {
                    let mut v = BytesMut::from(&base[..]);
                    v[..8].copy_from_slice(&stamp(k).to_le_bytes());
                    v.freeze()
                } else {
                    base.clone()
                };
                let (key, partition) = if self.keyed {
                    let key = workload::key(u64::from(self.producer), i);
                    let p = workload::partition_for_key(key.as_bytes(), self.partitions);
                    (Some(key), p)
                } else {
                    (None, round_robin)
                };
                Record {
                    partition,
                    key,
                    value,
                }
            })
            .collect();
        self.next += n as u64;
        records
    }
}

/// Sends `count` records of `source` in requests of at most `batch`, one in flight:
/// as fast as acknowledged, or paced from `start`. Records latency into `latency` (per
/// request at max rate, per record from its due time when paced), adds the records sent
/// to each partition to `per_partition`, and returns when the last ack came.
#[allow(clippy::too_many_arguments)] // One phase of one producer, spelled out.
pub(crate) async fn send_phase<S: Sender>(
    sender: &mut S,
    source: &mut Source,
    count: u64,
    batch: usize,
    pace: Option<Pace>,
    start: Start,
    mut latency: Option<&mut Latency>,
    per_partition: &mut [u64],
) -> anyhow::Result<Instant> {
    let batch = batch.max(1);
    let mut sent = 0u64;
    let mut last = Instant::now();
    while sent < count {
        let (n, first_due) = match pace {
            None => ((count - sent).min(batch as u64), None),
            Some(pace) => {
                let due = pace.due(Instant::now().saturating_duration_since(start.at), count);
                if due <= sent {
                    pause_until(start.at + pace.offset(sent)).await?;
                    continue;
                }
                ((due - sent).min(batch as u64), Some(sent))
            }
        };
        let records = match (pace, first_due) {
            (Some(pace), Some(first)) => source.take(n as usize, |k| {
                start.epoch_us + micros(pace.offset(first + k))
            }),
            _ => {
                let stamp = now_us();
                source.take(n as usize, |_| stamp)
            }
        };
        for r in &records {
            if let Some(c) = per_partition.get_mut(r.partition as usize) {
                *c += 1;
            }
        }
        let sent_at = Instant::now();
        tokio::time::timeout(STALL, sender.send(records))
            .await
            .map_err(|_| anyhow::anyhow!("a request was not acknowledged within {STALL:?}"))??;
        last = Instant::now();
        if let Some(latency) = latency.as_deref_mut() {
            match (pace, first_due) {
                (Some(pace), Some(first)) => {
                    for k in 0..n {
                        let due = start.at + pace.offset(first + k);
                        latency.record(last.saturating_duration_since(due));
                    }
                }
                _ => latency.record(last - sent_at),
            }
        }
        sent += n;
    }
    Ok(last)
}

/// Sleeps until `deadline` with the OS timer (tens of µs late), not tokio's, which
/// rounds up to the next millisecond and would add up to 1 ms to every fixed-rate
/// latency (`rill bench` paces the same way). The last few ms sleep on a blocking-pool
/// thread, so no runtime worker is held.
async fn pause_until(deadline: Instant) -> anyhow::Result<()> {
    let wait = deadline.saturating_duration_since(Instant::now());
    if wait.is_zero() {
        return Ok(());
    }
    if wait > Duration::from_millis(5) {
        tokio::time::sleep_until((deadline - Duration::from_millis(3)).into()).await;
    }
    tokio::task::spawn_blocking(move || {
        let wait = deadline.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    })
    .await
    .context("the pacing thread failed")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What a phase measured: merged latency, and when it started and ended.
#[derive(Debug)]
struct Measured {
    latency: Latency,
    start: Instant,
    end: Instant,
}

impl Measured {
    /// Merges the tasks' latencies; the end is the last task's (or `start`).
    fn merge(start: Instant, outs: &[Outcome]) -> Self {
        let mut latency = Latency::new();
        let mut end = start;
        for out in outs {
            latency.merge(&out.latency);
            end = end.max(out.end.unwrap_or(start));
        }
        Self {
            latency,
            start,
            end,
        }
    }
}

/// What one task of a run measured.
#[derive(Debug, Default)]
struct Outcome {
    latency: Latency,
    /// When it finished its measured work.
    end: Option<Instant>,
    /// Records sent to each partition (fill).
    per_partition: Vec<u64>,
}

/// State the tasks of one run share with the coordinator.
#[derive(Debug)]
struct Shared {
    /// Tasks done with their warm-up (or fill).
    warmed: AtomicU32,
    /// Records received by all followers (e2e).
    received: AtomicU64,
    /// Milliseconds since `origin` of the last receipt (e2e), for stall detection.
    progress_ms: AtomicU64,
    origin: Instant,
}

impl Shared {
    fn new() -> Self {
        Self {
            warmed: AtomicU32::new(0),
            received: AtomicU64::new(0),
            progress_ms: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    fn mark_progress(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.progress_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn since_progress(&self) -> Duration {
        self.origin.elapsed().saturating_sub(Duration::from_millis(
            self.progress_ms.load(Ordering::Relaxed),
        ))
    }
}

/// Waits for the start signal of the measured phase.
async fn started(rx: &mut watch::Receiver<Option<Start>>) -> anyhow::Result<Start> {
    let start = rx
        .wait_for(Option::is_some)
        .await
        .context("the run was abandoned before its measured phase")?;
    start.ok_or_else(|| anyhow::anyhow!("start signal without a start"))
}

/// Runs `w` on `peer` (whose server is up) and measures it.
pub(crate) async fn run<P: Peer>(peer: &P, w: &Workload) -> anyhow::Result<RunResult> {
    anyhow::ensure!(
        w.partitions > 0 && w.producers > 0 && w.consumers > 0 && w.batch > 0,
        "workload {} needs at least one partition, producer, consumer and record per request",
        w.name
    );
    let pace = w.rate.map(|r| Pace::new(r, w.producers)).transpose()?;
    let m = match w.kind {
        Kind::Produce => produce(peer, w, pace, None).await?,
        Kind::E2e => e2e(peer, w, pace).await?,
        Kind::Consume => consume(peer, w).await?,
    };
    let bytes = w.messages * w.size as u64;
    Ok(RunResult::new(
        w.messages,
        bytes,
        m.end.saturating_duration_since(m.start),
        &m.latency,
    ))
}

/// Produce (and the producer side of e2e): warm-up, then the measured phase from a
/// common start. With `follow` (e2e), the measured phase waits until the followers
/// have received the whole warm-up, and producers record no latency.
async fn produce<P: Peer>(
    peer: &P,
    w: &Workload,
    pace: Option<Pace>,
    follow: Option<(&Shared, &mut JoinSet<anyhow::Result<Outcome>>)>,
) -> anyhow::Result<Measured> {
    let shared = Arc::new(Shared::new());
    let (tx, rx) = watch::channel(None::<Start>);
    let mut set = JoinSet::new();
    for j in 0..w.producers {
        let mut sender = peer
            .producer(j)
            .await
            .with_context(|| format!("connecting producer {j}"))?;
        let (w, shared, mut rx) = (w.clone(), Arc::clone(&shared), rx.clone());
        let record_latency = follow.is_none();
        set.spawn(async move {
            let mut source = Source::new(&w, j);
            let mut out = Outcome {
                per_partition: vec![0; w.partitions as usize],
                ..Outcome::default()
            };
            let warmup = share(w.warmup, w.producers, j);
            send_phase(
                &mut sender,
                &mut source,
                warmup,
                w.batch,
                pace,
                Start::now(),
                None,
                &mut out.per_partition,
            )
            .await
            .with_context(|| format!("producer {j}, warm-up"))?;
            shared.warmed.fetch_add(1, Ordering::SeqCst);
            let start = started(&mut rx).await?;
            let end = send_phase(
                &mut sender,
                &mut source,
                share(w.messages, w.producers, j),
                w.batch,
                pace,
                start,
                record_latency.then_some(&mut out.latency),
                &mut out.per_partition,
            )
            .await
            .with_context(|| format!("producer {j}"))?;
            out.end = Some(end);
            anyhow::Ok(out)
        });
    }
    let mut done = Vec::new();
    let producers = w.producers;
    match follow {
        None => {
            wait_until(&mut set, &mut done, "the producers' warm-up", || {
                shared.warmed.load(Ordering::SeqCst) >= producers
            })
            .await?;
        }
        Some((followed, followers)) => {
            let warmup = w.warmup;
            // Both sets are checked so that an error on either side ends the wait.
            let mut discard = Vec::new();
            loop {
                let ready = shared.warmed.load(Ordering::SeqCst) >= producers
                    && followed.received.load(Ordering::SeqCst) >= warmup;
                if ready {
                    break;
                }
                tokio::select! {
                    r = set.join_next(), if !set.is_empty() => collect(r, &mut done)?,
                    r = followers.join_next(), if !followers.is_empty() => {
                        collect(r, &mut discard)?;
                    }
                    () = tokio::time::sleep(POLL) => {}
                }
                if followed.since_progress() > STALL + Duration::from_secs(5) {
                    anyhow::bail!(
                        "the consumers received {} of {warmup} warm-up records, then nothing for {STALL:?}",
                        followed.received.load(Ordering::SeqCst)
                    );
                }
            }
            anyhow::ensure!(
                followed.received.load(Ordering::SeqCst) == warmup,
                "the consumers received {} warm-up records, {warmup} were sent",
                followed.received.load(Ordering::SeqCst)
            );
        }
    }
    let start = Start::now();
    tx.send_replace(Some(start));
    finish(&mut set, &mut done).await?;
    Ok(Measured::merge(start.at, &done))
}

/// E2e: followers first, then the producers; latency per record, elapsed to the
/// receipt of the last measured record.
async fn e2e<P: Peer>(peer: &P, w: &Workload, pace: Option<Pace>) -> anyhow::Result<Measured> {
    let shared = Arc::new(Shared::new());
    let target = w.warmup + w.messages;
    let mut followers = JoinSet::new();
    for c in 0..w.consumers {
        let parts = partitions_of(c, w.consumers, w.partitions);
        if parts.is_empty() {
            continue;
        }
        let mut follower = peer
            .follower(c, &parts)
            .await
            .with_context(|| format!("starting consumer {c}"))?;
        let (shared, warmup) = (Arc::clone(&shared), w.warmup);
        followers.spawn(async move {
            follow(&mut follower, &shared, warmup, target)
                .await
                .with_context(|| format!("consumer {c}"))
        });
    }
    shared.mark_progress();
    let sent = produce(peer, w, pace, Some((&shared, &mut followers))).await?;
    let mut outs = Vec::new();
    finish(&mut followers, &mut outs).await?;
    let received = shared.received.load(Ordering::SeqCst);
    anyhow::ensure!(
        received == target,
        "the consumers received {received} records, {target} were sent"
    );
    anyhow::ensure!(
        outs.iter().any(|o| o.end.is_some()) || w.messages == 0,
        "no measured record was received"
    );
    Ok(Measured::merge(sent.start, &outs))
}

/// One follower until all `target` records have been received by all followers.
async fn follow<F: Follower>(
    follower: &mut F,
    shared: &Shared,
    warmup: u64,
    target: u64,
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let mut stamps = Vec::new();
    while shared.received.load(Ordering::SeqCst) < target {
        stamps.clear();
        tokio::time::timeout(STALL, follower.poll(&mut stamps))
            .await
            .map_err(|_| anyhow::anyhow!("a read did not return within {STALL:?}"))??;
        if stamps.is_empty() {
            if shared.since_progress() > STALL {
                anyhow::bail!(
                    "received {} of {target} records, then nothing for {STALL:?}",
                    shared.received.load(Ordering::SeqCst)
                );
            }
            continue;
        }
        let (now, at) = (now_us(), Instant::now());
        let n = stamps.len() as u64;
        let before = shared.received.fetch_add(n, Ordering::SeqCst);
        shared.mark_progress();
        anyhow::ensure!(
            before + n <= target,
            "received {} records, only {target} were sent",
            before + n
        );
        // Measured records are sent only once the whole warm-up has been received, so a
        // read is either all warm-up or all measured.
        if before >= warmup {
            for &s in &stamps {
                out.latency.record_us(now.saturating_sub(s));
            }
            out.end = Some(at);
        }
    }
    Ok(out)
}

/// Consume: fill, read the warm-up, then read the rest from a common start.
async fn consume<P: Peer>(peer: &P, w: &Workload) -> anyhow::Result<Measured> {
    let holdings = fill(peer, w).await.context("filling the log")?;
    let total: u64 = holdings.iter().sum();
    anyhow::ensure!(
        total == w.warmup + w.messages,
        "the fill sent {total} records, expected {}",
        w.warmup + w.messages
    );
    let warm = split_by(w.warmup, &holdings);
    let shared = Arc::new(Shared::new());
    let (tx, rx) = watch::channel(None::<Start>);
    let mut set = JoinSet::new();
    let mut readers = 0;
    for c in 0..w.consumers {
        let parts = partitions_of(c, w.consumers, w.partitions);
        if parts.is_empty() {
            continue;
        }
        let mut reader = peer
            .reader(c, &parts)
            .await
            .with_context(|| format!("starting consumer {c}"))?;
        readers += 1;
        let first: Vec<(u32, u64)> = parts.iter().map(|&p| (p, warm[p as usize])).collect();
        let rest: Vec<(u32, u64)> = parts
            .iter()
            .map(|&p| (p, holdings[p as usize] - warm[p as usize]))
            .collect();
        let (shared, mut rx, batch) = (Arc::clone(&shared), rx.clone(), w.batch);
        set.spawn(async move {
            let mut out = Outcome::default();
            read_exactly(&mut reader, first, batch, None)
                .await
                .with_context(|| format!("consumer {c}, warm-up"))?;
            shared.warmed.fetch_add(1, Ordering::SeqCst);
            started(&mut rx).await?;
            read_exactly(&mut reader, rest, batch, Some(&mut out.latency))
                .await
                .with_context(|| format!("consumer {c}"))?;
            out.end = Some(Instant::now());
            anyhow::Ok(out)
        });
    }
    let mut done = Vec::new();
    wait_until(&mut set, &mut done, "the consumers' warm-up", || {
        shared.warmed.load(Ordering::SeqCst) >= readers
    })
    .await?;
    let start = Start::now();
    tx.send_replace(Some(start));
    finish(&mut set, &mut done).await?;
    Ok(Measured::merge(start.at, &done))
}

/// Sends `warmup + messages` records with all producers at full speed; returns how many
/// went to each partition.
async fn fill<P: Peer>(peer: &P, w: &Workload) -> anyhow::Result<Vec<u64>> {
    let mut set = JoinSet::new();
    for j in 0..w.producers {
        let mut sender = peer
            .producer(j)
            .await
            .with_context(|| format!("connecting producer {j}"))?;
        let w = w.clone();
        set.spawn(async move {
            let mut out = Outcome {
                per_partition: vec![0; w.partitions as usize],
                ..Outcome::default()
            };
            send_phase(
                &mut sender,
                &mut Source::new(&w, j),
                share(w.warmup + w.messages, w.producers, j),
                w.batch,
                None,
                Start::now(),
                None,
                &mut out.per_partition,
            )
            .await
            .with_context(|| format!("producer {j}"))?;
            anyhow::Ok(out)
        });
    }
    let mut done = Vec::new();
    finish(&mut set, &mut done).await?;
    let mut holdings = vec![0u64; w.partitions as usize];
    for out in &done {
        for (h, n) in holdings.iter_mut().zip(&out.per_partition) {
            *h += n;
        }
    }
    Ok(holdings)
}

/// Reads exactly `want` records from each partition, round-robin, fetches of at most
/// `batch`; records each fetch's latency into `latency`.
async fn read_exactly<R: Reader>(
    reader: &mut R,
    mut want: Vec<(u32, u64)>,
    batch: usize,
    mut latency: Option<&mut Latency>,
) -> anyhow::Result<()> {
    let mut last_progress = Instant::now();
    while want.iter().any(|&(_, left)| left > 0) {
        let mut progressed = false;
        for (partition, left) in want.iter_mut().filter(|(_, left)| *left > 0) {
            let max = (*left).min(batch as u64) as usize;
            let t0 = Instant::now();
            let got = tokio::time::timeout(STALL, reader.fetch(*partition, max))
                .await
                .map_err(|_| anyhow::anyhow!("a fetch did not return within {STALL:?}"))??;
            if let Some(latency) = latency.as_deref_mut() {
                latency.record(t0.elapsed());
            }
            anyhow::ensure!(
                got <= max,
                "a fetch of at most {max} records from partition {partition} returned {got}"
            );
            *left -= got as u64;
            progressed |= got > 0;
        }
        if progressed {
            last_progress = Instant::now();
        } else {
            let left: u64 = want.iter().map(|&(_, l)| l).sum();
            anyhow::ensure!(
                last_progress.elapsed() < STALL,
                "{left} records still to read, but nothing came for {STALL:?}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Ok(())
}

/// Moves a finished task's outcome into `done`, or returns its error.
fn collect(
    joined: Option<Result<anyhow::Result<Outcome>, tokio::task::JoinError>>,
    done: &mut Vec<Outcome>,
) -> anyhow::Result<()> {
    match joined {
        None => Ok(()),
        Some(Ok(Ok(out))) => {
            done.push(out);
            Ok(())
        }
        Some(Ok(Err(e))) => Err(e),
        Some(Err(e)) => Err(anyhow::anyhow!("a benchmark task failed: {e}")),
    }
}

/// Waits until `ready()`, failing as soon as a task fails.
async fn wait_until(
    set: &mut JoinSet<anyhow::Result<Outcome>>,
    done: &mut Vec<Outcome>,
    what: &str,
    ready: impl Fn() -> bool,
) -> anyhow::Result<()> {
    let began = Instant::now();
    while !ready() {
        tokio::select! {
            r = set.join_next(), if !set.is_empty() => collect(r, done)?,
            () = tokio::time::sleep(POLL) => {}
        }
        if set.is_empty() && !ready() {
            anyhow::bail!("every task ended before {what} was over");
        }
        // Every task has its own stall timeout; this only guards against a bug.
        anyhow::ensure!(
            began.elapsed() < 10 * STALL,
            "{what} did not end within {:?}",
            10 * STALL
        );
    }
    Ok(())
}

/// Waits for every task, failing on the first error.
async fn finish(
    set: &mut JoinSet<anyhow::Result<Outcome>>,
    done: &mut Vec<Outcome>,
) -> anyhow::Result<()> {
    while let Some(r) = set.join_next().await {
        collect(Some(r), done)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::default_set;

    fn workload(name: &str) -> Workload {
        default_set().into_iter().find(|w| w.name == name).unwrap()
    }

    #[test]
    fn shares_are_even_and_exact() {
        assert_eq!(share(10, 3, 0), 4);
        assert_eq!(share(10, 3, 1), 3);
        assert_eq!(share(10, 3, 2), 3);
        assert_eq!(share(2, 4, 3), 0);
        assert_eq!(share(7, 0, 0), 7);
        for (total, n) in [(0, 1), (1, 1), (2_000_000, 4), (300_001, 7), (5, 9)] {
            let sum: u64 = (0..n).map(|j| share(total, n, j)).sum();
            assert_eq!(sum, total, "{total} over {n}");
        }
    }

    #[test]
    fn each_partition_has_one_consumer() {
        assert_eq!(partitions_of(0, 2, 4), vec![0, 2]);
        assert_eq!(partitions_of(1, 2, 4), vec![1, 3]);
        assert_eq!(partitions_of(0, 1, 4), vec![0, 1, 2, 3]);
        assert_eq!(partitions_of(3, 4, 4), vec![3]);
        assert!(partitions_of(2, 4, 2).is_empty());
        for (consumers, partitions) in [(1, 1), (2, 4), (3, 4), (4, 4), (5, 4)] {
            let mut all: Vec<u32> = (0..consumers)
                .flat_map(|c| partitions_of(c, consumers, partitions))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..partitions).collect::<Vec<_>>());
        }
    }

    #[test]
    fn warmup_split_is_proportional_and_exact() {
        assert_eq!(split_by(10, &[50, 50]), vec![5, 5]);
        assert_eq!(split_by(10, &[10]), vec![10]);
        assert_eq!(split_by(3, &[1, 1, 1, 1]), vec![1, 1, 1, 0]);
        assert_eq!(split_by(5, &[0, 10]), vec![0, 5]);
        assert_eq!(split_by(5, &[]), Vec::<u64>::new());
        let holdings = [549_921, 550_330, 549_600, 550_149];
        let parts = split_by(200_000, &holdings);
        assert_eq!(parts.iter().sum::<u64>(), 200_000);
        for (p, h) in parts.iter().zip(holdings) {
            assert!(*p <= h);
            assert!(p.abs_diff(200_000 * h / holdings.iter().sum::<u64>()) <= 1);
        }
        // Never more than a partition holds, even asked for more than all.
        assert_eq!(split_by(100, &[2, 3]), vec![2, 3]);
    }

    #[test]
    fn pace_spreads_the_rate_over_producers() {
        let pace = Pace::new(100_000, 2).unwrap();
        // 50 000 records/s each: one every 20 µs.
        assert_eq!(pace.offset(0), Duration::ZERO);
        assert_eq!(pace.offset(1), Duration::from_micros(20));
        assert_eq!(pace.offset(50_000), Duration::from_secs(1));
        assert_eq!(pace.due(Duration::ZERO, 1000), 1);
        assert_eq!(pace.due(Duration::from_nanos(19_999), 1000), 1);
        assert_eq!(pace.due(Duration::from_micros(20), 1000), 2);
        assert_eq!(pace.due(Duration::from_secs(1), 1_000_000), 50_001);
        assert_eq!(pace.due(Duration::from_secs(100), 1000), 1000);
        assert!(Pace::new(0, 1).is_err());
    }

    #[test]
    fn due_and_offset_agree() {
        // A rate that does not divide a second evenly.
        let pace = Pace::new(7_000, 3).unwrap();
        for i in [0, 1, 2, 3, 999, 1_000, 12_345] {
            let at = pace.offset(i);
            assert_eq!(
                pace.due(at, u64::MAX),
                i + 1,
                "record {i} is due at its offset"
            );
            if let Some(before) = at.checked_sub(Duration::from_nanos(1)) {
                assert_eq!(
                    pace.due(before, u64::MAX),
                    i,
                    "record {i} not due before it"
                );
            }
        }
    }

    #[test]
    fn unkeyed_requests_go_round_robin() {
        let w = workload("consume-100b-4p");
        let mut src = Source::new(&w, 1);
        let parts: Vec<u32> = (0..5).map(|_| src.take(3, |_| 0)[0].partition).collect();
        assert_eq!(parts, vec![1, 2, 3, 0, 1]);
        let req = src.take(4, |_| 0);
        assert!(req.iter().all(|r| r.partition == 2 && r.key.is_none()));
        assert!(req.iter().all(|r| r.value.len() == 100));
        // Record 15 onwards: values rotate through the alphabet.
        assert_eq!(req[0].value[0], b'a' + 15);
        assert_eq!(req[1].value[..3], *b"qrs");
    }

    #[test]
    fn keyed_records_route_by_key() {
        let w = workload("produce-1k-keyed-4p");
        let mut src = Source::new(&w, 2);
        src.take(5, |_| 0);
        let req = src.take(10, |_| 0);
        for (k, r) in req.iter().enumerate() {
            let key = workload::key(2, 5 + k as u64);
            assert_eq!(r.key.as_deref(), Some(key.as_str()));
            assert_eq!(r.partition, workload::partition_for_key(key.as_bytes(), 4));
        }
    }

    #[test]
    fn e2e_values_carry_their_stamp() {
        let w = workload("e2e-1k-rate");
        let mut src = Source::new(&w, 0);
        let req = src.take(3, |k| 1_000 + k);
        let stamps: Vec<u64> = req
            .iter()
            .map(|r| crate::measure::stamp_of(&r.value).unwrap())
            .collect();
        assert_eq!(stamps, vec![1_000, 1_001, 1_002]);
        assert_eq!(req[0].value.len(), 1024);
        assert_eq!(req[0].value[8], b'a' + 8);
    }

    /// A fake system: producers count, paced sends are checked against the schedule.
    #[derive(Debug, Default)]
    struct Counting {
        requests: Vec<usize>,
    }

    impl Sender for Counting {
        async fn send(&mut self, records: Vec<Record>) -> anyhow::Result<()> {
            self.requests.push(records.len());
            Ok(())
        }
    }

    #[tokio::test]
    async fn max_rate_sends_full_batches_and_counts_partitions() {
        let w = workload("produce-1k-keyed-4p");
        let mut sender = Counting::default();
        let mut counts = vec![0; 4];
        let mut latency = Latency::new();
        send_phase(
            &mut sender,
            &mut Source::new(&w, 0),
            2_500,
            1_000,
            None,
            Start::now(),
            Some(&mut latency),
            &mut counts,
        )
        .await
        .unwrap();
        assert_eq!(sender.requests, vec![1_000, 1_000, 500]);
        assert_eq!(counts.iter().sum::<u64>(), 2_500);
        assert!(counts.iter().all(|&c| c > 400));
        assert!(latency.summary().max > 0.0);
    }

    #[tokio::test]
    async fn paced_sends_take_what_is_due() {
        let w = workload("e2e-1k-rate");
        let mut sender = Counting::default();
        let mut counts = vec![0; 1];
        let pace = Pace::new(20_000, 1).unwrap();
        let began = Instant::now();
        send_phase(
            &mut sender,
            &mut Source::new(&w, 0),
            2_000,
            100,
            Some(pace),
            Start::now(),
            None,
            &mut counts,
        )
        .await
        .unwrap();
        // 2 000 records at 20 000/s: the last is due after 99.95 ms.
        assert!(began.elapsed() >= Duration::from_micros(99_950));
        assert_eq!(sender.requests.iter().sum::<usize>(), 2_000);
        assert!(sender.requests.iter().all(|&n| (1..=100).contains(&n)));
        assert_eq!(counts, vec![2_000]);
    }

    #[tokio::test]
    async fn late_records_are_charged_from_their_due_time() {
        let w = workload("e2e-1k-rate");
        let mut sender = Counting::default();
        let mut latency = Latency::new();
        // Started 1 s ago: all 100 records are overdue; one request takes them all.
        let start = Start {
            at: Instant::now() - Duration::from_secs(1),
            epoch_us: now_us() - 1_000_000,
        };
        send_phase(
            &mut sender,
            &mut Source::new(&w, 0),
            100,
            1_000,
            Some(Pace::new(1_000, 1).unwrap()),
            start,
            Some(&mut latency),
            &mut [0],
        )
        .await
        .unwrap();
        assert_eq!(sender.requests, vec![100]);
        let s = latency.summary();
        // Record 0 was due 1 s ago, record 99 at 0.901 s ago.
        assert!(s.max >= 999_000.0 && s.p50 >= 940_000.0, "{s:?}");
    }
}
