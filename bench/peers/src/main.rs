//! `rill-peers`: runs the same workloads against Rill (`rill serve` + `rill bench`),
//! Redis Streams and NATS JetStream, each server started here on 127.0.0.1 with its data
//! in a fresh temporary directory, in alternation (A B C A B C ...), and reports each
//! system's median and spread and Rill's ratio to each peer. See `docs/BENCHMARKS.md`.

#![allow(clippy::print_stdout)] // A command-line tool: its report goes to stdout.

mod compare;
mod drive;
mod measure;
mod nats_js;
mod redis_streams;
mod report;
mod rill;
mod servers;
mod workload;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::measure::RunResult;
use crate::workload::{Durability, Workload};

#[derive(Debug, Parser)]
#[command(name = "rill-peers", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every workload on every system, in alternation, and report.
    Compare(compare::CompareArgs),
    /// Run one workload once on one system and print its result as JSON.
    Run {
        #[arg(value_enum)]
        system: System,
        /// Workload name (see `list`).
        workload: String,
        /// Use the tiny smoke-test version of the workload.
        #[arg(long)]
        smoke: bool,
        /// The `rill` binary.
        #[arg(long, default_value = "target/release/rill")]
        rill: PathBuf,
    },
    /// List the workloads of the default set.
    List,
}

/// A system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum System {
    Rill,
    Redis,
    Nats,
}

impl System {
    pub(crate) const ALL: [Self; 3] = [Self::Rill, Self::Redis, Self::Nats];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Rill => "rill",
            Self::Redis => "redis",
            Self::Nats => "nats",
        }
    }

    /// The setting this system runs a durability class with, or `None` when it has
    /// none that matches (the workload is then not run on it).
    pub(crate) fn setting(self, durability: Durability) -> Option<String> {
        match self {
            Self::Rill => Some(rill::setting(durability)),
            Self::Redis => Some(redis_streams::setting(durability)),
            Self::Nats => nats_js::setting(durability),
        }
    }

    /// Runs `workload` once against a fresh server of this system.
    pub(crate) async fn run(self, ctx: &Ctx, workload: &Workload) -> anyhow::Result<RunResult> {
        match self {
            Self::Rill => rill::run(ctx, workload).await,
            Self::Redis => redis_streams::run(workload).await,
            Self::Nats => nats_js::run(workload).await,
        }
    }
}

/// What runs need from the command line.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The `rill` binary (`rill serve` and `rill bench`).
    pub(crate) rill_bin: PathBuf,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let work = async {
        match cli.command {
            Command::Compare(args) => compare::run(args).await,
            Command::Run {
                system,
                workload,
                smoke,
                rill,
            } => run_one(system, &workload, smoke, rill).await,
            Command::List => {
                for w in workload::default_set() {
                    println!("{:<26} {}", w.name, w.describe());
                }
                Ok(())
            }
        }
    };
    // On Ctrl-C, dropping the work drops the running servers, which kills them and
    // removes their data directories: nothing is left running behind.
    let result = tokio::select! {
        result = work => result,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("rill-peers: interrupted; servers stopped, nothing reported");
            return std::process::ExitCode::from(130);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rill-peers: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run_one(system: System, name: &str, smoke: bool, rill: PathBuf) -> anyhow::Result<()> {
    let set = if smoke {
        workload::smoke_set()
    } else {
        workload::default_set()
    };
    let w = set
        .into_iter()
        .find(|w| w.name == name)
        .ok_or_else(|| anyhow::anyhow!("no workload named {name:?}; see `rill-peers list`"))?;
    let Some(setting) = system.setting(w.durability) else {
        anyhow::bail!(
            "{} has no {} durability setting",
            system.name(),
            w.durability.name()
        );
    };
    eprintln!("{}: {} ({setting})", system.name(), w.describe());
    let ctx = Ctx {
        rill_bin: compare::rill_binary(&rill)?,
    };
    let r = system.run(&ctx, &w).await?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}
