//! Fault injection through the [`Io`] seam: fsync failures, write errors, short writes
//! and a disk that fills up, without a real faulty disk.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::io::{Io, IoFile, StdIo};

/// What the next operations should do. Shared between the [`FaultyIo`] and the test.
#[derive(Debug, Default)]
struct Plan {
    /// Fail this many upcoming `sync_data` calls (then succeed again).
    sync_failures: u32,
    /// Fail every `sync_data` call.
    sync_always_fails: bool,
    /// Bytes that may still be written before the disk is "full": a write that needs
    /// more writes what fits, then fails with `ENOSPC`. Deleting files gives their
    /// bytes back, as on a real disk.
    write_budget: Option<u64>,
    /// Fail this many upcoming writes with `EIO` without writing anything.
    write_failures: u32,
    /// Panic in this many upcoming writes (a bug in the middle of an append).
    write_panics: u32,
    /// Every read takes this long (a slow or overloaded disk).
    read_delay: Option<std::time::Duration>,
    /// Only files whose name ends with this are affected; `None` means all files.
    suffix: Option<String>,
    /// Counts, for assertions.
    syncs: u64,
    writes: u64,
    /// Write-behind hints: (position, length) of each.
    writebacks: Vec<(u64, u64)>,
    /// Ranges dropped from the page cache: (position, length) of each.
    drops: Vec<(u64, u64)>,
}

/// A handle to change the faults of a [`FaultyIo`] while it is in use.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<Plan>>);

impl Faults {
    fn plan(&self) -> MutexGuard<'_, Plan> {
        self.0.lock()
    }

    /// The next `n` fsyncs fail with `EIO`.
    pub fn fail_next_syncs(&self, n: u32) {
        self.plan().sync_failures = n;
    }

    /// Every fsync fails (or succeeds again, with `false`).
    pub fn fail_all_syncs(&self, fail: bool) {
        self.plan().sync_always_fails = fail;
    }

    /// The disk holds only `bytes` more bytes; `None` lifts the limit.
    pub fn set_write_budget(&self, bytes: Option<u64>) {
        self.plan().write_budget = bytes;
    }

    /// The next `n` writes fail with `EIO`, writing nothing.
    pub fn fail_next_writes(&self, n: u32) {
        self.plan().write_failures = n;
    }

    /// Every read of an affected file takes `delay` first (`None`: full speed again).
    pub fn delay_reads(&self, delay: Option<std::time::Duration>) {
        self.plan().read_delay = delay;
    }

    /// The next `n` writes panic, writing nothing (models a bug inside an append).
    pub fn panic_on_next_writes(&self, n: u32) {
        self.plan().write_panics = n;
    }

    /// Restricts faults to files whose name ends with `suffix` (e.g. `".log"`).
    pub fn only_files_ending_with(&self, suffix: &str) {
        self.plan().suffix = Some(suffix.to_owned());
    }

    /// Number of `sync_data` calls seen on affected files.
    pub fn sync_count(&self) -> u64 {
        self.plan().syncs
    }

    /// The write-behind hints seen on affected files: (position, length) of each.
    pub fn writebacks(&self) -> Vec<(u64, u64)> {
        self.plan().writebacks.clone()
    }

    /// The ranges of affected files dropped from the page cache: (position, length).
    pub fn drops(&self) -> Vec<(u64, u64)> {
        self.plan().drops.clone()
    }

    /// Number of writes seen on affected files.
    pub fn write_count(&self) -> u64 {
        self.plan().writes
    }
}

/// An [`Io`] over the real file system whose failures a test controls via [`Faults`].
#[derive(Debug, Clone, Default)]
pub struct FaultyIo {
    faults: Faults,
}

impl FaultyIo {
    /// A faulty I/O layer and the handle that controls it.
    pub fn new() -> (Self, Faults) {
        let faults = Faults::default();
        (
            Self {
                faults: faults.clone(),
            },
            faults,
        )
    }
}

impl FaultyIo {
    /// Gives deleted bytes back to a limited disk.
    fn free(&self, bytes: u64) {
        if let Some(budget) = self.faults.plan().write_budget.as_mut() {
            *budget += bytes;
        }
    }
}

/// Bytes of every file under `path`.
fn bytes_under(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                bytes_under(&p)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

#[derive(Debug)]
struct FaultyFile {
    inner: Arc<dyn IoFile>,
    faults: Faults,
    affected: bool,
}

impl Io for FaultyIo {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdIo.create_dir_all(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        StdIo.read_dir(path)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn IoFile>> {
        let inner = StdIo.open(path, create)?;
        let affected = match &self.faults.plan().suffix {
            None => true,
            Some(s) => path.to_string_lossy().ends_with(s.as_str()),
        };
        Ok(Arc::new(FaultyFile {
            inner,
            faults: self.faults.clone(),
            affected,
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let freed = std::fs::metadata(path).map_or(0, |m| m.len());
        StdIo.remove_file(path)?;
        self.free(freed);
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        StdIo.sync_dir(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdIo.rename(from, to)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let freed = bytes_under(path);
        StdIo.remove_dir_all(path)?;
        self.free(freed);
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        StdIo.exists(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        StdIo.is_dir(path)
    }

    fn try_lock(&self, path: &Path) -> io::Result<Box<dyn std::fmt::Debug + Send + Sync>> {
        StdIo.try_lock(path)
    }

    fn restrict_to_owner(&self, path: &Path) -> io::Result<()> {
        StdIo.restrict_to_owner(path)
    }
}

impl IoFile for FaultyFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        if self.affected {
            let delay = self.faults.plan().read_delay;
            if let Some(delay) = delay {
                std::thread::sleep(delay);
            }
        }
        self.inner.read_at(buf, pos)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        if !self.affected {
            return self.inner.write_all_at(buf, pos);
        }
        let allowed = {
            let mut plan = self.faults.plan();
            plan.writes += 1;
            if plan.write_panics > 0 {
                plan.write_panics -= 1;
                drop(plan);
                panic!("injected panic in a write");
            }
            if plan.write_failures > 0 {
                plan.write_failures -= 1;
                return Err(io::Error::from_raw_os_error(5)); // EIO
            }
            match plan.write_budget.as_mut() {
                None => buf.len(),
                Some(budget) => {
                    let fits = (*budget).min(buf.len() as u64);
                    *budget -= fits;
                    fits as usize
                }
            }
        };
        self.inner.write_all_at(&buf[..allowed], pos)?;
        if allowed < buf.len() {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        if self.affected {
            let mut plan = self.faults.plan();
            plan.syncs += 1;
            if plan.sync_always_fails {
                return Err(io::Error::from_raw_os_error(5));
            }
            if plan.sync_failures > 0 {
                plan.sync_failures -= 1;
                return Err(io::Error::from_raw_os_error(5));
            }
        }
        self.inner.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }

    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }

    fn read_at_nowait(&self, buf: &mut [u8], pos: u64) -> io::Result<Option<usize>> {
        // A slowed disk never has anything cached: reads take the blocking path.
        if self.affected && self.faults.plan().read_delay.is_some() {
            return Ok(None);
        }
        self.inner.read_at_nowait(buf, pos)
    }

    fn start_writeback(&self, pos: u64, len: u64) -> io::Result<()> {
        if self.affected {
            self.faults.plan().writebacks.push((pos, len));
        }
        self.inner.start_writeback(pos, len)
    }

    fn preallocate(&self, pos: u64, len: u64) -> io::Result<()> {
        self.inner.preallocate(pos, len)
    }

    fn drop_cached(&self, pos: u64, len: u64) -> io::Result<()> {
        if self.affected {
            self.faults.plan().drops.push((pos, len));
        }
        self.inner.drop_cached(pos, len)
    }

    fn release_preallocated(&self) -> io::Result<()> {
        self.inner.release_preallocated()
    }
}
