//! Background upkeep (retention, group sessions, reopening failed partitions), repair
//! and health.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::broker::{FailedPartition, PartitionState};
use crate::{Broker, BrokerError};

/// How often failed partitions and the offsets log are looked at for a reopen.
const HEAL_TICK: Duration = Duration::from_secs(1);

impl Broker {
    /// Applies retention to every partition once (blocking file deletes).
    pub fn apply_retention(&self) -> Result<(), BrokerError> {
        let _gate = self.upkeep_gate.read();
        // After shutdown the directory may belong to another broker already.
        self.check_running()?;
        let mut first_error = None;
        for (stream, topic, partition, p) in self.all_partitions() {
            // A replica's retention goes through its group (docs/REPLICATION.md §7.5).
            if p.is_clustered() {
                continue;
            }
            let Ok(log) = p.log() else { continue };
            if let Err(e) = log.apply_retention() {
                tracing::error!(stream, topic, partition, error = %e, "retention failed");
                first_error.get_or_insert(BrokerError::from(e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Frees the disk blocks reserved ahead of the writes of every log, this node's
    /// replicas' too, that nothing was appended to for `idle` (docs/FORMAT.md §4), so
    /// partitions that went quiet hold no reservation (blocking: one `ftruncate` each).
    pub fn release_idle_reservations(&self, idle: Duration) -> usize {
        let mut released = 0;
        for (_, _, _, p) in self.all_partitions() {
            if let Ok(log) = p.log()
                && log.release_idle_reservation(idle)
            {
                released += 1;
            }
        }
        released
    }

    /// Applies retention to every replica this node runs, each through its group
    /// (docs/REPLICATION.md §7.5); a single node's partitions are
    /// [`Broker::apply_retention`]'s.
    pub async fn retain_replicas(&self) {
        for (stream, topic, partition, p) in self.all_partitions() {
            if self.is_shutting_down() {
                return;
            }
            let Some(replica) = p.replica() else { continue };
            match replica.retain().await {
                Ok(Some(log_start)) => {
                    tracing::debug!(
                        stream,
                        topic,
                        partition,
                        log_start,
                        "retention purges a replica's log"
                    );
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(stream, topic, partition, error = %e, "retention of a replica failed; will retry");
                }
            }
        }
    }

    /// Reopens, with recovery, every partition whose log is poisoned (a failed write or
    /// fsync: a full disk, say) or could not be opened, once its back-off has passed,
    /// and the offsets log if it is poisoned. So once space is freed the broker heals
    /// without a restart. Returns how many partitions were reopened (blocking).
    pub fn heal(&self) -> usize {
        let _gate = self.upkeep_gate.read();
        if self.is_shutting_down() {
            return 0;
        }
        let now = Instant::now();
        let mut reopened = 0;
        for (stream, topic, partition, p) in self.all_partitions() {
            if !p.heal_due(now) {
                continue;
            }
            match p.reopen() {
                Ok(()) => {
                    self.register_flush(&p);
                    reopened += 1;
                }
                Err(e) => {
                    tracing::warn!(stream, topic, partition, error = %e, "reopening a failed partition failed; will retry");
                }
            }
        }
        if self.offsets.heal_due(now)
            && let Err(e) = self.offsets.reopen()
        {
            tracing::warn!(error = %e, "reopening the offsets log failed; will retry");
        }
        if reopened > 0 {
            self.reserve.ensure();
        }
        reopened
    }

    /// Reopens a partition with recovery now (whatever its back-off), and with
    /// `accept_data_loss` accepts its damaged ranges as lost so it takes appends again.
    /// A damaged range that ends the log resumes appends after every offset a consumer
    /// stored for the partition (blocking).
    pub fn repair_partition(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        accept_data_loss: bool,
    ) -> Result<PartitionState, BrokerError> {
        let _gate = self.upkeep_gate.read();
        self.check_running()?;
        let p = self.partition(stream, topic, partition)?;
        if p.broken() {
            p.reopen()?;
            self.register_flush(&p);
        }
        if accept_data_loss {
            let log = p.log()?;
            let stored_max = self
                .offsets
                .for_topic(stream, topic)
                .into_iter()
                .filter(|(k, _)| k.partition == partition)
                .map(|(_, o)| o)
                .max()
                .unwrap_or(0);
            let accepted = log.accept_damage(stored_max)?;
            tracing::warn!(
                stream,
                topic,
                partition,
                ranges = accepted.len(),
                "operator accepted data loss"
            );
        }
        let (_, states) = self.describe_topic(stream, topic)?;
        Ok(states
            .into_iter()
            .find(|s| s.partition == partition)
            .expect("the partition exists"))
    }

    /// Every partition that refuses appends, and why; and the offsets log if it does.
    pub fn failed_partitions(&self) -> Vec<FailedPartition> {
        let mut out: Vec<FailedPartition> = self
            .all_partitions()
            .into_iter()
            .filter_map(|(stream, topic, partition, p)| {
                p.failure().map(|reason| FailedPartition {
                    stream,
                    topic,
                    partition,
                    reason,
                })
            })
            .collect();
        if let Some(reason) = self.offsets.failure() {
            out.push(FailedPartition {
                stream: String::new(),
                topic: "(stored offsets)".to_owned(),
                partition: 0,
                reason,
            });
        }
        out
    }

    /// Runs retention every `retention_interval` (first after one interval) and frees
    /// the reservations of logs idle that long, expires
    /// group sessions every second, reopens failed partitions and runs the elastic
    /// topics' range policy, until the broker shuts down.
    pub async fn run_upkeep(self: Arc<Self>) {
        let period = self.config().retention_interval;
        let mut retention = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Group sessions are checked every second, so a silent member is removed within
        // a second of its timeout.
        let mut sessions = tokio::time::interval(Duration::from_secs(1));
        sessions.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heal = tokio::time::interval(HEAL_TICK);
        heal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Elastic topics' automatic policy (docs/RANGES.md §7).
        let mut ranges = tokio::time::interval(crate::policy::POLICY_TICK);
        ranges.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let job: fn(&Arc<Broker>) = tokio::select! {
                _ = retention.tick() => {
                    self.retain_replicas().await;
                    |b| {
                        if let Err(e) = b.apply_retention() {
                            tracing::error!(error = %e, "retention failed");
                        }
                        // Logs idle for a whole retention interval.
                        b.release_idle_reservations(b.config().retention_interval);
                    }
                },
                _ = sessions.tick() => {
                    self.groups.expire(Instant::now());
                    continue;
                }
                _ = heal.tick() => |b| {
                    b.heal();
                },
                _ = ranges.tick() => |b| {
                    b.range_policy_tick(Instant::now());
                },
            };
            if self.is_shutting_down() {
                return;
            }
            let broker = Arc::clone(&self);
            match tokio::task::spawn_blocking(move || job(&broker)).await {
                Ok(()) => {}
                // The runtime is shutting down with the process.
                Err(e) if e.is_cancelled() => return,
                Err(e) => tracing::error!(error = %e, "upkeep task failed"),
            }
        }
    }
}
