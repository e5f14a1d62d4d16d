//! `--output text|json` of the admin commands, and the JSON shapes of what they print.
//!
//! Text is for people (tab-separated columns, as docs/CLI.md shows); JSON is for scripts:
//! one object on stdout per command, with the fields named as in the SDK's types,
//! durations in milliseconds (`…_ms`), sizes in bytes (`…_bytes`), and `null` where the
//! text shows `-` or `none`. docs/CLI.md lists every shape.

use clap::ValueEnum;
use serde_json::{Value, json};

use rill_client::{
    DamagedRange, Durability, GroupDescription, PartitionInfo, StreamInfo, TopicConfig,
    TopicDescription,
};

/// How an admin command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum Output {
    /// Lines and tab-separated columns.
    #[default]
    Text,
    /// One JSON object on stdout.
    Json,
}

impl Output {
    /// Whether the command prints JSON.
    pub(crate) fn json(self) -> bool {
        self == Self::Json
    }

    /// Prints `value` as one line of JSON (`--output json`), or runs `text`.
    pub(crate) fn print(self, value: impl FnOnce() -> Value, text: impl FnOnce()) {
        match self {
            Self::Json => println!("{}", value()),
            Self::Text => text(),
        }
    }
}

/// The `--output` flag, shared by every admin command of a family (`global`, so it may
/// come after the subcommand: `rill topic list --output json`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct OutputArg {
    /// text: lines and columns for people; json: one JSON object on stdout for scripts.
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    pub(crate) output: Output,
}

/// A durability as the CLI writes it: `always`, `interval:MS` or `never`.
pub(crate) fn durability(d: &Durability) -> String {
    d.to_string()
}

pub(crate) fn stream(s: &StreamInfo) -> Value {
    json!({ "name": s.name, "topics": s.topics })
}

pub(crate) fn topic_config(o: &TopicConfig) -> Value {
    let mut v = json!({
        "partitions": o.partitions,
        "retention_ms": o.retention.map(|d| d.as_millis() as u64),
        "retention_bytes": o.retention_bytes,
        "durability": durability(&o.durability),
        "segment_bytes": o.segment_bytes,
        "max_record_bytes": o.max_record_bytes,
    });
    if o.elastic {
        v["elastic"] = json!(true);
        v["auto_split"] = match &o.auto_split {
            Some(a) => json!({
                "bytes_per_s": a.bytes_per_s,
                "window_ms": a.window.map(|d| d.as_millis() as u64),
                "cooldown_ms": a.cooldown.map(|d| d.as_millis() as u64),
            }),
            None => Value::Null,
        };
    }
    v
}

pub(crate) fn damaged(d: &DamagedRange) -> Value {
    json!({
        "from": d.from,
        "to": d.to,
        "accepted": d.accepted,
        "segment": d.segment,
        "position": d.position,
        "reason": d.reason,
    })
}

pub(crate) fn partition(p: &PartitionInfo) -> Value {
    json!({
        "partition": p.partition,
        "first_offset": p.first_offset,
        "next_offset": p.next_offset,
        "bytes": p.size_bytes,
        "segments": p.segments,
        "failure": p.failure,
        "damaged": p.damaged.iter().map(damaged).collect::<Vec<_>>(),
    })
}

pub(crate) fn topic_description(d: &TopicDescription) -> Value {
    let mut v = json!({
        "stream": d.stream,
        "topic": d.name,
        "options": topic_config(&d.config),
        "partitions": d.partitions.iter().map(partition).collect::<Vec<_>>(),
    });
    if d.elastic {
        v["elastic"] = json!(true);
        v["range_epoch"] = json!(d.range_epoch);
        v["ranges"] = d
            .ranges
            .iter()
            .map(|r| {
                json!({
                    "id": r.id,
                    "lo": r.lo,
                    "hi": r.hi,
                    "parents": r.parents,
                    "sealed_at": r.sealed_at,
                    "bytes_per_s": r.bytes_per_s,
                })
            })
            .collect::<Vec<_>>()
            .into();
    }
    v
}

pub(crate) fn group_description(topic: &str, group: &str, d: &GroupDescription) -> Value {
    let members: Vec<Value> = d
        .members
        .iter()
        .map(|m| {
            let reported: serde_json::Map<String, Value> = m
                .metrics
                .iter()
                .map(|(n, v)| (n.clone(), json!(v)))
                .collect();
            json!({
                "id": m.id,
                "owned": m.owned,
                "revoking": m.revoking,
                "reported": reported,
            })
        })
        .collect();
    let partitions: Vec<Value> = d
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition,
                "owner": p.owner,
                "stored_offset": p.stored_offset,
                "log_end": p.log_end,
                "lag": p.lag,
            })
        })
        .collect();
    json!({
        "topic": topic,
        "group": group,
        "generation": d.generation,
        "members": members,
        "partitions": partitions,
        "lag": d.partitions.iter().map(|p| p.lag).sum::<u64>(),
    })
}
