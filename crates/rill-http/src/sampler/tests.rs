use super::*;

fn totals(topic: &str, records_in: u64, bytes_in: u64) -> TopicTotals {
    TopicTotals {
        stream: "s".into(),
        topic: topic.into(),
        records_in,
        bytes_in,
        records_out: records_in / 2,
        bytes_out: bytes_in / 2,
    }
}

#[test]
fn rates_are_deltas_over_the_real_interval() {
    let sampler = Sampler::new();
    sampler.record(0, &[totals("a", 100, 1000)], &[]);
    // The first sample is a baseline: no point yet.
    assert!(sampler.rates(None, SAMPLES_MAX).is_empty());
    sampler.record(5_000, &[totals("a", 150, 1500)], &[]);
    // A longer interval weighs by its length.
    sampler.record(15_000, &[totals("a", 250, 2500), totals("b", 10, 20)], &[]);
    let points = sampler.rates(None, SAMPLES_MAX);
    assert_eq!(points.len(), 2);
    assert_eq!(points[0].at_ms, 5_000);
    assert_eq!(points[0].rates.records_in_per_second, 10.0);
    assert_eq!(points[0].rates.bytes_in_per_second, 100.0);
    assert_eq!(points[0].rates.records_out_per_second, 5.0);
    // 100 from a and 10 from b (new: all of it counts) in 10 s.
    assert_eq!(points[1].rates.records_in_per_second, 11.0);
    let a = sampler.rates(Some(("s", "a")), SAMPLES_MAX);
    assert_eq!(a.len(), 2);
    assert_eq!(a[1].rates.records_in_per_second, 10.0);
    assert_eq!(sampler.rates(Some(("s", "b")), SAMPLES_MAX).len(), 1);
    assert!(sampler.rates(Some(("s", "nope")), SAMPLES_MAX).is_empty());
    // The last `samples` only.
    assert_eq!(sampler.rates(None, 1)[0].at_ms, 15_000);
    // Over the last minute: 150 records in 15 s.
    let minute = sampler.last_minute("s", "a").unwrap();
    assert_eq!(minute.records_in_per_second, 10.0);
    assert_eq!(sampler.last_minute("s", "nope"), None);
}

#[test]
fn series_are_bounded_in_length_and_number() {
    let sampler = Sampler::new();
    let many: Vec<TopicTotals> = (0..TOPIC_SERIES_MAX + 50)
        .map(|i| totals(&format!("t{i}"), 0, 0))
        .collect();
    sampler.record(0, &many, &[]);
    for step in 1..=(SAMPLES_MAX as u64 + 20) {
        let moved: Vec<TopicTotals> = (0..TOPIC_SERIES_MAX + 50)
            .map(|i| totals(&format!("t{i}"), step, step))
            .collect();
        sampler.record(step as i64 * 5_000, &moved, &[]);
    }
    let inner = sampler.inner.lock();
    assert_eq!(inner.totals.len(), SAMPLES_MAX);
    assert_eq!(inner.topics.len(), TOPIC_SERIES_MAX);
    assert!(inner.topics.values().all(|s| s.len() == SAMPLES_MAX));
    // The totals still count every topic.
    assert_eq!(
        inner.totals.back().unwrap().counts.records_in,
        (TOPIC_SERIES_MAX + 50) as u64
    );
}

#[test]
fn an_idle_topic_gives_its_place_up() {
    let sampler = Sampler::new();
    sampler.record(0, &[totals("a", 0, 0)], &[]);
    sampler.record(5_000, &[totals("a", 1, 1)], &[]);
    assert_eq!(sampler.rates(Some(("s", "a")), SAMPLES_MAX).len(), 1);
    for step in 2..=(SAMPLES_MAX as i64 + 1) {
        sampler.record(step * 5_000, &[totals("a", 1, 1)], &[]);
    }
    assert!(sampler.rates(Some(("s", "a")), SAMPLES_MAX).is_empty());
}

#[test]
fn group_lag_is_summed_and_follows_the_groups() {
    let sampler = Sampler::new();
    let lag = |g: &str, p: u32, n: u64| ("s".to_owned(), "t".to_owned(), g.to_owned(), p, n);
    sampler.record(0, &[], &[lag("g", 0, 3), lag("g", 1, 4), lag("h", 0, 1)]);
    sampler.record(5_000, &[], &[lag("g", 0, 1), lag("g", 1, 1)]);
    let g = sampler.lag_history("s", "t", "g");
    assert_eq!(
        g,
        vec![
            LagPoint { at_ms: 0, lag: 7 },
            LagPoint {
                at_ms: 5_000,
                lag: 2
            }
        ]
    );
    // A group that is gone loses its series.
    assert!(sampler.lag_history("s", "t", "h").is_empty());
    let many: Vec<_> = (0..GROUP_SERIES_MAX + 10)
        .map(|i| lag(&format!("g{i}"), 0, 1))
        .collect();
    sampler.record(10_000, &[], &many);
    assert_eq!(sampler.inner.lock().groups.len(), GROUP_SERIES_MAX);
}
