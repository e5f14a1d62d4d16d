//! Server options and their bounds.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use rill_proto::{DEFAULT_MAX_FRAME_BYTES, FRAME_HEADER_LEN};

use crate::ServerError;

/// Largest `max_in_flight_per_connection` accepted: the drain waits for all permits at
/// once, and a semaphore acquires at most `u32::MAX` in one call.
const IN_FLIGHT_PER_CONNECTION_MAX: usize = 1 << 20;

/// Options of a [`Server`](crate::Server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Address of the protocol listener (default `127.0.0.1:7171`; port 0 picks one).
    pub listen: SocketAddr,
    /// Address of the HTTP admin listener (default `127.0.0.1:7172`); `None` disables it.
    pub http: Option<SocketAddr>,
    /// Open client connections at most (default 1024). Further connections get a
    /// `BUSY` error frame and are closed.
    pub max_connections: usize,
    /// Requests of one connection being handled at once (default 256). When all are
    /// taken the server stops reading that connection until one finishes.
    pub max_in_flight_per_connection: usize,
    /// Largest frame accepted, length prefix excluded (default
    /// [`DEFAULT_MAX_FRAME_BYTES`]). A longer frame gets a `FRAME_TOO_LARGE` reply and the
    /// connection is closed.
    pub max_frame_bytes: u32,
    /// Close a connection that sent nothing for this long while it had no request in
    /// flight (default 10 minutes, like Kafka's `connections.max.idle.ms`; `None`
    /// never closes one). A pending long poll or an unwritten response counts as in
    /// flight.
    pub idle_timeout: Option<Duration>,
    /// Close a connection whose socket took no bytes for this long while a response
    /// waited to be written: the client does not read (default 30 s).
    pub write_timeout: Duration,
    /// Bytes one connection may hold in request frames being read or handled and in
    /// responses waiting for its socket (default 128 MiB). At least `max_frame_bytes`
    /// plus a frame header, so every frame fits. When it is spent the server stops
    /// reading the connection and holds its fetches back until the client reads.
    pub connection_buffer_bytes_max: usize,
    /// The same bound for all connections together (default 1 GiB); at least
    /// `connection_buffer_bytes_max`.
    pub buffer_bytes_max: usize,
    /// File descriptors left for the broker's files when the connection limit is
    /// derived from the process's descriptor limit (default 256; see
    /// [`Server::max_connections`](crate::Server::max_connections)).
    pub files_reserved: usize,
    /// At shutdown, how long in-flight requests may take to finish before their
    /// connections are cut (default 10 s).
    pub drain_timeout: Duration,
    /// Whether the HTTP port's admin API serves writes (create and delete topics; default
    /// off, when they are refused with `403 WRITES_DISABLED`); the broker still
    /// authorizes each (docs/HTTP_API.md).
    pub http_admin_writes: bool,
    /// TLS on both listeners (default none): the files are read at
    /// [`Server::bind`](crate::Server::bind) and on [`Tls::reload`](crate::Tls::reload).
    pub tls: Option<crate::TlsSettings>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 7171)),
            http: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 7172))),
            max_connections: 1024,
            max_in_flight_per_connection: 256,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            idle_timeout: Some(Duration::from_secs(10 * 60)),
            write_timeout: Duration::from_secs(30),
            connection_buffer_bytes_max: 128 << 20,
            buffer_bytes_max: 1 << 30,
            files_reserved: 256,
            drain_timeout: Duration::from_secs(10),
            http_admin_writes: false,
            tls: None,
        }
    }
}

impl ServerConfig {
    /// Checks every bound; [`Server::bind`](crate::Server::bind) does it too.
    pub fn validate(&self) -> Result<(), ServerError> {
        let invalid = |field, reason| Err(ServerError::InvalidConfig { field, reason });
        if self.max_connections == 0 {
            return invalid("max_connections", "must be at least 1");
        }
        if self.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return invalid("max_connections", "is too large");
        }
        if self.max_in_flight_per_connection == 0 {
            return invalid("max_in_flight_per_connection", "must be at least 1");
        }
        if self.max_in_flight_per_connection > IN_FLIGHT_PER_CONNECTION_MAX {
            return invalid("max_in_flight_per_connection", "must be at most 1048576");
        }
        if (self.max_frame_bytes as usize) < FRAME_HEADER_LEN {
            return invalid("max_frame_bytes", "is smaller than a frame header");
        }
        if self.idle_timeout.is_some_and(|t| t.is_zero()) {
            return invalid("idle_timeout", "must be positive (use None for no timeout)");
        }
        if self.write_timeout.is_zero() {
            return invalid("write_timeout", "must be positive");
        }
        if self.connection_buffer_bytes_max < self.max_frame_bytes as usize + FRAME_HEADER_LEN {
            return invalid(
                "connection_buffer_bytes_max",
                "must be at least max_frame_bytes plus a 20-byte frame header",
            );
        }
        if self.buffer_bytes_max < self.connection_buffer_bytes_max {
            return invalid(
                "buffer_bytes_max",
                "must be at least connection_buffer_bytes_max",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let config = ServerConfig::default();
        config.validate().unwrap();
        assert_eq!(config.listen.port(), 7171);
        assert_eq!(config.http.map(|a| a.port()), Some(7172));
        assert_eq!(config.idle_timeout, Some(Duration::from_secs(600)));
        assert_eq!(config.write_timeout, Duration::from_secs(30));
        assert_eq!(config.connection_buffer_bytes_max, 128 << 20);
        assert_eq!(config.buffer_bytes_max, 1 << 30);
    }

    #[test]
    fn budgets_must_hold_a_frame_and_each_other() {
        let base = ServerConfig {
            max_frame_bytes: 1000,
            connection_buffer_bytes_max: 1020,
            buffer_bytes_max: 1020,
            ..ServerConfig::default()
        };
        base.validate().unwrap();
        for (config, field) in [
            (
                ServerConfig {
                    connection_buffer_bytes_max: 1019,
                    ..base.clone()
                },
                "connection_buffer_bytes_max",
            ),
            (
                ServerConfig {
                    buffer_bytes_max: 1019,
                    ..base.clone()
                },
                "buffer_bytes_max",
            ),
            (
                ServerConfig {
                    write_timeout: Duration::ZERO,
                    ..base
                },
                "write_timeout",
            ),
        ] {
            match config.validate() {
                Err(ServerError::InvalidConfig { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn zero_bounds_are_rejected() {
        for config in [
            ServerConfig {
                max_connections: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                max_in_flight_per_connection: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                max_frame_bytes: 3,
                ..ServerConfig::default()
            },
            ServerConfig {
                idle_timeout: Some(Duration::ZERO),
                ..ServerConfig::default()
            },
        ] {
            assert!(matches!(
                config.validate(),
                Err(ServerError::InvalidConfig { .. })
            ));
        }
    }
}
