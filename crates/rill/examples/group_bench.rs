//! Consumer-group figures: rebalance latency (a member leaves → its partitions served
//! by the others) with 3 members and 12 partitions, and group consume throughput with 2
//! members vs 1 on a 4-partition topic.
//!
//! `cargo run --release -p rill --example group_bench [-- rill://127.0.0.1:7171]`
//! (embedded in a temporary directory without an argument).

// An example: printing is what it is for.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use rill::{Client, CommitPolicy, GroupConsumer, Message, Routing, TopicOptions};

const RECORDS: usize = 200_000;
const VALUE_BYTES: usize = 1024;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("rill-group-bench-{}", std::process::id()));
    let rill = match std::env::args().nth(1) {
        Some(url) => Client::connect(&url).await?,
        None => Client::open(&dir).await?,
    };
    let suffix = std::process::id();

    // Rebalance latency.
    let topic = rill.stream("bench").topic(format!("rebalance-{suffix}"));
    topic
        .create_with(&TopicOptions::partitions(12), false)
        .await?;
    let mut latencies = Vec::new();
    for round in 0..5 {
        let group = format!("r{round}");
        let mut members = Vec::new();
        for _ in 0..3 {
            members.push(
                topic
                    .consumer_group(&group)
                    .session_timeout(Duration::from_secs(10))
                    .build()
                    .await?,
            );
        }
        wait(|| {
            members
                .iter()
                .map(GroupConsumer::assignment)
                .map(|a| a.len())
                .sum::<usize>()
                == 12
                && members.iter().all(|m| m.assignment().len() == 4)
        })
        .await;
        let mut leaving = members.remove(0);
        let started = Instant::now();
        leaving.shutdown().await?;
        wait(|| members.iter().map(|m| m.assignment().len()).sum::<usize>() == 12).await;
        latencies.push(started.elapsed());
        for mut m in members {
            m.shutdown().await?;
        }
    }
    latencies.sort();
    println!(
        "rebalance after a leave, 3 members, 12 partitions: median {:?} (min {:?}, max {:?}, 5 rounds)",
        latencies[2], latencies[0], latencies[4]
    );

    // Throughput, 1 member vs 2.
    let topic = rill.stream("bench").topic(format!("throughput-{suffix}"));
    topic
        .create_with(&TopicOptions::partitions(4), false)
        .await?;
    let value = bytes_of(VALUE_BYTES);
    for p in 0..4u32 {
        let producer = topic
            .producer()
            .routing(Routing::Partition(p))
            .build()
            .await?;
        for _ in 0..(RECORDS / 4 / 1000) {
            let batch: Vec<Message> = (0..1000).map(|_| Message::new(value.clone())).collect();
            producer.send_batch(batch).await?;
        }
        producer.shutdown().await?;
    }
    let mut rates = Vec::new();
    for members in [1usize, 2] {
        let group = format!("t{members}");
        let mut consumers = Vec::new();
        for _ in 0..members {
            consumers.push(
                topic
                    .consumer_group(&group)
                    .commit_policy(CommitPolicy::Polling)
                    .build()
                    .await?,
            );
        }
        wait(|| {
            consumers
                .iter()
                .all(|c| c.assignment().len() == 4 / members)
        })
        .await;
        let started = Instant::now();
        let tasks: Vec<_> = consumers
            .into_iter()
            .map(|mut c| {
                tokio::spawn(async move {
                    let mut n = 0usize;
                    while let Ok(_record) = c.next_within(Duration::from_secs(2)).await {
                        n += 1;
                    }
                    let _ = c.shutdown().await;
                    n
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await?;
        }
        // The last 2 s were the idle timeout that ended the run.
        let seconds = (started.elapsed() - Duration::from_secs(2)).as_secs_f64();
        let rate = total as f64 / seconds;
        println!(
            "group consume, {members} member(s), 4 partitions: {total} records, {rate:.0} records/s ({:.0} MB/s)",
            rate * VALUE_BYTES as f64 / 1e6
        );
        rates.push(rate);
    }
    println!("2 members / 1 member: {:.2}x", rates[1] / rates[0]);
    rill.close().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

async fn wait(mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "timed out");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn bytes_of(n: usize) -> Vec<u8> {
    vec![b'x'; n]
}
