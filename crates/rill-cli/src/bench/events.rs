//! `rill bench events`: publishes typed events over many keys, consumes them with the
//! events runtime and a handler that awaits a fixed time per call, and compares with a
//! strictly sequential consumer (one record at a time, the same cost per record) and a
//! plain read of the same records, in the same run.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use rill_client::{Client, CommitPolicy, Position, StartAt, TopicOptions};
use rill_events::{
    Assignment, ConsumerConfig, Context, Event, EventHandler, EventKey, HandleError, Handlers,
    Publisher,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The topic of the bench's events (in a stream of its own per run).
const TOPIC: &str = "events";
/// The longest the sequential consumer runs; its rate is measured on what it read.
const SEQUENTIAL_TIME_MAX: Duration = Duration::from_secs(10);
/// Events per publish request.
const PUBLISH_BATCH: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EventKey)]
#[event_key(topic = "events")]
struct BenchKey(u32);

/// About 100 bytes of JSON body.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(name = "bench-event")]
struct BenchEvent {
    #[event(key)]
    key: BenchKey,
    seq: u64,
    pad: String,
}

struct Work {
    cost: Duration,
}

impl EventHandler<BenchEvent> for Work {
    const MAX_BATCH: usize = 1000;

    async fn handle(&self, _: &Context, _: &[BenchEvent]) -> Result<(), HandleError> {
        if !self.cost.is_zero() {
            tokio::time::sleep(self.cost).await;
        }
        Ok(())
    }
}

/// What `rill bench events` was asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct EventsPlan {
    pub(super) events: u64,
    pub(super) keys: u32,
    pub(super) partitions: u32,
    pub(super) handler_us: u64,
    pub(super) keep: bool,
    pub(super) json: bool,
}

pub(super) async fn run(plan: EventsPlan, client: &Client) -> anyhow::Result<()> {
    let stream = format!("bench-events-{:08x}", super::run_id());
    let outcome = measure(plan, client, &stream).await;
    if !plan.keep {
        let _ = client.stream(stream.clone()).delete().await;
    }
    let report = outcome?;
    if plan.json {
        println!("{report}");
    } else {
        println!(
            "events {}: {:.0} events/s with the events runtime, {:.0} events/s one at a time ({:.1}x), raw read {:.0} records/s",
            plan.events,
            report["events_per_s"].as_f64().unwrap_or(0.0),
            report["sequential_events_per_s"].as_f64().unwrap_or(0.0),
            report["speedup"].as_f64().unwrap_or(0.0),
            report["raw_consume_records_per_s"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}

async fn measure(
    plan: EventsPlan,
    client: &Client,
    stream: &str,
) -> anyhow::Result<serde_json::Value> {
    let topic = client.stream(stream.to_owned()).topic(TOPIC);
    topic
        .create_with(
            &TopicOptions {
                durability: Some(rill_client::Durability::Never),
                ..TopicOptions::partitions(plan.partitions)
            },
            false,
        )
        .await
        .context("cannot create the bench topic")?;
    // Publish.
    let publisher = Publisher::new(client, stream);
    let pad = "x".repeat(64);
    let mut batch = Vec::with_capacity(PUBLISH_BATCH);
    for seq in 0..plan.events {
        batch.push(BenchEvent {
            key: BenchKey((seq % u64::from(plan.keys)) as u32),
            seq,
            pad: pad.clone(),
        });
        if batch.len() == PUBLISH_BATCH || seq + 1 == plan.events {
            publisher
                .publish_batch(&batch)
                .await
                .context("publishing")?;
            batch.clear();
        }
    }
    publisher.close().await?;

    // A plain read of every record (warms the page cache for the others too).
    let started = Instant::now();
    let mut read = 0u64;
    for p in 0..plan.partitions {
        let mut at = 0;
        loop {
            let f = topic
                .fetch(Position::new(p, at), 32 << 20, Duration::ZERO)
                .await
                .context("reading")?;
            if f.records.is_empty() {
                break;
            }
            read += f.records.len() as u64;
            at = f.next_offset;
        }
    }
    let raw_per_s = read as f64 / started.elapsed().as_secs_f64();

    // The events runtime.
    let cost = Duration::from_micros(plan.handler_us);
    let started = Instant::now();
    let consumer = Handlers::new()
        .handle::<BenchEvent, _>(Work { cost })
        .start(
            client,
            ConsumerConfig::new(
                stream,
                "bench",
                Assignment::Partitions((0..plan.partitions).collect()),
            )
            .poll_interval(Duration::from_millis(5)),
        )
        .await
        .context("starting the events consumer")?;
    // The runtime's own count of handled events, so that with no cost the handler
    // does nothing at all (its counter would be one more atomic shared by the threads
    // running keys).
    while consumer.metrics().handled < plan.events {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let events_s = started.elapsed().as_secs_f64();
    let metrics = consumer.metrics();
    consumer.shutdown(Duration::from_secs(10)).await;
    let events_per_s = plan.events as f64 / events_s;

    // One record at a time, the same cost per record, for at most SEQUENTIAL_TIME_MAX.
    let mut sequential = 0u64;
    let started = Instant::now();
    'partitions: for p in 0..plan.partitions {
        let mut c = topic
            .consumer("bench-sequential", p)
            .start_at(StartAt::First)
            .commit_policy(CommitPolicy::Disabled)
            .build()
            .await?;
        let share = plan.events / u64::from(plan.partitions);
        let mut here = 0;
        while here < share {
            let record = c.next_within(Duration::from_secs(5)).await?;
            let _: BenchEvent = serde_json::from_slice(&record.value)?;
            if !cost.is_zero() {
                tokio::time::sleep(cost).await;
            }
            sequential += 1;
            here += 1;
            if started.elapsed() > SEQUENTIAL_TIME_MAX {
                break 'partitions;
            }
        }
    }
    let sequential_per_s = sequential as f64 / started.elapsed().as_secs_f64();
    Ok(json!({
        "workload": "events",
        "events": plan.events,
        "keys": plan.keys,
        "partitions": plan.partitions,
        "handler_us": plan.handler_us,
        "seconds": events_s,
        "events_per_s": events_per_s,
        "handler_calls": metrics.calls,
        "sequential_events": sequential,
        "sequential_events_per_s": sequential_per_s,
        "speedup": events_per_s / sequential_per_s,
        "raw_consume_records": read,
        "raw_consume_records_per_s": raw_per_s,
        "transport": if client.is_embedded() { "embedded" } else { "tcp" },
    }))
}
