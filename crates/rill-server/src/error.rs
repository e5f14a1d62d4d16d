//! The server's error type.

use std::net::SocketAddr;

/// Why the server could not start or run.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum ServerError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The TLS files could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::TlsError),
    /// A socket operation on a listener failed.
    #[error("server I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A `ServerConfig` value is out of range.
    #[error("invalid server config: {field} {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The process's file-descriptor limit leaves no room for a single connection once
    /// the open descriptors and the reserve are counted.
    #[error(
        "too few file descriptors for a connection: the limit is {limit}, {open} are open \
         and {reserved} are reserved (admin connections, spares, files_reserved)"
    )]
    TooFewFiles {
        /// The soft `RLIMIT_NOFILE`.
        limit: u64,
        /// Descriptors open when the server started.
        open: usize,
        /// Descriptors kept back for other uses.
        reserved: usize,
    },
}
