//! The server's metrics, kept in `prometheus-client` types and served at `GET /metrics`
//! in the Prometheus text exposition format (version 0.0.4).
//!
//! Series the server counts as it works (connections, requests by kind, per-topic
//! traffic) are `prometheus-client` counters, gauges and histograms registered once;
//! the hot path holds a handle to each and pays one atomic add (a histogram: one
//! uncontended lock). Series computed from broker state at scrape time (group lag,
//! member reports, quotas, partition health, cluster, fsync statistics) and the buffer
//! gauges come from the collectors in `collect.rs`.

mod collect;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rill_proto::Kind;

use collect::{BrokerCollector, BufferCollector};

/// Upper bounds of the request-duration histogram buckets, in seconds (50 µs to 10 s);
/// a last `+Inf` bucket catches the rest.
pub const DURATION_BUCKETS_SECONDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// Content type of the Prometheus text exposition format served at `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Distinct `{stream, topic}` label sets kept at most. Topics come from the broker's
/// catalog (only successful requests are counted), but deleted and recreated topics
/// would otherwise accumulate for the life of the process.
pub const TOPIC_SERIES_MAX: usize = 10_000;

/// Label of requests whose kind this build does not know.
const UNKNOWN_KIND: &str = "unknown";

/// What the server's buffer budget reports for the `rill_buffer_bytes` gauges: the
/// server implements it for its pool, read at scrape time.
pub trait BufferGauge: std::fmt::Debug + Send + Sync {
    /// Bytes in use now.
    fn used_bytes(&self) -> u64;
    /// The budget's size.
    fn capacity_bytes(&self) -> u64;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabels {
    stream: String,
    topic: String,
}

type HistogramFamily = Family<KindLabel, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS_SECONDS.iter().copied())
}

/// The handles of one request kind's series.
#[derive(Debug)]
struct KindMetrics {
    name: &'static str,
    requests: Counter,
    errors: Counter,
    /// Made on the first answer, so kinds never asked show no histogram (as before).
    duration: OnceLock<Histogram>,
}

/// The counters of one topic.
#[derive(Debug)]
struct TopicCounters {
    records_in: Counter,
    bytes_in: Counter,
    records_out: Counter,
    bytes_out: Counter,
}

/// One topic's traffic counters as they stand, for the rate sampler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTotals {
    /// The stream.
    pub stream: String,
    /// The topic.
    pub topic: String,
    /// Records appended.
    pub records_in: u64,
    /// Record-batch bytes appended.
    pub bytes_in: u64,
    /// Records in the batches served by fetches.
    pub records_out: u64,
    /// Record-batch bytes served by fetches.
    pub bytes_out: u64,
}

#[derive(Debug)]
struct TopicFamilies {
    records_in: Family<TopicLabels, Counter>,
    bytes_in: Family<TopicLabels, Counter>,
    records_out: Family<TopicLabels, Counter>,
    bytes_out: Family<TopicLabels, Counter>,
}

/// What the scrape-time collectors read: set once the server knows them.
#[derive(Debug, Default)]
struct Sources {
    broker: OnceLock<Arc<rill_broker::Broker>>,
    buffer: OnceLock<Arc<dyn BufferGauge>>,
}

/// The server's metrics, served at `GET /metrics`. Shared by every connection of one
/// server; cheap to update from any task.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    connections: Gauge,
    connections_accepted: Counter,
    connections_rejected: Counter,
    connections_max: Gauge,
    /// Connections closed by the server, by [`CloseReason`] (`CloseReason::ALL` order).
    connections_closed: [Counter; CloseReason::ALL.len()],
    accept_out_of_fds: Counter,
    /// One entry per `Kind::ALL` entry, then one for unknown kinds.
    kinds: Box<[KindMetrics]>,
    durations: HistogramFamily,
    topic_families: TopicFamilies,
    /// The topic handles by name, so the hot path looks a topic up without building
    /// owned labels; bounded by [`TOPIC_SERIES_MAX`].
    topics: RwLock<BTreeMap<String, BTreeMap<String, Arc<TopicCounters>>>>,
    sources: Arc<Sources>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Metrics with every value at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let sources = Arc::new(Sources::default());
        let connections = Gauge::default();
        registry.register(
            "rill_connections",
            "Open client connections",
            connections.clone(),
        );
        let connections_accepted = Counter::default();
        registry.register(
            "rill_connections_accepted",
            "Client connections accepted",
            connections_accepted.clone(),
        );
        let connections_rejected = Counter::default();
        registry.register(
            "rill_connections_rejected",
            "Client connections refused because max_connections were open",
            connections_rejected.clone(),
        );
        let connections_max = Gauge::default();
        registry.register(
            "rill_connections_max",
            "The connection limit in force: max_connections, lowered to what the file-descriptor limit allows",
            connections_max.clone(),
        );
        let closed = Family::<ReasonLabel, Counter>::default();
        let connections_closed = CloseReason::ALL.map(|reason| {
            closed
                .get_or_create(&ReasonLabel {
                    reason: reason.label(),
                })
                .clone()
        });
        registry.register(
            "rill_connections_closed",
            "Client connections the server closed: write_timeout (the client did not read), idle (it sent nothing)",
            closed,
        );
        let accept_out_of_fds = Counter::default();
        registry.register(
            "rill_accept_out_of_fds",
            "Accepts that failed for want of a file descriptor (EMFILE, ENFILE)",
            accept_out_of_fds.clone(),
        );
        registry.register_collector(Box::new(BufferCollector(Arc::clone(&sources))));

        let requests = Family::<KindLabel, Counter>::default();
        let errors = Family::<KindLabel, Counter>::default();
        let kinds: Box<[KindMetrics]> = Kind::ALL
            .iter()
            .map(|k| k.name())
            .chain([UNKNOWN_KIND])
            .map(|name| {
                let label = KindLabel { kind: name };
                KindMetrics {
                    name,
                    requests: requests.get_or_create(&label).clone(),
                    errors: errors.get_or_create(&label).clone(),
                    duration: OnceLock::new(),
                }
            })
            .collect();
        registry.register("rill_requests", "Requests answered, by kind", requests);
        registry.register(
            "rill_request_errors",
            "Requests answered with an error, by kind",
            errors,
        );
        let durations: HistogramFamily =
            Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        registry.register(
            "rill_request_duration_seconds",
            "Time the broker took to answer a request, by kind",
            durations.clone(),
        );
        let topic_families = TopicFamilies {
            records_in: Family::default(),
            bytes_in: Family::default(),
            records_out: Family::default(),
            bytes_out: Family::default(),
        };
        registry.register(
            "rill_records_in",
            "Records appended, by topic",
            topic_families.records_in.clone(),
        );
        registry.register(
            "rill_bytes_in",
            "Record-batch bytes appended, by topic",
            topic_families.bytes_in.clone(),
        );
        registry.register(
            "rill_records_out",
            "Records in the batches served by fetches, by topic (a batch counts whole, also when a fetch began inside it)",
            topic_families.records_out.clone(),
        );
        registry.register(
            "rill_bytes_out",
            "Record-batch bytes served by fetches, by topic",
            topic_families.bytes_out.clone(),
        );
        registry.register_collector(Box::new(BrokerCollector(Arc::clone(&sources))));
        Self {
            registry,
            connections,
            connections_accepted,
            connections_rejected,
            connections_max,
            connections_closed,
            accept_out_of_fds,
            kinds,
            durations,
            topic_families,
            topics: RwLock::new(BTreeMap::new()),
            sources,
        }
    }

    /// Client connections open now.
    pub fn connections(&self) -> i64 {
        self.connections.get()
    }

    /// Bytes of the server-wide buffer budget in use now: request frames being read or
    /// handled and responses not yet written.
    pub fn buffer_bytes(&self) -> u64 {
        self.sources.buffer.get().map_or(0, |b| b.used_bytes())
    }

    /// Connections the server closed for `reason` so far.
    pub fn connections_closed_total(&self, reason: CloseReason) -> u64 {
        self.connections_closed[reason as usize].get()
    }

    /// Accepts that failed for want of a file descriptor so far; each such client was
    /// answered through the spare descriptor when there was one.
    pub fn accept_out_of_fds_total(&self) -> u64 {
        self.accept_out_of_fds.get()
    }

    /// Requests of `kind` answered so far (successes and errors).
    pub fn requests_total(&self, kind: Kind) -> u64 {
        self.kind(Some(kind)).requests.get()
    }

    /// Requests of `kind` answered with an error so far.
    pub fn request_errors_total(&self, kind: Kind) -> u64 {
        self.kind(Some(kind)).errors.get()
    }

    fn kind(&self, kind: Option<Kind>) -> &KindMetrics {
        let slot = kind
            .and_then(|k| Kind::ALL.iter().position(|&known| known == k))
            .unwrap_or(Kind::ALL.len());
        &self.kinds[slot]
    }

    /// Counts an open connection until the returned guard is dropped.
    pub fn connection_opened(self: &Arc<Self>) -> ConnectionGauge {
        self.connections.inc();
        self.connections_accepted.inc();
        ConnectionGauge(Arc::clone(self))
    }

    /// Counts a connection refused because the connection limit was reached.
    pub fn connection_rejected(&self) {
        self.connections_rejected.inc();
    }

    /// Counts a connection the server closed on its own.
    pub fn connection_closed(&self, reason: CloseReason) {
        self.connections_closed[reason as usize].inc();
    }

    /// Counts an accept that failed for want of a file descriptor.
    pub fn accept_out_of_fds(&self) {
        self.accept_out_of_fds.inc();
    }

    /// Sets the connection limit in force.
    pub fn set_connections_max(&self, max: usize) {
        self.connections_max
            .set(i64::try_from(max).unwrap_or(i64::MAX));
    }

    /// Lets the `rill_buffer_bytes` gauges read the server's buffer budget.
    pub fn attach_buffer(&self, buffer: Arc<dyn BufferGauge>) {
        let _ = self.sources.buffer.set(buffer);
    }

    /// Records one request the broker answered.
    pub fn request(&self, kind: Kind, elapsed: Duration, failed: bool) {
        let m = self.kind(Some(kind));
        m.requests.inc();
        if failed {
            m.errors.inc();
        }
        let histogram = m.duration.get_or_init(|| {
            self.durations
                .get_or_create(&KindLabel { kind: m.name })
                .clone()
        });
        histogram.observe(elapsed.as_secs_f64());
    }

    /// Records a request refused before it reached the broker (an undecodable frame);
    /// `kind` is `None` when the frame named no known kind.
    pub fn rejected(&self, kind: Option<Kind>) {
        let m = self.kind(kind);
        m.requests.inc();
        m.errors.inc();
    }

    /// Records records and bytes appended to a topic.
    pub fn produced(&self, stream: &str, topic: &str, records: u64, bytes: u64) {
        if let Some(t) = self.topic(stream, topic) {
            t.records_in.inc_by(records);
            t.bytes_in.inc_by(bytes);
        }
    }

    /// Records batches served from a topic: their records and bytes.
    pub fn fetched(&self, stream: &str, topic: &str, records: u64, bytes: u64) {
        if let Some(t) = self.topic(stream, topic) {
            t.records_out.inc_by(records);
            t.bytes_out.inc_by(bytes);
        }
    }

    /// Every topic's traffic counters as they stand (for the rate sampler).
    pub fn topic_totals(&self) -> Vec<TopicTotals> {
        let topics = self.topics.read();
        topics
            .iter()
            .flat_map(|(stream, ts)| {
                ts.iter().map(move |(topic, t)| TopicTotals {
                    stream: stream.clone(),
                    topic: topic.clone(),
                    records_in: t.records_in.get(),
                    bytes_in: t.bytes_in.get(),
                    records_out: t.records_out.get(),
                    bytes_out: t.bytes_out.get(),
                })
            })
            .collect()
    }

    /// The counters of one topic, made on first use; `None` past the series bound.
    fn topic(&self, stream: &str, topic: &str) -> Option<Arc<TopicCounters>> {
        {
            let topics = self.topics.read();
            if let Some(t) = topics.get(stream).and_then(|s| s.get(topic)) {
                return Some(Arc::clone(t));
            }
        }
        let mut topics = self.topics.write();
        if let Some(t) = topics.get(stream).and_then(|s| s.get(topic)) {
            return Some(Arc::clone(t));
        }
        let series: usize = topics.values().map(BTreeMap::len).sum();
        if series >= TOPIC_SERIES_MAX {
            return None;
        }
        let labels = TopicLabels {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
        };
        let f = &self.topic_families;
        let counters = Arc::new(TopicCounters {
            records_in: f.records_in.get_or_create(&labels).clone(),
            bytes_in: f.bytes_in.get_or_create(&labels).clone(),
            records_out: f.records_out.get_or_create(&labels).clone(),
            bytes_out: f.bytes_out.get_or_create(&labels).clone(),
        });
        topics
            .entry(labels.stream)
            .or_default()
            .insert(labels.topic, Arc::clone(&counters));
        Some(counters)
    }

    /// Lets the scrape report the broker's consumer-group lag, failed partitions and
    /// the rest of its state.
    pub fn attach_broker(&self, broker: Arc<rill_broker::Broker>) {
        let _ = self.sources.broker.set(broker);
    }

    /// What `/health` reports when something refuses appends: `degraded`, then one line
    /// per failed partition (`stream/topic/partition: reason`). `None` while healthy.
    pub fn health_problems(&self) -> Option<String> {
        use std::fmt::Write as _;
        let broker = self.sources.broker.get()?;
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
        // Writing into a String cannot fail, and no collector fails on its own.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::warn!(error = %e, "encoding the metrics failed");
        }
        out
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
pub struct ConnectionGauge(Arc<Metrics>);

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.0.connections.dec();
    }
}

#[cfg(test)]
mod tests;
