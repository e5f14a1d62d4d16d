//! Listeners, accept loops, the connection limit, and graceful shutdown.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rill_broker::Broker;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::budget::Pool;
use crate::connection::{self, Context, Phase};
use crate::fds::{self, Spare};
use crate::{Metrics, ServerConfig, ServerError, Tls, http};

/// Admin HTTP connections served at once; more are closed unanswered. Their file
/// descriptors are kept out of the connection limit.
const HTTP_CONNECTIONS_MAX: usize = 64;
/// After the drain timeout, how long cancelled requests get to send their
/// `SHUTTING_DOWN` replies before connections are dropped outright.
const CUT_GRACE: Duration = Duration::from_secs(1);
/// Pause after a failed `accept` (typically out of file descriptors), so the loop does
/// not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A bound Rill server: the protocol listener and, optionally, the HTTP admin listener.
///
/// [`Server::bind`] reserves the sockets (so a caller can learn the real ports before
/// serving); [`Server::run`] serves until its shutdown future resolves.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    broker: Arc<Broker>,
    listener: TcpListener,
    http: Option<TcpListener>,
    local_addr: SocketAddr,
    http_addr: Option<SocketAddr>,
    metrics: Arc<Metrics>,
    /// The connection limit in force (see [`Server::max_connections`]).
    max_connections: usize,
    /// Given up when an accept on the protocol listener runs out of descriptors.
    spare: Spare,
    /// The same for the admin listener, so a stalled admin client cannot take the
    /// protocol listener's.
    http_spare: Spare,
    /// TLS on both listeners, if configured.
    tls: Option<Arc<Tls>>,
}

impl Server {
    /// Checks `config`, binds both listeners (port 0 picks a free port) and derives the
    /// connection limit from the file descriptors left (see
    /// [`max_connections`](Self::max_connections)). Call it after the broker has opened
    /// its files, so they are counted.
    ///
    /// Fails with [`ServerError::InvalidConfig`] for an out-of-range bound,
    /// [`ServerError::Bind`] if an address cannot be bound, and
    /// [`ServerError::TooFewFiles`] if the descriptor limit leaves no room for a
    /// connection.
    pub async fn bind(config: ServerConfig, broker: Arc<Broker>) -> Result<Server, ServerError> {
        config.validate()?;
        let tls = match &config.tls {
            Some(settings) => Some(Arc::new(Tls::load(settings.clone())?)),
            None => None,
        };
        let listener = bind(config.listen).await?;
        let local_addr = listener.local_addr()?;
        let http = match config.http {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let http_addr = http.as_ref().map(TcpListener::local_addr).transpose()?;
        let spare = Spare::open();
        let http_spare = Spare::open();
        // Everything open by now is counted; what is reserved covers what opens later.
        let http_fds = if http.is_some() {
            HTTP_CONNECTIONS_MAX
        } else {
            0
        };
        let reserved = http_fds + fds::FDS_SLACK + config.files_reserved;
        let usage = fds::usage();
        let max_connections = fds::connection_limit(config.max_connections, usage, reserved)?;
        if let Some(usage) = usage {
            if max_connections < config.max_connections {
                tracing::warn!(
                    max_connections,
                    configured = config.max_connections,
                    fd_limit = usage.limit,
                    fds_open = usage.open,
                    fds_reserved = reserved,
                    "the file-descriptor limit lowers the connection limit \
                     (raise RLIMIT_NOFILE to allow more)"
                );
            } else {
                tracing::debug!(
                    max_connections,
                    fd_limit = usage.limit,
                    fds_open = usage.open,
                    "the connection limit fits the file-descriptor limit"
                );
            }
        }
        let metrics = Arc::new(Metrics::new());
        metrics.attach_broker(Arc::clone(&broker));
        metrics.set_connections_max(max_connections);
        Ok(Server {
            config,
            broker,
            listener,
            http,
            local_addr,
            http_addr,
            metrics,
            max_connections,
            spare,
            http_spare,
            tls,
        })
    }

    /// The TLS configuration in force, if the server speaks TLS: call
    /// [`Tls::reload`] on it (on SIGHUP) to read the files again.
    pub fn tls(&self) -> Option<Arc<Tls>> {
        self.tls.clone()
    }

    /// The connection limit in force: the configured `max_connections`, lowered (on
    /// Linux) so that a connection over the limit can still be accepted and answered
    /// `BUSY` before the process runs out of file descriptors. What is left of the soft
    /// `RLIMIT_NOFILE` after the descriptors open at [`bind`](Self::bind) is kept for
    /// the admin connections, a few spares and `files_reserved`.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// The protocol listener's address, with the real port when bound on port 0.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The HTTP admin listener's address, if it is enabled.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The server's metrics (what `GET /metrics` serves); the handle stays valid after
    /// the server stops.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Serves until `shutdown` resolves. Then it stops accepting, stops reading new
    /// requests, lets the requests in flight finish and their responses be written (for
    /// at most `drain_timeout`), closes every connection and returns.
    ///
    /// It does not shut the broker down: the caller does, after this returns.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let Server {
            config,
            broker,
            listener,
            http,
            local_addr,
            http_addr,
            metrics,
            max_connections,
            mut spare,
            mut http_spare,
            tls,
        } = self;
        let buffer = Arc::new(Pool::new(config.buffer_bytes_max));
        metrics.attach_buffer(Arc::clone(&buffer) as Arc<dyn rill_http::BufferGauge>);
        let ctx = Arc::new(Context {
            broker,
            metrics: Arc::clone(&metrics),
            max_frame_bytes: config.max_frame_bytes,
            max_in_flight: config.max_in_flight_per_connection,
            idle_timeout: config.idle_timeout,
            write_timeout: config.write_timeout,
            connection_buffer_bytes_max: config.connection_buffer_bytes_max,
            buffer,
            tls: tls.clone(),
        });
        let http_app = rill_http::HttpApp::new(
            Arc::clone(&ctx.broker),
            Arc::clone(&metrics),
            rill_http::HttpSettings {
                client_addr: local_addr,
                http_addr,
                tls: tls.is_some(),
                admin_writes: config.http_admin_writes,
            },
        );
        // The rates of the admin API: sampled while the HTTP port serves.
        let sampler = http.is_some().then(|| {
            let app = http_app.clone();
            tokio::spawn(async move { app.run_sampler().await })
        });
        let connection_limit = Arc::new(Semaphore::new(max_connections));
        let http_limit = Arc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
        let (phase_tx, phase_rx) = watch::channel(Phase::Running);
        let mut connections = JoinSet::new();
        let mut admin = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        // At debug: `rill serve` prints the one line that says where it listens.
        let http_shown = http_addr.map_or_else(|| "off".to_owned(), |a| a.to_string());
        tracing::debug!(addr = %local_addr, http = %http_shown, "accepting connections");

        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    // Out of descriptors a moment ago: this one got the spare's. Answer
                    // it and free it, then take the spare back.
                    Ok((socket, peer)) if spare.is_released() => {
                        tracing::warn!(%peer, "connection refused: out of file descriptors");
                        refuse(socket, &connection::out_of_fds_frame());
                        spare.restore();
                    }
                    Ok((socket, peer)) => match Arc::clone(&connection_limit).try_acquire_owned() {
                        Ok(permit) => {
                            if let Err(e) = socket.set_nodelay(true) {
                                tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
                            }
                            tracing::debug!(%peer, "connection accepted");
                            let gauge = metrics.connection_opened();
                            let ctx = Arc::clone(&ctx);
                            let phase = phase_rx.clone();
                            connections.spawn(async move {
                                connection::serve(socket, peer, ctx, phase).await;
                                drop((permit, gauge));
                            });
                        }
                        Err(_) => {
                            metrics.connection_rejected();
                            tracing::warn!(
                                %peer,
                                max_connections,
                                "connection refused: too many connections"
                            );
                            refuse(socket, &connection::busy_frame(max_connections));
                        }
                    },
                    Err(e) => accept_failed("protocol", &e, &mut spare, &metrics).await,
                },
                accepted = accept(http.as_ref()) => match accepted {
                    Ok((socket, peer)) => match Arc::clone(&http_limit).try_acquire_owned() {
                        Ok(permit) => {
                            // Served even when it holds the spare's descriptor: /health
                            // must answer most when the server is short of them. The
                            // spare is taken back when an exchange ends.
                            let (app, tls) = (http_app.clone(), tls.clone());
                            admin.spawn(async move {
                                http::serve(socket, peer, app, tls).await;
                                drop(permit);
                            });
                        }
                        Err(_) => tracing::warn!(%peer, "admin connection refused: too many"),
                    },
                    Err(e) => accept_failed("admin", &e, &mut http_spare, &metrics).await,
                },
                Some(done) = connections.join_next(), if !connections.is_empty() => {
                    log_task_end("connection", done);
                }
                Some(done) = admin.join_next(), if !admin.is_empty() => {
                    log_task_end("admin", done);
                    http_spare.restore();
                }
            }
        }

        tracing::info!(
            connections = connections.len(),
            "rill server shutting down: draining connections"
        );
        // Closing the listeners refuses new connections from here on.
        drop(listener);
        drop(http);
        // Admin exchanges carry no state worth finishing.
        admin.shutdown().await;
        if let Some(sampler) = sampler {
            sampler.abort();
        }
        phase_tx.send_replace(Phase::Draining);
        if !join_all(&mut connections, config.drain_timeout).await {
            tracing::warn!(
                connections = connections.len(),
                drain_timeout = ?config.drain_timeout,
                "drain timed out: cancelling requests in flight"
            );
            phase_tx.send_replace(Phase::Cutting);
            if !join_all(&mut connections, CUT_GRACE).await {
                connections.shutdown().await;
            }
        }
        tracing::info!("rill server stopped");
        Ok(())
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// Accepts on the listener if there is one; never resolves otherwise.
async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// `accept` fails for reasons that pass (out of file descriptors or memory, a connection
/// aborted in the backlog): log and keep serving. Out of descriptors with the spare at
/// hand, give the spare up so the next accept succeeds (the caller answers that one and
/// restores the spare); otherwise pause, so the loop does not spin while it lasts.
async fn accept_failed(listener: &str, e: &std::io::Error, spare: &mut Spare, metrics: &Metrics) {
    if fds::out_of_fds(e) {
        metrics.accept_out_of_fds();
        spare.restore();
        if spare.release() {
            tracing::warn!(listener, error = %e, "out of file descriptors: using the spare");
            return;
        }
    }
    tracing::warn!(listener, error = %e, "accept failed");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}

/// Sends a `BUSY` error frame to a connection the server will not serve and closes it,
/// without a task: a fresh socket's send buffer is empty, so one non-blocking write of a
/// small frame goes through, and if it does not the close alone tells the client.
fn refuse(socket: TcpStream, frame: &rill_proto::EncodedFrame) {
    let frame = frame.to_bytes();
    match socket.into_std() {
        Ok(mut socket) => {
            let _ = socket.write(&frame);
        }
        Err(e) => tracing::debug!(error = %e, "cannot reply BUSY"),
    }
}

/// Waits up to `timeout` for every task of `set`; true if they all ended.
async fn join_all(set: &mut JoinSet<()>, timeout: Duration) -> bool {
    tokio::time::timeout(timeout, async {
        while let Some(done) = set.join_next().await {
            log_task_end("connection", done);
        }
    })
    .await
    .is_ok()
}

fn log_task_end(what: &str, done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::warn!(task = what, error = %e, "a server task panicked");
    }
}
