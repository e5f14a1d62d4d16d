//! `rill consume`: an anonymous reader of a topic's partitions, a named consumer per
//! partition (`--name`), or a member of a consumer group (`--group`) (docs/CLI.md,
//! "Consume").

mod members;
mod print;
mod template;
mod until;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rill_client::{Offsets, StartAt, Topic};

use self::print::{Format, Printer, Style};
use self::template::Template;
use self::until::{Stop, Until};
use crate::failure::usage;
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
    /// first | last | end | next | offset:N | time:RFC3339 (default: first, or next with
    /// --name). With --group it applies to partitions without a stored offset.
    #[arg(long, value_parser = until::parse_from)]
    from: Option<StartAt>,
    /// With --group: start every partition at --from, even one with a stored offset.
    #[arg(long, requires = "from")]
    replay: bool,
    /// Stop after this many records (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Stop each partition before offset:N, or before the first record at or after
    /// time:RFC3339.
    #[arg(long, value_name = "offset:N|time:RFC3339", value_parser = until::parse_until)]
    until: Option<Until>,
    /// Keep waiting for new records until interrupted.
    #[arg(long)]
    follow: bool,
    /// How to print records (default value; template with --template).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// With --format template: each record's line, with placeholders such as
    /// {partition}, {offset}, {timestamp}, {key}, {value} and {header.NAME}.
    #[arg(long, value_name = "STRING", value_parser = Template::parse)]
    template: Option<Template>,
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

impl ConsumeArgs {
    /// Checks what clap cannot and returns how records print.
    fn style(&self) -> anyhow::Result<Style> {
        if self.group.is_some() && self.partition.is_some() {
            return Err(usage(
                "--partition does not go with --group: the group assigns partitions",
            ));
        }
        let anonymous = self.group.is_none() && self.name.is_none();
        if anonymous && self.from == Some(StartAt::Next) {
            return Err(usage(
                "--from next needs --name or --group: it means after the offset they stored, and a reader without a name stores none (use --from first, or --from end for only new records)",
            ));
        }
        if anonymous && self.replay {
            return Err(usage(
                "--replay goes with --group or --name: a reader without a name has no stored offset to replay from",
            ));
        }
        Ok(match (self.format, &self.template) {
            (None | Some(Format::Template), Some(t)) => Style::Template(t.clone()),
            (Some(Format::Template), None) => {
                return Err(usage("--format template needs --template 'STRING'"));
            }
            (Some(_), Some(_)) => {
                return Err(usage("--template goes with --format template"));
            }
            (None | Some(Format::Value), None) => Style::Value,
            (Some(Format::Json), None) => Style::Json,
            (Some(Format::Hex), None) => Style::Hex,
        })
    }
}

pub(crate) async fn run(args: ConsumeArgs, target: &Target) -> anyhow::Result<()> {
    let style = args.style()?;
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
    let elastic = (args.group.is_some() || args.name.is_some()) && topic.describe().await?.elastic;
    if elastic {
        // A group or a named consumer of an elastic topic reads every range, parents
        // before children (docs/RANGES.md §6): an offset names a place in one range.
        if matches!(args.from, Some(StartAt::Offset(_)))
            || matches!(args.until, Some(Until::Offset(_)))
            || args.partition.is_some()
        {
            return Err(usage(format!(
                "{} is an elastic topic: --partition, --from offset:N and --until offset:N name places in one key range; with --group or --name use first, last, end, next or time:",
                args.topic
            )));
        }
    }
    let mut out = Printer::new(style, args.count);
    let result = match (&args.group, &args.name) {
        (Some(group), _) => members::grouped(&topic, group, &args, &mut out).await,
        (None, Some(name)) if elastic => members::named_ranges(&topic, name, &args, &mut out).await,
        (None, Some(name)) => members::named(&topic, name, &selected, &args, &mut out).await,
        (None, None) => anonymous(&topic, &selected, &args, &mut out).await,
    };
    out.finish();
    // A closed stdout keeps its own error: the command ends quietly without flushing.
    let flushed = match &result {
        Err(e) if e.is::<crate::failure::StdoutClosed>() => Ok(()),
        _ => out.flush(),
    };
    target::finish(&client).await?;
    result.and(flushed)
}

/// The stops of `--until`, resolved per partition when first needed (a group member
/// learns its partitions as it goes).
#[derive(Debug, Default)]
struct Stops {
    until: Option<Until>,
    resolved: BTreeMap<u32, Stop>,
    /// Partitions that reached their stop.
    done: BTreeSet<u32>,
}

impl Stops {
    fn new(until: Option<Until>) -> Self {
        Self {
            until,
            ..Self::default()
        }
    }

    async fn stop(&mut self, topic: &Topic, partition: u32) -> anyhow::Result<Option<Stop>> {
        let Some(until) = self.until else {
            return Ok(None);
        };
        if let Some(stop) = self.resolved.get(&partition) {
            return Ok(Some(*stop));
        }
        let stop = Stop::resolve(until, topic, partition).await?;
        self.resolved.insert(partition, stop);
        Ok(Some(stop))
    }

    /// Whether `record` is printed: false once its partition reached its stop.
    async fn admits(
        &mut self,
        topic: &Topic,
        record: &rill_client::Record,
    ) -> anyhow::Result<bool> {
        if self.done.contains(&record.partition) {
            return Ok(false);
        }
        match self.stop(topic, record.partition).await? {
            Some(stop) if stop.stops(record) => {
                self.done.insert(record.partition);
                Ok(false)
            }
            _ => Ok(true),
        }
    }

    /// Marks `partition` done if reading from `position` can print nothing more.
    async fn check_start(
        &mut self,
        topic: &Topic,
        partition: u32,
        position: u64,
    ) -> anyhow::Result<()> {
        if let Some(stop) = self.stop(topic, partition).await?
            && stop.passed(position)
        {
            self.done.insert(partition);
        }
        Ok(())
    }

    /// Whether every one of `partitions` reached its stop (never without `--until`).
    fn all_done(&self, partitions: &[u32]) -> bool {
        self.until.is_some() && partitions.iter().all(|p| self.done.contains(p))
    }
}

/// An anonymous cursor over the selected partitions.
async fn anonymous(
    topic: &Topic,
    partitions: &[u32],
    args: &ConsumeArgs,
    out: &mut Printer,
) -> anyhow::Result<()> {
    let from = args.from.unwrap_or(StartAt::First);
    let mut stops = Stops::new(args.until);
    let mut offsets = Offsets::default();
    let all = topic.partitions().await?;
    for p in 0..all {
        let start = if !partitions.contains(&p) {
            // Unselected partitions start at their end, so the cursor skips them.
            topic.end_offset(p).await?
        } else {
            let start = topic.offset_for(p, from).await?;
            stops.check_start(topic, p, start).await?;
            start
        };
        offsets.0.insert(p, start);
    }
    let mut reader = topic.records("cli").from_offsets(offsets);
    loop {
        if stops.all_done(partitions) {
            return Ok(());
        }
        while let Some(item) = reader.next().await {
            match item {
                Ok(record) => {
                    if !partitions.contains(&record.partition)
                        || !stops.admits(topic, &record).await?
                    {
                        if stops.all_done(partitions) {
                            return Ok(());
                        }
                        continue;
                    }
                    out.print(&record)?;
                }
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
