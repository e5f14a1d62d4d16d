//! Counters, gauges and histograms kept with atomics, rendered in the Prometheus text
//! exposition format (version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::RwLock;
use std::time::Duration;

use rill_proto::Kind;

/// Upper bounds of the request-duration histogram buckets, in seconds (50 µs to 10 s);
/// a last `+Inf` bucket catches the rest.
pub const DURATION_BUCKETS_SECONDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// The same bounds in nanoseconds, for cheap comparisons on the hot path.
const DURATION_BUCKETS_NANOS: [u64; 17] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Distinct `{stream, topic}` label sets kept at most. Topics come from the broker's
/// catalog (only successful requests are counted), but deleted and recreated topics
/// would otherwise accumulate for the life of the process.
const TOPIC_SERIES_MAX: usize = 10_000;

/// Label of requests whose kind this build does not know.
const UNKNOWN_KIND: &str = "unknown";

/// A fixed-bucket histogram of durations.
#[derive(Debug)]
struct Histogram {
    /// Non-cumulative counts; the last slot is `+Inf`.
    buckets: [AtomicU64; DURATION_BUCKETS_NANOS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let slot = DURATION_BUCKETS_NANOS.partition_point(|&bound| bound < nanos);
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct KindMetrics {
    requests: AtomicU64,
    errors: AtomicU64,
    duration: Histogram,
}

#[derive(Debug, Default)]
struct TopicMetrics {
    records_in: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// The server's metrics, served at `GET /metrics`. Shared by every connection of one
/// [`Server`](crate::Server); cheap to update from any task.
#[derive(Debug)]
pub struct Metrics {
    connections: AtomicI64,
    connections_accepted: AtomicU64,
    connections_rejected: AtomicU64,
    /// The connection limit in force (see `Server::max_connections`); 0 until a server
    /// sets it.
    connections_max: AtomicU64,
    /// Connections closed by the server, by [`CloseReason`].
    connections_closed: [AtomicU64; CloseReason::ALL.len()],
    /// Accepts that failed for want of a file descriptor.
    accept_out_of_fds: AtomicU64,
    /// The server-wide buffer budget, for its gauge.
    buffer: std::sync::OnceLock<Arc<crate::budget::Pool>>,
    /// One slot per `Kind::ALL` entry, then one for unknown kinds.
    kinds: Box<[KindMetrics]>,
    topics: RwLock<BTreeMap<String, BTreeMap<String, Arc<TopicMetrics>>>>,
    /// The broker, for gauges it knows (consumer-group lag).
    broker: std::sync::OnceLock<Arc<rill_broker::Broker>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Metrics with every value at zero.
    pub fn new() -> Self {
        Self {
            connections: AtomicI64::new(0),
            connections_accepted: AtomicU64::new(0),
            connections_rejected: AtomicU64::new(0),
            connections_max: AtomicU64::new(0),
            connections_closed: std::array::from_fn(|_| AtomicU64::new(0)),
            accept_out_of_fds: AtomicU64::new(0),
            buffer: std::sync::OnceLock::new(),
            kinds: (0..=Kind::ALL.len())
                .map(|_| KindMetrics {
                    requests: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    duration: Histogram::new(),
                })
                .collect(),
            topics: RwLock::new(BTreeMap::new()),
            broker: std::sync::OnceLock::new(),
        }
    }

    /// Client connections open now.
    pub fn connections(&self) -> i64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Bytes of the server-wide buffer budget in use now: request frames being read or
    /// handled and responses not yet written (see `ServerConfig::buffer_bytes_max`).
    pub fn buffer_bytes(&self) -> u64 {
        self.buffer.get().map_or(0, |pool| pool.used() as u64)
    }

    /// Connections the server closed for `reason` so far.
    pub fn connections_closed_total(&self, reason: CloseReason) -> u64 {
        self.connections_closed[reason as usize].load(Ordering::Relaxed)
    }

    /// Accepts that failed for want of a file descriptor so far; each such client was
    /// answered through the spare descriptor when there was one.
    pub fn accept_out_of_fds_total(&self) -> u64 {
        self.accept_out_of_fds.load(Ordering::Relaxed)
    }

    /// Requests of `kind` answered so far (successes and errors).
    pub fn requests_total(&self, kind: Kind) -> u64 {
        self.kind(Some(kind)).requests.load(Ordering::Relaxed)
    }

    /// Requests of `kind` answered with an error so far.
    pub fn request_errors_total(&self, kind: Kind) -> u64 {
        self.kind(Some(kind)).errors.load(Ordering::Relaxed)
    }

    fn kind(&self, kind: Option<Kind>) -> &KindMetrics {
        let slot = kind
            .and_then(|k| Kind::ALL.iter().position(|&known| known == k))
            .unwrap_or(Kind::ALL.len());
        &self.kinds[slot]
    }

    /// Counts an open connection until the returned guard is dropped.
    pub(crate) fn connection_opened(self: &Arc<Self>) -> ConnectionGauge {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        ConnectionGauge(Arc::clone(self))
    }

    pub(crate) fn connection_rejected(&self) {
        self.connections_rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_closed(&self, reason: CloseReason) {
        self.connections_closed[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn accept_out_of_fds(&self) {
        self.accept_out_of_fds.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_connections_max(&self, max: usize) {
        self.connections_max.store(max as u64, Ordering::Relaxed);
    }

    pub(crate) fn attach_buffer(&self, pool: Arc<crate::budget::Pool>) {
        let _ = self.buffer.set(pool);
    }

    /// Records one request the broker answered.
    pub(crate) fn request(&self, kind: Kind, elapsed: Duration, failed: bool) {
        let m = self.kind(Some(kind));
        m.requests.fetch_add(1, Ordering::Relaxed);
        if failed {
            m.errors.fetch_add(1, Ordering::Relaxed);
        }
        m.duration.observe(elapsed);
    }

    /// Records a request refused before it reached the broker (an undecodable frame);
    /// `kind` is `None` when the frame named no known kind.
    pub(crate) fn rejected(&self, kind: Option<Kind>) {
        let m = self.kind(kind);
        m.requests.fetch_add(1, Ordering::Relaxed);
        m.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Records records and bytes appended to a topic.
    pub(crate) fn produced(&self, stream: &str, topic: &str, records: u64, bytes: u64) {
        if let Some(t) = self.topic(stream, topic) {
            t.records_in.fetch_add(records, Ordering::Relaxed);
            t.bytes_in.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Records batch bytes served from a topic.
    pub(crate) fn fetched(&self, stream: &str, topic: &str, bytes: u64) {
        if let Some(t) = self.topic(stream, topic) {
            t.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// The counters of one topic, created on first use; `None` past the series bound.
    fn topic(&self, stream: &str, topic: &str) -> Option<Arc<TopicMetrics>> {
        {
            let topics = self.topics.read();
            if let Some(t) = topics.get(stream).and_then(|s| s.get(topic)) {
                return Some(Arc::clone(t));
            }
        }
        let mut topics = self.topics.write();
        let series: usize = topics.values().map(BTreeMap::len).sum();
        if series >= TOPIC_SERIES_MAX {
            return None;
        }
        let t = topics
            .entry(stream.to_owned())
            .or_default()
            .entry(topic.to_owned())
            .or_default();
        Some(Arc::clone(t))
    }

    /// Lets `render` report the broker's consumer-group lag and failed partitions.
    pub fn attach_broker(&self, broker: Arc<rill_broker::Broker>) {
        let _ = self.broker.set(broker);
    }

    /// What `/health` reports when something refuses appends: `degraded`, then one line
    /// per failed partition (`stream/topic/partition: reason`). `None` while healthy.
    pub fn health_problems(&self) -> Option<String> {
        let broker = self.broker.get()?;
        let failed = broker.failed_partitions();
        let out_of_quorum = broker.cluster_health().filter(|h| !h.in_quorum);
        if failed.is_empty() && out_of_quorum.is_none() {
            return None;
        }
        let mut out = String::new();
        if let Some(h) = out_of_quorum {
            let _ = writeln!(
                out,
                "degraded: node {} is not in a quorum of the metadata group (no leader it hears from)",
                h.node_id
            );
        }
        if failed.is_empty() {
            return Some(out);
        }
        let _ = writeln!(
            out,
            "degraded: {} partition(s) refuse appends",
            failed.len()
        );
        for f in failed {
            let _ = writeln!(
                out,
                "{}/{}/{}: {}",
                f.stream, f.topic, f.partition, f.reason
            );
        }
        Some(out)
    }

    /// Every metric in the Prometheus text exposition format, version 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 << 10);
        header(
            &mut out,
            "rill_connections",
            "gauge",
            "Open client connections.",
        );
        line(&mut out, "rill_connections", "", self.connections());
        header(
            &mut out,
            "rill_connections_accepted_total",
            "counter",
            "Client connections accepted.",
        );
        line(
            &mut out,
            "rill_connections_accepted_total",
            "",
            self.connections_accepted.load(Ordering::Relaxed),
        );
        header(
            &mut out,
            "rill_connections_rejected_total",
            "counter",
            "Client connections refused because max_connections were open.",
        );
        line(
            &mut out,
            "rill_connections_rejected_total",
            "",
            self.connections_rejected.load(Ordering::Relaxed),
        );
        self.render_limits(&mut out);
        self.render_requests(&mut out);
        self.render_topics(&mut out);
        render_fsync(&mut out);
        if let Some(broker) = self.broker.get() {
            render_group_lag(&mut out, broker);
            render_member_reports(&mut out, broker);
            render_quotas(&mut out, broker);
            render_partition_health(&mut out, broker);
            if let Some(health) = broker.cluster_health() {
                render_cluster(&mut out, &health);
            }
        }
        out
    }

    fn render_limits(&self, out: &mut String) {
        header(
            out,
            "rill_connections_max",
            "gauge",
            "The connection limit in force: max_connections, lowered to what the file-descriptor limit allows.",
        );
        line(
            out,
            "rill_connections_max",
            "",
            self.connections_max.load(Ordering::Relaxed),
        );
        header(
            out,
            "rill_connections_closed_total",
            "counter",
            "Client connections the server closed: write_timeout (the client did not read), idle (it sent nothing).",
        );
        for reason in CloseReason::ALL {
            let labels = format!("reason=\"{}\"", reason.label());
            line(
                out,
                "rill_connections_closed_total",
                &labels,
                self.connections_closed_total(reason),
            );
        }
        header(
            out,
            "rill_accept_out_of_fds_total",
            "counter",
            "Accepts that failed for want of a file descriptor (EMFILE, ENFILE).",
        );
        line(
            out,
            "rill_accept_out_of_fds_total",
            "",
            self.accept_out_of_fds_total(),
        );
        header(
            out,
            "rill_buffer_bytes",
            "gauge",
            "Bytes of the server-wide buffer budget in use: request frames being read or handled, responses not yet written.",
        );
        line(out, "rill_buffer_bytes", "", self.buffer_bytes());
        header(
            out,
            "rill_buffer_bytes_max",
            "gauge",
            "The server-wide buffer budget (buffer_bytes_max).",
        );
        line(
            out,
            "rill_buffer_bytes_max",
            "",
            self.buffer.get().map_or(0, |pool| pool.capacity()),
        );
    }

    fn kinds_with_names(&self) -> impl Iterator<Item = (&'static str, &KindMetrics)> {
        Kind::ALL
            .iter()
            .map(|k| k.name())
            .chain([UNKNOWN_KIND])
            .zip(self.kinds.iter())
    }

    fn render_requests(&self, out: &mut String) {
        header(
            out,
            "rill_requests_total",
            "counter",
            "Requests answered, by kind.",
        );
        for (name, m) in self.kinds_with_names() {
            let labels = format!("kind=\"{name}\"");
            line(
                out,
                "rill_requests_total",
                &labels,
                m.requests.load(Ordering::Relaxed),
            );
        }
        header(
            out,
            "rill_request_errors_total",
            "counter",
            "Requests answered with an error, by kind.",
        );
        for (name, m) in self.kinds_with_names() {
            let labels = format!("kind=\"{name}\"");
            line(
                out,
                "rill_request_errors_total",
                &labels,
                m.errors.load(Ordering::Relaxed),
            );
        }
        header(
            out,
            "rill_request_duration_seconds",
            "histogram",
            "Time the broker took to answer a request, by kind.",
        );
        for (name, m) in self.kinds_with_names() {
            let h = &m.duration;
            let count = h.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let mut cumulative = 0;
            for (i, bucket) in h.buckets.iter().enumerate() {
                cumulative += bucket.load(Ordering::Relaxed);
                let le = DURATION_BUCKETS_SECONDS
                    .get(i)
                    .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
                let labels = format!("kind=\"{name}\",le=\"{le}\"");
                line(
                    out,
                    "rill_request_duration_seconds_bucket",
                    &labels,
                    cumulative,
                );
            }
            let labels = format!("kind=\"{name}\"");
            let sum = h.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            line(out, "rill_request_duration_seconds_sum", &labels, sum);
            line(out, "rill_request_duration_seconds_count", &labels, count);
        }
    }

    fn render_topics(&self, out: &mut String) {
        let topics = self.topics.read();
        let series: Vec<(String, &TopicMetrics)> = topics
            .iter()
            .flat_map(|(stream, ts)| {
                ts.iter().map(move |(topic, m)| {
                    (
                        format!("stream=\"{}\",topic=\"{}\"", escape(stream), escape(topic)),
                        &**m,
                    )
                })
            })
            .collect();
        type Pick = fn(&TopicMetrics) -> &AtomicU64;
        let families: [(&str, &str, Pick); 3] = [
            (
                "rill_records_in_total",
                "Records appended, by topic.",
                |m| &m.records_in,
            ),
            (
                "rill_bytes_in_total",
                "Record-batch bytes appended, by topic.",
                |m| &m.bytes_in,
            ),
            (
                "rill_bytes_out_total",
                "Record-batch bytes served by fetches, by topic.",
                |m| &m.bytes_out,
            ),
        ];
        for (name, help, pick) in families {
            header(out, name, "counter", help);
            for (labels, m) in &series {
                line(out, name, labels, pick(m).load(Ordering::Relaxed));
            }
        }
    }
}

/// Why the server closed a connection on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// A response made no progress into the socket for `write_timeout`: the client
    /// does not read.
    WriteTimeout,
    /// The client sent nothing for `idle_timeout` with no request in flight.
    Idle,
}

impl CloseReason {
    const ALL: [CloseReason; 2] = [CloseReason::WriteTimeout, CloseReason::Idle];

    fn label(self) -> &'static str {
        match self {
            CloseReason::WriteTimeout => "write_timeout",
            CloseReason::Idle => "idle",
        }
    }
}

/// Decrements the connection gauge when the connection ends, however it ends.
#[derive(Debug)]
pub(crate) struct ConnectionGauge(Arc<Metrics>);

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn line(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// Escapes a label value (names are validated by the broker, but the format must hold
/// whatever they become).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Records not yet consumed by each consumer group, per partition.
fn render_group_lag(out: &mut String, broker: &rill_broker::Broker) {
    header(
        out,
        "rill_group_lag",
        "gauge",
        "Records after a consumer group's stored offset, per partition.",
    );
    for (stream, topic, group, partition, lag) in broker.group_lags() {
        let labels = format!(
            "stream=\"{}\",topic=\"{}\",group=\"{}\",partition=\"{partition}\"",
            escape(&stream),
            escape(&topic),
            escape(&group)
        );
        line(out, "rill_group_lag", &labels, lag);
    }
}

/// The users' quotas on this node (docs/SECURITY.md §7): only users with a quota.
fn render_quotas(out: &mut String, broker: &rill_broker::Broker) {
    let usage = broker.quota_usage();
    header(
        out,
        "rill_quota_bytes_total",
        "counter",
        "Bytes counted against a user's produce or fetch quota on this node.",
    );
    for u in &usage {
        let labels = format!("user=\"{}\",kind=\"{}\"", escape(&u.user), u.kind.as_str());
        line(out, "rill_quota_bytes_total", &labels, u.bytes);
    }
    header(
        out,
        "rill_quota_throttle_seconds_total",
        "counter",
        "Time responses to a user were held back by its quota on this node.",
    );
    for u in &usage {
        let labels = format!("user=\"{}\",kind=\"{}\"", escape(&u.user), u.kind.as_str());
        line(
            out,
            "rill_quota_throttle_seconds_total",
            &labels,
            u.throttled.as_secs_f64(),
        );
    }
}

/// What consumer group members report about themselves with their heartbeats.
fn render_member_reports(out: &mut String, broker: &rill_broker::Broker) {
    header(
        out,
        "rill_group_member_metric",
        "gauge",
        "A number a consumer group member reports about itself with its heartbeats (an events consumer's lag, retry backlog, quarantined keys, attempts, dead letters and handler time; docs/CLI.md, group describe).",
    );
    for r in broker.group_member_reports() {
        let labels = format!(
            "stream=\"{}\",topic=\"{}\",group=\"{}\",member=\"{}\",name=\"{}\"",
            escape(&r.stream),
            escape(&r.topic),
            escape(&r.group),
            escape(&r.member),
            escape(&r.name)
        );
        line(out, "rill_group_member_metric", &labels, r.value);
    }
}

/// A cluster node's view: the metadata group and each replica (docs/REPLICATION.md §10).
fn render_cluster(out: &mut String, h: &rill_broker::cluster::ClusterHealth) {
    header(
        out,
        "rill_cluster_node_id",
        "gauge",
        "This node's id (--node-id).",
    );
    line(out, "rill_cluster_node_id", "", h.node_id);
    header(
        out,
        "rill_cluster_in_quorum",
        "gauge",
        "1 while this node is in a quorum of the metadata group (it leads with a majority acknowledging, or follows a leader).",
    );
    line(out, "rill_cluster_in_quorum", "", u8::from(h.in_quorum));
    header(
        out,
        "rill_cluster_controller",
        "gauge",
        "The metadata group's leader as this node knows it (absent while none is known).",
    );
    if let Some(c) = h.controller {
        line(out, "rill_cluster_controller", "", c);
    }
    header(
        out,
        "rill_cluster_term",
        "gauge",
        "The metadata group's current term here.",
    );
    line(out, "rill_cluster_term", "", h.term);
    header(
        out,
        "rill_cluster_controller_changes_total",
        "counter",
        "Times this node saw a new leader of the metadata group.",
    );
    line(
        out,
        "rill_cluster_controller_changes_total",
        "",
        h.controller_changes,
    );
    for (name, kind, help) in [
        (
            "rill_replica_leading",
            "gauge",
            "1 while this node's replica of the partition leads its group.",
        ),
        (
            "rill_replica_term",
            "gauge",
            "The partition group's current term on this replica.",
        ),
        (
            "rill_replica_high_watermark",
            "gauge",
            "The replica's high watermark: offsets below it are committed.",
        ),
        (
            "rill_replica_leader_changes_total",
            "counter",
            "Times this replica saw a new leader of its group.",
        ),
        (
            "rill_replica_follower_lag",
            "gauge",
            "On the leader: records a follower is behind the high watermark.",
        ),
    ] {
        header(out, name, kind, help);
        for r in &h.replicas {
            let labels = format!(
                "stream=\"{}\",topic=\"{}\",partition=\"{}\"",
                escape(&r.stream),
                escape(&r.topic),
                r.partition
            );
            match name {
                "rill_replica_leading" => line(out, name, &labels, u8::from(r.leading)),
                "rill_replica_term" => line(out, name, &labels, r.term),
                "rill_replica_high_watermark" => line(out, name, &labels, r.high_watermark),
                "rill_replica_leader_changes_total" => line(out, name, &labels, r.leader_changes),
                _ => {
                    for (follower, lag) in &r.lag {
                        line(out, name, &format!("{labels},follower=\"{follower}\""), lag);
                    }
                }
            }
        }
    }
    header(
        out,
        "rill_replica_commit_seconds",
        "histogram",
        "Time a produce proposed by this node as a partition leader took to commit (a majority holds it under the topic's durability).",
    );
    let latency = &h.commit_latency;
    let mut cumulative = 0;
    for (i, count) in latency.counts.iter().enumerate() {
        cumulative += count;
        let le = rill_broker::cluster::COMMIT_BUCKETS_SECONDS
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
        line(
            out,
            "rill_replica_commit_seconds_bucket",
            &format!("le=\"{le}\""),
            cumulative,
        );
    }
    line(
        out,
        "rill_replica_commit_seconds_sum",
        "",
        latency.sum_nanos as f64 / 1e9,
    );
    line(out, "rill_replica_commit_seconds_count", "", latency.count);
}

/// Partitions that refuse appends (poisoned, damaged or unopenable), and open files.
fn render_partition_health(out: &mut String, broker: &rill_broker::Broker) {
    let failed = broker.failed_partitions();
    header(
        out,
        "rill_partitions_failed",
        "gauge",
        "Partitions that refuse appends: poisoned after a failed write or fsync, damaged, or unopenable (the offsets log counts as one).",
    );
    line(out, "rill_partitions_failed", "", failed.len() as u64);
    header(
        out,
        "rill_partition_failed",
        "gauge",
        "1 for each partition that refuses appends; the reason is in /health and `rill topic describe`.",
    );
    for f in &failed {
        let labels = format!(
            "stream=\"{}\",topic=\"{}\",partition=\"{}\"",
            escape(&f.stream),
            escape(&f.topic),
            f.partition
        );
        line(out, "rill_partition_failed", &labels, 1);
    }
    header(
        out,
        "rill_open_segment_files",
        "gauge",
        "Sealed-segment files the broker keeps open (bounded by open_files_max).",
    );
    line(
        out,
        "rill_open_segment_files",
        "",
        broker.open_segment_files() as u64,
    );
}

/// The log engine's process-wide fsync latency histogram.
fn render_fsync(out: &mut String) {
    let stats = rill_broker::fsync_stats();
    header(
        out,
        "rill_fsync_duration_seconds",
        "histogram",
        "Time spent in fdatasync of partition data (group commits and segment rolls).",
    );
    let mut cumulative = 0;
    for (i, count) in stats.buckets.iter().enumerate() {
        cumulative += count;
        let le = rill_broker::FSYNC_BUCKETS_SECONDS
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
        line(
            out,
            "rill_fsync_duration_seconds_bucket",
            &format!("le=\"{le}\""),
            cumulative,
        );
    }
    line(
        out,
        "rill_fsync_duration_seconds_sum",
        "",
        stats.sum_seconds,
    );
    line(out, "rill_fsync_duration_seconds_count", "", stats.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_tables_agree() {
        assert_eq!(DURATION_BUCKETS_SECONDS.len(), DURATION_BUCKETS_NANOS.len());
        for (s, n) in DURATION_BUCKETS_SECONDS.iter().zip(DURATION_BUCKETS_NANOS) {
            assert_eq!((s * 1e9).round() as u64, n);
        }
    }

    #[test]
    fn histogram_is_cumulative_with_inf() {
        let m = Metrics::new();
        m.request(Kind::Fetch, Duration::from_micros(10), false);
        m.request(Kind::Fetch, Duration::from_millis(3), true);
        m.request(Kind::Fetch, Duration::from_secs(30), false);
        m.rejected(None);
        let text = m.render();
        assert!(
            text.contains(
                "rill_request_duration_seconds_bucket{kind=\"Fetch\",le=\"0.00005\"} 1\n"
            )
        );
        assert!(
            text.contains("rill_request_duration_seconds_bucket{kind=\"Fetch\",le=\"0.005\"} 2\n")
        );
        assert!(
            text.contains("rill_request_duration_seconds_bucket{kind=\"Fetch\",le=\"10\"} 2\n")
        );
        assert!(
            text.contains("rill_request_duration_seconds_bucket{kind=\"Fetch\",le=\"+Inf\"} 3\n")
        );
        assert!(text.contains("rill_request_duration_seconds_count{kind=\"Fetch\"} 3\n"));
        assert!(text.contains("rill_requests_total{kind=\"Fetch\"} 3\n"));
        assert!(text.contains("rill_request_errors_total{kind=\"Fetch\"} 1\n"));
        assert!(text.contains("rill_requests_total{kind=\"unknown\"} 1\n"));
        assert_eq!(m.requests_total(Kind::Fetch), 3);
        assert_eq!(m.request_errors_total(Kind::Fetch), 1);
    }

    #[test]
    fn topic_counters_and_connections() {
        let m = Arc::new(Metrics::new());
        m.produced("shop", "orders", 3, 300);
        m.produced("shop", "orders", 2, 100);
        m.fetched("shop", "orders", 400);
        let gauge = m.connection_opened();
        let text = m.render();
        assert!(text.contains("rill_records_in_total{stream=\"shop\",topic=\"orders\"} 5\n"));
        assert!(text.contains("rill_bytes_in_total{stream=\"shop\",topic=\"orders\"} 400\n"));
        assert!(text.contains("rill_bytes_out_total{stream=\"shop\",topic=\"orders\"} 400\n"));
        assert!(text.contains("rill_connections 1\n"));
        drop(gauge);
        assert_eq!(m.connections(), 0);
        m.connection_closed(CloseReason::Idle);
        m.connection_closed(CloseReason::Idle);
        m.connection_closed(CloseReason::WriteTimeout);
        m.set_connections_max(77);
        let text = m.render();
        assert!(text.contains("rill_connections_closed_total{reason=\"idle\"} 2\n"));
        assert!(text.contains("rill_connections_closed_total{reason=\"write_timeout\"} 1\n"));
        assert!(text.contains("rill_connections_max 77\n"));
        assert_eq!(m.connections_closed_total(CloseReason::Idle), 2);
    }

    #[test]
    fn every_family_has_help_and_type() {
        let text = Metrics::new().render();
        for name in [
            "rill_connections",
            "rill_connections_max",
            "rill_connections_closed_total",
            "rill_accept_out_of_fds_total",
            "rill_buffer_bytes",
            "rill_buffer_bytes_max",
            "rill_requests_total",
            "rill_request_errors_total",
            "rill_request_duration_seconds",
            "rill_records_in_total",
            "rill_bytes_in_total",
            "rill_bytes_out_total",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
