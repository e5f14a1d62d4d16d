//! Rill's credentials and the exchanges that prove them (design: `docs/SECURITY.md`).
//!
//! - [`password`]: a password is derived, once, into an Argon2id PHC string (to check a
//!   password presented whole) and a SCRAM-SHA-256 verifier (for the wire); neither
//!   gives the password back.
//! - [`scram`]: the SCRAM-SHA-256 exchange of RFC 5802 / RFC 7677, as the client and as
//!   the server, with a stand-in challenge for users that do not exist so a failure
//!   never says which.
//! - [`token`]: API tokens, shown once and stored as their SHA-256.
//! - [`limiter`]: failed attempts per source address, with a bound on what it keeps.
//! - [`store`]: the model of `auth.json` (users, tokens, ACLs) and its validation.
//!
//! Nothing here does I/O: the broker persists [`store::AuthFile`] and puts the exchanges
//! on the wire.

#![deny(missing_docs, unreachable_pub)]

pub mod limiter;
pub mod password;
pub mod scram;
pub mod store;
pub mod token;

mod secret;

pub use secret::Secret;

/// Why a credential or an exchange was refused. The detail is for logs; what a client
/// is told is only that authentication failed (see `docs/SECURITY.md` §3.2), and no
/// variant carries a password, a proof or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A message of the exchange does not follow its grammar.
    #[error("malformed authentication message: {0}")]
    Malformed(&'static str),
    /// The exchange was used out of order (a message after it ended, or a second start).
    #[error("authentication exchange out of order")]
    OutOfOrder,
    /// The proof, the user or the token is not right; deliberately says no more.
    #[error("authentication failed")]
    Failed,
    /// The server's signature did not verify: it does not know the password, so it is
    /// not the server the client meant to reach.
    #[error("the server could not prove it knows the password (wrong server?)")]
    ServerNotVerified,
    /// The server answered with an error in its final message.
    #[error("the server refused the authentication: {0}")]
    ServerError(String),
    /// A password, name or parameter outside what Rill accepts.
    #[error("{0}")]
    Invalid(String),
}
