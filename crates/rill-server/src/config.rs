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
    /// flight (default `None`: never).
    pub idle_timeout: Option<Duration>,
    /// At shutdown, how long in-flight requests may take to finish before their
    /// connections are cut (default 10 s).
    pub drain_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 7171)),
            http: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 7172))),
            max_connections: 1024,
            max_in_flight_per_connection: 256,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            idle_timeout: None,
            drain_timeout: Duration::from_secs(10),
        }
    }
}

impl ServerConfig {
    /// Checks every bound.
    pub(crate) fn validate(&self) -> Result<(), ServerError> {
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
