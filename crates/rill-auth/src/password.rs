//! What a password becomes when it is set: an Argon2id PHC string and a SCRAM-SHA-256
//! verifier (`docs/SECURITY.md` §2). Neither gives the password back.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{AuthError, Secret};

/// Shortest password accepted, in bytes.
pub const PASSWORD_BYTES_MIN: usize = 8;
/// Longest password accepted, in bytes.
pub const PASSWORD_BYTES_MAX: usize = 1024;
/// Fewest SCRAM iterations (RFC 7677's minimum).
pub const SCRAM_ITERATIONS_MIN: u32 = 4096;
/// Most SCRAM iterations: more would let a server keep a client busy for long.
pub const SCRAM_ITERATIONS_MAX: u32 = 1_000_000;
/// The iterations used unless configured.
pub const SCRAM_ITERATIONS_DEFAULT: u32 = 32_768;
/// Bytes of a SCRAM salt.
pub const SCRAM_SALT_BYTES: usize = 16;

/// Argon2id with OWASP's minimum parameters: 19 MiB, 2 passes, 1 lane.
fn argon2id() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).expect("valid Argon2 parameters");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Checks that a password may be set: its length in bytes, and no NUL or line end
/// (which a password file or a terminal could not carry back).
pub fn validate_password(password: &Secret) -> Result<(), AuthError> {
    let p = password.expose();
    if p.len() < PASSWORD_BYTES_MIN {
        return Err(AuthError::Invalid(format!(
            "a password must have at least {PASSWORD_BYTES_MIN} bytes"
        )));
    }
    if p.len() > PASSWORD_BYTES_MAX {
        return Err(AuthError::Invalid(format!(
            "a password must have at most {PASSWORD_BYTES_MAX} bytes"
        )));
    }
    if p.contains(['\0', '\n', '\r']) {
        return Err(AuthError::Invalid(
            "a password must not contain NUL or line ends".into(),
        ));
    }
    Ok(())
}

/// The Argon2id PHC string of a password, with a fresh random salt.
pub fn hash_argon2id(password: &Secret) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let salt = SaltString::encode_b64(&bytes).expect("16 bytes make a valid salt");
    argon2id()
        .hash_password(password.expose().as_bytes(), &salt)
        .expect("Argon2id hashes any password of a bounded length")
        .to_string()
}

/// Whether `password` is the one `phc` was made from. A PHC string that does not parse,
/// or is not Argon2id, never matches.
pub fn verify_argon2id(phc: &str, password: &Secret) -> bool {
    let Ok(hash) = PasswordHash::new(phc) else {
        return false;
    };
    if hash.algorithm != argon2::ARGON2ID_IDENT {
        return false;
    }
    argon2id()
        .verify_password(password.expose().as_bytes(), &hash)
        .is_ok()
}

/// Whether `password` matches the user's Argon2id PHC string, `None` for a user that
/// does not exist: that case costs one Argon2id hash too, so the time does not tell.
pub fn check_password(phc: Option<&str>, password: &Secret) -> bool {
    match phc {
        Some(phc) => verify_argon2id(phc, password),
        None => {
            let _same_cost = hash_argon2id(password);
            false
        }
    }
}

/// Whether `phc` is a well-formed Argon2id PHC string (used when `auth.json` is read).
pub fn is_argon2id_phc(phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| h.algorithm == argon2::ARGON2ID_IDENT)
}

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA-256 of `data` under `key`.
pub(crate) fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// SHA-256 of `data`.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// RFC 5802's `Hi`: PBKDF2 with HMAC-SHA-256 and one 32-byte block.
pub(crate) fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
    out
}

/// The keys RFC 5802 derives from a salted password.
pub(crate) fn client_key(salted: &[u8; 32]) -> [u8; 32] {
    hmac(salted, b"Client Key")
}

pub(crate) fn server_key(salted: &[u8; 32]) -> [u8; 32] {
    hmac(salted, b"Server Key")
}

/// What the server keeps of a password for SCRAM-SHA-256 (RFC 5802 §3): the salt, the
/// iteration count, `StoredKey = H(ClientKey)` and `ServerKey`. It checks a client's
/// proof and proves the server to the client; it cannot produce a proof.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramVerifier {
    /// The salt, base64 in `auth.json`.
    #[serde(with = "b64_vec")]
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(ClientKey)`.
    #[serde(with = "b64_key")]
    pub stored_key: [u8; 32],
    /// `HMAC(SaltedPassword, "Server Key")`.
    #[serde(with = "b64_key")]
    pub server_key: [u8; 32],
}

impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramVerifier")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramVerifier {
    /// Derives the verifier of `password` with a fresh random salt.
    pub fn derive(password: &Secret, iterations: u32) -> Result<Self, AuthError> {
        let mut salt = vec![0u8; SCRAM_SALT_BYTES];
        rand::rng().fill_bytes(&mut salt);
        Self::derive_with_salt(password, salt, iterations)
    }

    /// Derives the verifier of `password` with a given salt (tests, and the RFC vector).
    pub fn derive_with_salt(
        password: &Secret,
        salt: Vec<u8>,
        iterations: u32,
    ) -> Result<Self, AuthError> {
        check_iterations(iterations)?;
        let salted = salted_password(password.expose().as_bytes(), &salt, iterations);
        Ok(Self {
            salt,
            iterations,
            stored_key: sha256(&client_key(&salted)),
            server_key: server_key(&salted),
        })
    }

    /// Checks what `auth.json` holds: a salt of a sane length and iterations in range.
    pub fn validate(&self) -> Result<(), AuthError> {
        check_iterations(self.iterations)?;
        if self.salt.is_empty() || self.salt.len() > 64 {
            return Err(AuthError::Invalid(
                "a SCRAM salt must have 1 to 64 bytes".into(),
            ));
        }
        Ok(())
    }
}

/// Checks a SCRAM iteration count against the bounds.
pub fn check_iterations(iterations: u32) -> Result<(), AuthError> {
    if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations) {
        return Err(AuthError::Invalid(format!(
            "SCRAM iterations must be between {SCRAM_ITERATIONS_MIN} and {SCRAM_ITERATIONS_MAX}, not {iterations}"
        )));
    }
    Ok(())
}

/// Everything stored of one password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasswordVerifiers {
    /// The Argon2id PHC string.
    pub argon2id: String,
    /// The SCRAM-SHA-256 verifier.
    pub scram: ScramVerifier,
}

impl std::fmt::Debug for PasswordVerifiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordVerifiers")
            .field("scram", &self.scram)
            .finish_non_exhaustive()
    }
}

impl PasswordVerifiers {
    /// Validates `password` and derives both verifiers.
    pub fn derive(password: &Secret, iterations: u32) -> Result<Self, AuthError> {
        validate_password(password)?;
        Ok(Self {
            argon2id: hash_argon2id(password),
            scram: ScramVerifier::derive(password, iterations)?,
        })
    }

    /// Whether `password` is this one, by the Argon2id string.
    pub fn verify(&self, password: &Secret) -> bool {
        verify_argon2id(&self.argon2id, password)
    }
}

pub(crate) mod b64_vec {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as B64;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        B64.decode(s.as_bytes()).map_err(D::Error::custom)
    }
}

pub(crate) mod b64_key {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as B64;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(crate) fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let s = String::deserialize(d)?;
        let v = B64.decode(s.as_bytes()).map_err(D::Error::custom)?;
        v.try_into()
            .map_err(|_| D::Error::custom("a key must have 32 bytes"))
    }
}

/// Base64 (standard, padded) as SCRAM writes salts, proofs and signatures.
pub(crate) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// Decodes standard base64, or says which attribute was bad.
pub(crate) fn unb64(s: &str, what: &'static str) -> Result<Vec<u8>, AuthError> {
    B64.decode(s.as_bytes())
        .map_err(|_| AuthError::Malformed(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argon2id_verifies_the_password_and_nothing_else() {
        let p = Secret::new("correct horse");
        let phc = hash_argon2id(&p);
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(is_argon2id_phc(&phc));
        assert!(verify_argon2id(&phc, &p));
        assert!(!verify_argon2id(&phc, &Secret::new("correct horsf")));
        assert!(!verify_argon2id("not a phc string", &p));
        // Two hashes of one password differ (fresh salts).
        assert_ne!(phc, hash_argon2id(&p));
        assert!(!phc.contains("correct horse"));
    }

    #[test]
    fn passwords_outside_the_rules_are_refused() {
        assert!(validate_password(&Secret::new("short")).is_err());
        assert!(validate_password(&Secret::new("x".repeat(1025))).is_err());
        assert!(validate_password(&Secret::new("has\nline end")).is_err());
        assert!(validate_password(&Secret::new("just right")).is_ok());
    }

    #[test]
    fn iterations_are_bounded() {
        let p = Secret::new("pencil pencil");
        assert!(ScramVerifier::derive(&p, 4095).is_err());
        assert!(ScramVerifier::derive(&p, 1_000_001).is_err());
        let v = ScramVerifier::derive(&p, 4096).unwrap();
        assert_eq!(v.salt.len(), SCRAM_SALT_BYTES);
        v.validate().unwrap();
        assert!(!format!("{v:?}").contains("stored_key"));
    }
}
