//! Stream, topic and consumer names.

use crate::BrokerError;

/// Longest name, in bytes.
pub(crate) const NAME_LEN_MAX: usize = 255;

/// Checks a user-chosen name: 1–255 bytes of `[A-Za-z0-9._-]`, and not `.` or `..`
/// (names become directory names).
pub fn validate_name(what: &'static str, name: &str) -> Result<(), BrokerError> {
    let reason = if name.is_empty() {
        Some("is empty")
    } else if name.len() > NAME_LEN_MAX {
        Some("is longer than 255 bytes")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("may only hold A-Z, a-z, 0-9, '.', '_' and '-'")
    } else if name == "." || name == ".." {
        Some("may not be '.' or '..'")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(BrokerError::InvalidName {
            what,
            name: name.chars().take(64).collect(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects() {
        for ok in ["shop", "orders.v2", "a-b_c", "X", "__x", &"a".repeat(255)] {
            assert!(validate_name("topic", ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"a".repeat(256), "a\0"] {
            assert!(validate_name("topic", bad).is_err(), "{bad:?}");
        }
    }
}
