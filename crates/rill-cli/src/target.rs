//! Where a command goes: a server (`--server`, `RILL_SERVER`) or a data directory
//! opened embedded (`--data`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use std::time::Duration;

use rill_client::{Client, DEFAULT_URL, RetryPolicy, Topic};
use rill_client::{ClientError, Credentials, ErrorCode, Secret, TlsOptions};

#[derive(Debug)]
pub(crate) struct Target {
    server: Option<String>,
    data: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    /// Whether the command creates something, and so may make a missing `--data`
    /// directory (any other command is told the directory does not exist).
    creating: bool,
    /// Where the server URL came from, for messages: `--server` or `RILL_SERVER`.
    server_origin: &'static str,
}

impl Target {
    pub(crate) fn new(
        server: Option<String>,
        data: Option<PathBuf>,
        tls_ca: Option<PathBuf>,
    ) -> Self {
        Self {
            server,
            data,
            tls_ca,
            creating: false,
            server_origin: "--server",
        }
    }

    /// Marks a command that creates things (see [`creates_data`]).
    pub(crate) fn creating(mut self, on: bool) -> Self {
        self.creating = on;
        self
    }

    /// Names where the server URL came from in messages about it.
    pub(crate) fn server_origin(mut self, origin: &'static str) -> Self {
        self.server_origin = origin;
        self
    }

    /// The data directory given with `--data`, for `serve`.
    pub(crate) fn data_dir(&self) -> Option<PathBuf> {
        self.data.clone()
    }

    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        match (&self.data, &self.server) {
            (Some(dir), _) => {
                check_data_dir(dir, self.creating)?;
                Client::open(dir)
                    .await
                    .with_context(|| format!("cannot open data directory {}", dir.display()))
            }
            (None, server) => {
                let url = server.as_deref().unwrap_or(DEFAULT_URL);
                check_url(url).map_err(|reason| {
                    crate::failure::usage(format!(
                        "invalid server URL {:?} ({}): {reason}",
                        rill_client::redact_url(url),
                        self.server_origin
                    ))
                })?;
                // A command line answers quickly: a short retry budget (about 1 s)
                // rides out a server restart without making a typo wait long.
                let retry = RetryPolicy {
                    retries: 4,
                    backoff: Duration::from_millis(50),
                    backoff_max: Duration::from_millis(500),
                };
                let mut builder = Client::builder().retry(retry);
                if let Some(credentials) = env_credentials(|name| std::env::var(name).ok())? {
                    builder = builder.credentials(credentials);
                }
                if rill_client::url_uses_tls(url) {
                    builder = builder.tls(tls_options(self.tls_ca.as_deref(), |name| {
                        std::env::var_os(name).map(PathBuf::from)
                    })?);
                }
                let shown = rill_client::redact_url(url);
                builder.connect(url).await.map_err(|e| {
                    let refused = matches!(
                        &e,
                        ClientError::Server {
                            code: ErrorCode::Unauthenticated | ErrorCode::PermissionDenied,
                            ..
                        }
                    );
                    let context = if let ClientError::Protocol(_) = &e {
                        format!("cannot connect to {shown}")
                    } else if refused {
                        format!("the rill server at {shown} refused this client (give credentials with rill://USER:PASSWORD@HOST:PORT, RILL_USER and RILL_PASSWORD, or RILL_TOKEN)")
                    } else {
                        format!("cannot reach a rill server at {shown} (start one with `rill serve`, or pass --server URL or --data DIR)")
                    };
                    anyhow::Error::new(e).context(context)
                })
            }
        }
    }
}

/// Whether the command of `matches` creates things in a data directory, and so may make
/// the directory: `stream create`, `topic create`, `user create` (the first admin, before
/// the first start) and `bench` (its own topic). `serve` makes its own.
pub(crate) fn creates_data(matches: &clap::ArgMatches) -> bool {
    match matches.subcommand() {
        Some(("stream" | "topic" | "user", sub)) => sub.subcommand_name() == Some("create"),
        Some(("bench", _)) => true,
        _ => false,
    }
}

/// Checks `--data DIR`: a directory, or missing where the command may make it.
pub(crate) fn check_data_dir(dir: &Path, may_create: bool) -> anyhow::Result<()> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => anyhow::bail!("the data directory {} is not a directory", dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && may_create => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "the data directory {} does not exist (commands that create something make it, such as `rill --data {} topic create STREAM/TOPIC`)",
            dir.display(),
            dir.display()
        ),
        Err(e) => Err(e).with_context(|| format!("cannot open data directory {}", dir.display())),
    }
}

/// Checks a server URL before connecting, so a typo is told apart from a server that
/// is down: what `Client::connect` checks, and that each host is a host name or an
/// address (`rill:/h:1`, with one slash, would otherwise be taken for a host).
fn check_url(url: &str) -> Result<(), String> {
    let (url, _) = rill_client::split_credentials(url).map_err(|e| reason_of(&e))?;
    for addr in rill_client::parse_urls(&url).map_err(|e| reason_of(&e))? {
        let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
        if host.contains(['/', '@', ' ']) {
            return Err(format!(
                "{host:?} is not a host (a URL is rill://HOST:PORT, or rills://HOST:PORT with TLS)"
            ));
        }
    }
    Ok(())
}

/// What is wrong with a URL, without the URL (the message names it once).
fn reason_of(e: &ClientError) -> String {
    match e {
        ClientError::InvalidUrl { reason, .. } => (*reason).to_owned(),
        other => other.to_string(),
    }
}

/// TLS for a `rills://` server: `--tls-ca` / `RILL_TLS_CA` to trust a private CA, and
/// a client certificate from `RILL_TLS_CLIENT_CERT` with `RILL_TLS_CLIENT_KEY`.
fn tls_options(
    ca: Option<&Path>,
    env: impl Fn(&str) -> Option<PathBuf>,
) -> anyhow::Result<TlsOptions> {
    let mut tls = TlsOptions::new();
    if let Some(ca) = ca {
        tls = tls.ca_file(ca).context("--tls-ca (or RILL_TLS_CA)")?;
    }
    match (env("RILL_TLS_CLIENT_CERT"), env("RILL_TLS_CLIENT_KEY")) {
        (Some(cert), Some(key)) => {
            tls = tls
                .client_certificate_files(cert, key)
                .context("RILL_TLS_CLIENT_CERT / RILL_TLS_CLIENT_KEY")?;
        }
        (Some(_), None) => anyhow::bail!("RILL_TLS_CLIENT_CERT needs RILL_TLS_CLIENT_KEY"),
        (None, Some(_)) => anyhow::bail!("RILL_TLS_CLIENT_KEY needs RILL_TLS_CLIENT_CERT"),
        (None, None) => {}
    }
    Ok(tls)
}

/// Credentials from the environment (docs/CLI.md, Security): `RILL_TOKEN`, or
/// `RILL_USER` with `RILL_PASSWORD`. Credentials in the URL take precedence.
fn env_credentials(env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Credentials>> {
    if let Some(token) = env("RILL_TOKEN") {
        return Ok(Some(Credentials::Token(Secret::new(token))));
    }
    match (env("RILL_USER"), env("RILL_PASSWORD")) {
        (Some(user), Some(password)) => Ok(Some(Credentials::Password {
            user,
            password: Secret::new(password),
        })),
        (Some(_), None) => anyhow::bail!("RILL_USER needs RILL_PASSWORD"),
        (None, Some(_)) => anyhow::bail!("RILL_PASSWORD needs RILL_USER"),
        (None, None) => Ok(None),
    }
}

/// Parses `STREAM/TOPIC`.
pub(crate) fn split_topic(spec: &str) -> anyhow::Result<(&str, &str)> {
    match spec.split_once('/') {
        Some((s, t)) if !s.is_empty() && !t.is_empty() && !t.contains('/') => Ok((s, t)),
        _ => anyhow::bail!("expected STREAM/TOPIC, got {spec:?}"),
    }
}

pub(crate) fn topic(client: &Client, spec: &str) -> anyhow::Result<Topic> {
    let (stream, topic) = split_topic(spec)?;
    Ok(client.stream(stream).topic(topic))
}

/// Closes an embedded client (syncing its data); a no-op for a server.
pub(crate) async fn finish(client: &Client) -> anyhow::Result<()> {
    client.close().await.context("closing the data directory")
}
