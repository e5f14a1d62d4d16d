//! The recovery point: how far the active segment is known to be durable.
//!
//! Written (without its own fsync) after every successful data sync and after a roll;
//! written and synced when a log is created and after recovery, so a log always has
//! one on disk. Because it is written only after the data it names was synced, any
//! copy that survives a crash names durable data; a lost or torn copy only makes the
//! next recovery scan more. Recovery validates the active segment from here to its end:
//! bytes after the last sync are the only ones a crash can tear, and with page
//! write-back in any order they can be torn anywhere after it, not only at the end.

use std::path::Path;

use crate::io::Io;

const FILE: &str = "recovery-point";
const MAGIC: u32 = 0x5052_4c52; // "RLRP"
const LEN: usize = 44;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecoveryPoint {
    /// Base offset of the segment this names.
    pub(crate) segment_base: u64,
    /// Bytes of that segment known durable (a batch boundary).
    pub(crate) position: u64,
    /// Offset of the next batch at `position`.
    pub(crate) next_offset: u64,
    /// Largest timestamp of the log up to `position`, if any.
    pub(crate) max_timestamp_us: Option<i64>,
}

impl RecoveryPoint {
    fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..12].copy_from_slice(&self.segment_base.to_le_bytes());
        b[12..20].copy_from_slice(&self.position.to_le_bytes());
        b[20..28].copy_from_slice(&self.next_offset.to_le_bytes());
        b[28] = u8::from(self.max_timestamp_us.is_some());
        b[32..40].copy_from_slice(&self.max_timestamp_us.unwrap_or(0).to_le_bytes());
        let crc = crc32c::crc32c(&b[..40]);
        b[40..44].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != LEN || crc32c::crc32c(&b[..40]).to_le_bytes() != b[40..44] {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")) != MAGIC {
            return None;
        }
        Some(Self {
            segment_base: u64_at(4),
            position: u64_at(12),
            next_offset: u64_at(20),
            max_timestamp_us: (b[28] == 1).then(|| u64_at(32) as i64),
        })
    }

    /// Reads the recovery point of the log in `dir`; `None` if missing or damaged.
    pub(crate) fn read(io: &dyn Io, dir: &Path) -> Option<Self> {
        let file = io.open(&dir.join(FILE), false).ok()?;
        let mut b = [0u8; LEN];
        file.read_exact_at(&mut b, 0).ok()?;
        Self::decode(&b)
    }

    /// Writes the recovery point. A failure is logged, not returned: the point is a
    /// hint, and an older one only means a longer scan.
    pub(crate) fn write(&self, io: &dyn Io, dir: &Path) {
        let path = dir.join(FILE);
        let result = io
            .open(&path, true)
            .and_then(|f| f.write_all_at(&self.encode(), 0));
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "could not write the recovery point");
        }
    }

    /// Writes the recovery point and makes it and its directory entry durable, so a log
    /// with data always has one on disk (without it, recovery must quarantine damage it
    /// could otherwise prove torn).
    pub(crate) fn write_durable(&self, io: &dyn Io, dir: &Path) -> std::io::Result<()> {
        let file = io.open(&dir.join(FILE), true)?;
        file.write_all_at(&self.encode(), 0)?;
        file.sync_data()?;
        io.sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let rp = RecoveryPoint {
            segment_base: 7,
            position: 4096,
            next_offset: 99,
            max_timestamp_us: Some(-5),
        };
        let b = rp.encode();
        assert_eq!(RecoveryPoint::decode(&b), Some(rp));
        for i in 0..LEN {
            let mut d = b;
            d[i] ^= 1;
            assert_eq!(RecoveryPoint::decode(&d), None, "byte {i}");
        }
        let none = RecoveryPoint {
            max_timestamp_us: None,
            ..rp
        };
        assert_eq!(RecoveryPoint::decode(&none.encode()), Some(none));
    }
}
