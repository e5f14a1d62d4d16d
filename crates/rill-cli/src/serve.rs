//! `rill serve`: the broker behind the TCP server, until SIGTERM or SIGINT.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rill_broker::{Broker, BrokerConfig};
use rill_server::{Server, ServerConfig};
use serde::Deserialize;

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address of the client protocol listener [default 127.0.0.1:7171]
    #[arg(long, env = "RILL_LISTEN")]
    listen: Option<SocketAddr>,
    /// Address of the HTTP admin endpoint (/health, /metrics, the API, the console)
    /// [default 127.0.0.1:7172]
    #[arg(long, env = "RILL_HTTP")]
    http: Option<SocketAddr>,
    /// A TOML file with settings (flags and RILL_* variables override it)
    #[arg(long, env = "RILL_CONFIG")]
    config: Option<PathBuf>,
    /// In a cluster: this node's id, one of --peers
    #[arg(long, env = "RILL_NODE_ID")]
    node_id: Option<u64>,
    /// In a cluster: every node's node-to-node address, this one's included, as
    /// 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT
    #[arg(long, env = "RILL_PEERS")]
    peers: Option<String>,
    /// Require every connection to authenticate (docs/SECURITY.md); also `auth = true`
    /// in the TOML file
    #[arg(long)]
    auth: bool,
    /// With --auth and no user yet: make the first admin, `admin`, with the password on
    /// this file's first line (or from RILL_ADMIN_PASSWORD)
    #[arg(long, value_name = "FILE")]
    admin_password_file: Option<PathBuf>,
    /// Serve a non-loopback address without --auth all the same (anyone who reaches it
    /// can read, write and delete every stream)
    #[arg(long)]
    insecure: bool,
    /// Serve the writes of the HTTP admin API (topic create, change and delete, group and
    /// consumer resets; the broker still authorizes each); without it they are refused
    /// with 403. Also `http_admin_writes = true` in the TOML file [env
    /// RILL_HTTP_ADMIN_WRITES]
    #[arg(long)]
    http_admin_writes: bool,
    /// Speak TLS only, on the client port and the HTTP port, with this certificate
    /// chain (PEM, leaf first); re-read on SIGHUP. Also `tls_cert` in the TOML file
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM). Also `tls_key`
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require a client certificate signed by this CA (PEM); one whose subject common
    /// name is a user authenticates as that user. Also `tls_client_ca`
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Threads that run the server's requests (1-1024) [default: one per CPU the
    /// process may use]. Also `workers` in the TOML file
    #[arg(long, env = "RILL_WORKERS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=WORKERS_MAX))]
    workers: Option<u16>,
}

/// Most worker threads `--workers` (or `workers`) may ask for.
const WORKERS_MAX: i64 = 1024;

/// The worker threads `serve` runs on, if set: `--workers` (or `RILL_WORKERS`), else
/// the config file's `workers`; `None` leaves tokio's default, one per CPU. Read before
/// the runtime starts, so this reads the file on its own (`run` reads it again).
pub(crate) fn workers(args: &ServeArgs) -> anyhow::Result<Option<usize>> {
    if let Some(n) = args.workers {
        return Ok(Some(usize::from(n)));
    }
    let Some(path) = &args.config else {
        return Ok(None);
    };
    let file = load_file(path)?;
    match file.workers {
        None => Ok(None),
        Some(n) if (1..=WORKERS_MAX).contains(&i64::from(n)) => Ok(Some(n as usize)),
        Some(n) => anyhow::bail!(
            "invalid config file {}: workers = {n}, but it must be 1 to {WORKERS_MAX}",
            path.display()
        ),
    }
}

/// `--peers`: node ids and their node-to-node addresses.
pub(crate) fn parse_peers(text: &str) -> anyhow::Result<std::collections::BTreeMap<u64, String>> {
    let mut peers = std::collections::BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--peers: {item:?} is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--peers: the node id {id:?} is not a number"))?;
        let addr = addr.trim();
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| anyhow::anyhow!("--peers: {addr:?} has no :PORT"))?;
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            anyhow::bail!("--peers: {addr:?} is not HOST:PORT with a port 1-65535");
        }
        if peers.insert(id, addr.to_owned()).is_some() {
            anyhow::bail!("--peers: node {id} is named twice");
        }
    }
    if peers.is_empty() {
        anyhow::bail!("--peers names no node");
    }
    Ok(peers)
}

/// Settings from the TOML file; every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data: Option<PathBuf>,
    node_id: Option<u64>,
    /// As `--peers`: "1=HOST:PORT,2=HOST:PORT,…".
    peers: Option<String>,
    listen: Option<SocketAddr>,
    http: Option<SocketAddr>,
    max_connections: Option<usize>,
    max_in_flight_per_connection: Option<usize>,
    max_frame_bytes: Option<u32>,
    max_batch_bytes: Option<u32>,
    connection_buffer_bytes_max: Option<usize>,
    buffer_bytes_max: Option<usize>,
    write_timeout_ms: Option<u64>,
    /// Milliseconds, or "off".
    idle_timeout_ms: Option<OrOff>,
    files_reserved: Option<usize>,
    /// always | never | interval:MS
    default_durability: Option<String>,
    retention_check_secs: Option<u64>,
    max_timestamp_ahead_ms: Option<u64>,
    producer_batches_remembered: Option<usize>,
    open_files_max: Option<usize>,
    reserved_space_bytes: Option<u64>,
    /// Bytes, or "off".
    cache_tail_bytes: Option<OrOff>,
    /// As `--auth`.
    auth: Option<bool>,
    /// As `--http-admin-writes`.
    http_admin_writes: Option<bool>,
    /// PBKDF2 iterations of SCRAM verifiers the server makes (4,096-1,000,000).
    scram_iterations: Option<u32>,
    /// As `--tls-cert`, `--tls-key` and `--tls-client-ca`.
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    /// As `--workers`.
    workers: Option<u32>,
}

/// A setting that can be turned off: a number (milliseconds, bytes), or the word `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OrOff {
    N(u64),
    Off,
}

impl OrOff {
    fn duration(self) -> Option<Duration> {
        self.number().map(Duration::from_millis)
    }

    fn number(self) -> Option<u64> {
        match self {
            OrOff::N(n) => Some(n),
            OrOff::Off => None,
        }
    }
}

impl std::str::FromStr for OrOff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "off" {
            return Ok(OrOff::Off);
        }
        s.trim()
            .parse()
            .map(OrOff::N)
            .map_err(|e| format!("{e} (a number, or \"off\")"))
    }
}

impl<'de> Deserialize<'de> for OrOff {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(OrOff::N(n)),
            Raw::Word(word) => word.parse().map_err(serde::de::Error::custom),
        }
    }
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
    if let Some(v) = env("RILL_CONNECTION_BUFFER_BYTES_MAX") {
        file.connection_buffer_bytes_max = Some(parse("RILL_CONNECTION_BUFFER_BYTES_MAX", &v)?);
    }
    if let Some(v) = env("RILL_BUFFER_BYTES_MAX") {
        file.buffer_bytes_max = Some(parse("RILL_BUFFER_BYTES_MAX", &v)?);
    }
    if let Some(v) = env("RILL_WRITE_TIMEOUT_MS") {
        file.write_timeout_ms = Some(parse("RILL_WRITE_TIMEOUT_MS", &v)?);
    }
    if let Some(v) = env("RILL_IDLE_TIMEOUT_MS") {
        file.idle_timeout_ms = Some(parse("RILL_IDLE_TIMEOUT_MS", &v)?);
    }
    if let Some(v) = env("RILL_FILES_RESERVED") {
        file.files_reserved = Some(parse("RILL_FILES_RESERVED", &v)?);
    }
    if let Some(v) = env("RILL_DEFAULT_DURABILITY") {
        parse::<rill_storage::Durability>("RILL_DEFAULT_DURABILITY", &v)?;
        file.default_durability = Some(v);
    }
    if let Some(v) = env("RILL_RETENTION_CHECK_SECS") {
        file.retention_check_secs = Some(parse("RILL_RETENTION_CHECK_SECS", &v)?);
    }
    if let Some(v) = env("RILL_MAX_TIMESTAMP_AHEAD_MS") {
        file.max_timestamp_ahead_ms = Some(parse("RILL_MAX_TIMESTAMP_AHEAD_MS", &v)?);
    }
    if let Some(v) = env("RILL_PRODUCER_BATCHES_REMEMBERED") {
        file.producer_batches_remembered = Some(parse("RILL_PRODUCER_BATCHES_REMEMBERED", &v)?);
    }
    if let Some(v) = env("RILL_OPEN_FILES_MAX") {
        file.open_files_max = Some(parse("RILL_OPEN_FILES_MAX", &v)?);
    }
    if let Some(v) = env("RILL_RESERVED_SPACE_BYTES") {
        file.reserved_space_bytes = Some(parse("RILL_RESERVED_SPACE_BYTES", &v)?);
    }
    if let Some(v) = env("RILL_CACHE_TAIL_BYTES") {
        file.cache_tail_bytes = Some(parse("RILL_CACHE_TAIL_BYTES", &v)?);
    }
    if let Some(v) = env("RILL_HTTP_ADMIN_WRITES") {
        file.http_admin_writes = Some(parse("RILL_HTTP_ADMIN_WRITES", &v)?);
    }
    Ok(())
}

/// The broker's settings from the file (and the environment), checked before the data
/// directory opens.
fn broker_config(
    file: &FileConfig,
    data: &Path,
    max_frame_bytes: u32,
) -> anyhow::Result<BrokerConfig> {
    let mut config = BrokerConfig::new(data);
    if let Some(n) = file.max_batch_bytes {
        config.max_batch_bytes = n;
    }
    if let Some(d) = &file.default_durability {
        config.default_durability = d.parse()?;
    }
    if let Some(s) = file.retention_check_secs {
        config.retention_interval = Duration::from_secs(s.max(1));
    }
    if let Some(ms) = file.max_timestamp_ahead_ms {
        config.max_timestamp_ahead = Duration::from_millis(ms);
    }
    if let Some(n) = file.producer_batches_remembered {
        config.producer_batches_remembered = n;
    }
    if let Some(n) = file.open_files_max {
        config.open_files_max = n;
    }
    if let Some(n) = file.reserved_space_bytes {
        config.reserved_space_bytes = n;
    }
    if let Some(t) = file.cache_tail_bytes {
        config.cache_tail_bytes = t.number();
    }
    if let Some(n) = file.scram_iterations {
        rill_auth::password::check_iterations(n).map_err(|e| anyhow::anyhow!("{e}"))?;
        config.scram_iterations = n;
    }
    config.max_frame_bytes = max_frame_bytes;
    config.validate()?;
    Ok(config)
}

/// docs/SECURITY.md §6: a non-loopback listener needs `--auth` (or `--insecure`); with
/// `--auth` and no TLS it is served with a warning.
fn check_exposure(server: &ServerConfig, auth: bool, insecure: bool) -> anyhow::Result<()> {
    let exposed: Vec<SocketAddr> = std::iter::once(server.listen)
        .chain(server.http)
        .filter(|a| !a.ip().is_loopback())
        .collect();
    let Some(first) = exposed.first() else {
        return Ok(());
    };
    if !auth && !insecure {
        anyhow::bail!(
            "refusing to serve {first} to the network without --auth (anyone could read, write and delete every stream); pass --auth, or --insecure to do it anyway"
        );
    }
    if auth && server.tls.is_none() {
        tracing::warn!(
            address = %first,
            "serving a non-loopback address without TLS: tokens and data cross the network in clear (SCRAM keeps passwords off the wire)"
        );
    } else if !auth {
        tracing::warn!(address = %first, "serving a non-loopback address without authentication (--insecure)");
    }
    Ok(())
}

/// The first admin's password, from `--admin-password-file` (its first line) or
/// `RILL_ADMIN_PASSWORD`.
fn admin_password(file: Option<&Path>) -> anyhow::Result<Option<rill_auth::Secret>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --admin-password-file {}", path.display()))?;
        let line = text.lines().next().unwrap_or("");
        return Ok(Some(rill_auth::Secret::new(line)));
    }
    Ok(std::env::var("RILL_ADMIN_PASSWORD")
        .ok()
        .map(rill_auth::Secret::new))
}

/// With `--auth`: makes the first admin if there is no user, or refuses to start if
/// there is none and no password to make one with. On a cluster node the credentials
/// are the cluster's (docs/SECURITY.md §2.3), and the metadata group may have no
/// quorum yet: a task offers the node's own `auth.json`, then makes the first admin if
/// the cluster has no user, retrying until the cluster answers.
async fn ensure_admin(
    broker: &Arc<Broker>,
    password_file: Option<&Path>,
    data: &Path,
) -> anyhow::Result<()> {
    if !broker.auth_required() {
        return Ok(());
    }
    let password = admin_password(password_file)?;
    if broker.is_clustered() {
        let weak = Arc::downgrade(broker);
        tokio::spawn(async move {
            let mut warned = false;
            // Ends when the broker is gone (the server stopped).
            while let Some(b) = weak.upgrade() {
                let (b2, pw) = (Arc::clone(&b), password.clone());
                let done = tokio::task::spawn_blocking(
                    move || -> Result<bool, rill_broker::BrokerError> {
                        b2.adopt_local_auth()?;
                        match pw {
                            Some(pw) if !b2.has_users() => b2.bootstrap_admin(&pw),
                            _ => Ok(false),
                        }
                    },
                )
                .await;
                match done {
                    Ok(Ok(made)) => {
                        if made {
                            tracing::info!("made the cluster's first admin, `admin`");
                        } else if !b.has_users() {
                            tracing::warn!(
                                "--auth and no user known yet: this node takes the cluster's users once they are made (pass --admin-password-file to make the first admin)"
                            );
                        }
                        return;
                    }
                    Ok(Err(e)) if !warned => {
                        warned = true;
                        tracing::warn!(error = %e, "cannot reach the cluster to settle its users yet; retrying");
                    }
                    Ok(Err(_)) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "settling the cluster's users failed");
                        return;
                    }
                }
                drop(b);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        return Ok(());
    }
    if broker.has_users() {
        return Ok(());
    }
    let Some(password) = password else {
        anyhow::bail!(
            "--auth needs a user and {} has none: pass --admin-password-file FILE or set RILL_ADMIN_PASSWORD to make the first admin, or run `rill user create admin --role admin --data {}` before starting",
            data.display(),
            data.display()
        );
    };
    let b = Arc::clone(broker);
    let made = tokio::task::spawn_blocking(move || b.bootstrap_admin(&password))
        .await?
        .context("cannot make the first admin")?;
    if made {
        tracing::info!("made the first admin, `admin`");
    }
    Ok(())
}

fn load_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

/// The server's settings: defaults, overridden by the file (and the environment, which
/// `apply_env` has folded into it), then by the flags; checked before anything opens.
fn server_config(args: &ServeArgs, file: &FileConfig) -> anyhow::Result<ServerConfig> {
    let mut config = ServerConfig::default();
    config.listen = args.listen.or(file.listen).unwrap_or(config.listen);
    config.http = args.http.or(file.http).or(config.http);
    if let Some(n) = file.max_connections {
        config.max_connections = n;
    }
    if let Some(n) = file.max_in_flight_per_connection {
        config.max_in_flight_per_connection = n;
    }
    if let Some(n) = file.max_frame_bytes {
        config.max_frame_bytes = n;
    }
    if let Some(n) = file.connection_buffer_bytes_max {
        config.connection_buffer_bytes_max = n;
    }
    if let Some(n) = file.buffer_bytes_max {
        config.buffer_bytes_max = n;
    }
    if let Some(ms) = file.write_timeout_ms {
        config.write_timeout = Duration::from_millis(ms);
    }
    match file.idle_timeout_ms {
        Some(OrOff::N(0)) => {
            anyhow::bail!("idle_timeout_ms must be positive (\"off\" turns the timeout off)")
        }
        Some(t) => config.idle_timeout = t.duration(),
        None => {}
    }
    if let Some(n) = file.files_reserved {
        config.files_reserved = n;
    }
    let cert = args.tls_cert.clone().or_else(|| file.tls_cert.clone());
    let key = args.tls_key.clone().or_else(|| file.tls_key.clone());
    let client_ca = args
        .tls_client_ca
        .clone()
        .or_else(|| file.tls_client_ca.clone());
    config.tls = match (cert, key) {
        (Some(cert), Some(key)) => Some(rill_server::TlsSettings {
            cert,
            key,
            client_ca,
        }),
        (None, None) if client_ca.is_some() => {
            anyhow::bail!("tls_client_ca needs tls_cert and tls_key")
        }
        (None, None) => None,
        (Some(_), None) => anyhow::bail!("tls_cert needs tls_key"),
        (None, Some(_)) => anyhow::bail!("tls_key needs tls_cert"),
    };
    config.http_admin_writes = args.http_admin_writes || file.http_admin_writes.unwrap_or(false);
    config.validate()?;
    Ok(config)
}

/// Descriptors kept for the files of topics created while the server runs (three per
/// partition), on top of the broker's sealed-segment cache.
const FILES_FOR_NEW_TOPICS: usize = 256;

/// Raises the soft limit on open files to the hard limit: every connection costs a
/// descriptor, and the server derives its connection limit from what is left.
fn raise_fd_limit() {
    #[cfg(unix)]
    {
        let before = match rlimit::getrlimit(rlimit::Resource::NOFILE) {
            Ok((soft, _)) => soft,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the open-files limit");
                return;
            }
        };
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(after) if after > before => {
                tracing::info!(before, after, "raised the open-files limit (RLIMIT_NOFILE)");
            }
            Ok(after) => tracing::info!(limit = after, "open-files limit (RLIMIT_NOFILE)"),
            Err(e) => {
                tracing::warn!(before, error = %e, "cannot raise the open-files limit");
            }
        }
    }
}

pub(crate) async fn run(args: ServeArgs, data: Option<PathBuf>) -> anyhow::Result<()> {
    let mut file = match &args.config {
        Some(path) => load_file(path)?,
        None => FileConfig::default(),
    };
    apply_env(&mut file, |name| std::env::var(name).ok())?;
    let server_config = server_config(&args, &file).context("invalid server settings")?;
    raise_fd_limit();
    // Registered before the server counts its descriptors, and before it serves.
    let shutdown = shutdown_signal();
    let data = data
        .or_else(|| file.data.clone())
        .unwrap_or_else(|| PathBuf::from("./rill-data"));
    crate::target::check_data_dir(&data, true)?;
    // A directory this start makes is removed again if the start fails.
    let mut made = MadeDir::new(&data);
    let mut broker_config = broker_config(&file, &data, server_config.max_frame_bytes)
        .context("invalid broker settings")?;
    let auth = args.auth || file.auth.unwrap_or(false);
    broker_config.auth_required = auth;
    check_exposure(&server_config, auth, args.insecure)?;
    let mut server_config = server_config;
    if file.files_reserved.is_none() {
        // What the broker may still open beyond what it holds when the server counts:
        // its whole sealed-segment cache (it fills as reads reach old segments) and
        // room for the files of topics created later.
        server_config.files_reserved = broker_config.open_files_max + FILES_FOR_NEW_TOPICS;
    }
    let node_id = args.node_id.or(file.node_id);
    let peers = args.peers.clone().or_else(|| file.peers.clone());
    let cluster = match (node_id, peers) {
        (None, None) => None,
        (Some(id), Some(peers)) => {
            let node = start_node(id, &parse_peers(&peers)?, &data, &broker_config).await?;
            // A started node is a voter of the metadata group: from now on it may have
            // granted a vote, or acknowledged an entry, that the others count on, so
            // its directory stays even if the start fails below. Removed, it would
            // come back knowing nothing, and could vote twice in one term.
            made.keep();
            Some(node)
        }
        (Some(_), None) => {
            anyhow::bail!("--node-id needs --peers (every node's node-to-node address)")
        }
        (None, Some(_)) => anyhow::bail!("--peers needs --node-id (this node's id among them)"),
    };
    let broker = match &cluster {
        None => Arc::new(
            tokio::task::spawn_blocking(move || Broker::open(broker_config))
                .await?
                .with_context(|| format!("cannot open data directory {}", data.display()))?,
        ),
        Some(node) => Broker::open_clustered(
            broker_config,
            Arc::new(rill_cluster::serving::NodeCluster::new(node.clone())),
        )
        .with_context(|| format!("cannot open data directory {}", data.display()))?,
    };
    ensure_admin(
        &broker,
        args.admin_password_file.as_deref(),
        &broker.config().data_dir,
    )
    .await?;
    let server = match Server::bind(server_config, Arc::clone(&broker)).await {
        Ok(server) => server,
        Err(e) => {
            if let Some(node) = &cluster {
                node.shutdown().await;
            }
            let b = Arc::clone(&broker);
            let _closed = tokio::task::spawn_blocking(move || b.shutdown()).await;
            return Err(anyhow::Error::new(e).context("cannot start the server"));
        }
    };
    made.keep();
    let upkeep = tokio::spawn(Arc::clone(&broker).run_upkeep());
    if let Some(node) = &cluster {
        node.register_client(server.local_addr().to_string());
    }
    if let Some(tls) = server.tls() {
        reload_on_sighup(tls);
    }
    tracing::info!(
        max_connections = server.max_connections(),
        "connections at most"
    );
    tracing::info!(
        workers = tokio::runtime::Handle::current().metrics().num_workers(),
        "worker threads"
    );
    // Scripts read the bound addresses from this line (useful with port 0).
    eprintln!(
        "rill listening on {} (http {})",
        server.local_addr(),
        server.http_addr().map_or("off".into(), |a| a.to_string())
    );
    server.run(shutdown).await.context("server failed")?;
    upkeep.abort();
    if let Some(node) = &cluster {
        node.shutdown().await;
    }
    tokio::task::spawn_blocking(move || broker.shutdown())
        .await?
        .context("flushing data at shutdown")?;
    tracing::info!("rill stopped");
    Ok(())
}

/// A data directory that did not exist before `serve` started: removed when dropped
/// unless [`MadeDir::keep`] was called, so a start that fails (a port in use) leaves
/// nothing behind. A cluster node's is kept once the node started (its votes).
struct MadeDir(Option<PathBuf>);

impl MadeDir {
    fn new(data: &Path) -> Self {
        Self((!data.exists()).then(|| data.to_path_buf()))
    }

    fn keep(&mut self) {
        self.0 = None;
    }
}

impl Drop for MadeDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take()
            && let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the data directory this failed start made");
        }
    }
}

/// Starts this process's cluster node: binds its node-to-node listener on its
/// `--peers` address and joins the metadata group.
async fn start_node(
    id: u64,
    peers: &std::collections::BTreeMap<u64, String>,
    data: &Path,
    broker_config: &BrokerConfig,
) -> anyhow::Result<rill_cluster::node::ClusterNode> {
    let own = peers.get(&id).ok_or_else(|| {
        anyhow::anyhow!(
            "--node-id {id} is not one of the nodes of --peers ({})",
            peers
                .keys()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let listener = tokio::net::TcpListener::bind(own)
        .await
        .with_context(|| format!("cannot listen for peers on {own}"))?;
    let max_batch_bytes = broker_config.max_batch_bytes;
    let ahead = broker_config.max_timestamp_ahead;
    let cache_tail = broker_config.cache_tail_bytes;
    let log_config: rill_cluster::node::LogConfigFn = Arc::new(move |options: &[u8]| {
        let topic: rill_broker::TopicConfig = serde_json::from_slice(options).unwrap_or_else(|e| {
            tracing::error!(error = %e, "a topic's options do not decode: using the defaults");
            rill_broker::TopicConfig::with_partitions(1, rill_storage::Durability::Always)
        });
        let mut log = topic.log_config(max_batch_bytes);
        log.timestamp_ahead_max = ahead;
        log.cache_tail_bytes = cache_tail;
        log
    });
    let env = rill_storage::LogEnv::new(
        Arc::clone(&broker_config.io),
        Arc::new(rill_storage::SystemClock),
    )
    .with_files(Arc::new(rill_storage::FileCache::new(
        broker_config.open_files_max,
    )));
    let config = rill_cluster::node::NodeConfig {
        id,
        peers: peers.clone(),
        data_dir: data.to_path_buf(),
        timing: rill_cluster::node::default_timing(),
        env,
        log_config,
    };
    let node = rill_cluster::node::ClusterNode::start(config, listener)
        .await
        .context("cannot start the cluster node")?;
    let shown: Vec<String> = peers.iter().map(|(n, a)| format!("{n}={a}")).collect();
    tracing::info!(node = id, peers = %shown.join(","), "cluster node started");
    eprintln!(
        "rill node {id} of a cluster of {} (peers on {own})",
        peers.len()
    );
    Ok(node)
}

/// Reads the TLS files again on every SIGHUP (docs/SECURITY.md §5): new connections use
/// them, open ones keep theirs, and files that do not load leave the old ones in force.
fn reload_on_sighup(tls: Arc<rill_server::Tls>) {
    #[cfg(unix)]
    {
        let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(hup) => hup,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGHUP: TLS files will not reload");
                return;
            }
        };
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let tls = Arc::clone(&tls);
                match tokio::task::spawn_blocking(move || tls.reload()).await {
                    Ok(Ok(())) => tracing::info!("SIGHUP: reloaded the TLS certificate"),
                    Ok(Err(e)) => tracing::error!(
                        error = %e,
                        "SIGHUP: the TLS files do not load; the previous certificate stays in force"
                    ),
                    Err(e) => tracing::error!(error = %e, "SIGHUP: the TLS reload failed"),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = tls;
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed now, not when it is first
/// polled, so their descriptors are open before the server counts them.
fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .inspect_err(|e| tracing::error!(error = %e, "cannot listen for SIGTERM"))
        .ok();
    async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        match term {
            Some(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            None => {
                let _ = ctrl_c.await;
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutting down");
    }
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

    fn args() -> ServeArgs {
        ServeArgs {
            listen: None,
            http: None,
            config: None,
            node_id: None,
            peers: None,
            auth: false,
            admin_password_file: None,
            insecure: false,
            http_admin_writes: false,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            workers: None,
        }
    }

    #[test]
    fn tls_files_come_from_flags_or_the_file_in_pairs() {
        let file: FileConfig =
            toml::from_str("tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n").unwrap();
        let tls = server_config(&args(), &file).unwrap().tls.unwrap();
        assert_eq!(tls.cert, PathBuf::from("/c.pem"));
        assert_eq!(tls.client_ca, None);
        let mut flags = args();
        flags.tls_cert = Some("/flag.pem".into());
        assert_eq!(
            server_config(&flags, &file).unwrap().tls.unwrap().cert,
            PathBuf::from("/flag.pem")
        );
        for text in [
            "tls_cert = \"/c\"",
            "tls_key = \"/k\"",
            "tls_client_ca = \"/ca\"",
        ] {
            let file: FileConfig = toml::from_str(text).unwrap();
            assert!(server_config(&args(), &file).is_err(), "{text}");
        }
        assert!(
            server_config(&args(), &FileConfig::default())
                .unwrap()
                .tls
                .is_none()
        );
    }

    #[test]
    fn a_non_loopback_listener_needs_auth_or_insecure() {
        let mut config = ServerConfig::default();
        check_exposure(&config, false, false).unwrap();
        config.listen = "0.0.0.0:7171".parse().unwrap();
        let e = check_exposure(&config, false, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("refusing to serve 0.0.0.0:7171 to the network without --auth"),
            "{e}"
        );
        check_exposure(&config, true, false).unwrap();
        check_exposure(&config, false, true).unwrap();
        // The HTTP port counts too.
        let config = ServerConfig {
            http: Some("[::]:7172".parse().unwrap()),
            ..ServerConfig::default()
        };
        assert!(check_exposure(&config, false, false).is_err());
    }

    #[test]
    fn buffer_timeout_and_file_settings_reach_the_server_config() {
        let mut file: FileConfig = toml::from_str(
            "connection_buffer_bytes_max = 100000000\nidle_timeout_ms = \"off\"\n\
             write_timeout_ms = 5000\nfiles_reserved = 16\n",
        )
        .unwrap();
        let env = |name: &str| (name == "RILL_BUFFER_BYTES_MAX").then(|| "200000000".to_owned());
        apply_env(&mut file, env).unwrap();
        let config = server_config(&args(), &file).unwrap();
        assert_eq!(config.connection_buffer_bytes_max, 100_000_000);
        assert_eq!(config.buffer_bytes_max, 200_000_000);
        assert_eq!(config.idle_timeout, None);
        assert_eq!(config.write_timeout, Duration::from_secs(5));
        assert_eq!(config.files_reserved, 16);

        let defaults = server_config(&args(), &FileConfig::default()).unwrap();
        assert_eq!(defaults.idle_timeout, Some(Duration::from_secs(600)));
        let env = |name: &str| (name == "RILL_IDLE_TIMEOUT_MS").then(|| "1500".to_owned());
        let mut file = FileConfig::default();
        apply_env(&mut file, env).unwrap();
        let config = server_config(&args(), &file).unwrap();
        assert_eq!(config.idle_timeout, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn the_cache_tail_is_bytes_or_off_from_the_file_or_the_environment() {
        let dir = Path::new("/tmp/unused");
        let defaults = broker_config(&FileConfig::default(), dir, 1 << 20).unwrap();
        assert_eq!(defaults.cache_tail_bytes, Some(2 << 30));
        let file: FileConfig = toml::from_str("cache_tail_bytes = 1048576\n").unwrap();
        let config = broker_config(&file, dir, 1 << 20).unwrap();
        assert_eq!(config.cache_tail_bytes, Some(1 << 20));
        let file: FileConfig = toml::from_str("cache_tail_bytes = \"off\"\n").unwrap();
        let config = broker_config(&file, dir, 1 << 20).unwrap();
        assert_eq!(config.cache_tail_bytes, None);
        let mut file = FileConfig::default();
        let env = |name: &str| (name == "RILL_CACHE_TAIL_BYTES").then(|| "off".to_owned());
        apply_env(&mut file, env).unwrap();
        assert_eq!(
            broker_config(&file, dir, 1 << 20).unwrap().cache_tail_bytes,
            None
        );
        let bad = |name: &str| (name == "RILL_CACHE_TAIL_BYTES").then(|| "lots".to_owned());
        let e = apply_env(&mut FileConfig::default(), bad).unwrap_err();
        assert!(e.to_string().contains("RILL_CACHE_TAIL_BYTES"), "{e}");
        assert!(toml::from_str::<FileConfig>("cache_tail_bytes = \"some\"\n").is_err());
    }

    #[test]
    fn http_admin_writes_come_from_the_flag_the_environment_or_the_file() {
        let off = server_config(&args(), &FileConfig::default()).unwrap();
        assert!(!off.http_admin_writes);
        let mut flag = args();
        flag.http_admin_writes = true;
        assert!(
            server_config(&flag, &FileConfig::default())
                .unwrap()
                .http_admin_writes
        );
        let file: FileConfig = toml::from_str("http_admin_writes = true\n").unwrap();
        assert!(server_config(&args(), &file).unwrap().http_admin_writes);
        let mut file = FileConfig::default();
        let env = |name: &str| (name == "RILL_HTTP_ADMIN_WRITES").then(|| "true".to_owned());
        apply_env(&mut file, env).unwrap();
        assert!(server_config(&args(), &file).unwrap().http_admin_writes);
        let bad = |name: &str| (name == "RILL_HTTP_ADMIN_WRITES").then(|| "yes please".to_owned());
        let e = apply_env(&mut FileConfig::default(), bad).unwrap_err();
        assert!(e.to_string().contains("RILL_HTTP_ADMIN_WRITES"), "{e}");
    }

    #[test]
    fn peers_parse_and_bad_ones_are_refused_with_the_reason() {
        let peers = parse_peers("1=127.0.0.1:7301, 2=host-b:7302,3=[::1]:7303").unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[&2], "host-b:7302");
        assert_eq!(peers[&3], "[::1]:7303");
        for (bad, says) in [
            ("", "names no node"),
            ("1=a:1,1=b:2", "named twice"),
            ("x=a:1", "not a number"),
            ("1=a", "no :PORT"),
            ("1=a:0", "port 1-65535"),
            ("1=:5", "port 1-65535"),
            ("1a:5", "ID=HOST:PORT"),
        ] {
            let e = parse_peers(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let file: FileConfig = toml::from_str("node_id = 2\npeers = \"1=a:1,2=b:2\"\n").unwrap();
        assert_eq!(file.node_id, Some(2));
    }

    #[test]
    fn bad_buffer_and_timeout_settings_are_refused() {
        let refused = |toml_text: &str| {
            let file: FileConfig = toml::from_str(toml_text).unwrap();
            server_config(&args(), &file).unwrap_err().to_string()
        };
        // Smaller than a 64 MiB frame.
        let e = refused("connection_buffer_bytes_max = 1000");
        assert!(e.contains("connection_buffer_bytes_max"), "{e}");
        let e = refused("buffer_bytes_max = 1000");
        assert!(e.contains("buffer_bytes_max"), "{e}");
        let e = refused("write_timeout_ms = 0");
        assert!(e.contains("write_timeout"), "{e}");
        let e = refused("idle_timeout_ms = 0");
        assert!(e.contains("\"off\""), "{e}");
        assert!(toml::from_str::<FileConfig>("idle_timeout_ms = \"never\"").is_err());
        let bad = |name: &str| (name == "RILL_IDLE_TIMEOUT_MS").then(|| "soon".to_owned());
        let e = apply_env(&mut FileConfig::default(), bad).unwrap_err();
        assert!(e.to_string().contains("RILL_IDLE_TIMEOUT_MS"), "{e}");
    }
}
