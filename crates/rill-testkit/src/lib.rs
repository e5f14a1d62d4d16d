//! Test-only helpers for Rill: child processes that a test kills with SIGKILL, and
//! the deterministic record contents they write so a parent can verify them; and the
//! [`soak`], which kills a real `rill serve` under load many times and checks the
//! history; and the [`nemesis`], which does the same to a cluster under a seeded
//! schedule of kills, pauses and network partitions.
//!
//! Architecture Invariant: nothing outside tests depends on this crate (only
//! dev-dependencies; checked by `tests/architecture.rs`).

#![deny(missing_docs, unreachable_pub)]

pub mod nemesis;
pub mod ports;
pub mod proxy;
pub mod soak;

/// The `rill` binary a tool named `tool` (`soak`, `nemesis`) runs: `given` if it is a
/// file, else the `rill` next to the tool's own executable; or the message saying how
/// to build it.
pub fn rill_binary(
    given: Option<std::path::PathBuf>,
    tool: &str,
) -> Result<std::path::PathBuf, String> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{tool}: no rill binary at {} (--rill / RILL_BIN)",
                path.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("{tool}: where am I? {e}"))?;
    let dir = exe.parent().unwrap_or(exe.as_path());
    let path = dir.join("rill");
    if path.is_file() {
        return Ok(path);
    }
    // In a cargo target directory (it holds CACHEDIR.TAG), this directory is named
    // after the profile the tool was built with.
    let in_target_dir = dir
        .parent()
        .is_some_and(|t| t.join("CACHEDIR.TAG").is_file());
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|_| in_target_dir);
    let build = match profile {
        Some("debug") => "cargo build -p rill-cli".to_owned(),
        Some("release") => "cargo build --release -p rill-cli".to_owned(),
        Some(other) => format!("cargo build --profile {other} -p rill-cli"),
        None => format!("cargo build -p rill-cli   (with the {tool}'s profile, e.g. --release)"),
    };
    Err(format!(
        "{tool}: no rill binary at {}\n\
         build it first, with the same profile and target directory as the {tool}:\n    \
         {build}\n\
         or pass its path with --rill PATH (or RILL_BIN=PATH)",
        path.display()
    ))
}

/// The value of record `index` of batch `seq` appended by writer `thread`.
///
/// Deterministic so a verifier can recompute every acknowledged record.
pub fn crash_value(thread: u32, seq: u64, index: u32) -> Vec<u8> {
    let mut value = format!("t{thread}-s{seq}-r{index}-").into_bytes();
    // Vary sizes so batches straddle index entries and segment rolls.
    let pad = ((seq * 31 + u64::from(index) * 7) % 200) as usize;
    value.extend(std::iter::repeat_n(b'a' + (seq % 26) as u8, pad));
    value
}

/// Records in batch `seq` of a crash writer.
pub fn crash_batch_len(seq: u64) -> u32 {
    1 + (seq % 5) as u32
}

/// One acknowledgement line printed by the crash appender: `ACK base thread seq count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Writer thread.
    pub thread: u32,
    /// Batch number of that thread.
    pub seq: u64,
    /// Records in the batch.
    pub count: u32,
}

impl Ack {
    /// Formats the line (without newline).
    pub fn line(&self) -> String {
        format!(
            "ACK {} {} {} {}",
            self.base_offset, self.thread, self.seq, self.count
        )
    }

    /// Parses a complete line; `None` for anything else.
    pub fn parse(line: &str) -> Option<Self> {
        let mut parts = line.strip_prefix("ACK ")?.split(' ');
        let ack = Self {
            base_offset: parts.next()?.parse().ok()?,
            thread: parts.next()?.parse().ok()?,
            seq: parts.next()?.parse().ok()?,
            count: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(ack)
    }
}
