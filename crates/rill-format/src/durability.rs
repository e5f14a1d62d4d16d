//! A topic's durability policy: the one type the log engine, the broker, the SDK and the
//! CLI share, written `always`, `interval:MS` or `never`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// When an append is made durable, and so what an acknowledgement promises.
///
/// Written (by [`Display`](fmt::Display), parsed by [`FromStr`]) as `always`,
/// `interval:MS` (a positive number of milliseconds) or `never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// Acknowledge only after `fdatasync` covered the batch. Concurrent appends share
    /// one sync (group commit). Survives process crashes and power loss.
    #[default]
    Always,
    /// Acknowledge after the write to the page cache; a background timer syncs
    /// unsynced data once it is this old, so appends never wait for an fsync (like
    /// Redis `appendfsync everysec`). Survives a process crash; a power loss may lose
    /// up to the interval plus the timer's tick. On the wire and on disk the interval
    /// is whole milliseconds, at least 1.
    Interval(Duration),
    /// Acknowledge after the write to the page cache; sync only on segment roll and
    /// close. Survives a process crash; a power loss may lose any unsynced tail.
    Never,
}

impl Durability {
    /// The interval of `Interval` in whole milliseconds (as the wire and the catalog
    /// keep it); `None` for the others.
    pub fn interval_ms(self) -> Option<u64> {
        match self {
            Self::Interval(d) => Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            _ => None,
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Always => f.write_str("always"),
            Self::Never => f.write_str("never"),
            Self::Interval(d) => write!(f, "interval:{}", d.as_millis()),
        }
    }
}

/// A durability that is not `always`, `interval:MS` (MS ≥ 1) or `never`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad durability {input:?}: expected always, interval:MS (MS >= 1) or never")]
pub struct ParseDurabilityError {
    /// What was given.
    pub input: String,
}

impl FromStr for Durability {
    type Err = ParseDurabilityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseDurabilityError {
            input: s.to_owned(),
        };
        match s {
            "always" => Ok(Self::Always),
            "never" => Ok(Self::Never),
            _ => {
                let ms = s.strip_prefix("interval:").ok_or_else(bad)?;
                // Digits only: no sign, no spaces.
                if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                match ms.parse::<u64>() {
                    Ok(ms) if ms > 0 => Ok(Self::Interval(Duration::from_millis(ms))),
                    _ => Err(bad()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_parses_the_same_forms() {
        for (text, d) in [
            ("always", Durability::Always),
            ("never", Durability::Never),
            (
                "interval:250",
                Durability::Interval(Duration::from_millis(250)),
            ),
        ] {
            assert_eq!(text.parse::<Durability>().unwrap(), d);
            assert_eq!(d.to_string(), text);
        }
        assert_eq!(Durability::default(), Durability::Always);
        assert_eq!(
            Durability::Interval(Duration::from_millis(7)).interval_ms(),
            Some(7)
        );
        assert_eq!(Durability::Never.interval_ms(), None);
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "Always",
            "interval",
            "interval:",
            "interval:0",
            "interval:-5",
            "interval:+5",
            "interval: 5",
            "interval:5ms",
            "interval:99999999999999999999999",
            "sometimes",
        ] {
            let err = bad.parse::<Durability>().unwrap_err();
            assert_eq!(err.input, bad);
            assert!(err.to_string().contains("interval:MS"), "{err}");
        }
    }
}
