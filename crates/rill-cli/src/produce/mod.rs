//! `rill produce`.

use std::io::BufRead;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use rill_client::{Message, Routing};

use crate::target::{self, Target};

/// Lines sent per batch when reading standard input.
const LINES_PER_BATCH: usize = 1000;

#[derive(Debug, Args)]
pub(crate) struct ProduceArgs {
    /// STREAM/TOPIC
    topic: String,
    /// Route by this key.
    #[arg(long, conflicts_with = "partition")]
    key: Option<String>,
    /// Send to this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// A header NAME=VALUE (string); repeatable.
    #[arg(long = "header", value_name = "K=V", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// With standard input: split each line into key and value at the first SEP (a
    /// line that starts with SEP has an empty key, which is refused).
    #[arg(long, value_name = "SEP", conflicts_with_all = ["key", "partition"])]
    key_sep: Option<String>,
    /// The value; without it, standard input is read, one record per line.
    value: Option<String>,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err("expected NAME=VALUE".into()),
    }
}

pub(crate) async fn run(args: ProduceArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let topic = target::topic(&client, &args.topic)?;
    // Fail early with a clear message if the topic is missing.
    topic
        .partitions()
        .await
        .with_context(|| format!("cannot produce to {}", args.topic))?;
    let routing = match (args.partition, &args.key) {
        (Some(p), _) => Routing::Partition(p),
        (None, Some(k)) => Routing::Key(k.clone().into()),
        (None, None) => Routing::Balanced,
    };
    let producer = topic.producer().routing(routing).build().await?;
    let make = |line: &str| -> Message {
        let (key, value) = match (&args.key, &args.key_sep) {
            (Some(k), _) => (Some(k.clone()), line),
            (None, Some(sep)) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.to_owned()), v),
                None => (None, line),
            },
            (None, None) => (None, line),
        };
        let mut m = Message::new(value.to_owned());
        if let Some(k) = key {
            m = m.with_key(k);
        }
        for (n, v) in &args.headers {
            m = m.with_header(n.clone(), v.as_str());
        }
        m
    };
    let started = Instant::now();
    let mut sent = 0u64;
    match &args.value {
        Some(value) => {
            producer.send_batch(vec![make(value)]).await?;
            sent = 1;
        }
        None => {
            let stdin = std::io::stdin();
            let mut lines = stdin.lock().lines();
            // Progress on a terminal only: scripts read the one final line.
            let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let mut shown = Instant::now();
            loop {
                let mut batch = Vec::with_capacity(LINES_PER_BATCH);
                for line in lines.by_ref().take(LINES_PER_BATCH) {
                    batch.push(make(&line.context("reading standard input")?));
                }
                if batch.is_empty() {
                    break;
                }
                sent += batch.len() as u64;
                producer.send_batch(batch).await?;
                if progress && shown.elapsed().as_secs() >= 1 {
                    shown = Instant::now();
                    eprint!("\r{sent} records sent…");
                }
            }
            if progress && sent >= LINES_PER_BATCH as u64 {
                eprint!("\r");
            }
        }
    }
    producer.shutdown().await?;
    target::finish(&client).await?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{sent} records sent in {seconds:.3} s ({:.0} records/s)",
        sent as f64 / seconds.max(1e-9)
    );
    Ok(())
}
