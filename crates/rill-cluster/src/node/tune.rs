//! A running replica takes its topic's altered options (docs/PROTOCOL.md §3.30,
//! docs/REPLICATION.md §11.1): each node changes its own replicas' logs as it applies
//! the alter, the same change on every replica since it comes from the replicated
//! catalog. Added partitions need nothing here: they are new replicas, started by the
//! reconciliation like a new topic's.

use super::{ClusterNode, Replica};

impl ClusterNode {
    /// Makes `replica`'s log run with `options` (as the catalog stores them) if it
    /// does not already. A change that fails (a sync under a move to `always`) is
    /// logged and tried again at the next metadata change: the options the replica
    /// runs with are recorded only once they hold.
    pub(super) fn retune(&self, replica: &Replica, options: &[u8]) {
        let mut current = replica.options.lock();
        if current.as_slice() == options {
            return;
        }
        let config = (self.inner.config.log_config)(options);
        match replica.store.retune(&config) {
            Ok(()) => {
                *current = options.to_vec();
                tracing::info!(partition = %replica.id, durability = ?config.durability, "a replica took its topic's altered options");
            }
            Err(e) => {
                tracing::warn!(partition = %replica.id, error = %e, "a replica did not take its topic's altered options; tried again at the next metadata change");
            }
        }
    }
}
