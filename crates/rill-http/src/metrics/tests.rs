use std::sync::Arc;
use std::time::Duration;

use rill_proto::Kind;

use super::*;

#[test]
fn histogram_is_cumulative_with_inf() {
    let m = Metrics::new();
    m.request(Kind::Fetch, Duration::from_micros(10), false);
    m.request(Kind::Fetch, Duration::from_millis(3), true);
    m.request(Kind::Fetch, Duration::from_secs(30), false);
    m.rejected(None);
    let text = m.render();
    let bucket = |le: &str, n: u64| {
        format!("rill_request_duration_seconds_bucket{{kind=\"Fetch\",le=\"{le}\"}} {n}\n")
    };
    for (le, n) in [("5e-05", 1), ("0.005", 2), ("10", 2), ("+Inf", 3)] {
        assert!(text.contains(&bucket(le, n)), "{le} {n}: {text}");
    }
    assert!(text.contains("rill_request_duration_seconds_count{kind=\"Fetch\"} 3\n"));
    assert!(text.contains("rill_requests_total{kind=\"Fetch\"} 3\n"));
    assert!(text.contains("rill_request_errors_total{kind=\"Fetch\"} 1\n"));
    assert!(text.contains("rill_requests_total{kind=\"unknown\"} 1\n"));
    // Every kind has its request counters from the start; only kinds answered have a
    // histogram.
    assert!(text.contains("rill_requests_total{kind=\"Produce\"} 0\n"));
    assert!(!text.contains("rill_request_duration_seconds_count{kind=\"Produce\"}"));
    assert_eq!(m.requests_total(Kind::Fetch), 3);
    assert_eq!(m.request_errors_total(Kind::Fetch), 1);
}

#[test]
fn topic_counters_and_connections() {
    let m = Arc::new(Metrics::new());
    m.produced("shop", "orders", 3, 300);
    m.produced("shop", "orders", 2, 100);
    m.fetched("shop", "orders", 4, 400);
    let gauge = m.connection_opened();
    let text = m.render();
    assert!(text.contains("rill_records_in_total{stream=\"shop\",topic=\"orders\"} 5\n"));
    assert!(text.contains("rill_bytes_in_total{stream=\"shop\",topic=\"orders\"} 400\n"));
    assert!(text.contains("rill_bytes_out_total{stream=\"shop\",topic=\"orders\"} 400\n"));
    assert!(text.contains("rill_records_out_total{stream=\"shop\",topic=\"orders\"} 4\n"));
    assert!(text.contains("rill_connections 1\n"));
    assert!(text.contains("rill_connections_accepted_total 1\n"));
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
    assert_eq!(
        m.topic_totals(),
        vec![TopicTotals {
            stream: "shop".into(),
            topic: "orders".into(),
            records_in: 5,
            bytes_in: 400,
            records_out: 4,
            bytes_out: 400,
        }]
    );
}

#[test]
fn every_family_has_help_and_type() {
    let m = Metrics::new();
    // prometheus-client leaves out a family with no series yet: give each one.
    m.request(Kind::Produce, Duration::from_millis(1), false);
    m.produced("s", "t", 1, 10);
    m.fetched("s", "t", 1, 10);
    let text = m.render();
    for (name, kind) in [
        ("rill_connections", "gauge"),
        ("rill_connections_accepted_total", "counter"),
        ("rill_connections_rejected_total", "counter"),
        ("rill_connections_max", "gauge"),
        ("rill_connections_closed_total", "counter"),
        ("rill_accept_out_of_fds_total", "counter"),
        ("rill_buffer_bytes", "gauge"),
        ("rill_buffer_bytes_max", "gauge"),
        ("rill_requests_total", "counter"),
        ("rill_request_errors_total", "counter"),
        ("rill_request_duration_seconds", "histogram"),
        ("rill_records_in_total", "counter"),
        ("rill_bytes_in_total", "counter"),
        ("rill_bytes_out_total", "counter"),
        ("rill_fsync_duration_seconds", "histogram"),
    ] {
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
}

#[test]
fn label_values_are_escaped() {
    let m = Metrics::new();
    m.produced("a\"b\\c", "d\ne", 1, 1);
    let text = m.render();
    assert!(
        text.contains("rill_records_in_total{stream=\"a\\\"b\\\\c\",topic=\"d\\ne\"} 1\n"),
        "{text}"
    );
}

#[test]
fn topic_series_are_bounded() {
    let m = Metrics::new();
    for i in 0..TOPIC_SERIES_MAX + 5 {
        m.produced("s", &format!("t{i}"), 1, 1);
    }
    assert_eq!(m.topic_totals().len(), TOPIC_SERIES_MAX);
    // Known topics still count past the bound.
    m.produced("s", "t0", 1, 1);
    assert_eq!(
        m.topic_totals()
            .iter()
            .find(|t| t.topic == "t0")
            .unwrap()
            .records_in,
        2
    );
}

#[derive(Debug)]
struct FixedBuffer;

impl BufferGauge for FixedBuffer {
    fn used_bytes(&self) -> u64 {
        12
    }
    fn capacity_bytes(&self) -> u64 {
        1000
    }
}

#[test]
fn buffer_gauges_read_the_budget() {
    let m = Metrics::new();
    assert!(m.render().contains("rill_buffer_bytes 0\n"));
    m.attach_buffer(Arc::new(FixedBuffer));
    let text = m.render();
    assert!(text.contains("rill_buffer_bytes 12\n"), "{text}");
    assert!(text.contains("rill_buffer_bytes_max 1000\n"), "{text}");
    assert_eq!(m.buffer_bytes(), 12);
}

#[tokio::test]
async fn broker_series_and_health_name_failed_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let config = rill_broker::BrokerConfig::new(dir.path());
    {
        let broker = rill_broker::Broker::open(config.clone()).unwrap();
        let options = rill_proto::pb::TopicOptions {
            partitions: 2,
            segment_bytes: Some(1024),
            ..Default::default()
        };
        broker
            .create_topic("s", "t", &options, false, true)
            .unwrap();
        for _ in 0..12 {
            let mut b = rill_format::BatchBuilder::new();
            b.push(rill_format::NewRecord::value(&[7u8; 300])).unwrap();
            let batch = bytes::Bytes::from(b.finish().unwrap());
            broker.produce("s", "t", 1, batch).await.unwrap();
        }
        broker.shutdown().unwrap();
    }
    // Partition 1 loses a segment file in the middle of its offsets.
    let part = dir.path().join("streams/s/t/1");
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    std::fs::remove_file(&logs[1]).unwrap();
    let broker = Arc::new(rill_broker::Broker::open(config).unwrap());
    let metrics = Metrics::new();
    assert_eq!(metrics.health_problems(), None);
    metrics.attach_broker(Arc::clone(&broker));
    let health = metrics.health_problems().unwrap();
    assert!(health.contains("degraded: 1 partition"), "{health}");
    assert!(health.contains("s/t/1: "), "{health}");
    let m = metrics.render();
    assert!(m.contains("rill_partitions_failed 1\n"), "{m}");
    assert!(
        m.contains("rill_partition_failed{stream=\"s\",topic=\"t\",partition=\"1\"} 1\n"),
        "{m}"
    );
    assert!(m.contains("# TYPE rill_group_lag gauge\n"), "{m}");
    assert!(m.contains("# TYPE rill_quota_bytes_total counter\n"), "{m}");
    assert!(m.contains("# TYPE rill_open_segment_files gauge\n"), "{m}");
}
