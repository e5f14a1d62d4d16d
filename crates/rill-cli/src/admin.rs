//! `rill stream …`, `rill topic …` and `rill cluster …`, each with `--output text|json`
//! ([`crate::output`]); groups and named consumers are in [`crate::groups`].

use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use rill_client::{Durability, PurgeTo, TopicChanges, TopicOptions};

use crate::output::{self, OutputArg};
use crate::target::{self, Target};

/// `rill stream`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct StreamArgs {
    #[command(subcommand)]
    command: StreamCommand,
    #[command(flatten)]
    output: OutputArg,
}

/// `rill topic`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct TopicArgs {
    #[command(subcommand)]
    command: TopicCommand,
    #[command(flatten)]
    output: OutputArg,
}

/// `rill cluster`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, Subcommand)]
pub(crate) enum StreamCommand {
    /// Create a stream.
    Create {
        /// Stream name.
        name: String,
    },
    /// List streams.
    List,
    /// Delete a stream and all its topics.
    Delete {
        /// Stream name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// Create a topic (succeeds if it exists with the same options).
    Create {
        /// STREAM/TOPIC
        topic: String,
        /// Partitions (at least 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        partitions: u32,
        /// Delete data older than this (e.g. 7d, 12h).
        #[arg(long, value_parser = parse_duration)]
        retention: Option<Duration>,
        /// Per partition: delete the oldest data beyond this many bytes.
        #[arg(long)]
        retention_bytes: Option<u64>,
        /// always | interval:MS | never
        #[arg(long)]
        durability: Option<Durability>,
        /// Segment size in bytes.
        #[arg(long)]
        segment_bytes: Option<u64>,
        /// Largest record in bytes.
        #[arg(long)]
        max_record_bytes: Option<u32>,
        /// In a cluster: replicas of each partition (default min(3, nodes)).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        replicas: Option<u32>,
        /// An elastic topic: its partitions are key ranges that split and merge online
        /// (`topic split`, `topic merge`) without breaking any key's order.
        #[arg(long)]
        elastic: bool,
        /// With --elastic: the ranges it starts with, cutting the key hashes evenly
        /// (default 1; instead of --partitions).
        #[arg(long, requires = "elastic", conflicts_with = "partitions",
              value_parser = clap::value_parser!(u32).range(1..))]
        ranges: Option<u32>,
        /// With --elastic: split an open range whose writes stay above this many bytes
        /// per second for a whole window, and merge cold neighbours (docs/RANGES.md §7).
        #[arg(long, requires = "elastic", value_name = "BYTES_PER_S",
              value_parser = clap::value_parser!(u64).range(1..))]
        auto_split: Option<u64>,
        /// With --auto-split: the window a range's rate is judged over (default 60s).
        #[arg(long, requires = "auto_split", value_parser = parse_duration, value_name = "DURATION")]
        auto_split_window: Option<Duration>,
        /// With --auto-split: how old a range must be before it is split or merged
        /// (default 5m, at least two windows).
        #[arg(long, requires = "auto_split", value_parser = parse_duration, value_name = "DURATION")]
        auto_split_cooldown: Option<Duration>,
    },
    /// Split an open range of an elastic topic in two: it is sealed where it ends and
    /// two new ranges take its keys from then on.
    Split {
        /// STREAM/TOPIC
        topic: String,
        /// The open range to split (default: the busiest, by bytes).
        #[arg(long, value_name = "ID")]
        range: Option<u32>,
        /// The first key hash of the upper half, decimal or 0x-hex (default: the middle).
        #[arg(long, value_name = "HASH", value_parser = parse_hash)]
        at: Option<u64>,
    },
    /// Merge two adjacent open ranges of an elastic topic into one.
    Merge {
        /// STREAM/TOPIC
        topic: String,
        /// The two ranges, A,B.
        #[arg(long, value_name = "A,B", value_parser = parse_range_pair)]
        ranges: (u32, u32),
    },
    /// List topics, of one stream or all.
    List {
        /// Stream name.
        stream: Option<String>,
    },
    /// Partitions with first/next offsets, bytes, and options.
    Describe {
        /// STREAM/TOPIC
        topic: String,
    },
    /// Change a topic's retention, durability or partition count while it serves.
    Alter {
        /// STREAM/TOPIC
        topic: String,
        /// Delete data older than this (e.g. 7d, 12h), or none.
        #[arg(long, value_parser = parse_limit_duration, value_name = "DURATION|none")]
        retention: Option<Limit<Duration>>,
        /// Per partition: delete the oldest data beyond this many bytes, or none.
        #[arg(long, value_parser = parse_limit_bytes, value_name = "BYTES|none")]
        retention_bytes: Option<Limit<u64>>,
        /// always | interval:MS | never (a move to always first syncs what was written).
        #[arg(long)]
        durability: Option<Durability>,
        /// More partitions (never fewer). Keyed records route by the count, so most
        /// keys go to another partition from then on.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        partitions: Option<u32>,
        /// An elastic topic's automatic policy: split ranges whose writes stay above this
        /// many bytes per second for a window, or none (off).
        #[arg(long, value_parser = parse_limit_bytes, value_name = "BYTES_PER_S|none")]
        auto_split: Option<Limit<u64>>,
    },
    /// Delete the records before a point, exactly: readers start after it (default:
    /// every record, each partition then starts at its end).
    Purge {
        /// STREAM/TOPIC
        topic: String,
        /// offset:N (the record at N is the first left) | time:RFC3339 (records older
        /// than that go) | end (every record)
        #[arg(long, value_name = "WHERE", default_value = "end", value_parser = parse_purge_to)]
        before: PurgeTo,
        /// Only this partition (default: every partition).
        #[arg(long)]
        partition: Option<u32>,
    },
    /// Delete a topic and its data.
    Delete {
        /// STREAM/TOPIC
        topic: String,
    },
    /// Reopen partitions with recovery (after a failed write, once the disk is fixed);
    /// with --accept-data-loss also accept their damaged ranges as lost, so they take
    /// appends again. Prints each partition's state afterwards.
    Repair {
        /// STREAM/TOPIC
        topic: String,
        /// Only this partition (default: every partition).
        #[arg(long)]
        partition: Option<u32>,
        /// Accept the damaged ranges as lost: appends resume after them. Reading them
        /// still reports the loss.
        #[arg(long)]
        accept_data_loss: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Nodes (up or not) and, per partition, its leader, replicas and followers' lag.
    Status {
        /// One JSON object on stdout (the same as `--output json`).
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn cluster(args: ClusterArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    match args.command {
        ClusterCommand::Status { json } => {
            let json = json || args.output.output.json();
            let status = client
                .cluster_status()
                .await
                .context("cannot read the cluster's status")?;
            if json {
                let nodes: Vec<serde_json::Value> = status
                    .nodes
                    .iter()
                    .map(|n| {
                        serde_json::json!({
                            "id": n.id, "peer": n.peer, "client": n.client, "up": n.up,
                            "role": if n.controller { "controller" } else { "node" },
                        })
                    })
                    .collect();
                let partitions: Vec<serde_json::Value> = status
                    .partitions
                    .iter()
                    .map(|p| {
                        let lag: serde_json::Map<String, serde_json::Value> = p
                            .lag
                            .iter()
                            .map(|(n, l)| (n.to_string(), serde_json::json!(l)))
                            .collect();
                        serde_json::json!({
                            "stream": p.stream, "topic": p.topic, "partition": p.partition,
                            "leader": p.leader, "replicas": p.replicas, "lag": lag,
                            "high_watermark": p.high_watermark,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({ "nodes": nodes, "partitions": partitions })
                );
            } else {
                println!("node\tpeer\tclient\tup\trole");
                for n in &status.nodes {
                    println!(
                        "{}\t{}\t{}\t{}\t{}",
                        n.id,
                        n.peer,
                        n.client.as_deref().unwrap_or("-"),
                        if n.up { "up" } else { "down" },
                        if n.controller { "controller" } else { "node" }
                    );
                }
                println!("partition\tleader\treplicas\thigh_watermark\tlag");
                for p in &status.partitions {
                    let lag: Vec<String> = p.lag.iter().map(|(n, l)| format!("{n}:{l}")).collect();
                    println!(
                        "{}/{}/{}\t{}\t{}\t{}\t{}",
                        p.stream,
                        p.topic,
                        p.partition,
                        p.leader.map_or("-".to_owned(), |l| l.to_string()),
                        p.replicas
                            .iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(","),
                        p.high_watermark,
                        if lag.is_empty() {
                            "-".to_owned()
                        } else {
                            lag.join(",")
                        }
                    );
                }
            }
        }
    }
    target::finish(&client).await
}

/// A limit to set, or `none` to remove it (`topic alter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit<T>(Option<T>);

fn parse_limit_duration(s: &str) -> Result<Limit<Duration>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    parse_duration(s).map(|d| Limit(Some(d)))
}

fn parse_limit_bytes(s: &str) -> Result<Limit<u64>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    match s.parse::<u64>() {
        Ok(0) => Err("must be positive (or none)".into()),
        Ok(n) => Ok(Limit(Some(n))),
        Err(_) => Err(format!("{s:?} is not a number of bytes (or none)")),
    }
}

/// `offset:N`, `time:RFC3339` or `end`.
fn parse_purge_to(s: &str) -> Result<PurgeTo, String> {
    if s == "end" {
        return Ok(PurgeTo::End);
    }
    if let Some(n) = s.strip_prefix("offset:") {
        return n
            .parse()
            .map(PurgeTo::Offset)
            .map_err(|_| format!("{n:?} is not an offset (offset:N, N from 0)"));
    }
    if s.starts_with("time:") {
        return match crate::groups::parse_reset_to(s)? {
            rill_client::ResetTo::TimestampMicros(us) => Ok(PurgeTo::TimestampMicros(us)),
            _ => unreachable!("a time: point parses to a time"),
        };
    }
    Err(format!("{s:?}: expected offset:N, time:RFC3339 or end"))
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (use e.g. 7d, 12h, 30m)"))?;
    if d.is_zero() {
        return Err("must be positive".into());
    }
    Ok(d)
}

pub(crate) async fn stream(args: StreamArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let out = args.output.output;
    match args.command {
        StreamCommand::Create { name } => {
            let created = client.create_stream(&name, true).await?;
            out.print(
                || serde_json::json!({ "stream": name, "created": created }),
                || println!("{}", if created { "created" } else { "exists" }),
            );
        }
        StreamCommand::List => {
            let streams = client.list_streams().await?;
            out.print(
                || serde_json::json!({ "streams": streams.iter().map(output::stream).collect::<Vec<_>>() }),
                || {
                    for s in &streams {
                        println!("{}\t{} topics", s.name, s.topics);
                    }
                },
            );
        }
        StreamCommand::Delete { name } => {
            client.delete_stream(&name).await?;
            out.print(
                || serde_json::json!({ "stream": name, "deleted": true }),
                || println!("deleted"),
            );
        }
    }
    target::finish(&client).await
}

pub(crate) async fn topic(args: TopicArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let out = args.output.output;
    match args.command {
        TopicCommand::Create {
            topic,
            partitions,
            retention,
            retention_bytes,
            durability,
            segment_bytes,
            max_record_bytes,
            replicas,
            elastic,
            ranges,
            auto_split,
            auto_split_window,
            auto_split_cooldown,
        } => {
            let handle = target::topic(&client, &topic)?;
            let auto_split = auto_split.map(|rate| {
                let mut a = rill_client::AutoSplit::new(rate);
                if let Some(w) = auto_split_window {
                    a = a.window(w);
                }
                if let Some(c) = auto_split_cooldown {
                    a = a.cooldown(c);
                }
                a
            });
            let options = TopicOptions {
                partitions: Some(ranges.unwrap_or(partitions)),
                retention,
                retention_bytes,
                segment_bytes,
                durability,
                max_record_bytes,
                replicas,
                elastic,
                auto_split,
            };
            let o = handle
                .create_with(&options, true)
                .await
                .with_context(|| format!("cannot create {topic}"))?;
            out.print(
                || serde_json::json!({ "topic": topic, "options": output::topic_config(&o) }),
                || {
                    if o.elastic {
                        println!("{topic}\t{} ranges\telastic", o.partitions);
                    } else {
                        println!("{topic}\t{} partitions", o.partitions);
                    }
                },
            );
        }
        TopicCommand::Split { topic, range, at } => {
            let change = target::topic(&client, &topic)?
                .split_range(range, at)
                .await
                .with_context(|| format!("cannot split a range of {topic}"))?;
            print_range_change(out, &topic, &change);
        }
        TopicCommand::Merge {
            topic,
            ranges: (a, b),
        } => {
            let change = target::topic(&client, &topic)?
                .merge_ranges(a, b)
                .await
                .with_context(|| format!("cannot merge ranges {a} and {b} of {topic}"))?;
            print_range_change(out, &topic, &change);
        }
        TopicCommand::List { stream } => {
            let topics = client.list_topics(stream.as_deref()).await?;
            out.print(
                || {
                    let topics: Vec<serde_json::Value> = topics
                        .iter()
                        .map(|t| {
                            serde_json::json!({
                                "stream": t.stream,
                                "topic": t.name,
                                "options": output::topic_config(&t.config),
                            })
                        })
                        .collect();
                    serde_json::json!({ "topics": topics })
                },
                || {
                    for t in &topics {
                        println!(
                            "{}/{}\t{} partitions",
                            t.stream, t.name, t.config.partitions
                        );
                    }
                },
            );
        }
        TopicCommand::Describe { topic } => {
            let handle = target::topic(&client, &topic)?;
            let d = handle.describe().await?;
            if out.json() {
                println!("{}", output::topic_description(&d));
                return target::finish(&client).await;
            }
            let o = &d.config;
            println!("topic\t{}/{}", d.stream, d.name);
            println!("partitions\t{}", o.partitions);
            println!("durability\t{}", o.durability);
            println!(
                "retention\t{}",
                o.retention
                    .map_or("none".into(), |d| humantime::format_duration(d).to_string())
            );
            println!(
                "retention_bytes\t{}",
                o.retention_bytes.map_or("none".into(), |b| b.to_string())
            );
            println!("segment_bytes\t{}", o.segment_bytes);
            println!("max_record_bytes\t{}", o.max_record_bytes);
            if d.elastic {
                println!("elastic\ttrue");
                println!("range_epoch\t{}", d.range_epoch);
                match &o.auto_split {
                    Some(a) => {
                        println!("auto_split\t{}", a.bytes_per_s);
                        for (name, d) in [("window", a.window), ("cooldown", a.cooldown)] {
                            let d =
                                d.map_or("-".into(), |d| humantime::format_duration(d).to_string());
                            println!("auto_split_{name}\t{d}");
                        }
                    }
                    None => println!("auto_split\tnone"),
                }
            }
            print_partitions(&d.partitions);
            print_ranges(&d.ranges);
        }
        TopicCommand::Alter {
            topic,
            retention,
            retention_bytes,
            durability,
            partitions,
            auto_split,
        } => {
            let mut changes = TopicChanges::new();
            if let Some(Limit(rate)) = auto_split {
                changes = changes.auto_split(rate);
            }
            if let Some(Limit(age)) = retention {
                changes = changes.retention(age);
            }
            if let Some(Limit(bytes)) = retention_bytes {
                changes = changes.retention_bytes(bytes);
            }
            if let Some(d) = durability {
                changes = changes.durability(d);
            }
            if changes == TopicChanges::new() && partitions.is_none() {
                anyhow::bail!(
                    "nothing to change: pass --retention, --retention-bytes, --durability, --partitions and/or --auto-split"
                );
            }
            let handle = target::topic(&client, &topic)?;
            if let Some(n) = partitions {
                let before = handle
                    .partitions()
                    .await
                    .with_context(|| format!("cannot alter {topic}"))?;
                if n > before {
                    eprintln!(
                        "rill: warning: {topic} grows from {before} to {n} partitions: keyed records route by the count, so most keys go to another partition from now on (their order holds per partition only)"
                    );
                }
                changes = changes.partitions(n);
            }
            let o = handle
                .alter(changes)
                .await
                .with_context(|| format!("cannot alter {topic}"))?;
            out.print(
                || serde_json::json!({ "topic": topic, "options": output::topic_config(&o) }),
                || println!("{topic}\t{} partitions", o.partitions),
            );
        }
        TopicCommand::Purge {
            topic,
            before,
            partition,
        } => {
            let starts = target::topic(&client, &topic)?
                .purge(before, partition)
                .await
                .with_context(|| format!("cannot purge {topic}"))?;
            out.print(
                || {
                    let starts: Vec<serde_json::Value> = starts
                        .iter()
                        .map(|s| serde_json::json!({ "partition": s.partition, "first_offset": s.log_start }))
                        .collect();
                    serde_json::json!({ "topic": topic, "partitions": starts })
                },
                || {
                    println!("partition\tfirst_offset");
                    for s in &starts {
                        println!("{}\t{}", s.partition, s.log_start);
                    }
                },
            );
        }
        TopicCommand::Delete { topic } => {
            target::topic(&client, &topic)?.delete().await?;
            out.print(
                || serde_json::json!({ "topic": topic, "deleted": true }),
                || println!("deleted"),
            );
        }
        TopicCommand::Repair {
            topic,
            partition,
            accept_data_loss,
        } => {
            let handle = target::topic(&client, &topic)?;
            let partitions = match partition {
                Some(p) => vec![p],
                None => (0..handle.partitions().await?).collect(),
            };
            let mut states = Vec::with_capacity(partitions.len());
            for p in partitions {
                states.push(
                    handle
                        .repair(p, accept_data_loss)
                        .await
                        .with_context(|| format!("cannot repair partition {p} of {topic}"))?,
                );
            }
            if out.json() {
                let partitions: Vec<serde_json::Value> =
                    states.iter().map(output::partition).collect();
                println!(
                    "{}",
                    serde_json::json!({ "topic": topic, "partitions": partitions })
                );
            } else {
                print_partitions(&states);
            }
        }
    }
    target::finish(&client).await
}

/// The partition table of `topic describe` and `topic repair`: one row per partition
/// (these columns are fixed: scripts parse them), then per partition a `failure` line
/// (why it refuses appends; empty when it takes them), then a `damaged` line per damaged
/// range. See docs/CLI.md.
fn print_partitions(partitions: &[rill_client::PartitionInfo]) {
    println!("partition\tfirst_offset\tnext_offset\tbytes\tsegments");
    for p in partitions {
        println!(
            "{}\t{}\t{}\t{}\t{}",
            p.partition, p.first_offset, p.next_offset, p.size_bytes, p.segments
        );
    }
    for p in partitions {
        println!(
            "failure\t{}\t{}",
            p.partition,
            one_field(p.failure.as_deref().unwrap_or_default())
        );
    }
    for p in partitions {
        for d in &p.damaged {
            println!(
                "damaged\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                p.partition,
                d.from,
                d.to.map_or("-".into(), |t| t.to_string()),
                if d.accepted { "accepted" } else { "unaccepted" },
                one_field(&d.segment),
                d.position,
                one_field(&d.reason)
            );
        }
    }
}

/// An elastic topic's ranges, one `range` line each (docs/CLI.md, `topic describe`).
fn print_ranges(ranges: &[rill_client::RangeInfo]) {
    for r in ranges {
        let parents = if r.parents.is_empty() {
            "-".to_owned()
        } else {
            r.parents
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let state = r
            .sealed_at
            .map_or_else(|| "open".to_owned(), |end| format!("sealed:{end}"));
        let rate = r
            .bytes_per_s
            .map_or_else(|| "-".to_owned(), |b| b.to_string());
        println!(
            "range\t{}\t{:#018x}\t{:#018x}\t{state}\t{parents}\t{rate}",
            r.id, r.lo, r.hi
        );
    }
}

/// What `topic split` and `topic merge` did: a `sealed` line per range sealed (its id
/// and seal offset), an `opened` line per range opened, the epoch (docs/CLI.md).
fn print_range_change(out: output::Output, topic: &str, change: &rill_client::RangeChange) {
    out.print(
        || {
            let sealed: Vec<serde_json::Value> = change
                .sealed
                .iter()
                .map(|(id, at)| serde_json::json!({ "range": id, "sealed_at": at }))
                .collect();
            serde_json::json!({
                "topic": topic,
                "sealed": sealed,
                "opened": change.opened,
                "range_epoch": change.epoch,
            })
        },
        || {
            for (id, at) in &change.sealed {
                println!("sealed\t{id}\t{at}");
            }
            for id in &change.opened {
                println!("opened\t{id}");
            }
            println!("range_epoch\t{}", change.epoch);
        },
    );
}

/// A key hash: decimal, or hexadecimal after `0x`.
fn parse_hash(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    parsed.map_err(|_| format!("{s:?} is not a 64-bit hash (decimal, or hex after 0x)"))
}

/// `A,B`: two range ids.
fn parse_range_pair(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{s:?}: expected two range ids, A,B");
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    let a = a.trim().parse().map_err(|_| bad())?;
    let b = b.trim().parse().map_err(|_| bad())?;
    if a == b {
        return Err(format!("{s:?}: a range does not merge with itself"));
    }
    Ok((a, b))
}

/// Text as one tab-separated field: tabs and line breaks become spaces.
fn one_field(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}
