//! Stream, topic and consumer names.

use crate::BrokerError;

/// Checks a user-chosen name against the protocol's rule ([`rill_proto::name_problem`]:
/// 1–255 bytes of `[A-Za-z0-9._-]`, and not `.` or `..`; names become directory names).
pub fn validate_name(what: &'static str, name: &str) -> Result<(), BrokerError> {
    match rill_proto::name_problem(name) {
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
