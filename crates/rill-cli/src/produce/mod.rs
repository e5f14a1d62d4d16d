//! `rill produce`: one record from the command line, or records from standard input
//! sent as they arrive (docs/CLI.md, "Produce").
//!
//! Standard input is read on a thread of its own (`input`) and each record handed to
//! the SDK's background producer, which gathers records into batches per partition and
//! sends a batch when it is full or its linger has passed: a line written to a pipe
//! that stays open goes out within the linger, and a large input goes in full batches.
//! Unkeyed records are spread over the partitions one by one, round-robin (the SDK's
//! balanced routing); keyed ones go to their key's partition, in input order.

mod input;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use rill_client::{Background, Backpressure, ClientError, Producer, Routing, Sharding};

use self::input::{Framing, Maker};
use crate::failure::usage;
use crate::target::{self, Target};

/// Records the producer buffers at most before `send` waits for room.
const BUFFERED_RECORDS_MAX: usize = 16 * 1024;
/// Bytes handed to the producer between two flushes at most: records are counted by
/// the producer's buffer, not their size, so this bounds the bytes it holds.
const UNFLUSHED_BYTES_MAX: usize = 32 << 20;
/// Shards of the background producer: batches in flight at once, across partitions.
const SHARDS: usize = 4;

#[derive(Debug, Args)]
pub(crate) struct ProduceArgs {
    /// STREAM/TOPIC
    topic: String,
    /// Give every record this key (routes them all to its partition).
    #[arg(long, conflicts_with = "partition", value_parser = parse_key)]
    key: Option<String>,
    /// Send to this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// A header NAME=VALUE (string); repeatable.
    #[arg(long = "header", value_name = "K=V", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// With standard input: split each record into key and value at the first SEP (a
    /// record that starts with SEP has an empty key, which is refused).
    #[arg(long, value_name = "SEP", conflicts_with_all = ["key", "partition"])]
    key_sep: Option<String>,
    /// How standard input holds records: value (each record's bytes are its value) or
    /// json (one object per line with key, headers and value, as `consume --format
    /// json` prints them).
    #[arg(long, value_enum, default_value_t = InputFormat::Value)]
    format: InputFormat,
    /// Records end at SEP instead of at a line break, and are taken byte for byte
    /// (escapes: \n \r \t \0 \\ \xHH).
    #[arg(long, value_name = "SEP", value_parser = input::parse_delimiter, conflicts_with = "null")]
    delimiter: Option<input::Delimiter>,
    /// Records end at a NUL byte (as `find -print0` writes names), byte for byte.
    #[arg(long)]
    null: bool,
    /// How long a batch waits for more records before it is sent (0-60000 ms).
    #[arg(long, value_name = "MS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    linger_ms: u64,
    /// The value (with --format json: one JSON record); without it, standard input is
    /// read, one record per line.
    value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum InputFormat {
    /// Each record's bytes are its value.
    Value,
    /// One JSON object per line: key, headers and value.
    Json,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err("expected NAME=VALUE".into()),
    }
}

fn parse_key(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("a key must not be empty (leave --key out for unkeyed records)".into());
    }
    Ok(s.to_owned())
}

impl ProduceArgs {
    /// How records are read and made, checked before anything is opened.
    fn maker(&self) -> anyhow::Result<Maker> {
        let framing = match (self.format, &self.delimiter, self.null) {
            (InputFormat::Json, Some(_), _) | (InputFormat::Json, _, true) => {
                return Err(usage(
                    "--format json reads one JSON object per line: --delimiter and --null do not go with it",
                ));
            }
            (InputFormat::Json, None, false) => Framing::Json,
            (InputFormat::Value, Some(d), _) => Framing::Delimited(d.0.clone()),
            (InputFormat::Value, None, true) => Framing::Delimited(vec![0]),
            (InputFormat::Value, None, false) => Framing::Lines,
        };
        if framing == Framing::Json && (self.key.is_some() || self.key_sep.is_some()) {
            return Err(usage(
                "--key and --key-sep do not go with --format json: each JSON record gives its own key",
            ));
        }
        if let Some(sep) = &self.key_sep
            && sep.is_empty()
        {
            return Err(usage("--key-sep must not be empty"));
        }
        Ok(Maker {
            framing,
            key: self.key.clone().map(Bytes::from),
            key_sep: self.key_sep.clone().map(String::into_bytes),
            headers: self.headers.clone(),
        })
    }
}

pub(crate) async fn run(args: ProduceArgs, target: &Target) -> anyhow::Result<()> {
    let maker = args.maker()?;
    let client = target.client().await?;
    let topic = target::topic(&client, &args.topic)?;
    // Fail early with a clear message if the topic is missing.
    let partitions = topic
        .partitions()
        .await
        .with_context(|| format!("cannot produce to {}", args.topic))?;
    if let Some(p) = args.partition
        && p >= partitions
    {
        anyhow::bail!(
            "{} has {partitions} partitions; there is no partition {p}",
            args.topic
        );
    }
    let routing = args.partition.map_or(Routing::Balanced, Routing::Partition);
    let producer = topic
        .producer()
        .routing(routing)
        .linger(Duration::from_millis(args.linger_ms))
        .background(Background {
            shards: SHARDS,
            // A partition's records go through one shard, in input order.
            sharding: Sharding::Ordered,
            buffer_messages: BUFFERED_RECORDS_MAX,
            backpressure: Backpressure::Block,
        })
        .build()
        .await?;
    let started = Instant::now();
    let (sent, input_error) = match &args.value {
        Some(value) => {
            let message = maker
                .make(value.clone().into_bytes())?
                .context("the value holds no record")?;
            producer.send(message).await?;
            (1, None)
        }
        None => send_input(&producer, maker).await?,
    };
    // Everything handed over is sent (or its failure reported) before the summary.
    producer.shutdown().await?;
    target::finish(&client).await?;
    if let Some(e) = input_error {
        // The input's error first (it names the line), then what became of the rest.
        anyhow::bail!("{e:#} (the {sent} records before it were sent)");
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{sent} records sent in {seconds:.3} s ({:.0} records/s)",
        sent as f64 / seconds.max(1e-9)
    );
    Ok(())
}

/// Sends the records of standard input as they are read. Returns how many were handed
/// to the producer, and the input's error, if a record could not be read or made (the
/// records before it are sent; a failed send is returned as the error).
async fn send_input(
    producer: &Producer,
    maker: Maker,
) -> anyhow::Result<(u64, Option<anyhow::Error>)> {
    let unit = maker.unit();
    let input_bytes = stdin_file_bytes();
    let progress = match input_bytes {
        Some(total) => crate::progress::bytes(total, "records"),
        None => crate::progress::counter("records"),
    };
    let mut chunks = input::spawn(maker);
    let mut sent = 0u64;
    let mut unflushed = 0usize;
    let mut read_bytes = 0u64;
    let mut input_error = None;
    while let Some(chunk) = chunks.recv().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                input_error = Some(e);
                break;
            }
        };
        for (number, message) in chunk.messages {
            let bytes = message.value.len() + message.key.as_ref().map_or(0, Bytes::len);
            producer.send(message).await.map_err(|e| match e {
                // An earlier batch's failure, reported now: not this record's.
                ClientError::Background(_) => anyhow::Error::new(e),
                e => anyhow::Error::new(e).context(format!("cannot send {unit} {number}")),
            })?;
            sent += 1;
            unflushed += bytes;
            if unflushed >= UNFLUSHED_BYTES_MAX {
                producer.flush().await?;
                unflushed = 0;
            }
        }
        read_bytes += chunk.input_bytes;
        match input_bytes {
            Some(_) => {
                progress.set_position(read_bytes);
                progress.set_message(sent.to_string());
            }
            None => progress.set_position(sent),
        }
    }
    progress.finish_and_clear();
    Ok((sent, input_error))
}

/// The size of standard input when it is a regular file (`rill produce t < big.log`),
/// for a progress bar with an end.
fn stdin_file_bytes() -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd as _;
        let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let meta = std::fs::File::from(fd).metadata().ok()?;
        meta.is_file().then_some(meta.len())
    }
    #[cfg(not(unix))]
    {
        None
    }
}
