//! Many tasks sharing one direct-mode producer, each awaiting `send` in a loop: the
//! throughput of concurrent single-record sends, for a given linger. Prints one line.
//!
//! `cargo run --release -p rill --example concurrent_senders -- [LINGER_MS] [TASKS]
//! [SENDS_PER_TASK] [URL]`, defaults 0 ms, 64 tasks, 500 sends of 1 KiB each, embedded in
//! a temporary directory under `./concurrent-senders-data` (removed at the end).

// An example: printing is what it is for.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rill::{Client, Message, TopicOptions};

const VALUE_BYTES: usize = 1024;
const PARTITIONS: u32 = 4;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut next = |default: u64| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(args.next().map_or(Ok(default), |a| a.parse())?)
    };
    let linger = Duration::from_millis(next(0)?);
    let tasks = next(64)? as usize;
    let sends = next(500)? as usize;
    let url = std::env::args().nth(4);
    let dir = "./concurrent-senders-data";
    let rill = match &url {
        Some(url) => Client::connect(url).await?,
        None => Client::open(dir).await?,
    };
    let name = format!("senders-{}", std::process::id());
    let topic = rill.stream("bench").topic(name);
    topic
        .create_with(&TopicOptions::partitions(PARTITIONS), false)
        .await?;
    let producer = Arc::new(topic.producer().linger(linger).build().await?);
    // Clones share the value's bytes.
    let template = Message::new(vec![b'x'; VALUE_BYTES]);
    let run = |count: usize| {
        let (producer, template) = (Arc::clone(&producer), template.clone());
        async move {
            let workers: Vec<_> = (0..tasks)
                .map(|_| {
                    let (producer, template) = (Arc::clone(&producer), template.clone());
                    tokio::spawn(async move {
                        for _ in 0..count {
                            producer.send(template.clone()).await?;
                        }
                        Ok::<_, rill::ClientError>(())
                    })
                })
                .collect();
            for w in workers {
                w.await??;
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        }
    };
    // Warm up: a tenth of the run, not measured.
    run((sends / 10).max(1)).await?;
    let started = Instant::now();
    run(sends).await?;
    let seconds = started.elapsed().as_secs_f64();
    let records = (tasks * sends) as f64;
    let stored: u64 = topic
        .describe()
        .await?
        .partitions
        .iter()
        .map(|p| p.next_offset)
        .sum();
    println!(
        "linger {linger:?}, {tasks} tasks x {sends} sends of {VALUE_BYTES} B: {:.0} records/s ({:.1} MB/s), {stored} records stored",
        records / seconds,
        records * VALUE_BYTES as f64 / seconds / 1e6,
    );
    topic.delete().await?;
    rill.close().await?;
    if url.is_none() {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}
