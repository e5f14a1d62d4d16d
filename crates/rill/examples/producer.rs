//! The tuned write path: an idempotent producer sending keyed batches, then a
//! background producer with bounded buffering.
//!
//! `cargo run -p rill --example producer [-- rill://127.0.0.1:7171]`

// An example: printing is what it is for.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use rill::{Background, Backpressure, Client, Message};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rill = match std::env::args().nth(1) {
        Some(url) => Client::connect(&url).await?,
        None => Client::open("./producer-example-data").await?,
    };
    let events = rill.stream("shop").topic("events");
    events.ensure(4).await?;

    // Direct mode: each send returns once the broker acknowledged; retries can never
    // duplicate a batch (idempotence is on by default).
    let producer = events
        .producer()
        .batch_length(1000)
        .retries(5, Duration::from_millis(200))
        .build()
        .await?;
    let started = Instant::now();
    let batch: Vec<Message> = (0..10_000)
        .map(|i| {
            Message::new(format!("event {i}"))
                .with_key(format!("user-{}", i % 100))
                .with_header("kind", "click")
        })
        .collect();
    let positions = producer.send_batch(batch).await?;
    println!(
        "sent {} records in {:?}",
        positions.len(),
        started.elapsed()
    );
    producer.shutdown().await?;

    // Background mode: `send` returns once buffered; shards batch and send, keeping
    // per-partition order; a full buffer waits up to 1 s.
    let background = events
        .producer()
        .linger(Duration::from_millis(5))
        .background(Background {
            backpressure: Backpressure::BlockFor(Duration::from_secs(1)),
            ..Background::default()
        })
        .build()
        .await?;
    for i in 0..10_000 {
        background
            .send_keyed(
                Message::new(format!("late event {i}")),
                format!("user-{}", i % 100),
            )
            .await?;
    }
    background.shutdown().await?; // flushes everything buffered
    println!("background producer flushed");
    rill.close().await?;
    Ok(())
}
