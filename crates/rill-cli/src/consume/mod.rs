//! `rill consume`.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use clap::{Args, ValueEnum};
use rill_client::{ClientError, CommitPolicy, Offsets, Position, Record, StartAt, Topic, Value};
use serde_json::{Map, json};

use crate::target::{self, Target};

#[derive(Debug, Args)]
pub(crate) struct ConsumeArgs {
    /// STREAM/TOPIC
    topic: String,
    /// Consume as a member of this consumer group.
    #[arg(long, conflicts_with = "name")]
    group: Option<String>,
    /// Consume as this named consumer (the broker stores its offsets).
    #[arg(long)]
    name: Option<String>,
    /// Only this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// first | last | next | offset:N | time:RFC3339 (default: first, or next with --name)
    #[arg(long, value_parser = parse_from)]
    from: Option<StartAt>,
    /// Stop after this many records.
    #[arg(long)]
    count: Option<u64>,
    /// Keep waiting for new records until interrupted.
    #[arg(long)]
    follow: bool,
    /// How to print records.
    #[arg(long, value_enum, default_value_t = Format::Value)]
    format: Format,
    /// With --group: how long this member may be silent before the broker moves its
    /// partitions (e.g. 10s; set by the group's first member).
    #[arg(long, value_parser = crate::admin::parse_duration, requires = "group")]
    session_timeout: Option<Duration>,
    /// With --group: join with this member id (name rules as for groups; default: the
    /// broker picks one). A member that restarts with its id takes its place again.
    #[arg(long, value_name = "ID", value_parser = parse_member, requires = "group")]
    member: Option<String>,
}

fn parse_member(s: &str) -> Result<String, String> {
    rill_broker::validate_name("member", s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Each value as a line.
    Value,
    /// One JSON object per record.
    Json,
}

fn parse_from(s: &str) -> Result<StartAt, String> {
    match s {
        "first" => Ok(StartAt::First),
        "last" => Ok(StartAt::Last),
        "next" => Ok(StartAt::Next),
        _ => {
            if let Some(n) = s.strip_prefix("offset:") {
                return n
                    .parse()
                    .map(StartAt::Offset)
                    .map_err(|_| format!("bad offset {n:?}"));
            }
            if let Some(t) = s.strip_prefix("time:") {
                let at =
                    humantime::parse_rfc3339_weak(t).map_err(|e| format!("bad time {t:?}: {e}"))?;
                let us = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_err(|_| "time before 1970".to_owned())?
                    .as_micros();
                return i64::try_from(us)
                    .map(StartAt::TimestampMicros)
                    .map_err(|_| "time too large".into());
            }
            Err("expected first, last, next, offset:N or time:RFC3339".into())
        }
    }
}

pub(crate) async fn run(args: ConsumeArgs, target: &Target) -> anyhow::Result<()> {
    if args.group.is_some() && args.partition.is_some() {
        anyhow::bail!("--partition does not go with --group: the group assigns partitions");
    }
    let client = target.client().await?;
    let topic = target::topic(&client, &args.topic)?;
    let partitions = topic
        .partitions()
        .await
        .with_context(|| format!("cannot consume {}", args.topic))?;
    let selected: Vec<u32> = match args.partition {
        Some(p) if p >= partitions => anyhow::bail!(
            "{} has {partitions} partitions; there is no partition {p}",
            args.topic
        ),
        Some(p) => vec![p],
        None => (0..partitions).collect(),
    };
    let mut out = Output::new(args.format, args.count);
    let result = match (&args.group, &args.name) {
        (Some(group), _) => grouped(&topic, group, &args, &mut out).await,
        (None, Some(name)) => named(&topic, name, &selected, &args, &mut out).await,
        (None, None) => anonymous(&topic, &selected, &args, &mut out).await,
    };
    out.flush()?;
    target::finish(&client).await?;
    result
}

/// Prints records and counts them against `--count`.
struct Output {
    format: Format,
    remaining: Option<u64>,
    stdout: std::io::BufWriter<std::io::Stdout>,
}

impl Output {
    fn new(format: Format, count: Option<u64>) -> Self {
        Self {
            format,
            remaining: count,
            stdout: std::io::BufWriter::new(std::io::stdout()),
        }
    }

    fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    fn print(&mut self, record: &Record) -> anyhow::Result<()> {
        match self.format {
            Format::Value => {
                self.stdout.write_all(&record.value)?;
                self.stdout.write_all(b"\n")?;
            }
            Format::Json => {
                serde_json::to_writer(&mut self.stdout, &to_json(record))?;
                self.stdout.write_all(b"\n")?;
            }
        }
        if let Some(n) = self.remaining.as_mut() {
            *n = n.saturating_sub(1);
        }
        Ok(())
    }

    /// Reports records that cannot be delivered (`DataLoss`, `Corrupt`) as one line on
    /// stderr, after what was printed before them, and returns the last offset of the
    /// range (to store past it); any other error is returned.
    fn lost(&mut self, e: ClientError) -> anyhow::Result<Option<(u32, u64)>> {
        let Some((partition, _, to)) = e.lost_range() else {
            return Err(e.into());
        };
        self.flush()?;
        eprintln!(
            "rill: {}; reading goes on after them",
            e.to_string().replace('\n', " ")
        );
        Ok(to
            .and_then(|t| t.checked_sub(1))
            .map(|last| (partition, last)))
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        match self.stdout.flush() {
            // A closed pipe (`| head`) is not an error worth reporting.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => Ok(other?),
        }
    }
}

fn to_json(record: &Record) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut object = Map::new();
    object.insert("partition".into(), json!(record.partition));
    object.insert("offset".into(), json!(record.offset));
    object.insert("timestamp_us".into(), json!(record.timestamp_us));
    match &record.key {
        None => {
            object.insert("key".into(), serde_json::Value::Null);
        }
        Some(k) => match std::str::from_utf8(k) {
            Ok(s) => {
                object.insert("key".into(), json!(s));
            }
            Err(_) => {
                object.insert("key_b64".into(), json!(b64.encode(k)));
            }
        },
    }
    let headers: Map<String, serde_json::Value> = record
        .headers
        .iter()
        .map(|(name, value)| {
            let v = match value {
                Value::Str(s) => json!(s),
                Value::Bytes(b) => json!(b64.encode(b)),
                Value::Bool(b) => json!(b),
                Value::I8(n) => json!(n),
                Value::I16(n) => json!(n),
                Value::I32(n) => json!(n),
                Value::I64(n) => json!(n),
                Value::I128(n) => json!(n.to_string()),
                Value::U8(n) => json!(n),
                Value::U16(n) => json!(n),
                Value::U32(n) => json!(n),
                Value::U64(n) => json!(n),
                Value::U128(n) => json!(n.to_string()),
                Value::F32(n) => json!(n),
                Value::F64(n) => json!(n),
            };
            (name.clone(), v)
        })
        .collect();
    object.insert("headers".into(), serde_json::Value::Object(headers));
    match std::str::from_utf8(&record.value) {
        Ok(s) => object.insert("value".into(), json!(s)),
        Err(_) => object.insert("value_b64".into(), json!(b64.encode(&record.value))),
    };
    serde_json::Value::Object(object)
}

/// An anonymous cursor over the selected partitions.
async fn anonymous(
    topic: &Topic,
    partitions: &[u32],
    args: &ConsumeArgs,
    out: &mut Output,
) -> anyhow::Result<()> {
    let from = args.from.unwrap_or(StartAt::First);
    let mut offsets = Offsets::default();
    let all = topic.partitions().await?;
    for p in 0..all {
        let start = if !partitions.contains(&p) {
            // Unselected partitions start at their end, so the cursor skips them.
            topic.end_offset(p).await?
        } else {
            topic.offset_for(p, from).await?
        };
        offsets.0.insert(p, start);
    }
    let mut reader = topic.records("cli").from_offsets(offsets);
    loop {
        while let Some(item) = reader.next().await {
            match item {
                Ok(record) => out.print(&record)?,
                Err(e) => {
                    out.lost(e)?;
                    continue;
                }
            }
            if out.done() {
                return Ok(());
            }
        }
        if !args.follow {
            return Ok(());
        }
        out.flush()?;
        // A caught-up reader looks at the tails again on its next call.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Records printed but not yet stored, per partition, flushed and stored together.
const COMMIT_EVERY_RECORDS: usize = 100;

/// A member of a consumer group. Partitions without a stored group offset start where
/// `--from` says. Offsets are stored only after the records were flushed to stdout
/// (every 100 records, when the stream goes quiet, and at the end), so a crash re-prints
/// rather than loses.
async fn grouped(
    topic: &Topic,
    group: &str,
    args: &ConsumeArgs,
    out: &mut Output,
) -> anyhow::Result<()> {
    // Applies to partitions without a stored group offset (`next` resolves as `first`).
    let start = args.from.unwrap_or(StartAt::First);
    let mut builder = topic
        .consumer_group(group)
        .start_at(start)
        .commit_policy(CommitPolicy::Disabled);
    if let Some(d) = args.session_timeout {
        builder = builder.session_timeout(d);
    }
    if let Some(id) = &args.member {
        builder = builder.member_id(id);
    }
    let mut consumer = builder.build().await?;
    // Without --follow: stop once nothing has arrived for a while (caught up).
    let quiet = Duration::from_millis(1500);
    let mut printed: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut since_store = 0usize;
    let mut result = Ok(());
    loop {
        match consumer.next_within(quiet).await {
            Ok(record) => {
                out.print(&record)?;
                printed.insert(record.partition, record.offset);
                since_store += 1;
                if out.done() {
                    break;
                }
                if since_store >= COMMIT_EVERY_RECORDS {
                    store_printed(&consumer, out, &mut printed).await;
                    since_store = 0;
                }
            }
            Err(ClientError::Timeout(_)) => {
                store_printed(&consumer, out, &mut printed).await;
                since_store = 0;
                if !args.follow {
                    break;
                }
            }
            Err(e) if e.lost_range().is_some() => {
                // Stored like a printed record, so the next run does not meet it again.
                if let Some((partition, last)) = out.lost(e)? {
                    printed.insert(partition, last);
                }
            }
            Err(e) => {
                result = Err(e.into());
                break;
            }
        }
    }
    store_printed(&consumer, out, &mut printed).await;
    consumer.shutdown().await?;
    result
}

/// Flushes stdout, then stores each partition's last printed offset. A partition that
/// moved to another member meanwhile is refused by the broker; that member re-reads
/// from the group's last stored offset (at least once).
async fn store_printed(
    consumer: &rill_client::GroupConsumer,
    out: &mut Output,
    printed: &mut std::collections::BTreeMap<u32, u64>,
) {
    if out.flush().is_err() {
        return;
    }
    for (partition, offset) in std::mem::take(printed) {
        if let Err(e) = consumer
            .store_offset(Position::new(partition, offset))
            .await
        {
            tracing::info!(partition, error = %e, "offset not stored (the partition moved)");
        }
    }
}

/// Named consumers (one per selected partition); offsets are stored after each
/// printed batch.
async fn named(
    topic: &Topic,
    name: &str,
    partitions: &[u32],
    args: &ConsumeArgs,
    out: &mut Output,
) -> anyhow::Result<()> {
    let start = args.from.unwrap_or(StartAt::Next);
    let wait = Duration::from_millis(200);
    let mut consumers = Vec::new();
    for &p in partitions {
        let end = topic.end_offset(p).await?;
        let consumer = topic
            .consumer(name, p)
            .start_at(start)
            .allow_replay()
            // Stored explicitly, after the printed records were flushed.
            .commit_policy(CommitPolicy::Disabled)
            .max_wait(wait)
            .build()
            .await?;
        consumers.push((consumer, end));
    }
    let mut result = Ok(());
    'outer: loop {
        let mut progressed = false;
        for (consumer, end) in &mut consumers {
            // Drain what this partition has, then move on.
            let mut since_store = 0usize;
            loop {
                let caught_up = consumer
                    .last_consumed_offset(consumer.partition())
                    .is_some_and(|o| o + 1 >= *end);
                if !args.follow && (caught_up || *end == 0) {
                    break;
                }
                match consumer.next_within(wait * 2).await {
                    Ok(record) => {
                        progressed = true;
                        out.print(&record)?;
                        since_store += 1;
                        if out.done() {
                            break 'outer;
                        }
                        if since_store >= COMMIT_EVERY_RECORDS {
                            store_named(consumer, out).await?;
                            since_store = 0;
                        }
                    }
                    Err(ClientError::Timeout(_)) => break,
                    // The consumer counts the range as consumed; it is stored with the
                    // printed records.
                    Err(e) if e.lost_range().is_some() => {
                        progressed = true;
                        out.lost(e)?;
                    }
                    Err(e) => {
                        result = Err(e.into());
                        break 'outer;
                    }
                }
            }
            store_named(consumer, out).await?;
        }
        if !args.follow {
            // Stop when every partition reached the end it had when we started, or
            // nothing moved in a full round.
            let all_done = consumers.iter().all(|(c, end)| {
                *end == 0
                    || c.last_consumed_offset(c.partition())
                        .is_some_and(|o| o + 1 >= *end)
            });
            if all_done || !progressed {
                break;
            }
        }
        out.flush()?;
    }
    for (mut consumer, _) in consumers {
        store_named(&mut consumer, out).await?;
        consumer.shutdown().await?;
    }
    result
}

/// Flushes stdout, then stores the consumer's last printed offset, if it moved.
async fn store_named(consumer: &mut rill_client::Consumer, out: &mut Output) -> anyhow::Result<()> {
    out.flush()?;
    let p = consumer.partition();
    if let Some(last) = consumer.last_consumed_offset(p)
        && consumer.last_stored_offset(p) != Some(last)
    {
        consumer.store_offset(Position::new(p, last)).await?;
    }
    Ok(())
}
