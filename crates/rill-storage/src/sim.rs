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
//!   there). A write that dies may have put a prefix of its bytes in the page cache.
//!   Counted operations are the ones that change something: writes, `set_len`, syncs,
//!   opens that may create, removes, renames and directory creation.
//!
//! Not modelled: media damage (bit rot, lost sectors), drives that lie about flushes,
//! hard links, permissions, timestamps, and write-back ordering guarantees stronger than
//! "none" (ext4's `data=ordered`).
//!
//! Everything is deterministic: the only randomness is the [`SimRng`] a caller passes
//! in or seeds. Memory is bounded by [`SimConfig::bytes_max`]: a write that would store
//! more fails with `ENOSPC` (a deleted file's bytes are freed once no directory entry,
//! durable or not, and no open handle reaches it).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::io::{Io, IoFile};

/// Operations kept in the trace ([`SimIo::trace_tail`]).
pub const TRACE_LEN_MAX: usize = 256;

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

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

type Ino = u64;
const ROOT: Ino = 0;

#[derive(Debug, Clone)]
enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug, Clone, Default)]
struct FileNode {
    /// What reads see (the page cache).
    data: Vec<u8>,
    /// What the last `sync_data` made durable.
    durable: Vec<u8>,
    /// Changes since the last sync, in order: the versions write-back may have stored.
    pending: Vec<DataOp>,
}

#[derive(Debug, Clone)]
enum DataOp {
    Write { pos: usize, bytes: Vec<u8> },
    SetLen(usize),
}

#[derive(Debug, Clone, Default)]
struct DirNode {
    entries: BTreeMap<OsString, Ino>,
    durable: BTreeMap<OsString, Ino>,
}

/// A directory change not yet durable.
#[derive(Debug, Clone)]
enum MetaOp {
    /// `name` in `dir` now names `ino` (a create).
    Link { dir: Ino, name: OsString, ino: Ino },
    /// `name` is removed from `dir`.
    Unlink { dir: Ino, name: OsString },
    /// `ino` moves from `from/from_name` to `to/to_name`, replacing what was there.
    Rename {
        from: Ino,
        from_name: OsString,
        to: Ino,
        to_name: OsString,
        ino: Ino,
    },
}

impl MetaOp {
    fn touches(&self, d: Ino) -> bool {
        match self {
            Self::Link { dir, .. } | Self::Unlink { dir, .. } => *dir == d,
            Self::Rename { from, to, .. } => *from == d || *to == d,
        }
    }

    fn dirs(&self) -> [Ino; 2] {
        match self {
            Self::Link { dir, .. } | Self::Unlink { dir, .. } => [*dir, *dir],
            Self::Rename { from, to, .. } => [*from, *to],
        }
    }

    /// Applies the change to the durable entries.
    fn make_durable(&self, nodes: &mut BTreeMap<Ino, Node>) {
        let mut edit = |dir: Ino, name: &OsString, ino: Option<Ino>| {
            if let Some(Node::Dir(d)) = nodes.get_mut(&dir) {
                match ino {
                    Some(ino) => d.durable.insert(name.clone(), ino),
                    None => d.durable.remove(name),
                };
            }
        };
        match self {
            Self::Link { dir, name, ino } => edit(*dir, name, Some(*ino)),
            Self::Unlink { dir, name } => edit(*dir, name, None),
            Self::Rename {
                from,
                from_name,
                to,
                to_name,
                ino,
            } => {
                edit(*from, from_name, None);
                edit(*to, to_name, Some(*ino));
            }
        }
    }
}

/// What the operation being started should do.
enum Step {
    Run,
    /// This is the operation the process dies in.
    Die,
}

#[derive(Debug, Clone)]
struct Disk {
    config: SimConfig,
    nodes: BTreeMap<Ino, Node>,
    next_ino: Ino,
    /// Directory changes not yet durable, in the order they were made.
    meta: Vec<MetaOp>,
    /// Counted operations so far.
    ops: u64,
    /// The counted operation that dies.
    crash_at: Option<u64>,
    crashed: bool,
    /// Decides how much of a dying write lands.
    rng: SimRng,
    trace: VecDeque<String>,
    bytes_used: u64,
    /// Open handles per file: an open file stays readable after it is removed.
    handles: BTreeMap<Ino, usize>,
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(EIO)
}

fn err(kind: io::ErrorKind, path: &Path) -> io::Error {
    io::Error::new(kind, path.display().to_string())
}

/// The components of `path` below the root (`.` and `..` resolved lexically).
fn components(path: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(name) => out.push(name.to_os_string()),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

impl FileNode {
    fn stored_bytes(&self) -> u64 {
        let pending: usize = self
            .pending
            .iter()
            .map(|op| match op {
                DataOp::Write { bytes, .. } => bytes.len(),
                DataOp::SetLen(_) => 0,
            })
            .sum();
        (self.data.len() + self.durable.len() + pending) as u64
    }

    /// Page `p` as it was after the first `k` pending changes: bytes beyond the
    /// length at that point are zero.
    fn page_version(&self, p: usize, k: usize, page: usize) -> Vec<u8> {
        let start = p * page;
        let end = start + page;
        let mut buf = vec![0u8; page];
        if start < self.durable.len() {
            let to = end.min(self.durable.len());
            buf[..to - start].copy_from_slice(&self.durable[start..to]);
        }
        for op in &self.pending[..k] {
            match op {
                DataOp::Write { pos, bytes } => {
                    let (from, to) = ((*pos).max(start), (pos + bytes.len()).min(end));
                    if from < to {
                        buf[from - start..to - start].copy_from_slice(&bytes[from - pos..to - pos]);
                    }
                }
                DataOp::SetLen(len) => {
                    if *len < end {
                        buf[(*len).max(start) - start..].fill(0);
                    }
                }
            }
        }
        buf
    }

    fn touches_page(&self, p: usize, page: usize) -> bool {
        let (start, end) = (p * page, (p + 1) * page);
        self.pending.iter().any(|op| match op {
            DataOp::Write { pos, bytes } => *pos < end && pos + bytes.len() > start,
            DataOp::SetLen(len) => *len < end,
        })
    }

    /// The file's bytes after a power loss that wrote back a random part of the
    /// pending changes (see the module docs).
    fn torn(&self, rng: &mut SimRng, look: &TornLook, config: &SimConfig) -> Vec<u8> {
        let n = self.pending.len();
        if n == 0 {
            return self.durable.clone();
        }
        let mut lens = Vec::with_capacity(n + 1);
        let mut len = self.durable.len();
        lens.push(len);
        for op in &self.pending {
            len = match op {
                DataOp::Write { pos, bytes } => len.max(pos + bytes.len()),
                DataOp::SetLen(l) => *l,
            };
            lens.push(len);
        }
        let version = |rng: &mut SimRng| -> usize {
            let roll = rng.below(100);
            if roll < look.latest_pct {
                n
            } else if roll < look.latest_pct + look.middle_pct {
                rng.between(1, n as u64) as usize
            } else {
                0
            }
        };
        let out_len = lens[version(rng)];
        let page = config.page_bytes;
        let mut out = vec![0u8; out_len];
        for p in 0..out_len.div_ceil(page) {
            let content = if self.touches_page(p, page) {
                let k = version(rng);
                let mut content = self.page_version(p, k, page);
                if k > 0 && rng.chance(look.torn_pct) {
                    // Power failed while this page was being written: each sector is the
                    // new version or what the disk held before it.
                    let older = self.page_version(p, rng.below(k as u64) as usize, page);
                    for (new, old) in content
                        .chunks_mut(config.sector_bytes)
                        .zip(older.chunks(config.sector_bytes))
                    {
                        if rng.chance(50) {
                            new.copy_from_slice(old);
                        }
                    }
                }
                content
            } else {
                self.page_version(p, 0, page)
            };
            let start = p * page;
            let end = (start + page).min(out_len);
            out[start..end].copy_from_slice(&content[..end - start]);
        }
        out
    }
}

/// How much of the pending data one torn power loss keeps: drawn once per power loss,
/// so images range from "almost nothing written back" to "almost everything".
#[derive(Debug, Clone, Copy)]
struct TornLook {
    latest_pct: u64,
    middle_pct: u64,
    torn_pct: u64,
}

impl Disk {
    fn new(config: SimConfig, seed: u64) -> Self {
        assert!(
            config.sector_bytes > 0
                && config.page_bytes >= config.sector_bytes
                && config.page_bytes.is_multiple_of(config.sector_bytes),
            "sectors must divide pages: {config:?}"
        );
        let mut nodes = BTreeMap::new();
        nodes.insert(ROOT, Node::Dir(DirNode::default()));
        Self {
            config,
            nodes,
            next_ino: ROOT + 1,
            meta: Vec::new(),
            ops: 0,
            crash_at: None,
            crashed: false,
            rng: SimRng::new(seed),
            trace: VecDeque::new(),
            bytes_used: 0,
            handles: BTreeMap::new(),
        }
    }

    fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_LEN_MAX {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    /// Starts a counted operation: fails if the process is dead, dies if this is the
    /// chosen operation.
    fn begin(&mut self, what: impl FnOnce() -> String) -> io::Result<Step> {
        if self.crashed {
            return Err(eio());
        }
        self.ops += 1;
        let line = format!("#{} {}", self.ops, what());
        if self.crash_at == Some(self.ops) {
            self.crashed = true;
            self.note(format!(
                "{line}  <- CRASH: this and every later operation fail"
            ));
            return Ok(Step::Die);
        }
        self.note(line);
        Ok(Step::Run)
    }

    fn alive(&self) -> io::Result<()> {
        if self.crashed { Err(eio()) } else { Ok(()) }
    }

    fn dir(&self, ino: Ino) -> &DirNode {
        match self.nodes.get(&ino) {
            Some(Node::Dir(d)) => d,
            _ => panic!("inode {ino} is not a directory"),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> &mut DirNode {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(d)) => d,
            _ => panic!("inode {ino} is not a directory"),
        }
    }

    fn file_mut(&mut self, ino: Ino) -> io::Result<&mut FileNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(f)) => Ok(f),
            _ => Err(io::Error::other(format!("inode {ino} is gone"))),
        }
    }

    fn is_dir_ino(&self, ino: Ino) -> bool {
        matches!(self.nodes.get(&ino), Some(Node::Dir(_)))
    }

    /// The inode at `path` in the current (`durable == false`) or durable namespace.
    fn lookup_in(&self, path: &Path, durable: bool) -> Option<Ino> {
        let mut at = ROOT;
        for name in components(path) {
            let Some(Node::Dir(d)) = self.nodes.get(&at) else {
                return None;
            };
            let entries = if durable { &d.durable } else { &d.entries };
            at = *entries.get(&name)?;
        }
        Some(at)
    }

    fn lookup(&self, path: &Path) -> io::Result<Ino> {
        self.lookup_in(path, false)
            .ok_or_else(|| err(io::ErrorKind::NotFound, path))
    }

    /// The directory that holds `path`, and the entry's name.
    fn parent(&self, path: &Path) -> io::Result<(Ino, OsString)> {
        let mut names = components(path);
        let name = names
            .pop()
            .ok_or_else(|| err(io::ErrorKind::InvalidInput, path))?;
        let mut at = ROOT;
        for n in names {
            at = match self.nodes.get(&at) {
                Some(Node::Dir(d)) => *d
                    .entries
                    .get(&n)
                    .ok_or_else(|| err(io::ErrorKind::NotFound, path))?,
                _ => return Err(err(io::ErrorKind::NotADirectory, path)),
            };
        }
        if !self.is_dir_ino(at) {
            return Err(err(io::ErrorKind::NotADirectory, path));
        }
        Ok((at, name))
    }

    fn new_node(&mut self, node: Node) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        ino
    }

    fn link(&mut self, dir: Ino, name: OsString, ino: Ino) {
        self.dir_mut(dir).entries.insert(name.clone(), ino);
        self.meta.push(MetaOp::Link { dir, name, ino });
    }

    fn unlink(&mut self, dir: Ino, name: OsString) {
        self.dir_mut(dir).entries.remove(&name);
        self.meta.push(MetaOp::Unlink { dir, name });
    }

    /// Removes everything below directory `ino`, deepest first, as `rm -r` does.
    fn unlink_tree(&mut self, ino: Ino) {
        let entries: Vec<(OsString, Ino)> = self
            .dir(ino)
            .entries
            .iter()
            .map(|(n, i)| (n.clone(), *i))
            .collect();
        for (name, child) in entries {
            if self.is_dir_ino(child) {
                self.unlink_tree(child);
            }
            self.unlink(ino, name);
        }
    }

    /// Makes every pending change of directory `dir` durable (and, for a rename, the
    /// other directory's half of it too).
    fn commit_dir(&mut self, dir: Ino) {
        let (now, later): (Vec<MetaOp>, Vec<MetaOp>) = std::mem::take(&mut self.meta)
            .into_iter()
            .partition(|op| op.touches(dir));
        for op in &now {
            op.make_durable(&mut self.nodes);
        }
        self.meta = later;
    }

    /// Applies a change to the file `ino`, keeping the byte count and the bound.
    fn change_file(
        &mut self,
        ino: Ino,
        change: impl FnOnce(&mut FileNode),
        grows_by: u64,
    ) -> io::Result<()> {
        if self.bytes_used + grows_by > self.config.bytes_max {
            return Err(io::Error::from_raw_os_error(ENOSPC));
        }
        let file = self.file_mut(ino)?;
        let before = file.stored_bytes();
        change(file);
        let after = file.stored_bytes();
        self.bytes_used = self.bytes_used + after - before;
        Ok(())
    }

    fn write(&mut self, ino: Ino, buf: &[u8], pos: u64) -> io::Result<()> {
        let pos = usize::try_from(pos).map_err(|_| io::Error::from_raw_os_error(ENOSPC))?;
        let end = pos + buf.len();
        let grows = (end.saturating_sub(self.file_mut(ino)?.data.len()) + buf.len()) as u64;
        self.change_file(
            ino,
            |f| {
                if f.data.len() < end {
                    f.data.resize(end, 0);
                }
                f.data[pos..end].copy_from_slice(buf);
                f.pending.push(DataOp::Write {
                    pos,
                    bytes: buf.to_vec(),
                });
            },
            grows,
        )
    }

    /// Frees what no directory entry (current, durable or pending) and no open handle
    /// reaches, and forgets pending changes of directories that are gone for good.
    fn collect(&mut self) {
        let mut links: BTreeMap<Ino, Vec<Ino>> = BTreeMap::new();
        for op in &self.meta {
            match op {
                MetaOp::Link { dir, ino, .. } => links.entry(*dir).or_default().push(*ino),
                MetaOp::Rename { to, ino, .. } => links.entry(*to).or_default().push(*ino),
                MetaOp::Unlink { .. } => {}
            }
        }
        let mut live: BTreeSet<Ino> = BTreeSet::new();
        let mut todo: Vec<Ino> = vec![ROOT];
        todo.extend(self.handles.keys());
        while let Some(ino) = todo.pop() {
            if !live.insert(ino) {
                continue;
            }
            if let Some(Node::Dir(d)) = self.nodes.get(&ino) {
                todo.extend(d.entries.values().chain(d.durable.values()));
            }
            if let Some(more) = links.get(&ino) {
                todo.extend(more);
            }
        }
        self.nodes.retain(|ino, _| live.contains(ino));
        self.meta
            .retain(|op| op.dirs().iter().any(|d| live.contains(d)));
        self.bytes_used = self
            .nodes
            .values()
            .map(|n| match n {
                Node::File(f) => f.stored_bytes(),
                Node::Dir(_) => 0,
            })
            .sum();
    }

    /// The disk as the next boot finds it after a power loss: the durable state, and
    /// with `torn` a random part of what was pending.
    fn after_power_loss(&self, torn: Option<&mut SimRng>) -> Self {
        let mut disk = Self::new(self.config, self.rng.clone().next_u64());
        disk.nodes = self.nodes.clone();
        disk.next_ino = self.next_ino;
        for node in disk.nodes.values_mut() {
            if let Node::Dir(d) = node {
                d.entries = d.durable.clone();
            }
        }
        let mut mode = "power loss (durable state only)".to_owned();
        if let Some(rng) = torn {
            // The journal is written in order: a prefix of the pending directory changes.
            let kept = match rng.below(3) {
                0 => 0,
                1 => self.meta.len(),
                _ => rng.below(self.meta.len() as u64 + 1) as usize,
            };
            for op in &self.meta[..kept] {
                op.make_durable(&mut disk.nodes);
            }
            let look = TornLook {
                latest_pct: *rng.pick(&[0, 30, 60, 90]),
                middle_pct: *rng.pick(&[0, 10, 30]),
                torn_pct: *rng.pick(&[0, 10, 40]),
            };
            for (ino, node) in &self.nodes {
                if let (Node::File(f), Some(Node::File(out))) = (node, disk.nodes.get_mut(ino)) {
                    out.durable = f.torn(rng, &look, &self.config);
                }
            }
            for node in disk.nodes.values_mut() {
                if let Node::Dir(d) = node {
                    d.entries = d.durable.clone();
                }
            }
            mode = format!(
                "torn power loss: kept {kept} of {} directory changes, pages {look:?}",
                self.meta.len()
            );
        }
        for node in disk.nodes.values_mut() {
            if let Node::File(f) = node {
                f.pending.clear();
                f.data = f.durable.clone();
            }
        }
        disk.note(format!("--- restart after {mode} ---"));
        disk.collect();
        disk
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
                // Killed inside the system call: some prefix may have been copied.
                let landed = disk.rng.below(buf.len() as u64 + 1) as usize;
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
#[path = "sim_tests.rs"]
mod tests;
