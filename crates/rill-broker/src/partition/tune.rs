//! A partition learns its topic's altered options (docs/PROTOCOL.md §3.30).

use std::sync::Arc;

use rill_storage::LogConfig;

use super::{Partition, State};
use crate::BrokerError;

impl Partition {
    /// The topic's durability and retention changed to `log`'s. The options are kept
    /// first, so a reopen (after a failure, now or later) uses them; then the open log
    /// takes them. A log that fails the sync a move to `always` makes is poisoned, and
    /// its reopen runs with the new options. A replica's log is the cluster node's to
    /// change, not this partition's.
    pub(crate) fn retune(&self, log: &LogConfig) -> Result<(), BrokerError> {
        {
            let mut options = self.options.write();
            options.log.durability = log.durability;
            options.log.retention_age = log.retention_age;
            options.log.retention_bytes = log.retention_bytes;
        }
        let open = match &*self.state.read() {
            State::Open(l) => Some(Arc::clone(l)),
            _ => None,
        };
        if let Some(open) = open {
            open.set_retention(log.retention_age, log.retention_bytes)?;
            open.set_durability(log.durability)?;
            // Readers that waited for a sync a move away from `always` published.
            self.appended.send_replace(open.next_offset());
        }
        Ok(())
    }
}
