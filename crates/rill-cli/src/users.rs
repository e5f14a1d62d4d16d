//! `rill user …`, `rill acl …` and `rill token …` (docs/CLI.md, Security). A password is
//! read from standard input (`--password-stdin`) or the terminal without echo, derived
//! into its verifiers by the SDK, and never printed.

use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use rill_client::{Permission, QUOTA_RATE_MIN, Quota, QuotaChange, Role, Secret};

use serde_json::json;

use crate::admin::parse_duration;
use crate::output::OutputArg;
use crate::target::{self, Target};

/// `rill user`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct UserArgs {
    #[command(subcommand)]
    command: UserCommand,
    #[command(flatten)]
    output: OutputArg,
}

/// `rill acl`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct AclArgs {
    #[command(subcommand)]
    command: AclCommand,
    #[command(flatten)]
    output: OutputArg,
}

/// `rill token`: the subcommand and `--output`.
#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, Subcommand)]
pub(crate) enum UserCommand {
    /// Add a user (works on a data directory before its first start, too).
    Create {
        /// User name.
        name: String,
        /// Read the password from standard input's first line instead of prompting.
        #[arg(long)]
        password_stdin: bool,
        /// admin or user.
        #[arg(long, default_value = "user", value_parser = parse_role)]
        role: Role,
        /// Bytes per second the user may produce on each node (e.g. 1MiB/s).
        #[arg(long, value_parser = parse_rate)]
        produce_rate: Option<Rate>,
        /// Bytes per second the user may fetch on each node (e.g. 10MiB/s).
        #[arg(long, value_parser = parse_rate)]
        fetch_rate: Option<Rate>,
    },
    /// Change a user's quotas; `none` removes one, and a rate left out is kept.
    Alter {
        /// User name.
        name: String,
        /// Bytes per second the user may produce on each node, or none.
        #[arg(long, value_parser = parse_rate)]
        produce_rate: Option<Rate>,
        /// Bytes per second the user may fetch on each node, or none.
        #[arg(long, value_parser = parse_rate)]
        fetch_rate: Option<Rate>,
    },
    /// List users, their roles, ACLs and quotas.
    List,
    /// Delete a user with its tokens and ACLs.
    Delete {
        /// User name.
        name: String,
    },
    /// Set a user's password (an admin: anyone's; a user: its own).
    Passwd {
        /// User name.
        name: String,
        /// Read the password from standard input's first line instead of prompting.
        #[arg(long)]
        password_stdin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AclCommand {
    /// Grant a user permissions on a stream (added to what it holds).
    Grant {
        /// User name.
        user: String,
        /// The stream.
        #[arg(long)]
        stream: String,
        /// read, write and/or manage, comma-separated.
        #[arg(long, value_delimiter = ',', value_parser = parse_permission, required = true)]
        allow: Vec<Permission>,
    },
    /// Revoke all of a user's permissions on a stream.
    Revoke {
        /// User name.
        user: String,
        /// The stream.
        #[arg(long)]
        stream: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Make a token for the user the CLI authenticates as; prints it once.
    Create {
        /// Token name.
        name: String,
        /// Stop working after this long (e.g. 30d, 12h).
        #[arg(long, value_parser = parse_duration)]
        expires: Option<Duration>,
    },
    /// List tokens (never their strings).
    List,
    /// Revoke a token.
    Revoke {
        /// Token name.
        name: String,
    },
}

/// A quota rate: bytes per second, or `None` for no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate(Option<u64>);

/// `1048576`, `64KiB/s`, `10MB/s`, `1GiB` or `none` (decimal and binary units; `/s`
/// optional).
fn parse_rate(s: &str) -> Result<Rate, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(Rate(None));
    }
    let t = t.strip_suffix("/s").unwrap_or(t).trim_end();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let unit_bytes: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (expected B, KB, MB, GB, KiB, MiB or GiB, optionally /s, or none)"
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a rate (e.g. 1048576, 64KiB/s, 10MB/s, none)"))?;
    let bytes = n
        .checked_mul(unit_bytes)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if bytes < QUOTA_RATE_MIN {
        return Err(format!(
            "{s:?} is below the least rate, {QUOTA_RATE_MIN} bytes/s (use none for no limit)"
        ));
    }
    Ok(Rate(Some(bytes)))
}

/// A quota as `user list` and `user alter` print it.
fn quota_text(q: &Quota) -> String {
    let mut parts = Vec::new();
    if let Some(r) = q.produce_bytes_per_second {
        parts.push(format!("produce={r}B/s"));
    }
    if let Some(r) = q.fetch_bytes_per_second {
        parts.push(format!("fetch={r}B/s"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).map_err(|e| e.to_string())
}

/// One name of an `--allow` list (clap splits it at commas).
fn parse_permission(s: &str) -> Result<Permission, String> {
    let set = Permission::parse_list(s).map_err(|e| e.to_string())?;
    set.into_iter()
        .next()
        .ok_or_else(|| "expected read, write or manage".to_owned())
}

/// The password, from standard input or the terminal (twice, to catch a typo).
fn read_password(from_stdin: bool) -> anyhow::Result<Secret> {
    if from_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("cannot read the password from standard input")?;
        let line = line.trim_end_matches(['\n', '\r']).to_owned();
        return Ok(Secret::new(line));
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "standard input is not a terminal: pass --password-stdin to read the password from it"
        );
    }
    let first = rpassword::prompt_password("password: ").context("cannot read the password")?;
    let again = rpassword::prompt_password("again: ").context("cannot read the password")?;
    if first != again {
        anyhow::bail!("the passwords differ");
    }
    Ok(Secret::new(first))
}

/// A quota as `--output json` prints it: bytes per second, `null` for no limit.
fn quota_json(q: &Quota) -> serde_json::Value {
    json!({
        "produce_bytes_per_second": q.produce_bytes_per_second,
        "fetch_bytes_per_second": q.fetch_bytes_per_second,
    })
}

fn role_name(role: Role) -> &'static str {
    role.as_str()
}

fn time(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub(crate) async fn user(args: UserArgs, target: &Target) -> anyhow::Result<()> {
    let (command, out) = (args.command, args.output.output);
    // The password is read before connecting, so a prompt never holds a connection.
    let password = match &command {
        UserCommand::Create { password_stdin, .. } | UserCommand::Passwd { password_stdin, .. } => {
            Some(read_password(*password_stdin)?)
        }
        _ => None,
    };
    let client = target.client().await?;
    match command {
        UserCommand::Create {
            name,
            role,
            produce_rate,
            fetch_rate,
            ..
        } => {
            let password = password.expect("read above");
            client.create_user(&name, role, &password).await?;
            let change = quota_change(produce_rate, fetch_rate);
            if change != QuotaChange::new() {
                client.set_quota(&name, change).await?;
            }
            out.print(
                || json!({ "user": name, "role": role_name(role), "created": true }),
                || println!("created"),
            );
        }
        UserCommand::Alter {
            name,
            produce_rate,
            fetch_rate,
        } => {
            if produce_rate.is_none() && fetch_rate.is_none() {
                anyhow::bail!("nothing to change: pass --produce-rate and/or --fetch-rate");
            }
            let quota = client
                .set_quota(&name, quota_change(produce_rate, fetch_rate))
                .await?;
            out.print(
                || json!({ "user": name, "quota": quota_json(&quota) }),
                || println!("{}", quota_text(&quota)),
            );
        }
        UserCommand::List if out.json() => {
            let users: Vec<serde_json::Value> = client
                .list_users()
                .await?
                .iter()
                .map(|u| {
                    let acls: serde_json::Map<String, serde_json::Value> = u
                        .acls
                        .iter()
                        .map(|(stream, ps)| {
                            (
                                stream.clone(),
                                json!(ps.iter().map(|p| p.as_str()).collect::<Vec<_>>()),
                            )
                        })
                        .collect();
                    json!({
                        "name": u.name,
                        "role": role_name(u.role),
                        "created": time(u.created_ms),
                        "acls": acls,
                        "quota": quota_json(&u.quota),
                    })
                })
                .collect();
            println!("{}", json!({ "users": users }));
        }
        UserCommand::List => {
            for u in client.list_users().await? {
                let acls: Vec<String> = u
                    .acls
                    .iter()
                    .map(|(stream, ps)| {
                        let ps: Vec<_> = ps.iter().map(|p| p.as_str()).collect();
                        format!("{stream}:{}", ps.join("+"))
                    })
                    .collect();
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    u.name,
                    role_name(u.role),
                    time(u.created_ms),
                    if acls.is_empty() {
                        "-".into()
                    } else {
                        acls.join(",")
                    },
                    quota_text(&u.quota)
                );
            }
        }
        UserCommand::Delete { name } => {
            let deleted = client.delete_user(&name).await?;
            out.print(
                || json!({ "user": name, "deleted": deleted }),
                || println!("{}", if deleted { "deleted" } else { "not found" }),
            );
        }
        UserCommand::Passwd { name, .. } => {
            let password = password.expect("read above");
            client.set_password(&name, &password).await?;
            out.print(
                || json!({ "user": name, "password_changed": true }),
                || println!("changed"),
            );
        }
    }
    target::finish(&client).await
}

fn quota_change(produce: Option<Rate>, fetch: Option<Rate>) -> QuotaChange {
    let mut change = QuotaChange::new();
    if let Some(Rate(r)) = produce {
        change = change.produce(r);
    }
    if let Some(Rate(r)) = fetch {
        change = change.fetch(r);
    }
    change
}

pub(crate) async fn acl(args: AclArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let out = args.output.output;
    match args.command {
        AclCommand::Grant {
            user,
            stream,
            allow,
        } => {
            if allow.is_empty() {
                anyhow::bail!("--allow needs at least one of read, write, manage");
            }
            client.grant(&user, &stream, &allow).await?;
            out.print(
                || {
                    let allow: Vec<&str> = allow.iter().map(|p| p.as_str()).collect();
                    json!({ "user": user, "stream": stream, "granted": allow })
                },
                || println!("granted"),
            );
        }
        AclCommand::Revoke { user, stream } => {
            let revoked = client.revoke(&user, &stream).await?;
            out.print(
                || json!({ "user": user, "stream": stream, "revoked": revoked }),
                || println!("{}", if revoked { "revoked" } else { "none held" }),
            );
        }
    }
    target::finish(&client).await
}

pub(crate) async fn token(args: TokenArgs, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    let out = args.output.output;
    match args.command {
        TokenCommand::Create { name, expires } => {
            let t = client.create_token(&name, expires).await?;
            // The token on stdout alone, so a script can capture it; the note on stderr.
            out.print(
                || {
                    json!({
                        "name": name,
                        "token": t.token.expose(),
                        "expires": t.expires_ms.map(time),
                    })
                },
                || println!("{}", t.token.expose()),
            );
            eprintln!(
                "rill: token {name:?} made{}; this is the only time it is shown",
                t.expires_ms
                    .map(|e| format!(", valid until {}", time(e)))
                    .unwrap_or_default()
            );
        }
        TokenCommand::List if out.json() => {
            let tokens: Vec<serde_json::Value> = client
                .list_tokens()
                .await?
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "user": t.user,
                        "created": time(t.created_ms),
                        "expires": t.expires_ms.map(time),
                    })
                })
                .collect();
            println!("{}", json!({ "tokens": tokens }));
        }
        TokenCommand::List => {
            for t in client.list_tokens().await? {
                println!(
                    "{}\t{}\t{}\t{}",
                    t.name,
                    t.user,
                    time(t.created_ms),
                    t.expires_ms.map_or_else(|| "never".into(), time)
                );
            }
        }
        TokenCommand::Revoke { name } => {
            let revoked = client.revoke_token(&name).await?;
            out.print(
                || json!({ "name": name, "revoked": revoked }),
                || println!("{}", if revoked { "revoked" } else { "not found" }),
            );
        }
    }
    target::finish(&client).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_take_decimal_and_binary_units_and_none() {
        for (text, want) in [
            ("1048576", Some(1 << 20)),
            ("64KiB/s", Some(64 << 10)),
            ("10MB/s", Some(10_000_000)),
            ("1GiB", Some(1 << 30)),
            ("2 MiB/s", Some(2 << 20)),
            ("none", None),
        ] {
            assert_eq!(parse_rate(text), Ok(Rate(want)), "{text}");
        }
        for bad in ["", "fast", "10XB/s", "-5", "1023", "99999999999GiB"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
