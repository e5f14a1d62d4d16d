//! `rill bench produce|consume|e2e`: creates its own topic in stream `bench`, runs a
//! bounded workload against a server or an embedded data directory, and reports
//! throughput and latency percentiles (docs/CLI.md, "Bench").
//!
//! Each run first pushes `--warmup` records through the same path (first writes into
//! cold memory are several times slower), then resets its histograms and timers and
//! measures `--messages` records.

mod events;
mod group;
mod limits;
mod stats;
mod workers;

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use rill_client::{Durability, Topic, TopicOptions};
use serde_json::json;

use self::stats::{Latency, Report};
use self::workers::{Progress, Reading, Role, TaskResult, Tasks};
use crate::target::{self, Target};

/// The stream bench topics live in.
const STREAM: &str = "bench";
/// Largest `--size` (the topic's record limit is raised to fit).
const SIZE_MAX: u64 = 8 << 20;
/// Largest produce request the bench sends; the broker's default batch limit is 16 MiB.
const REQUEST_BYTES_MAX: u64 = 15 << 20;
/// Encoding overhead per record, generously (length, attributes, varints).
const RECORD_OVERHEAD: u64 = 32;
/// The unit of `produce`'s rate per gigabyte (10⁹ bytes of values, as MB is 10⁶).
const GIGABYTE: u64 = 1_000_000_000;
/// Largest fetch asked for (the broker's default answer limit is 32 MiB).
const FETCH_BYTES_MAX: u64 = 32 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// Publish as fast as acknowledged; latency per produce request.
    Produce,
    /// Fill the topic (not measured), then read it all; latency per fetch request.
    Consume,
    /// Publish while consumers long-poll; latency from publish to receive per record.
    E2e,
    /// Typed events over many keys through the events runtime, against a strictly
    /// sequential consumer and a plain read of the same records.
    Events,
    /// What the machine allows: loopback TCP, write+fdatasync and O_DIRECT writes on a
    /// directory's disk, memory copy (no server or topic involved).
    Limits,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Self::Produce => "produce",
            Self::Consume => "consume",
            Self::E2e => "e2e",
            Self::Events => "events",
            Self::Limits => "limits",
        }
    }
}

/// The client API producers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Api {
    /// `Producer` in direct mode, one per partition, idempotence off (on with `--idempotent`).
    Producer,
    /// `Topic::publish_batch` (partition chosen round-robin per call by the client).
    PublishBatch,
}

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    workload: Workload,
    /// Records to measure.
    #[arg(long, default_value_t = 1_000_000, value_parser = between(1, u64::MAX))]
    messages: u64,
    /// Bytes per record value.
    #[arg(long, default_value_t = 1024, value_parser = between(1, SIZE_MAX))]
    size: u64,
    /// Records per produce request.
    #[arg(long, default_value_t = 1000, value_parser = between(1, 1_000_000))]
    batch: u64,
    /// Concurrent producer tasks.
    #[arg(long, default_value_t = 1, value_parser = between(1, 1024))]
    producers: u64,
    /// Produce requests each producer task keeps in flight (sent and not yet
    /// acknowledged). With `--api producer` more than one needs `--idempotent` (a
    /// producer without idempotence keeps one batch per partition in flight, so its
    /// batches stay in order); with `--api publish-batch` the server may append
    /// requests in flight together in any order.
    #[arg(long, default_value_t = 1, value_parser = between(1, 64))]
    in_flight: u64,
    /// `--api producer` with idempotence on, the SDK's default: up to `--in-flight`
    /// batches per partition in flight, appended in the order sent.
    #[arg(long)]
    idempotent: bool,
    /// Concurrent consumer tasks, each reading its own partitions (consume, e2e).
    #[arg(long, default_value_t = 1, value_parser = between(1, 1024))]
    consumers: u64,
    /// Partitions of the bench topic.
    #[arg(long, default_value_t = 1, value_parser = between(1, 100_000))]
    partitions: u64,
    /// Durability of the bench topic: always | never | interval:MS.
    #[arg(long, default_value = "never")]
    durability: Durability,
    /// Records sent and received before measuring [default: 10% of --messages, at
    /// least one batch].
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,
    /// Keep the bench topic instead of deleting it at the end.
    #[arg(long)]
    keep: bool,
    /// Publish at this many records/s in all (spread evenly over the producers)
    /// instead of as fast as acknowledged; latency is then measured per record from its
    /// intended send time, so a stall is charged to every record it delayed (produce,
    /// e2e).
    #[arg(long, value_name = "RECORDS_PER_S", value_parser = between(1, 1_000_000_000))]
    rate: Option<u64>,
    /// Give every record a key (10,000 distinct keys) and route by it, instead of
    /// sending each request to one partition round-robin.
    #[arg(long)]
    keyed: bool,
    /// Make the bench topic elastic (docs/RANGES.md): `--partitions` key ranges, which
    /// the keyed producer routes by (needs --keyed and --api producer).
    #[arg(long, requires = "keyed")]
    elastic: bool,
    /// With --elastic: the automatic policy's threshold in bytes/s (a range written
    /// faster than that for a whole --auto-split-window splits).
    #[arg(long, value_name = "BYTES_PER_S", requires = "elastic", value_parser = between(1, u64::MAX))]
    auto_split: Option<u64>,
    /// With --auto-split: the policy's window (its cooldown is two windows).
    #[arg(long, value_name = "DURATION", requires = "auto_split", default_value = "2s", value_parser = crate::admin::parse_duration)]
    auto_split_window: Duration,
    /// Client API for publishing.
    #[arg(long, value_enum, default_value_t = Api::Producer)]
    api: Api,
    /// How consumers read: fetch requests, or push subscriptions (TCP only).
    #[arg(long, value_enum, default_value_t = Read::Fetch)]
    read: Read,
    /// e2e: receive through the members of a consumer group (`GroupConsumer::next`,
    /// `--consumers` members) instead of raw long-polling fetches.
    #[arg(long)]
    group: bool,
    /// With --group: when members store their offsets (the SDK's default is polling:
    /// a durable store at each poll).
    #[arg(long, value_enum, default_value_t = GroupCommit::Polling, requires = "group")]
    commit_policy: GroupCommit,
    /// events: how many events to publish and consume [default: 100000].
    #[arg(long, value_name = "N", value_parser = between(1, u64::MAX))]
    events: Option<u64>,
    /// events: distinct keys the events are spread over.
    #[arg(long, default_value_t = 1000, value_parser = between(1, u64::from(u32::MAX)))]
    keys: u64,
    /// events: µs the handler awaits per call (and the sequential consumer per record).
    #[arg(long, default_value_t = 0, value_parser = between(0, 10_000_000))]
    handler_us: u64,
    /// Measure the machine's limits first (as `rill bench limits` does) and report the
    /// workload as a fraction of each.
    #[arg(long)]
    limits: bool,
    /// The directory whose disk the limits' disk loops measure [default: --data, else
    /// ./rill-data if it exists, else the current directory].
    #[arg(long, value_name = "DIR")]
    limits_dir: Option<std::path::PathBuf>,
    /// Seconds each limit's loop runs.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = seconds)]
    limits_seconds: f64,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// A parser of `--limits-seconds`: 0.05 to 60.
fn seconds(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of seconds, got {s:?}"))?;
    if (0.05..=60.0).contains(&x) {
        Ok(x)
    } else {
        Err("must be between 0.05 and 60".to_owned())
    }
}

/// How consumers read (consume, e2e).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Read {
    /// `Fetch` requests, one in flight per partition (long polls for e2e).
    Fetch,
    /// Push subscriptions (`Topic::subscribe`) with a window of four fetches.
    Subscribe,
}

/// The commit policy of `e2e --group` members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum GroupCommit {
    /// `CommitPolicy::Polling` (the SDK default): store at each poll.
    Polling,
    /// `CommitPolicy::Disabled`: never store.
    Disabled,
}

/// A parser of whole numbers in `min..=max`, with a plain message otherwise.
fn between(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |s: &str| {
        let n: u64 = s
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|_| format!("expected a whole number, got {s:?}"))?;
        if n < min {
            Err(format!("must be at least {min}"))
        } else if n > max {
            Err(format!("must be at most {max}"))
        } else {
            Ok(n)
        }
    }
}

/// Validated settings, shared by the tasks.
#[derive(Debug)]
pub(super) struct Plan {
    workload: Workload,
    messages: u64,
    warmup: u64,
    pub(super) batch: usize,
    pub(super) producers: usize,
    pub(super) in_flight: usize,
    /// Producers with idempotence on.
    pub(super) idempotent: bool,
    pub(super) consumers: usize,
    pub(super) partitions: u32,
    durability: Durability,
    keep: bool,
    pub(super) api: Api,
    /// Records/s in all, or `None` for as fast as acknowledged.
    pub(super) rate: Option<u64>,
    pub(super) keyed: bool,
    /// An elastic bench topic, with the automatic policy if asked for.
    elastic: bool,
    auto_split: Option<rill_client::AutoSplit>,
    pub(super) read: Read,
    /// e2e receives through consumer-group members.
    group: bool,
    /// Their commit policy.
    pub(super) commit_policy: GroupCommit,
    json: bool,
    /// One value of `--size` bytes, reused by every record.
    pub(super) value: Bytes,
}

impl Plan {
    fn new(args: BenchArgs) -> Result<Self, String> {
        let size = args.size;
        if args.workload == Workload::E2e && size < 8 {
            return Err(format!(
                "e2e needs --size of at least 8 bytes (each value carries its send time), got {size}"
            ));
        }
        if args.workload == Workload::Consume && args.rate.is_some() {
            return Err(
                "--rate applies to publishing (produce, e2e); consume reads as fast as it can"
                    .to_owned(),
            );
        }
        if args.read == Read::Subscribe && (args.workload == Workload::Produce || args.group) {
            return Err(
                "--read applies to the plain consumers of consume and e2e (not --group)".to_owned(),
            );
        }
        if args.group && args.workload != Workload::E2e {
            return Err("--group applies to e2e: it receives through group members".to_owned());
        }
        let request = args.batch * (size + RECORD_OVERHEAD);
        if request > REQUEST_BYTES_MAX {
            return Err(format!(
                "--batch {} × --size {size} makes requests of about {request} bytes; the limit is \
                 {REQUEST_BYTES_MAX} (the broker's batch limit is 16 MiB): lower --batch",
                args.batch
            ));
        }
        if args.idempotent && args.api != Api::Producer {
            return Err("--idempotent applies to --api producer".to_owned());
        }
        if args.in_flight > 1 && args.api == Api::Producer && !args.idempotent {
            return Err(format!(
                "--in-flight {} with --api producer needs --idempotent: a producer without \
                 idempotence keeps one batch per partition in flight, to keep them in order",
                args.in_flight
            ));
        }
        if args.elastic && args.api != Api::Producer {
            return Err("--elastic needs --api producer: it routes keys by range".to_owned());
        }
        let auto_split = args.auto_split.map(|bytes_per_s| {
            rill_client::AutoSplit::new(bytes_per_s)
                .window(args.auto_split_window)
                .cooldown(args.auto_split_window * 2)
        });
        let value: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
        Ok(Self {
            workload: args.workload,
            messages: args.messages,
            warmup: args
                .warmup
                .unwrap_or_else(|| (args.messages / 10).max(args.batch)),
            batch: usize::try_from(args.batch).map_err(|e| e.to_string())?,
            producers: usize::try_from(args.producers).map_err(|e| e.to_string())?,
            in_flight: usize::try_from(args.in_flight).map_err(|e| e.to_string())?,
            idempotent: args.idempotent,
            consumers: usize::try_from(args.consumers).map_err(|e| e.to_string())?,
            partitions: u32::try_from(args.partitions).map_err(|e| e.to_string())?,
            durability: args.durability,
            keep: args.keep,
            api: args.api,
            rate: args.rate,
            keyed: args.keyed,
            elastic: args.elastic,
            auto_split,
            read: args.read,
            group: args.group,
            commit_policy: args.commit_policy,
            json: args.json,
            value: Bytes::from(value),
        })
    }

    fn size(&self) -> u64 {
        self.value.len() as u64
    }

    /// The producer's batch byte limit: large enough that a batch is one request.
    pub(super) fn request_bytes(&self) -> usize {
        let bytes = self.batch as u64 * (self.size() + RECORD_OVERHEAD) + 1024;
        usize::try_from(bytes.min(16 << 20)).unwrap_or(16 << 20)
    }

    /// Bytes per fetch: about `--batch` records (one produce batch), so a fetch does the
    /// same work as a peer's read of `--batch` records (XREADGROUP COUNT, a JetStream
    /// pull batch), and per-fetch latencies compare like for like.
    pub(super) fn fetch_bytes(&self) -> u32 {
        let bytes = (self.batch as u64 * (self.size() + RECORD_OVERHEAD))
            .max(self.size() + 4096)
            .min(FETCH_BYTES_MAX);
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    fn durability_name(&self) -> String {
        self.durability.to_string()
    }

    fn topic_options(&self) -> TopicOptions {
        // Raise the record limit (default 1 MiB) for large values.
        let max_record = (self.size() > 512 << 10)
            .then(|| u32::try_from(self.size() + 4096).unwrap_or(u32::MAX));
        TopicOptions {
            partitions: Some(self.partitions),
            durability: Some(self.durability),
            max_record_bytes: max_record,
            elastic: self.elastic,
            auto_split: self.auto_split,
            ..TopicOptions::default()
        }
    }
}

/// Prints a usage error the way clap does and exits with code 2.
fn usage_error(message: &str) -> ! {
    clap::Error::raw(
        clap::error::ErrorKind::ValueValidation,
        format!("{message}\n"),
    )
    .exit()
}

/// The directory `--limits` measures the disk of (see [`BenchArgs::limits_dir`]).
fn limits_dir(args: &BenchArgs, target: &Target) -> std::path::PathBuf {
    if let Some(dir) = args.limits_dir.clone().or_else(|| target.data_dir()) {
        return dir;
    }
    let default = std::path::PathBuf::from("./rill-data");
    if default.is_dir() {
        default
    } else {
        std::path::PathBuf::from(".")
    }
}

/// Measures the limits on the disk of `dir`, saying so on stderr.
async fn measure_limits(
    dir: &std::path::Path,
    seconds: f64,
    write_bytes: u64,
) -> anyhow::Result<limits::Limits> {
    if !dir.is_dir() {
        usage_error(&format!(
            "{}: no such directory (the limits measure the disk of --limits-dir, else --data)",
            dir.display()
        ));
    }
    note(format_args!(
        "measuring the machine's limits ({seconds} s per loop; disk of {})",
        dir.display()
    ));
    limits::Limits::measure(dir, usize::try_from(write_bytes)?, seconds).await
}

pub(crate) async fn run(args: BenchArgs, target: &Target) -> anyhow::Result<()> {
    if args.workload == Workload::Limits {
        let dir = limits_dir(&args, target);
        let limits = measure_limits(&dir, args.limits_seconds, args.batch * args.size).await?;
        return limits::print(&limits, args.json);
    }
    if args.workload == Workload::Events {
        let plan = events::EventsPlan {
            events: args.events.unwrap_or(100_000),
            keys: args.keys as u32,
            partitions: u32::try_from(args.partitions).unwrap_or(u32::MAX),
            handler_us: args.handler_us,
            keep: args.keep,
            json: args.json,
        };
        let client = target.client().await?;
        let outcome = events::run(plan, &client).await;
        let closed = target::finish(&client).await;
        outcome?;
        return closed;
    }
    if args.events.is_some() || args.handler_us != 0 {
        usage_error("--events and --handler-us are for `rill bench events`");
    }
    let limits_at = args.limits.then(|| {
        (
            limits_dir(&args, target),
            args.limits_seconds,
            args.batch * args.size,
        )
    });
    let plan = Arc::new(Plan::new(args).unwrap_or_else(|m| usage_error(&m)));
    // Opened before the limits: it makes a new --data directory, whose disk they measure.
    let client = target.client().await?;
    let limits = match limits_at {
        Some((dir, seconds, write)) => Some(measure_limits(&dir, seconds, write).await?),
        None => None,
    };
    let transport = if client.is_embedded() {
        "embedded"
    } else {
        "tcp"
    };
    let name = topic_name(plan.workload);
    let topic = client.stream(STREAM).topic(&name);
    let outcome = bench(&topic, &plan).await;
    let closed = target::finish(&client).await;
    let mut report = outcome?;
    closed?;
    report.settings.extend([
        ("size", json!(plan.size())),
        ("batch", json!(plan.batch)),
        ("producers", json!(plan.producers)),
        ("in_flight", json!(plan.in_flight)),
        ("idempotent", json!(plan.idempotent)),
        ("consumers", json!(plan.consumers)),
        ("partitions", json!(plan.partitions)),
        ("durability", json!(plan.durability_name())),
        ("transport", json!(transport)),
        (
            "api",
            json!(
                plan.api
                    .to_possible_value()
                    .map(|v| v.get_name().to_owned())
            ),
        ),
        ("warmup", json!(plan.warmup)),
        ("rate", json!(plan.rate)),
        ("keyed", json!(plan.keyed)),
        ("elastic", json!(plan.elastic)),
        (
            "read",
            json!(
                plan.read
                    .to_possible_value()
                    .map(|v| v.get_name().to_owned())
            ),
        ),
        ("group", json!(plan.group)),
    ]);
    if plan.group {
        report.settings.push((
            "commit_policy",
            json!(
                plan.commit_policy
                    .to_possible_value()
                    .map(|v| v.get_name().to_owned())
            ),
        ));
    }
    report
        .settings
        .push(("topic", json!(format!("{STREAM}/{name}"))));
    if plan.workload == Workload::Produce {
        report.settings.retain(|(k, _)| *k != "consumers");
    }
    if let Some(limits) = limits {
        let bound = if transport == "embedded" {
            limits::Bound::Memcpy
        } else if plan.workload == Workload::Produce && plan.durability == Durability::Always {
            limits::Bound::DiskSync
        } else {
            limits::Bound::Loopback
        };
        report.limits = Some((limits.fractions(report.mb_per_s(), bound), limits));
    }
    report.print(plan.workload.name(), plan.json)
}

/// `bench-<workload>-<random hex>`.
/// A number that tells this run's topics from other runs'.
fn run_id() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32
}

fn topic_name(workload: Workload) -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("bench-{}-{:08x}", workload.name(), h.finish() as u32)
}

/// Creates the topic, runs the workload, and deletes the topic unless `--keep`.
async fn bench(topic: &Topic, plan: &Arc<Plan>) -> anyhow::Result<Report> {
    let label = format!("{}/{}", topic.stream_name(), topic.name());
    topic
        .create_with(&plan.topic_options(), false)
        .await
        .with_context(|| format!("cannot create the bench topic {label}"))?;
    note(format_args!(
        "topic {label}: {} partition(s), durability {}",
        plan.partitions,
        plan.durability_name()
    ));
    if plan.workload != Workload::Produce
        && !plan.group
        && plan.consumers > plan.partitions as usize
    {
        note(format_args!(
            "{} consumers for {} partition(s): only {} will read (a partition has one reader)",
            plan.consumers, plan.partitions, plan.partitions
        ));
    }
    let result = match plan.workload {
        Workload::Produce => produce(topic, plan).await,
        Workload::Consume => consume(topic, plan).await,
        Workload::E2e => e2e(topic, plan).await,
        Workload::Events | Workload::Limits => {
            unreachable!("`rill bench events` and `limits` are run before a plan is made")
        }
    };
    if plan.elastic
        && let Ok(d) = topic.describe().await
    {
        let open = d.ranges.iter().filter(|r| r.sealed_at.is_none()).count();
        note(format_args!(
            "elastic topic {label}: {open} open range(s) of {} after the run (epoch {})",
            d.ranges.len(),
            d.range_epoch
        ));
    }
    if plan.keep {
        note(format_args!("kept topic {label} (--keep)"));
    } else {
        let deleted = topic
            .delete()
            .await
            .with_context(|| format!("cannot delete the bench topic {label}"));
        match (&result, deleted) {
            (Ok(_), Err(e)) => return Err(e),
            (Err(_), Err(e)) => note(format_args!("{e:#}")),
            (_, Ok(())) => {}
        }
    }
    result
}

fn note(message: std::fmt::Arguments<'_>) {
    eprintln!("rill bench: {message}");
}

/// Runs producers of `count` records to completion (no consumers).
async fn produce_phase(
    topic: &Topic,
    plan: &Arc<Plan>,
    count: u64,
    label: &str,
) -> anyhow::Result<Vec<TaskResult>> {
    produce_marking(topic, plan, count, label, Arc::new(Progress::default())).await
}

/// [`produce_phase`] with a progress of the caller's (which may note marks).
async fn produce_marking(
    topic: &Topic,
    plan: &Arc<Plan>,
    count: u64,
    label: &str,
    progress: Arc<Progress>,
) -> anyhow::Result<Vec<TaskResult>> {
    let mut tasks = Tasks::new();
    workers::spawn_producers(&mut tasks, topic, plan, count, false, &progress);
    workers::supervise(tasks, &progress, count, label).await
}

/// Runs consumers over `[starts[p], ends[p])` of every partition to completion.
async fn drain_phase(
    topic: &Topic,
    plan: &Arc<Plan>,
    starts: &[u64],
    ends: &[u64],
    label: &str,
) -> anyhow::Result<Vec<TaskResult>> {
    let total = starts
        .iter()
        .zip(ends)
        .map(|(s, e)| e.saturating_sub(*s))
        .sum();
    let progress = Arc::new(Progress::default());
    let mut tasks = Tasks::new();
    let reading = Reading::Drain {
        ends: ends.to_vec(),
    };
    workers::spawn_consumers(&mut tasks, topic, plan, starts, &reading, &progress);
    workers::supervise(tasks, &progress, total, label).await
}

/// The end offset of every partition.
async fn end_offsets(topic: &Topic, plan: &Plan) -> anyhow::Result<Vec<u64>> {
    let mut ends = Vec::with_capacity(plan.partitions as usize);
    for p in 0..plan.partitions {
        ends.push(
            topic
                .end_offset(p)
                .await
                .with_context(|| format!("cannot read the end of partition {p}"))?,
        );
    }
    Ok(ends)
}

/// Merges the latency of the tasks in `role`, and adds up their records and bytes.
fn merge(results: &[TaskResult], role: Role) -> anyhow::Result<(Latency, u64, u64)> {
    let mut latency = Latency::new();
    let (mut records, mut bytes) = (0, 0);
    for r in results.iter().filter(|r| r.role == role) {
        latency.merge(&r.latency)?;
        records += r.records;
        bytes += r.bytes;
    }
    Ok((latency, records, bytes))
}

fn warmup_note(plan: &Plan) {
    if plan.warmup > 0 {
        note(format_args!("warming up with {} records", plan.warmup));
    }
}

async fn produce(topic: &Topic, plan: &Arc<Plan>) -> anyhow::Result<Report> {
    if plan.warmup > 0 {
        warmup_note(plan);
        produce_phase(topic, plan, plan.warmup, "warm-up").await?;
    }
    note(format_args!("measuring {} records", plan.messages));
    // Note when each gigabyte of values was acknowledged, for the rate per gigabyte.
    let per_gb = (GIGABYTE / plan.size()).max(1);
    let progress = Arc::new(Progress::marking(per_gb));
    let started = Instant::now();
    let results =
        produce_marking(topic, plan, plan.messages, "produce", Arc::clone(&progress)).await?;
    let seconds = started.elapsed().as_secs_f64();
    let (latency, records, bytes) = merge(&results, Role::Producer)?;
    let gigabytes = stats::per_gigabyte(started, &progress.marks(), per_gb * plan.size());
    Ok(Report {
        records,
        bytes,
        seconds,
        latency: latency.summary(),
        latency_kind: if plan.rate.is_some() {
            "per record, acknowledgement minus intended send time"
        } else {
            "per produce request"
        },
        produce_latency: None,
        settings: Vec::new(),
        limits: None,
        gigabytes,
    })
}

async fn consume(topic: &Topic, plan: &Arc<Plan>) -> anyhow::Result<Report> {
    let fill_started = Instant::now();
    note(format_args!(
        "filling the topic with {} records (not measured)",
        plan.warmup + plan.messages
    ));
    let starts = end_offsets(topic, plan).await?;
    if plan.warmup > 0 {
        produce_phase(topic, plan, plan.warmup, "fill (warm-up part)").await?;
    }
    let middle = end_offsets(topic, plan).await?;
    produce_phase(topic, plan, plan.messages, "fill").await?;
    let ends = end_offsets(topic, plan).await?;
    note(format_args!(
        "filled in {:.1} s",
        fill_started.elapsed().as_secs_f64()
    ));
    if plan.warmup > 0 {
        warmup_note(plan);
        drain_phase(topic, plan, &starts, &middle, "warm-up").await?;
    }
    note(format_args!("measuring {} records", plan.messages));
    let started = Instant::now();
    let results = drain_phase(topic, plan, &middle, &ends, "consume").await?;
    let seconds = started.elapsed().as_secs_f64();
    let (latency, records, bytes) = merge(&results, Role::Consumer)?;
    if records != plan.messages {
        anyhow::bail!(
            "read {records} records but {} were published; the topic changed during the run",
            plan.messages
        );
    }
    Ok(Report {
        records,
        bytes,
        seconds,
        latency: latency.summary(),
        latency_kind: "per fetch request",
        produce_latency: None,
        settings: Vec::new(),
        limits: None,
        gigabytes: None,
    })
}

/// One e2e phase: consumers long-poll from the current ends (or, with `--group`, the
/// members of group `bench-<label>` wait for records) while producers publish `count`
/// stamped records. Returns the results and the time from the start to the last record
/// received.
async fn e2e_phase(
    topic: &Topic,
    plan: &Arc<Plan>,
    count: u64,
    label: &str,
) -> anyhow::Result<(Vec<TaskResult>, Duration)> {
    let starts = end_offsets(topic, plan).await?;
    let received = Arc::new(Progress::default());
    let sent = Arc::new(Progress::default());
    let mut tasks = Tasks::new();
    if plan.group {
        let name = format!("bench-{label}");
        group::spawn_members(&mut tasks, topic, plan, &name, &starts, count, &received).await?;
    } else {
        let reading = Reading::Follow { target: count };
        workers::spawn_consumers(&mut tasks, topic, plan, &starts, &reading, &received);
    }
    let started = Instant::now();
    workers::spawn_producers(&mut tasks, topic, plan, count, true, &sent);
    let results = workers::supervise(tasks, &received, count, label).await?;
    let last = results
        .iter()
        .filter_map(|r| r.last_receive)
        .max()
        .unwrap_or(started);
    Ok((results, last.saturating_duration_since(started)))
}

async fn e2e(topic: &Topic, plan: &Arc<Plan>) -> anyhow::Result<Report> {
    if plan.warmup > 0 {
        warmup_note(plan);
        e2e_phase(topic, plan, plan.warmup, "warm-up").await?;
    }
    note(format_args!("measuring {} records", plan.messages));
    let (results, elapsed) = e2e_phase(topic, plan, plan.messages, "e2e").await?;
    let (latency, records, bytes) = merge(&results, Role::Consumer)?;
    let (produce_latency, _, _) = merge(&results, Role::Producer)?;
    if records != plan.messages {
        anyhow::bail!(
            "received {records} records but {} were published",
            plan.messages
        );
    }
    Ok(Report {
        records,
        bytes,
        seconds: elapsed.as_secs_f64(),
        latency: latency.summary(),
        latency_kind: if plan.rate.is_some() {
            "intended send to receive, per record"
        } else {
            "publish to receive, per record"
        },
        produce_latency: Some(produce_latency.summary()),
        settings: Vec::new(),
        limits: None,
        gigabytes: None,
    })
}
