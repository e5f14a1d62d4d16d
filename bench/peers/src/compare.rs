//! `rill-peers compare`: every workload on every system, in alternation, for several
//! rounds; then the report.
//!
//! The order is: for each workload, for each round, each system in turn (rill, redis,
//! nats, rill, redis, nats, ...), so that slow drifts of the machine (other load,
//! thermal state, page cache) spread over all systems instead of favouring one. A
//! system with no setting for a workload's durability class is skipped and reported as
//! n/a. A failed run is recorded with its error and the comparison goes on; the command
//! then exits non-zero.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::ValueEnum;

use crate::measure::RunResult;
use crate::report::{self, Machine, Report, Run, SystemReport, WorkloadReport};
use crate::servers::find_program;
use crate::workload::{self, Workload};
use crate::{Ctx, System};

/// Longest a single run may take before it counts as failed.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// Which workload set to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Set {
    /// The full set, sized for a real comparison.
    Default,
    /// The same shapes with a few thousand records each (seconds in all).
    Smoke,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// Rounds: how many times each system runs each workload.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Workload set.
    #[arg(long, value_enum, default_value_t = Set::Default)]
    set: Set,
    /// Only these workloads (comma-separated names; see `rill-peers list`).
    #[arg(long, value_delimiter = ',', value_name = "NAME[,NAME]")]
    only: Vec<String>,
    /// Systems to run, in this order within a round.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "SYSTEM[,SYSTEM]",
        default_values_t = System::ALL
    )]
    systems: Vec<System>,
    /// The `rill` binary (`rill serve` and `rill bench`).
    #[arg(long, default_value = "target/release/rill")]
    rill: PathBuf,
    /// Skip the uncounted warm-up pass (the first workload once on each system) that
    /// runs before the rounds: the first writes into cold memory are several times
    /// slower, and would otherwise land in the first round of the first workload.
    #[arg(long)]
    no_warmup: bool,
    /// Seconds to let the machine settle after each run, once `sync` has flushed what
    /// the run left dirty (its data directory is already deleted): every run then starts
    /// from the same quiet disk instead of inheriting the previous system's writeback.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS",
          value_parser = parse_settle)]
    settle: f64,
    /// Directory for latest.json, latest.md and latest.svg.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

/// The workloads of `set` named in `only` (all when empty), in the set's order.
fn select(set: Set, only: &[String]) -> anyhow::Result<Vec<Workload>> {
    let all = match set {
        Set::Default => workload::default_set(),
        Set::Smoke => workload::smoke_set(),
    };
    let unknown: Vec<&String> = only
        .iter()
        .filter(|name| !all.iter().any(|w| &w.name == *name))
        .collect();
    if !unknown.is_empty() {
        let names: Vec<&str> = all.iter().map(|w| w.name.as_str()).collect();
        bail!(
            "unknown workload(s) {unknown:?}; the workloads are: {}",
            names.join(", ")
        );
    }
    Ok(all
        .into_iter()
        .filter(|w| only.is_empty() || only.contains(&w.name))
        .collect())
}

/// The `rill` binary as an absolute path, or a clear error when it is not built.
pub(crate) fn rill_binary(path: &Path) -> anyhow::Result<PathBuf> {
    if !path.is_file() {
        bail!(
            "no rill binary at {}; build it with `cargo build --release -p rill-cli` \
             (or pass --rill PATH)",
            path.display()
        );
    }
    std::fs::canonicalize(path).with_context(|| format!("cannot resolve {}", path.display()))
}

fn parse_settle(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=60.0).contains(&x) => Ok(x),
        _ => Err(format!("expected seconds between 0 and 60, got {s:?}")),
    }
}

/// Flushes dirty data system-wide (`sync`), then sleeps `seconds`. A failed `sync` is
/// only reported: the comparison goes on.
async fn settle(seconds: f64) {
    if seconds <= 0.0 {
        return;
    }
    match tokio::process::Command::new("sync").status().await {
        Ok(status) if status.success() => {}
        Ok(status) => eprintln!("  (sync exited with {status}; continuing)"),
        Err(e) => eprintln!("  (cannot run sync: {e}; continuing)"),
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
}

/// Checks that a run measured what the workload asked for.
fn check(workload: &Workload, r: RunResult) -> Result<RunResult, String> {
    if r.records != workload.messages {
        return Err(format!(
            "measured {} records, the workload has {}",
            r.records, workload.messages
        ));
    }
    if !(r.records_per_s.is_finite() && r.records_per_s > 0.0) {
        return Err(format!(
            "implausible throughput {} records/s",
            r.records_per_s
        ));
    }
    Ok(r)
}

/// The headline of a result for progress lines.
fn headline(r: &RunResult) -> String {
    format!(
        "{} rec/s, {:.1} MB/s, p50 {}, p99 {}",
        report::thousands(r.records_per_s),
        r.mb_per_s,
        report::latency(r.latency_us.p50),
        report::latency(r.latency_us.p99)
    )
}

pub(crate) async fn run(args: CompareArgs) -> anyhow::Result<()> {
    let workloads = select(args.set, &args.only)?;
    let mut systems: Vec<System> = Vec::new();
    for s in args.systems {
        if !systems.contains(&s) {
            systems.push(s);
        }
    }
    let rill_bin = if systems.contains(&System::Rill) {
        rill_binary(&args.rill)?
    } else {
        args.rill.clone()
    };
    let ctx = Ctx {
        rill_bin: rill_bin.clone(),
    };
    let total: usize = workloads
        .iter()
        .map(|w| {
            systems
                .iter()
                .filter(|s| s.setting(w.durability).is_some())
                .count()
        })
        .sum::<usize>()
        * args.rounds as usize;
    eprintln!(
        "rill-peers: {} workload(s) × {} system(s) × {} round(s): {total} runs",
        workloads.len(),
        systems.len(),
        args.rounds
    );

    if !args.no_warmup
        && let Some(w) = workloads.first()
    {
        eprintln!("\nwarm-up (not counted): {} once on each system", w.name);
        for s in systems.iter().filter(|s| s.setting(w.durability).is_some()) {
            match tokio::time::timeout(RUN_TIMEOUT, s.run(&ctx, w)).await {
                Ok(Ok(r)) => eprintln!("  {:<5} {}", s.name(), headline(&r)),
                Ok(Err(e)) => eprintln!("  {:<5} warm-up failed (ignored): {e:#}", s.name()),
                Err(_) => eprintln!("  {:<5} warm-up timed out (ignored)", s.name()),
            }
            settle(args.settle).await;
        }
    }

    let mut done = 0;
    let mut reports = Vec::new();
    for w in workloads {
        eprintln!("\n{} — {}", w.name, w.describe());
        let settings: Vec<(System, Option<String>)> = systems
            .iter()
            .map(|s| (*s, s.setting(w.durability)))
            .collect();
        for (s, setting) in &settings {
            match setting {
                Some(setting) => eprintln!("  {:<5} {setting}", s.name()),
                None => eprintln!("  {:<5} n/a", s.name()),
            }
        }
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); settings.len()];
        for round in 1..=args.rounds {
            for ((system, setting), runs) in settings.iter().zip(&mut runs) {
                if setting.is_none() {
                    continue;
                }
                done += 1;
                let started = Instant::now();
                let outcome = match tokio::time::timeout(RUN_TIMEOUT, system.run(&ctx, &w)).await {
                    Ok(Ok(r)) => check(&w, r),
                    Ok(Err(e)) => Err(format!("{e:#}")),
                    Err(_) => Err(format!("timed out after {} s", RUN_TIMEOUT.as_secs())),
                };
                let took = started.elapsed().as_secs_f64();
                settle(args.settle).await;
                match &outcome {
                    Ok(r) => eprintln!(
                        "  [{done}/{total}] {} round {round}/{} {:<5} {} ({took:.1} s)",
                        w.name,
                        args.rounds,
                        system.name(),
                        headline(r)
                    ),
                    Err(e) => eprintln!(
                        "  [{done}/{total}] {} round {round}/{} {:<5} FAILED ({took:.1} s): {e}",
                        w.name,
                        args.rounds,
                        system.name()
                    ),
                }
                runs.push(Run::new(round, outcome));
            }
        }
        let systems = settings
            .into_iter()
            .zip(runs)
            .map(|((system, setting), runs)| match setting {
                Some(setting) => SystemReport::ran(system, setting, runs),
                None => SystemReport::not_applicable(system, w.durability),
            })
            .collect();
        reports.push(WorkloadReport::new(w, systems));
    }

    let mut programs: Vec<(&str, PathBuf)> = Vec::new();
    if systems.contains(&System::Rill) {
        programs.push(("rill", rill_bin));
    }
    for (system, name) in [
        (System::Redis, "redis-server"),
        (System::Nats, "nats-server"),
    ] {
        if systems.contains(&system) {
            programs.push((name, find_program(name).unwrap_or_else(|_| name.into())));
        }
    }
    let programs: Vec<(&str, &Path)> = programs.iter().map(|(n, p)| (*n, p.as_path())).collect();
    let report = Report {
        machine: Machine::probe(&programs),
        set: match args.set {
            Set::Default => "default",
            Set::Smoke => "smoke",
        }
        .to_owned(),
        rounds: args.rounds,
        systems,
        workloads: reports,
    };
    report::write(&report, &args.out)?;
    println!("{}", report.text());
    eprintln!(
        "rill-peers: wrote {} (latest.json, latest.md, latest.svg)",
        args.out.display()
    );
    let failed = report.failed_runs();
    if failed > 0 {
        bail!("{failed} of {total} runs failed (errors above and in latest.json)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_workloads_by_name() {
        assert_eq!(select(Set::Default, &[]).unwrap().len(), 10);
        let only = ["e2e-1k-rate".to_owned(), "produce-1k".to_owned()];
        let picked: Vec<String> = select(Set::Smoke, &only)
            .unwrap()
            .into_iter()
            .map(|w| w.name)
            .collect();
        // In the set's order, not the argument's.
        assert_eq!(picked, ["produce-1k", "e2e-1k-rate"]);
        let err = select(Set::Default, &["nope".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("produce-1k"), "{err}");
    }

    #[test]
    fn missing_rill_binary_says_how_to_build_it() {
        let err = rill_binary(Path::new("/nonexistent/rill")).unwrap_err();
        assert!(
            err.to_string()
                .contains("cargo build --release -p rill-cli")
        );
    }

    #[test]
    fn checks_record_counts() {
        let w = &workload::smoke_set()[0];
        let good = RunResult {
            records: w.messages,
            bytes: 1,
            seconds: 1.0,
            records_per_s: w.messages as f64,
            mb_per_s: 0.0,
            latency_us: Default::default(),
        };
        assert!(check(w, good.clone()).is_ok());
        let short = RunResult {
            records: w.messages - 1,
            ..good
        };
        assert!(check(w, short).unwrap_err().contains("measured"));
        let zero = RunResult {
            records_per_s: 0.0,
            ..good
        };
        assert!(check(w, zero).is_err());
    }

    #[test]
    fn parses_arguments() {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct T {
            #[command(flatten)]
            args: CompareArgs,
        }
        let t = T::try_parse_from(["t"]).unwrap();
        assert_eq!(t.args.rounds, 3);
        assert_eq!(t.args.set, Set::Default);
        assert_eq!(t.args.systems, System::ALL);
        assert!(t.args.only.is_empty());
        let t = T::try_parse_from([
            "t",
            "--rounds",
            "2",
            "--set",
            "smoke",
            "--only",
            "a,b",
            "--systems",
            "nats,rill",
        ])
        .unwrap();
        assert_eq!(t.args.rounds, 2);
        assert_eq!(t.args.only, ["a", "b"]);
        assert_eq!(t.args.systems, [System::Nats, System::Rill]);
        assert!(T::try_parse_from(["t", "--rounds", "0"]).is_err());
        assert!(T::try_parse_from(["t", "--systems", "kafka"]).is_err());
    }
}
