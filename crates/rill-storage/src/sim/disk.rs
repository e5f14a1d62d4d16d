//! The disk model behind [`SimIo`](super::SimIo): files with their current, durable
//! and pending versions, directories with their current and durable entries, the
//! directory changes not yet durable, and what a power loss makes of them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path};

use super::{SimConfig, SimRng, TRACE_LEN_MAX};

pub(super) const EIO: i32 = 5;
pub(super) const ENOSPC: i32 = 28;

pub(super) type Ino = u64;
pub(super) const ROOT: Ino = 0;

#[derive(Debug, Clone)]
pub(super) enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug, Clone, Default)]
pub(super) struct FileNode {
    /// What reads see (the page cache).
    pub(super) data: Vec<u8>,
    /// What the last `sync_data` made durable.
    pub(super) durable: Vec<u8>,
    /// Changes since the last sync, in order: the versions write-back may have stored.
    pub(super) pending: Vec<DataOp>,
}

#[derive(Debug, Clone)]
pub(super) enum DataOp {
    Write { pos: usize, bytes: Vec<u8> },
    SetLen(usize),
}

#[derive(Debug, Clone, Default)]
pub(super) struct DirNode {
    pub(super) entries: BTreeMap<OsString, Ino>,
    pub(super) durable: BTreeMap<OsString, Ino>,
}

/// A directory change not yet durable.
#[derive(Debug, Clone)]
pub(super) enum MetaOp {
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
    pub(super) fn touches(&self, d: Ino) -> bool {
        match self {
            Self::Link { dir, .. } | Self::Unlink { dir, .. } => *dir == d,
            Self::Rename { from, to, .. } => *from == d || *to == d,
        }
    }

    pub(super) fn dirs(&self) -> [Ino; 2] {
        match self {
            Self::Link { dir, .. } | Self::Unlink { dir, .. } => [*dir, *dir],
            Self::Rename { from, to, .. } => [*from, *to],
        }
    }

    /// Applies the change to the durable entries.
    pub(super) fn make_durable(&self, nodes: &mut BTreeMap<Ino, Node>) {
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
pub(super) enum Step {
    Run,
    /// This is the operation the process dies in.
    Die,
}

#[derive(Debug, Clone)]
pub(super) struct Disk {
    pub(super) config: SimConfig,
    pub(super) nodes: BTreeMap<Ino, Node>,
    pub(super) next_ino: Ino,
    /// Directory changes not yet durable, in the order they were made.
    pub(super) meta: Vec<MetaOp>,
    /// Counted operations so far.
    pub(super) ops: u64,
    /// The counted operation that dies.
    pub(super) crash_at: Option<u64>,
    pub(super) crashed: bool,
    /// Decides how much of a dying write lands.
    pub(super) rng: SimRng,
    pub(super) trace: VecDeque<String>,
    pub(super) bytes_used: u64,
    /// Open handles per file: an open file stays readable after it is removed.
    pub(super) handles: BTreeMap<Ino, usize>,
}

pub(super) fn eio() -> io::Error {
    io::Error::from_raw_os_error(EIO)
}

pub(super) fn err(kind: io::ErrorKind, path: &Path) -> io::Error {
    io::Error::new(kind, path.display().to_string())
}

/// The components of `path` below the root (`.` and `..` resolved lexically).
pub(super) fn components(path: &Path) -> Vec<OsString> {
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
    pub(super) fn stored_bytes(&self) -> u64 {
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
    pub(super) fn page_version(&self, p: usize, k: usize, page: usize) -> Vec<u8> {
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

    pub(super) fn touches_page(&self, p: usize, page: usize) -> bool {
        let (start, end) = (p * page, (p + 1) * page);
        self.pending.iter().any(|op| match op {
            DataOp::Write { pos, bytes } => *pos < end && pos + bytes.len() > start,
            DataOp::SetLen(len) => *len < end,
        })
    }

    /// The file's bytes after a power loss that wrote back a random part of the
    /// pending changes (see the module docs).
    pub(super) fn torn(&self, rng: &mut SimRng, look: &TornLook, config: &SimConfig) -> Vec<u8> {
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
pub(super) struct TornLook {
    latest_pct: u64,
    middle_pct: u64,
    torn_pct: u64,
}

impl Disk {
    pub(super) fn new(config: SimConfig, seed: u64) -> Self {
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

    pub(super) fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_LEN_MAX {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    /// Starts a counted operation: fails if the process is dead, dies if this is the
    /// chosen operation.
    pub(super) fn begin(&mut self, what: impl FnOnce() -> String) -> io::Result<Step> {
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

    pub(super) fn alive(&self) -> io::Result<()> {
        if self.crashed { Err(eio()) } else { Ok(()) }
    }

    pub(super) fn dir(&self, ino: Ino) -> &DirNode {
        match self.nodes.get(&ino) {
            Some(Node::Dir(d)) => d,
            _ => panic!("inode {ino} is not a directory"),
        }
    }

    pub(super) fn dir_mut(&mut self, ino: Ino) -> &mut DirNode {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(d)) => d,
            _ => panic!("inode {ino} is not a directory"),
        }
    }

    pub(super) fn file_mut(&mut self, ino: Ino) -> io::Result<&mut FileNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(f)) => Ok(f),
            _ => Err(io::Error::other(format!("inode {ino} is gone"))),
        }
    }

    pub(super) fn is_dir_ino(&self, ino: Ino) -> bool {
        matches!(self.nodes.get(&ino), Some(Node::Dir(_)))
    }

    /// The inode at `path` in the current (`durable == false`) or durable namespace.
    pub(super) fn lookup_in(&self, path: &Path, durable: bool) -> Option<Ino> {
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

    pub(super) fn lookup(&self, path: &Path) -> io::Result<Ino> {
        self.lookup_in(path, false)
            .ok_or_else(|| err(io::ErrorKind::NotFound, path))
    }

    /// The directory that holds `path`, and the entry's name.
    pub(super) fn parent(&self, path: &Path) -> io::Result<(Ino, OsString)> {
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

    pub(super) fn new_node(&mut self, node: Node) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        ino
    }

    pub(super) fn link(&mut self, dir: Ino, name: OsString, ino: Ino) {
        self.dir_mut(dir).entries.insert(name.clone(), ino);
        self.meta.push(MetaOp::Link { dir, name, ino });
    }

    pub(super) fn unlink(&mut self, dir: Ino, name: OsString) {
        self.dir_mut(dir).entries.remove(&name);
        self.meta.push(MetaOp::Unlink { dir, name });
    }

    /// Removes everything below directory `ino`, deepest first, as `rm -r` does.
    pub(super) fn unlink_tree(&mut self, ino: Ino) {
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
    pub(super) fn commit_dir(&mut self, dir: Ino) {
        let (now, later): (Vec<MetaOp>, Vec<MetaOp>) = std::mem::take(&mut self.meta)
            .into_iter()
            .partition(|op| op.touches(dir));
        for op in &now {
            op.make_durable(&mut self.nodes);
        }
        self.meta = later;
    }

    /// Applies a change to the file `ino`, keeping the byte count and the bound.
    pub(super) fn change_file(
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

    pub(super) fn write(&mut self, ino: Ino, buf: &[u8], pos: u64) -> io::Result<()> {
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
    pub(super) fn collect(&mut self) {
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
    pub(super) fn after_power_loss(&self, torn: Option<&mut SimRng>) -> Self {
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
