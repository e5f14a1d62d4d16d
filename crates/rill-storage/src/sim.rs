//! A simulated disk for power-loss tests: [`SimIo`], an in-memory file system behind the
//! [`Io`] seam that keeps what was *written* apart from what is *durable*, dies at a
//! chosen operation, and shows what a restart would find — after a killed process, or
//! after a power loss that kept any subset of the unsynced writes. (The idea is redb's
//! crash-test backend and TigerBeetle's storage simulator.)
//!
//! This is a test seam, like [`crate::fault`]: no production code uses it. It can hold a
//! whole data directory (nested directories, renames, `remove_dir_all`), so the layers
//! above the log can be tested on it too once they go through [`Io`].
//!
//! # The model, and what it assumes
//!
//! It follows what ext4 and xfs on Linux promise, taking the weaker side wherever the
//! two (or POSIX and practice) differ, so code that passes here relies on nothing a
//! real disk may take away:
//!
//! * **File data.** Each file has its current bytes (what reads see: the page cache)
//!   and its durable bytes. `sync_data` (`fdatasync`) makes the current bytes *and
//!   length* durable — the length is the metadata needed to read the data back, which
//!   `fdatasync` flushes. Writes and `set_len` are not durable until then.
//! * **Directory entries.** Creating, removing or renaming an entry changes the current
//!   directory only; the change becomes durable when the directory holding the entry is
//!   synced with `sync_dir`. `sync_data` of a file does *not* make its own entry durable
//!   (ext4 and xfs usually do, as a side effect of committing their journal; POSIX does
//!   not promise it). `create_dir_all` creates an entry in each new directory's parent,
//!   so a new directory survives a power loss only once its parent is synced. A rename
//!   is one journal transaction: syncing either directory involved makes all of it
//!   durable, so a power loss never shows the entry under both names or neither.
//! * **Order.** Metadata changes reach the disk in the order they were made (both file
//!   systems journal them in order), so a torn power loss keeps a *prefix* of the
//!   pending ones. Data write-back has no order: every page (default 4 KiB) that
//!   changed since the file's last sync independently ends up as any version it had
//!   since that sync, or — if power failed while it was being written — as a mix of
//!   two versions by sector (default 512 bytes, the unit a drive writes atomically).
//!   A file's length after a power loss is one of the lengths it had since its last
//!   sync; an extension whose pages were not written back reads as zeros (what xfs
//!   shows after a crash).
//! * **A killed process** loses nothing it wrote: the page cache outlives it
//!   ([`SimIo::process_crash`]). Its unsynced writes can still be lost by a later power
//!   loss.
//! * **Dying.** [`SimIo::crash_after`] lets a number of operations succeed; the next
//!   one fails with `EIO`, and so does every operation after it (the process died
//!   there). A write that dies may have put a prefix of its bytes in the page cache,
//!   whole pages at a time: nothing, all of it, or up to a page boundary (the kernel
//!   copies page by page and a killed process stops only between pages).
//!   Counted operations are the ones that change something: writes, `set_len`, syncs,
//!   opens that may create, removes, renames and directory creation.
//!
//! Not modelled: media damage (bit rot, lost sectors), drives that lie about flushes,
//! hard links, permissions, timestamps, and write-back ordering guarantees stronger than
//! "none" (ext4's `data=ordered`).
//!
//! Everything is deterministic: the only randomness is the [`SimRng`] a caller passes
//! in or seeds, so the same operations give the same disk and the same images (threads
//! that race make the order of operations, not the model, vary). Memory is bounded by
//! [`SimConfig::bytes_max`]: a write that would store more fails with `ENOSPC` (a
//! deleted file's bytes are freed once no directory entry, durable or not, and no open
//! handle reaches it). [`SimIo::trace_tail`] keeps the last operations, the crash
//! marked, for a failing test to print.
//!
//! The model itself — nodes, pending changes and the images — is `sim/disk.rs`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use self::disk::{
    DataOp, DirNode, Disk, ENOSPC, FileNode, Ino, MetaOp, Node, ROOT, Step, components, eio, err,
};
use crate::io::{Io, IoFile};

mod disk;

/// Operations kept in the trace ([`SimIo::trace_tail`]).
pub const TRACE_LEN_MAX: usize = 256;

/// The geometry and bound of a simulated disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// The unit of write-back: each changed page of a file survives a power loss, or
    /// not, on its own.
    pub page_bytes: usize,
    /// The unit a drive writes atomically: a page torn by a power loss is a mix of two
    /// of its versions in units of this. Divides `page_bytes`.
    pub sector_bytes: usize,
    /// Most bytes the disk stores (current, durable and pending versions together).
    pub bytes_max: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            page_bytes: 4096,
            sector_bytes: 512,
            bytes_max: 64 << 20,
        }
    }
}

/// A small deterministic random generator (SplitMix64), so simulations replay from a
/// seed without a dependency.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "between({lo}, {hi})");
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (not empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// An in-memory file system for crash tests; see the module docs for the model.
///
/// Clones share one disk (as the handles of one machine do). A restart is a new
/// `SimIo`: [`SimIo::process_crash`], [`SimIo::power_loss`] or
/// [`SimIo::power_loss_durable`].
#[derive(Clone)]
pub struct SimIo {
    disk: Arc<Mutex<Disk>>,
}

impl fmt::Debug for SimIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let disk = self.disk.lock();
        f.debug_struct("SimIo")
            .field("ops", &disk.ops)
            .field("crashed", &disk.crashed)
            .field("bytes_used", &disk.bytes_used)
            .finish_non_exhaustive()
    }
}

impl Default for SimIo {
    fn default() -> Self {
        Self::new(0)
    }
}

impl SimIo {
    /// An empty disk with the default geometry; `seed` decides how much of a dying
    /// write lands.
    pub fn new(seed: u64) -> Self {
        Self::with_config(SimConfig::default(), seed)
    }

    /// An empty disk with the given geometry and bound.
    pub fn with_config(config: SimConfig, seed: u64) -> Self {
        Self::from_disk(Disk::new(config, seed))
    }

    fn from_disk(disk: Disk) -> Self {
        Self {
            disk: Arc::new(Mutex::new(disk)),
        }
    }

    /// The next `ops` counted operations succeed; the one after them dies, and every
    /// operation after that fails with `EIO`. Replaces an earlier trigger.
    pub fn crash_after(&self, ops: u64) {
        let mut disk = self.disk.lock();
        disk.crash_at = Some(disk.ops + ops + 1);
    }

    /// Dies now: every operation from here on fails.
    pub fn crash_now(&self) {
        let mut disk = self.disk.lock();
        if !disk.crashed {
            disk.crashed = true;
            let line = format!("#{} CRASH (between operations)", disk.ops);
            disk.note(line);
        }
    }

    /// Whether the process died.
    pub fn crashed(&self) -> bool {
        self.disk.lock().crashed
    }

    /// Counted operations so far.
    pub fn ops(&self) -> u64 {
        self.disk.lock().ops
    }

    /// Bytes the disk stores now.
    pub fn bytes_used(&self) -> u64 {
        self.disk.lock().bytes_used
    }

    /// The last [`TRACE_LEN_MAX`] operations, oldest first.
    pub fn trace_tail(&self) -> Vec<String> {
        self.disk.lock().trace.iter().cloned().collect()
    }

    /// Adds a line to the trace (a test's own marker).
    pub fn note(&self, line: impl Into<String>) {
        self.disk.lock().note(line.into());
    }

    /// The disk as a restarted process finds it after this one was killed: everything
    /// written survives (the page cache outlives the process), and what was not synced
    /// can still be lost by a later power loss.
    pub fn process_crash(&self) -> SimIo {
        let mut disk = self.disk.lock().clone();
        disk.crash_at = None;
        disk.crashed = false;
        disk.handles.clear();
        disk.note("--- restart after a process crash ---".to_owned());
        disk.collect();
        Self::from_disk(disk)
    }

    /// The disk after a power loss that wrote back a random part of what was not
    /// synced: the durable state, a prefix of the pending directory changes, and for
    /// every changed page some version it had (whole or torn by sector), every file at
    /// one of the lengths it had since its last sync.
    pub fn power_loss(&self, rng: &mut SimRng) -> SimIo {
        Self::from_disk(self.disk.lock().after_power_loss(Some(rng)))
    }

    /// The disk after a power loss that wrote back nothing unsynced: exactly the
    /// durable state.
    pub fn power_loss_durable(&self) -> SimIo {
        Self::from_disk(self.disk.lock().after_power_loss(None))
    }

    /// The durable entries of directory `dir` (reached through durable entries from
    /// the root), sorted; `None` if the directory is not durable.
    pub fn durable_entries(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        let disk = self.disk.lock();
        let ino = disk.lookup_in(dir, true)?;
        match disk.nodes.get(&ino) {
            Some(Node::Dir(d)) => Some(d.durable.keys().map(|n| dir.join(n)).collect()),
            _ => None,
        }
    }

    /// The durable bytes of the file at `path` (reached through durable entries);
    /// `None` if there is no such durable file.
    pub fn durable_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk.lock();
        match disk.nodes.get(&disk.lookup_in(path, true)?) {
            Some(Node::File(f)) => Some(f.durable.clone()),
            _ => None,
        }
    }

    /// The current bytes of the file at `path`; `None` if there is none.
    pub fn current_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk.lock();
        match disk.nodes.get(&disk.lookup_in(path, false)?) {
            Some(Node::File(f)) => Some(f.data.clone()),
            _ => None,
        }
    }
}

impl Io for SimIo {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock();
        if let Step::Die = disk.begin(|| format!("create_dir_all {}", path.display()))? {
            return Err(eio());
        }
        let mut at = ROOT;
        for name in components(path) {
            let found = disk.dir(at).entries.get(&name).copied();
            at = match found {
                Some(ino) if disk.is_dir_ino(ino) => ino,
                Some(_) => return Err(err(io::ErrorKind::NotADirectory, path)),
                None => {
                    let ino = disk.new_node(Node::Dir(DirNode::default()));
                    disk.link(at, name, ino);
                    ino
                }
            };
        }
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let disk = self.disk.lock();
        disk.alive()?;
        let ino = disk.lookup(path)?;
        match disk.nodes.get(&ino) {
            Some(Node::Dir(d)) => Ok(d.entries.keys().map(|n| path.join(n)).collect()),
            _ => Err(err(io::ErrorKind::NotADirectory, path)),
        }
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn IoFile>> {
        let mut disk = self.disk.lock();
        if create {
            if let Step::Die = disk.begin(|| format!("open+create {}", path.display()))? {
                return Err(eio());
            }
        } else {
            disk.alive()?;
        }
        let ino = match disk.lookup_in(path, false) {
            Some(ino) if disk.is_dir_ino(ino) => {
                return Err(err(io::ErrorKind::IsADirectory, path));
            }
            Some(ino) => ino,
            None if create => {
                let (dir, name) = disk.parent(path)?;
                let ino = disk.new_node(Node::File(FileNode::default()));
                disk.link(dir, name, ino);
                ino
            }
            None => return Err(err(io::ErrorKind::NotFound, path)),
        };
        *disk.handles.entry(ino).or_default() += 1;
        Ok(Arc::new(SimFile {
            disk: Arc::clone(&self.disk),
            ino,
            path: Arc::from(path),
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock();
        if let Step::Die = disk.begin(|| format!("remove_file {}", path.display()))? {
            return Err(eio());
        }
        let (dir, name) = disk.parent(path)?;
        match disk.dir(dir).entries.get(&name).copied() {
            None => return Err(err(io::ErrorKind::NotFound, path)),
            Some(ino) if disk.is_dir_ino(ino) => {
                return Err(err(io::ErrorKind::IsADirectory, path));
            }
            Some(_) => disk.unlink(dir, name),
        }
        disk.collect();
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock();
        if let Step::Die = disk.begin(|| format!("sync_dir {}", path.display()))? {
            return Err(eio());
        }
        let ino = disk.lookup(path)?;
        if !disk.is_dir_ino(ino) {
            return Err(err(io::ErrorKind::NotADirectory, path));
        }
        disk.commit_dir(ino);
        disk.collect();
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock();
        if let Step::Die =
            disk.begin(|| format!("rename {} -> {}", from.display(), to.display()))?
        {
            return Err(eio());
        }
        let (from_dir, from_name) = disk.parent(from)?;
        let ino = *disk
            .dir(from_dir)
            .entries
            .get(&from_name)
            .ok_or_else(|| err(io::ErrorKind::NotFound, from))?;
        let (to_dir, to_name) = disk.parent(to)?;
        if from_dir == to_dir && from_name == to_name {
            return Ok(());
        }
        let moving_dir = disk.is_dir_ino(ino);
        if let Some(&target) = disk.dir(to_dir).entries.get(&to_name) {
            match (moving_dir, disk.nodes.get(&target)) {
                (false, Some(Node::Dir(_))) => return Err(err(io::ErrorKind::IsADirectory, to)),
                (true, Some(Node::File(_))) => return Err(err(io::ErrorKind::NotADirectory, to)),
                (true, Some(Node::Dir(d))) if !d.entries.is_empty() => {
                    return Err(err(io::ErrorKind::DirectoryNotEmpty, to));
                }
                _ => {}
            }
        }
        if moving_dir {
            // A directory cannot move into itself.
            let mut at = ROOT;
            for name in components(to) {
                if at == ino {
                    return Err(err(io::ErrorKind::InvalidInput, to));
                }
                match disk.dir(at).entries.get(&name) {
                    Some(&next) if disk.is_dir_ino(next) => at = next,
                    _ => break,
                }
            }
        }
        disk.dir_mut(from_dir).entries.remove(&from_name);
        disk.dir_mut(to_dir).entries.insert(to_name.clone(), ino);
        disk.meta.push(MetaOp::Rename {
            from: from_dir,
            from_name,
            to: to_dir,
            to_name,
            ino,
        });
        disk.collect();
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock();
        if let Step::Die = disk.begin(|| format!("remove_dir_all {}", path.display()))? {
            return Err(eio());
        }
        let (dir, name) = disk.parent(path)?;
        match disk.dir(dir).entries.get(&name).copied() {
            None => return Err(err(io::ErrorKind::NotFound, path)),
            Some(ino) if !disk.is_dir_ino(ino) => {
                return Err(err(io::ErrorKind::NotADirectory, path));
            }
            Some(ino) => {
                disk.unlink_tree(ino);
                disk.unlink(dir, name);
            }
        }
        disk.collect();
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        self.disk.lock().lookup_in(path, false).is_some()
    }

    fn is_dir(&self, path: &Path) -> bool {
        let disk = self.disk.lock();
        disk.lookup_in(path, false)
            .is_some_and(|ino| disk.is_dir_ino(ino))
    }
}

/// An open file of a [`SimIo`]. It keeps reaching its file after the file is removed
/// or renamed, as a descriptor does.
struct SimFile {
    disk: Arc<Mutex<Disk>>,
    ino: Ino,
    path: Arc<Path>,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut disk = self.disk.lock();
        if let Some(n) = disk.handles.get_mut(&self.ino) {
            *n -= 1;
            if *n == 0 {
                disk.handles.remove(&self.ino);
            }
        }
    }
}

impl IoFile for SimFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let mut disk = self.disk.lock();
        disk.alive()?;
        let data = &disk.file_mut(self.ino)?.data;
        let Ok(pos) = usize::try_from(pos) else {
            return Ok(0);
        };
        if pos >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - pos);
        buf[..n].copy_from_slice(&data[pos..pos + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        let mut disk = self.disk.lock();
        let path = &self.path;
        let step = disk.begin(|| format!("write {} @{pos} +{}", path.display(), buf.len()))?;
        match step {
            Step::Run => disk.write(self.ino, buf, pos),
            Step::Die => {
                // Killed inside the system call: the kernel copies a write into the page
                // cache a page at a time and stops only between pages, so what landed is
                // nothing, all of it, or a prefix ending on a page boundary.
                let page = disk.config.page_bytes as u64;
                let end = pos + buf.len() as u64;
                let mut cuts: Vec<u64> = vec![0, buf.len() as u64];
                cuts.extend(
                    (pos / page + 1..)
                        .map(|p| p * page)
                        .take_while(|&b| b < end)
                        .map(|b| b - pos),
                );
                let landed = *disk.rng.pick(&cuts) as usize;
                if landed > 0 {
                    disk.write(self.ino, &buf[..landed], pos)?;
                    disk.note(format!("   ({landed} of {} bytes landed)", buf.len()));
                }
                Err(eio())
            }
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut disk = self.disk.lock();
        let path = &self.path;
        if let Step::Die = disk.begin(|| format!("sync_data {}", path.display()))? {
            return Err(eio());
        }
        disk.change_file(
            self.ino,
            |f| {
                f.durable.clone_from(&f.data);
                f.pending.clear();
            },
            0,
        )
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut disk = self.disk.lock();
        let path = &self.path;
        if let Step::Die = disk.begin(|| format!("set_len {} {len}", path.display()))? {
            return Err(eio());
        }
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(ENOSPC))?;
        let grows = len.saturating_sub(disk.file_mut(self.ino)?.data.len()) as u64;
        disk.change_file(
            self.ino,
            |f| {
                f.data.resize(len, 0);
                f.pending.push(DataOp::SetLen(len));
            },
            grows,
        )
    }

    fn size(&self) -> io::Result<u64> {
        let mut disk = self.disk.lock();
        disk.alive()?;
        Ok(disk.file_mut(self.ino)?.data.len() as u64)
    }

    fn start_writeback(&self, _pos: u64, _len: u64) -> io::Result<()> {
        // A hint that promises nothing: write-back may happen at any time anyway, which
        // is what a torn power loss models.
        self.disk.lock().alive()
    }
}

#[cfg(test)]
mod tests;
