//! Series computed at scrape time: the server's buffer budget, and everything read from
//! the broker (fsync statistics, consumer-group lag, member reports, quotas, partition
//! health, a cluster node's view). Each is a `prometheus-client` collector, so the
//! broker is asked once per scrape and nothing is copied between scrapes.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::gauge::ConstGauge;

use super::Sources;

/// `rill_buffer_bytes` and `rill_buffer_bytes_max`, from the server's budget.
#[derive(Debug)]
pub(super) struct BufferCollector(pub(super) Arc<Sources>);

impl Collector for BufferCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let buffer = self.0.buffer.get();
        gauge(
            &mut encoder,
            "rill_buffer_bytes",
            "Bytes of the server-wide buffer budget in use: request frames being read or handled, responses not yet written.",
            buffer.map_or(0, |b| b.used_bytes()),
        )?;
        gauge(
            &mut encoder,
            "rill_buffer_bytes_max",
            "The server-wide buffer budget (buffer_bytes_max).",
            buffer.map_or(0, |b| b.capacity_bytes()),
        )
    }
}

/// Everything read from the broker at scrape time.
#[derive(Debug)]
pub(super) struct BrokerCollector(pub(super) Arc<Sources>);

impl Collector for BrokerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        encode_fsync(&mut encoder)?;
        let Some(broker) = self.0.broker.get() else {
            return Ok(());
        };
        encode_group_lag(&mut encoder, broker)?;
        encode_member_reports(&mut encoder, broker)?;
        encode_quotas(&mut encoder, broker)?;
        encode_partition_health(&mut encoder, broker)?;
        encode_ranges(&mut encoder, broker)?;
        if let Some(health) = broker.cluster_health() {
            encode_cluster(&mut encoder, &health)?;
        }
        Ok(())
    }
}

/// One unlabelled gauge.
fn gauge<V>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: V,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<V>: EncodeMetric,
{
    let metric = ConstGauge::new(value);
    let m = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(m)
}

/// A family of labelled series of one metric type (`Gauge` or `Counter`; a counter's
/// name is given without `_total`, which the encoder adds).
fn family<L, M>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    series: impl IntoIterator<Item = (L, M)>,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    M: EncodeMetric,
{
    let mut m = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, metric) in series {
        metric.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A histogram from non-cumulative `counts` over `bounds` and a last `+Inf` bucket.
fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
    count: u64,
) -> Result<(), std::fmt::Error> {
    let buckets: Vec<(f64, u64)> = bounds
        .iter()
        .copied()
        .chain([f64::INFINITY])
        .enumerate()
        .map(|(i, bound)| (bound, counts.get(i).copied().unwrap_or(0)))
        .collect();
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    m.encode_histogram::<NoLabelSet>(
        sum,
        count,
        &buckets,
        None::<&HashMap<usize, Exemplar<NoLabelSet, f64>>>,
    )
}

/// The log engine's process-wide fsync latency histogram.
fn encode_fsync(encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let stats = rill_broker::fsync_stats();
    histogram(
        encoder,
        "rill_fsync_duration_seconds",
        "Time spent in fdatasync of partition data (group commits and segment rolls).",
        &rill_broker::FSYNC_BUCKETS_SECONDS,
        &stats.buckets,
        stats.sum_seconds,
        stats.count,
    )
}

/// Records not yet consumed by each consumer group, per partition.
fn encode_group_lag(
    encoder: &mut DescriptorEncoder<'_>,
    broker: &rill_broker::Broker,
) -> Result<(), std::fmt::Error> {
    let lags = broker.group_lags();
    family(
        encoder,
        "rill_group_lag",
        "Records after a consumer group's stored offset, per partition.",
        MetricType::Gauge,
        lags.iter().map(|(stream, topic, group, partition, lag)| {
            (
                [
                    ("stream", stream.clone()),
                    ("topic", topic.clone()),
                    ("group", group.clone()),
                    ("partition", partition.to_string()),
                ],
                ConstGauge::new(*lag),
            )
        }),
    )
}

/// What consumer group members report about themselves with their heartbeats.
fn encode_member_reports(
    encoder: &mut DescriptorEncoder<'_>,
    broker: &rill_broker::Broker,
) -> Result<(), std::fmt::Error> {
    let reports = broker.group_member_reports();
    family(
        encoder,
        "rill_group_member_metric",
        "A number a consumer group member reports about itself with its heartbeats (an events consumer's lag, retry backlog, quarantined keys, attempts, dead letters and handler time; docs/CLI.md, group describe).",
        MetricType::Gauge,
        reports.iter().map(|r| {
            (
                [
                    ("stream", r.stream.as_str()),
                    ("topic", r.topic.as_str()),
                    ("group", r.group.as_str()),
                    ("member", r.member.as_str()),
                    ("name", r.name.as_str()),
                ],
                ConstGauge::new(r.value),
            )
        }),
    )
}

/// The users' quotas on this node (docs/SECURITY.md §7): only users with a quota.
fn encode_quotas(
    encoder: &mut DescriptorEncoder<'_>,
    broker: &rill_broker::Broker,
) -> Result<(), std::fmt::Error> {
    let usage = broker.quota_usage();
    let labels = |u: &rill_broker::QuotaUsage| {
        [
            ("user", u.user.clone()),
            ("kind", u.kind.as_str().to_owned()),
        ]
    };
    family(
        encoder,
        "rill_quota_bytes",
        "Bytes counted against a user's produce or fetch quota on this node.",
        MetricType::Counter,
        usage
            .iter()
            .map(|u| (labels(u), ConstCounter::new(u.bytes))),
    )?;
    family(
        encoder,
        "rill_quota_throttle_seconds",
        "Time responses to a user were held back by its quota on this node.",
        MetricType::Counter,
        usage
            .iter()
            .map(|u| (labels(u), ConstCounter::new(u.throttled.as_secs_f64()))),
    )
}

/// Partitions that refuse appends (poisoned, damaged or unopenable), and open files.
fn encode_partition_health(
    encoder: &mut DescriptorEncoder<'_>,
    broker: &rill_broker::Broker,
) -> Result<(), std::fmt::Error> {
    let failed = broker.failed_partitions();
    gauge(
        encoder,
        "rill_partitions_failed",
        "Partitions that refuse appends: poisoned after a failed write or fsync, damaged, or unopenable (the offsets log counts as one).",
        failed.len() as u64,
    )?;
    family(
        encoder,
        "rill_partition_failed",
        "1 for each partition that refuses appends; the reason is in /health and `rill topic describe`.",
        MetricType::Gauge,
        failed.iter().map(|f| {
            (
                [
                    ("stream", f.stream.clone()),
                    ("topic", f.topic.clone()),
                    ("partition", f.partition.to_string()),
                ],
                ConstGauge::new(1i64),
            )
        }),
    )?;
    gauge(
        encoder,
        "rill_open_segment_files",
        "Sealed-segment files the broker keeps open (bounded by open_files_max).",
        broker.open_segment_files() as u64,
    )
}

/// Elastic topics' ranges (docs/RANGES.md §8): bytes written per range, open ranges per
/// topic, and splits and merges by kind and by whom.
fn encode_ranges(
    encoder: &mut DescriptorEncoder<'_>,
    broker: &rill_broker::Broker,
) -> Result<(), std::fmt::Error> {
    let stats = broker.range_stats();
    family(
        encoder,
        "rill_range_bytes_written",
        "Bytes of batches appended to each range of an elastic topic since the server started (rate() is the range's write rate, which the automatic policy judges).",
        MetricType::Counter,
        stats.iter().map(|r| {
            (
                [
                    ("stream", r.stream.clone()),
                    ("topic", r.topic.clone()),
                    ("range", r.range.to_string()),
                ],
                ConstCounter::new(r.bytes_written),
            )
        }),
    )?;
    let mut open: std::collections::BTreeMap<(&str, &str), u64> = Default::default();
    for r in &stats {
        *open.entry((&r.stream, &r.topic)).or_default() += u64::from(r.open);
    }
    family(
        encoder,
        "rill_ranges_open",
        "Open ranges of each elastic topic.",
        MetricType::Gauge,
        open.iter().map(|((stream, topic), &n)| {
            (
                [
                    ("stream", (*stream).to_owned()),
                    ("topic", (*topic).to_owned()),
                ],
                ConstGauge::new(n as i64),
            )
        }),
    )?;
    family(
        encoder,
        "rill_range_changes",
        "Splits and merges of each elastic topic's ranges since the server started, by kind (split, merge) and by whom (manual, policy).",
        MetricType::Counter,
        broker.range_changes().into_iter().map(|c| {
            (
                [
                    ("stream", c.stream),
                    ("topic", c.topic),
                    ("kind", c.kind.to_owned()),
                    ("by", c.by.to_owned()),
                ],
                ConstCounter::new(c.count),
            )
        }),
    )
}

/// A cluster node's view: the metadata group and each replica (docs/REPLICATION.md §10).
fn encode_cluster(
    encoder: &mut DescriptorEncoder<'_>,
    h: &rill_broker::cluster::ClusterHealth,
) -> Result<(), std::fmt::Error> {
    gauge(
        encoder,
        "rill_cluster_node_id",
        "This node's id (--node-id).",
        h.node_id,
    )?;
    gauge(
        encoder,
        "rill_cluster_in_quorum",
        "1 while this node is in a quorum of the metadata group (it leads with a majority acknowledging, or follows a leader).",
        u64::from(h.in_quorum),
    )?;
    // Absent while no controller is known: the family is described with no sample.
    let mut m = encoder.encode_descriptor(
        "rill_cluster_controller",
        "The metadata group's leader as this node knows it (absent while none is known).",
        None,
        MetricType::Gauge,
    )?;
    if let Some(c) = h.controller {
        ConstGauge::new(c).encode(m.encode_family(&Vec::<(String, String)>::new())?)?;
    }
    gauge(
        encoder,
        "rill_cluster_term",
        "The metadata group's current term here.",
        h.term,
    )?;
    let changes = ConstCounter::new(h.controller_changes);
    let m = encoder.encode_descriptor(
        "rill_cluster_controller_changes",
        "Times this node saw a new leader of the metadata group.",
        None,
        MetricType::Counter,
    )?;
    changes.encode(m)?;
    let labels = |r: &rill_broker::cluster::ReplicaHealth| {
        vec![
            ("stream", r.stream.clone()),
            ("topic", r.topic.clone()),
            ("partition", r.partition.to_string()),
        ]
    };
    family(
        encoder,
        "rill_replica_leading",
        "1 while this node's replica of the partition leads its group.",
        MetricType::Gauge,
        h.replicas
            .iter()
            .map(|r| (labels(r), ConstGauge::new(u64::from(r.leading)))),
    )?;
    family(
        encoder,
        "rill_replica_term",
        "The partition group's current term on this replica.",
        MetricType::Gauge,
        h.replicas
            .iter()
            .map(|r| (labels(r), ConstGauge::new(r.term))),
    )?;
    family(
        encoder,
        "rill_replica_high_watermark",
        "The replica's high watermark: offsets below it are committed.",
        MetricType::Gauge,
        h.replicas
            .iter()
            .map(|r| (labels(r), ConstGauge::new(r.high_watermark))),
    )?;
    family(
        encoder,
        "rill_replica_leader_changes",
        "Times this replica saw a new leader of its group.",
        MetricType::Counter,
        h.replicas
            .iter()
            .map(|r| (labels(r), ConstCounter::new(r.leader_changes))),
    )?;
    family(
        encoder,
        "rill_replica_follower_lag",
        "On the leader: records a follower is behind the high watermark.",
        MetricType::Gauge,
        h.replicas.iter().flat_map(|r| {
            r.lag.iter().map(move |(follower, lag)| {
                let mut l = labels(r);
                l.push(("follower", follower.to_string()));
                (l, ConstGauge::new(*lag))
            })
        }),
    )?;
    let latency = &h.commit_latency;
    histogram(
        encoder,
        "rill_replica_commit_seconds",
        "Time a produce proposed by this node as a partition leader took to commit (a majority holds it under the topic's durability).",
        &rill_broker::cluster::COMMIT_BUCKETS_SECONDS,
        &latency.counts,
        latency.sum_nanos as f64 / 1e9,
        latency.count,
    )
}
