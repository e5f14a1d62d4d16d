//! The `rill` command line (every command, flag and output: docs/CLI.md): a thin layer
//! over `rill-client`, `rill-server` and `rill-broker`.
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
mod failure;
mod groups;
mod output;
mod produce;
mod progress;
mod record_json;
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
    let (cli, matches) = failure::parse::<Cli>(command());
    init_logging(matches!(cli.command, Command::Serve(_)));
    failure::quiet_on_closed_stdout();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Command::Serve(args) = &cli.command {
        match serve::workers(args) {
            Ok(Some(n)) => {
                builder.worker_threads(n);
            }
            Ok(None) => {}
            Err(e) => return failure::report(&e),
        }
    }
    let runtime = match builder.build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rill: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // A `println!` that finds stdout closed panics; that ends the command quietly.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(run(cli, &matches))
    }));
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => failure::report(&e),
        Err(panic) if failure::closed_stdout_panic(panic.as_ref()) => ExitCode::SUCCESS,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The command line as clap parses it. `serve` shadows the global flags of commands
/// that talk to a server (`--server`, `--tls-ca`) with hidden ones, so its help lists
/// only its own, and refuses them (in `run`); and `--data` with its own words.
fn command() -> clap::Command {
    use clap::CommandFactory as _;
    Cli::command().mut_subcommand("serve", |serve| {
        serve
            .arg(
                clap::Arg::new("data")
                    .long("data")
                    .value_name("DIR")
                    .value_parser(clap::value_parser!(std::path::PathBuf))
                    .help("The data directory [default ./rill-data; env RILL_DATA]"),
            )
            .arg(clap::Arg::new("server").long("server").hide(true))
            .arg(
                clap::Arg::new("tls_ca")
                    .long("tls-ca")
                    .hide(true)
                    .value_parser(clap::value_parser!(std::path::PathBuf)),
            )
    })
}

async fn run(cli: Cli, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    if matches!(cli.command, Command::Serve(_)) {
        for (id, flag) in [("server", "--server"), ("tls_ca", "--tls-ca")] {
            if matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
                return Err(failure::usage(format!(
                    "{flag} is for commands that talk to a server; rill serve takes --listen, --http and --tls-cert"
                )));
            }
        }
    }
    let from_env = matches.value_source("server") == Some(clap::parser::ValueSource::EnvVariable);
    let target = target::Target::new(cli.server, cli.data, cli.tls_ca)
        .creating(target::creates_data(matches))
        .server_origin(if from_env { "RILL_SERVER" } else { "--server" });
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

/// Logs go to stderr; `RILL_LOG` sets the filter (default `info` for the server, with
/// the Raft library's own logs at `warn` — it narrates every vote at `info` —, and
/// `warn` for other commands, where a background producer's failed send is left to the
/// one `rill:` line that reports it). Colored only on a terminal, so files and pipes
/// get plain `key=value` text. A `RILL_LOG` that does not parse is named in a warning
/// and the default is used.
fn init_logging(server: bool) {
    use std::io::IsTerminal as _;
    let default = if server {
        "info,openraft=warn"
    } else {
        "warn,rill_client::producer::background=error"
    };
    let (filter, bad) = match std::env::var("RILL_LOG") {
        Ok(text) => match tracing_subscriber::EnvFilter::try_new(&text) {
            Ok(filter) => (filter, None),
            Err(e) => (tracing_subscriber::EnvFilter::new(default), Some((text, e))),
        },
        Err(_) => (tracing_subscriber::EnvFilter::new(default), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Some((text, e)) = bad {
        tracing::warn!("RILL_LOG={text:?} is not a log filter ({e}); using {default:?}");
    }
}

#[cfg(test)]
mod tests {
    /// clap checks the definitions (flag names, value types, conflicts) only when they
    /// are used: this uses them all.
    #[test]
    fn the_command_line_is_consistent() {
        super::command().debug_assert();
    }
}
