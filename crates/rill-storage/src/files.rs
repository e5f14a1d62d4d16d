//! Open file handles of sealed segments, bounded.
//!
//! The active segment of a log keeps its `.log` file open (every append writes it).
//! Sealed segments are only read, and a log can have thousands of them: their `.log`
//! files are opened on demand and kept in one least-recently-used cache per broker, so
//! the number of open files is `3 × logs + capacity`, whatever the number of segments.
//! (Index files of sealed segments are not kept open at all: their entries are in
//! memory.)

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lru::LruCache;
use parking_lot::{Mutex, RwLock};

use crate::StorageError;
use crate::error::io_err;
use crate::io::{Io, IoFile};

/// Sealed-segment files kept open by default.
pub const OPEN_FILES_DEFAULT: usize = 256;

/// A bounded cache of open sealed-segment files, shared by the logs of a broker.
///
/// An evicted file is closed once the last read using it finishes.
#[derive(Debug)]
pub struct FileCache {
    files: Mutex<LruCache<PathBuf, Arc<dyn IoFile>>>,
    capacity: usize,
}

impl FileCache {
    /// A cache holding at most `capacity` open files (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            files: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity).expect("at least one"),
            )),
            capacity,
        }
    }

    /// Most files kept open.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Files open now.
    pub fn open_files(&self) -> usize {
        self.files.lock().len()
    }

    /// The open file at `path`, opening it (without creating it) if it is not cached.
    pub(crate) fn get(&self, io: &dyn Io, path: &Path) -> Result<Arc<dyn IoFile>, StorageError> {
        if let Some(file) = self.files.lock().get(path) {
            return Ok(Arc::clone(file));
        }
        // Opened without the lock held: an open is a system call, and other logs' reads
        // must not wait for it. A racing open of the same file keeps the first one.
        let file = io.open(path, false).map_err(io_err("open segment", path))?;
        let mut files = self.files.lock();
        if let Some(cached) = files.get(path) {
            return Ok(Arc::clone(cached));
        }
        files.put(path.to_path_buf(), Arc::clone(&file));
        Ok(file)
    }

    /// The open file at `path` if it is cached (no system call).
    pub(crate) fn get_cached(&self, path: &Path) -> Option<Arc<dyn IoFile>> {
        self.files.lock().get(path).cloned()
    }

    /// Caches an already open file (a segment that was just sealed).
    pub(crate) fn put(&self, path: &Path, file: Arc<dyn IoFile>) {
        self.files.lock().put(path.to_path_buf(), file);
    }

    /// Drops the cached handle of a deleted file, so its space is freed.
    pub(crate) fn forget(&self, path: &Path) {
        self.files.lock().pop(path);
    }
}

impl Default for FileCache {
    fn default() -> Self {
        Self::new(OPEN_FILES_DEFAULT)
    }
}

/// The `.log` file of one segment: pinned open while the segment is active (or being
/// sealed), reached through the [`FileCache`] once it is sealed.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    path: PathBuf,
    pinned: RwLock<Option<Arc<dyn IoFile>>>,
    io: Arc<dyn Io>,
    cache: Arc<FileCache>,
}

impl SegmentFile {
    /// A file kept open.
    pub(crate) fn pinned(
        path: PathBuf,
        file: Arc<dyn IoFile>,
        io: Arc<dyn Io>,
        cache: Arc<FileCache>,
    ) -> Self {
        Self {
            path,
            pinned: RwLock::new(Some(file)),
            io,
            cache,
        }
    }

    /// The open file.
    pub(crate) fn get(&self) -> Result<Arc<dyn IoFile>, StorageError> {
        if let Some(file) = self.pinned.read().as_ref() {
            return Ok(Arc::clone(file));
        }
        self.cache.get(self.io.as_ref(), &self.path)
    }

    /// The open file if it needs no system call to get (pinned, or cached).
    pub(crate) fn get_cached(&self) -> Option<Arc<dyn IoFile>> {
        if let Some(file) = self.pinned.read().as_ref() {
            return Some(Arc::clone(file));
        }
        self.cache.get_cached(&self.path)
    }

    /// From now on the file is reached through the cache (the segment is sealed).
    pub(crate) fn unpin(&self) {
        if let Some(file) = self.pinned.write().take() {
            self.cache.put(&self.path, file);
        }
    }

    /// Closes the file for good: the segment is being deleted.
    pub(crate) fn forget(&self) {
        self.pinned.write().take();
        self.cache.forget(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::StdIo;

    #[test]
    fn keeps_at_most_capacity_files_open() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(2);
        let paths: Vec<_> = (0..5)
            .map(|i| {
                let p = dir.path().join(format!("{i}.log"));
                std::fs::write(&p, [i as u8]).unwrap();
                p
            })
            .collect();
        for p in &paths {
            let file = cache.get(&StdIo, p).unwrap();
            let mut b = [0u8; 1];
            file.read_exact_at(&mut b, 0).unwrap();
            assert_eq!(cache.open_files().min(2), cache.open_files());
        }
        assert_eq!(cache.open_files(), 2);
        cache.forget(&paths[4]);
        assert_eq!(cache.open_files(), 1);
        assert!(cache.get(&StdIo, &dir.path().join("missing.log")).is_err());
    }
}
