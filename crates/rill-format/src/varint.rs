//! Unsigned LEB128 varints of at most 10 bytes (a `u64`).

use crate::RecordError;

/// Largest encoded size of a `u64` varint.
pub(crate) const VARINT_LEN_MAX: usize = 10;

/// Appends `value` as a varint.
#[inline]
pub(crate) fn put(buf: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        buf.push((value as u8) | 0x80);
        value >>= 7;
    }
    buf.push(value as u8);
}

/// Encoded size of `value`.
#[inline]
pub(crate) fn len(value: u64) -> usize {
    // 1 byte per started group of 7 significant bits, at least 1.
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Decodes a varint at the front of `buf`, returning the value and the bytes consumed.
#[inline]
pub(crate) fn get(buf: &[u8]) -> Result<(u64, usize), RecordError> {
    // Most varints of a record (its length, deltas, small keys and values, header
    // counts) fit in one byte: decoded here, inlined into the caller.
    if let Some(&byte) = buf.first()
        && byte < 0x80
    {
        return Ok((u64::from(byte), 1));
    }
    get_long(buf)
}

/// [`get`] for a varint of two bytes or more (or none at all).
#[inline(never)]
fn get_long(buf: &[u8]) -> Result<(u64, usize), RecordError> {
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().take(VARINT_LEN_MAX).enumerate() {
        let low = u64::from(byte & 0x7f);
        if i == VARINT_LEN_MAX - 1 && low > 1 {
            // The tenth byte may only contribute the 64th bit.
            return Err(RecordError::VarintOverflow);
        }
        value |= low << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() < VARINT_LEN_MAX {
        Err(RecordError::Overrun)
    } else {
        Err(RecordError::VarintOverflow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        let mut buf = Vec::new();
        put(&mut buf, 0);
        put(&mut buf, 127);
        put(&mut buf, 128);
        put(&mut buf, u64::MAX);
        assert_eq!(&buf[..4], &[0x00, 0x7f, 0x80, 0x01]);
        assert_eq!(buf.len(), 1 + 1 + 2 + 10);
        assert_eq!(get(&buf[4..]), Ok((u64::MAX, 10)));
    }

    #[test]
    fn rejects_overflow_and_overrun() {
        assert_eq!(get(&[0xff; 10]), Err(RecordError::VarintOverflow));
        assert_eq!(get(&[0xff; 11]), Err(RecordError::VarintOverflow));
        let mut eleven = vec![0x80; 10];
        eleven.push(0);
        assert_eq!(get(&eleven), Err(RecordError::VarintOverflow));
        assert_eq!(get(&[0x80, 0x80]), Err(RecordError::Overrun));
        assert_eq!(get(&[]), Err(RecordError::Overrun));
    }

    proptest! {
        #[test]
        fn round_trips(value: u64) {
            let mut buf = Vec::new();
            put(&mut buf, value);
            prop_assert_eq!(buf.len(), len(value));
            prop_assert_eq!(get(&buf), Ok((value, buf.len())));
        }
    }
}
