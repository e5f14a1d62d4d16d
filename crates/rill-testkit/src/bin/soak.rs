//! `soak`: kills a real `rill serve` with SIGKILL `--cycles` times under an idempotent
//! keyed producer and a consumer group, then checks every acknowledged record (see
//! `rill_testkit::soak`). Progress on stderr; one summary line on stdout.
//!
//! The server binary is `--rill PATH`, else `$RILL_BIN`, else the `rill` next to this
//! executable (the same target directory and profile). It is not built for you: build
//! it with `cargo build -p rill-cli` (add `--release` for a release soak) after every
//! change to Rill, or the soak runs the old server.
//!
//! Exit status: 0 when every check passed, 1 when one failed, 2 for a usage error or a
//! missing `rill` binary, 3 when the soak could not run to its verdict.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rill_client::CommitPolicy;
use rill_testkit::soak::{self, Options};

#[derive(Debug, Parser)]
#[command(
    name = "soak",
    about = "kill -9 a real `rill serve` under load, N times, and verify every acknowledged record"
)]
struct Args {
    /// Kill-and-restart cycles.
    #[arg(long, default_value_t = 50)]
    cycles: u32,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Seed of every random choice [default: random]. Printed, so a failing schedule
    /// replays.
    #[arg(long, env = "RILL_SEED")]
    seed: Option<u64>,
    /// The `rill` binary [default: `rill` next to this executable].
    #[arg(long, env = "RILL_BIN")]
    rill: Option<PathBuf>,
    /// The server's data directory [default: a temporary one, removed after a passing
    /// run, kept after a failing one].
    #[arg(long)]
    data: Option<PathBuf>,
    /// Keep the temporary data directory after a passing run too.
    #[arg(long)]
    keep: bool,
    /// Shortest load time per cycle before the kill, in ms.
    #[arg(long, default_value_t = 100)]
    load_ms_min: u64,
    /// Longest load time per cycle before the kill, in ms.
    #[arg(long, default_value_t = 800)]
    load_ms_max: u64,
    /// Longest time the server stays down after a kill, in ms.
    #[arg(long, default_value_t = 50)]
    down_ms_max: u64,
    /// Distinct record keys.
    #[arg(long, default_value_t = 64)]
    keys: u32,
    /// Records per send at most.
    #[arg(long, default_value_t = 64)]
    batch_max: u32,
    /// Consumer-group members (0: no group).
    #[arg(long, default_value_t = 2)]
    members: u32,
    /// Commit policies of the members, in turn, comma-separated: disabled (explicit
    /// commits), polling, each, every, all, interval-polling, interval-every [default:
    /// the first member disabled, the others drawn from the seed].
    #[arg(long, value_delimiter = ',', value_parser = parse_policy)]
    policies: Vec<CommitPolicy>,
}

fn parse_policy(name: &str) -> Result<CommitPolicy, String> {
    soak::policy_by_name(name).ok_or_else(|| {
        let names: Vec<_> = soak::policy_names().collect();
        format!("unknown policy {name:?}; one of {}", names.join(", "))
    })
}

// The summary line is the tool's output; everything else goes to stderr.
#[allow(clippy::print_stdout)]
fn main() -> ExitCode {
    let args = Args::parse();
    let rill = match rill_testkit::rill_binary(args.rill, "soak") {
        Ok(path) => path,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let options = Options {
        rill,
        cycles: args.cycles,
        partitions: args.partitions,
        seed: args.seed.unwrap_or_else(rand::random),
        data: args.data,
        keep_data: args.keep,
        load_ms_min: args.load_ms_min,
        load_ms_max: args.load_ms_max,
        down_ms_max: args.down_ms_max,
        keys: args.keys,
        batch_max: args.batch_max,
        members: args.members,
        policies: args.policies,
    };
    match soak::run(&options) {
        Ok(summary) => {
            for problem in &summary.problems {
                eprintln!("[soak] {problem}");
            }
            eprintln!("[soak] {}", summary.details());
            println!("{}", summary.line());
            if summary.passed() {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "[soak] FAILED: replay with --seed {}; data in {}",
                    summary.seed,
                    summary.data_dir.display()
                );
                ExitCode::from(1)
            }
        }
        Err(soak::SoakError::Options(m)) => {
            eprintln!("soak: {m}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!(
                "[soak] the soak could not finish (seed {}): {e}",
                options.seed
            );
            ExitCode::from(3)
        }
    }
}
