//! Splitting and merging an elastic topic's key ranges in a cluster (docs/RANGES.md §9).
//! A range is a replicated partition; a change takes three kinds of step, each a commit
//! of its own, and is only ever driven forward:
//!
//! 1. **Plan**: the topic's options gain the change as *pending* (a compare-and-set
//!    through the metadata group). No other change of the topic starts while one is
//!    pending.
//! 2. **Seal** each parent in its own group: its leader stops proposing batches and
//!    proposes a seal entry; the store stamps it with the log's end `E` and appends no
//!    batch after it (a leader elected with the entry in its log proposes none either).
//!    Committed by a quorum, the seal is final, whatever happens to leadership.
//! 3. **Record** each parent's `E` in the pending change (a compare-and-set); the one
//!    that records the last end applies the change instead: the parents sealed, the
//!    children open, placed as added partitions are.
//!
//! Whoever leads a parent drives it: the node that took the request, and every node
//! once a second for the parents it leads (a leader killed mid-change is replaced, and
//! the new one finds the seal in its log or seals anew). Until the change applies, the
//! parents answer `MIGRATING` once sealed; afterwards `NOT_OWNER`, and clients read the
//! new map.

use std::sync::Arc;
use std::time::Duration;

use rill_proto::ranges::{Change, RangeError, RangeMap};

use crate::broker::Topic;
use crate::catalog::{PendingChange, StoredRanges, TopicConfig};
use crate::cluster::{CatalogChange, CatalogOutcome, ReplicaLog};
use crate::elastic::{OPEN_RANGES_MAX, RangeChange, busiest, range_error};
use crate::{Broker, BrokerError};

/// How long a split or merge request waits for the change to apply.
const CHANGE_WAIT: Duration = Duration::from_secs(30);
/// Attempts at recording a parent's end against options that change meanwhile.
const RECORD_ATTEMPTS: usize = 20;

impl Broker {
    /// A split in a cluster (see the module's documentation), asked for by hand or by
    /// the policy.
    pub(crate) async fn cluster_split_range_by(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        range: Option<u32>,
        at: Option<u64>,
        by_policy: bool,
    ) -> Result<RangeChange, BrokerError> {
        let change = self
            .cluster_change_ranges(stream, topic, |map, t| {
                let id = match range {
                    Some(id) => id,
                    None => busiest(map, t),
                };
                map.plan_split(id, at, OPEN_RANGES_MAX)
            })
            .await?;
        self.range_policy.count(stream, topic, false, by_policy);
        Ok(change)
    }

    /// A merge in a cluster, asked for by hand or by the policy.
    pub(crate) async fn cluster_merge_ranges_by(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        a: u32,
        b: u32,
        by_policy: bool,
    ) -> Result<RangeChange, BrokerError> {
        let change = self
            .cluster_change_ranges(stream, topic, |map, _| map.plan_merge(a, b))
            .await?;
        self.range_policy.count(stream, topic, true, by_policy);
        Ok(change)
    }

    async fn cluster_change_ranges(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        plan: impl FnOnce(&RangeMap, &Topic) -> Result<Change, RangeError>,
    ) -> Result<RangeChange, BrokerError> {
        self.cluster_linearize().await?;
        let old = self.topic(stream, topic)?;
        let (map, stored) = elastic_map(stream, topic, &old.config)?;
        if let Some(p) = &stored.pending {
            return Err(BrokerError::RangeMigrating {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                partition: p.parents.first().copied().unwrap_or_default(),
            });
        }
        let change = plan(&map, &old).map_err(|e| range_error(stream, topic, &old, e))?;
        let mut to = old.config.clone();
        if let Some(r) = to.ranges.as_mut() {
            r.pending = Some(PendingChange {
                epoch: change.epoch,
                parents: change.parents.clone(),
                children: change.children.clone(),
                ends: vec![None; change.parents.len()],
            });
        }
        match self
            .change(CatalogChange::AlterTopic {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                from: old.config.clone(),
                to: to.clone(),
            })
            .await?
        {
            CatalogOutcome::Done | CatalogOutcome::Exists => {}
            CatalogOutcome::NotFound(_) => {
                return Err(BrokerError::TopicNotFound {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                });
            }
            CatalogOutcome::Conflict(m) => {
                // Another change got there first (perhaps this very request, sent
                // again by a client that lost its answer): a change under way is
                // waited out, anything else is asked again against the new map.
                self.cluster_linearize().await?;
                let now = self.topic(stream, topic)?;
                if let Some(p) = now.config.ranges.as_ref().and_then(|r| r.pending.as_ref()) {
                    return Err(BrokerError::RangeMigrating {
                        stream: stream.to_owned(),
                        topic: topic.to_owned(),
                        partition: p.parents.first().copied().unwrap_or_default(),
                    });
                }
                return Err(BrokerError::InvalidRequest(m));
            }
        }
        tracing::info!(stream, topic, ?change, "a key range change is planned");
        self.mirrored_within("the planned range change", CHANGE_WAIT, |s| {
            s.get(stream)
                .and_then(|s| s.topics.get(topic))
                .is_some_and(|t| t.config.ranges != old.config.ranges)
        })
        .await?;
        self.drive_range_changes();
        let first = old.config.partitions;
        self.mirrored_within("the range change", CHANGE_WAIT, |s| {
            s.get(stream)
                .and_then(|s| s.topics.get(topic))
                .and_then(|t| t.config.ranges.as_ref())
                .is_some_and(|r| r.epoch > change.epoch)
        })
        .await?;
        let now = self.topic(stream, topic)?;
        let (map, _) = elastic_map(stream, topic, &now.config)?;
        let sealed = change
            .parents
            .iter()
            .map(|&p| (p, map.get(p).and_then(|r| r.sealed).unwrap_or_default()))
            .collect();
        let opened = (first..first + change.children.len() as u32).collect();
        Ok(RangeChange {
            sealed,
            opened,
            epoch: map.epoch(),
        })
    }

    /// Starts sealing every parent of a pending change that this node leads and is not
    /// sealing already (see the module's documentation).
    pub(crate) fn drive_range_changes(self: &Arc<Self>) {
        if self.is_shutting_down() {
            return;
        }
        let mut due = Vec::new();
        for (stream, s) in self.read_streams().iter() {
            for (topic, t) in &s.topics {
                let Some(p) = t.config.ranges.as_ref().and_then(|r| r.pending.as_ref()) else {
                    continue;
                };
                for (&parent, end) in p.parents.iter().zip(&p.ends) {
                    let replica = t.partitions.get(parent as usize).and_then(|p| p.replica());
                    if let (None, Some(replica)) = (end, replica)
                        && replica.leading().is_some()
                    {
                        due.push((stream.clone(), topic.clone(), parent, replica));
                    }
                }
            }
        }
        for (stream, topic, parent, replica) in due {
            let key = (stream, topic, parent);
            if !self.sealing_ranges.lock().insert(key.clone()) {
                continue;
            }
            let broker = Arc::clone(self);
            tokio::spawn(async move {
                let (stream, topic, parent) = &key;
                if let Err(e) = broker.seal_parent(stream, topic, *parent, &replica).await {
                    tracing::warn!(stream, topic, range = parent, error = %e, "sealing a range for a split or merge (tried again within a second)");
                }
                broker.sealing_ranges.lock().remove(&key);
            });
        }
    }

    /// Seals `parent` through its group (this node leads it) and records its end in
    /// the pending change, applying the change if it is the last.
    async fn seal_parent(
        &self,
        stream: &str,
        topic: &str,
        parent: u32,
        replica: &Arc<dyn ReplicaLog>,
    ) -> Result<(), BrokerError> {
        let end = replica.seal().await?;
        for _ in 0..RECORD_ATTEMPTS {
            let t = self.topic(stream, topic)?;
            let Some(to) = recorded(stream, topic, &t.config, parent, end)? else {
                return Ok(());
            };
            match self
                .change(CatalogChange::AlterTopic {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                    from: t.config.clone(),
                    to,
                })
                .await?
            {
                CatalogOutcome::Done | CatalogOutcome::Exists | CatalogOutcome::NotFound(_) => {
                    tracing::info!(
                        stream,
                        topic,
                        range = parent,
                        end,
                        "a range's seal is recorded"
                    );
                    return Ok(());
                }
                // Changed meanwhile (another parent's end): read it again.
                CatalogOutcome::Conflict(_) => self.cluster_linearize().await?,
            }
        }
        Err(BrokerError::ClusterTimeout(format!(
            "{stream}/{topic}: range {parent}'s seal at {end} was not recorded after {RECORD_ATTEMPTS} attempts"
        )))
    }
}

/// An elastic topic's map and stored form.
fn elastic_map<'a>(
    stream: &str,
    topic: &str,
    config: &'a TopicConfig,
) -> Result<(RangeMap, &'a StoredRanges), BrokerError> {
    let not_elastic = || {
        BrokerError::InvalidRequest(format!(
            "{stream}/{topic} is not an elastic topic: its partitions do not split"
        ))
    };
    let stored = config.ranges.as_ref().ok_or_else(not_elastic)?;
    let map = stored
        .to_map()
        .map_err(|e| BrokerError::Internal(format!("{stream}/{topic}'s range map: {e}")))?;
    Ok((map, stored))
}

/// The options of `config` with `parent`'s seal at `end` recorded in its pending
/// change, and the change applied if that was the last end missing. `None` when there
/// is nothing to record (done already, or no such change any more).
fn recorded(
    stream: &str,
    topic: &str,
    config: &TopicConfig,
    parent: u32,
    end: u64,
) -> Result<Option<TopicConfig>, BrokerError> {
    let (map, stored) = elastic_map(stream, topic, config)?;
    let Some(pending) = &stored.pending else {
        return Ok(None);
    };
    let Some(i) = pending.parents.iter().position(|&p| p == parent) else {
        return Ok(None);
    };
    match pending.ends[i] {
        Some(e) if e == end => return Ok(None),
        Some(e) => {
            return Err(BrokerError::Internal(format!(
                "{stream}/{topic}: range {parent} was recorded sealed at {e}, its group says {end}"
            )));
        }
        None => {}
    }
    let mut next = pending.clone();
    next.ends[i] = Some(end);
    let mut to = config.clone();
    let ends: Option<Vec<u64>> = next.ends.iter().copied().collect();
    to.ranges = Some(match ends {
        Some(ends) => {
            let mut map = map;
            map.apply(&next.change(), &ends).map_err(|e| {
                BrokerError::Internal(format!(
                    "{stream}/{topic}: a planned range change did not apply: {e}"
                ))
            })?;
            to.partitions += next.children.len() as u32;
            StoredRanges::from_map(&map)
        }
        None => StoredRanges {
            pending: Some(next),
            ..stored.clone()
        },
    });
    Ok(Some(to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_storage::Durability;

    fn elastic(partitions: u32) -> TopicConfig {
        let mut c = TopicConfig::with_partitions(partitions, Durability::Never);
        c.ranges = Some(StoredRanges::from_map(
            &RangeMap::initial(partitions).unwrap(),
        ));
        c
    }

    #[test]
    fn a_merge_applies_once_both_parents_ends_are_recorded() {
        let mut config = elastic(2);
        let map = config.range_map().unwrap();
        let change = map.plan_merge(0, 1).unwrap();
        config.ranges.as_mut().unwrap().pending = Some(PendingChange {
            epoch: change.epoch,
            parents: change.parents.clone(),
            children: change.children.clone(),
            ends: vec![None, None],
        });
        let first = recorded("s", "t", &config, 1, 7).unwrap().unwrap();
        assert_eq!(first.partitions, 2);
        let pending = first.ranges.as_ref().unwrap().pending.clone().unwrap();
        assert_eq!(pending.ends, vec![None, Some(7)]);
        // Recording the same end again changes nothing; another end is refused.
        assert!(recorded("s", "t", &first, 1, 7).unwrap().is_none());
        assert!(recorded("s", "t", &first, 1, 8).is_err());
        let done = recorded("s", "t", &first, 0, 3).unwrap().unwrap();
        assert_eq!(done.partitions, 3);
        let map = done.range_map().unwrap();
        assert!(done.ranges.as_ref().unwrap().pending.is_none());
        assert_eq!(map.get(0).unwrap().sealed, Some(3));
        assert_eq!(map.get(1).unwrap().sealed, Some(7));
        assert_eq!(map.get(2).unwrap().parents, vec![0, 1]);
        assert_eq!(map.epoch(), change.epoch + 1);
        // Nothing pending: nothing to record.
        assert!(recorded("s", "t", &done, 0, 3).unwrap().is_none());
    }
}
