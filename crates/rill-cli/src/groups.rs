//! `rill group …` (consumer groups) and `rill consumer …` (named consumers): list them
//! with their lag, describe a group, move stored offsets, delete a group.

use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};

use rill_client::{ResetTo, StoredOffset};

use crate::output::{self, OutputArg};
use crate::target::{self, Target};

/// `rill group`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct GroupArgs {
    #[command(subcommand)]
    command: GroupCommand,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, Subcommand)]
pub(crate) enum GroupCommand {
    /// The topic's consumer groups: members, generation, lag.
    List {
        /// STREAM/TOPIC
        topic: String,
    },
    /// Members, assignment, stored offsets and lag per partition.
    Describe {
        /// STREAM/TOPIC
        topic: String,
        /// Group name.
        group: String,
    },
    /// Move a group's stored offsets (refused while the group has live members: stop
    /// them first).
    Reset {
        /// STREAM/TOPIC
        topic: String,
        /// Group name.
        group: String,
        /// first | last (the end: only records appended later) | offset:N | time:RFC3339
        #[arg(long, value_name = "WHERE", value_parser = parse_reset_to)]
        to: ResetTo,
        /// Only this partition (default: every partition).
        #[arg(long)]
        partition: Option<u32>,
    },
    /// Delete a group's stored offsets (refused while the group has live members).
    Delete {
        /// STREAM/TOPIC
        topic: String,
        /// Group name.
        group: String,
    },
}

/// `rill consumer`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConsumerArgs {
    #[command(subcommand)]
    command: ConsumerCommand,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConsumerCommand {
    /// The topic's named consumers: stored offset and lag per partition.
    List {
        /// STREAM/TOPIC
        topic: String,
    },
    /// Move a named consumer's stored offsets (stop the consumer first: the server
    /// cannot tell whether it runs, and it would store its own offsets over these).
    Reset {
        /// STREAM/TOPIC
        topic: String,
        /// Consumer name.
        consumer: String,
        /// first | last (the end: only records appended later) | offset:N | time:RFC3339
        #[arg(long, value_name = "WHERE", value_parser = parse_reset_to)]
        to: ResetTo,
        /// Only this partition (default: every partition).
        #[arg(long)]
        partition: Option<u32>,
    },
}

/// `first`, `last` (or `end`), `offset:N` or `time:RFC3339`.
pub(crate) fn parse_reset_to(s: &str) -> Result<ResetTo, String> {
    match s {
        "first" => return Ok(ResetTo::First),
        "last" | "end" => return Ok(ResetTo::End),
        _ => {}
    }
    if let Some(n) = s.strip_prefix("offset:") {
        return n
            .parse()
            .map(ResetTo::Offset)
            .map_err(|_| format!("{n:?} is not an offset (offset:N, N from 0)"));
    }
    if let Some(t) = s.strip_prefix("time:") {
        let at = humantime::parse_rfc3339_weak(t).map_err(|e| {
            format!("{t:?} is not an RFC 3339 time ({e}), e.g. 2026-12-06T10:00:00Z")
        })?;
        let us = match at.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).map_err(|_| format!("{t:?} is too late"))?,
            Err(_) => return Err(format!("{t:?} is before 1970")),
        };
        return Ok(ResetTo::TimestampMicros(us));
    }
    Err(format!(
        "{s:?}: expected first, last, offset:N or time:RFC3339"
    ))
}

fn offsets_json(topic: &str, offsets: &[StoredOffset]) -> Value {
    let offsets: Vec<Value> = offsets
        .iter()
        .map(|o| json!({ "partition": o.partition, "next_offset": o.next_offset }))
        .collect();
    json!({ "topic": topic, "offsets": offsets })
}

fn print_offsets(offsets: &[StoredOffset]) {
    println!("partition\tnext_offset");
    for o in offsets {
        println!("{}\t{}", o.partition, o.next_offset);
    }
}

pub(crate) async fn group(args: GroupArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let out = args.output.output;
    match args.command {
        GroupCommand::List { topic } => {
            let groups = target::topic(&client, &topic)?
                .groups()
                .await
                .with_context(|| format!("cannot list the groups of {topic}"))?;
            out.print(
                || {
                    let groups: Vec<Value> = groups
                        .iter()
                        .map(|g| {
                            json!({
                                "group": g.name,
                                "members": g.members,
                                "generation": g.generation,
                                "lag": g.lag,
                            })
                        })
                        .collect();
                    json!({ "topic": topic, "groups": groups })
                },
                || {
                    println!("group\tmembers\tgeneration\tlag");
                    for g in &groups {
                        println!("{}\t{}\t{}\t{}", g.name, g.members, g.generation, g.lag);
                    }
                },
            );
        }
        GroupCommand::Describe { topic, group } => {
            let handle = target::topic(&client, &topic)?;
            let d = handle
                .describe_group(&group)
                .await
                .with_context(|| format!("cannot describe group {group} of {topic}"))?;
            if out.json() {
                println!("{}", output::group_description(&topic, &group, &d));
                return target::finish(&client).await;
            }
            println!("group\t{group}");
            println!("topic\t{topic}");
            println!("generation\t{}", d.generation);
            println!("members\t{}", d.members.len());
            for m in &d.members {
                let owned: Vec<String> = m.owned.iter().map(u32::to_string).collect();
                println!("member\t{}\tpartitions {}", m.id, owned.join(","));
            }
            // What members report about themselves (an events consumer's numbers).
            for m in d.members.iter().filter(|m| !m.metrics.is_empty()) {
                let numbers: Vec<String> =
                    m.metrics.iter().map(|(n, v)| format!("{n}={v}")).collect();
                println!("reported\t{}\t{}", m.id, numbers.join(" "));
            }
            println!("partition\towner\tstored_offset\tlog_end\tlag");
            for p in &d.partitions {
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    p.partition,
                    p.owner.as_deref().unwrap_or("-"),
                    p.stored_offset.map_or("-".into(), |o| o.to_string()),
                    p.log_end,
                    p.lag
                );
            }
        }
        GroupCommand::Reset {
            topic,
            group,
            to,
            partition,
        } => {
            let offsets = target::topic(&client, &topic)?
                .reset_group(&group, to, partition)
                .await
                .with_context(|| format!("cannot reset group {group} of {topic}"))?;
            out.print(
                || offsets_json(&topic, &offsets),
                || print_offsets(&offsets),
            );
        }
        GroupCommand::Delete { topic, group } => {
            let deleted = target::topic(&client, &topic)?
                .delete_group(&group)
                .await
                .with_context(|| format!("cannot delete group {group} of {topic}"))?;
            out.print(
                || json!({ "topic": topic, "group": group, "offsets_deleted": deleted }),
                || println!("deleted\t{deleted} stored offsets"),
            );
        }
    }
    target::finish(&client).await
}

pub(crate) async fn consumer(args: ConsumerArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let out = args.output.output;
    match args.command {
        ConsumerCommand::List { topic } => {
            let consumers = target::topic(&client, &topic)?
                .consumers()
                .await
                .with_context(|| format!("cannot list the named consumers of {topic}"))?;
            out.print(
                || {
                    let consumers: Vec<Value> = consumers
                        .iter()
                        .map(|c| {
                            let partitions: Vec<Value> = c
                                .partitions
                                .iter()
                                .map(|p| {
                                    json!({
                                        "partition": p.partition,
                                        "next_offset": p.next_offset,
                                        "log_end": p.log_end,
                                        "lag": p.lag,
                                    })
                                })
                                .collect();
                            json!({ "consumer": c.name, "partitions": partitions, "lag": c.lag })
                        })
                        .collect();
                    json!({ "topic": topic, "consumers": consumers })
                },
                || {
                    println!("consumer\tpartition\tnext_offset\tlog_end\tlag");
                    for c in &consumers {
                        for p in &c.partitions {
                            println!(
                                "{}\t{}\t{}\t{}\t{}",
                                c.name, p.partition, p.next_offset, p.log_end, p.lag
                            );
                        }
                    }
                },
            );
        }
        ConsumerCommand::Reset {
            topic,
            consumer,
            to,
            partition,
        } => {
            let offsets = target::topic(&client, &topic)?
                .reset_consumer(&consumer, to, partition)
                .await
                .with_context(|| format!("cannot reset consumer {consumer} of {topic}"))?;
            out.print(
                || offsets_json(&topic, &offsets),
                || print_offsets(&offsets),
            );
        }
    }
    target::finish(&client).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_points_parse_and_bad_ones_say_why() {
        assert_eq!(parse_reset_to("first"), Ok(ResetTo::First));
        assert_eq!(parse_reset_to("last"), Ok(ResetTo::End));
        assert_eq!(parse_reset_to("end"), Ok(ResetTo::End));
        assert_eq!(parse_reset_to("offset:42"), Ok(ResetTo::Offset(42)));
        assert_eq!(
            parse_reset_to("time:2026-12-06T10:00:00Z"),
            Ok(ResetTo::TimestampMicros(1_796_551_200_000_000))
        );
        for bad in [
            "",
            "next",
            "offset:-1",
            "offset:x",
            "time:yesterday",
            "time:1969-01-01T00:00:00Z",
        ] {
            assert!(parse_reset_to(bad).is_err(), "{bad}");
        }
    }
}
