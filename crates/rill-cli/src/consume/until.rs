//! `--from` and `--until`: where reading each partition starts and where it stops.
//!
//! `--until` is exclusive, like the end of a range: `offset:N` prints records before
//! offset N, `time:T` those stamped before T. A partition's stamps never decrease
//! (ARCHITECTURE.md, rill-storage), so the first record at or after T ends it.

use rill_client::{Record, StartAt, Topic};

/// `--until`, as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// Stop before this offset.
    Offset(u64),
    /// Stop before the first record stamped at or after this time (µs since the epoch).
    TimeMicros(i64),
}

/// Where one partition stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Before this offset.
    Before(u64),
    /// Before the first record stamped at or after this time; used while no such
    /// record is stored yet and the time has not come.
    BeforeTime(i64),
}

impl Stop {
    /// Where `partition` stops for `until`: a time is turned into the offset of the
    /// first record at or after it where one is stored, or where the time has passed
    /// (any record appended later is stamped later still).
    pub(crate) async fn resolve(
        until: Until,
        topic: &Topic,
        partition: u32,
    ) -> anyhow::Result<Self> {
        Ok(match until {
            Until::Offset(n) => Stop::Before(n),
            Until::TimeMicros(t) => {
                // The end first: a record found before it was stored when we looked.
                let end = topic.end_offset(partition).await?;
                let at = topic.offset_for_time(partition, t).await?;
                if at < end || t <= now_us() {
                    Stop::Before(at)
                } else {
                    Stop::BeforeTime(t)
                }
            }
        })
    }

    /// Whether `record` is at or past the stop (it and everything after are left out).
    pub(crate) fn stops(self, record: &Record) -> bool {
        match self {
            Stop::Before(n) => record.offset >= n,
            Stop::BeforeTime(t) => record.timestamp_us >= t,
        }
    }

    /// Whether reading from `position` on can print nothing more.
    pub(crate) fn passed(self, position: u64) -> bool {
        matches!(self, Stop::Before(n) if position >= n)
    }
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Parses `--until offset:N|time:RFC3339`.
pub(crate) fn parse_until(s: &str) -> Result<Until, String> {
    if let Some(n) = s.strip_prefix("offset:") {
        return n
            .parse()
            .map(Until::Offset)
            .map_err(|_| format!("bad offset {n:?}"));
    }
    if let Some(t) = s.strip_prefix("time:") {
        return parse_time(t).map(Until::TimeMicros);
    }
    Err("expected offset:N or time:RFC3339".into())
}

/// Parses `--from first|last|end|next|offset:N|time:RFC3339`.
pub(crate) fn parse_from(s: &str) -> Result<StartAt, String> {
    match s {
        "first" => Ok(StartAt::First),
        "last" => Ok(StartAt::Last),
        "end" => Ok(StartAt::End),
        "next" => Ok(StartAt::Next),
        _ => {
            if let Some(n) = s.strip_prefix("offset:") {
                return n
                    .parse()
                    .map(StartAt::Offset)
                    .map_err(|_| format!("bad offset {n:?}"));
            }
            if let Some(t) = s.strip_prefix("time:") {
                return parse_time(t).map(StartAt::TimestampMicros);
            }
            Err("expected first, last, end, next, offset:N or time:RFC3339".into())
        }
    }
}

/// An RFC 3339 time (e.g. `2026-01-01T00:00:00Z`) in µs since the epoch.
fn parse_time(t: &str) -> Result<i64, String> {
    let at = humantime::parse_rfc3339_weak(t).map_err(|e| format!("bad time {t:?}: {e}"))?;
    let us = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "time before 1970".to_owned())?
        .as_micros();
    i64::try_from(us).map_err(|_| "time too large".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: u64, timestamp_us: i64) -> Record {
        Record {
            partition: 0,
            offset,
            timestamp_us,
            key: None,
            headers: Vec::new(),
            value: bytes::Bytes::new(),
        }
    }

    #[test]
    fn stops_are_exclusive() {
        assert!(!Stop::Before(5).stops(&record(4, 0)));
        assert!(Stop::Before(5).stops(&record(5, 0)));
        assert!(!Stop::BeforeTime(100).stops(&record(9, 99)));
        assert!(Stop::BeforeTime(100).stops(&record(9, 100)));
        assert!(Stop::Before(5).passed(5));
        assert!(!Stop::Before(5).passed(4));
        assert!(!Stop::BeforeTime(1).passed(u64::MAX));
    }

    #[test]
    fn from_and_until_parse_every_form() {
        assert_eq!(parse_from("end"), Ok(StartAt::End));
        assert_eq!(parse_from("offset:3"), Ok(StartAt::Offset(3)));
        assert_eq!(
            parse_from("time:1970-01-01T00:00:01Z"),
            Ok(StartAt::TimestampMicros(1_000_000))
        );
        assert!(parse_from("yesterday").unwrap_err().contains("end"));
        assert_eq!(parse_until("offset:9"), Ok(Until::Offset(9)));
        assert_eq!(
            parse_until("time:1970-01-01T00:00:02Z"),
            Ok(Until::TimeMicros(2_000_000))
        );
        assert!(parse_until("last").is_err());
        assert!(parse_until("offset:-1").is_err());
    }
}
