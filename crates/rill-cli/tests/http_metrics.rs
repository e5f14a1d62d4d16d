//! `/metrics` of the real binary keeps every metric family it had before the HTTP port
//! moved to axum and prometheus-client: a server with topics, records, a consumer group
//! whose member reports numbers, a user with a quota, and a damaged partition shows
//! every family of `tests/data/metric_families.txt` (saved from the hand-written writer
//! under the same conditions) with the same type, and counters that match the traffic.

mod common;

use std::time::{Duration, Instant};

use rill_client::{Client, Credentials, Permission, QuotaChange, Role, Secret, TopicOptions};

const ADMIN_PASSWORD: &str = "metrics-admin-Pa55";
const BOB_PASSWORD: &str = "metrics-bob-Pa55";

/// Makes `s/damaged` with partition 1 missing a segment in the middle of its offsets.
async fn damaged_data_dir(data: &std::path::Path) {
    {
        let broker = rill_broker::Broker::open(rill_broker::BrokerConfig::new(data)).unwrap();
        let options = rill_proto_options(2, 1024);
        broker
            .create_topic("s", "damaged", &options, false, true)
            .unwrap();
        for _ in 0..12 {
            let mut b = rill_format::BatchBuilder::new();
            b.push(rill_format::NewRecord::value(&[7u8; 300])).unwrap();
            let batch = bytes::Bytes::from(b.finish().unwrap());
            broker.produce("s", "damaged", 1, batch).await.unwrap();
        }
        broker.shutdown().unwrap();
    }
    let part = data.join("streams/s/damaged/1");
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    std::fs::remove_file(&logs[1]).unwrap();
}

fn rill_proto_options(
    partitions: u32,
    segment_bytes: u64,
) -> rill_client::raw::messages::TopicOptions {
    rill_client::raw::messages::TopicOptions {
        partitions,
        segment_bytes: Some(segment_bytes),
        ..Default::default()
    }
}

/// `# TYPE name type` lines of a Prometheus text exposition, as `name type`.
fn families(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(str::to_owned)
        .collect();
    out.sort();
    out
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_keep_every_family_with_its_type() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    damaged_data_dir(&data).await;
    let server = common::serve(
        &data,
        &["--auth"],
        &[
            ("RILL_ADMIN_PASSWORD", ADMIN_PASSWORD),
            ("RILL_LOG", "warn"),
        ],
    );
    let url = format!("rill://{}", server.addr);
    let admin = Client::builder()
        .credentials(Credentials::Password {
            user: "admin".into(),
            password: Secret::new(ADMIN_PASSWORD),
        })
        .connect(&url)
        .await
        .unwrap();
    admin
        .stream("shop")
        .topic("orders")
        .create_with(&TopicOptions::partitions(2), false)
        .await
        .unwrap();
    admin
        .create_user("bob", Role::User, &Secret::new(BOB_PASSWORD))
        .await
        .unwrap();
    admin
        .grant("bob", "shop", &[Permission::Read, Permission::Write])
        .await
        .unwrap();
    admin
        .set_quota(
            "bob",
            QuotaChange::new()
                .produce(Some(1 << 20))
                .fetch(Some(1 << 20)),
        )
        .await
        .unwrap();
    let bob = Client::builder()
        .credentials(Credentials::Password {
            user: "bob".into(),
            password: Secret::new(BOB_PASSWORD),
        })
        .connect(&url)
        .await
        .unwrap();
    let orders = bob.stream("shop").topic("orders");
    let mut value_bytes = 0;
    for i in 0..5u32 {
        let value = format!("order {i}");
        value_bytes += value.len();
        orders
            .publish()
            .partition(0)
            .value(value.into_bytes())
            .send()
            .await
            .unwrap();
    }
    assert!(value_bytes > 0);
    let mut member = orders.consumer_group("billing").build().await.unwrap();
    let first = member.next().await.unwrap().unwrap();
    member.commit(&first).await.unwrap();
    member.report([("handled_total", 7u64)]).unwrap();
    let metrics = || common::http_get(&server.http, "/metrics");
    until("the member's report", || {
        metrics().contains("name=\"handled_total\"} 7")
    })
    .await;
    let text = metrics();
    let got = families(&text);
    let saved = include_str!("data/metric_families.txt");
    for family in saved
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(
            got.iter().any(|g| g == family),
            "{family} is missing: {text}"
        );
        let name = family.split(' ').next().unwrap();
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no help: {text}"
        );
    }
    // Counters after the known traffic: five produces of one record each, by bob,
    // counted against his quota byte for byte.
    let value = |series: &str| -> f64 {
        let prefix = format!("{series} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {series} in {text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("rill_requests_total{kind=\"Produce\"}"), 5.0);
    assert_eq!(
        value("rill_records_in_total{stream=\"shop\",topic=\"orders\"}"),
        5.0
    );
    let bytes_in = value("rill_bytes_in_total{stream=\"shop\",topic=\"orders\"}");
    assert!(bytes_in > value_bytes as f64, "{bytes_in}");
    assert_eq!(
        value("rill_quota_bytes_total{user=\"bob\",kind=\"produce\"}"),
        bytes_in
    );
    assert_eq!(value("rill_partitions_failed"), 1.0);
    assert_eq!(
        value("rill_partition_failed{stream=\"s\",topic=\"damaged\",partition=\"1\"}"),
        1.0
    );
    assert!(
        value("rill_records_out_total{stream=\"shop\",topic=\"orders\"}") >= 1.0,
        "{text}"
    );
    assert!(text.contains(
        "rill_group_lag{stream=\"shop\",topic=\"orders\",group=\"billing\",partition=\"0\"} "
    ));
    assert!(
        text.contains("Content-Type: text/plain; version=0.0.4"),
        "{text}"
    );
    drop(member);
}

/// An elastic topic's ranges on `/metrics` (docs/RANGES.md §8): bytes written per range,
/// open ranges, and splits and merges by kind and by whom.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_an_elastic_topics_ranges_and_changes() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("data"), &[], &[("RILL_LOG", "warn")]);
    let client = Client::connect(&format!("rill://{}", server.addr))
        .await
        .unwrap();
    let topic = client.stream("shop").topic("orders");
    topic
        .create_with(
            &TopicOptions {
                partitions: Some(2),
                elastic: true,
                ..Default::default()
            },
            false,
        )
        .await
        .unwrap();
    // One record into range 0 (its key's hash is below 2^63), then a split of it and a
    // merge of its children.
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| rill_client::key_hash(k.as_bytes()) < 1 << 63)
        .unwrap();
    let at = topic
        .publish()
        .key(key.clone())
        .value("v")
        .send()
        .await
        .unwrap();
    assert_eq!(at.partition, 0);
    topic.split_range(Some(0), None).await.unwrap();
    topic.merge_ranges(2, 3).await.unwrap();
    let text = common::http_get(&server.http, "/metrics");
    let value = |series: &str| -> f64 {
        let prefix = format!("{series} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {series} in {text}"))
            .parse()
            .unwrap()
    };
    let labels = |range: u32| format!("stream=\"shop\",topic=\"orders\",range=\"{range}\"");
    assert!(value(&format!("rill_range_bytes_written_total{{{}}}", labels(0))) > 0.0);
    for range in 1..=4 {
        assert_eq!(
            value(&format!(
                "rill_range_bytes_written_total{{{}}}",
                labels(range)
            )),
            0.0
        );
    }
    assert_eq!(
        value("rill_ranges_open{stream=\"shop\",topic=\"orders\"}"),
        2.0
    );
    let changes = |kind: &str, by: &str| {
        value(&format!(
            "rill_range_changes_total{{stream=\"shop\",topic=\"orders\",kind=\"{kind}\",by=\"{by}\"}}"
        ))
    };
    assert_eq!(changes("split", "manual"), 1.0);
    assert_eq!(changes("merge", "manual"), 1.0);
    assert_eq!(changes("split", "policy"), 0.0);
    assert!(
        text.contains("# TYPE rill_range_bytes_written_total counter"),
        "{text}"
    );
}
