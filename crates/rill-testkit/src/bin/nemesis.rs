//! `nemesis`: runs a cluster of real `rill serve` processes under an idempotent keyed
//! producer and named consumers while a seeded schedule kills, pauses and cuts off its
//! nodes, then checks every acknowledged record and the replicas (see
//! `rill_testkit::nemesis`). The schedule is printed first; progress on stderr; one
//! summary line on stdout.
//!
//! The node binary is `--rill PATH`, else `$RILL_BIN`, else the `rill` next to this
//! executable. It is not built for you: build it with `cargo build -p rill-cli` (add
//! `--release` for a release run) after every change to Rill.
//!
//! Exit status: 0 when every check passed, 1 when one failed, 2 for a usage error or a
//! missing `rill` binary, 3 when the run could not reach its verdict.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rill_testkit::nemesis::{self, Options, schedule::Shape};
use rill_testkit::soak::SoakError;

#[derive(Debug, Parser)]
#[command(
    name = "nemesis",
    about = "kill, pause and partition the nodes of a real Rill cluster under load, and verify every acknowledged record"
)]
struct Args {
    /// How long the schedule runs at least, in seconds (its quiet spells and holds).
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// Faults at least, however long that makes the schedule.
    #[arg(long, default_value_t = 0)]
    faults: u32,
    /// Seed of every random choice [default: random]. Printed, so a failing schedule
    /// replays.
    #[arg(long, env = "RILL_SEED")]
    seed: Option<u64>,
    /// The `rill` binary [default: `rill` next to this executable].
    #[arg(long, env = "RILL_BIN")]
    rill: Option<PathBuf>,
    /// Nodes of the cluster.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Fault kinds to draw from, comma-separated: kill, pause, isolate, blackhole,
    /// sever, one-way [default: all].
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Shortest hold of a fault, in ms.
    #[arg(long, default_value_t = 300)]
    hold_ms_min: u64,
    /// Longest hold of a fault, in ms.
    #[arg(long, default_value_t = 3000)]
    hold_ms_max: u64,
    /// Shortest quiet spell before a fault, in ms.
    #[arg(long, default_value_t = 500)]
    quiet_ms_min: u64,
    /// Longest quiet spell before a fault, in ms.
    #[arg(long, default_value_t = 2000)]
    quiet_ms_max: u64,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 3)]
    partitions: u32,
    /// Distinct record keys.
    #[arg(long, default_value_t = 64)]
    keys: u32,
    /// Records per send at most.
    #[arg(long, default_value_t = 32)]
    batch_max: u32,
    /// Consumer-group members (0: no group; at most 8).
    #[arg(long, default_value_t = 2)]
    members: u32,
    /// Run no readers (named consumers).
    #[arg(long)]
    no_readers: bool,
    /// The nodes' directory [default: a temporary one, removed after a passing run,
    /// kept after a failing one].
    #[arg(long)]
    data: Option<PathBuf>,
    /// Keep the temporary directory after a passing run too.
    #[arg(long)]
    keep: bool,
    /// Print the schedule of the seed and exit.
    #[arg(long)]
    print_schedule: bool,
}

// The summary line (or the schedule) is the tool's output; the rest goes to stderr.
#[allow(clippy::print_stdout)]
fn main() -> ExitCode {
    let args = Args::parse();
    let shape = Shape {
        nodes: args.nodes,
        kinds: args.kinds,
        hold_ms: (args.hold_ms_min, args.hold_ms_max),
        quiet_ms: (args.quiet_ms_min, args.quiet_ms_max),
    };
    if let Some(why) = shape.invalid() {
        eprintln!("nemesis: {why}");
        return ExitCode::from(2);
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    if args.print_schedule {
        let steps =
            nemesis::schedule::draw(seed, &shape, Duration::from_secs(args.seconds), args.faults);
        for (i, step) in steps.iter().enumerate() {
            println!("{}: {step}", i + 1);
        }
        return ExitCode::SUCCESS;
    }
    let rill = match rill_testkit::rill_binary(args.rill, "nemesis") {
        Ok(path) => path,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let mut options = Options::new(rill, Duration::from_secs(args.seconds));
    options.seed = seed;
    options.min_faults = args.faults;
    options.shape = shape;
    options.partitions = args.partitions;
    options.keys = args.keys;
    options.batch_max = args.batch_max;
    options.readers = !args.no_readers;
    options.members = args.members;
    options.data = args.data;
    options.keep_data = args.keep;
    match nemesis::run(&options) {
        Ok(summary) => {
            for problem in &summary.problems {
                eprintln!("[nemesis] {problem}");
            }
            eprintln!("[nemesis] {}", summary.details());
            println!("{}", summary.line());
            if summary.passed() {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "[nemesis] FAILED: replay with --seed {}; data in {}",
                    summary.seed,
                    summary.data_dir.display()
                );
                ExitCode::from(1)
            }
        }
        Err(SoakError::Options(m)) => {
            eprintln!("nemesis: {m}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("[nemesis] the run could not finish (seed {seed}): {e}");
            ExitCode::from(3)
        }
    }
}
