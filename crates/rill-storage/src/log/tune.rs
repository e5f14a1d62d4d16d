//! The options of a [`PartitionLog`] an operator may change while it is open: its
//! durability policy and its retention limits (an altered topic takes effect without a
//! restart).
//!
//! Invariant: a batch is acknowledged under the policy it was written under, and an
//! acknowledged batch is visible to readers. So leaving `always` first makes every
//! batch written so far visible (nothing is written meanwhile: the change holds the
//! writer lock), since an append that wrote under `always` and reads the new policy in
//! [`PartitionLog::wait_durable`] returns without the sync that would have published
//! it; and entering `always` syncs what was written before, so that from the answer
//! on, readers see only durable batches, as `always` promises.

use std::time::Duration;

use super::PartitionLog;
use crate::config::{Durability, LogConfig};
use crate::{ConfigError, StorageError};

/// The changeable options, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tunable {
    pub(super) durability: Durability,
    pub(super) retention_age: Option<Duration>,
    pub(super) retention_bytes: Option<u64>,
}

impl Tunable {
    pub(super) fn of(config: &LogConfig) -> Self {
        Self {
            durability: config.durability,
            retention_age: config.retention_age,
            retention_bytes: config.retention_bytes,
        }
    }
}

impl PartitionLog {
    /// The durability policy in force.
    pub fn durability(&self) -> Durability {
        self.tunable.read().durability
    }

    /// Changes the durability policy of the open log. Returns once the new policy
    /// holds for what was written before: entering `always` syncs everything written
    /// so far (and makes it visible); leaving it makes every batch written so far
    /// visible at once. Later appends follow the new policy. A caller that syncs
    /// `interval` logs on a timer (the broker's [`Flusher`](crate::Flusher)) registers
    /// the log there when it becomes `interval`.
    pub fn set_durability(&self, durability: Durability) -> Result<(), StorageError> {
        if durability.interval_ms() == Some(0) {
            return Err(ConfigError::ZeroInterval.into());
        }
        self.check_poison()?;
        let w = self.lock_writer()?;
        if w.closed {
            return Err(StorageError::Closed);
        }
        let old = self.durability();
        if old == durability {
            return Ok(());
        }
        if old == Durability::Always {
            // Writes waiting for their group commit would otherwise be acknowledged
            // under the new policy without ever being published.
            if let Some(latest) = self.commit.lock().latest.clone() {
                self.publish(&latest);
            }
        }
        self.tunable.write().durability = durability;
        drop(w);
        tracing::info!(dir = %self.dir.display(), from = ?old, to = ?durability, "durability changed");
        if durability == Durability::Always {
            self.sync()?;
        }
        Ok(())
    }

    /// Changes the retention limits of the open log: the next
    /// [`PartitionLog::apply_retention`] (or [`PartitionLog::retention_cut`]) uses
    /// them. `None` is no limit; an age must be positive, as in [`LogConfig`].
    pub fn set_retention(
        &self,
        age: Option<Duration>,
        bytes: Option<u64>,
    ) -> Result<(), StorageError> {
        if age.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroAge.into());
        }
        let mut tunable = self.tunable.write();
        tunable.retention_age = age;
        tunable.retention_bytes = bytes;
        Ok(())
    }
}
