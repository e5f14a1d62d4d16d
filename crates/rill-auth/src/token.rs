//! API tokens: 32 random bytes, shown once as `rill_` + URL-safe base64, stored as the
//! SHA-256 of that string (`docs/SECURITY.md` §2).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;

use crate::password::sha256;
use crate::{AuthError, Secret};

/// What every token starts with, so a leaked one is easy to spot (and to scan for).
pub const TOKEN_PREFIX: &str = "rill_";
/// Random bytes in a token.
pub const TOKEN_BYTES: usize = 32;
/// Characters of a token string: the prefix and the unpadded base64 of its bytes.
pub const TOKEN_CHARS: usize = TOKEN_PREFIX.len() + 43;

/// A new token: the string to show once, and the hash to store.
pub fn generate() -> (Secret, String) {
    let mut bytes = [0u8; TOKEN_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    let token = Secret::new(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)));
    let hash = hash(&token);
    (token, hash)
}

/// The stored form of a token string: its SHA-256 in lowercase hex.
pub fn hash(token: &Secret) -> String {
    hex(&sha256(token.expose().as_bytes()))
}

/// Checks the shape of a presented token before it is hashed and looked up, so a
/// stray password or a truncated paste is told apart from a wrong token only in logs.
pub fn check_shape(token: &Secret) -> Result<(), AuthError> {
    let t = token.expose();
    let well_formed = t.len() == TOKEN_CHARS
        && t.starts_with(TOKEN_PREFIX)
        && URL_SAFE_NO_PAD
            .decode(&t.as_bytes()[TOKEN_PREFIX.len()..])
            .is_ok_and(|b| b.len() == TOKEN_BYTES);
    if well_formed {
        Ok(())
    } else {
        Err(AuthError::Malformed("token"))
    }
}

/// Whether a stored hash is 64 lowercase hex digits (used when `auth.json` is read).
pub fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_has_its_shape_and_its_hash_is_stable() {
        let (token, stored) = generate();
        check_shape(&token).unwrap();
        assert_eq!(token.expose().len(), TOKEN_CHARS);
        assert!(is_hash(&stored));
        assert_eq!(hash(&token), stored);
        let (other, other_hash) = generate();
        assert_ne!(token, other);
        assert_ne!(stored, other_hash);
    }

    #[test]
    fn things_that_are_not_tokens_are_told_so() {
        for bad in [
            "",
            "rill_",
            "hunter22hunter22",
            &format!("rill_{}", "A".repeat(42)),
        ] {
            assert_eq!(
                check_shape(&Secret::new(bad)),
                Err(AuthError::Malformed("token"))
            );
        }
    }
}
