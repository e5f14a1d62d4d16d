//! Rill: `rill serve` on a fresh data directory, driven by `rill bench --json`.
//!
//! Each run starts its own server (`rill serve --data TMP --listen 127.0.0.1:PORT
//! --http 127.0.0.1:PORT2`), waits until it accepts connections, runs one
//! `rill bench <kind> --server rill://127.0.0.1:PORT ... --json` with the workload's
//! settings, parses the JSON line it prints into a [`RunResult`], then kills the server
//! and removes the directory.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::Command;

use crate::Ctx;
use crate::measure::RunResult;
use crate::servers::{ServerProcess, free_port};
use crate::workload::{Durability, Workload};

/// How long a fresh server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Lines of a failed process's output quoted in its error.
const TAIL_LINES: usize = 15;

/// The topic durability a class runs with.
pub(crate) fn setting(durability: Durability) -> String {
    format!("durability {}", durability_flag(durability))
}

/// The `--durability` value of `rill bench` for a class.
fn durability_flag(durability: Durability) -> &'static str {
    match durability {
        Durability::Buffered => "interval:1000",
        Durability::Fsync => "always",
    }
}

pub(crate) async fn run(ctx: &Ctx, workload: &Workload) -> anyhow::Result<RunResult> {
    let dir = tempfile::Builder::new()
        .prefix("rill-peers-rill-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let port = free_port()?;
    let http = loop {
        let p = free_port()?;
        if p != port {
            break p;
        }
    };
    let args: Vec<OsString> = vec![
        "serve".into(),
        "--data".into(),
        dir.path().join("data").into(),
        "--listen".into(),
        format!("127.0.0.1:{port}").into(),
        "--http".into(),
        format!("127.0.0.1:{http}").into(),
    ];
    let mut server =
        ServerProcess::start_ready(&ctx.rill_bin, args, dir, port, "rill serve", START_TIMEOUT)
            .await?;
    let url = format!("rill://127.0.0.1:{port}");
    let result = bench(&ctx.rill_bin, &url, workload).await;
    // Quote the server's log too: a bench failure is often the server's doing.
    let result = result.map_err(|e| match server.ensure_running() {
        Err(died) => anyhow::anyhow!("{died:#}\n(rill bench: {e:#})"),
        Ok(()) => anyhow::anyhow!(
            "{e:#}\nrill serve log tail:\n{}",
            strip_ansi(&server.log_tail(TAIL_LINES))
        ),
    });
    // Kills the server, then removes its directory.
    drop(server);
    result
}

/// The arguments of `rill bench` for a workload against the server at `url`.
pub(crate) fn bench_args(workload: &Workload, url: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "bench".into(),
        workload.kind.name().into(),
        "--server".into(),
        url.into(),
        "--messages".into(),
        workload.messages.to_string(),
        "--warmup".into(),
        workload.warmup.to_string(),
        "--size".into(),
        workload.size.to_string(),
        "--batch".into(),
        workload.batch.to_string(),
        "--producers".into(),
        workload.producers.to_string(),
        "--consumers".into(),
        workload.consumers.to_string(),
        "--partitions".into(),
        workload.partitions.to_string(),
        "--durability".into(),
        durability_flag(workload.durability).into(),
    ];
    if let Some(rate) = workload.rate {
        args.extend(["--rate".into(), rate.to_string()]);
    }
    if workload.keyed {
        args.push("--keyed".into());
    }
    args.push("--json".into());
    args
}

/// Runs `rill bench` and parses its JSON line.
async fn bench(rill: &Path, url: &str, workload: &Workload) -> anyhow::Result<RunResult> {
    let args = bench_args(workload, url);
    let output = Command::new(rill)
        .args(&args)
        .env_remove("RILL_SERVER")
        .env_remove("RILL_DATA")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("cannot run {}", rill.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!(
            "`rill {}` failed ({}):\n{}",
            args.join(" "),
            output.status,
            tail(&stderr, TAIL_LINES)
        );
    }
    parse_result(&stdout).with_context(|| {
        format!(
            "`rill {}` printed no result; stderr tail:\n{}",
            args.join(" "),
            tail(&stderr, TAIL_LINES)
        )
    })
}

/// The result in `rill bench --json` output: its last line that is a JSON object.
pub(crate) fn parse_result(stdout: &str) -> anyhow::Result<RunResult> {
    let line = stdout
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow::anyhow!("no JSON line in {:?}", tail(stdout, 3)))?;
    serde_json::from_str(line).with_context(|| format!("unexpected JSON: {line}"))
}

/// `text` without ANSI escape sequences (the server colours its log).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, ended by a letter.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Kind, smoke_set};

    #[test]
    fn bench_arguments_follow_the_workload() {
        let set = smoke_set();
        let keyed = set
            .iter()
            .find(|w| w.keyed && w.rate.is_some() && w.kind == Kind::E2e)
            .unwrap();
        let args = bench_args(keyed, "rill://127.0.0.1:1");
        let joined = args.join(" ");
        assert!(joined.starts_with("bench e2e --server rill://127.0.0.1:1 --messages 2000"));
        assert!(joined.contains("--partitions 4"));
        assert!(joined.contains("--durability interval:1000"));
        assert!(joined.contains("--rate 4000"));
        assert!(joined.contains("--keyed"));
        assert!(joined.ends_with("--json"));

        let fsync = set
            .iter()
            .find(|w| w.durability == Durability::Fsync && w.rate.is_none())
            .unwrap();
        let joined = bench_args(fsync, "u").join(" ");
        assert!(joined.contains("--durability always"));
        assert!(!joined.contains("--rate"));
        assert!(!joined.contains("--keyed"));
    }

    #[test]
    fn parses_the_last_json_line() {
        let out = "noise\n{\"records\":5,\"bytes\":50,\"seconds\":1.0,\"records_per_s\":5.0,\
                   \"mb_per_s\":0.00005,\"latency_us\":{\"p50\":1.0,\"p90\":1.0,\"p99\":2.0,\
                   \"p999\":2.0,\"max\":2.0},\"extra\":true}\n\n";
        let r = parse_result(out).unwrap();
        assert_eq!(r.records, 5);
        assert!(parse_result("nothing here").is_err());
        assert!(parse_result("{\"records\":\"x\"}").is_err());
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(
            strip_ansi("\u{1b}[2mx\u{1b}[0m y \u{1b}[32mINFO"),
            "x y INFO"
        );
    }
}
