//! A named consumer in commit-after-success mode: the broker keeps the position, and
//! an offset is stored only after its record was handled, so a crash re-delivers
//! instead of losing.
//!
//! `cargo run -p rill --example consumer [-- rill://127.0.0.1:7171]`

// An example: printing is what it is for.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use rill::{Client, ClientError, CommitPolicy, StartAt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rill = match std::env::args().nth(1) {
        Some(url) => Client::connect(&url).await?,
        None => Client::open("./consumer-example-data").await?,
    };
    let events = rill.stream("shop").topic("events");
    events.ensure(1).await?;
    for i in 0..5 {
        events.publish().value(format!("event {i}")).send().await?;
    }

    let mut consumer = events
        .consumer("billing", 0)
        .start_at(StartAt::Next)
        .commit_policy(CommitPolicy::Disabled)
        .max_wait(Duration::from_millis(500))
        .build()
        .await?;
    loop {
        match consumer.next_within(Duration::from_secs(2)).await {
            Ok(record) => {
                println!(
                    "handling offset {}: {}",
                    record.offset,
                    String::from_utf8_lossy(&record.value)
                );
                consumer.commit(&record).await?; // after handling succeeded
            }
            Err(ClientError::Timeout(_)) => break, // caught up
            Err(e) => return Err(e.into()),
        }
    }
    println!("stored offset: {:?}", consumer.last_stored_offset(0));
    consumer.shutdown().await?;
    rill.close().await?;
    Ok(())
}
