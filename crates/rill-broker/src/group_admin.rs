//! Operators' requests on the consumers of a topic (docs/PROTOCOL.md §3.25–3.29):
//! listing its groups and named consumers with their lag, deleting a group, and
//! resetting the stored offsets of a group or a named consumer.
//!
//! A reset or a delete changes every offset it names at once: on a single node they
//! are one batch of the offsets log (a crash keeps all of them or none), in a cluster
//! one metadata command. A group's are refused while it has live members, checked
//! under the group lock that joins and commits take too, so no member joins between
//! the check and the change and then commits over it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use rill_proto::pb;

use crate::groups::{GROUP_KEY_PREFIX, GroupKey, group_offset_key};
use crate::names::validate_name;
use crate::offsets::OffsetKey;
use crate::{Broker, BrokerError, PartitionState};

/// Entries of one page of `ListGroups` or `ListConsumers`, at most.
pub(crate) const LIST_PAGE_MAX: usize = 1000;

/// Where a reset moves stored offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetTarget {
    /// The partition's first stored offset.
    First,
    /// The partition's end.
    End,
    /// This offset, which must lie within the partition's range.
    Offset(u64),
    /// The first offset at or after this time (µs), or the end.
    Timestamp(i64),
}

impl ResetTarget {
    /// The target of a request's fields.
    pub(crate) fn from_wire(to: i32, offset: u64, timestamp_us: i64) -> Result<Self, BrokerError> {
        Ok(match pb::ResetTo::try_from(to) {
            Ok(pb::ResetTo::First) => Self::First,
            Ok(pb::ResetTo::End) => Self::End,
            Ok(pb::ResetTo::Offset) => Self::Offset(offset),
            Ok(pb::ResetTo::Timestamp) => Self::Timestamp(timestamp_us),
            Ok(pb::ResetTo::Unspecified) => {
                return Err(BrokerError::InvalidRequest(
                    "a reset needs a target: first, end, an offset or a timestamp".into(),
                ));
            }
            Err(_) => {
                return Err(BrokerError::InvalidRequest(format!(
                    "unknown reset target {to}"
                )));
            }
        })
    }
}

/// Lag of a stored next offset against a partition's end.
fn lag(state: &PartitionState, stored: Option<u64>) -> u64 {
    let end = state.next_offset;
    end - stored.unwrap_or(state.first_offset).min(end)
}

/// The names after `after`, at most a page, and the one to continue after when more
/// follow.
fn page(names: BTreeSet<String>, after: &str) -> (Vec<String>, Option<String>) {
    let mut names: Vec<String> = names
        .into_iter()
        .filter(|n| after.is_empty() || n.as_str() > after)
        .take(LIST_PAGE_MAX + 1)
        .collect();
    let next = (names.len() > LIST_PAGE_MAX).then(|| {
        names.truncate(LIST_PAGE_MAX);
        names.last().cloned().unwrap_or_default()
    });
    (names, next)
}

impl Broker {
    /// Every group of a topic (live members or stored offsets), a page at a time.
    pub(crate) fn list_groups(
        &self,
        stream: &str,
        topic: &str,
        after: &str,
    ) -> Result<pb::ListGroupsResponse, BrokerError> {
        let (_, states) = self.describe_topic(stream, topic)?;
        let stored = self.stored_offsets(stream, topic);
        let mut offsets: BTreeMap<&str, BTreeMap<u32, u64>> = BTreeMap::new();
        for (partition, consumer, offset) in &stored {
            if let Some(group) = consumer.strip_prefix(GROUP_KEY_PREFIX) {
                offsets
                    .entry(group)
                    .or_default()
                    .insert(*partition, *offset);
            }
        }
        let mut live: BTreeMap<String, (u32, u64)> = BTreeMap::new();
        {
            let now = Instant::now();
            let mut groups = self.groups.lock();
            for ((s, t, group), c) in groups.iter_mut() {
                if s != stream || t != topic {
                    continue;
                }
                c.expire(now);
                let members = u32::try_from(c.members().count()).unwrap_or(u32::MAX);
                live.insert(group.clone(), (members, c.generation()));
            }
        }
        // A group exists while it has a live member or a stored offset (§3.16).
        let names: BTreeSet<String> = offsets
            .keys()
            .map(|g| (*g).to_owned())
            .chain(
                live.iter()
                    .filter(|(_, (members, _))| *members > 0)
                    .map(|(g, _)| g.clone()),
            )
            .collect();
        let (names, next) = page(names, after);
        let groups = names
            .into_iter()
            .map(|group| {
                let stored = offsets.get(group.as_str());
                let (members, generation) = live.get(&group).copied().unwrap_or((0, 0));
                pb::GroupSummary {
                    lag: states
                        .iter()
                        .map(|s| lag(s, stored.and_then(|o| o.get(&s.partition).copied())))
                        .sum(),
                    group,
                    members,
                    generation,
                }
            })
            .collect();
        Ok(pb::ListGroupsResponse { groups, next })
    }

    /// Every named consumer of a topic with its stored offsets and lag, a page at a
    /// time.
    pub(crate) fn list_consumers(
        &self,
        stream: &str,
        topic: &str,
        after: &str,
    ) -> Result<pb::ListConsumersResponse, BrokerError> {
        let (_, states) = self.describe_topic(stream, topic)?;
        let mut consumers: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
        for (partition, consumer, offset) in self.stored_offsets(stream, topic) {
            if !consumer.starts_with(GROUP_KEY_PREFIX) {
                consumers
                    .entry(consumer)
                    .or_default()
                    .insert(partition, offset);
            }
        }
        let (names, next) = page(consumers.keys().cloned().collect(), after);
        let consumers = names
            .into_iter()
            .map(|consumer| {
                let partitions: Vec<pb::ConsumerPartition> = consumers[&consumer]
                    .iter()
                    .filter_map(|(&partition, &offset)| {
                        let state = states.get(partition as usize)?;
                        Some(pb::ConsumerPartition {
                            partition,
                            offset,
                            log_end: state.next_offset,
                            lag: lag(state, Some(offset)),
                        })
                    })
                    .collect();
                pb::ConsumerSummary {
                    lag: partitions.iter().map(|p| p.lag).sum(),
                    consumer,
                    partitions,
                }
            })
            .collect();
        Ok(pb::ListConsumersResponse { consumers, next })
    }

    /// Where `target` puts a stored offset of `partition`: checked against the
    /// partition's range. On a cluster node a partition without a replica here has no
    /// range to resolve against: only an explicit offset is taken for it, unchecked.
    pub(crate) fn resolve_reset(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        target: ResetTarget,
    ) -> Result<u64, BrokerError> {
        let p = self.partition(stream, topic, partition)?;
        let log = match p.log() {
            Ok(log) => log,
            Err(BrokerError::NotLeader { .. }) => {
                return match target {
                    ResetTarget::Offset(n) => Ok(n),
                    _ => Err(BrokerError::InvalidRequest(format!(
                        "partition {partition} of {stream}/{topic} has no replica on the node \
                         that was asked, which cannot resolve its first offset, end or times: \
                         reset it to an explicit offset"
                    ))),
                };
            }
            Err(e) => return Err(e),
        };
        let start = log.log_start();
        let end = p.visible_end()?;
        Ok(match target {
            ResetTarget::First => start,
            ResetTarget::End => end,
            ResetTarget::Offset(n) if (start..=end).contains(&n) => n,
            ResetTarget::Offset(offset) => {
                return Err(BrokerError::OffsetOutOfRange {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    start,
                    end,
                });
            }
            ResetTarget::Timestamp(ts) => log
                .offset_for_timestamp(ts)?
                .map_or(end, |o| o.clamp(start, end)),
        })
    }

    /// The partitions a reset names (one, or all) with their new offsets (blocking:
    /// a timestamp scans the logs).
    fn resolve_resets(
        &self,
        stream: &str,
        topic: &str,
        partition: Option<u32>,
        target: ResetTarget,
    ) -> Result<Vec<(u32, u64)>, BrokerError> {
        let partitions = match partition {
            Some(p) => {
                self.partition(stream, topic, p)?;
                vec![p]
            }
            None => (0..self.topic(stream, topic)?.config.partitions).collect(),
        };
        partitions
            .into_iter()
            .map(|p| Ok((p, self.resolve_reset(stream, topic, p, target)?)))
            .collect()
    }

    /// Refuses a group change while the group has live members (expired ones are
    /// removed first).
    pub(crate) fn check_group_idle(
        groups: &mut std::collections::HashMap<GroupKey, crate::group::Coordinator>,
        key: &GroupKey,
        hint: &'static str,
    ) -> Result<(), BrokerError> {
        if let Some(c) = groups.get_mut(key) {
            c.expire(Instant::now());
            let members = c.members().count();
            if members > 0 {
                return Err(BrokerError::GroupNotEmpty {
                    group: key.2.clone(),
                    members,
                    hint,
                });
            }
        }
        Ok(())
    }

    /// Deletes every stored offset of a group on a topic; returns how many there were.
    /// Refused while it has live members, and for a group that does not exist.
    pub(crate) async fn delete_group(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<u32, BrokerError> {
        self.check_running()?;
        validate_name("group", group)?;
        let partitions = self.topic(stream, topic)?.config.partitions;
        let key: GroupKey = (stream.to_owned(), topic.to_owned(), group.to_owned());
        let consumer = format!("{GROUP_KEY_PREFIX}{group}");
        if self.is_clustered() {
            // Under `Groups::order`, taken by the dispatch (`cluster_coordinate`): no
            // join or commit of this node runs between the check and the delete.
            Self::check_group_idle(&mut self.groups.lock(), &key, DELETE_HINT)?;
            if !self.group_exists(&key, None, partitions) {
                return Err(BrokerError::GroupNotFound(group.to_owned()));
            }
            let deleted = self
                .cluster_delete_consumer_here(stream, topic, &consumer)
                .await?;
            self.groups.lock().remove(&key);
            tracing::info!(
                stream,
                topic,
                group,
                deleted,
                "group deleted through the cluster"
            );
            return Ok(deleted);
        }
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let (pending, deleted) = {
                let mut groups = broker.groups.lock();
                Self::check_group_idle(&mut groups, &key, DELETE_HINT)?;
                let keys: Vec<OffsetKey> = broker
                    .offsets
                    .for_topic(&key.0, &key.1)
                    .into_iter()
                    .filter(|(k, _)| k.consumer == consumer)
                    .map(|(k, _)| k)
                    .collect();
                if keys.is_empty() {
                    // No live member (checked above) and no stored offset.
                    return Err(BrokerError::GroupNotFound(key.2.clone()));
                }
                groups.remove(&key);
                let deleted = u32::try_from(keys.len()).unwrap_or(u32::MAX);
                let (pending, _) = broker
                    .offsets
                    .begin_many(keys.into_iter().map(|k| (k, None)).collect())?;
                (pending, deleted)
            };
            broker.offsets.finish(pending)?;
            tracing::info!(
                stream = key.0,
                topic = key.1,
                group = key.2,
                deleted,
                "group deleted"
            );
            Ok(deleted)
        })
        .await
        .map_err(|e| BrokerError::Internal(format!("group delete task failed: {e}")))?
    }

    /// Sets a group's stored offsets of one partition or all to `target`; returns them.
    /// Refused while the group has live members. A group that does not exist gets the
    /// offsets (so a new group can start where an operator put it).
    pub(crate) async fn reset_group_offsets(
        self: &Arc<Self>,
        r: &pb::ResetGroupOffsetsRequest,
    ) -> Result<Vec<pb::PartitionOffset>, BrokerError> {
        self.check_running()?;
        validate_name("group", &r.group)?;
        let target = ResetTarget::from_wire(r.to, r.offset, r.timestamp_us)?;
        let key: GroupKey = (r.stream.clone(), r.topic.clone(), r.group.clone());
        if self.is_clustered() {
            // Under `Groups::order`, as a delete.
            Self::check_group_idle(&mut self.groups.lock(), &key, RESET_HINT)?;
            let broker = Arc::clone(self);
            let (stream, topic, partition) = (r.stream.clone(), r.topic.clone(), r.partition);
            let resets = tokio::task::spawn_blocking(move || {
                broker.resolve_resets(&stream, &topic, partition, target)
            })
            .await
            .map_err(|e| BrokerError::Internal(format!("group reset task failed: {e}")))??;
            let offsets = resets
                .iter()
                .map(|&(p, o)| {
                    let k = group_offset_key(&r.stream, &r.topic, &r.group, p);
                    (crate::data::offset_name(k), o)
                })
                .collect();
            self.cluster_reset_offsets_here(offsets).await?;
            return Ok(answer(&resets));
        }
        let broker = Arc::clone(self);
        let (stream, topic, partition) = (r.stream.clone(), r.topic.clone(), r.partition);
        tokio::task::spawn_blocking(move || {
            // Resolved before the group lock is taken (a timestamp scans the logs); a
            // partition's range only moves on meanwhile.
            let resets = broker.resolve_resets(&stream, &topic, partition, target)?;
            let pending = {
                let mut groups = broker.groups.lock();
                Self::check_group_idle(&mut groups, &key, RESET_HINT)?;
                let changes = resets
                    .iter()
                    .map(|&(p, o)| (group_offset_key(&key.0, &key.1, &key.2, p), Some(o)))
                    .collect();
                broker.offsets.begin_many(changes)?.0
            };
            broker.offsets.finish(pending)?;
            tracing::info!(stream, topic, group = key.2, ?target, "group offsets reset");
            Ok(answer(&resets))
        })
        .await
        .map_err(|e| BrokerError::Internal(format!("group reset task failed: {e}")))?
    }

    /// Sets a named consumer's stored offsets of one partition or all to `target`;
    /// returns them. A consumer running meanwhile may store over them: stop it first.
    pub(crate) async fn reset_consumer_offsets(
        self: &Arc<Self>,
        r: &pb::ResetConsumerOffsetsRequest,
    ) -> Result<Vec<pb::PartitionOffset>, BrokerError> {
        self.check_running()?;
        validate_name("consumer", &r.consumer)?;
        let target = ResetTarget::from_wire(r.to, r.offset, r.timestamp_us)?;
        let broker = Arc::clone(self);
        let (stream, topic, partition) = (r.stream.clone(), r.topic.clone(), r.partition);
        let resets = tokio::task::spawn_blocking(move || {
            broker.resolve_resets(&stream, &topic, partition, target)
        })
        .await
        .map_err(|e| BrokerError::Internal(format!("consumer reset task failed: {e}")))??;
        let key = |p: u32| OffsetKey {
            stream: r.stream.clone(),
            topic: r.topic.clone(),
            partition: p,
            consumer: r.consumer.clone(),
        };
        if self.is_clustered() {
            let offsets = resets
                .iter()
                .map(|&(p, o)| (crate::data::offset_name(key(p)), o))
                .collect();
            self.cluster_reset_offsets(offsets).await?;
            return Ok(answer(&resets));
        }
        let changes = resets.iter().map(|&(p, o)| (key(p), Some(o))).collect();
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let (pending, _) = broker.offsets.begin_many(changes)?;
            broker.offsets.finish(pending)
        })
        .await
        .map_err(|e| BrokerError::Internal(format!("consumer reset task failed: {e}")))??;
        tracing::info!(
            stream = r.stream,
            topic = r.topic,
            consumer = r.consumer,
            ?target,
            "consumer offsets reset"
        );
        Ok(answer(&resets))
    }
}

const DELETE_HINT: &str = "stop them first: a live member would store its offsets again";
const RESET_HINT: &str = "stop them first: a live member would commit over the reset";

fn answer(resets: &[(u32, u64)]) -> Vec<pb::PartitionOffset> {
    resets
        .iter()
        .map(|&(partition, offset)| pb::PartitionOffset {
            partition,
            offset: Some(offset),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_every_name_once_in_order() {
        let names: BTreeSet<String> = (0..2500).map(|i| format!("g{i:05}")).collect();
        let mut seen = Vec::new();
        let mut after = String::new();
        loop {
            let (page, next) = page(names.clone(), &after);
            assert!(page.len() <= LIST_PAGE_MAX);
            seen.extend(page);
            match next {
                Some(n) => after = n,
                None => break,
            }
        }
        assert_eq!(seen, names.into_iter().collect::<Vec<_>>());
        let (empty, next) = page(BTreeSet::new(), "");
        assert!(empty.is_empty() && next.is_none());
    }

    #[test]
    fn reset_targets_come_from_the_wire_or_are_refused() {
        assert_eq!(
            ResetTarget::from_wire(pb::ResetTo::Offset as i32, 7, 0).unwrap(),
            ResetTarget::Offset(7)
        );
        assert_eq!(
            ResetTarget::from_wire(pb::ResetTo::Timestamp as i32, 0, -5).unwrap(),
            ResetTarget::Timestamp(-5)
        );
        for bad in [0, 99] {
            assert!(matches!(
                ResetTarget::from_wire(bad, 0, 0),
                Err(BrokerError::InvalidRequest(_))
            ));
        }
    }
}
