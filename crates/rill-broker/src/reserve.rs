//! Disk space kept in reserve for a full disk.
//!
//! A topic delete must save the catalog before it removes any file (write-ahead), and
//! saving needs a few blocks for the new `catalog.json`. On a full disk that would make
//! the very operation that frees space fail. So the broker keeps a file of zeros
//! (`reserved-space`, a ballast file as CockroachDB keeps one) and deletes it when a
//! catalog save fails for lack of space; once space is free again it is written anew.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rill_storage::Io;

const FILE: &str = "reserved-space";
const CHUNK_BYTES: usize = 1 << 20;

/// Whether an I/O error says the disk (or a quota) is full.
pub(crate) fn is_no_space(e: &std::io::Error) -> bool {
    // ENOSPC and EDQUOT.
    matches!(e.raw_os_error(), Some(28 | 122)) || e.kind() == std::io::ErrorKind::StorageFull
}

#[derive(Debug)]
pub(crate) struct Reserve {
    io: Arc<dyn Io>,
    path: PathBuf,
    bytes: u64,
    /// Serializes writing and releasing the file.
    lock: Mutex<()>,
}

impl Reserve {
    pub(crate) fn new(io: Arc<dyn Io>, data_dir: &Path, bytes: u64) -> Self {
        Self {
            io,
            path: data_dir.join(FILE),
            bytes,
            lock: Mutex::new(()),
        }
    }

    /// Whether the reserve is on disk now.
    pub(crate) fn held(&self) -> bool {
        self.bytes > 0 && self.io.exists(&self.path)
    }

    /// Writes the reserve if it is missing (best effort: on a full disk it stays
    /// missing, and is tried again after the next delete).
    pub(crate) fn ensure(&self) {
        if self.bytes == 0 {
            return;
        }
        let _guard = self.lock.lock();
        let complete = self
            .io
            .open(&self.path, false)
            .and_then(|f| f.size())
            .is_ok_and(|len| len == self.bytes);
        if complete {
            return;
        }
        if let Err(e) = self.write() {
            let _ = self.io.remove_file(&self.path);
            tracing::warn!(path = %self.path.display(), error = %e, "cannot reserve disk space; deletes on a full disk may fail");
        }
    }

    fn write(&self) -> std::io::Result<()> {
        let file = self.io.open(&self.path, true)?;
        file.set_len(0)?;
        // Zeros written for real: a sparse file (`set_len`) would reserve nothing.
        let zeros = vec![0u8; CHUNK_BYTES];
        let mut at = 0u64;
        while at < self.bytes {
            let n = (self.bytes - at).min(CHUNK_BYTES as u64) as usize;
            file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        file.sync_data()?;
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        self.io.sync_dir(dir)
    }

    /// Deletes the reserve to free its space; whether there was one to free.
    pub(crate) fn release(&self) -> bool {
        let _guard = self.lock.lock();
        if !self.held() {
            return false;
        }
        match self.io.remove_file(&self.path) {
            Ok(()) => {
                let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
                let _ = self.io.sync_dir(dir);
                tracing::warn!(path = %self.path.display(), bytes = self.bytes, "released the reserved disk space");
                true
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "cannot release the reserved disk space");
                false
            }
        }
    }
}
