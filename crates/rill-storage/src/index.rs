//! Sparse offset and time indexes of one segment (`docs/FORMAT.md` §4).
//!
//! The indexes are hints derived from the `.log`: they are not synced with it, and
//! recovery trims or rebuilds them. Entries are kept in memory (8 + 12 bytes per
//! `index_interval_bytes` of log) and appended to the two files 512 at a time (4 KiB
//! of offset entries), and whatever waits when the index is synced, its segment sealed
//! or closed: two small writes per batch cost a batch of 100 KiB a tenth of its
//! throughput (each grows two files, so each updates two inodes).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::StorageError;
use crate::error::io_err;
use crate::io::{Io, IoFile};

const OFFSET_ENTRY_LEN: usize = 8;
const TIME_ENTRY_LEN: usize = 12;
/// Entries made in memory are written to the files once this many wait.
const WRITE_ENTRIES_MIN: usize = 512;

/// One sparse index entry: the batch at `position` starts at `base + rel_offset` and
/// was stamped with `timestamp_us` as its first timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub(crate) rel_offset: u32,
    pub(crate) position: u32,
    pub(crate) timestamp_us: i64,
}

#[derive(Debug)]
pub(crate) struct SegmentIndex {
    entries: Vec<IndexEntry>,
    /// How many of `entries` the files hold (the first ones); the rest wait to be
    /// written ([`WRITE_ENTRIES_MIN`]).
    written: usize,
    /// The open index files; released once the segment is sealed (its entries stay in
    /// memory and are never written again).
    files: Option<IndexFiles>,
    offset_path: PathBuf,
    time_path: PathBuf,
}

#[derive(Debug)]
struct IndexFiles {
    offset: Arc<dyn IoFile>,
    time: Arc<dyn IoFile>,
}

pub(crate) fn index_paths(dir: &Path, base_offset: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{base_offset:020}.index")),
        dir.join(format!("{base_offset:020}.timeindex")),
    )
}

impl SegmentIndex {
    /// Opens (creating if missing) the index files of a segment and loads their entries.
    ///
    /// Returns the index and whether the files were well formed; a malformed index
    /// is returned empty and must be rebuilt by the caller.
    pub(crate) fn open(
        io: &dyn Io,
        dir: &Path,
        base_offset: u64,
        log_len: u64,
    ) -> Result<(Self, bool), StorageError> {
        let (offset_path, time_path) = index_paths(dir, base_offset);
        let offset_file = io
            .open(&offset_path, true)
            .map_err(io_err("open index", &offset_path))?;
        let time_file = io
            .open(&time_path, true)
            .map_err(io_err("open time index", &time_path))?;
        let mut index = Self {
            entries: Vec::new(),
            written: 0,
            files: Some(IndexFiles {
                offset: offset_file,
                time: time_file,
            }),
            offset_path,
            time_path,
        };
        let ok = index.load(log_len)?;
        if !ok {
            // Start both files over, so entries pushed from here on (a rebuild, or the
            // validation of the tail) line up in both: stale entries left past them would
            // make the pair malformed at every later open.
            index.truncate(0)?;
        }
        Ok((index, ok))
    }

    /// Writes the entries still waiting and closes the index files; the entries stay in
    /// memory. Writing the index afterwards is a bug (only the active segment's index
    /// is written). A failed write is logged: the index is a hint that recovery
    /// completes.
    pub(crate) fn release_files(&mut self) {
        if let Err(e) = self.write_waiting() {
            tracing::warn!(error = %e, "could not write a segment's last index entries");
        }
        self.files = None;
    }

    /// Opens the files of a sealed segment's index again, to cut them (a truncation).
    pub(crate) fn reopen_files(&mut self, io: &dyn Io) -> Result<(), StorageError> {
        if self.files.is_none() {
            let offset = io
                .open(&self.offset_path, true)
                .map_err(io_err("open index", &self.offset_path))?;
            let time = io
                .open(&self.time_path, true)
                .map_err(io_err("open time index", &self.time_path))?;
            self.files = Some(IndexFiles { offset, time });
        }
        Ok(())
    }

    fn files(&self) -> Result<&IndexFiles, StorageError> {
        self.files.as_ref().ok_or_else(|| StorageError::Io {
            op: "write index",
            path: self.offset_path.clone(),
            source: std::io::Error::other("the index of a sealed segment is not writable"),
        })
    }

    fn load(&mut self, log_len: u64) -> Result<bool, StorageError> {
        let files = self.files()?;
        let (offset_file, time_file) = (Arc::clone(&files.offset), Arc::clone(&files.time));
        let offset_len = offset_file
            .size()
            .map_err(io_err("stat index", &self.offset_path))?;
        let time_len = time_file
            .size()
            .map_err(io_err("stat time index", &self.time_path))?;
        if offset_len % OFFSET_ENTRY_LEN as u64 != 0 || time_len % TIME_ENTRY_LEN as u64 != 0 {
            return Ok(false);
        }
        let count = offset_len / OFFSET_ENTRY_LEN as u64;
        if count != time_len / TIME_ENTRY_LEN as u64 || count > log_len / 64 + 1 {
            return Ok(false);
        }
        let mut offsets = vec![0u8; offset_len as usize];
        let mut times = vec![0u8; time_len as usize];
        offset_file
            .read_exact_at(&mut offsets, 0)
            .map_err(io_err("read index", &self.offset_path))?;
        time_file
            .read_exact_at(&mut times, 0)
            .map_err(io_err("read time index", &self.time_path))?;
        let mut entries = Vec::with_capacity(count as usize);
        for (o, t) in offsets
            .chunks_exact(OFFSET_ENTRY_LEN)
            .zip(times.chunks_exact(TIME_ENTRY_LEN))
        {
            let rel_offset = u32::from_le_bytes(o[0..4].try_into().expect("4 bytes"));
            let position = u32::from_le_bytes(o[4..8].try_into().expect("4 bytes"));
            let timestamp_us = i64::from_le_bytes(t[0..8].try_into().expect("8 bytes"));
            let time_rel = u32::from_le_bytes(t[8..12].try_into().expect("4 bytes"));
            if time_rel != rel_offset {
                return Ok(false);
            }
            if let Some(prev) = entries.last() {
                let prev: &IndexEntry = prev;
                if rel_offset <= prev.rel_offset
                    || position <= prev.position
                    || timestamp_us < prev.timestamp_us
                {
                    return Ok(false);
                }
            }
            entries.push(IndexEntry {
                rel_offset,
                position,
                timestamp_us,
            });
        }
        self.written = entries.len();
        self.entries = entries;
        Ok(true)
    }

    pub(crate) fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    pub(crate) fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    /// The last entry at or before relative offset `rel`.
    pub(crate) fn floor_offset(&self, rel: u64) -> Option<IndexEntry> {
        let i = self
            .entries
            .partition_point(|e| u64::from(e.rel_offset) <= rel);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// The last entry whose first timestamp is below `ts`: no record before it can have
    /// a timestamp at or above `ts`.
    pub(crate) fn floor_time(&self, ts: i64) -> Option<IndexEntry> {
        let i = self.entries.partition_point(|e| e.timestamp_us < ts);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// Appends an entry to memory, and to both files once [`WRITE_ENTRIES_MIN`] wait.
    pub(crate) fn push(&mut self, entry: IndexEntry) -> Result<(), StorageError> {
        self.files()?;
        self.entries.push(entry);
        if self.entries.len() - self.written >= WRITE_ENTRIES_MIN {
            self.write_waiting()?;
        }
        Ok(())
    }

    /// Writes the entries not in the files yet, one write per file.
    fn write_waiting(&mut self) -> Result<(), StorageError> {
        let waiting = &self.entries[self.written..];
        if waiting.is_empty() {
            return Ok(());
        }
        let mut o = Vec::with_capacity(waiting.len() * OFFSET_ENTRY_LEN);
        let mut t = Vec::with_capacity(waiting.len() * TIME_ENTRY_LEN);
        for e in waiting {
            o.extend_from_slice(&e.rel_offset.to_le_bytes());
            o.extend_from_slice(&e.position.to_le_bytes());
            t.extend_from_slice(&e.timestamp_us.to_le_bytes());
            t.extend_from_slice(&e.rel_offset.to_le_bytes());
        }
        let n = self.written as u64;
        let files = self.files()?;
        files
            .offset
            .write_all_at(&o, n * OFFSET_ENTRY_LEN as u64)
            .map_err(io_err("write index", &self.offset_path))?;
        files
            .time
            .write_all_at(&t, n * TIME_ENTRY_LEN as u64)
            .map_err(io_err("write time index", &self.time_path))?;
        self.written = self.entries.len();
        Ok(())
    }

    /// Keeps the first `n` entries, in memory and on disk.
    pub(crate) fn truncate(&mut self, n: usize) -> Result<(), StorageError> {
        self.entries.truncate(n);
        // Entries past what the files hold were only in memory. (If cutting the files
        // fails, entries past `written` left in them are overwritten by the next
        // write, or found out of order at the next open: they are hints.)
        self.written = self.written.min(n);
        let on_disk = self.written;
        let files = self.files()?;
        files
            .offset
            .set_len((on_disk * OFFSET_ENTRY_LEN) as u64)
            .map_err(io_err("truncate index", &self.offset_path))?;
        files
            .time
            .set_len((on_disk * TIME_ENTRY_LEN) as u64)
            .map_err(io_err("truncate time index", &self.time_path))?;
        Ok(())
    }

    /// Replaces every entry, in memory and on disk.
    pub(crate) fn rewrite(&mut self, entries: &[IndexEntry]) -> Result<(), StorageError> {
        self.truncate(0)?;
        self.entries = entries.to_vec();
        self.write_waiting()
    }

    /// Writes the entries still waiting and syncs the index files (nothing to do once
    /// they are released).
    pub(crate) fn sync(&mut self) -> Result<(), StorageError> {
        self.write_waiting()?;
        let Some(files) = &self.files else {
            return Ok(());
        };
        files
            .offset
            .sync_data()
            .map_err(io_err("sync index", &self.offset_path))?;
        files
            .time
            .sync_data()
            .map_err(io_err("sync time index", &self.time_path))
    }
}

impl Drop for SegmentIndex {
    /// A log closed with its active segment's last entries in memory writes them, so
    /// that the next open finds the index whole (best effort: recovery completes it).
    fn drop(&mut self) {
        if self.files.is_some()
            && let Err(e) = self.write_waiting()
        {
            tracing::warn!(error = %e, "could not write a segment's last index entries");
        }
    }
}
