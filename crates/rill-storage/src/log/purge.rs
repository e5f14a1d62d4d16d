//! Purging: the records below an offset gone for readers, exactly, through a logical
//! log start persisted in `log-start` (docs/FORMAT.md §4, "Purge: a logical log
//! start", which has the file's layout, the steps and their crash analysis).
//!
//! Invariant: the log start readers see is never below the one a restart finds once a
//! purge returned (its file is durable before the start moves in memory), and the file
//! never names an offset past what is durable (the log is synced before it is written).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::PartitionLog;
use crate::StorageError;
use crate::error::io_err;
use crate::io::Io;
use crate::segment::Segment;

const LOG_START_FILE: &str = "log-start";
const LOG_START_TMP: &str = "log-start.tmp";
/// "RLLS" little-endian.
const MAGIC: u32 = 0x534c_4c52;
const LOG_START_LEN: usize = 16;

fn encode(start: u64) -> [u8; LOG_START_LEN] {
    let mut out = [0u8; LOG_START_LEN];
    out[..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..12].copy_from_slice(&start.to_le_bytes());
    let crc = crc32c::crc32c(&out[..12]);
    out[12..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode(bytes: &[u8]) -> Option<u64> {
    if bytes.len() != LOG_START_LEN {
        return None;
    }
    let (body, crc) = bytes.split_at(12);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    if body[..4] != MAGIC.to_le_bytes() {
        return None;
    }
    Some(u64::from_le_bytes(body[4..12].try_into().ok()?))
}

/// The log start the last purge persisted, if the log was ever purged. A leftover
/// `log-start.tmp` (a crash inside a purge) is removed; a file that fails its checks is
/// ignored with an error logged, so the records it hid are served again rather than
/// lost.
pub(crate) fn read_log_start(io: &dyn Io, dir: &Path) -> Option<u64> {
    let tmp = dir.join(LOG_START_TMP);
    if io.exists(&tmp)
        && let Err(e) = io.remove_file(&tmp)
    {
        tracing::warn!(path = %tmp.display(), error = %e, "cannot remove a purge's leftover file");
    }
    let path = dir.join(LOG_START_FILE);
    if !io.exists(&path) {
        return None;
    }
    let read = io.open(&path, false).and_then(|f| {
        let len = f.size()?;
        let mut b = vec![0u8; len.min(LOG_START_LEN as u64 + 1) as usize];
        f.read_exact_at(&mut b, 0)?;
        Ok(b)
    });
    let start = read.ok().as_deref().and_then(decode);
    if start.is_none() {
        tracing::error!(path = %path.display(), "the log-start file is damaged: it is ignored, and records a purge hid are served again");
    }
    start
}

/// Replaces the log-start file atomically and durably.
fn write_log_start(io: &dyn Io, dir: &Path, start: u64) -> Result<(), StorageError> {
    let tmp = dir.join(LOG_START_TMP);
    let path = dir.join(LOG_START_FILE);
    let file = io.open(&tmp, true).map_err(io_err("create", &tmp))?;
    file.set_len(0).map_err(io_err("truncate", &tmp))?;
    file.write_all_at(&encode(start), 0)
        .map_err(io_err("write", &tmp))?;
    file.sync_data().map_err(io_err("sync", &tmp))?;
    drop(file);
    io.rename(&tmp, &path).map_err(io_err("rename", &tmp))?;
    io.sync_dir(dir).map_err(io_err("sync directory", dir))
}

impl PartitionLog {
    /// Makes the records below `offset` gone for readers, durably, and returns the log
    /// start afterwards: reads below it fail with [`StorageError::OffsetBeforeStart`],
    /// and the sealed segments whose every batch lies below it are deleted. `offset`
    /// may fall inside a segment or a batch; at or below the current start it changes
    /// nothing; past the end readers see it is refused
    /// ([`StorageError::OffsetBeyondEnd`]). A poisoned or closed log refuses. Damaged
    /// ranges wholly below the new start are dropped: no reader can reach them.
    pub fn purge_before(&self, offset: u64) -> Result<u64, StorageError> {
        self.check_poison()?;
        let w = self.lock_writer()?;
        if w.closed {
            return Err(StorageError::Closed);
        }
        let end = self.next_offset();
        if offset > end {
            return Err(StorageError::OffsetBeyondEnd {
                requested: offset,
                next_offset: end,
            });
        }
        let start = self.log_start();
        if offset <= start {
            return Ok(start);
        }
        // The log is durable up to its end before the file names an offset in it.
        self.sync_through_locked()?;
        self.join_seals()?;
        // The commit point. A failure here changed nothing in memory; on disk the old
        // file or the new one stands, and a retry writes it again.
        write_log_start(self.env.io.as_ref(), &self.dir, offset)?;
        self.log_start.fetch_max(offset, Ordering::AcqRel);
        drop(w);
        tracing::warn!(dir = %self.dir.display(), log_start = offset, "purged the records below the new log start");
        self.drop_damage_below_start();
        let removed = self.take_segments_below_start();
        self.remove_segments(&removed)?;
        Ok(self.log_start())
    }

    /// Takes the sealed segments whose every batch lies below the log start out of
    /// the list (never the active one), for their files to be deleted. The log then
    /// starts at least where the first segment left does (offsets between may be lost
    /// ones, a damaged range no segment holds), as a restart would find it.
    pub(super) fn take_segments_below_start(&self) -> Vec<Arc<Segment>> {
        let mut segments = self.segments.write();
        let n = self.segments_below_start(&segments);
        let removed: Vec<Arc<Segment>> = segments.drain(..n).collect();
        if n > 0 {
            self.log_start
                .fetch_max(segments[0].base_offset, Ordering::AcqRel);
        }
        removed
    }

    /// How many segments from the oldest lie wholly below the log start: never the
    /// active one.
    pub(super) fn segments_below_start(&self, segments: &[Arc<Segment>]) -> usize {
        let start = self.log_start();
        segments[..segments.len() - 1]
            .iter()
            .take_while(|s| s.next_offset() <= start)
            .count()
    }

    /// Forgets damaged ranges wholly below the log start.
    pub(super) fn drop_damage_below_start(&self) {
        if !self.has_damage.load(Ordering::Acquire) {
            return;
        }
        let log_start = self.log_start();
        let mut damage = self.damage.write();
        damage.retain(|d| d.to_offset.is_none_or(|to| to > log_start));
        self.has_damage.store(!damage.is_empty(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_start_file_round_trips_and_damage_is_refused() {
        for start in [0, 1, 4096, u64::MAX] {
            assert_eq!(decode(&encode(start)), Some(start));
        }
        let good = encode(77);
        for i in 0..LOG_START_LEN {
            let mut bad = good;
            bad[i] ^= 0x10;
            assert_eq!(decode(&bad), None, "a flip at byte {i}");
        }
        assert_eq!(decode(&good[..15]), None);
        assert_eq!(decode(&[good.as_slice(), &[0]].concat()), None);
    }
}
