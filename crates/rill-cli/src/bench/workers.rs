//! The bench's tasks: producers, consumers, and the supervisor that waits for them,
//! shows progress and fails a run that stops making progress.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use rill_client::{Message, Position, Producer, Routing, Subscription, Topic};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::stats::Latency;
use super::{Api, Plan, Read};

/// A run that makes no progress for this long fails instead of hanging.
pub(super) const STALL: Duration = Duration::from_secs(30);

/// How long an e2e consumer's fetch waits for records.
const LONG_POLL: Duration = Duration::from_millis(500);

/// What one task measured.
#[derive(Debug)]
pub(super) struct TaskResult {
    pub(super) role: Role,
    pub(super) latency: Latency,
    pub(super) records: u64,
    pub(super) bytes: u64,
    /// Consumers: when the last record arrived.
    pub(super) last_receive: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Producer,
    Consumer,
}

/// Records done so far in a phase, shared by its tasks and read by the supervisor;
/// optionally with the time each multiple of a step was reached (see [`Progress::marking`]).
#[derive(Debug, Default)]
pub(super) struct Progress {
    done: AtomicU64,
    /// Records per mark (0: no marks).
    step: u64,
    /// When the total first reached each multiple of `step`, in order.
    marks: std::sync::Mutex<Vec<Instant>>,
}

impl Progress {
    /// A progress that notes when each multiple of `step` records was reached.
    pub(super) fn marking(step: u64) -> Self {
        Self {
            step,
            ..Self::default()
        }
    }

    /// Adds `n` and returns the new total.
    pub(super) fn add(&self, n: u64) -> u64 {
        let before = self.done.fetch_add(n, Ordering::Relaxed);
        let total = before + n;
        if self.step > 0 && total / self.step > before / self.step {
            let now = Instant::now();
            let mut marks = self
                .marks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // One add may cross several marks (a step smaller than a batch).
            for _ in before / self.step..total / self.step {
                marks.push(now);
            }
        }
        total
    }

    fn get(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// The marks so far.
    pub(super) fn marks(&self) -> Vec<Instant> {
        self.marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

pub(super) type Tasks = JoinSet<anyhow::Result<TaskResult>>;

// ---- producers --------------------------------------------------------------------------

/// How a producer task sends a batch.
#[derive(Debug)]
enum Sender {
    /// One direct-mode `Producer` per partition, routed to it (idempotence as asked).
    Producers(Vec<Producer>),
    /// `Topic::publish_batch`: the client picks the partition round-robin per call.
    Publish(Topic),
}

impl Sender {
    async fn new(topic: &Topic, plan: &Plan) -> anyhow::Result<Self> {
        match plan.api {
            Api::PublishBatch => Ok(Self::Publish(
                // A handle of its own, so each task has its own round-robin counter.
                topic
                    .client()
                    .stream(topic.stream_name())
                    .topic(topic.name()),
            )),
            Api::Producer => {
                // Keyed records are routed by key, so one producer serves every partition.
                let routes: Vec<Routing> = if plan.keyed {
                    vec![Routing::Balanced]
                } else {
                    (0..plan.partitions).map(Routing::Partition).collect()
                };
                let mut producers = Vec::with_capacity(routes.len());
                for routing in routes {
                    producers.push(
                        topic
                            .producer()
                            .batch_length(plan.batch)
                            .max_batch_bytes(plan.request_bytes())
                            .idempotence(plan.idempotent)
                            .max_in_flight(plan.in_flight)
                            .routing(routing)
                            .build()
                            .await
                            .context("cannot build a producer")?,
                    );
                }
                Ok(Self::Producers(producers))
            }
        }
    }

    async fn send(&self, partition: u32, messages: Vec<Message>) -> anyhow::Result<()> {
        match self {
            Self::Producers(producers) => {
                // One producer (keyed) or one per partition.
                let producer = producers
                    .get(partition as usize)
                    .or_else(|| producers.first().filter(|_| producers.len() == 1))
                    .context("no producer for the partition")?;
                producer.send_batch(messages).await?;
            }
            Self::Publish(topic) => {
                topic.publish_batch(messages).await?;
            }
        }
        Ok(())
    }

    async fn shutdown(self) -> anyhow::Result<()> {
        if let Self::Producers(producers) = self {
            for p in producers {
                p.shutdown().await?;
            }
        }
        Ok(())
    }
}

/// The records of producer `index` of `producers` when `total` are shared out.
fn share(total: u64, index: usize, producers: usize) -> u64 {
    let n = producers as u64;
    total / n + u64::from((index as u64) < total % n)
}

/// Spawns the producers of a phase: `count` records in all, each task sending its share
/// in batches, at most `--in-flight` requests at once, to partitions round-robin from
/// `index % partitions`.
/// With `stamp`, each value starts with its send time (µs since the epoch, LE).
pub(super) fn spawn_producers(
    tasks: &mut Tasks,
    topic: &Topic,
    plan: &Arc<Plan>,
    count: u64,
    stamp: bool,
    progress: &Arc<Progress>,
) {
    for index in 0..plan.producers {
        let records = share(count, index, plan.producers);
        if records == 0 {
            continue;
        }
        let (topic, plan, progress) = (topic.clone(), Arc::clone(plan), Arc::clone(progress));
        tasks.spawn(async move {
            producer(topic, plan, index, records, stamp, progress)
                .await
                .with_context(|| format!("producer {index}"))
        });
    }
}

async fn producer(
    topic: Topic,
    plan: Arc<Plan>,
    index: usize,
    records: u64,
    stamp: bool,
    progress: Arc<Progress>,
) -> anyhow::Result<TaskResult> {
    let sender = Sender::new(&topic, &plan).await?;
    // Values built once per task (its own buffer, so tasks share no reference count).
    let value = Bytes::copy_from_slice(&plan.value);
    let template: Vec<Message> = (0..plan.batch)
        .map(|_| Message::new(value.clone()))
        .collect();
    let keys = plan.keyed.then(|| Keys::new(index as u64));
    let mut stamper = stamp.then(|| Stamper::new(value.clone(), plan.batch, plan.in_flight));
    // At a fixed rate: this task's share, and when it started.
    let schedule = plan
        .rate
        .map(|rate| Schedule::new(rate as f64 / plan.producers as f64));
    let mut latency = Latency::new();
    let mut partition = index as u32 % plan.partitions;
    let mut sent = 0u64;
    // Requests sent and not yet answered, oldest first: (first record, records, sent at,
    // the answer). At most `--in-flight`; each is awaited within `STALL`.
    let mut pending = FuturesOrdered::new();
    while sent < records || !pending.is_empty() {
        if sent < records && pending.len() < plan.in_flight {
            let left = records - sent;
            let n = match &schedule {
                None => left.min(plan.batch as u64),
                Some(s) => s.due(sent, left.min(plan.batch as u64)).await?,
            };
            let count = n as usize;
            let mut messages = match (stamper.as_mut(), &schedule) {
                (Some(st), Some(s)) => st.messages(count, |k| s.intended_us(sent + k as u64)),
                (Some(st), None) => {
                    let now = now_us();
                    st.messages(count, |_| now)
                }
                (None, _) => template[..count].to_vec(),
            };
            if let Some(keys) = &keys {
                for (k, m) in messages.iter_mut().enumerate() {
                    m.key = Some(keys.key(sent + k as u64));
                }
            }
            let (first, to) = (sent, partition);
            let send = sender.send(partition, messages);
            let request = async move {
                let started = Instant::now();
                let answer = tokio::time::timeout(STALL, send).await;
                (first, n, to, started, answer)
            };
            sent += n;
            partition = (partition + 1) % plan.partitions;
            if plan.in_flight > 1 {
                pending.push_back(request);
                continue;
            }
            // One in flight: awaited here rather than through `pending`, which cost
            // `rill bench e2e` (producer and consumer in this process, two cores) a
            // quarter of its throughput: four alternating rounds, 872 against 638 MB/s
            // median, produce request p50 0.6 against 1.0 ms.
            let answered = request.await;
            settle(answered, schedule.as_ref(), &mut latency, &progress)?;
            continue;
        }
        let Some(answered) = pending.next().await else {
            break;
        };
        settle(answered, schedule.as_ref(), &mut latency, &progress)?;
    }
    drop(pending);
    sender.shutdown().await?;
    Ok(TaskResult {
        role: Role::Producer,
        latency,
        records,
        bytes: records * plan.value.len() as u64,
        last_receive: None,
    })
}

/// A produce request's answer: (its first record, its records, its partition, when it
/// was sent, the answer within `STALL`).
type Answered = (
    u64,
    u64,
    u32,
    Instant,
    Result<anyhow::Result<()>, tokio::time::error::Elapsed>,
);

/// Counts an answered produce request, or fails the run with its error.
fn settle(
    (first, n, to, started, answer): Answered,
    schedule: Option<&Schedule>,
    latency: &mut Latency,
    progress: &Progress,
) -> anyhow::Result<()> {
    answer
        .map_err(|_| anyhow::anyhow!("a produce request got no answer in {STALL:?}"))?
        .with_context(|| format!("publishing to partition {to}"))?;
    let acked = Instant::now();
    match schedule {
        None => latency.record(acked - started),
        Some(s) => {
            for k in first..first + n {
                latency.record(acked.saturating_duration_since(s.intended(k)));
            }
        }
    }
    progress.add(n);
    Ok(())
}

/// Intended send times at a fixed rate: record `i` is due `i / rate` seconds after the
/// start, whatever happened to the records before it (no coordinated omission).
#[derive(Debug)]
struct Schedule {
    per_second: f64,
    start: Instant,
    start_us: u64,
}

impl Schedule {
    fn new(per_second: f64) -> Self {
        Self {
            per_second: per_second.max(1e-9),
            start: Instant::now(),
            start_us: now_us(),
        }
    }

    fn offset(&self, i: u64) -> Duration {
        Duration::from_secs_f64(i as f64 / self.per_second)
    }

    /// When record `i` is due.
    fn intended(&self, i: u64) -> Instant {
        self.start + self.offset(i)
    }

    /// When record `i` is due, in µs since the Unix epoch (the value stamp for e2e).
    fn intended_us(&self, i: u64) -> u64 {
        self.start_us + u64::try_from(self.offset(i).as_micros()).unwrap_or(u64::MAX)
    }

    /// How many records, from record `next` on, are due at `now` (at most `max`).
    fn due_at(&self, next: u64, max: u64, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
        // Records 0..=floor(elapsed × rate) are due.
        let due_total = (elapsed * self.per_second).floor() as u64 + 1;
        due_total.saturating_sub(next).min(max)
    }

    /// Waits until record `next` is due, then returns how many are due (1..=max).
    async fn due(&self, next: u64, max: u64) -> anyhow::Result<u64> {
        pause_until(self.intended(next)).await?;
        Ok(self.due_at(next, max, Instant::now()).max(1))
    }
}

/// Sleeps until `deadline` with the OS timer (tens of µs late), not tokio's (which
/// rounds up to the next millisecond, and would add up to 1 ms to every fixed-rate
/// latency): the sleep runs on a blocking-pool thread, so no runtime worker is held.
pub(super) async fn pause_until(deadline: Instant) -> anyhow::Result<()> {
    let wait = deadline.saturating_duration_since(Instant::now());
    if wait.is_zero() {
        return Ok(());
    }
    if wait > Duration::from_millis(5) {
        // The coarse part on tokio's timer, the last few ms on the OS's.
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

/// Keys of keyed runs: record `i` of producer `j` has `k{(j × 7919 + i) mod 10000}`,
/// five digits (the peer harness uses the same keys).
#[derive(Debug)]
struct Keys {
    producer: u64,
    /// Every key, built once.
    all: Vec<Bytes>,
}

/// Distinct keys in keyed runs.
const KEYS: u64 = 10_000;

impl Keys {
    fn new(producer: u64) -> Self {
        Self {
            producer,
            all: (0..KEYS).map(|k| Bytes::from(format!("k{k:05}"))).collect(),
        }
    }

    fn key(&self, i: u64) -> Bytes {
        let k = (self.producer.wrapping_mul(7919).wrapping_add(i)) % KEYS;
        self.all[k as usize].clone()
    }
}

/// Values for e2e: `batch` copies of the template in one buffer, reused from batch to
/// batch (only the 8-byte send times are rewritten) once the client has let go of it.
#[derive(Debug)]
struct Stamper {
    template: Bytes,
    batch: usize,
    /// The last few batches' buffers, oldest first; each is unique again once its
    /// messages are dropped. More than one because the client may let go of a batch's
    /// values a moment after its answer reached the caller (or later, with several
    /// requests in flight): keeping only the last buffer, most batches built a new one
    /// from the template, which cost `rill bench e2e` about a third of its throughput
    /// on two cores.
    pool: VecDeque<Bytes>,
    /// Buffers kept at most.
    keep: usize,
}

impl Stamper {
    fn new(template: Bytes, batch: usize, in_flight: usize) -> Self {
        Self {
            template,
            batch,
            pool: VecDeque::new(),
            keep: in_flight.saturating_add(2),
        }
    }

    /// A buffer holding the template at least `n` times that nobody else holds: a
    /// released one from the pool (oldest first), or a new one.
    fn buffer(&mut self, n: usize) -> BytesMut {
        let size = self.template.len();
        for _ in 0..self.pool.len() {
            let Some(held) = self.pool.pop_front() else {
                break;
            };
            match held.try_into_mut() {
                Ok(buf) if buf.len() >= n * size => return buf,
                Ok(_) => {} // too small for this batch: let it go
                Err(held) => self.pool.push_back(held),
            }
        }
        let mut buf = BytesMut::with_capacity(self.batch.max(n) * size);
        for _ in 0..self.batch.max(n) {
            buf.extend_from_slice(&self.template);
        }
        buf
    }

    /// `n` (at most `batch`) messages whose values start with `stamp(k)` for message
    /// `k` (µs since the Unix epoch).
    fn messages(&mut self, n: usize, stamp: impl Fn(usize) -> u64) -> Vec<Message> {
        let size = self.template.len();
        let mut buf = self.buffer(n);
        for i in 0..n {
            buf[i * size..i * size + 8].copy_from_slice(&stamp(i).to_le_bytes());
        }
        let all = buf.freeze();
        let messages = (0..n)
            .map(|i| Message::new(all.slice(i * size..(i + 1) * size)))
            .collect();
        self.pool.push_back(all);
        if self.pool.len() > self.keep {
            self.pool.pop_front();
        }
        messages
    }
}

/// Microseconds since the Unix epoch.
pub(super) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

// ---- consumers --------------------------------------------------------------------------

/// How consumers of a phase read.
#[derive(Debug, Clone)]
pub(super) enum Reading {
    /// Read each partition from its start to its end, fetching without waiting; latency
    /// per fetch.
    Drain { ends: Vec<u64> },
    /// Long-poll while producers publish until `target` records arrived in all; latency
    /// per record, publish to receive.
    Follow { target: u64 },
}

/// Spawns `plan.consumers` consumer tasks (at most one per partition); consumer `c` reads
/// the partitions `p` with `p % consumers == c`, starting at `starts[p]`. Following
/// consumers stop together once their shared target is reached.
pub(super) fn spawn_consumers(
    tasks: &mut Tasks,
    topic: &Topic,
    plan: &Arc<Plan>,
    starts: &[u64],
    reading: &Reading,
    progress: &Arc<Progress>,
) {
    let (done_tx, done_rx) = watch::channel(false);
    let done_tx = Arc::new(done_tx);
    let consumers = plan.consumers.min(plan.partitions as usize);
    for c in 0..consumers {
        let parts: Vec<(u32, u64, u64)> = (0..plan.partitions)
            .filter(|p| *p as usize % consumers == c)
            .map(|p| {
                let start = starts[p as usize];
                let end = match reading {
                    Reading::Drain { ends } => ends[p as usize],
                    Reading::Follow { .. } => u64::MAX,
                };
                (p, start, end)
            })
            .filter(|(_, start, end)| start < end)
            .collect();
        if parts.is_empty() {
            continue;
        }
        let task = Consumer {
            topic: topic.clone(),
            plan: Arc::clone(plan),
            reading: reading.clone(),
            progress: Arc::clone(progress),
            done_tx: Arc::clone(&done_tx),
            done_rx: done_rx.clone(),
        };
        tasks.spawn(async move {
            task.run(parts)
                .await
                .with_context(|| format!("consumer {c}"))
        });
    }
}

#[derive(Debug)]
struct Consumer {
    topic: Topic,
    plan: Arc<Plan>,
    reading: Reading,
    progress: Arc<Progress>,
    done_tx: Arc<watch::Sender<bool>>,
    done_rx: watch::Receiver<bool>,
}

impl Consumer {
    async fn run(mut self, parts: Vec<(u32, u64, u64)>) -> anyhow::Result<TaskResult> {
        let (follow, target, wait) = match self.reading {
            Reading::Drain { .. } => (false, u64::MAX, Duration::ZERO),
            Reading::Follow { target } => (true, target, LONG_POLL),
        };
        let max_bytes = self.plan.fetch_bytes();
        // Each partition's reads: fetches, or a push subscription (`--read subscribe`),
        // which the read hands back with its answer.
        let read = |p: u32, offset: u64, sub: Option<Subscription>| {
            let topic = self.topic.clone();
            async move {
                let started = Instant::now();
                match sub {
                    Some(mut sub) => {
                        let r = sub.next().await;
                        (p, offset, started, r, Some(sub))
                    }
                    None => {
                        let r = topic.fetch(Position::new(p, offset), max_bytes, wait).await;
                        (p, offset, started, r, None)
                    }
                }
            }
        };
        let ends: std::collections::HashMap<u32, u64> =
            parts.iter().map(|&(p, _, end)| (p, end)).collect();
        let mut inflight = FuturesUnordered::new();
        for &(p, start, _) in &parts {
            let sub = match self.plan.read {
                Read::Fetch => None,
                Read::Subscribe => Some(
                    self.topic
                        .subscribe(Position::new(p, start), max_bytes.saturating_mul(4))
                        .await
                        .with_context(|| format!("subscribing to partition {p}"))?
                        .context(
                            "push subscriptions are not served here (a --data directory, or a \
                             server without them): use --read fetch",
                        )?,
                ),
            };
            inflight.push(read(p, start, sub));
        }
        let mut latency = Latency::new();
        let (mut records, mut bytes) = (0u64, 0u64);
        let mut last_receive = None;
        loop {
            let next = tokio::select! {
                biased;
                _ = self.done_rx.wait_for(|d| *d), if follow => break,
                next = inflight.next() => next,
            };
            let Some((p, offset, started, result, sub)) = next else {
                break; // every partition read to its end
            };
            let fetched =
                result.with_context(|| format!("fetching partition {p} at offset {offset}"))?;
            let received = Instant::now();
            let end = ends.get(&p).copied().unwrap_or(u64::MAX);
            let mut n = 0u64;
            if follow {
                let now = now_us();
                for r in &fetched.records {
                    let sent = r
                        .value
                        .get(..8)
                        .and_then(|b| <[u8; 8]>::try_from(b).ok())
                        .map(u64::from_le_bytes)
                        .with_context(|| {
                            format!("record {p}/{} has no send time in its value", r.offset)
                        })?;
                    latency.record_n_us(now.saturating_sub(sent), 1);
                    bytes += r.value.len() as u64;
                    n += 1;
                }
            } else {
                latency.record(received - started);
                for r in fetched.records.iter().filter(|r| r.offset < end) {
                    bytes += r.value.len() as u64;
                    n += 1;
                }
            }
            if n > 0 {
                records += n;
                last_receive = Some(received);
                if self.progress.add(n) >= target {
                    self.done_tx.send_replace(true);
                }
            }
            let next_offset = fetched.next_offset.max(offset);
            if next_offset < end {
                inflight.push(read(p, next_offset, sub));
            }
        }
        Ok(TaskResult {
            role: Role::Consumer,
            latency,
            records,
            bytes,
            last_receive,
        })
    }
}

// ---- supervisor -------------------------------------------------------------------------

/// Waits for every task of a phase, showing progress on stderr (a bar, on a terminal
/// only); fails on the first task error, or when `progress` has not moved for
/// [`STALL`].
pub(super) async fn supervise(
    mut tasks: Tasks,
    progress: &Progress,
    total: u64,
    label: &str,
) -> anyhow::Result<Vec<TaskResult>> {
    let bar = crate::progress::bar(total, &format!("records ({label})"));
    let result = watch(&mut tasks, progress, total, label, &bar).await;
    bar.finish_and_clear();
    result
}

async fn watch(
    tasks: &mut Tasks,
    progress: &Progress,
    total: u64,
    label: &str,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<TaskResult>> {
    let mut results = Vec::new();
    // Often enough for a smooth bar; a stall is judged by time, not by ticks.
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut seen, mut moved) = (progress.get(), Instant::now());
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Ok(r))) => results.push(r),
                Some(Ok(Err(e))) => return Err(e),
                Some(Err(e)) => anyhow::bail!("a bench task failed: {e}"),
            },
            _ = tick.tick() => {
                let n = progress.get();
                if n != seen {
                    (seen, moved) = (n, Instant::now());
                } else if moved.elapsed() >= STALL {
                    anyhow::bail!(
                        "{label}: no progress for {} s ({n} of {total} records done); \
                         is the server alive and the disk not full?",
                        STALL.as_secs()
                    );
                }
                bar.set_position(n);
            }
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        for (total, producers) in [(10, 3), (2, 5), (1_000_000, 7), (5, 1)] {
            let sum: u64 = (0..producers).map(|i| share(total, i, producers)).sum();
            assert_eq!(sum, total);
        }
        assert_eq!(share(2, 4, 5), 0);
    }

    #[test]
    fn schedule_spreads_records_at_the_rate() {
        let s = Schedule::new(1000.0); // one record per ms
        assert_eq!(s.intended(0), s.start);
        assert_eq!(s.intended(1500) - s.start, Duration::from_millis(1500));
        assert_eq!(s.intended_us(2000) - s.start_us, 2_000_000);
        // At the start, record 0 is due; 10.5 ms in, records 0..=10.
        assert_eq!(s.due_at(0, 100, s.start), 1);
        let later = s.start + Duration::from_micros(10_500);
        assert_eq!(s.due_at(0, 100, later), 11);
        assert_eq!(s.due_at(4, 100, later), 7);
        assert_eq!(s.due_at(0, 5, later), 5, "capped at the batch");
        assert_eq!(s.due_at(20, 100, later), 0, "nothing due yet");
        // Behind schedule by a second: everything due at once, up to the batch.
        assert_eq!(s.due_at(0, 1000, s.start + Duration::from_secs(2)), 1000);
    }

    #[test]
    fn keys_cycle_over_ten_thousand() {
        let a = Keys::new(0);
        assert_eq!(&a.key(0)[..], b"k00000");
        assert_eq!(&a.key(10_001)[..], b"k00001");
        let b = Keys::new(1);
        assert_eq!(&b.key(2)[..], b"k07921");
    }

    #[test]
    fn stamped_values_carry_the_time_and_reuse_the_buffer() {
        let template = Bytes::from((0..20u8).collect::<Vec<u8>>());
        let mut stamper = Stamper::new(template.clone(), 4, 1);
        let before = now_us();
        let now = now_us();
        let first = stamper.messages(3, |_| now);
        let first_ptr = first[0].value.as_ptr();
        assert_eq!(first.len(), 3);
        for m in &first {
            assert_eq!(m.value.len(), 20);
            let t = u64::from_le_bytes(m.value[..8].try_into().unwrap());
            assert!(t >= before && t <= now_us());
            assert_eq!(&m.value[8..], &template[8..]);
        }
        // Still referenced: a new buffer, the old values untouched.
        let second = stamper.messages(4, |k| k as u64);
        assert_ne!(second[0].value.as_ptr(), first_ptr);
        assert_eq!(&first[2].value[8..], &template[8..]);
        let second_ptr = second[0].value.as_ptr();
        drop(second);
        // The newer one released while the older is still held: the newer is reused.
        let third = stamper.messages(2, |_| 0);
        assert_eq!(third[0].value.as_ptr(), second_ptr);
        assert_eq!(&third[1].value[8..], &template[8..]);
        assert_eq!(third[1].value[..8], 0u64.to_le_bytes());
        drop(first);
        drop(third);
        // Both released: the oldest is reused first, and at most `keep` are kept.
        let fourth = stamper.messages(4, |_| 1);
        assert_eq!(fourth[0].value.as_ptr(), first_ptr);
        drop(fourth);
        for _ in 0..10 {
            drop(stamper.messages(4, |_| 2));
            assert!(stamper.pool.len() <= stamper.keep);
        }
    }
}
