//! The `rill` command line (see `shared/spec/cli.md`): a thin layer over `rill-client`,
//! `rill-server` and `rill-broker`.
//!
//! Exit codes: 0 success, 1 runtime error (one line on stderr saying what to do),
//! 2 usage error.

// A command-line tool: printing results to stdout is its job.
#![allow(clippy::print_stdout)]

mod admin;
mod bench;
mod consume;
mod copies;
mod events;
mod groups;
mod output;
mod produce;
mod serve;
mod target;
mod top;
mod users;

use std::process::ExitCode;

/// mimalloc keeps freed batch buffers for reuse; the system allocator hands each 1 MiB
/// buffer back to the OS, so every batch faulted its pages in again (measured with
/// `rill bench`: hundreds of thousands of page faults per run).
///
/// Without transparent huge pages (`no_thp`): with them, the first touch of each new
/// arena region zeroed a whole 2 MiB page in one fault, which took 3-8 ms on this
/// project's VM and stalled whatever request was running (`perf sched timehist`:
/// `folio_zero_user` under `do_huge_pmd_anonymous_page`). `rill bench e2e --rate 20000`
/// p99 was 0.5-24 ms from run to run with them, 0.48-0.6 ms without; throughput is the
/// same.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Rill: a durable, partitioned event log.
#[derive(Debug, Parser)]
#[command(name = "rill", version, about, propagate_version = true)]
struct Cli {
    /// Server to talk to.
    #[arg(long, global = true, env = "RILL_SERVER", value_name = "URL")]
    server: Option<String>,
    /// Open this data directory embedded, with no server.
    #[arg(long, global = true, value_name = "DIR", conflicts_with = "server")]
    data: Option<std::path::PathBuf>,
    /// With a rills:// server: trust this CA (PEM) instead of the public roots
    #[arg(long, global = true, env = "RILL_TLS_CA", value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server.
    Serve(serve::ServeArgs),
    /// Manage streams.
    Stream(admin::StreamArgs),
    /// Manage topics.
    Topic(admin::TopicArgs),
    /// Consumer groups: list, describe, reset offsets, delete.
    Group(groups::GroupArgs),
    /// Named consumers: list, reset offsets.
    Consumer(groups::ConsumerArgs),
    /// A cluster's nodes and replication.
    Cluster(admin::ClusterArgs),
    /// Users of a server started with --auth.
    User(users::UserArgs),
    /// Per-stream permissions of users.
    Acl(users::AclArgs),
    /// API tokens of the user the CLI authenticates as.
    Token(users::TokenArgs),
    /// Dead letters of typed-events consumers.
    Events(events::EventsArgs),
    /// Publish records (from arguments or standard input).
    Produce(produce::ProduceArgs),
    /// Read records.
    Consume(consume::ConsumeArgs),
    /// Measure throughput and latency.
    Bench(bench::BenchArgs),
    /// Live rates per topic and lag per consumer group, redrawn every interval.
    Top(top::TopArgs),
    /// Print a shell completion script (e.g. `rill completions bash > /etc/bash_completion.d/rill`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    copies::restart_with_vector_copies();
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Serve(_)));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rill: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rill: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let target = target::Target::new(cli.server, cli.data, cli.tls_ca);
    match cli.command {
        Command::Serve(args) => serve::run(args, target.data_dir()).await,
        Command::Stream(c) => admin::stream(c, &target).await,
        Command::Topic(c) => admin::topic(c, &target).await,
        Command::Group(c) => groups::group(c, &target).await,
        Command::Consumer(c) => groups::consumer(c, &target).await,
        Command::Top(args) => top::run(args, &target).await,
        Command::Cluster(c) => admin::cluster(c, &target).await,
        Command::User(c) => users::user(c, &target).await,
        Command::Acl(c) => users::acl(c, &target).await,
        Command::Token(c) => users::token(c, &target).await,
        Command::Events(c) => events::run(c, &target).await,
        Command::Produce(args) => produce::run(args, &target).await,
        Command::Consume(args) => consume::run(args, &target).await,
        Command::Bench(args) => bench::run(args, &target).await,
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), "rill", &mut out);
            std::io::Write::flush(&mut out)
                .map_err(|e| anyhow::anyhow!("cannot write the completion script: {e}"))
        }
    }
}

/// An error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ").replace('\n', " ")
}

/// Logs go to stderr; `RILL_LOG` sets the filter (default `info` for the server, with
/// the Raft library's own logs at `warn` — it narrates every vote at `info` —, and
/// `warn` for other commands). Colored only on a terminal, so files and pipes get plain
/// `key=value` text.
fn init_logging(server: bool) {
    use std::io::IsTerminal as _;
    let default = if server { "info,openraft=warn" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RILL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
