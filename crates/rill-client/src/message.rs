//! Owned messages to publish and records read back.

use bytes::Bytes;
use rill_format::{Header, HeaderValue};

/// An owned, typed header value: one variant per header type of the record-batch
/// format (`docs/FORMAT.md`), each read back with the type it was written with.
///
/// Exhaustive on purpose: a header is never turned into another type or a placeholder.
/// A new header type comes with a new batch format version and is a breaking change of
/// this enum, so every `match` on it is revisited at compile time.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Value {
    Str(String),
    Bytes(Bytes),
    Bool(bool),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    F32(f32),
    F64(f64),
}

impl Value {
    pub(crate) fn borrow(&self) -> HeaderValue<'_> {
        match self {
            Self::Str(v) => HeaderValue::Str(v),
            Self::Bytes(v) => HeaderValue::Bytes(v),
            Self::Bool(v) => HeaderValue::Bool(*v),
            Self::I8(v) => HeaderValue::I8(*v),
            Self::I16(v) => HeaderValue::I16(*v),
            Self::I32(v) => HeaderValue::I32(*v),
            Self::I64(v) => HeaderValue::I64(*v),
            Self::I128(v) => HeaderValue::I128(*v),
            Self::U8(v) => HeaderValue::U8(*v),
            Self::U16(v) => HeaderValue::U16(*v),
            Self::U32(v) => HeaderValue::U32(*v),
            Self::U64(v) => HeaderValue::U64(*v),
            Self::U128(v) => HeaderValue::U128(*v),
            Self::F32(v) => HeaderValue::F32(*v),
            Self::F64(v) => HeaderValue::F64(*v),
        }
    }

    /// The value of a header read from `buffer` (a bytes value is a slice of it, not a
    /// copy, like the record's key and value).
    pub(crate) fn from_buffer(value: HeaderValue<'_>, buffer: &Bytes) -> Self {
        match value {
            HeaderValue::Str(v) => Self::Str(v.to_owned()),
            HeaderValue::Bytes(v) => Self::Bytes(buffer.slice_ref(v)),
            HeaderValue::Bool(v) => Self::Bool(v),
            HeaderValue::I8(v) => Self::I8(v),
            HeaderValue::I16(v) => Self::I16(v),
            HeaderValue::I32(v) => Self::I32(v),
            HeaderValue::I64(v) => Self::I64(v),
            HeaderValue::I128(v) => Self::I128(v),
            HeaderValue::U8(v) => Self::U8(v),
            HeaderValue::U16(v) => Self::U16(v),
            HeaderValue::U32(v) => Self::U32(v),
            HeaderValue::U64(v) => Self::U64(v),
            HeaderValue::U128(v) => Self::U128(v),
            HeaderValue::F32(v) => Self::F32(v),
            HeaderValue::F64(v) => Self::F64(v),
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Self::$v(v.into())
            }
        })*
    };
}

value_from! {
    String => Str, &str => Str, Bytes => Bytes, Vec<u8> => Bytes, bool => Bool,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64, i128 => I128,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64, u128 => U128, f32 => F32, f64 => F64,
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Self::Bytes(Bytes::copy_from_slice(v))
    }
}

/// A message to publish.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// The key; keyed routing hashes it to a partition.
    pub key: Option<Bytes>,
    /// The value.
    pub value: Bytes,
    /// Typed headers, in order.
    pub headers: Vec<(String, Value)>,
}

impl Message {
    /// A message holding `value`.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self {
            value: value.into(),
            ..Self::default()
        }
    }

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Encoded size, for batching limits.
    pub(crate) fn approx_len(&self) -> usize {
        16 + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.len()
            + self
                .headers
                .iter()
                .map(|(n, _)| n.len() + 24)
                .sum::<usize>()
    }
}

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<V = Bytes> {
    /// The partition it was read from.
    pub partition: u32,
    /// Its offset in the partition.
    pub offset: u64,
    /// Append time, µs since the Unix epoch.
    pub timestamp_us: i64,
    /// The key, if any.
    pub key: Option<Bytes>,
    /// Typed headers, in order.
    pub headers: Vec<(String, Value)>,
    /// The value (raw bytes, or decoded by a typed reader).
    pub value: V,
}

impl<V> Record<V> {
    /// Where the record is: its partition and offset.
    pub fn position(&self) -> Position {
        Position::new(self.partition, self.offset)
    }

    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&Value> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub(crate) fn map<W>(self, value: W) -> Record<W> {
        Record {
            partition: self.partition,
            offset: self.offset,
            timestamp_us: self.timestamp_us,
            key: self.key,
            headers: self.headers,
            value,
        }
    }
}

/// A record's place: partition and offset. Calls that take both take a `Position`, so
/// the two numbers cannot be swapped by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// Partition.
    pub partition: u32,
    /// Offset in the partition.
    pub offset: u64,
}

impl Position {
    /// The record at `offset` of `partition`.
    pub const fn new(partition: u32, offset: u64) -> Self {
        Self { partition, offset }
    }
}

/// Builds a batch from messages (all for one partition).
pub(crate) fn build_batch(
    messages: &[Message],
    producer: Option<rill_format::ProducerInfo>,
) -> Result<rill_format::BuiltBatch, crate::ClientError> {
    let bytes: usize = messages.iter().map(Message::approx_len).sum();
    let mut builder = rill_format::BatchBuilder::with_capacity(64 + bytes);
    if let Some(p) = producer {
        builder.producer(p);
    }
    let mut headers: Vec<Header<'_>> = Vec::new();
    for m in messages {
        headers.clear();
        headers.extend(m.headers.iter().map(|(n, v)| Header::new(n, v.borrow())));
        let mut record = rill_format::NewRecord::value(&m.value).headers(&headers);
        if let Some(k) = &m.key {
            record = record.key(k);
        }
        builder
            .push(record)
            .map_err(|e| crate::ClientError::InvalidArgument(e.to_string()))?;
    }
    builder
        .finish_built()
        .map_err(|e| crate::ClientError::InvalidArgument(e.to_string()))
}

/// A fetched batch that failed its checks while its header still parses: where it
/// lies, so reading can step over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CorruptBatch {
    /// Its first offset, or the first one asked for if that is later.
    pub(crate) from: u64,
    /// The offset after it.
    pub(crate) to: u64,
    /// What failed.
    pub(crate) reason: String,
}

/// Decodes the records of fetched batches at or after `from` into `out`. Keys and
/// values are slices of `bytes`, not copies.
///
/// Stops before a batch that fails validation (a checksum, a record) but whose header
/// still parses, and returns its range: the records before it are in `out`, and reading
/// goes on after it. A batch whose header does not parse either leaves no way to know
/// where it ends: that is an error, and `out` is left as it was.
pub(crate) fn decode_records(
    partition: u32,
    bytes: &Bytes,
    from: u64,
    out: &mut std::collections::VecDeque<Record>,
) -> Result<Option<CorruptBatch>, crate::ClientError> {
    let before = out.len();
    let mut rest: &[u8] = bytes;
    while !rest.is_empty() {
        // Records are kept as the batch is validated (one pass over them, not two);
        // a batch that fails takes its records back out.
        let kept = out.len();
        let parsed = rill_format::BatchView::parse_with(rest, |r| {
            if r.offset < from {
                return;
            }
            out.push_back(Record {
                partition,
                offset: r.offset,
                timestamp_us: r.timestamp_us,
                key: r.key.map(|k| bytes.slice_ref(k)),
                headers: r
                    .headers()
                    .map(|h| (h.name.to_owned(), Value::from_buffer(h.value, bytes)))
                    .collect(),
                value: bytes.slice_ref(r.value),
            });
        });
        let batch = match parsed {
            Ok(batch) => batch,
            Err(e) => {
                out.truncate(kept);
                let header = rill_format::BatchHeader::parse(rest).ok().and_then(|h| {
                    let end = h.next_offset()?;
                    let len = h.batch_length as usize;
                    (len <= rest.len()).then_some((h.base_offset, end, len))
                });
                match header {
                    // Wholly before what was asked for: nothing of it is wanted.
                    Some((_, end, len)) if end <= from => {
                        rest = &rest[len..];
                        continue;
                    }
                    Some((base, end, _)) => {
                        return Ok(Some(CorruptBatch {
                            from: base.max(from),
                            to: end,
                            reason: e.to_string(),
                        }));
                    }
                    None => {
                        out.truncate(before);
                        return Err(e.into());
                    }
                }
            }
        };
        rest = &rest[batch.as_bytes().len()..];
    }
    Ok(None)
}
