//! Helpers shared by the fuzz targets.
#![allow(dead_code)]

use std::path::Path;

/// A fresh scratch directory, in memory (`/dev/shm`) where the machine has it, so an
/// input costs no disk I/O and an fsync is nearly free.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix("rill-fuzz-");
        b
    };
    if shm.is_dir()
        && let Ok(dir) = builder.tempdir_in(shm)
    {
        return dir;
    }
    builder.tempdir().expect("a temporary directory")
}

/// Applies at most `limit` byte edits: XOR `flip` at `at` (modulo the length).
pub fn flip_bytes(bytes: &mut [u8], flips: &[(u16, u8)], limit: usize) {
    if bytes.is_empty() {
        return;
    }
    for &(at, flip) in flips.iter().take(limit) {
        let i = usize::from(at) % bytes.len();
        bytes[i] ^= flip;
    }
}
