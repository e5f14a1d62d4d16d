//! Building record batches.

use bytes::Bytes;

use crate::batch::ProducerInfo;
use crate::header::{HEADER_NAME_LEN_MAX, Header};
use crate::layout::*;
use crate::{FormatError, RecordError, varint};

/// One record to add to a batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct NewRecord<'a> {
    /// The key, if any; keyed routing hashes it.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: &'a [u8],
    /// Typed headers, in order.
    pub headers: &'a [Header<'a>],
    /// µs after the batch's first timestamp (usually 0).
    pub timestamp_delta_us: u64,
}

impl<'a> NewRecord<'a> {
    /// A record holding only `value`.
    pub fn value(value: &'a [u8]) -> Self {
        Self {
            value,
            ..Self::default()
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }

    /// Sets the headers.
    pub fn headers(mut self, headers: &'a [Header<'a>]) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the timestamp delta.
    pub fn timestamp_delta_us(mut self, delta: u64) -> Self {
        self.timestamp_delta_us = delta;
        self
    }
}

/// Builds one batch in a single buffer, then seals it with both CRCs.
///
/// ```
/// use rill_format::{BatchBuilder, BatchView, NewRecord};
///
/// let mut builder = BatchBuilder::new();
/// builder.push(NewRecord::value(b"hello").key(b"k"))?;
/// let bytes = builder.finish()?;
/// let batch = BatchView::parse(&bytes)?;
/// assert_eq!(batch.records().next().unwrap().value, b"hello");
/// # Ok::<(), rill_format::FormatError>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    buf: Vec<u8>,
    count: u32,
    max_delta: u64,
    /// The largest record body pushed, as `BatchView::largest_record_bytes` counts it.
    largest_record_bytes: usize,
    producer: Option<ProducerInfo>,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty builder whose buffer holds `bytes` without growing.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(bytes.max(HEADER_LEN));
        buf.resize(HEADER_LEN, 0);
        Self {
            buf,
            count: 0,
            max_delta: 0,
            largest_record_bytes: 0,
            producer: None,
        }
    }

    /// Marks the batch as written by an idempotent producer.
    pub fn producer(&mut self, producer: ProducerInfo) -> &mut Self {
        self.producer = Some(producer);
        self
    }

    /// Number of records pushed so far.
    pub fn record_count(&self) -> u32 {
        self.count
    }

    /// Bytes the batch would have if finished now.
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes `record` would add to the batch.
    pub fn record_len(record: &NewRecord<'_>) -> usize {
        let body = body_len(record, 0);
        varint::len(body as u64) + body
    }

    /// Appends a record.
    ///
    /// Fails if a header name is empty or longer than 255 bytes, or if the batch
    /// already holds `u32::MAX` records.
    pub fn push(&mut self, record: NewRecord<'_>) -> Result<(), FormatError> {
        let index = self.count;
        for header in record.headers {
            let n = header.name.len();
            if n == 0 || n > HEADER_NAME_LEN_MAX {
                return Err(FormatError::Record {
                    index,
                    reason: RecordError::HeaderNameLength(n as u64),
                });
            }
        }
        let next = index.checked_add(1).ok_or(FormatError::Overflow)?;
        let body = body_len(&record, index);
        let buf = &mut self.buf;
        buf.reserve(varint::len(body as u64) + body);
        varint::put(buf, body as u64);
        buf.push(0);
        varint::put(buf, record.timestamp_delta_us);
        varint::put(buf, u64::from(index));
        match record.key {
            None => varint::put(buf, 0),
            Some(key) => {
                varint::put(buf, key.len() as u64 + 1);
                buf.extend_from_slice(key);
            }
        }
        varint::put(buf, record.value.len() as u64);
        buf.extend_from_slice(record.value);
        varint::put(buf, record.headers.len() as u64);
        for header in record.headers {
            header.encode(buf);
        }
        self.count = next;
        self.max_delta = self.max_delta.max(record.timestamp_delta_us);
        self.largest_record_bytes = self.largest_record_bytes.max(body);
        Ok(())
    }

    /// Seals the batch: writes the header and both CRCs and returns the bytes.
    ///
    /// The broker-owned fields are left for the broker to stamp: base offset 0 and a
    /// first timestamp of 0. Fails on an empty batch or one over 4 GiB.
    pub fn finish(mut self) -> Result<Vec<u8>, FormatError> {
        self.seal()?;
        Ok(self.buf)
    }

    /// Like [`BatchBuilder::finish`], as a [`BuiltBatch`]: bytes nothing can change
    /// any more, with what checking them would find.
    pub fn finish_built(mut self) -> Result<BuiltBatch, FormatError> {
        self.seal()?;
        Ok(BuiltBatch {
            largest_record_bytes: self.largest_record_bytes,
            bytes: Bytes::from(self.buf),
        })
    }

    /// Like [`BatchBuilder::finish`], then resets the builder for reuse.
    pub fn finish_and_reset(&mut self) -> Result<Vec<u8>, FormatError> {
        self.seal()?;
        let mut next = Vec::with_capacity(self.buf.capacity());
        next.resize(HEADER_LEN, 0);
        self.count = 0;
        self.max_delta = 0;
        self.largest_record_bytes = 0;
        Ok(std::mem::replace(&mut self.buf, next))
    }

    fn seal(&mut self) -> Result<(), FormatError> {
        if self.count == 0 {
            return Err(FormatError::Empty);
        }
        let len = u32::try_from(self.buf.len()).map_err(|_| FormatError::TooLarge {
            bytes: self.buf.len(),
        })?;
        let max_ts = i64::try_from(self.max_delta).map_err(|_| FormatError::Overflow)?;
        let buf = &mut self.buf;
        buf[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_le_bytes());
        buf[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&0u64.to_le_bytes());
        buf[FIRST_TIMESTAMP..FIRST_TIMESTAMP + 8].copy_from_slice(&0i64.to_le_bytes());
        buf[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_ts.to_le_bytes());
        buf[MAGIC] = crate::MAGIC_V1;
        buf[RESERVED_1] = 0;
        let mut attributes = 0u16;
        let (id, epoch, seq) = match self.producer {
            Some(p) => {
                attributes |= ATTR_IDEMPOTENT;
                (p.id, p.epoch, p.base_sequence)
            }
            None => (0, 0, 0),
        };
        buf[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_le_bytes());
        buf[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&self.count.to_le_bytes());
        buf[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&id.to_le_bytes());
        buf[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&epoch.to_le_bytes());
        buf[RESERVED_2..RESERVED_2 + 2].copy_from_slice(&0u16.to_le_bytes());
        buf[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&seq.to_le_bytes());
        buf[RESERVED_3..RESERVED_3 + 4].copy_from_slice(&0u32.to_le_bytes());
        let body_crc = crc32c(&buf[BODY..]);
        buf[BODY_CRC..BODY_CRC + 4].copy_from_slice(&body_crc.to_le_bytes());
        let sealed = header_crc(buf);
        buf[HEADER_CRC..HEADER_CRC + 4].copy_from_slice(&sealed.to_le_bytes());
        Ok(())
    }
}

/// A sealed batch as [`BatchBuilder::finish_built`] made it, in this process: a batch
/// [`BatchView::parse`](crate::BatchView::parse) accepts, in shared bytes that nothing
/// can change, and what parsing them would find. Only the builder makes one.
///
/// So a broker in the same process (embedded mode) may append it without checking its
/// records and body checksum again (docs/FORMAT.md §3, "Batches built in-process"),
/// once [`BuiltBatch::is`] says that the bytes it is asked to append are these. Bytes
/// from anywhere else — a socket, a file, a caller — are always checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltBatch {
    bytes: Bytes,
    largest_record_bytes: usize,
}

impl BuiltBatch {
    /// The batch's bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The largest record's encoded bytes, as
    /// [`BatchView::largest_record_bytes`](crate::BatchView::largest_record_bytes)
    /// counts them.
    pub fn largest_record_bytes(&self) -> usize {
        self.largest_record_bytes
    }

    /// Whether `bytes` are this batch's own: the same buffer, the same length. This
    /// batch holds a reference to its buffer, so while it lives the buffer is neither
    /// freed nor reused, and a `Bytes` cannot change what it shares.
    pub fn is(&self, bytes: &[u8]) -> bool {
        std::ptr::eq(bytes.as_ptr(), self.bytes.as_ptr()) && bytes.len() == self.bytes.len()
    }
}

fn body_len(record: &NewRecord<'_>, index: u32) -> usize {
    let key = match record.key {
        None => 1,
        Some(k) => varint::len(k.len() as u64 + 1) + k.len(),
    };
    1 + varint::len(record.timestamp_delta_us)
        + varint::len(u64::from(index))
        + key
        + varint::len(record.value.len() as u64)
        + record.value.len()
        + varint::len(record.headers.len() as u64)
        + record
            .headers
            .iter()
            .map(Header::encoded_len)
            .sum::<usize>()
}
