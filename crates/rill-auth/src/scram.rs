//! SCRAM-SHA-256 (RFC 5802, RFC 7677) without channel binding, as the client and as the
//! server. `docs/SECURITY.md` §3 says how Rill carries it on the wire.
//!
//! The exchange is two round trips:
//!
//! ```text
//! client-first  n,,n=USER,r=CNONCE
//! server-first  r=CNONCE+SNONCE,s=SALT,i=ITERATIONS
//! client-final  c=biws,r=CNONCE+SNONCE,p=PROOF
//! server-final  v=SERVER-SIGNATURE
//! ```
//!
//! Each side is a pair of typestates, so a message cannot be used out of turn. The
//! server answers a user it does not know with a stand-in salt and stored key derived
//! from a server secret. Its answers cannot be told apart from a real user's, and the
//! exchange fails at the proof, like a wrong password. Rill applies no SASLprep: both
//! sides use the password's UTF-8 bytes as given, which for ASCII passwords is what
//! SASLprep yields.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::password::{
    ScramVerifier, b64, check_iterations, client_key, hmac, salted_password, server_key, sha256,
    unb64,
};
use crate::{AuthError, Secret};

/// The mechanism's name, as it is written on the wire.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// Longest message either side accepts, in bytes.
pub const MESSAGE_BYTES_MAX: usize = 4096;
/// Longest user name, in bytes (after `=2C` / `=3D` are decoded).
pub const USER_BYTES_MAX: usize = 255;
/// Longest nonce either side accepts (the client's part, or the whole).
pub const NONCE_CHARS_MAX: usize = 256;
/// Random bytes in a nonce that this crate makes (base64, so 24 characters).
const NONCE_BYTES: usize = 18;

/// The GS2 header Rill's client sends: no channel binding, no authorization identity.
const GS2_HEADER: &str = "n,,";

/// A fresh nonce: printable, without `,`.
pub fn nonce() -> String {
    let mut bytes = [0u8; NONCE_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    B64.encode(bytes)
}

/// The attributes of one message, in order: `k=v` separated by commas.
fn attributes(message: &str) -> Result<Vec<(u8, &str)>, AuthError> {
    message
        .split(',')
        .map(|part| {
            let b = part.as_bytes();
            if b.len() < 2 || b[1] != b'=' || !b[0].is_ascii_alphabetic() {
                return Err(AuthError::Malformed("attribute"));
            }
            Ok((b[0], &part[2..]))
        })
        .collect()
}

fn text(message: &[u8]) -> Result<&str, AuthError> {
    if message.len() > MESSAGE_BYTES_MAX {
        return Err(AuthError::Malformed("message too long"));
    }
    std::str::from_utf8(message).map_err(|_| AuthError::Malformed("message is not UTF-8"))
}

/// Checks a nonce: printable ASCII other than `,`, 1 to [`NONCE_CHARS_MAX`] characters.
fn check_nonce(n: &str) -> Result<(), AuthError> {
    if n.is_empty()
        || n.len() > NONCE_CHARS_MAX
        || !n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
    {
        return Err(AuthError::Malformed("nonce"));
    }
    Ok(())
}

/// Encodes a user name as RFC 5802's `saslname` (`,` → `=2C`, `=` → `=3D`).
pub fn encode_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// Decodes a `saslname`; any `=` not starting `=2C` or `=3D` is malformed.
pub fn decode_name(encoded: &str) -> Result<String, AuthError> {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3);
        match esc {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(AuthError::Malformed("user name escape")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() || out.len() > USER_BYTES_MAX {
        return Err(AuthError::Malformed("user name length"));
    }
    Ok(out)
}

/// A parsed client-first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The GS2 header as sent (`n,,` or `y,,`), needed to check `c=` later.
    pub gs2_header: String,
    /// The user name, decoded.
    pub user: String,
    /// The client's nonce.
    pub nonce: String,
    /// The message without its GS2 header, which the signatures cover.
    pub bare: String,
}

impl ClientFirst {
    /// Parses a client-first message. Channel binding (`p=`), an authorization identity
    /// and mandatory extensions (`m=`) are refused; other extensions are ignored.
    pub fn parse(message: &[u8]) -> Result<Self, AuthError> {
        let m = text(message)?;
        let (cbind, rest) = m
            .split_once(',')
            .ok_or(AuthError::Malformed("GS2 header"))?;
        match cbind {
            "n" | "y" => {}
            c if c.starts_with("p=") => {
                return Err(AuthError::Malformed("channel binding is not supported"));
            }
            _ => return Err(AuthError::Malformed("GS2 header")),
        }
        let (authzid, bare) = rest
            .split_once(',')
            .ok_or(AuthError::Malformed("GS2 header"))?;
        if !authzid.is_empty() {
            return Err(AuthError::Malformed(
                "an authorization identity is not supported",
            ));
        }
        let attrs = attributes(bare)?;
        let (user, nonce) = match attrs.as_slice() {
            [(b'm', _), ..] => return Err(AuthError::Malformed("mandatory extension")),
            [(b'n', user), (b'r', nonce), ..] => (*user, *nonce),
            _ => return Err(AuthError::Malformed("client-first attributes")),
        };
        check_nonce(nonce)?;
        Ok(Self {
            gs2_header: format!("{cbind},,"),
            user: decode_name(user)?,
            nonce: nonce.to_owned(),
            bare: bare.to_owned(),
        })
    }
}

/// A parsed client-final message. Its `Debug` leaves the proof out.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientFinal {
    /// The decoded `c=` attribute (the GS2 header, with no channel binding data).
    pub channel_binding: Vec<u8>,
    /// The whole nonce.
    pub nonce: String,
    /// The proof.
    pub proof: [u8; 32],
    /// The message up to (not including) `,p=`, which the signatures cover.
    pub without_proof: String,
}

impl std::fmt::Debug for ClientFinal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientFinal")
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

impl ClientFinal {
    /// Parses a client-final message: `c=`, `r=`, any extensions, and `p=` last.
    pub fn parse(message: &[u8]) -> Result<Self, AuthError> {
        let m = text(message)?;
        let (without_proof, proof) = m
            .rsplit_once(",p=")
            .ok_or(AuthError::Malformed("client-final proof"))?;
        let attrs = attributes(without_proof)?;
        let (cb, nonce) = match attrs.as_slice() {
            [(b'c', cb), (b'r', nonce), ..] => (*cb, *nonce),
            _ => return Err(AuthError::Malformed("client-final attributes")),
        };
        check_nonce(nonce)?;
        let proof: [u8; 32] = unb64(proof, "client proof")?
            .try_into()
            .map_err(|_| AuthError::Malformed("client proof length"))?;
        Ok(Self {
            channel_binding: unb64(cb, "channel binding")?,
            nonce: nonce.to_owned(),
            proof,
            without_proof: without_proof.to_owned(),
        })
    }
}

/// A parsed server-first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFirst {
    /// The whole nonce (the client's, then the server's).
    pub nonce: String,
    /// The salt.
    pub salt: Vec<u8>,
    /// The iterations.
    pub iterations: u32,
}

impl ServerFirst {
    /// Parses a server-first message.
    pub fn parse(message: &[u8]) -> Result<Self, AuthError> {
        let m = text(message)?;
        let attrs = attributes(m)?;
        let (nonce, salt, iterations) = match attrs.as_slice() {
            [(b'm', _), ..] => return Err(AuthError::Malformed("mandatory extension")),
            [(b'r', n), (b's', s), (b'i', i), ..] => (*n, *s, *i),
            _ => return Err(AuthError::Malformed("server-first attributes")),
        };
        check_nonce(nonce)?;
        let salt = unb64(salt, "salt")?;
        if salt.is_empty() {
            return Err(AuthError::Malformed("salt"));
        }
        if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AuthError::Malformed("iterations"));
        }
        let iterations = iterations
            .parse()
            .map_err(|_| AuthError::Malformed("iterations"))?;
        Ok(Self {
            nonce: nonce.to_owned(),
            salt,
            iterations,
        })
    }
}

fn xor(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// The client side, before the server's first message.
#[derive(Debug)]
pub struct Client {
    password: Secret,
    nonce: String,
    bare: String,
}

/// The client side, waiting for the server's final message.
pub struct ClientAwaitingFinal {
    expected_signature: [u8; 32],
}

impl std::fmt::Debug for ClientAwaitingFinal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAwaitingFinal")
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts an exchange as `user`; returns the state and the client-first message.
    pub fn start(user: &str, password: Secret) -> Result<(Self, Vec<u8>), AuthError> {
        Self::start_with_nonce(user, password, nonce())
    }

    /// [`Client::start`] with a chosen nonce (tests, and the RFC's vector).
    pub fn start_with_nonce(
        user: &str,
        password: Secret,
        nonce: String,
    ) -> Result<(Self, Vec<u8>), AuthError> {
        if user.is_empty() || user.len() > USER_BYTES_MAX {
            return Err(AuthError::Invalid(
                "a user name must have 1 to 255 bytes".into(),
            ));
        }
        check_nonce(&nonce)?;
        let bare = format!("n={},r={nonce}", encode_name(user));
        let message = format!("{GS2_HEADER}{bare}").into_bytes();
        Ok((
            Self {
                password,
                nonce,
                bare,
            },
            message,
        ))
    }

    /// Takes the server-first message and answers it with the client-final one. The
    /// server's nonce must extend the client's, and its iterations must be in
    /// [`SCRAM_ITERATIONS_MIN`](crate::password::SCRAM_ITERATIONS_MIN)..=
    /// [`SCRAM_ITERATIONS_MAX`](crate::password::SCRAM_ITERATIONS_MAX), so a server
    /// cannot make the client work for long.
    pub fn on_server_first(
        self,
        message: &[u8],
    ) -> Result<(ClientAwaitingFinal, Vec<u8>), AuthError> {
        let first = ServerFirst::parse(message)?;
        if first.nonce.len() <= self.nonce.len() || !first.nonce.starts_with(&self.nonce) {
            return Err(AuthError::Malformed(
                "the server's nonce does not extend ours",
            ));
        }
        check_iterations(first.iterations)?;
        let server_first = std::str::from_utf8(message).expect("parsed as UTF-8");
        let without_proof = format!("c={},r={}", B64.encode(GS2_HEADER), first.nonce);
        let auth_message = format!("{},{server_first},{without_proof}", self.bare);
        let salted = salted_password(
            self.password.expose().as_bytes(),
            &first.salt,
            first.iterations,
        );
        let client_key = client_key(&salted);
        let stored_key = sha256(&client_key);
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &signature);
        let expected_signature = hmac(&server_key(&salted), auth_message.as_bytes());
        Ok((
            ClientAwaitingFinal { expected_signature },
            format!("{without_proof},p={}", b64(&proof)).into_bytes(),
        ))
    }
}

impl ClientAwaitingFinal {
    /// Checks the server-final message: the server proved it knows the verifier.
    pub fn on_server_final(self, message: &[u8]) -> Result<(), AuthError> {
        let m = text(message)?;
        if let Some(e) = m.strip_prefix("e=") {
            return Err(AuthError::ServerError(e.chars().take(200).collect()));
        }
        let attrs = attributes(m)?;
        let [(b'v', v), ..] = attrs.as_slice() else {
            return Err(AuthError::Malformed("server-final attributes"));
        };
        let v = unb64(v, "server signature")?;
        if bool::from(v.as_slice().ct_eq(&self.expected_signature)) {
            Ok(())
        } else {
            Err(AuthError::ServerNotVerified)
        }
    }
}

/// The verifier to check a user against: the user's, or a stand-in for a user that does
/// not exist, derived from the server's secret so it is the same on every attempt.
fn stand_in(secret: &[u8; 32], user: &str, iterations: u32) -> ScramVerifier {
    let tagged = |tag: &str| hmac(secret, format!("{tag}\0{user}").as_bytes());
    ScramVerifier {
        salt: tagged("salt")[..16].to_vec(),
        iterations,
        stored_key: tagged("stored"),
        server_key: tagged("server"),
    }
}

/// The server side, waiting for the client-final message.
#[derive(Debug)]
pub struct ServerAwaitingFinal {
    user: String,
    known: bool,
    gs2_header: String,
    nonce: String,
    /// `client-first-bare,server-first`, the start of the AuthMessage.
    transcript: String,
    verifier: ScramVerifier,
}

/// How the server starts an exchange.
#[derive(Debug, Clone, Copy)]
pub struct Server<'a> {
    /// The secret the stand-in verifiers come from (`auth.json`'s `secret`).
    pub secret: &'a [u8; 32],
    /// The iterations stand-ins claim: the server's configured count, so they look like
    /// the verifiers it makes.
    pub iterations: u32,
}

impl Server<'_> {
    /// Takes a client-first message and answers with server-first. `lookup` finds the
    /// verifier of a user by name; `None` gets the stand-in.
    pub fn on_client_first(
        &self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramVerifier>,
    ) -> Result<(ServerAwaitingFinal, Vec<u8>), AuthError> {
        self.on_client_first_with_nonce(message, lookup, nonce())
    }

    /// [`Server::on_client_first`] with a chosen nonce (tests, and the RFC's vector).
    pub fn on_client_first_with_nonce(
        &self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramVerifier>,
        server_nonce: String,
    ) -> Result<(ServerAwaitingFinal, Vec<u8>), AuthError> {
        let first = ClientFirst::parse(message)?;
        check_nonce(&server_nonce)?;
        let nonce = format!("{}{server_nonce}", first.nonce);
        if nonce.len() > NONCE_CHARS_MAX {
            return Err(AuthError::Malformed("nonce"));
        }
        let (known, verifier) = match lookup(&first.user) {
            Some(v) => (true, v),
            None => (false, stand_in(self.secret, &first.user, self.iterations)),
        };
        let server_first = format!(
            "r={nonce},s={},i={}",
            b64(&verifier.salt),
            verifier.iterations
        );
        let transcript = format!("{},{server_first}", first.bare);
        Ok((
            ServerAwaitingFinal {
                user: first.user,
                known,
                gs2_header: first.gs2_header,
                nonce,
                transcript,
                verifier,
            },
            server_first.into_bytes(),
        ))
    }
}

impl ServerAwaitingFinal {
    /// The user the exchange claims to be (not yet proven).
    pub fn claimed_user(&self) -> &str {
        &self.user
    }

    /// Takes the client-final message. On success returns the proven user name and the
    /// server-final message; every failure is [`AuthError::Failed`] or a malformed
    /// message, the same for a user that does not exist as for a wrong password.
    pub fn on_client_final(self, message: &[u8]) -> Result<(String, Vec<u8>), AuthError> {
        let last = ClientFinal::parse(message)?;
        if last.channel_binding != self.gs2_header.as_bytes() {
            return Err(AuthError::Malformed("channel binding"));
        }
        if last.nonce != self.nonce {
            return Err(AuthError::Failed);
        }
        let auth_message = format!("{},{}", self.transcript, last.without_proof);
        let signature = hmac(&self.verifier.stored_key, auth_message.as_bytes());
        let client_key = xor(&last.proof, &signature);
        let matches = sha256(&client_key).ct_eq(&self.verifier.stored_key);
        // The server signature is computed either way, so both paths do the same work.
        let server_signature = hmac(&self.verifier.server_key, auth_message.as_bytes());
        if bool::from(matches) && self.known {
            Ok((
                self.user,
                format!("v={}", b64(&server_signature)).into_bytes(),
            ))
        } else {
            Err(AuthError::Failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_escape_commas_and_equals_signs() {
        assert_eq!(encode_name("a,b=c"), "a=2Cb=3Dc");
        assert_eq!(decode_name("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert!(decode_name("a=2").is_err());
        assert!(decode_name("a=41").is_err());
        assert!(decode_name("").is_err());
    }
}
