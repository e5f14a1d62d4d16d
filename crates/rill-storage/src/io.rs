//! The narrow disk seam: every byte the log engine reads or writes goes through [`Io`]
//! and [`IoFile`], so tests can inject failures (the `fault` and `sim` modules, feature
//! `fault-injection`).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File-system operations the log engine needs.
pub trait Io: Send + Sync + fmt::Debug {
    /// Creates `path` and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Paths of the entries of directory `path`.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// Opens `path` for reading and writing, creating it if `create`.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn IoFile>>;
    /// Deletes the file `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (created and removed files) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to` (a file or a directory), replacing a file at `to`. Durable
    /// once the directories involved are synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Deletes the directory `path` and everything in it.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Whether `path` exists (a file or a directory).
    fn exists(&self, path: &Path) -> bool;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Takes an exclusive lock on the file `path` (created if missing) for as long as
    /// the returned guard lives: one process per data directory. Fails at once if
    /// another holder has it. The default takes no lock (an in-memory disk belongs to
    /// one process anyway).
    fn try_lock(&self, path: &Path) -> io::Result<Box<dyn fmt::Debug + Send + Sync>> {
        let _ = path;
        Ok(Box::new(()))
    }
    /// Makes the file `path` readable and writable by its owner only (mode 0600), for
    /// files that hold credentials. The default does nothing (an in-memory disk has no
    /// other readers).
    fn restrict_to_owner(&self, path: &Path) -> io::Result<()> {
        let _ = path;
        Ok(())
    }
}

/// One open file, used with positional I/O only (safe to share across threads).
pub trait IoFile: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `pos`; returns how many were read.
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `pos`.
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()>;
    /// `fdatasync`: data written so far is on stable media when this returns `Ok`.
    fn sync_data(&self) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Current length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Starts writing `len` bytes at `pos` back to the device, without waiting and
    /// without syncing metadata (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux; a
    /// no-op elsewhere). A hint that spreads writeback out, so the next
    /// [`Self::sync_data`] has little left to do; it promises no durability.
    fn start_writeback(&self, pos: u64, len: u64) -> io::Result<()> {
        let _ = (pos, len);
        Ok(())
    }

    /// Writes `len` bytes at `pos` back to the device, waits for that, and drops them
    /// from the page cache (`sync_file_range` with its waits, then
    /// `posix_fadvise(DONTNEED)` on Linux; a no-op elsewhere). For data written long
    /// enough ago that readers are unlikely to want it from memory: a log that ingests
    /// for hours otherwise fills the cache, and every later write then waits for the
    /// kernel to reclaim a page. It promises no durability and changes nothing a read
    /// returns (a read of dropped data goes to the disk).
    fn drop_cached(&self, pos: u64, len: u64) -> io::Result<()> {
        let _ = (pos, len);
        Ok(())
    }

    /// Writes all of `bufs`, one after another, at `pos`: one system call where the
    /// file can (`pwritev` on Linux). The default writes them in turn. A crash in the
    /// middle may keep any prefix, as with separate writes.
    fn write_all_vectored_at(&self, bufs: &[&[u8]], pos: u64) -> io::Result<()> {
        let mut at = pos;
        for buf in bufs {
            self.write_all_at(buf, at)?;
            at += buf.len() as u64;
        }
        Ok(())
    }

    /// Reserves the disk blocks of `len` bytes at `pos` without changing the file's
    /// size or what it reads as (`fallocate(FALLOC_FL_KEEP_SIZE)` on Linux), so writes
    /// there skip the file system's block allocation. A hint: the default reserves
    /// nothing, and a file system that cannot is not an error.
    fn preallocate(&self, pos: u64, len: u64) -> io::Result<()> {
        let _ = (pos, len);
        Ok(())
    }

    /// Frees blocks reserved by [`Self::preallocate`] past the end of the file, leaving
    /// its size and contents as they are. The default has none to free.
    fn release_preallocated(&self) -> io::Result<()> {
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `pos` only if that needs no wait for the disk
    /// (the page cache holds them): `None` if it would wait. The default never reads
    /// this way, so its callers take their blocking path.
    fn read_at_nowait(&self, buf: &mut [u8], pos: u64) -> io::Result<Option<usize>> {
        let _ = (buf, pos);
        Ok(None)
    }

    /// Reads exactly `len` bytes at `pos` into a new buffer, failing with
    /// `UnexpectedEof` if the file ends first. The default zeroes the buffer and then
    /// reads into it; the real file reads into it uninitialised (zeroing a 1 MiB read
    /// buffer was 6 % of a server's time serving `rill bench consume`).
    fn read_vec_at(&self, len: usize, pos: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_exact_at(&mut buf, pos)?;
        Ok(buf)
    }

    /// [`Self::read_vec_at`] that reads only what needs no wait for the disk: `None` if
    /// some of it would wait (as [`Self::read_at_nowait`]).
    fn read_vec_at_nowait(&self, len: usize, pos: u64) -> io::Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            match self.read_at_nowait(&mut buf[done..], pos + done as u64)? {
                None => return Ok(None),
                Some(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Some(n) => done += n,
            }
        }
        Ok(Some(buf))
    }

    /// Reads exactly `buf.len()` bytes at `pos`, failing with `UnexpectedEof` if the file
    /// ends first.
    fn read_exact_at(&self, mut buf: &mut [u8], mut pos: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, pos) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Reads through `read_at_nowait` only: a read that would wait for the disk fails with
/// `WouldBlock` (so a whole read attempt can be abandoned and redone where blocking is
/// allowed). For reads only.
#[derive(Debug)]
pub(crate) struct NoWait(pub(crate) Arc<dyn IoFile>);

impl IoFile for NoWait {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        match self.0.read_at_nowait(buf, pos)? {
            Some(n) => Ok(n),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn read_vec_at(&self, len: usize, pos: u64) -> io::Result<Vec<u8>> {
        self.0
            .read_vec_at_nowait(len, pos)?
            .ok_or_else(|| io::ErrorKind::WouldBlock.into())
    }

    fn write_all_at(&self, _buf: &[u8], _pos: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn sync_data(&self) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn size(&self) -> io::Result<u64> {
        self.0.size()
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdIo;

#[derive(Debug)]
struct StdFile(File);

impl Io for StdIo {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.path()))
            .collect()
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn IoFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(StdFile(file)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir_all(path)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn try_lock(&self, path: &Path) -> io::Result<Box<dyn fmt::Debug + Send + Sync>> {
        let file = File::create(path)?;
        file.try_lock().map_err(|e| match e {
            fs::TryLockError::WouldBlock => {
                io::Error::new(io::ErrorKind::WouldBlock, "another process holds the lock")
            }
            fs::TryLockError::Error(e) => e,
        })?;
        Ok(Box::new(file))
    }

    fn restrict_to_owner(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
    }
}

impl IoFile for StdFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.0.read_at(buf, pos)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        self.0.write_all_at(buf, pos)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn start_writeback(&self, pos: u64, len: u64) -> io::Result<()> {
        crate::sys::start_writeback(&self.0, pos, len)
    }

    fn drop_cached(&self, pos: u64, len: u64) -> io::Result<()> {
        crate::sys::drop_cached(&self.0, pos, len)
    }

    fn write_all_vectored_at(&self, bufs: &[&[u8]], pos: u64) -> io::Result<()> {
        crate::sys::write_all_vectored(&self.0, bufs, pos)
    }

    fn preallocate(&self, pos: u64, len: u64) -> io::Result<()> {
        crate::sys::preallocate(&self.0, pos, len)
    }

    fn release_preallocated(&self) -> io::Result<()> {
        // Truncating to the same size frees the blocks reserved past it.
        let len = self.0.metadata()?.len();
        self.0.set_len(len)
    }

    fn read_at_nowait(&self, buf: &mut [u8], pos: u64) -> io::Result<Option<usize>> {
        crate::sys::read_nowait(&self.0, buf, pos)
    }

    fn read_vec_at(&self, len: usize, pos: u64) -> io::Result<Vec<u8>> {
        crate::sys::read_vec(&self.0, len, pos, false)?
            .ok_or_else(|| io::ErrorKind::WouldBlock.into())
    }

    fn read_vec_at_nowait(&self, len: usize, pos: u64) -> io::Result<Option<Vec<u8>>> {
        crate::sys::read_vec(&self.0, len, pos, true)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes whose byte `i` is `i % 251`.
    fn file_of(dir: &Path, len: usize) -> Arc<dyn IoFile> {
        let path = dir.join("f");
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &bytes).unwrap();
        StdIo.open(&path, false).unwrap()
    }

    #[test]
    fn reads_into_new_buffers_exactly_what_the_file_holds() {
        let dir = tempfile::tempdir().unwrap();
        let len = (3 << 20) + 17;
        let file = file_of(dir.path(), len);
        for (at, n) in [(0, 0), (0, 1), (5, 4096), (1 << 20, 2 << 20), (0, len)] {
            let want: Vec<u8> = (at..at + n).map(|i| (i % 251) as u8).collect();
            assert_eq!(file.read_vec_at(n, at as u64).unwrap(), want, "{at}+{n}");
            // Just written, so in the page cache: the no-wait read reads it too (or, on
            // a file system that cannot read without waiting, declines).
            if let Some(got) = file.read_vec_at_nowait(n, at as u64).unwrap() {
                assert_eq!(got, want, "no wait, {at}+{n}");
            }
            // The default methods (zeroed buffers) agree.
            let wrapped = NoWait(Arc::clone(&file));
            match wrapped.read_vec_at(n, at as u64) {
                Ok(got) => assert_eq!(got, want),
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
        }
    }

    /// A file with the trait's default methods only.
    #[derive(Debug)]
    struct Plain(Arc<dyn IoFile>);

    impl IoFile for Plain {
        fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
            self.0.read_at(buf, pos)
        }
        fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
            self.0.write_all_at(buf, pos)
        }
        fn sync_data(&self) -> io::Result<()> {
            self.0.sync_data()
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.0.set_len(len)
        }
        fn size(&self) -> io::Result<u64> {
            self.0.size()
        }
    }

    /// One vectored write places every buffer after the one before, empty ones and all,
    /// more than one call's worth of buffers too, over and past what the file held;
    /// the default (one write per buffer) writes the same bytes.
    #[test]
    fn a_vectored_write_writes_its_buffers_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = file_of(dir.path(), 1000);
        let parts: Vec<Vec<u8>> = (0..21u8)
            .map(|i| vec![i; usize::from(i) * 997 % 5000])
            .collect();
        let bufs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let joined = parts.concat();
        file.write_all_vectored_at(&bufs, 700).unwrap();
        let mut want: Vec<u8> = (0..700).map(|i| (i % 251) as u8).collect();
        want.extend_from_slice(&joined);
        assert_eq!(file.size().unwrap(), want.len() as u64);
        assert_eq!(file.read_vec_at(want.len(), 0).unwrap(), want);
        let other = StdIo.open(&dir.path().join("g"), true).unwrap();
        Plain(Arc::clone(&other))
            .write_all_vectored_at(&bufs, 0)
            .unwrap();
        assert_eq!(other.read_vec_at(joined.len(), 0).unwrap(), joined);
        file.write_all_vectored_at(&[], 0).unwrap();
        assert_eq!(file.size().unwrap(), want.len() as u64);
    }

    /// Blocks reserved past the end change neither the size nor what the file reads as,
    /// writes into them read back, and releasing frees what the writes did not use.
    #[cfg(target_os = "linux")]
    #[test]
    fn reserved_blocks_keep_the_size_and_are_freed_past_the_end() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = StdIo.open(&path, true).unwrap();
        let allocated = || fs::metadata(&path).unwrap().blocks() * 512;
        file.write_all_at(&[7u8; 4096], 0).unwrap();
        file.preallocate(4096, 8 << 20).unwrap();
        assert_eq!(file.size().unwrap(), 4096);
        // A file system that reserves nothing (it may not support it) still passes
        // the rest; where it does, the blocks show.
        let reserved = allocated() >= 8 << 20;
        let data = vec![9u8; 1 << 20];
        file.write_all_at(&data, 4096).unwrap();
        assert_eq!(file.size().unwrap(), 4096 + (1 << 20));
        assert_eq!(file.read_vec_at(1 << 20, 4096).unwrap(), data);
        file.release_preallocated().unwrap();
        assert_eq!(file.size().unwrap(), 4096 + (1 << 20));
        assert_eq!(file.read_vec_at(4096, 0).unwrap(), vec![7u8; 4096]);
        if reserved {
            assert!(
                allocated() < 4 << 20,
                "{} bytes still allocated",
                allocated()
            );
        }
    }

    #[test]
    fn a_read_past_the_end_fails_as_eof() {
        let dir = tempfile::tempdir().unwrap();
        let file = file_of(dir.path(), 100);
        for (at, n) in [(0u64, 101usize), (99, 2), (100, 1), (1000, 1)] {
            let e = file.read_vec_at(n, at).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{at}+{n}");
            if let Err(e) = file.read_vec_at_nowait(n, at) {
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "no wait, {at}+{n}");
            }
        }
    }
}
