//! The rule for stream, topic, consumer and group names (`docs/PROTOCOL.md` §7): the one
//! the broker enforces and clients check before they ask.

/// Longest name, in bytes.
pub const NAME_LEN_MAX: usize = 255;

/// Why `name` breaks the name rule, if it does: 1–255 bytes of `[A-Za-z0-9._-]`, and not
/// `.` or `..` (names become directory names).
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects() {
        for ok in ["shop", "orders.v2", "a-b_c", "X", "__x", &"a".repeat(255)] {
            assert_eq!(name_problem(ok), None, "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"a".repeat(256), "a\0"] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
    }
}
