//! A replica's log takes its topic's altered options (docs/PROTOCOL.md §3.30): its
//! durability and retention change in place, and the pointer file is synced under
//! `always` from then on.

use std::io;
use std::sync::atomic::Ordering;

use rill_storage::{Durability, LogConfig};

use super::{PartitionLogStore, storage_err};

impl PartitionLogStore {
    /// Changes the log's durability and retention to `config`'s. The options are kept
    /// first (a log an install reopens takes them), then the open log changes: a move
    /// to `always` syncs what it holds, so from its return every entry this replica
    /// reports durable is synced, batches and pointers; entries reported before were
    /// reported under the old policy (docs/REPLICATION.md §6.2).
    pub fn retune(&self, config: &LogConfig) -> io::Result<()> {
        let shared = &self.shared;
        {
            let mut kept = shared.config.write();
            kept.durability = config.durability;
            kept.retention_age = config.retention_age;
            kept.retention_bytes = config.retention_bytes;
        }
        let log = self.log();
        log.set_retention(config.retention_age, config.retention_bytes)
            .map_err(storage_err)?;
        log.set_durability(config.durability).map_err(storage_err)?;
        let always = config.durability == Durability::Always;
        shared.sync_pointers.store(always, Ordering::Release);
        if always {
            // Pointers written under the old policy: synced before the answer, as the
            // batches they point at were by `set_durability`.
            let file = std::sync::Arc::clone(&*shared.current_file.lock());
            file.sync_data()?;
        }
        Ok(())
    }
}
