//! `rill top`: live rates per topic and lag per consumer group, redrawn every interval
//! on a terminal (printed as one block per interval when stdout is not one).
//!
//! Rates come from differences between two looks at the topics: records in from the
//! partitions' next offsets, bytes in from their sizes (retention can make a size
//! shrink: that counts as nothing in), and a group's consumption from how far its
//! stored offsets moved (log end minus lag). So a rate is what happened between two
//! looks, never an estimate by the server.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use rill_client::Client;

use crate::admin::parse_duration;
use crate::target::{self, Target};

#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    /// Only the topics of this stream.
    stream: Option<String>,
    /// Time between two looks (e.g. 2s, 500ms).
    #[arg(long, default_value = "2s", value_parser = parse_interval)]
    interval: Duration,
    /// Print this many views, then exit (default: until interrupted).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
}

/// Looks closer than this apart measure mostly noise; a day apart is surely a typo.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(86_400) {
        return Err("must be between 100ms and 1d".into());
    }
    Ok(d)
}

/// One look at a topic.
#[derive(Debug, Clone)]
struct TopicLook {
    partitions: u32,
    /// The sum of the partitions' next offsets: records ever appended.
    appended: u64,
    /// Records still stored.
    stored: u64,
    bytes: u64,
}

/// One look at a consumer group of a topic.
#[derive(Debug, Clone)]
struct GroupLook {
    members: u32,
    lag: u64,
    /// Where its stored offsets stand, summed over partitions: the topic's `appended`
    /// minus the lag.
    consumed: u64,
}

/// Everything seen in one look, keyed by `stream/topic` and by (`stream/topic`, group).
#[derive(Debug, Default)]
struct Look {
    topics: Vec<(String, TopicLook)>,
    groups: Vec<((String, String), GroupLook)>,
}

async fn look(client: &Client, stream: Option<&str>) -> anyhow::Result<Look> {
    let mut out = Look::default();
    for t in client
        .list_topics(stream)
        .await
        .context("cannot list the topics")?
    {
        let name = format!("{}/{}", t.stream, t.name);
        let handle = client.stream(t.stream.clone()).topic(t.name.clone());
        // A topic deleted since the listing is simply gone from this look.
        let Ok(d) = handle.describe().await else {
            continue;
        };
        let topic = TopicLook {
            partitions: d.config.partitions,
            appended: d.partitions.iter().map(|p| p.next_offset).sum(),
            stored: d
                .partitions
                .iter()
                .map(|p| p.next_offset.saturating_sub(p.first_offset))
                .sum(),
            bytes: d.partitions.iter().map(|p| p.size_bytes).sum(),
        };
        if let Ok(groups) = handle.groups().await {
            for g in groups {
                out.groups.push((
                    (name.clone(), g.name),
                    GroupLook {
                        members: g.members,
                        lag: g.lag,
                        consumed: topic.appended.saturating_sub(g.lag),
                    },
                ));
            }
        }
        out.topics.push((name, topic));
    }
    Ok(out)
}

/// Per second, from `before` to `now` over `seconds`; a count that went down (a topic
/// deleted and made again, retention) counts as nothing.
fn rate(before: Option<u64>, now: u64, seconds: f64) -> String {
    match before {
        Some(b) if seconds > 0.0 => format!("{:.0}", now.saturating_sub(b) as f64 / seconds),
        _ => "-".into(),
    }
}

/// A size for people: B, KiB, MiB, GiB.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Rows as left-aligned columns two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| format!("{cell:<width$}", width = widths[c]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The view of `now`, with rates against `before`, `seconds` earlier.
fn render(before: &Look, now: &Look, seconds: f64, interval: Duration) -> String {
    let topics_before: HashMap<&str, &TopicLook> =
        before.topics.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let groups_before: HashMap<(&str, &str), &GroupLook> = before
        .groups
        .iter()
        .map(|((t, g), l)| ((t.as_str(), g.as_str()), l))
        .collect();
    let mut rows = vec![vec![
        "topic".to_owned(),
        "partitions".into(),
        "records".into(),
        "in/s".into(),
        "in_bytes/s".into(),
        "bytes".into(),
    ]];
    for (name, t) in &now.topics {
        let b = topics_before.get(name.as_str());
        rows.push(vec![
            name.clone(),
            t.partitions.to_string(),
            t.stored.to_string(),
            rate(b.map(|b| b.appended), t.appended, seconds),
            rate(b.map(|b| b.bytes), t.bytes, seconds),
            size(t.bytes),
        ]);
    }
    let mut out = format!(
        "rill top  {}  every {}\n\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        humantime::format_duration(interval)
    );
    out.push_str(&table(&rows));
    let mut rows = vec![vec![
        "group".to_owned(),
        "topic".into(),
        "members".into(),
        "lag".into(),
        "consumed/s".into(),
    ]];
    for ((topic, group), g) in &now.groups {
        let b = groups_before.get(&(topic.as_str(), group.as_str()));
        rows.push(vec![
            group.clone(),
            topic.clone(),
            g.members.to_string(),
            g.lag.to_string(),
            rate(b.map(|b| b.consumed), g.consumed, seconds),
        ]);
    }
    out.push('\n');
    out.push_str(&table(&rows));
    out
}

pub(crate) async fn run(args: TopArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let terminal = std::io::stdout().is_terminal();
    let stream = args.stream.as_deref();
    let mut before = look(&client, stream).await?;
    let mut at = Instant::now();
    let mut shown = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        let now = look(&client, stream).await?;
        let seconds = at.elapsed().as_secs_f64();
        at = Instant::now();
        let view = render(&before, &now, seconds, args.interval);
        let mut stdout = std::io::stdout().lock();
        if terminal {
            // Home and clear, then the view: a redraw in place.
            write!(stdout, "\x1b[H\x1b[2J{view}")?;
        } else {
            writeln!(stdout, "{view}")?;
        }
        stdout.flush()?;
        before = now;
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            break;
        }
    }
    target::finish(&client).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_differences_per_second_and_never_negative() {
        assert_eq!(rate(Some(100), 300, 2.0), "100");
        assert_eq!(rate(None, 300, 2.0), "-");
        assert_eq!(rate(Some(300), 100, 2.0), "0", "a count that went down");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
        assert!(parse_interval("50ms").is_err());
        assert!(parse_interval("2d").is_err());
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn a_view_shows_each_topic_and_group_with_rates_against_the_look_before() {
        let t = |appended, bytes| TopicLook {
            partitions: 2,
            appended,
            stored: appended,
            bytes,
        };
        let before = Look {
            topics: vec![("s/t".into(), t(10, 1000))],
            groups: vec![(
                ("s/t".into(), "g".into()),
                GroupLook {
                    members: 1,
                    lag: 10,
                    consumed: 0,
                },
            )],
        };
        let now = Look {
            topics: vec![("s/t".into(), t(30, 3048)), ("s/new".into(), t(5, 5))],
            groups: vec![(
                ("s/t".into(), "g".into()),
                GroupLook {
                    members: 1,
                    lag: 20,
                    consumed: 10,
                },
            )],
        };
        let view = render(&before, &now, 2.0, Duration::from_secs(2));
        let lines: Vec<&str> = view.lines().collect();
        let row = |first: &str| -> Vec<&str> {
            lines
                .iter()
                .find(|l| l.split_whitespace().next() == Some(first))
                .unwrap_or_else(|| panic!("no row {first}: {view}"))
                .split_whitespace()
                .collect()
        };
        assert_eq!(
            row("topic"),
            [
                "topic",
                "partitions",
                "records",
                "in/s",
                "in_bytes/s",
                "bytes"
            ]
        );
        assert_eq!(row("s/t"), ["s/t", "2", "30", "10", "1024", "3.0", "KiB"]);
        assert_eq!(row("s/new"), ["s/new", "2", "5", "-", "-", "5", "B"]);
        assert_eq!(row("g"), ["g", "s/t", "1", "20", "5"]);
    }
}
