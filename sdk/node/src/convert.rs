//! Values between JavaScript and the SDK: messages and typed headers in, records and
//! positions out, admin answers as JSON text (`index.cjs` parses them).
//!
//! Bytes cross as `Buffer`s (JS hands every `Uint8Array` over as one); integer header
//! values cross as decimal text so that 64- and 128-bit values keep every digit.

use std::time::Duration;

use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, Float64Array, Int32Array, Uint32Array};
use napi_derive::napi;
use rill_client::{
    ClientError, GroupDescription, Message, Position, Record, TopicConfig, TopicDescription, Value,
};
use serde_json::{Value as Json, json};

use crate::error::{invalid, invalid_napi};

/// Most headers one message may carry: a bound on what one call copies.
pub(crate) const HEADERS_MAX: usize = 4096;
/// Most messages one batch call takes.
pub(crate) const BATCH_MESSAGES_MAX: usize = 100_000;

/// The header types, by the names JS uses (`HeaderValue.uint16(7)` has kind `uint16`).
pub(crate) const HEADER_TYPES: [&str; 15] = [
    "str", "bytes", "bool", "int8", "int16", "int32", "int64", "int128", "uint8", "uint16",
    "uint32", "uint64", "uint128", "float32", "float64",
];

/// A typed header as it crosses: `kind` names the type; the value is in `text` (str
/// and integers, in decimal), `bytes`, `number` (floats) or `flag` (bool).
#[napi(object)]
#[allow(missing_debug_implementations)] // `Buffer` has no `Debug`.
pub struct Header {
    pub name: String,
    pub kind: String,
    pub text: Option<String>,
    pub bytes: Option<Buffer>,
    pub number: Option<f64>,
    pub flag: Option<bool>,
}

/// A message as it crosses into the SDK.
#[napi(object)]
#[allow(missing_debug_implementations)] // `Buffer` has no `Debug`.
pub struct MessageIn {
    pub value: Buffer,
    pub key: Option<Buffer>,
    pub headers: Option<Vec<Header>>,
}

/// A record as it crosses out of the SDK.
#[napi(object)]
#[allow(missing_debug_implementations)] // `Buffer` has no `Debug`.
pub struct RecordOut {
    pub partition: u32,
    pub offset: i64,
    pub timestamp_us: i64,
    pub key: Option<Buffer>,
    pub headers: Vec<Header>,
    pub value: Buffer,
}

/// Records as one poll hands them to JS: a column per field and every value (and key)
/// in one buffer, so JS makes the record objects (and views into the buffers) itself
/// instead of the addon making an object and a buffer per record.
#[napi(object)]
#[allow(missing_debug_implementations)] // `Buffer` has no `Debug`.
pub struct PackedRecords {
    pub partitions: Uint32Array,
    /// Exact below 2^53, as every offset JS sees.
    pub offsets: Float64Array,
    pub timestamps_us: Float64Array,
    pub values: Buffer,
    pub value_lengths: Uint32Array,
    pub keys: Buffer,
    /// -1: no key.
    pub key_lengths: Int32Array,
    /// The records that have headers, by index, with their headers.
    pub header_indexes: Vec<u32>,
    pub headers: Vec<Vec<Header>>,
}

pub(crate) fn pack_records(records: &[Record]) -> PackedRecords {
    let n = records.len();
    let (mut partitions, mut offsets, mut timestamps) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut value_lengths, mut key_lengths) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let values_len: usize = records.iter().map(|r| r.value.len()).sum();
    let keys_len: usize = records
        .iter()
        .filter_map(|r| r.key.as_ref())
        .map(Bytes::len)
        .sum();
    let (mut values, mut keys) = (Vec::with_capacity(values_len), Vec::with_capacity(keys_len));
    let (mut header_indexes, mut headers) = (Vec::new(), Vec::new());
    for (i, r) in records.iter().enumerate() {
        partitions.push(r.partition);
        offsets.push(offset_out(r.offset) as f64);
        timestamps.push(r.timestamp_us as f64);
        values.extend_from_slice(&r.value);
        value_lengths.push(u32::try_from(r.value.len()).unwrap_or(u32::MAX));
        match &r.key {
            Some(k) => {
                keys.extend_from_slice(k);
                key_lengths.push(i32::try_from(k.len()).unwrap_or(i32::MAX));
            }
            None => key_lengths.push(-1),
        }
        if !r.headers.is_empty() {
            header_indexes.push(u32::try_from(i).unwrap_or(u32::MAX));
            headers.push(r.headers.iter().map(|(n, v)| header_out(n, v)).collect());
        }
    }
    PackedRecords {
        partitions: Uint32Array::new(partitions),
        offsets: Float64Array::new(offsets),
        timestamps_us: Float64Array::new(timestamps),
        values: Buffer::from(values),
        value_lengths: Uint32Array::new(value_lengths),
        keys: Buffer::from(keys),
        key_lengths: Int32Array::new(key_lengths),
        header_indexes,
        headers,
    }
}

/// Where a record was stored.
#[napi(object)]
#[derive(Debug, Clone, Copy)]
pub struct PositionOut {
    pub partition: u32,
    pub offset: i64,
}

/// An offset as JS gives one: a safe integer >= 0.
pub(crate) fn offset_in(what: &str, n: i64) -> Result<u64, ClientError> {
    u64::try_from(n).map_err(|_| invalid(format!("{what} must be >= 0, not {n}")))
}

/// An offset for JS (saturating, past 2^63 no real log reaches).
pub(crate) fn offset_out(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A position for JS.
pub(crate) fn position_out(p: Position) -> PositionOut {
    PositionOut {
        partition: p.partition,
        offset: offset_out(p.offset),
    }
}

/// A duration of `ms` milliseconds that must be positive.
pub(crate) fn positive_ms(what: &str, ms: u32) -> Result<Duration, ClientError> {
    if ms == 0 {
        return Err(invalid(format!("{what} must be positive")));
    }
    Ok(Duration::from_millis(u64::from(ms)))
}

fn int<T: std::str::FromStr>(name: &str, kind: &str, text: Option<&str>) -> napi::Result<T> {
    let text =
        text.ok_or_else(|| invalid_napi(format!("header {name:?}: {kind} needs a value")))?;
    text.parse::<T>().map_err(|_| {
        invalid_napi(format!(
            "header {name:?}: {text:?} is not a {kind} (out of range or not an integer)"
        ))
    })
}

fn header_in(h: Header) -> napi::Result<(String, Value)> {
    let name = h.name;
    let missing = |what: &str| invalid_napi(format!("header {name:?}: {} needs {what}", h.kind));
    let text = h.text.as_deref();
    let value = match h.kind.as_str() {
        "str" => Value::Str(h.text.clone().ok_or_else(|| missing("a string"))?),
        "bytes" => Value::Bytes(Bytes::copy_from_slice(
            h.bytes.as_deref().ok_or_else(|| missing("bytes"))?,
        )),
        "bool" => Value::Bool(h.flag.ok_or_else(|| missing("a boolean"))?),
        "int8" => Value::I8(int(&name, "int8", text)?),
        "int16" => Value::I16(int(&name, "int16", text)?),
        "int32" => Value::I32(int(&name, "int32", text)?),
        "int64" => Value::I64(int(&name, "int64", text)?),
        "int128" => Value::I128(int(&name, "int128", text)?),
        "uint8" => Value::U8(int(&name, "uint8", text)?),
        "uint16" => Value::U16(int(&name, "uint16", text)?),
        "uint32" => Value::U32(int(&name, "uint32", text)?),
        "uint64" => Value::U64(int(&name, "uint64", text)?),
        "uint128" => Value::U128(int(&name, "uint128", text)?),
        // f64 to f32 rounds, as `new Float32Array([x])[0]` does in JS.
        #[allow(clippy::cast_possible_truncation)]
        "float32" => Value::F32(h.number.ok_or_else(|| missing("a number"))? as f32),
        "float64" => Value::F64(h.number.ok_or_else(|| missing("a number"))?),
        other => {
            return Err(invalid_napi(format!(
                "header {name:?}: unknown header type {other:?}; expected one of {}",
                HEADER_TYPES.join(", ")
            )));
        }
    };
    Ok((name, value))
}

/// Headers from JS, in order (a name may come twice).
pub(crate) fn headers_in(headers: Option<Vec<Header>>) -> napi::Result<Vec<(String, Value)>> {
    let headers = headers.unwrap_or_default();
    if headers.len() > HEADERS_MAX {
        return Err(invalid_napi(format!(
            "{} headers: at most {HEADERS_MAX} per message",
            headers.len()
        )));
    }
    headers.into_iter().map(header_in).collect()
}

/// A message from JS.
pub(crate) fn message_in(m: MessageIn) -> napi::Result<Message> {
    let mut message = Message::new(Bytes::copy_from_slice(&m.value));
    message.key = m.key.map(|k| Bytes::copy_from_slice(&k));
    message.headers = headers_in(m.headers)?;
    Ok(message)
}

/// A batch's messages as JS packs them when none has headers: every value in one
/// buffer with their lengths, and every key in another with theirs (-1: no key). One
/// copy of each buffer, then a slice per message.
pub(crate) fn packed_in(
    values: &[u8],
    value_lengths: &[u32],
    keys: Option<(&[u8], &[i32])>,
) -> napi::Result<Vec<Message>> {
    let n = value_lengths.len();
    if n > BATCH_MESSAGES_MAX {
        return Err(invalid_napi(format!(
            "{n} messages: at most {BATCH_MESSAGES_MAX} per batch"
        )));
    }
    let total: u64 = value_lengths.iter().map(|&l| u64::from(l)).sum();
    if total != values.len() as u64 {
        return Err(invalid_napi("packed values do not match their lengths"));
    }
    let keys = match keys {
        None => None,
        Some((bytes, lengths)) => {
            if lengths.len() != n || lengths.iter().any(|&l| l < -1) {
                return Err(invalid_napi("packed keys do not match the values"));
            }
            let total: u64 = lengths.iter().filter_map(|&l| u64::try_from(l).ok()).sum();
            if total != bytes.len() as u64 {
                return Err(invalid_napi("packed keys do not match their lengths"));
            }
            Some((Bytes::copy_from_slice(bytes), lengths))
        }
    };
    let values = Bytes::copy_from_slice(values);
    let (mut at, mut key_at) = (0usize, 0usize);
    let mut messages = Vec::with_capacity(n);
    for (i, &len) in value_lengths.iter().enumerate() {
        let end = at + len as usize;
        let mut message = Message::new(values.slice(at..end));
        at = end;
        if let Some((bytes, lengths)) = &keys
            && let Ok(len) = usize::try_from(lengths[i])
        {
            message.key = Some(bytes.slice(key_at..key_at + len));
            key_at += len;
        }
        messages.push(message);
    }
    Ok(messages)
}

/// A batch's positions for JS to unpack: partitions and offsets, in input order.
#[napi(object)]
#[allow(missing_debug_implementations)] // Typed arrays have no `Debug`.
pub struct PackedPositions {
    pub partitions: Uint32Array,
    pub offsets: Float64Array,
}

pub(crate) fn packed_positions(positions: Vec<Position>) -> PackedPositions {
    PackedPositions {
        partitions: Uint32Array::new(positions.iter().map(|p| p.partition).collect()),
        // Offsets are below 2^53 (JS numbers are exact there), as `offset_out` says.
        offsets: Float64Array::new(
            positions
                .iter()
                .map(|p| offset_out(p.offset) as f64)
                .collect(),
        ),
    }
}

/// Messages from JS, at most [`BATCH_MESSAGES_MAX`].
pub(crate) fn messages_in(messages: Vec<MessageIn>) -> napi::Result<Vec<Message>> {
    if messages.len() > BATCH_MESSAGES_MAX {
        return Err(invalid_napi(format!(
            "{} messages: at most {BATCH_MESSAGES_MAX} per batch",
            messages.len()
        )));
    }
    messages.into_iter().map(message_in).collect()
}

fn header_out(name: &str, value: &Value) -> Header {
    let mut h = Header {
        name: name.to_owned(),
        kind: String::new(),
        text: None,
        bytes: None,
        number: None,
        flag: None,
    };
    let (kind, text) = match value {
        Value::Str(v) => ("str", Some(v.clone())),
        Value::Bytes(v) => {
            h.bytes = Some(Buffer::from(v.to_vec()));
            ("bytes", None)
        }
        Value::Bool(v) => {
            h.flag = Some(*v);
            ("bool", None)
        }
        Value::I8(v) => ("int8", Some(v.to_string())),
        Value::I16(v) => ("int16", Some(v.to_string())),
        Value::I32(v) => ("int32", Some(v.to_string())),
        Value::I64(v) => ("int64", Some(v.to_string())),
        Value::I128(v) => ("int128", Some(v.to_string())),
        Value::U8(v) => ("uint8", Some(v.to_string())),
        Value::U16(v) => ("uint16", Some(v.to_string())),
        Value::U32(v) => ("uint32", Some(v.to_string())),
        Value::U64(v) => ("uint64", Some(v.to_string())),
        Value::U128(v) => ("uint128", Some(v.to_string())),
        Value::F32(v) => {
            h.number = Some(f64::from(*v));
            ("float32", None)
        }
        Value::F64(v) => {
            h.number = Some(*v);
            ("float64", None)
        }
    };
    h.kind = kind.to_owned();
    h.text = text;
    h
}

/// A record for JS.
pub(crate) fn record_out(r: Record) -> RecordOut {
    RecordOut {
        partition: r.partition,
        offset: offset_out(r.offset),
        timestamp_us: r.timestamp_us,
        key: r.key.map(|k| Buffer::from(k.to_vec())),
        headers: r.headers.iter().map(|(n, v)| header_out(n, v)).collect(),
        value: Buffer::from(r.value.to_vec()),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A topic's options as JSON.
pub(crate) fn config_json(c: &TopicConfig) -> Json {
    json!({
        "partitions": c.partitions,
        "retentionMs": c.retention.map(millis),
        "retentionBytes": c.retention_bytes,
        "segmentBytes": c.segment_bytes,
        "durability": c.durability.to_string(),
        "maxRecordBytes": c.max_record_bytes,
        "elastic": c.elastic,
        "autoSplit": c.auto_split.map(|a| json!({
            "bytesPerS": a.bytes_per_s,
            "windowMs": a.window.map(millis),
            "cooldownMs": a.cooldown.map(millis),
        })),
    })
}

/// What a split or merge did, as JSON.
pub(crate) fn range_change_json(c: &rill_client::RangeChange) -> Json {
    json!({ "sealed": c.sealed, "opened": c.opened, "rangeEpoch": c.epoch })
}

/// A topic's description as JSON.
pub(crate) fn description_json(t: &TopicDescription) -> Json {
    let partitions: Vec<Json> = t
        .partitions
        .iter()
        .map(|p| {
            let damaged: Vec<Json> = p
                .damaged
                .iter()
                .map(|r| {
                    json!({
                        "fromOffset": r.from, "toOffset": r.to, "segment": r.segment,
                        "position": r.position, "reason": r.reason, "accepted": r.accepted,
                    })
                })
                .collect();
            json!({
                "partition": p.partition,
                "firstOffset": p.first_offset,
                "nextOffset": p.next_offset,
                "sizeBytes": p.size_bytes,
                "segments": p.segments,
                "failure": p.failure,
                "damaged": damaged,
            })
        })
        .collect();
    json!({
        "stream": t.stream,
        "name": t.name,
        "config": config_json(&t.config),
        "partitions": partitions,
        // Hash bounds are 64-bit: decimal strings, which the JS layer makes BigInts.
        "ranges": t.ranges.iter().map(|r| json!({
            "id": r.id, "lo": r.lo.to_string(), "hi": r.hi.to_string(),
            "parents": r.parents, "sealedAt": r.sealed_at, "bytesPerS": r.bytes_per_s,
        })).collect::<Vec<Json>>(),
        "rangeEpoch": t.range_epoch,
    })
}

/// A consumer group's description as JSON.
pub(crate) fn group_json(g: &GroupDescription) -> Json {
    let members: Vec<Json> = g
        .members
        .iter()
        .map(|m| {
            let metrics: serde_json::Map<String, Json> = m
                .metrics
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            json!({ "id": m.id, "owned": m.owned, "revoking": m.revoking, "metrics": metrics })
        })
        .collect();
    let partitions: Vec<Json> = g
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition, "storedOffset": p.stored_offset, "logEnd": p.log_end,
                "lag": p.lag, "owner": p.owner,
            })
        })
        .collect();
    json!({ "generation": g.generation, "members": members, "partitions": partitions })
}
