//! How a command ends when it does not succeed: the exit code, and the one line on
//! stderr that says why (docs/CLI.md, "Exit codes").
//!
//! - A usage error found after clap parsed the arguments (a combination of flags clap
//!   cannot express) prints like clap's own errors and exits 2, as clap's do.
//! - A bad value clap read from a `RILL_*` environment variable names the variable.
//! - A closed standard output (`rill consume … | head`) ends the command quietly with
//!   exit 0, as in any Unix tool: whether the output went through our own writers (the
//!   error [`StdoutClosed`]) or through `println!`, which panics on it (caught here).
//! - Any other error prints `rill: ` and its causes on one line, exit 1, with the
//!   server's own explanation for an error the server answered (never the SDK's code
//!   names, which are Rust identifiers).

use std::any::Any;
use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use rill_client::ClientError;

/// A usage error the CLI found itself: exit 2, printed like clap's.
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A usage error, as an `anyhow::Error` to return from a command.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

/// Standard output was closed by its reader: the command stops, and that is no error.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Maps a failed write to standard output: a closed pipe becomes [`StdoutClosed`].
pub(crate) fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(e).context("cannot write to standard output")
    }
}

/// The exit code of a command that returned `e`, after printing what the user needs.
pub(crate) fn report(e: &anyhow::Error) -> ExitCode {
    if e.chain().any(|c| c.is::<StdoutClosed>()) {
        return ExitCode::SUCCESS;
    }
    if let Some(Usage(message)) = e.downcast_ref::<Usage>() {
        eprintln!("error: {message}\n\nFor more information, try '--help'.");
        return ExitCode::from(2);
    }
    eprintln!("rill: {}", one_line(e));
    ExitCode::from(1)
}

/// An error and its causes on one line. A cause whose text an earlier one already holds
/// is left out (contexts often repeat their source).
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = match cause.downcast_ref::<ClientError>() {
            // The server's message says what happened; the code's Rust name adds nothing
            // a user can act on.
            Some(ClientError::Server { message, .. }) => message.clone(),
            _ => cause.to_string(),
        };
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ").replace('\n', " ")
}

/// Installs a panic hook that keeps quiet about a `println!` that found standard output
/// closed (every other panic is reported as before). [`closed_stdout_panic`] then tells
/// the caller of `catch_unwind` to exit 0.
pub(crate) fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !closed_stdout_panic(info.payload()) {
            default(info);
        }
    }));
}

/// Whether a panic's payload is std's "failed printing to stdout" for a closed pipe.
pub(crate) fn closed_stdout_panic(payload: &(dyn Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    message.is_some_and(|m| m.starts_with("failed printing to stdout") && m.contains("os error 32"))
}

/// Parses the command line like `C::parse`, exiting on an error as clap does, with a
/// tip naming the environment variable a bad value came from.
pub(crate) fn parse<C: clap::Parser>(mut command: clap::Command) -> (C, clap::ArgMatches) {
    let args: Vec<OsString> = std::env::args_os().collect();
    let matches = match command.try_get_matches_from_mut(&args) {
        Ok(m) => m,
        Err(e) => name_environment(e, &command, &args, |name| std::env::var_os(name)).exit(),
    };
    match C::from_arg_matches(&matches) {
        Ok(cli) => (cli, matches),
        Err(e) => e.format(&mut command).exit(),
    }
}

/// Adds a tip to a bad-value error whose value came from an environment variable (the
/// flag was not on the command line but its variable is set): clap names only the flag.
fn name_environment(
    mut e: clap::Error,
    command: &clap::Command,
    args: &[OsString],
    env: impl Fn(&str) -> Option<OsString>,
) -> clap::Error {
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    // "--listen <LISTEN>"
    let Some(long) = arg
        .strip_prefix("--")
        .map(|a| a.split([' ', '=']).next().unwrap_or(a).to_owned())
    else {
        return e;
    };
    let on_command_line = args.iter().any(|a| {
        a.to_str().is_some_and(|a| {
            a.strip_prefix("--")
                .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
        })
    });
    if on_command_line {
        return e;
    }
    let Some(variable) = env_of(command, &long) else {
        return e;
    };
    if env(&variable).is_some() {
        e.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![
                format!("the value comes from the environment variable {variable}").into(),
            ]),
        );
    }
    e
}

/// The environment variable of the flag `--long`, in `command` or any subcommand.
fn env_of(command: &clap::Command, long: &str) -> Option<String> {
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|v| v.to_string_lossy().into_owned())
        .or_else(|| command.get_subcommands().find_map(|sub| env_of(sub, long)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("rill").subcommand(
            clap::Command::new("serve").arg(
                clap::Arg::new("listen")
                    .long("listen")
                    .env("RILL_LISTEN")
                    .value_parser(clap::value_parser!(std::net::SocketAddr)),
            ),
        )
    }

    /// clap's error for a bad `--listen`: the same whether the value came from the
    /// command line or from `RILL_LISTEN`.
    fn bad_listen() -> (clap::Command, clap::Error) {
        let mut cmd = command();
        let e = cmd
            .try_get_matches_from_mut(["rill", "serve", "--listen", "x"])
            .unwrap_err();
        (cmd, e)
    }

    #[test]
    fn a_bad_value_from_the_environment_names_its_variable() {
        let env = |name: &str| (name == "RILL_LISTEN").then(|| OsString::from("x"));
        let (cmd, e) = bad_listen();
        let args: Vec<OsString> = ["rill", "serve"].map(OsString::from).into();
        let shown = name_environment(e, &cmd, &args, env).to_string();
        assert!(
            shown.contains("environment variable RILL_LISTEN"),
            "{shown}"
        );
        // On the command line, the flag is what clap names already.
        let (cmd, e) = bad_listen();
        let args: Vec<OsString> = ["rill", "serve", "--listen", "x"]
            .map(OsString::from)
            .into();
        let shown = name_environment(e, &cmd, &args, env).to_string();
        assert!(!shown.contains("RILL_LISTEN"), "{shown}");
        // Without the variable set, there is nothing to name.
        let (cmd, e) = bad_listen();
        let args: Vec<OsString> = ["rill", "serve"].map(OsString::from).into();
        let shown = name_environment(e, &cmd, &args, |_| None).to_string();
        assert!(!shown.contains("RILL_LISTEN"), "{shown}");
    }

    #[test]
    fn only_a_closed_stdout_panic_is_quiet() {
        let closed: Box<dyn Any + Send> =
            Box::new("failed printing to stdout: Broken pipe (os error 32)".to_owned());
        assert!(closed_stdout_panic(closed.as_ref()));
        let other: Box<dyn Any + Send> = Box::new("index out of bounds");
        assert!(!closed_stdout_panic(other.as_ref()));
    }

    #[test]
    fn server_errors_print_the_servers_message_without_the_code_name() {
        let e = anyhow::Error::new(ClientError::Server {
            code: rill_client::ErrorCode::TopicNotFound,
            message: "topic s/t does not exist".into(),
            offset: None,
        })
        .context("cannot consume s/t");
        assert_eq!(one_line(&e), "cannot consume s/t: topic s/t does not exist");
    }
}
