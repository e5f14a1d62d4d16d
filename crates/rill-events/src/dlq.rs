//! Dead letters: listing them and re-publishing them to the main topic
//! (docs/EVENTS.md §10; `rill events dlq` and `rill events replay`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use rill_client::{Client, ClientError, Message, Position, Record, Value};

use crate::runtime::records::retry_header;
use crate::{
    DLQ_HEADER, DeadLetterReason, ERROR_HEADER, EVENT_HEADER, EventHeader, RETRY_HEADER,
    dead_letter_topic,
};

/// The header a dead letter keeps its key in when the key does not route to the
/// letter's partition (so the letter could not be published keyed there).
pub const KEY_HEADER: &str = "rill.key";

/// Bytes asked for per fetch while listing.
const FETCH_BYTES_MAX: u32 = 4 << 20;

/// One dead letter of a consumer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Where it is in the dead-letter topic.
    pub position: Position,
    /// Why it is one (`None` if the byte is unknown to this build).
    pub reason: Option<DeadLetterReason>,
    /// Failed attempts of its key when it was written.
    pub attempts: u32,
    /// The event key's bytes, if it had one.
    pub key: Option<Bytes>,
    /// The event's tag, if its `rill.ev` header decodes.
    pub tag: Option<u32>,
    /// The main partition and the lowest and highest main offsets it stands for.
    pub source: Option<(u32, u64, u64)>,
    /// The last error's text.
    pub error: Option<String>,
    /// The record as stored.
    pub record: Record,
}

fn key_of(record: &Record) -> Option<Bytes> {
    record
        .key
        .clone()
        .or_else(|| match record.header(KEY_HEADER) {
            Some(Value::Bytes(b)) => Some(b.clone()),
            _ => None,
        })
}

fn reason_of(record: &Record) -> Option<DeadLetterReason> {
    match record.header(DLQ_HEADER) {
        Some(Value::U8(b)) => DeadLetterReason::from_byte(*b),
        _ => None,
    }
}

/// Every record of every partition of a topic (bounded by the topic's size: this is an
/// operator's listing).
async fn all_records(
    client: &Client,
    stream: &str,
    topic: &str,
) -> Result<Vec<Record>, ClientError> {
    let t = client.stream(stream).topic(topic);
    let partitions = t.partitions().await?;
    let mut out = Vec::new();
    for p in 0..partitions {
        let mut at = t.first_offset(p).await?;
        loop {
            let f = match t
                .fetch(Position::new(p, at), FETCH_BYTES_MAX, Duration::ZERO)
                .await
            {
                Ok(f) => f,
                Err(e) => match e.lost_range() {
                    Some((_, _, Some(to))) => {
                        at = to.max(at + 1);
                        continue;
                    }
                    _ => return Err(e),
                },
            };
            if f.records.is_empty() {
                break;
            }
            at = f.next_offset;
            out.extend(f.records);
        }
    }
    Ok(out)
}

/// The dead letters of consumer `consumer` of `stream/topic` not replayed yet, in
/// partition and offset order; only those of `key` if given.
pub async fn dead_letters(
    client: &Client,
    stream: &str,
    topic: &str,
    consumer: &str,
    key: Option<&[u8]>,
) -> Result<Vec<DeadLetter>, ClientError> {
    let records = all_records(client, stream, &dead_letter_topic(topic, consumer)).await?;
    let replayed: BTreeSet<(u32, u64)> = records
        .iter()
        .filter(|r| reason_of(r) == Some(DeadLetterReason::Replayed))
        .filter_map(|r| {
            let b: [u8; 8] = r.value.as_ref().try_into().ok()?;
            Some((r.partition, u64::from_le_bytes(b)))
        })
        .collect();
    let mut out = Vec::new();
    for record in records {
        if reason_of(&record) == Some(DeadLetterReason::Replayed)
            || replayed.contains(&(record.partition, record.offset))
        {
            continue;
        }
        let k = key_of(&record);
        if key.is_some_and(|want| k.as_deref() != Some(want)) {
            continue;
        }
        let retry = retry_header(&record).ok();
        let tag = match record.header(EVENT_HEADER) {
            Some(Value::Bytes(b)) => EventHeader::decode(b).ok().map(|h| h.tag),
            _ => None,
        };
        out.push(DeadLetter {
            position: record.position(),
            reason: reason_of(&record),
            attempts: retry.map_or(0, |h| h.attempt),
            key: k,
            tag,
            source: retry.map(|h| (h.source_partition, h.source_first, h.source_last)),
            error: match record.header(ERROR_HEADER) {
                Some(Value::Str(s)) => Some(s.clone()),
                _ => None,
            },
            record,
        });
    }
    Ok(out)
}

/// Re-publishes the dead letters of `consumer` (of `key`, if given) to the main topic,
/// as they were published (key, value, `rill.ev`; no retry headers), on the idempotent
/// producer; then marks each replayed in the dead-letter topic, so a second run does
/// not publish them again. Returns how many were replayed. A crash between publishing
/// and marking may publish a batch twice.
pub async fn replay_dead_letters(
    client: &Client,
    stream: &str,
    topic: &str,
    consumer: &str,
    key: Option<&[u8]>,
) -> Result<usize, ClientError> {
    let letters = dead_letters(client, stream, topic, consumer, key).await?;
    if letters.is_empty() {
        return Ok(0);
    }
    let main = client.stream(stream).topic(topic);
    let producer = main.producer().build().await?;
    let mut keyed = Vec::new();
    let mut unkeyed: Vec<(u32, Message)> = Vec::new();
    for letter in &letters {
        let mut m = Message::new(letter.record.value.clone());
        for (name, value) in &letter.record.headers {
            if ![RETRY_HEADER, ERROR_HEADER, DLQ_HEADER, KEY_HEADER].contains(&name.as_str()) {
                m = m.with_header(name.clone(), value.clone());
            }
        }
        match &letter.key {
            Some(k) => keyed.push(m.with_key(k.clone())),
            None => {
                let p = letter.source.map_or(letter.position.partition, |s| s.0);
                unkeyed.push((p, m));
            }
        }
    }
    if !keyed.is_empty() {
        producer.send_batch(keyed).await?;
    }
    for (p, m) in unkeyed {
        producer.send_to_partition(m, p).await?;
    }
    producer.shutdown().await?;
    // The markers, per dead-letter partition.
    let dlq = client
        .stream(stream)
        .topic(dead_letter_topic(topic, consumer));
    let marks = dlq.producer().build().await?;
    let mut by_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for letter in &letters {
        by_partition
            .entry(letter.position.partition)
            .or_default()
            .push(letter.position.offset);
    }
    for (p, offsets) in by_partition {
        for offset in offsets {
            let m = Message::new(offset.to_le_bytes().to_vec())
                .with_header(DLQ_HEADER, Value::U8(DeadLetterReason::Replayed.to_byte()));
            marks.send_to_partition(m, p).await?;
        }
    }
    marks.shutdown().await?;
    Ok(letters.len())
}
