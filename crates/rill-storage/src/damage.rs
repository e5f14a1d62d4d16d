//! Damaged ranges: records a log cannot serve because their bytes are damaged or
//! missing, the search for where valid data resumes after damage, and the
//! accepted-damage file (`docs/FORMAT.md`, "Damage").

use std::path::{Path, PathBuf};

use rill_format::{BATCH_HEADER_LEN, BatchHeader, BatchView};

use crate::StorageError;
use crate::error::io_err;
use crate::io::{Io, IoFile};

/// A range of offsets a log cannot serve: damaged bytes recovery quarantined, or a
/// segment file that is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DamagedRange {
    /// The first offset of the range.
    pub from_offset: u64,
    /// The first offset after it; `None` while the damage ends the log and nothing says
    /// where its offsets end (until the loss is accepted).
    pub to_offset: Option<u64>,
    /// The segment file holding the damage (for a missing segment: the segment after
    /// the gap).
    pub segment: PathBuf,
    /// Base offset of that segment.
    pub segment_base: u64,
    /// Byte position of the damage in the segment.
    pub position: u64,
    /// Byte position where valid data resumes in the segment (the segment's length if
    /// it does not); equal to `position` for a missing segment.
    pub end_position: u64,
    /// What was found.
    pub reason: String,
    /// An operator accepted the loss: the log takes appends again.
    pub accepted: bool,
}

impl DamagedRange {
    /// Whether `offset` is in the range.
    pub fn contains(&self, offset: u64) -> bool {
        offset >= self.from_offset && self.to_offset.is_none_or(|to| offset < to)
    }

    /// The range as people read it: `offsets 10..20 (00000000000000000000.log at byte
    /// 4096: …)`.
    pub fn describe(&self) -> String {
        let to = self
            .to_offset
            .map_or_else(|| "(end unknown)".to_owned(), |t| t.to_string());
        format!("offsets {}..{to} ({})", self.from_offset, self.location())
    }

    /// Where the damage is and what it is: `00000000000000000000.log at byte 4096: …`.
    pub fn location(&self) -> String {
        let file = self.segment.file_name().map_or_else(
            || self.segment.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        format!("{file} at byte {}: {}", self.position, self.reason)
    }

    fn key(&self) -> AcceptedKey {
        AcceptedKey {
            segment_base: self.segment_base,
            position: self.position,
            from_offset: self.from_offset,
        }
    }
}

/// Where recovery found the next valid batch after damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resync {
    pub(crate) position: u64,
    pub(crate) base_offset: u64,
}

/// What a search after damage found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct AfterDamage {
    /// The first fully valid batch after the damage with an offset not below the
    /// expected one.
    pub(crate) resync: Option<Resync>,
    /// The largest next offset named by a batch header (header CRC valid) between the
    /// damage and the resync point or the end: a lower bound for offsets the damaged
    /// records may have used.
    pub(crate) header_next_offset: Option<u64>,
}

/// Bytes read at a time by the search.
const SEARCH_CHUNK_BYTES: usize = 1 << 20;

/// Looks for the first position after `damage_at` in `[damage_at + 1, len)` holding a
/// batch that passes both CRCs and starts at or after `expected`. Two CRC-32Cs must
/// match by chance for a false find (about 2⁻⁶⁴ per position).
pub(crate) fn search_after(
    file: &dyn IoFile,
    path: &Path,
    damage_at: u64,
    len: u64,
    expected: u64,
) -> Result<AfterDamage, StorageError> {
    let mut found = AfterDamage::default();
    // The damaged batch's own header may still parse (only its records are damaged).
    if let Some(header) = read_header(file, path, damage_at, len)?
        && header.base_offset >= expected
    {
        found.header_next_offset = header.next_offset();
    }
    let mut chunk = vec![0u8; 0];
    let mut chunk_start = damage_at + 1;
    let mut pos = damage_at + 1;
    while pos + BATCH_HEADER_LEN as u64 <= len {
        if pos + BATCH_HEADER_LEN as u64 > chunk_start + chunk.len() as u64 {
            chunk_start = pos;
            let want = (len - pos).min(SEARCH_CHUNK_BYTES as u64) as usize;
            chunk.resize(want, 0);
            file.read_exact_at(&mut chunk, pos)
                .map_err(io_err("read segment", path))?;
        }
        let at = (pos - chunk_start) as usize;
        let head = &chunk[at..at + BATCH_HEADER_LEN];
        // Cheap filters before a CRC: magic 1, reserved 0, a length that fits.
        if head[36] == 1
            && head[37] == 0
            && let Ok(header) = BatchHeader::parse(head)
            && u64::from(header.batch_length) <= len - pos
            && header.base_offset >= expected
        {
            if let Some(next) = header.next_offset() {
                found.header_next_offset =
                    Some(found.header_next_offset.map_or(next, |n| n.max(next)));
            }
            let mut bytes = vec![0u8; header.batch_length as usize];
            file.read_exact_at(&mut bytes, pos)
                .map_err(io_err("read segment", path))?;
            if BatchView::parse(&bytes).is_ok() {
                found.resync = Some(Resync {
                    position: pos,
                    base_offset: header.base_offset,
                });
                return Ok(found);
            }
        }
        pos += 1;
    }
    Ok(found)
}

fn read_header(
    file: &dyn IoFile,
    path: &Path,
    at: u64,
    len: u64,
) -> Result<Option<BatchHeader>, StorageError> {
    if len.saturating_sub(at) < BATCH_HEADER_LEN as u64 {
        return Ok(None);
    }
    let mut head = [0u8; BATCH_HEADER_LEN];
    file.read_exact_at(&mut head, at)
        .map_err(io_err("read segment", path))?;
    Ok(BatchHeader::parse(&head).ok())
}

// ---- the accepted-damage file -------------------------------------------------------

const ACCEPTED_FILE: &str = "accepted-damage";
const ACCEPTED_TMP: &str = "accepted-damage.tmp";
const ACCEPTED_MAGIC: u32 = 0x4144_4c52; // "RLDA"
const ENTRY_LEN: usize = 33;
/// Entries accepted at most (a partition with more damage than this needs more than
/// an operator's acceptance).
pub(crate) const ACCEPTED_MAX: usize = 4096;

/// Identifies a damaged range across opens: where it is and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcceptedKey {
    pub(crate) segment_base: u64,
    pub(crate) position: u64,
    pub(crate) from_offset: u64,
}

/// One accepted range as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Accepted {
    pub(crate) key: AcceptedKey,
    pub(crate) to_offset: Option<u64>,
}

impl Accepted {
    pub(crate) fn of(range: &DamagedRange) -> Self {
        Self {
            key: range.key(),
            to_offset: range.to_offset,
        }
    }

    /// Whether this entry accepts `range`: the same damage (segment, position, first
    /// offset), or, for offsets with no bytes (a missing segment, a short one), the same
    /// offsets, wherever a later open finds them (after acceptance they show as the gap
    /// before the segment appends resumed in).
    pub(crate) fn matches(&self, range: &DamagedRange) -> bool {
        self.key == range.key()
            || (range.position == range.end_position
                && self.key.from_offset == range.from_offset
                && self.to_offset.is_some()
                && self.to_offset == range.to_offset)
    }
}

pub(crate) fn encode_accepted(entries: &[Accepted]) -> Vec<u8> {
    let mut b = Vec::with_capacity(12 + entries.len() * ENTRY_LEN);
    b.extend_from_slice(&ACCEPTED_MAGIC.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        b.extend_from_slice(&e.key.segment_base.to_le_bytes());
        b.extend_from_slice(&e.key.position.to_le_bytes());
        b.extend_from_slice(&e.key.from_offset.to_le_bytes());
        b.extend_from_slice(&e.to_offset.unwrap_or(0).to_le_bytes());
        b.push(u8::from(e.to_offset.is_some()));
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes the file; `None` if it is damaged in any way.
pub(crate) fn decode_accepted(b: &[u8]) -> Option<Vec<Accepted>> {
    if b.len() < 12 {
        return None;
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
    if u32_at(0) != ACCEPTED_MAGIC {
        return None;
    }
    let count = u32_at(4) as usize;
    if count > ACCEPTED_MAX || body.len() != 8 + count * ENTRY_LEN {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = 8 + i * ENTRY_LEN;
        let known = match body[at + 32] {
            0 => false,
            1 => true,
            _ => return None,
        };
        out.push(Accepted {
            key: AcceptedKey {
                segment_base: u64_at(at),
                position: u64_at(at + 8),
                from_offset: u64_at(at + 16),
            },
            to_offset: known.then(|| u64_at(at + 24)),
        });
    }
    Some(out)
}

/// Reads the accepted ranges of the log in `dir`; a missing or damaged file accepts
/// nothing (the damage then fails the partition again, which is the safe side).
pub(crate) fn read_accepted(io: &dyn Io, dir: &Path) -> Vec<Accepted> {
    let path = dir.join(ACCEPTED_FILE);
    if !io.exists(&path) {
        return Vec::new();
    }
    let read = io.open(&path, false).and_then(|f| {
        let len = f.size()?;
        let mut b = vec![0u8; len.min(1 << 20) as usize];
        f.read_exact_at(&mut b, 0)?;
        Ok(b)
    });
    match read.ok().as_deref().and_then(decode_accepted) {
        Some(entries) => entries,
        None => {
            tracing::warn!(path = %path.display(), "the accepted-damage file is unreadable: its ranges count as not accepted");
            Vec::new()
        }
    }
}

/// Replaces the accepted-damage file atomically and durably.
pub(crate) fn write_accepted(
    io: &dyn Io,
    dir: &Path,
    entries: &[Accepted],
) -> Result<(), StorageError> {
    let tmp = dir.join(ACCEPTED_TMP);
    let path = dir.join(ACCEPTED_FILE);
    let bytes = encode_accepted(entries);
    let file = io.open(&tmp, true).map_err(io_err("create", &tmp))?;
    file.set_len(0).map_err(io_err("truncate", &tmp))?;
    file.write_all_at(&bytes, 0)
        .map_err(io_err("write", &tmp))?;
    file.sync_data().map_err(io_err("sync", &tmp))?;
    drop(file);
    io.rename(&tmp, &path).map_err(io_err("rename", &tmp))?;
    io.sync_dir(dir).map_err(io_err("sync directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_entries_round_trip_and_damage_is_rejected() {
        let entries = vec![
            Accepted {
                key: AcceptedKey {
                    segment_base: 100,
                    position: 4096,
                    from_offset: 150,
                },
                to_offset: Some(170),
            },
            Accepted {
                key: AcceptedKey {
                    segment_base: 0,
                    position: 0,
                    from_offset: 7,
                },
                to_offset: None,
            },
        ];
        let b = encode_accepted(&entries);
        assert_eq!(b.len(), 12 + 2 * ENTRY_LEN);
        assert_eq!(decode_accepted(&b), Some(entries));
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert_eq!(decode_accepted(&d), None, "byte {i}");
        }
        assert_eq!(decode_accepted(&b[..b.len() - 1]), None);
        assert_eq!(decode_accepted(&encode_accepted(&[])), Some(Vec::new()));
    }
}
