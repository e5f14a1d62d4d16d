//! The system calls std does not wrap: `sync_file_range(2)`, `preadv2(2)` with
//! `RWF_NOWAIT`, and reads into uninitialised memory.
//!
//! This is the crate's only `unsafe` code. `read_nowait` exists because reads must not
//! block an async runtime's thread on a slow disk, yet a hop to a blocking pool for every
//! read of data already in the page cache added about 30 µs to the median fixed-rate
//! end-to-end latency (`rill bench e2e --rate 50000`: 152 → 180 µs): a read that would
//! have to wait for the disk returns `EAGAIN` instead, and only then goes to the pool.
//! `start_writeback` exists because syncing an `interval` log
//! once a second made every fsync write back a second's worth of pages at once, and
//! appends to the same file stalled behind it (ext4 takes the inode's block-mapping
//! lock and the tail page's lock during writeback): measured with `rill bench e2e
//! --rate 20000 --durability interval:1000`, p99 went from under 1 ms with `never` to
//! 8-16 ms. Starting writeback of each few MiB as it is written (what RocksDB calls
//! `bytes_per_sync`) leaves the periodic fsync little to do. `read_vec` exists because
//! zeroing each 1 MiB read buffer before the read overwrote it was 6 % of the server's
//! time serving `rill bench consume` (`perf record`, 2026-12-06). `preallocate` exists
//! because writing into blocks the file system must first allocate (ext4's delayed
//! allocation) ran at 0.7x the speed of writing into reserved ones (1 MiB `pwrite`s into
//! the page cache, 4.3 against 6.1 GB/s on this machine's disk), and `write_all_vectored`
//! writes a batch's stamped header and its records in one call instead of two.

use std::fs::File;
use std::io;

/// Starts writeback of `len` bytes at `pos` of `file` without waiting for it
/// (`SYNC_FILE_RANGE_WRITE`). No durability is promised: only `fdatasync` does that.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn start_writeback(file: &File, pos: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let pos = libc::off64_t::try_from(pos).map_err(io::Error::other)?;
    let len = libc::off64_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: the descriptor is owned by `file`, which outlives the call; the call
    // takes no pointers, only integers, and reads or writes no memory of ours.
    let rc =
        unsafe { libc::sync_file_range(file.as_raw_fd(), pos, len, libc::SYNC_FILE_RANGE_WRITE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `len` bytes at `pos` of `file` back to the device and waits for it
/// (`sync_file_range` with both waits: no metadata and no device cache flush, so no
/// durability), then drops those pages from the page cache (`POSIX_FADV_DONTNEED`).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn drop_cached(file: &File, pos: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let pos = libc::off64_t::try_from(pos).map_err(io::Error::other)?;
    let len = libc::off64_t::try_from(len).map_err(io::Error::other)?;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: the descriptor is owned by `file`, which outlives both calls; they take
    // only integers and read or write no memory of ours.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), pos, len, flags) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), pos, len, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        // posix_fadvise returns the error number instead of setting errno.
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Writes all of `bufs` in order at `pos` with `pwritev`, again for what a short write
/// left.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn write_all_vectored(file: &File, bufs: &[&[u8]], pos: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // At most this many iovecs per call (well under IOV_MAX).
    const IOVECS: usize = 8;
    let mut bufs: Vec<&[u8]> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
    let mut at = pos;
    let mut first = 0;
    while first < bufs.len() {
        let iovs: Vec<libc::iovec> = bufs[first..]
            .iter()
            .take(IOVECS)
            .map(|b| libc::iovec {
                iov_base: b.as_ptr().cast_mut().cast(),
                iov_len: b.len(),
            })
            .collect();
        let off = libc::off64_t::try_from(at).map_err(io::Error::other)?;
        let count = libc::c_int::try_from(iovs.len()).map_err(io::Error::other)?;
        // SAFETY: every iovec describes a live shared slice of `bufs`, valid for reads
        // of `iov_len` bytes for the whole call (the kernel only reads from them);
        // `count` is the number of iovecs; the descriptor is owned by `file`, which
        // outlives the call.
        let rc = unsafe { libc::pwritev(file.as_raw_fd(), iovs.as_ptr(), count, off) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        let mut n = usize::try_from(rc).map_err(io::Error::other)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        at += n as u64;
        // Step past what was written: whole buffers, then part of one.
        while n > 0 {
            let head = bufs[first];
            if n >= head.len() {
                n -= head.len();
                first += 1;
            } else {
                bufs[first] = &head[n..];
                n = 0;
            }
        }
    }
    Ok(())
}

/// Reserves the blocks of `len` bytes at `pos` without changing the file's size
/// (`fallocate(FALLOC_FL_KEEP_SIZE)`). A file system that cannot is not an error.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn preallocate(file: &File, pos: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let pos = libc::off64_t::try_from(pos).map_err(io::Error::other)?;
    let len = libc::off64_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: the descriptor is owned by `file`, which outlives the call; the call
    // takes only integers and reads or writes no memory of ours.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, pos, len) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOSYS) => Ok(()),
        _ => Err(e),
    }
}

/// Reads at `pos` only what the page cache holds (`preadv2` with `RWF_NOWAIT`): `None` if
/// the read would have to wait for the disk (or the kernel cannot read without waiting).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn read_nowait(file: &File, buf: &mut [u8], pos: u64) -> io::Result<Option<usize>> {
    use std::os::fd::AsRawFd;
    let pos = libc::off64_t::try_from(pos).map_err(io::Error::other)?;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, which is valid for writes of `buf.len()` bytes and
    // borrowed mutably for the whole call; the descriptor is owned by `file`, which
    // outlives the call; one iovec is passed, as the count says.
    let rc = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, pos, libc::RWF_NOWAIT) };
    if rc >= 0 {
        return Ok(Some(rc as usize));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // Not in the page cache; or no RWF_NOWAIT here (old kernel, other file system).
        Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(None),
        _ => Err(e),
    }
}

/// Reads exactly `len` bytes at `pos` into a new buffer that is never zeroed first (the
/// read fills it): `preadv2` into the vector's spare capacity, with `RWF_NOWAIT` if
/// `nowait` (`preadv` otherwise; then `None` when some of it would wait for the disk, or the kernel cannot
/// read without waiting). `UnexpectedEof` if the file ends first.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn read_vec(
    file: &File,
    len: usize,
    pos: u64,
    nowait: bool,
) -> io::Result<Option<Vec<u8>>> {
    use std::os::fd::AsRawFd;
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    while buf.len() < len {
        let at = pos
            .checked_add(buf.len() as u64)
            .and_then(|at| libc::off64_t::try_from(at).ok())
            .ok_or_else(|| io::Error::other("read position out of range"))?;
        let filled = buf.len();
        let spare = &mut buf.spare_capacity_mut()[..len - filled];
        let iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: spare.len(),
        };
        // SAFETY: `iov` describes the vector's spare capacity, valid for writes of
        // `spare.len()` bytes and not otherwise borrowed during the call; the descriptor
        // is owned by `file`, which outlives the call; one iovec is passed, as the count
        // says. The kernel writes at most `iov_len` bytes there.
        let rc = unsafe {
            if nowait {
                libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT)
            } else {
                libc::preadv(file.as_raw_fd(), &iov, 1, at)
            }
        };
        match rc {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n if n > 0 => {
                let n = usize::try_from(n).map_err(io::Error::other)?;
                let n = n.min(len - filled);
                // SAFETY: the kernel initialised the `n` bytes after the vector's length
                // (it returns how many it wrote, never more than `iov_len`), and the new
                // length is within the capacity (`n <= len - filled`).
                unsafe { buf.set_len(filled + n) };
            }
            _ => {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
                        if nowait =>
                    {
                        return Ok(None);
                    }
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(Some(buf))
}

/// Elsewhere a zeroed buffer and a plain read; nothing reads without waiting.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read_vec(
    file: &File,
    len: usize,
    pos: u64,
    nowait: bool,
) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    if nowait {
        return Ok(None);
    }
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, pos)?;
    Ok(Some(buf))
}

/// Elsewhere every read may block: the caller takes the blocking path.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read_nowait(_file: &File, _buf: &mut [u8], _pos: u64) -> io::Result<Option<usize>> {
    Ok(None)
}

/// Elsewhere the buffers are written in turn.
#[cfg(not(target_os = "linux"))]
pub(crate) fn write_all_vectored(file: &File, bufs: &[&[u8]], pos: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut at = pos;
    for buf in bufs {
        file.write_all_at(buf, at)?;
        at += buf.len() as u64;
    }
    Ok(())
}

/// Elsewhere nothing is reserved.
#[cfg(not(target_os = "linux"))]
pub(crate) fn preallocate(_file: &File, _pos: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

/// Elsewhere a no-op: the periodic fsync does all the work.
#[cfg(not(target_os = "linux"))]
pub(crate) fn start_writeback(_file: &File, _pos: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

/// Elsewhere a no-op: the kernel's cache keeps what it likes.
#[cfg(not(target_os = "linux"))]
pub(crate) fn drop_cached(_file: &File, _pos: u64, _len: u64) -> io::Result<()> {
    Ok(())
}
