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
    crc32c(&buf[BATCH_LENGTH..HEADER_LEN])
}

/// CRC-32C (Castagnoli), the format's checksum. `crc-fast` folds with carry-less
/// multiplication where the CPU has it; it was faster than the `crc32c` crate's
/// SSE4.2 loop at every length measured here, 44 bytes to 1 MiB.
#[inline]
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    // CRC-32/ISCSI is CRC-32C; the 32-bit result comes back in a u64.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

#[cfg(test)]
mod tests {
    /// The checksum is CRC-32C exactly: the `crc32c` crate's, which batches stored
    /// before the switch were sealed with, at every length through the folding
    /// implementation's block sizes and at every alignment.
    #[test]
    fn the_checksum_is_the_crc32c_crates() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..(1 << 20) + 67)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        for len in (0..=2_100).chain([4_095, 4_096, 4_097, 65_536, 1 << 20]) {
            for start in [0, 1, 3, 7, 31, 63] {
                let bytes = &data[start..start + len];
                assert_eq!(
                    super::crc32c(bytes),
                    crc32c::crc32c(bytes),
                    "{len} bytes from {start}"
                );
            }
        }
        assert_eq!(super::crc32c(b"123456789"), 0xe306_9283, "the check value");
    }
}
