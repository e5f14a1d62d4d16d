//! Installing a snapshot (docs/REPLICATION.md §7.5), all or nothing.
//!
//! When the replica's log ends at or after the snapshot's log start, the batches after
//! its end are appended to its own log, and the purge point is the commit point. When
//! it ends before, the log is replaced whole: the batches go to a staging log
//! (`raft/install/`), then `raft/install.json` (the snapshot's purge point and the names
//! of the staged files) commits the install, then the replica's files are swapped for
//! the staged ones. An open finishes a committed install and deletes an uncommitted
//! staging log ([`recover`]).

use std::io;
use std::path::Path;
use std::sync::Arc;

use rill_storage::{LogConfig, LogEnv, PartitionLog};
use serde::{Deserialize, Serialize};

use super::PartitionSnapshot;
use super::log_store::{PartitionLogStore, Purged};
use crate::files::{invalid, read_json, write_json};

const STAGING: &str = "install";
const COMMIT: &str = "install.json";
/// Bytes read from the sender's log at a time.
const COPY_CHUNK: usize = 1 << 20;

/// A committed install: its purge point and the files of its staging log.
#[derive(Debug, Serialize, Deserialize)]
struct Commit {
    purged: Purged,
    files: Vec<String>,
}

/// At open, before the log is opened: finishes the file swap of a committed install
/// and returns its purge point (the caller then records it and drops the pointers it
/// covers, then calls [`finish`]); deletes the staging log of one that never committed.
pub(crate) fn recover(
    io: &dyn rill_storage::Io,
    partition_dir: &Path,
    raft_dir: &Path,
) -> io::Result<Option<Purged>> {
    let staging = raft_dir.join(STAGING);
    match read_json::<Commit>(io, &raft_dir.join(COMMIT))? {
        Some(commit) => {
            tracing::warn!(dir = %partition_dir.display(), "finishing a snapshot install a crash interrupted");
            swap(io, partition_dir, &staging, &commit.files)?;
            Ok(Some(commit.purged))
        }
        None => {
            if io.is_dir(&staging) {
                io.remove_dir_all(&staging)?;
                io.sync_dir(raft_dir)?;
            }
            Ok(None)
        }
    }
}

/// Deletes the commit point and the staging directory of a finished install.
pub(crate) fn finish(io: &dyn rill_storage::Io, raft_dir: &Path) -> io::Result<()> {
    let commit = raft_dir.join(COMMIT);
    if io.exists(&commit) {
        io.remove_file(&commit)?;
    }
    let staging = raft_dir.join(STAGING);
    if io.is_dir(&staging) {
        io.remove_dir_all(&staging)?;
    }
    io.sync_dir(raft_dir)
}

/// The names of the files (not directories) in `dir`.
fn files_in(io: &dyn rill_storage::Io, dir: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for path in io.read_dir(dir)? {
        if io.is_dir(&path) {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| invalid(format!("a file name that is not UTF-8: {}", path.display())))?;
        names.push(name.to_owned());
    }
    names.sort();
    Ok(names)
}

/// Deletes the partition's files that are not staged ones, and moves the staged files
/// still in the staging directory into the partition's. Idempotent: a crash anywhere
/// in it is finished by running it again.
fn swap(
    io: &dyn rill_storage::Io,
    partition_dir: &Path,
    staging: &Path,
    files: &[String],
) -> io::Result<()> {
    for name in files_in(io, partition_dir)? {
        if !files.contains(&name) {
            match io.remove_file(&partition_dir.join(&name)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    for name in files {
        let from = staging.join(name);
        if io.exists(&from) {
            io.rename(&from, &partition_dir.join(name))?;
        }
    }
    io.sync_dir(partition_dir)
}

/// Appends the batches of `source` in `[from, to)` to `dest`, unchanged.
pub(crate) fn copy_batches(
    source: &PartitionLog,
    dest: &PartitionLog,
    from: u64,
    to: u64,
) -> io::Result<()> {
    let mut at = from;
    while at < to {
        let read = source.read(at, COPY_CHUNK).map_err(io::Error::other)?;
        if read.bytes.is_empty() {
            return Err(invalid(format!(
                "the snapshot's log ends at {at}, before its end {to}"
            )));
        }
        let before = at;
        for batch in read.batches() {
            let batch = batch.map_err(invalid)?;
            if batch.next_offset() > to {
                break;
            }
            if batch.base_offset() < at {
                continue;
            }
            dest.append_stamped(batch.as_bytes())
                .map_err(io::Error::other)?;
            at = batch.next_offset();
        }
        if at == before {
            return Err(invalid(format!(
                "the snapshot's log has no batch that ends by {to} at {at}"
            )));
        }
    }
    Ok(())
}

/// Replaces `store`'s log whole with the snapshot's batches: the replica's log ends
/// before the snapshot's log starts.
pub(crate) fn replace_log(
    store: &PartitionLogStore,
    snapshot: &PartitionSnapshot,
    purged: Purged,
) -> io::Result<()> {
    let shared = &store.shared;
    let io = shared.io.as_ref();
    let staging = shared.dir.join(STAGING);
    if io.is_dir(&staging) {
        io.remove_dir_all(&staging)?;
    }
    // 1. The staging log, starting where the snapshot's log does. Its own file cache:
    //    its files are renamed away from under it.
    let config = LogConfig {
        initial_offset: snapshot.log_start,
        ..shared.config.read().clone()
    };
    {
        let env = LogEnv::new(Arc::clone(&shared.io), Arc::clone(&shared.env.clock));
        let staged = PartitionLog::open_in(&staging, config, &env).map_err(io::Error::other)?;
        copy_batches(
            &snapshot.source,
            &staged,
            snapshot.log_start,
            snapshot.next_offset,
        )?;
        staged.close().map_err(io::Error::other)?;
    }
    let files = files_in(io, &staging)?;
    // 2. The commit point.
    write_json(
        io,
        &shared.dir.join(COMMIT),
        &Commit {
            purged: purged.clone(),
            files: files.clone(),
        },
    )?;
    // 3. The swap, and the log reopened on the new files.
    store.log().close().map_err(io::Error::other)?;
    swap(io, &shared.partition_dir, &staging, &files)?;
    store.reopen_log()?;
    // 4. The purge point and pointers, then the commit point goes.
    store.installed(purged)?;
    finish(io, &shared.dir)
}
