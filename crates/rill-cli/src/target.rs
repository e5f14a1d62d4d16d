//! Where a command goes: a server (`--server`, `RILL_SERVER`) or a data directory
//! opened embedded (`--data`).

use std::path::PathBuf;

use anyhow::Context;
use std::time::Duration;

use rill_client::{Client, DEFAULT_URL, RetryPolicy, Topic};
use rill_client::{ClientError, Credentials, ErrorCode, Secret, TlsOptions};

#[derive(Debug)]
pub(crate) struct Target {
    server: Option<String>,
    data: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
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
        }
    }

    /// The data directory given with `--data`, for `serve`.
    pub(crate) fn data_dir(&self) -> Option<PathBuf> {
        self.data.clone()
    }

    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        match (&self.data, &self.server) {
            (Some(dir), _) => Client::open(dir)
                .await
                .with_context(|| format!("cannot open data directory {}", dir.display())),
            (None, server) => {
                let url = server.as_deref().unwrap_or(DEFAULT_URL);
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
                        format!("cannot connect to the rill server at {shown}")
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

/// TLS for a `rills://` server: `--tls-ca` / `RILL_TLS_CA` to trust a private CA, and
/// a client certificate from `RILL_TLS_CLIENT_CERT` with `RILL_TLS_CLIENT_KEY`.
fn tls_options(
    ca: Option<&std::path::Path>,
    env: impl Fn(&str) -> Option<PathBuf>,
) -> anyhow::Result<TlsOptions> {
    let mut tls = TlsOptions::new();
    if let Some(ca) = ca {
        tls = tls.ca_file(ca).context("--tls-ca")?;
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
