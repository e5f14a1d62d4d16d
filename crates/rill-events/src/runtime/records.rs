//! Reading event and retry records, and writing retry records, markers and dead letters
//! (docs/EVENTS.md §2, §6).

use bytes::Bytes;
use rill_client::{Message, Record, Value};

use crate::header::error_text;
use crate::{
    DLQ_HEADER, DeadLetterReason, ERROR_HEADER, EVENT_HEADER, ErrorClass, EventHeader, HeaderError,
    Ordering, RETRY_HEADER, RetryHeader, RetryKind, key_hash,
};

/// A header's bytes, if it is a `bytes` value.
fn bytes_header<'a>(record: &'a Record, name: &'static str) -> Result<&'a [u8], HeaderError> {
    match record.header(name) {
        None => Err(HeaderError::Missing(name)),
        Some(Value::Bytes(b)) => Ok(b),
        Some(_) => Err(HeaderError::NotBytes(name)),
    }
}

/// The `rill.ev` header of a record, checked against its key (which is there and not
/// empty when this succeeds).
pub(crate) fn event_header(record: &Record) -> Result<EventHeader, HeaderError> {
    let header = EventHeader::decode(bytes_header(record, EVENT_HEADER)?)?;
    let Some(key) = record.key.as_ref().filter(|k| !k.is_empty()) else {
        return Err(HeaderError::Missing("record key"));
    };
    let actual = key_hash(key);
    if actual != header.key_hash {
        return Err(HeaderError::KeyHash {
            stated: header.key_hash,
            actual,
        });
    }
    Ok(header)
}

/// The `rill.retry` header of a record.
pub(crate) fn retry_header(record: &Record) -> Result<RetryHeader, HeaderError> {
    RetryHeader::decode(bytes_header(record, RETRY_HEADER)?)
}

fn bytes_value(b: &[u8]) -> Value {
    Value::Bytes(Bytes::copy_from_slice(b))
}

/// A retry record of pending work, or a dead letter of handled work: the body, the
/// event header (with `ordering`), the retry header, and the error text.
pub(crate) struct WorkRecord<'a> {
    pub(crate) key: &'a Bytes,
    pub(crate) body: Vec<u8>,
    pub(crate) event: EventHeader,
    pub(crate) ordering: Ordering,
    pub(crate) retry: RetryHeader,
    pub(crate) error: Option<&'a str>,
}

impl WorkRecord<'_> {
    pub(crate) fn message(self) -> Message {
        let event = EventHeader {
            ordering: self.ordering,
            ..self.event
        };
        let mut m = Message::new(self.body)
            .with_key(self.key.clone())
            .with_header(EVENT_HEADER, bytes_value(&event.encode()))
            .with_header(RETRY_HEADER, bytes_value(&self.retry.encode()));
        if let Some(e) = self.error {
            m = m.with_header(ERROR_HEADER, Value::Str(error_text(e).to_owned()));
        }
        m
    }
}

/// The done marker of `key`: closes its pending work below the marker's offset.
pub(crate) fn done_marker(key: &Bytes, partition: u32) -> Message {
    let retry = RetryHeader {
        kind: RetryKind::Done,
        attempt: 0,
        first_failure_us: 0,
        last_failure_us: 0,
        last_error: ErrorClass::None,
        source_partition: partition,
        source_first: 0,
        source_last: 0,
    };
    Message::new(Bytes::new())
        .with_key(key.clone())
        .with_header(RETRY_HEADER, bytes_value(&retry.encode()))
}

/// Adds the dead-letter reason to a message.
pub(crate) fn dead_letter(message: Message, reason: DeadLetterReason) -> Message {
    message.with_header(DLQ_HEADER, Value::U8(reason.to_byte()))
}

/// A dead letter of a record that could not be handled at all: the record as it was,
/// with a retry header naming where it came from, the reason and the error.
pub(crate) fn raw_dead_letter(
    record: &Record,
    reason: DeadLetterReason,
    error: &str,
    now_us: i64,
    source: Option<(u64, u64)>,
) -> Message {
    let (first, last) = source.unwrap_or((record.offset, record.offset));
    let retry = RetryHeader {
        kind: RetryKind::Work,
        attempt: 0,
        first_failure_us: now_us,
        last_failure_us: now_us,
        last_error: ErrorClass::Undecodable,
        source_partition: record.partition,
        source_first: first,
        source_last: last,
    };
    let mut m = Message::new(record.value.clone());
    if let Some(k) = record.key.clone().filter(|k| !k.is_empty()) {
        m = m.with_key(k);
    }
    for (name, value) in &record.headers {
        if name != RETRY_HEADER && name != ERROR_HEADER && name != DLQ_HEADER {
            m = m.with_header(name.clone(), value.clone());
        }
    }
    let m = m
        .with_header(RETRY_HEADER, bytes_value(&retry.encode()))
        .with_header(ERROR_HEADER, Value::Str(error_text(error).to_owned()));
    dead_letter(m, reason)
}

/// Microseconds since the epoch, now.
pub(crate) fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The time of `us` microseconds since the epoch (`None` for 0: never).
pub(crate) fn time_of(us: i64) -> Option<std::time::SystemTime> {
    let us = u64::try_from(us).ok().filter(|&u| u > 0)?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_micros(us))
}
