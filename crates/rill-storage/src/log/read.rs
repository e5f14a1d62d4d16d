//! Reading: batches by offset, the offset for a timestamp, and damage found by reads.

use std::sync::Arc;

use rill_format::{BatchHeader, BatchView, FormatError};

use super::{LogRead, PartitionLog, corrupt};
use crate::StorageError;
use crate::damage::{DamagedRange, search_after};
use crate::error::io_err;
use crate::io::{IoFile, NoWait};
use crate::segment::{DamagedBytes, Extent, ScanStop, Scanner, Segment};

/// Bytes read at a time when locating an offset from a sparse index entry.
const LOCATE_CHUNK_BYTES: usize = 8 * 1024;
/// Reads that find new damage retry this often before giving up with `Corrupt`.
const DAMAGE_RETRIES_MAX: usize = 8;

/// What one attempt at a read found.
enum Attempt {
    Read(LogRead),
    /// Nothing in this segment at or after the offset.
    NotHere,
    /// New damage was found and recorded: read again.
    FoundDamage,
}

impl PartitionLog {
    /// Reads whole batches starting with the one that holds `from`, up to `max_bytes`
    /// (at least one batch, even if it is larger). An offset in a damaged range fails
    /// with [`StorageError::DataLoss`], which names the range; a read that starts before
    /// damage returns the batches before it.
    pub fn read(&self, from: u64, max_bytes: usize) -> Result<LogRead, StorageError> {
        for _ in 0..DAMAGE_RETRIES_MAX {
            if let Some(read) = self.read_once(from, max_bytes, false)? {
                return Ok(read);
            }
        }
        Err(StorageError::Corrupt {
            path: self.dir.clone(),
            position: 0,
            reason: format!("reading offset {from} keeps finding new damage"),
        })
    }

    /// Like [`PartitionLog::read`], but only if everything it reads is in the page cache
    /// (and its files are open): `None` if it would wait for the disk, so an async
    /// caller reads here when it can and goes to a blocking thread only when it must.
    pub fn read_cached(
        &self,
        from: u64,
        max_bytes: usize,
    ) -> Option<Result<LogRead, StorageError>> {
        match self.read_once(from, max_bytes, true) {
            Ok(Some(read)) => Some(Ok(read)),
            // New damage: the blocking read records it.
            Ok(None) => None,
            Err(StorageError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::WouldBlock =>
            {
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// One attempt: `None` if it found (and recorded) new damage. With `nowait`, every
    /// read must come from the page cache (else `WouldBlock`), and no damage is recorded.
    fn read_once(
        &self,
        from: u64,
        max_bytes: usize,
        nowait: bool,
    ) -> Result<Option<LogRead>, StorageError> {
        let log_end = self.next_offset();
        let log_start = self.log_start();
        if from < log_start {
            return Err(StorageError::OffsetBeforeStart {
                requested: from,
                log_start,
            });
        }
        if from > log_end {
            return Err(StorageError::OffsetBeyondEnd {
                requested: from,
                next_offset: log_end,
            });
        }
        let empty = LogRead {
            bytes: Vec::new(),
            next_offset: from,
            log_start,
            log_end,
        };
        if from == log_end {
            return Ok(Some(empty));
        }
        if let Some(d) = self.damage_at(from) {
            return Err(data_loss(&d));
        }
        let segments = self.segments_snapshot();
        let mut i = segments
            .partition_point(|s| s.base_offset <= from)
            .saturating_sub(1);
        while let Some(segment) = segments.get(i) {
            match self.read_segment(segment, from, max_bytes, log_start, log_end, nowait)? {
                Attempt::Read(read) => return Ok(Some(read)),
                Attempt::NotHere => i += 1,
                Attempt::FoundDamage => return Ok(None),
            }
        }
        // Retention removed the segment between the checks above and the snapshot.
        let log_start = self.log_start();
        if from < log_start {
            return Err(StorageError::OffsetBeforeStart {
                requested: from,
                log_start,
            });
        }
        Ok(Some(empty))
    }

    /// Reads from one segment.
    fn read_segment(
        &self,
        segment: &Segment,
        from: u64,
        max_bytes: usize,
        log_start: u64,
        log_end: u64,
        nowait: bool,
    ) -> Result<Attempt, StorageError> {
        let visible = segment.visible_len();
        let extent = segment.readable_extent(from, visible);
        let unhinted = segment.unhinted_extent(from, visible);
        let fallback = (extent.start != unhinted.start
            || extent.start_offset != unhinted.start_offset)
            .then_some(unhinted);
        self.read_extent(
            segment, extent, fallback, from, max_bytes, log_start, log_end, nowait,
        )
    }

    /// Reads from one segment within `extent`. `fallback` is the extent to scan instead
    /// if this one began at an index entry and the entry proves wrong: the batch there
    /// does not start at the offset the entry names, or the scan from it fails. Index
    /// entries are hints; only a scan from a point known to be right says anything
    /// about the data.
    #[allow(clippy::too_many_arguments)]
    fn read_extent(
        &self,
        segment: &Segment,
        extent: Extent,
        fallback: Option<Extent>,
        from: u64,
        max_bytes: usize,
        log_start: u64,
        log_end: u64,
        nowait: bool,
    ) -> Result<Attempt, StorageError> {
        let file: Arc<dyn IoFile> = if nowait {
            match segment.file.get_cached() {
                Some(file) => Arc::new(NoWait(file)),
                None => return Err(would_block(&segment.path)),
            }
        } else {
            segment.log()?
        };
        let mut scanner = Scanner::new(file.as_ref(), &segment.path, extent.start, extent.end)
            .with_chunk(LOCATE_CHUNK_BYTES);
        let mut expected = extent.start_offset;
        // The first batch scanned checks the entry's offset.
        let mut unchecked_hint = fallback;
        let first = loop {
            match scanner.next_batch()? {
                Ok(Some(found)) => {
                    if let Some(unhinted) = unchecked_hint.take()
                        && found.header.base_offset != expected
                    {
                        tracing::warn!(segment = %segment.path.display(), position = extent.start, claimed = expected, found = found.header.base_offset, "an index entry names the wrong offset; scanning again without the index");
                        return self.read_extent(
                            segment, unhinted, None, from, max_bytes, log_start, log_end, nowait,
                        );
                    }
                    match found.header.next_offset() {
                        Some(next) if next > from => break found,
                        Some(next) => expected = next,
                        None => {
                            let at = found.position;
                            return self.found_damage(
                                segment,
                                &file,
                                at,
                                expected,
                                &ScanStop::Invalid(FormatError::Empty),
                            );
                        }
                    }
                }
                Ok(None) => return Ok(Attempt::NotHere),
                Err(stop) => {
                    if nowait {
                        return Err(would_block(&segment.path));
                    }
                    if let Some(unhinted) = fallback {
                        tracing::warn!(segment = %segment.path.display(), position = extent.start, error = %stop, "a scan from an index entry failed; scanning again without the index");
                        return self.read_extent(
                            segment, unhinted, None, from, max_bytes, log_start, log_end, nowait,
                        );
                    }
                    let at = scanner.position();
                    return self.found_damage(segment, &file, at, expected, &stop);
                }
            }
        };
        let first_len = u64::from(first.header.batch_length);
        let want = (extent.end - first.position)
            .min(max_bytes as u64)
            .max(first_len);
        let mut bytes = file
            .read_vec_at(want as usize, first.position)
            .map_err(io_err("read segment", &segment.path))?;
        // Keep whole batches only, and stop before a header that does not parse: the
        // next read starts there and records the damage.
        let mut keep = 0usize;
        let mut next_offset = from;
        while keep < bytes.len() {
            let Ok(header) = BatchHeader::parse(&bytes[keep..]) else {
                break;
            };
            let len = header.batch_length as usize;
            if keep + len > bytes.len() {
                break;
            }
            let Some(next) = header.next_offset() else {
                break;
            };
            keep += len;
            next_offset = next;
        }
        if keep == 0 {
            // The first batch's header parsed from the scan but not now: the bytes
            // changed under the read.
            return Err(corrupt(
                &segment.path,
                first.position,
                &"batch header changed while reading",
            ));
        }
        bytes.truncate(keep);
        Ok(Attempt::Read(LogRead {
            bytes,
            next_offset,
            log_start,
            log_end,
        }))
    }

    /// Records damage a read came across at `at` (where offset `expected` should
    /// start), finding where valid data resumes.
    fn found_damage(
        &self,
        segment: &Segment,
        file: &Arc<dyn IoFile>,
        at: u64,
        expected: u64,
        stop: &ScanStop,
    ) -> Result<Attempt, StorageError> {
        if segment.damaged().iter().any(|d| d.start == at) {
            // Known already, yet the read came here: a bug, not new damage.
            return Err(corrupt(&segment.path, at, stop));
        }
        let len = segment.visible_len();
        let after = search_after(file.as_ref(), &segment.path, at, len, expected)?;
        let (end, to_offset) = match after.resync {
            Some(r) => (r.position, r.base_offset),
            None => (len, segment.next_offset().max(expected)),
        };
        segment.add_damage(DamagedBytes {
            start: at,
            end,
            from_offset: expected,
            to_offset: Some(to_offset),
        });
        self.add_damage(DamagedRange {
            from_offset: expected,
            to_offset: Some(to_offset),
            segment: segment.path.clone(),
            segment_base: segment.base_offset,
            position: at,
            end_position: end,
            reason: stop.to_string(),
            accepted: false,
        });
        Ok(Attempt::FoundDamage)
    }

    /// The offset of the first record whose timestamp is at or after `timestamp_us`, or
    /// `None` if every visible record is older. Damaged ranges are stepped over; records
    /// below the log start do not count (a purge may leave some in its first segment).
    pub fn offset_for_timestamp(&self, timestamp_us: i64) -> Result<Option<u64>, StorageError> {
        let log_end = self.next_offset();
        let log_start = self.log_start();
        let segments = self.segments_snapshot();
        for segment in segments
            .iter()
            .filter(|s| s.max_timestamp_us().is_some_and(|m| m >= timestamp_us))
        {
            let visible = segment.visible_len();
            let file = segment.log()?;
            let entry = segment.index().floor_time(timestamp_us);
            // An index entry is a hint: use it only if the batch it points to is the one
            // it names, with the timestamp it claims (a wrong entry could skip records).
            let start = match entry {
                Some(e) if entry_holds(segment, file.as_ref(), e, visible)? => {
                    u64::from(e.position)
                }
                _ => 0,
            };
            let mut scanner = Scanner::new(file.as_ref(), &segment.path, start, visible)
                .with_chunk(LOCATE_CHUNK_BYTES)
                .skipping(segment.damaged());
            loop {
                let found = match scanner.next_batch()? {
                    Ok(Some(found)) => found,
                    Ok(None) => break,
                    Err(stop) => return Err(corrupt(&segment.path, scanner.position(), &stop)),
                };
                if found.header.max_timestamp_us < timestamp_us {
                    continue;
                }
                let bytes = scanner.batch_bytes(&found)?;
                let view = BatchView::parse(bytes)
                    .map_err(|e| corrupt(&segment.path, found.position, &e))?;
                // Records below the start do not count. If the only ones late enough
                // lie below it, every record of the later batches is late enough (a
                // batch's records are at or after its first timestamp, which is at or
                // after the batch before's largest): the answer is where they begin.
                let late_enough = view.records().any(|r| r.timestamp_us >= timestamp_us);
                let hit = view
                    .records()
                    .find(|r| r.timestamp_us >= timestamp_us && r.offset >= log_start)
                    .map(|r| r.offset)
                    .or_else(|| late_enough.then(|| view.next_offset().max(log_start)));
                return Ok(hit.filter(|&o| o < log_end));
            }
        }
        Ok(None)
    }
}

/// Whether the batch at an index entry's position starts at the entry's offset with the
/// entry's first timestamp.
fn entry_holds(
    segment: &Segment,
    file: &dyn IoFile,
    entry: crate::index::IndexEntry,
    visible: u64,
) -> Result<bool, StorageError> {
    let position = u64::from(entry.position);
    if position + rill_format::BATCH_HEADER_LEN as u64 > visible {
        return Ok(false);
    }
    let mut head = [0u8; rill_format::BATCH_HEADER_LEN];
    file.read_exact_at(&mut head, position)
        .map_err(io_err("read segment", &segment.path))?;
    Ok(BatchHeader::parse(&head).is_ok_and(|h| {
        h.base_offset == segment.base_offset + u64::from(entry.rel_offset)
            && h.first_timestamp_us == entry.timestamp_us
    }))
}

/// The error a `nowait` read stops with: the data is not in the page cache.
fn would_block(path: &std::path::Path) -> StorageError {
    io_err("read segment", path)(std::io::ErrorKind::WouldBlock.into())
}

fn data_loss(d: &DamagedRange) -> StorageError {
    StorageError::DataLoss {
        from: d.from_offset,
        to: d.to_offset,
        reason: d.location(),
    }
}
