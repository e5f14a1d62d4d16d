//! Small durable files of the Raft stores, through rill-storage's `Io` seam: atomic
//! replacement, JSON files, and the framed append-only logs (`meta.log`, a partition's
//! `raft/entries`).
//!
//! A frame is `len u32 LE`, `crc32c u32 LE` over the length and the body, then the
//! body. Appends are fsynced one after the other, so a crash tears at most the frames
//! of the last append: a frame that is not whole or whose CRC fails, with no valid frame
//! where its length says the next one starts, is that torn tail and ends the log. A bad
//! frame followed by a valid one is damage in durable data, and an error. (Damage to
//! the length field of a frame before the end reads as a torn tail: media damage is
//! outside the crash model, docs/REPLICATION.md §7.1.)

use std::io;
use std::path::Path;

use rill_storage::Io;
use serde::{Deserialize, Serialize};

/// A frame's body may not be larger than this (a corrupt length is not allocated).
pub(crate) const FRAME_MAX: u32 = 64 << 20;

pub(crate) fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Writes `bytes` to `path` so that after a crash the file is either the old one or
/// the new one, whole. The file is its owner's alone (mode 0600): the metadata's
/// snapshots hold the credentials' verifiers (docs/SECURITY.md §2.3).
pub(crate) fn replace_file(io: &dyn Io, path: &Path, bytes: &[u8]) -> io::Result<()> {
    // The file's own temporary name (`meta.vote.tmp`, not `meta.tmp`): files of one
    // directory are replaced under different locks (the metadata log store's vote and
    // the state machine's snapshot), and a shared name would let one writer rename the
    // other's bytes into place, or away.
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let f = io.open(&tmp, true)?;
    io.restrict_to_owner(&tmp)?;
    f.set_len(0)?;
    f.write_all_at(bytes, 0)?;
    f.sync_data()?;
    drop(f);
    io.rename(&tmp, path)?;
    io.sync_dir(parent(path))
}

pub(crate) fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// The whole file at `path`, or `None` if there is none.
pub(crate) fn read_file(io: &dyn Io, path: &Path) -> io::Result<Option<Vec<u8>>> {
    if !io.exists(path) {
        return Ok(None);
    }
    let f = io.open(path, false)?;
    let len = usize::try_from(f.size()?).map_err(|_| invalid("a file too large"))?;
    let mut bytes = vec![0u8; len];
    f.read_exact_at(&mut bytes, 0)?;
    Ok(Some(bytes))
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(
    io: &dyn Io,
    path: &Path,
) -> io::Result<Option<T>> {
    match read_file(io, path)? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| invalid(format!("{}: {e}", path.display()))),
        None => Ok(None),
    }
}

pub(crate) fn write_json<T: Serialize>(io: &dyn Io, path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(invalid)?;
    replace_file(io, path, &bytes)
}

/// Creates `dir` if it is missing, durably (its entry in its parent synced).
pub(crate) fn ensure_dir(io: &dyn Io, dir: &Path) -> io::Result<()> {
    if io.is_dir(dir) {
        return Ok(());
    }
    io.create_dir_all(dir)?;
    io.sync_dir(parent(dir))
}

/// Appends `body` as one frame to `out`.
pub(crate) fn push_frame(out: &mut Vec<u8>, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l > 0 && l <= FRAME_MAX)
        .ok_or_else(|| invalid("a log frame of 0 bytes or more than 64 MiB"))?;
    out.reserve(8 + body.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&frame_crc(len, body).to_le_bytes());
    out.extend_from_slice(body);
    Ok(())
}

/// The CRC of a frame: over its length and its body, so that zeros (an extension of the
/// file whose pages a power loss did not write) are never a valid frame.
fn frame_crc(len: u32, body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), body)
}

/// The frame at the start of `rest`, if one is whole and its CRC holds: its body and
/// its length.
fn valid_frame(rest: &[u8]) -> Option<(&[u8], usize)> {
    let head = rest.get(..8)?;
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    if len == 0 || len > FRAME_MAX {
        return None;
    }
    let body = rest.get(8..8 + len as usize)?;
    (frame_crc(len, body) == crc).then_some((body, 8 + len as usize))
}

/// Frames of a log file: each its byte position and body.
pub(crate) type Frames<'a> = Vec<(usize, &'a [u8])>;

/// The frames of a log file — each its byte position and body — and the length of the
/// whole frames (the rest is a torn tail, see the module's documentation). `name`
/// names the file in errors.
pub(crate) fn decode_frames<'a>(bytes: &'a [u8], name: &str) -> io::Result<(Frames<'a>, usize)> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let Some((body, len)) = valid_frame(rest) else {
            let declared = rest
                .get(..4)
                .map(|l| 8 + u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize);
            let followed = declared
                .filter(|&d| d < rest.len())
                .is_some_and(|d| valid_frame(&rest[d..]).is_some());
            if followed {
                return Err(invalid(format!(
                    "{name}: a damaged entry at byte {at}, before the end"
                )));
            }
            // The last frame, torn by a crash before its fsync.
            break;
        };
        frames.push((at, body));
        at += len;
    }
    Ok((frames, at))
}
