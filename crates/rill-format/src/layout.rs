//! Byte positions of the batch header (see `docs/FORMAT.md` §1).

pub(crate) const HEADER_CRC: usize = 0;
pub(crate) const BATCH_LENGTH: usize = 4;
pub(crate) const BASE_OFFSET: usize = 8;
pub(crate) const FIRST_TIMESTAMP: usize = 16;
pub(crate) const MAX_TIMESTAMP: usize = 24;
pub(crate) const BODY_CRC: usize = 32;
/// First byte covered by `body_crc`.
pub(crate) const BODY: usize = 36;
pub(crate) const MAGIC: usize = 36;
pub(crate) const RESERVED_1: usize = 37;
pub(crate) const ATTRIBUTES: usize = 38;
pub(crate) const RECORD_COUNT: usize = 40;
pub(crate) const PRODUCER_ID: usize = 44;
pub(crate) const PRODUCER_EPOCH: usize = 52;
pub(crate) const RESERVED_2: usize = 54;
pub(crate) const BASE_SEQUENCE: usize = 56;
pub(crate) const RESERVED_3: usize = 60;
/// Size of the fixed header; records start here.
pub(crate) const HEADER_LEN: usize = 64;

pub(crate) const ATTR_CODEC_MASK: u16 = 0b111;
pub(crate) const ATTR_IDEMPOTENT: u16 = 1 << 3;
pub(crate) const ATTR_KNOWN: u16 = ATTR_CODEC_MASK | ATTR_IDEMPOTENT;

#[inline]
pub(crate) fn u16_at(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}

#[inline]
pub(crate) fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
pub(crate) fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
pub(crate) fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// CRC of the header part that `header_crc` covers: every header byte but itself.
#[inline]
pub(crate) fn header_crc(buf: &[u8]) -> u32 {
    crc32c::crc32c(&buf[BATCH_LENGTH..HEADER_LEN])
}
