//! Parsing, validating, stamping and iterating record batches.

use crate::header::{Cursor, Headers};
use crate::layout::*;
use crate::{FormatError, RecordError};

/// Size of the fixed batch header in bytes.
pub const BATCH_HEADER_LEN: usize = HEADER_LEN;
/// The batch format version this build writes and reads.
pub const MAGIC_V1: u8 = 1;

/// Identity of an idempotent producer carried by a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerInfo {
    /// Producer id assigned by the broker.
    pub id: u64,
    /// Epoch of that id; a newer epoch fences older ones.
    pub epoch: u16,
    /// Sequence number of the batch's first record, per partition.
    pub base_sequence: u32,
}

/// Compression codec of a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compression {
    /// Records are stored as they are.
    None,
}

/// The fixed header of a batch, checked by its own CRC only.
///
/// This is what a log scan needs to step from batch to batch without touching records:
/// [`BatchHeader::parse`] verifies `header_crc` and the length, not the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Total bytes of the batch, header included.
    pub batch_length: u32,
    /// Offset of the first record.
    pub base_offset: u64,
    /// Append time of the first record, µs since the Unix epoch.
    pub first_timestamp_us: i64,
    /// Largest record timestamp in the batch, µs since the Unix epoch.
    pub max_timestamp_us: i64,
    /// Number of records.
    pub record_count: u32,
    /// The idempotent producer that wrote the batch, if any.
    pub producer: Option<ProducerInfo>,
}

impl BatchHeader {
    /// Reads and checks the header at the front of `buf` (which may hold more bytes).
    ///
    /// Checks the header CRC (which covers every header field) and the minimum length;
    /// it does not require the whole batch to be present nor check the body.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        if buf.len() < HEADER_LEN {
            return Err(FormatError::Truncated {
                needed: HEADER_LEN,
                available: buf.len(),
            });
        }
        let stored = u32_at(buf, HEADER_CRC);
        let computed = header_crc(buf);
        if stored != computed {
            return Err(FormatError::HeaderCrc { stored, computed });
        }
        let batch_length = u32_at(buf, BATCH_LENGTH);
        if (batch_length as usize) < HEADER_LEN {
            return Err(FormatError::LengthTooSmall(batch_length));
        }
        let record_count = u32_at(buf, RECORD_COUNT);
        Ok(Self {
            batch_length,
            base_offset: u64_at(buf, BASE_OFFSET),
            first_timestamp_us: i64_at(buf, FIRST_TIMESTAMP),
            max_timestamp_us: i64_at(buf, MAX_TIMESTAMP),
            record_count,
            producer: producer_at(buf),
        })
    }

    /// Offset after the batch's last record, if it does not overflow.
    pub fn next_offset(&self) -> Option<u64> {
        self.base_offset.checked_add(u64::from(self.record_count))
    }
}

/// A fully validated batch borrowed from a buffer.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    bytes: &'a [u8],
    largest_record_bytes: usize,
}

impl<'a> BatchView<'a> {
    /// Validates the batch at the front of `buf` (see `docs/FORMAT.md` §3).
    ///
    /// `buf` may continue past the batch; the view covers `batch_length` bytes.
    pub fn parse(buf: &'a [u8]) -> Result<Self, FormatError> {
        Self::parse_with(buf, |_| {})
    }

    /// [`BatchView::parse`], handing each record to `visit` as it is validated: one
    /// pass over the records where parsing and then iterating make two. On an error,
    /// `visit` may have seen some of the batch's records already; the batch is invalid
    /// as a whole, and the caller drops what it kept of them.
    pub fn parse_with(
        buf: &'a [u8],
        mut visit: impl FnMut(Record<'a>),
    ) -> Result<Self, FormatError> {
        let header = BatchHeader::parse(buf)?;
        let len = header.batch_length as usize;
        if buf.len() < len {
            return Err(FormatError::Truncated {
                needed: len,
                available: buf.len(),
            });
        }
        let bytes = &buf[..len];
        let stored = u32_at(bytes, BODY_CRC);
        let computed = crc32c(&bytes[BODY..]);
        if stored != computed {
            return Err(FormatError::BodyCrc { stored, computed });
        }
        if bytes[MAGIC] != MAGIC_V1 {
            return Err(FormatError::UnsupportedMagic(bytes[MAGIC]));
        }
        let attributes = u16_at(bytes, ATTRIBUTES);
        if bytes[RESERVED_1] != 0
            || u16_at(bytes, RESERVED_2) != 0
            || u32_at(bytes, RESERVED_3) != 0
            || attributes & !ATTR_KNOWN != 0
        {
            return Err(FormatError::ReservedBitsSet);
        }
        let codec = (attributes & ATTR_CODEC_MASK) as u8;
        if codec != 0 {
            return Err(FormatError::UnsupportedCompression(codec));
        }
        if attributes & ATTR_IDEMPOTENT == 0
            && (u64_at(bytes, PRODUCER_ID) != 0
                || u16_at(bytes, PRODUCER_EPOCH) != 0
                || u32_at(bytes, BASE_SEQUENCE) != 0)
        {
            return Err(FormatError::ReservedBitsSet);
        }
        if header.record_count == 0 {
            return Err(FormatError::Empty);
        }
        if header.next_offset().is_none() {
            return Err(FormatError::Overflow);
        }

        let mut cursor = Cursor::new(&bytes[HEADER_LEN..]);
        let mut max_delta = 0u64;
        let mut largest_record_bytes = 0usize;
        for index in 0..header.record_count {
            let decoded = decode_record(
                &mut cursor,
                index,
                header.base_offset,
                header.first_timestamp_us,
            )
            .map_err(|reason| FormatError::Record { index, reason })?;
            max_delta = max_delta.max(decoded.timestamp_delta_us);
            largest_record_bytes = largest_record_bytes.max(decoded.encoded_len);
            visit(decoded.record);
        }
        if !cursor.is_empty() {
            return Err(FormatError::CountMismatch {
                declared: header.record_count,
            });
        }
        let span = i128::from(header.max_timestamp_us) - i128::from(header.first_timestamp_us);
        if span != i128::from(max_delta) {
            return Err(FormatError::TimestampSpan {
                header_span: span,
                records_span: max_delta,
            });
        }
        Ok(Self {
            bytes,
            largest_record_bytes,
        })
    }

    /// The batch's bytes, exactly `batch_length` of them.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Total bytes of the batch.
    pub fn batch_length(&self) -> u32 {
        self.bytes.len() as u32
    }

    /// The header fields.
    pub fn header(&self) -> BatchHeader {
        BatchHeader::parse(self.bytes).expect("validated")
    }

    /// Offset of the first record.
    pub fn base_offset(&self) -> u64 {
        u64_at(self.bytes, BASE_OFFSET)
    }

    /// Number of records.
    pub fn record_count(&self) -> u32 {
        u32_at(self.bytes, RECORD_COUNT)
    }

    /// Offset after the last record.
    pub fn next_offset(&self) -> u64 {
        // Checked at parse time.
        self.base_offset() + u64::from(self.record_count())
    }

    /// Append time of the first record, µs.
    pub fn first_timestamp_us(&self) -> i64 {
        i64_at(self.bytes, FIRST_TIMESTAMP)
    }

    /// Largest record timestamp, µs.
    pub fn max_timestamp_us(&self) -> i64 {
        i64_at(self.bytes, MAX_TIMESTAMP)
    }

    /// The idempotent producer that wrote the batch, if any.
    pub fn producer(&self) -> Option<ProducerInfo> {
        producer_at(self.bytes)
    }

    /// The records' compression codec.
    pub fn compression(&self) -> Compression {
        Compression::None
    }

    /// Encoded size of the largest record (its length prefix excluded), for limits.
    pub fn largest_record_bytes(&self) -> usize {
        self.largest_record_bytes
    }

    /// The records in offset order.
    pub fn records(&self) -> Records<'a> {
        Records {
            cursor: Cursor::new(&self.bytes[HEADER_LEN..]),
            index: 0,
            count: self.record_count(),
            base_offset: self.base_offset(),
            first_timestamp_us: self.first_timestamp_us(),
        }
    }
}

/// The producer fields of the header at the front of `buf` (at least 64 bytes).
fn producer_at(buf: &[u8]) -> Option<ProducerInfo> {
    (u16_at(buf, ATTRIBUTES) & ATTR_IDEMPOTENT != 0).then(|| ProducerInfo {
        id: u64_at(buf, PRODUCER_ID),
        epoch: u16_at(buf, PRODUCER_EPOCH),
        base_sequence: u32_at(buf, BASE_SEQUENCE),
    })
}

/// One record of a batch, borrowing its bytes.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// Offset in the partition.
    pub offset: u64,
    /// Timestamp, µs since the Unix epoch.
    pub timestamp_us: i64,
    /// The key, if the record has one.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: &'a [u8],
    headers: &'a [u8],
    header_count: u64,
}

impl<'a> Record<'a> {
    /// The typed headers, in the order they were written.
    pub fn headers(&self) -> Headers<'a> {
        Headers::new(self.headers, self.header_count)
    }
}

struct Decoded<'a> {
    record: Record<'a>,
    timestamp_delta_us: u64,
    encoded_len: usize,
}

/// Decodes the record at the cursor and checks everything but the batch-level fields.
fn decode_record<'a>(
    cursor: &mut Cursor<'a>,
    index: u32,
    base_offset: u64,
    first_timestamp_us: i64,
) -> Result<Decoded<'a>, RecordError> {
    let length = cursor.varint()?;
    let body = cursor.bytes(length)?;
    let mut c = Cursor::new(body);
    let attributes = c.u8()?;
    if attributes != 0 {
        return Err(RecordError::Attributes(attributes));
    }
    let timestamp_delta_us = c.varint()?;
    let offset_delta = c.varint()?;
    if offset_delta != u64::from(index) {
        return Err(RecordError::OffsetDelta(offset_delta));
    }
    let key_len = c.varint()?;
    let key = match key_len {
        0 => None,
        n => Some(c.bytes(n - 1)?),
    };
    let value_len = c.varint()?;
    let value = c.bytes(value_len)?;
    let header_count = c.varint()?;
    let header_start = c.clone();
    let mut check = c;
    for _ in 0..header_count {
        check.header()?;
    }
    if !check.is_empty() {
        return Err(RecordError::LengthMismatch);
    }
    let headers = header_start.rest();
    Ok(Decoded {
        record: Record {
            offset: base_offset + u64::from(index),
            // Saturating: the timestamp span was checked against i64 at parse time for
            // the batch's own first timestamp; this keeps iteration total regardless.
            timestamp_us: first_timestamp_us.saturating_add_unsigned(timestamp_delta_us),
            key,
            value,
            headers,
            header_count,
        },
        timestamp_delta_us,
        encoded_len: body.len(),
    })
}

/// Iterator over the records of a validated batch.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    cursor: Cursor<'a>,
    index: u32,
    count: u32,
    base_offset: u64,
    first_timestamp_us: i64,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.index == self.count {
            return None;
        }
        // Invariant: `BatchView::parse` decoded these bytes with `decode_record`.
        let decoded = decode_record(
            &mut self.cursor,
            self.index,
            self.base_offset,
            self.first_timestamp_us,
        )
        .expect("records were validated with the batch");
        self.index += 1;
        Some(decoded.record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.count - self.index) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Records<'_> {}

/// Stamps the broker-owned fields of a batch in place and re-seals its header CRC.
///
/// Sets `base_offset` and moves the batch's timestamps so that the first record gets
/// `first_timestamp_us`, keeping the span to `max_timestamp_us`. The body, and so the
/// body CRC, is untouched. The caller must have validated the batch.
pub fn stamp(
    batch: &mut [u8],
    base_offset: u64,
    first_timestamp_us: i64,
) -> Result<(), FormatError> {
    if batch.len() < HEADER_LEN {
        return Err(FormatError::Truncated {
            needed: HEADER_LEN,
            available: batch.len(),
        });
    }
    let count = u64::from(u32_at(batch, RECORD_COUNT));
    base_offset
        .checked_add(count)
        .ok_or(FormatError::Overflow)?;
    let span = i64_at(batch, MAX_TIMESTAMP)
        .checked_sub(i64_at(batch, FIRST_TIMESTAMP))
        .ok_or(FormatError::Overflow)?;
    let max = first_timestamp_us
        .checked_add(span)
        .ok_or(FormatError::Overflow)?;
    batch[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_le_bytes());
    batch[FIRST_TIMESTAMP..FIRST_TIMESTAMP + 8].copy_from_slice(&first_timestamp_us.to_le_bytes());
    batch[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max.to_le_bytes());
    let crc = header_crc(batch);
    batch[HEADER_CRC..HEADER_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Iterator over back-to-back validated batches in a buffer, as a log read returns them.
///
/// Yields an error for the first invalid batch and then stops.
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Batches<'a> {
    /// Iterates the batches in `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            rest: buf,
            failed: false,
        }
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<BatchView<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        match BatchView::parse(self.rest) {
            Ok(view) => {
                self.rest = &self.rest[view.as_bytes().len()..];
                Some(Ok(view))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
