//! `rill serve`: the broker behind the TCP server, until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use rill_broker::{Broker, BrokerConfig, DurabilityConfig};
use rill_server::{Server, ServerConfig};
use serde::Deserialize;

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address of the client protocol listener [default 127.0.0.1:7171; env RILL_LISTEN]
    #[arg(long, env = "RILL_LISTEN")]
    listen: Option<SocketAddr>,
    /// Address of the HTTP admin endpoint (/health, /metrics) [default 127.0.0.1:7172; env RILL_HTTP]
    #[arg(long, env = "RILL_HTTP")]
    http: Option<SocketAddr>,
    /// A TOML file with settings (flags and RILL_* variables override it) [env RILL_CONFIG]
    #[arg(long, env = "RILL_CONFIG")]
    config: Option<PathBuf>,
}

/// Settings from the TOML file; every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data: Option<PathBuf>,
    listen: Option<SocketAddr>,
    http: Option<SocketAddr>,
    max_connections: Option<usize>,
    max_in_flight_per_connection: Option<usize>,
    max_frame_bytes: Option<u32>,
    max_batch_bytes: Option<u32>,
    /// always | never | interval:MS
    default_durability: Option<String>,
    retention_check_secs: Option<u64>,
}

/// Overrides file settings with `RILL_<KEY>` environment variables (`RILL_DATA`,
/// `RILL_MAX_CONNECTIONS`, `RILL_DEFAULT_DURABILITY`, …); `env` looks a variable up.
fn apply_env(file: &mut FileConfig, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
    fn parse<T: std::str::FromStr>(name: &str, value: &str) -> anyhow::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        value
            .trim()
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}={value:?} is invalid: {e}"))
    }
    if let Some(v) = env("RILL_DATA") {
        file.data = Some(PathBuf::from(v));
    }
    if let Some(v) = env("RILL_MAX_CONNECTIONS") {
        file.max_connections = Some(parse("RILL_MAX_CONNECTIONS", &v)?);
    }
    if let Some(v) = env("RILL_MAX_IN_FLIGHT_PER_CONNECTION") {
        file.max_in_flight_per_connection = Some(parse("RILL_MAX_IN_FLIGHT_PER_CONNECTION", &v)?);
    }
    if let Some(v) = env("RILL_MAX_FRAME_BYTES") {
        file.max_frame_bytes = Some(parse("RILL_MAX_FRAME_BYTES", &v)?);
    }
    if let Some(v) = env("RILL_MAX_BATCH_BYTES") {
        file.max_batch_bytes = Some(parse("RILL_MAX_BATCH_BYTES", &v)?);
    }
    if let Some(v) = env("RILL_DEFAULT_DURABILITY") {
        file.default_durability = Some(v);
    }
    if let Some(v) = env("RILL_RETENTION_CHECK_SECS") {
        file.retention_check_secs = Some(parse("RILL_RETENTION_CHECK_SECS", &v)?);
    }
    Ok(())
}

fn load_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

pub(crate) async fn run(args: ServeArgs, data: Option<PathBuf>) -> anyhow::Result<()> {
    let mut file = match &args.config {
        Some(path) => load_file(path)?,
        None => FileConfig::default(),
    };
    apply_env(&mut file, |name| std::env::var(name).ok())?;
    let data = data
        .or(file.data)
        .unwrap_or_else(|| PathBuf::from("./rill-data"));
    let mut broker_config = BrokerConfig::new(&data);
    if let Some(n) = file.max_batch_bytes {
        broker_config.max_batch_bytes = n;
    }
    if let Some(d) = &file.default_durability {
        broker_config.default_durability =
            match crate::admin::parse_durability(d).map_err(anyhow::Error::msg)? {
                rill_client::Durability::Always => DurabilityConfig::Always,
                rill_client::Durability::Never => DurabilityConfig::Never,
                rill_client::Durability::Interval(i) => DurabilityConfig::Interval {
                    ms: i.as_millis() as u64,
                },
            };
    }
    if let Some(s) = file.retention_check_secs {
        broker_config.retention_interval = std::time::Duration::from_secs(s.max(1));
    }
    let mut server_config = ServerConfig::default();
    server_config.listen = args.listen.or(file.listen).unwrap_or(server_config.listen);
    server_config.http = args.http.or(file.http).or(server_config.http);
    if let Some(n) = file.max_connections {
        server_config.max_connections = n;
    }
    if let Some(n) = file.max_in_flight_per_connection {
        server_config.max_in_flight_per_connection = n;
    }
    if let Some(n) = file.max_frame_bytes {
        server_config.max_frame_bytes = n;
    }

    broker_config.max_frame_bytes = server_config.max_frame_bytes;
    let broker = Arc::new(
        tokio::task::spawn_blocking(move || Broker::open(broker_config))
            .await?
            .with_context(|| format!("cannot open data directory {}", data.display()))?,
    );
    let upkeep = tokio::spawn(Arc::clone(&broker).run_upkeep());
    let server = Server::bind(server_config, Arc::clone(&broker))
        .await
        .context("cannot start the server")?;
    tracing::info!(
        listen = %server.local_addr(),
        http = ?server.http_addr(),
        "rill is serving"
    );
    // Scripts read the bound addresses from this line (useful with port 0).
    eprintln!(
        "rill listening on {} (http {})",
        server.local_addr(),
        server.http_addr().map_or("off".into(), |a| a.to_string())
    );
    server
        .run(shutdown_signal())
        .await
        .context("server failed")?;
    upkeep.abort();
    tokio::task::spawn_blocking(move || broker.shutdown())
        .await?
        .context("flushing data at shutdown")?;
    tracing::info!("rill stopped");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_the_file_and_is_validated() {
        let mut file: FileConfig =
            toml::from_str("max_connections = 10\ndefault_durability = \"never\"\n").unwrap();
        let env = |name: &str| match name {
            "RILL_MAX_CONNECTIONS" => Some("20".to_owned()),
            "RILL_DATA" => Some("/tmp/x".to_owned()),
            _ => None,
        };
        apply_env(&mut file, env).unwrap();
        assert_eq!(file.max_connections, Some(20));
        assert_eq!(file.default_durability.as_deref(), Some("never"));
        assert_eq!(file.data, Some(PathBuf::from("/tmp/x")));
        let bad = |name: &str| (name == "RILL_MAX_FRAME_BYTES").then(|| "lots".to_owned());
        let err = apply_env(&mut file, bad).unwrap_err();
        assert!(err.to_string().contains("RILL_MAX_FRAME_BYTES"), "{err}");
        assert!(toml::from_str::<FileConfig>("no_such_key = 1").is_err());
    }
}
