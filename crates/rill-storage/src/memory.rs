//! Whether memory is short: drop-behind's cue ([`PartitionLog::write_behind`]).
//!
//! While the machine has free memory, a log's old data stays in the page cache, where a
//! reader catching up finds it (a 4 GB backlog read 3.8x faster from the cache than
//! from this machine's disk). Once free memory runs low, every new page a write needs
//! waits for the kernel to reclaim one; then drop-behind gives back the log's own data
//! beyond its cache tail first, off the append path. Memory counts as short when the
//! free memory (`MemFree`, not counting the page cache) is below 1/16 of the machine's,
//! or, in a cgroup with a memory limit (v2 `memory.max`, v1 `memory.limit_in_bytes`),
//! when its headroom is below 1/16 of that limit.
//!
//! [`PartitionLog::write_behind`]: crate::PartitionLog::write_behind

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How much free memory there is, as far as drop-behind cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Free memory is low: drop what lies beyond a log's cache tail.
    Short,
    /// Free memory is plentiful: leave the page cache to the kernel.
    Ample,
}

/// Memory is short below this fraction (1/`SHORT_DIVISOR`) of the total or the limit.
const SHORT_DIVISOR: u64 = 16;
/// How long a judgement is reused before the files are read again.
const REFRESH: Duration = Duration::from_millis(100);

/// Watches this machine's free memory and this process's cgroup memory limit.
#[derive(Debug)]
pub struct MemoryWatch {
    meminfo: PathBuf,
    /// The cgroup's limit and usage files, when it has a memory controller.
    cgroup: Option<(PathBuf, PathBuf)>,
    last: Option<(Instant, Memory)>,
}

impl MemoryWatch {
    /// Watches `/proc/meminfo` and the memory controller of this process's cgroup.
    pub fn system() -> Self {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|table| cgroup_files(&table, Path::new("/sys/fs/cgroup")));
        Self {
            meminfo: PathBuf::from("/proc/meminfo"),
            cgroup,
            last: None,
        }
    }

    /// Whether memory is short now (read at most every 100 ms). Where the files
    /// cannot be read (not Linux, `/proc` hidden), memory counts as short: the
    /// configured cache tail then always applies.
    pub fn check(&mut self) -> Memory {
        let now = Instant::now();
        if let Some((at, memory)) = self.last
            && now.duration_since(at) < REFRESH
        {
            return memory;
        }
        let memory = match std::fs::read_to_string(&self.meminfo) {
            Ok(meminfo) => {
                let cgroup = self.cgroup.as_ref().and_then(|(limit, usage)| {
                    let limit = std::fs::read_to_string(limit).ok()?;
                    let usage = std::fs::read_to_string(usage).ok()?;
                    Some((limit.trim().parse().ok()?, usage.trim().parse().ok()?))
                });
                judge(&meminfo, cgroup)
            }
            Err(_) => Memory::Short,
        };
        self.last = Some((now, memory));
        memory
    }
}

/// Judges `/proc/meminfo`'s text and a cgroup's `(limit, usage)` in bytes. A limit
/// at or above the machine's memory (v1's "unlimited" is a huge number) is no limit.
/// Text it cannot read counts as short.
fn judge(meminfo: &str, cgroup: Option<(u64, u64)>) -> Memory {
    let field = |name: &str| {
        meminfo.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            kib.checked_mul(1024)
        })
    };
    let (Some(total), Some(free)) = (field("MemTotal"), field("MemFree")) else {
        return Memory::Short;
    };
    if free < total / SHORT_DIVISOR {
        return Memory::Short;
    }
    match cgroup {
        Some((limit, usage))
            if limit < total && limit.saturating_sub(usage) < limit / SHORT_DIVISOR =>
        {
            Memory::Short
        }
        _ => Memory::Ample,
    }
}

/// The memory controller's limit and usage files for the cgroup named in
/// `/proc/self/cgroup`'s `table`, under `root` (v2's unified hierarchy: `0::/path`; v1:
/// a line whose controllers include `memory`). `None` without one.
fn cgroup_files(table: &str, root: &Path) -> Option<(PathBuf, PathBuf)> {
    let relative = |path: &str| PathBuf::from(path.trim_start_matches('/'));
    for line in table.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            let dir = root.join("memory").join(relative(path));
            return Some((
                dir.join("memory.limit_in_bytes"),
                dir.join("memory.usage_in_bytes"),
            ));
        }
    }
    let path = table.lines().find_map(|line| line.strip_prefix("0::"))?;
    let dir = root.join(relative(path));
    Some((dir.join("memory.max"), dir.join("memory.current")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meminfo(total_kib: u64, free_kib: u64) -> String {
        format!(
            "MemTotal:       {total_kib} kB\nMemFree:        {free_kib} kB\nMemAvailable:   {total_kib} kB\nCached:         1 kB\n"
        )
    }

    #[test]
    fn free_memory_below_a_sixteenth_is_short() {
        let gib = 1 << 20;
        assert_eq!(judge(&meminfo(16 * gib, 8 * gib), None), Memory::Ample);
        assert_eq!(judge(&meminfo(16 * gib, gib), None), Memory::Ample);
        assert_eq!(judge(&meminfo(16 * gib, gib - 1), None), Memory::Short);
        // A cgroup limit below the machine's: its headroom decides too.
        let gib_bytes = 1u64 << 30;
        let plenty = meminfo(16 * gib, 8 * gib);
        assert_eq!(
            judge(&plenty, Some((4 * gib_bytes, 3 * gib_bytes))),
            Memory::Ample
        );
        assert_eq!(
            judge(
                &plenty,
                Some((4 * gib_bytes, 4 * gib_bytes - gib_bytes / 32))
            ),
            Memory::Short
        );
        // v1's "no limit" (a huge number), v2's usage above a lowered limit.
        assert_eq!(
            judge(&plenty, Some((9_223_372_036_854_771_712, 1 << 40))),
            Memory::Ample
        );
        assert_eq!(
            judge(&plenty, Some((gib_bytes, 2 * gib_bytes))),
            Memory::Short
        );
    }

    #[test]
    fn unreadable_meminfo_counts_as_short() {
        for text in [
            "",
            "MemTotal: 100 kB\n",
            "MemFree: 100 kB\n",
            "MemTotal: lots kB\nMemFree: 1 kB\n",
            "MemTotal: 100\nMemFree: 100\n",
            "MemTotal: 99999999999999999999 kB\nMemFree: 1 kB\n",
            "MemTotalx: 100 kB\nMemFree: 100 kB\n",
        ] {
            assert_eq!(judge(text, None), Memory::Short, "{text:?}");
        }
    }

    #[test]
    fn the_cgroup_files_come_from_the_process_table() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            cgroup_files("0::/system.slice/rill.service\n", root),
            Some((
                root.join("system.slice/rill.service/memory.max"),
                root.join("system.slice/rill.service/memory.current")
            ))
        );
        let v1 = "5:devices:/\n4:memory:/pod/abc\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(
            cgroup_files(v1, root),
            Some((
                root.join("memory/pod/abc/memory.limit_in_bytes"),
                root.join("memory/pod/abc/memory.usage_in_bytes")
            ))
        );
        assert_eq!(cgroup_files("", root), None);
        assert_eq!(cgroup_files("garbage\n1:cpu:/\n", root), None);
    }
}
