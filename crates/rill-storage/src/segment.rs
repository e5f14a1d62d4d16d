//! One segment: a `.log` file of back-to-back batches plus its sparse indexes, and the
//! scanner that walks batches in a byte range of it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use rill_format::{BATCH_HEADER_LEN, BatchHeader, BatchView, FormatError};

use crate::StorageError;
use crate::error::io_err;
use crate::files::SegmentFile;
use crate::index::{IndexEntry, SegmentIndex};
use crate::io::{Io, IoFile};

/// Bytes read from disk at a time while scanning.
const SCAN_CHUNK_BYTES: usize = 256 * 1024;

pub(crate) fn log_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

/// Parses a segment file name `{base_offset:020}.log`.
pub(crate) fn parse_log_name(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".log")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// A byte range of a segment a read may scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) start: u64,
    /// Offset of the batch at `start`.
    pub(crate) start_offset: u64,
    pub(crate) end: u64,
}

/// Bytes of a segment that recovery (or a read) found damaged, and the offsets they
/// held: reads stop before them and scans step over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DamagedBytes {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) from_offset: u64,
    /// `None` while the damage ends the segment and no later segment says where the
    /// offsets resume.
    pub(crate) to_offset: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_offset: u64,
    pub(crate) path: PathBuf,
    pub(crate) file: SegmentFile,
    index: RwLock<SegmentIndex>,
    /// Quarantined byte ranges, by position. Empty for nearly every segment.
    damaged: RwLock<Vec<DamagedBytes>>,
    /// Bytes that readers may read. For the active segment under `always`, this trails
    /// the written length until the data is synced.
    visible_len: AtomicU64,
    /// Offset after the last batch written to this segment.
    next_offset: AtomicU64,
    /// Largest record timestamp written to this segment; `None` while empty.
    max_timestamp_us: AtomicI64,
    has_timestamp: AtomicBool,
}

impl Segment {
    pub(crate) fn new(
        base_offset: u64,
        path: PathBuf,
        file: SegmentFile,
        index: SegmentIndex,
    ) -> Self {
        Self {
            base_offset,
            path,
            file,
            index: RwLock::new(index),
            damaged: RwLock::new(Vec::new()),
            visible_len: AtomicU64::new(0),
            next_offset: AtomicU64::new(base_offset),
            max_timestamp_us: AtomicI64::new(i64::MIN),
            has_timestamp: AtomicBool::new(false),
        }
    }

    // The index is a hint that recovery rebuilds, so a panic while it is held cannot
    // leave anything that matters half-updated: a lock without poisoning.
    pub(crate) fn index(&self) -> RwLockReadGuard<'_, SegmentIndex> {
        self.index.read()
    }

    pub(crate) fn index_mut(&self) -> RwLockWriteGuard<'_, SegmentIndex> {
        self.index.write()
    }

    /// The open `.log` file.
    pub(crate) fn log(&self) -> Result<Arc<dyn IoFile>, StorageError> {
        self.file.get()
    }

    /// The quarantined byte ranges of this segment.
    pub(crate) fn damaged(&self) -> Vec<DamagedBytes> {
        self.damaged.read().clone()
    }

    pub(crate) fn has_damage(&self) -> bool {
        !self.damaged.read().is_empty()
    }

    /// Records a quarantined range (kept sorted by position; a range already known is
    /// not added twice).
    pub(crate) fn add_damage(&self, damage: DamagedBytes) {
        let mut all = self.damaged.write();
        if all.iter().any(|d| d.start == damage.start) {
            return;
        }
        let at = all.partition_point(|d| d.start < damage.start);
        all.insert(at, damage);
    }

    /// Sets where the offsets of a damaged range that ends the segment resume.
    pub(crate) fn close_damage(&self, to_offset: u64) {
        for d in self.damaged.write().iter_mut() {
            if d.to_offset.is_none() {
                d.to_offset = Some(to_offset.max(d.from_offset));
            }
        }
    }

    /// Where a read for `offset` may scan: from the index entry at or before `offset`
    /// (its position and offset) but never inside or before a damaged range whose
    /// offsets are all below `offset`, to the next damaged range or `visible`.
    pub(crate) fn readable_extent(&self, offset: u64, visible: u64) -> Extent {
        let rel = offset.saturating_sub(self.base_offset);
        let start = self
            .index()
            .floor_offset(rel)
            .map_or((0, self.base_offset), |e| {
                (
                    u64::from(e.position),
                    self.base_offset + u64::from(e.rel_offset),
                )
            });
        self.extent_from(start, offset, visible)
    }

    /// Like [`Segment::readable_extent`] without the index: from the segment's start, or
    /// the end of a damaged range below `offset`.
    pub(crate) fn unhinted_extent(&self, offset: u64, visible: u64) -> Extent {
        self.extent_from((0, self.base_offset), offset, visible)
    }

    fn extent_from(
        &self,
        (mut start, mut start_offset): (u64, u64),
        offset: u64,
        visible: u64,
    ) -> Extent {
        let damaged = self.damaged.read();
        for d in damaged.iter() {
            if let Some(to) = d.to_offset
                && to <= offset
                && d.end > start
            {
                start = d.end;
                start_offset = to;
            }
        }
        let end = damaged
            .iter()
            .filter(|d| d.start >= start)
            .map(|d| d.start)
            .min()
            .unwrap_or(visible)
            .min(visible);
        Extent {
            start: start.min(end),
            start_offset,
            end,
        }
    }

    pub(crate) fn visible_len(&self) -> u64 {
        self.visible_len.load(Ordering::Acquire)
    }

    pub(crate) fn set_visible_len(&self, len: u64) {
        self.visible_len.fetch_max(len, Ordering::AcqRel);
    }

    pub(crate) fn next_offset(&self) -> u64 {
        self.next_offset.load(Ordering::Acquire)
    }

    pub(crate) fn set_next_offset(&self, next: u64) {
        self.next_offset.store(next, Ordering::Release);
    }

    pub(crate) fn max_timestamp_us(&self) -> Option<i64> {
        self.has_timestamp
            .load(Ordering::Acquire)
            .then(|| self.max_timestamp_us.load(Ordering::Acquire))
    }

    pub(crate) fn observe_timestamp(&self, max_ts: i64) {
        self.max_timestamp_us.fetch_max(max_ts, Ordering::AcqRel);
        self.has_timestamp.store(true, Ordering::Release);
    }

    /// Closes the segment's files without deleting them (a truncation reuses its file).
    pub(crate) fn remove_handles(&self) {
        self.file.forget();
        self.index_mut().release_files();
    }

    /// After a truncation cut the segment at `len` bytes: what it holds now.
    pub(crate) fn cut_to(&self, len: u64, next_offset: u64, max_ts: Option<i64>) {
        self.visible_len.store(len, Ordering::Release);
        self.next_offset.store(next_offset, Ordering::Release);
        match max_ts {
            Some(ts) => {
                self.max_timestamp_us.store(ts, Ordering::Release);
                self.has_timestamp.store(true, Ordering::Release);
            }
            None => self.has_timestamp.store(false, Ordering::Release),
        }
    }

    pub(crate) fn remove_files(&self, io: &dyn Io) -> Result<(), StorageError> {
        self.file.forget();
        self.index_mut().release_files();
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        remove_segment_files(io, dir, self.base_offset)
    }
}

/// Deletes a segment's `.log` and index files; files already gone are fine.
pub(crate) fn remove_segment_files(io: &dyn Io, dir: &Path, base: u64) -> Result<(), StorageError> {
    let (index, time_index) = crate::index::index_paths(dir, base);
    for path in [log_path(dir, base), index, time_index] {
        match io.remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove segment file", &path)(e)),
        }
    }
    Ok(())
}

/// Why a scan stopped before the end of its range.
#[derive(Debug)]
pub(crate) enum ScanStop {
    /// The range ends inside a batch (a torn write, or a range end inside a batch).
    Torn,
    /// The bytes at the position are not a valid batch.
    Invalid(FormatError),
    /// A valid batch with an unexpected base offset.
    OffsetMismatch { expected: u64, found: u64 },
}

impl std::fmt::Display for ScanStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Torn => f.write_str("batch is cut off"),
            Self::Invalid(e) => write!(f, "invalid batch: {e}"),
            Self::OffsetMismatch { expected, found } => {
                write!(f, "batch has base offset {found}, expected {expected}")
            }
        }
    }
}

/// A batch found by a [`Scanner`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found {
    pub(crate) position: u64,
    pub(crate) header: BatchHeader,
}

/// Walks the batches of `file` in `[position, end)` through a read buffer.
#[derive(Debug)]
pub(crate) struct Scanner<'a> {
    file: &'a dyn IoFile,
    path: &'a Path,
    position: u64,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
    /// When set, each batch is fully validated (both CRCs, every record).
    validate: bool,
    /// When set, each batch must start at this offset.
    expected_offset: Option<u64>,
    chunk: usize,
    /// Damaged ranges to step over (sorted by position).
    skip: Vec<DamagedBytes>,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(file: &'a dyn IoFile, path: &'a Path, position: u64, end: u64) -> Self {
        Self {
            file,
            path,
            position,
            end,
            buf: Vec::new(),
            buf_start: position,
            validate: false,
            expected_offset: None,
            chunk: SCAN_CHUNK_BYTES,
            skip: Vec::new(),
        }
    }

    /// Steps over these damaged ranges instead of stopping at them; a chained offset
    /// resumes at the range's end offset.
    pub(crate) fn skipping(mut self, damaged: Vec<DamagedBytes>) -> Self {
        self.skip = damaged;
        self
    }

    /// Reads `chunk` bytes at a time (at least a whole batch when one is needed).
    pub(crate) fn with_chunk(mut self, chunk: usize) -> Self {
        self.chunk = chunk.max(BATCH_HEADER_LEN);
        self
    }

    /// Validate every batch fully and check offsets chain from `expected_offset`.
    pub(crate) fn validating(mut self, expected_offset: u64) -> Self {
        self.validate = true;
        self.expected_offset = Some(expected_offset);
        self
    }

    /// Check offsets chain from `expected_offset` (headers only).
    pub(crate) fn chaining(mut self, expected_offset: u64) -> Self {
        self.expected_offset = Some(expected_offset);
        self
    }

    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    /// Makes `[pos, pos + len)` available in the buffer; `len` fits in the range.
    fn fill(&mut self, pos: u64, len: usize) -> Result<&[u8], StorageError> {
        let buf_end = self.buf_start + self.buf.len() as u64;
        if pos < self.buf_start || pos + len as u64 > buf_end {
            let want = (self.end - pos).min(len.max(self.chunk) as u64) as usize;
            self.buf.resize(want, 0);
            self.file
                .read_exact_at(&mut self.buf, pos)
                .map_err(io_err("read segment", self.path))?;
            self.buf_start = pos;
        }
        let at = (pos - self.buf_start) as usize;
        Ok(&self.buf[at..at + len])
    }

    /// The next batch, `Ok(Ok(None))` at the end of the range, or `Ok(Err(stop))` where
    /// the bytes stop being a valid chain of batches.
    pub(crate) fn next_batch(&mut self) -> Result<Result<Option<Found>, ScanStop>, StorageError> {
        while let Some(d) = self
            .skip
            .iter()
            .find(|d| d.start == self.position && d.end > d.start)
        {
            self.position = d.end;
            if self.expected_offset.is_some() {
                self.expected_offset = d.to_offset;
            }
        }
        let pos = self.position;
        if pos >= self.end {
            return Ok(Ok(None));
        }
        if self.end - pos < BATCH_HEADER_LEN as u64 {
            return Ok(Err(ScanStop::Torn));
        }
        let header = match BatchHeader::parse(self.fill(pos, BATCH_HEADER_LEN)?) {
            Ok(h) => h,
            Err(e) => return Ok(Err(ScanStop::Invalid(e))),
        };
        let len = u64::from(header.batch_length);
        if self.end - pos < len {
            return Ok(Err(ScanStop::Torn));
        }
        if self.validate {
            let bytes = self.fill(pos, len as usize)?;
            if let Err(e) = BatchView::parse(bytes) {
                return Ok(Err(ScanStop::Invalid(e)));
            }
        } else if header.record_count == 0 || header.next_offset().is_none() {
            return Ok(Err(ScanStop::Invalid(FormatError::Empty)));
        }
        if let Some(expected) = self.expected_offset {
            if header.base_offset != expected {
                return Ok(Err(ScanStop::OffsetMismatch {
                    expected,
                    found: header.base_offset,
                }));
            }
            self.expected_offset = header.next_offset();
        }
        self.position = pos + len;
        Ok(Ok(Some(Found {
            position: pos,
            header,
        })))
    }

    /// Bytes of the batch just returned by [`Scanner::next_batch`].
    pub(crate) fn batch_bytes(&mut self, found: &Found) -> Result<&[u8], StorageError> {
        self.fill(found.position, found.header.batch_length as usize)
    }
}

/// Decides where sparse index entries go while batches are appended or scanned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexCadence {
    interval_bytes: u64,
    last_position: Option<u64>,
}

impl IndexCadence {
    pub(crate) fn new(interval_bytes: u64, last: Option<IndexEntry>) -> Self {
        Self {
            interval_bytes,
            last_position: last.map(|e| u64::from(e.position)),
        }
    }

    /// Whether the batch at `position` gets an entry; records it if so.
    pub(crate) fn take(&mut self, position: u64) -> bool {
        let due = match self.last_position {
            None => true,
            Some(last) => position >= last + self.interval_bytes,
        };
        if due {
            self.last_position = Some(position);
        }
        due
    }
    /// The entry for a found batch, if it is due one ([`IndexCadence::take`]) and its
    /// fields fit ([`entry_for`]).
    pub(crate) fn entry(&mut self, segment_base: u64, found: &Found) -> Option<IndexEntry> {
        if self.take(found.position) {
            entry_for(segment_base, found)
        } else {
            None
        }
    }
}

/// The index entry for a found batch, if its relative offset and position fit the
/// entry's u32 fields (they do for any segment this engine writes; damaged or foreign
/// data simply gets no entry, which costs a longer scan, never a wrong answer).
pub(crate) fn entry_for(segment_base: u64, found: &Found) -> Option<IndexEntry> {
    Some(IndexEntry {
        rel_offset: u32::try_from(found.header.base_offset.checked_sub(segment_base)?).ok()?,
        position: u32::try_from(found.position).ok()?,
        timestamp_us: found.header.first_timestamp_us,
    })
}
