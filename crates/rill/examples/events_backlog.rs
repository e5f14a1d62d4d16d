//! Memory under a retry backlog (docs/EVENTS.md §11): every call fails, so every key
//! goes to retry and stays there (its next attempt is a minute away), while a publisher
//! keeps writing new keys. Once `max_pending_retry` records are pending, the consumer
//! stops polling its main partition: the lag grows on disk, the consumer's memory does
//! not. It prints, every second, what is pending and the process's resident memory.
//!
//! `cargo run --release -p rill --example events_backlog -- [MAX_PENDING] [SECONDS]`
//! (defaults 10000 and 20; embedded, in a temporary directory).

// An example: printing is what it is for.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rill::Client;
use rill::events::{
    Assignment, ConsumerConfig, Context, Event, EventHandler, EventKey, HandleError, Handlers,
    Publisher,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EventKey)]
#[event_key(topic = "backlog")]
struct Account(u64);

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(name = "charge")]
struct Charge {
    #[event(key)]
    account: Account,
    cents: u64,
    note: String,
}

/// Fails every call, as a handler whose database is down would.
struct Down;

impl EventHandler<Charge> for Down {
    const MAX_BATCH: usize = 100;
    async fn handle(&self, _ctx: &Context, _run: &[Charge]) -> Result<(), HandleError> {
        Err(HandleError::retryable("the database is down"))
    }
}

/// The resident memory of this process, in MiB (Linux), if it can be read.
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let max_pending: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let seconds: u64 = args.next().map_or(Ok(20), |a| a.parse())?;
    let dir = std::env::temp_dir().join(format!("rill-events-backlog-{}", std::process::id()));
    let client = Client::open(&dir).await?;
    client
        .stream("bank")
        .topic("backlog")
        .create_with(&rill::TopicOptions::partitions(1), true)
        .await?;

    // The publisher: new accounts, as fast as it goes, up to 2,000,000 events.
    let published = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = {
        let (client, published, stop) = (client.clone(), published.clone(), stop.clone());
        tokio::spawn(async move {
            let publisher = Publisher::new(&client, "bank");
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) && next < 2_000_000 {
                let batch: Vec<Charge> = (next..next + 1000)
                    .map(|i| Charge {
                        account: Account(i),
                        cents: i % 10_000,
                        note: "x".repeat(64),
                    })
                    .collect();
                publisher.publish_batch(&batch).await?;
                next += 1000;
                published.store(next, Ordering::Relaxed);
            }
            publisher.close().await?;
            Ok::<_, rill::events::PublishError>(())
        })
    };

    let consumer = Handlers::new()
        .handle::<Charge, _>(Down)
        .start(
            &client,
            ConsumerConfig::new("bank", "billing", Assignment::Partitions(vec![0]))
                .retry_delays([Duration::from_secs(60)])
                .max_pending_retry(max_pending),
        )
        .await?;
    println!("max_pending_retry {max_pending}");
    println!("s\tpublished\tlag\tpending\tquarantined\trss_mib");
    let started = Instant::now();
    for s in 1..=seconds {
        tokio::time::sleep_until((started + Duration::from_secs(s)).into()).await;
        let m = consumer.metrics();
        let g = m.partitions.get(&0).copied().unwrap_or_default();
        println!(
            "{s}\t{}\t{}\t{}\t{}\t{}",
            published.load(Ordering::Relaxed),
            g.lag,
            g.pending_retry,
            g.quarantined_keys,
            rss_mib().map_or("?".into(), |r| format!("{r:.0}")),
        );
    }
    stop.store(true, Ordering::Relaxed);
    publishing.await??;
    consumer.shutdown(Duration::from_secs(10)).await;
    drop(client);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
