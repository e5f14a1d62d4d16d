//! `rill events`: the dead letters of a typed-events consumer (docs/EVENTS.md §10).

use anyhow::Context;
use base64::Engine;
use clap::Subcommand;
use serde_json::json;

use crate::target::{self, Target};

#[derive(Debug, Subcommand)]
pub(crate) enum EventsCommand {
    /// List a consumer's dead letters: reason, attempts, key, source offsets, error.
    Dlq {
        /// STREAM/TOPIC (the main topic).
        topic: String,
        /// The events consumer's name.
        #[arg(long)]
        consumer: String,
        /// Only the dead letters of this key (its bytes as UTF-8).
        #[arg(long)]
        key: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Re-publish a consumer's dead letters to the main topic (each once: replayed
    /// letters are marked and not published again).
    Replay {
        /// STREAM/TOPIC (the main topic).
        topic: String,
        /// The events consumer's name.
        #[arg(long)]
        consumer: String,
        /// Only the dead letters of this key (its bytes as UTF-8).
        #[arg(long)]
        key: Option<String>,
    },
}

/// A key as text: UTF-8 when it is, else base64 prefixed with `b64:`.
fn key_text(key: Option<&[u8]>) -> String {
    match key {
        None => "-".into(),
        Some(k) => match std::str::from_utf8(k) {
            Ok(s) => s.to_owned(),
            Err(_) => format!(
                "b64:{}",
                base64::engine::general_purpose::STANDARD.encode(k)
            ),
        },
    }
}

pub(crate) async fn run(command: EventsCommand, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    match command {
        EventsCommand::Dlq {
            topic,
            consumer,
            key,
            json,
        } => {
            let (stream, name) = target::split_topic(&topic)?;
            let letters = rill_events::dead_letters(
                &client,
                stream,
                name,
                &consumer,
                key.as_deref().map(str::as_bytes),
            )
            .await
            .with_context(|| {
                format!("cannot read the dead letters of consumer {consumer} of {topic}")
            })?;
            if !json {
                println!("partition\toffset\treason\tattempts\tkey\tsource\terror");
            }
            for l in &letters {
                let reason = l.reason.map_or("unknown", |r| r.name());
                let key = key_text(l.key.as_deref());
                if json {
                    let line = json!({
                        "partition": l.position.partition,
                        "offset": l.position.offset,
                        "reason": reason,
                        "attempts": l.attempts,
                        "key": key,
                        "tag": l.tag,
                        "source_partition": l.source.map(|s| s.0),
                        "source_first_offset": l.source.map(|s| s.1),
                        "source_last_offset": l.source.map(|s| s.2),
                        "error": l.error,
                    });
                    println!("{line}");
                } else {
                    let source = l
                        .source
                        .map_or("-".into(), |(p, a, b)| format!("{p}/{a}..={b}"));
                    println!(
                        "{}\t{}\t{reason}\t{}\t{key}\t{source}\t{}",
                        l.position.partition,
                        l.position.offset,
                        l.attempts,
                        l.error.as_deref().unwrap_or("-").replace(['\t', '\n'], " ")
                    );
                }
            }
            Ok(())
        }
        EventsCommand::Replay {
            topic,
            consumer,
            key,
        } => {
            let (stream, name) = target::split_topic(&topic)?;
            let n = rill_events::replay_dead_letters(
                &client,
                stream,
                name,
                &consumer,
                key.as_deref().map(str::as_bytes),
            )
            .await
            .with_context(|| {
                format!("cannot replay the dead letters of consumer {consumer} of {topic}")
            })?;
            eprintln!("replayed {n} dead letters to {topic}");
            Ok(())
        }
    }
}
