//! `rill events`: the dead letters of a typed-events consumer (docs/EVENTS.md §10).

use anyhow::Context;
use base64::Engine;
use clap::Subcommand;
use serde_json::json;

use crate::output::OutputArg;
use crate::target::{self, Target};

/// `rill events`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct EventsArgs {
    #[command(subcommand)]
    command: EventsCommand,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, Subcommand)]
pub(crate) enum EventsCommand {
    /// List a consumer's dead letters: reason, attempts, key, source offsets, error.
    Dlq {
        #[command(flatten)]
        letters: Letters,
        /// One JSON object per line (the same as `--output json`).
        #[arg(long)]
        json: bool,
    },
    /// Re-publish a consumer's dead letters to the main topic (each once: replayed
    /// letters are marked and not published again).
    Replay {
        #[command(flatten)]
        letters: Letters,
    },
}

/// Which dead letters a command is about.
#[derive(Debug, clap::Args)]
pub(crate) struct Letters {
    /// STREAM/TOPIC (the main topic).
    topic: String,
    /// The events consumer's name.
    #[arg(long)]
    consumer: String,
    /// Only the dead letters of this key (its bytes as UTF-8).
    #[arg(long)]
    key: Option<String>,
}

impl Letters {
    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref().map(str::as_bytes)
    }
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

pub(crate) async fn run(args: EventsArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let out = args.output.output;
    match args.command {
        EventsCommand::Dlq { letters: l, json } => {
            let (stream, topic) = target::split_topic(&l.topic)?;
            let letters = rill_events::dead_letters(&client, stream, topic, &l.consumer, l.key())
                .await
                .with_context(|| {
                    format!(
                        "cannot read the dead letters of consumer {} of {}",
                        l.consumer, l.topic
                    )
                })?;
            print_letters(&letters, json || out.json());
            Ok(())
        }
        EventsCommand::Replay { letters: l } => {
            let (stream, topic) = target::split_topic(&l.topic)?;
            let n = rill_events::replay_dead_letters(&client, stream, topic, &l.consumer, l.key())
                .await
                .with_context(|| {
                    format!(
                        "cannot replay the dead letters of consumer {} of {}",
                        l.consumer, l.topic
                    )
                })?;
            if out.json() {
                println!(
                    "{}",
                    json!({ "topic": l.topic, "consumer": l.consumer, "replayed": n })
                );
            } else {
                eprintln!("replayed {n} dead letters to {}", l.topic);
            }
            Ok(())
        }
    }
}

/// One line per dead letter: tab-separated under a heading, or JSON objects.
fn print_letters(letters: &[rill_events::DeadLetter], json: bool) {
    if !json {
        println!("partition\toffset\treason\tattempts\tkey\tsource\terror");
    }
    for l in letters {
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
}
