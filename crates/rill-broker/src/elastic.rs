//! Splitting and merging an elastic topic's key ranges on a single node
//! (docs/RANGES.md §3). The steps, and what a crash at each leaves:
//!
//! 1. **Fence** the parents (in id order): no append completes after this; appends
//!    meanwhile get `MIGRATING`. Memory only: a crash leaves the topic as it was.
//! 2. **Sync** each parent's log through its end, so the seal never names records a
//!    power loss could take back.
//! 3. **Create** the children's directories (empty logs) and sync them down from the
//!    data directory. A crash leaves directories the catalog does not count, removed
//!    at the next open.
//! 4. **Commit**: the catalog with the parents sealed and the children open replaces
//!    the old one atomically. Before the rename the split did not happen; after it, it
//!    did.
//! 5. **Publish** in memory: the parents answer `NOT_OWNER`, the topic has its
//!    children, consumer groups count them.
//!
//! A failure at 1–4 lifts the fences and removes the children: the topic is as it was.

use std::sync::Arc;

use rill_proto::ranges::{Change, RANGE_IDS_MAX, RangeError, RangeMap};

use crate::broker::{Topic, partition_options};
use crate::catalog::StoredRanges;
use crate::partition::{Partition, Seal};
use crate::{Broker, BrokerError};

/// Open ranges an elastic topic may have at most (docs/RANGES.md §2).
pub const OPEN_RANGES_MAX: usize = 256;

/// What a split or merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeChange {
    /// The ranges sealed, with the offset each was sealed at.
    pub sealed: Vec<(u32, u64)>,
    /// The ranges opened.
    pub opened: Vec<u32>,
    /// The map's epoch afterwards.
    pub epoch: u64,
}

impl Broker {
    /// Splits an open range of an elastic topic at `at` (default: its middle); without
    /// `range`, the open range holding the most bytes. Blocking (fsyncs, files).
    pub fn split_range(
        &self,
        stream: &str,
        topic: &str,
        range: Option<u32>,
        at: Option<u64>,
    ) -> Result<RangeChange, BrokerError> {
        self.change_ranges_by(stream, topic, false, |map, t| {
            let id = match range {
                Some(id) => id,
                None => busiest(map, t),
            };
            map.plan_split(id, at, OPEN_RANGES_MAX)
        })
    }

    /// Merges two adjacent open ranges of an elastic topic into one. Blocking.
    pub fn merge_ranges(
        &self,
        stream: &str,
        topic: &str,
        a: u32,
        b: u32,
    ) -> Result<RangeChange, BrokerError> {
        self.change_ranges_by(stream, topic, false, |map, _| map.plan_merge(a, b))
    }

    /// Makes the change `plan` plans (asked for by the policy or by hand, counted so),
    /// as §3 says.
    pub(crate) fn change_ranges_by(
        &self,
        stream: &str,
        topic: &str,
        by_policy: bool,
        plan: impl FnOnce(&RangeMap, &Topic) -> Result<Change, RangeError>,
    ) -> Result<RangeChange, BrokerError> {
        let change = self.change_ranges(stream, topic, plan)?;
        self.range_policy
            .count(stream, topic, change.sealed.len() == 2, by_policy);
        Ok(change)
    }

    fn change_ranges(
        &self,
        stream: &str,
        topic: &str,
        plan: impl FnOnce(&RangeMap, &Topic) -> Result<Change, RangeError>,
    ) -> Result<RangeChange, BrokerError> {
        self.check_running()?;
        if self.is_clustered() {
            return Err(BrokerError::InvalidRequest(
                "in a cluster, key ranges change through the cluster (docs/RANGES.md §9)".into(),
            ));
        }
        let _admin = self.admin.lock();
        let old = self.topic(stream, topic)?;
        let map = old.config.range_map().ok_or_else(|| {
            BrokerError::InvalidRequest(format!(
                "{stream}/{topic} is not an elastic topic: its partitions do not split"
            ))
        })?;
        let change = plan(&map, &old).map_err(|e| range_error(stream, topic, &old, e))?;
        let parents: Vec<Arc<Partition>> = change
            .parents
            .iter()
            .map(|&p| Arc::clone(&old.partitions[p as usize]))
            .collect();

        // Step 1: fence, in id order.
        let mut ends = Vec::with_capacity(parents.len());
        for p in &parents {
            match p.begin_seal() {
                Ok(end) => ends.push(end),
                Err(e) => {
                    abort(&parents[..ends.len() + 1]);
                    return Err(e);
                }
            }
        }
        // Step 2: each parent durable through its end.
        for p in &parents {
            if let Err(e) = p.log().and_then(|log| Ok(log.sync()?)) {
                abort(&parents);
                return Err(e);
            }
        }
        // Step 3: the children's files.
        let first = old.config.partitions;
        let mut config = old.config.clone();
        config.partitions = first + change.children.len() as u32;
        let options = partition_options(&self.config, &config);
        let children =
            match self.create_partitions(stream, topic, (first, config.partitions), &options) {
                Ok(children) => children,
                Err(e) => {
                    abort(&parents);
                    return Err(e);
                }
            };
        let undo = |children: &[Arc<Partition>]| {
            abort(&parents);
            self.remove_partitions(stream, topic, first, children);
        };
        // Step 4: the commit.
        let mut next = map;
        let opened = match next.apply(&change, &ends) {
            Ok(opened) => opened,
            Err(e) => {
                undo(&children);
                return Err(BrokerError::Internal(format!(
                    "a planned range change did not apply: {e}"
                )));
            }
        };
        config.ranges = Some(StoredRanges::from_map(&next));
        if let Err(e) = self.save_topic_config(stream, topic, &config) {
            undo(&children);
            return Err(e);
        }
        // Step 5: memory.
        for (p, &end) in parents.iter().zip(&ends) {
            p.finish_seal(end);
        }
        self.replace_topic(stream, topic, &old, config, children);
        self.refresh_groups(stream, topic);
        let sealed: Vec<(u32, u64)> = change.parents.iter().copied().zip(ends).collect();
        tracing::info!(
            stream,
            topic,
            ?sealed,
            ?opened,
            epoch = next.epoch(),
            "key ranges changed"
        );
        Ok(RangeChange {
            sealed,
            opened,
            epoch: next.epoch(),
        })
    }
}

/// Lifts the fences of `parents` (a change that failed before its commit).
fn abort(parents: &[Arc<Partition>]) {
    for p in parents {
        if p.seal() == Seal::Sealing {
            p.abort_seal();
        }
    }
}

/// The open range with the most bytes stored (the write rate decides once it is kept,
/// docs/RANGES.md §7).
pub(crate) fn busiest(map: &RangeMap, topic: &Topic) -> u32 {
    map.open()
        .max_by_key(|r| {
            topic
                .partitions
                .get(r.id as usize)
                .and_then(|p| p.log().ok())
                .map_or(0, |log| log.size_bytes())
        })
        .map_or(0, |r| r.id)
}

pub(crate) fn range_error(stream: &str, topic: &str, t: &Topic, e: RangeError) -> BrokerError {
    match e {
        RangeError::NotFound(partition) => BrokerError::PartitionNotFound {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
            partition,
            partitions: t.config.partitions,
        },
        RangeError::Limit(m) => BrokerError::InvalidRequest(format!(
            "{m} (at most {OPEN_RANGES_MAX} open ranges and {RANGE_IDS_MAX} range ids per topic)"
        )),
        e => BrokerError::InvalidRequest(e.to_string()),
    }
}
