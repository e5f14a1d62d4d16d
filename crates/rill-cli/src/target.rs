//! Where a command goes: a server (`--server`, `RILL_SERVER`) or a data directory
//! opened embedded (`--data`).

use std::path::PathBuf;

use anyhow::Context;
use std::time::Duration;

use rill_client::{Client, DEFAULT_URL, RetryPolicy, Topic};

#[derive(Debug)]
pub(crate) struct Target {
    server: Option<String>,
    data: Option<PathBuf>,
}

impl Target {
    pub(crate) fn new(server: Option<String>, data: Option<PathBuf>) -> Self {
        Self { server, data }
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
                Client::builder().retry(retry).connect(url).await.with_context(|| {
                    format!("cannot reach a rill server at {url} (start one with `rill serve`, or pass --server URL or --data DIR)")
                })
            }
        }
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
