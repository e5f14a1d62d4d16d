//! `rill user …`, `rill acl …` and `rill token …` (docs/CLI.md, Security). A password is
//! read from standard input (`--password-stdin`) or the terminal without echo, derived
//! into its verifiers by the SDK, and never printed.

use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use rill_client::{Permission, Role, Secret};

use crate::admin::parse_duration;
use crate::target::{self, Target};

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
    },
    /// List users, their roles and ACLs.
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

fn role_name(role: Role) -> &'static str {
    role.as_str()
}

fn time(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub(crate) async fn user(command: UserCommand, target: &Target) -> anyhow::Result<()> {
    // The password is read before connecting, so a prompt never holds a connection.
    let password = match &command {
        UserCommand::Create { password_stdin, .. } | UserCommand::Passwd { password_stdin, .. } => {
            Some(read_password(*password_stdin)?)
        }
        _ => None,
    };
    let client = target.client().await?;
    match command {
        UserCommand::Create { name, role, .. } => {
            let password = password.expect("read above");
            client.create_user(&name, role, &password).await?;
            println!("created");
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
                    "{}\t{}\t{}\t{}",
                    u.name,
                    role_name(u.role),
                    time(u.created_ms),
                    if acls.is_empty() {
                        "-".into()
                    } else {
                        acls.join(",")
                    }
                );
            }
        }
        UserCommand::Delete { name } => {
            let deleted = client.delete_user(&name).await?;
            println!("{}", if deleted { "deleted" } else { "not found" });
        }
        UserCommand::Passwd { name, .. } => {
            let password = password.expect("read above");
            client.set_password(&name, &password).await?;
            println!("changed");
        }
    }
    target::finish(&client).await
}

pub(crate) async fn acl(command: AclCommand, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    match command {
        AclCommand::Grant {
            user,
            stream,
            allow,
        } => {
            if allow.is_empty() {
                anyhow::bail!("--allow needs at least one of read, write, manage");
            }
            client.grant(&user, &stream, &allow).await?;
            println!("granted");
        }
        AclCommand::Revoke { user, stream } => {
            let revoked = client.revoke(&user, &stream).await?;
            println!("{}", if revoked { "revoked" } else { "none held" });
        }
    }
    target::finish(&client).await
}

pub(crate) async fn token(command: TokenCommand, target: &Target) -> anyhow::Result<()> {
    let client = target.client().await?;
    match command {
        TokenCommand::Create { name, expires } => {
            let t = client.create_token(&name, expires).await?;
            // The token on stdout alone, so a script can capture it; the note on stderr.
            println!("{}", t.token.expose());
            eprintln!(
                "rill: token {name:?} made{}; this is the only time it is shown",
                t.expires_ms
                    .map(|e| format!(", valid until {}", time(e)))
                    .unwrap_or_default()
            );
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
            println!("{}", if revoked { "revoked" } else { "not found" });
        }
    }
    target::finish(&client).await
}
