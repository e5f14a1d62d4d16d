//! The one system call std does not wrap: `sync_file_range(2)`.
//!
//! This is the crate's only `unsafe` code. It exists because syncing an `interval` log
//! once a second made every fsync write back a second's worth of pages at once, and
//! appends to the same file stalled behind it (ext4 takes the inode's block-mapping
//! lock and the tail page's lock during writeback): measured with `rill bench e2e
//! --rate 20000 --durability interval:1000`, p99 went from under 1 ms with `never` to
//! 8-16 ms. Starting writeback of each few MiB as it is written (what RocksDB calls
//! `bytes_per_sync`) leaves the periodic fsync little to do.

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

/// Elsewhere a no-op: the periodic fsync does all the work.
#[cfg(not(target_os = "linux"))]
pub(crate) fn start_writeback(_file: &File, _pos: u64, _len: u64) -> io::Result<()> {
    Ok(())
}
