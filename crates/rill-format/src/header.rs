//! Typed record headers: their values and their encoding inside a record.

use crate::RecordError;
use crate::varint;

/// Longest header name, in bytes.
pub const HEADER_NAME_LEN_MAX: usize = 255;

/// One typed header value, borrowing strings and bytes from the batch.
///
/// Exhaustive on purpose: a new header type is a format change (a new magic, see
/// `docs/FORMAT.md`), and every crate that turns header values into something else must
/// then handle it at compile time rather than map it to a placeholder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HeaderValue<'a> {
    /// UTF-8 text.
    Str(&'a str),
    /// Opaque bytes.
    Bytes(&'a [u8]),
    /// A boolean.
    Bool(bool),
    /// Signed integers.
    I8(i8),
    /// Signed integers.
    I16(i16),
    /// Signed integers.
    I32(i32),
    /// Signed integers.
    I64(i64),
    /// Signed integers.
    I128(i128),
    /// Unsigned integers.
    U8(u8),
    /// Unsigned integers.
    U16(u16),
    /// Unsigned integers.
    U32(u32),
    /// Unsigned integers.
    U64(u64),
    /// Unsigned integers.
    U128(u128),
    /// IEEE 754 single precision.
    F32(f32),
    /// IEEE 754 double precision.
    F64(f64),
}

/// A named header of a record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Header<'a> {
    /// The name: 1 to 255 bytes of UTF-8.
    pub name: &'a str,
    /// The typed value.
    pub value: HeaderValue<'a>,
}

impl<'a> Header<'a> {
    /// A header with `name` and `value`.
    pub fn new(name: &'a str, value: HeaderValue<'a>) -> Self {
        Self { name, value }
    }
}

impl HeaderValue<'_> {
    fn type_byte(&self) -> u8 {
        match self {
            Self::Str(_) => 1,
            Self::Bytes(_) => 2,
            Self::Bool(_) => 3,
            Self::I8(_) => 4,
            Self::I16(_) => 5,
            Self::I32(_) => 6,
            Self::I64(_) => 7,
            Self::I128(_) => 8,
            Self::U8(_) => 9,
            Self::U16(_) => 10,
            Self::U32(_) => 11,
            Self::U64(_) => 12,
            Self::U128(_) => 13,
            Self::F32(_) => 14,
            Self::F64(_) => 15,
        }
    }

    fn value_len(&self) -> usize {
        match self {
            Self::Str(s) => varint::len(s.len() as u64) + s.len(),
            Self::Bytes(b) => varint::len(b.len() as u64) + b.len(),
            Self::Bool(_) | Self::I8(_) | Self::U8(_) => 1,
            Self::I16(_) | Self::U16(_) => 2,
            Self::I32(_) | Self::U32(_) | Self::F32(_) => 4,
            Self::I64(_) | Self::U64(_) | Self::F64(_) => 8,
            Self::I128(_) | Self::U128(_) => 16,
        }
    }
}

impl Header<'_> {
    /// Bytes this header takes inside a record.
    pub(crate) fn encoded_len(&self) -> usize {
        varint::len(self.name.len() as u64) + self.name.len() + 1 + self.value.value_len()
    }

    /// Appends the encoded header. The caller has checked the name length.
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        varint::put(buf, self.name.len() as u64);
        buf.extend_from_slice(self.name.as_bytes());
        buf.push(self.value.type_byte());
        match self.value {
            HeaderValue::Str(s) => {
                varint::put(buf, s.len() as u64);
                buf.extend_from_slice(s.as_bytes());
            }
            HeaderValue::Bytes(b) => {
                varint::put(buf, b.len() as u64);
                buf.extend_from_slice(b);
            }
            HeaderValue::Bool(v) => buf.push(u8::from(v)),
            HeaderValue::I8(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::I16(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::I32(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::I64(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::I128(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::U8(v) => buf.push(v),
            HeaderValue::U16(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::U32(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::U64(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::U128(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::F32(v) => buf.extend_from_slice(&v.to_le_bytes()),
            HeaderValue::F64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

/// A bounds-checked reader over a byte slice.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// The bytes not yet consumed.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, RecordError> {
        let (value, used) = varint::get(self.buf)?;
        self.buf = &self.buf[used..];
        Ok(value)
    }

    #[inline]
    pub(crate) fn bytes(&mut self, n: u64) -> Result<&'a [u8], RecordError> {
        let n = usize::try_from(n).map_err(|_| RecordError::Overrun)?;
        if n > self.buf.len() {
            return Err(RecordError::Overrun);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.bytes(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N as u64)?);
        Ok(out)
    }

    /// Decodes one header.
    pub(crate) fn header(&mut self) -> Result<Header<'a>, RecordError> {
        let name_len = self.varint()?;
        if name_len == 0 || name_len > HEADER_NAME_LEN_MAX as u64 {
            return Err(RecordError::HeaderNameLength(name_len));
        }
        let name = std::str::from_utf8(self.bytes(name_len)?).map_err(|_| RecordError::Utf8)?;
        let value = match self.u8()? {
            1 => {
                let n = self.varint()?;
                HeaderValue::Str(
                    std::str::from_utf8(self.bytes(n)?).map_err(|_| RecordError::Utf8)?,
                )
            }
            2 => {
                let n = self.varint()?;
                HeaderValue::Bytes(self.bytes(n)?)
            }
            3 => match self.u8()? {
                0 => HeaderValue::Bool(false),
                1 => HeaderValue::Bool(true),
                other => return Err(RecordError::Bool(other)),
            },
            4 => HeaderValue::I8(i8::from_le_bytes(self.array()?)),
            5 => HeaderValue::I16(i16::from_le_bytes(self.array()?)),
            6 => HeaderValue::I32(i32::from_le_bytes(self.array()?)),
            7 => HeaderValue::I64(i64::from_le_bytes(self.array()?)),
            8 => HeaderValue::I128(i128::from_le_bytes(self.array()?)),
            9 => HeaderValue::U8(self.u8()?),
            10 => HeaderValue::U16(u16::from_le_bytes(self.array()?)),
            11 => HeaderValue::U32(u32::from_le_bytes(self.array()?)),
            12 => HeaderValue::U64(u64::from_le_bytes(self.array()?)),
            13 => HeaderValue::U128(u128::from_le_bytes(self.array()?)),
            14 => HeaderValue::F32(f32::from_le_bytes(self.array()?)),
            15 => HeaderValue::F64(f64::from_le_bytes(self.array()?)),
            other => return Err(RecordError::HeaderType(other)),
        };
        Ok(Header { name, value })
    }
}

/// The headers of one record, decoded lazily.
#[derive(Debug, Clone)]
pub struct Headers<'a> {
    cursor: Cursor<'a>,
    remaining: u64,
}

impl<'a> Headers<'a> {
    pub(crate) fn new(section: &'a [u8], count: u64) -> Self {
        Self {
            cursor: Cursor::new(section),
            remaining: count,
        }
    }

    /// Number of headers not yet returned.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        // Invariant: the batch was validated by `BatchView::parse`, which decoded these
        // same bytes with this same function.
        Some(
            self.cursor
                .header()
                .expect("headers were validated with the batch"),
        )
    }
}
