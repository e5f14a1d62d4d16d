//! An operator's calls on a topic (docs/PROTOCOL.md §3.25–3.31): its consumer groups
//! and named consumers with their lag, deleting a group, resetting stored offsets,
//! altering the topic's options and purging its records. The answers are the SDK's own
//! types.

use std::time::Duration;

use bytes::Bytes;
use rill_format::Durability;
use rill_proto::{RequestBody, ResponseBody, pb};

use crate::client::{Retry, unexpected};
use crate::{ClientError, Topic};

/// A consumer group of a topic, as [`Topic::groups`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupSummary {
    /// The group's name.
    pub name: String,
    /// Its live members (0 for a group known only by its stored offsets).
    pub members: u32,
    /// Its generation; 0 while no member joined since the server started.
    pub generation: u64,
    /// Records not consumed yet, over every partition of the topic (as
    /// [`GroupPartition::lag`](crate::GroupPartition::lag) counts them).
    pub lag: u64,
}

/// A named consumer of a topic, as [`Topic::consumers`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerSummary {
    /// The consumer's name.
    pub name: String,
    /// The partitions it stored an offset for, in order.
    pub partitions: Vec<ConsumerPartition>,
    /// Records not consumed yet, over those partitions.
    pub lag: u64,
}

/// A named consumer's stored offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerPartition {
    /// The partition.
    pub partition: u32,
    /// The offset of the next record it reads (one past the last it consumed).
    pub next_offset: u64,
    /// The partition's end: the offset the next record will get.
    pub log_end: u64,
    /// `log_end - next_offset` (0 at or past the end).
    pub lag: u64,
}

/// A stored offset set by [`Topic::reset_group`] or [`Topic::reset_consumer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredOffset {
    /// The partition.
    pub partition: u32,
    /// The offset of the next record the group or consumer reads there.
    pub next_offset: u64,
}

/// Where [`Topic::reset_group`] and [`Topic::reset_consumer`] move stored offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetTo {
    /// The partition's first stored offset: read everything still stored.
    First,
    /// The partition's end: read only records appended later.
    End,
    /// This offset (the next record read is the one at it). It must lie within each
    /// partition's records, from its first stored offset to its end; otherwise the
    /// reset is refused, naming the partition, and nothing changes.
    Offset(u64),
    /// The first record at or after this time, µs since the Unix epoch (the end if
    /// every record is older).
    TimestampMicros(i64),
}

impl ResetTo {
    fn to_wire(self) -> (pb::ResetTo, u64, i64) {
        match self {
            Self::First => (pb::ResetTo::First, 0, 0),
            Self::End => (pb::ResetTo::End, 0, 0),
            Self::Offset(n) => (pb::ResetTo::Offset, n, 0),
            Self::TimestampMicros(ts) => (pb::ResetTo::Timestamp, 0, ts),
        }
    }
}

/// Below what [`Topic::purge`] makes records gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PurgeTo {
    /// This offset: the record at it is the first left. It must be at most each
    /// partition's end; otherwise the purge is refused, naming the partition, and
    /// nothing changes.
    Offset(u64),
    /// The records older than this time, µs since the Unix epoch (the first record at
    /// or after it is the first left; every record, if all are older).
    TimestampMicros(i64),
    /// Every record: each partition then starts at its end.
    End,
}

/// A partition's log start after [`Topic::purge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogStart {
    /// The partition.
    pub partition: u32,
    /// Its first offset readers may read now.
    pub log_start: u64,
}

/// What [`Topic::alter`] changes; whatever it does not name stays as it is.
///
/// ```
/// use std::time::Duration;
/// use rill_client::{Durability, TopicChanges};
///
/// let changes = TopicChanges::new()
///     .partitions(8)
///     .retention(Some(Duration::from_secs(7 * 24 * 3600)))
///     .retention_bytes(None) // no size limit any more
///     .durability(Durability::Never);
/// # let _ = changes;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicChanges {
    /// `Some(None)`: remove the limit.
    retention: Option<Option<Duration>>,
    retention_bytes: Option<Option<u64>>,
    durability: Option<Durability>,
    partitions: Option<u32>,
    auto_split: Option<Option<u64>>,
}

impl TopicChanges {
    /// Changes nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes data older than `age` (whole segments, as retention always does);
    /// `None` removes the age limit. An age below a millisecond is refused.
    pub fn retention(mut self, age: Option<Duration>) -> Self {
        self.retention = Some(age);
        self
    }

    /// Per partition, deletes the oldest data beyond `bytes`; `None` removes the size
    /// limit.
    pub fn retention_bytes(mut self, bytes: Option<u64>) -> Self {
        self.retention_bytes = Some(bytes);
        self
    }

    /// The durability policy of later appends (a move to `Always` first syncs what
    /// was appended before).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// The topic's partition count, which can only grow: fewer partitions than the
    /// topic has is refused (`INVALID_CONFIG`), since a partition's records cannot move.
    /// Keyed records route by the count (docs/PROTOCOL.md §6), so after an increase most
    /// keys go to another partition than before.
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = Some(partitions);
        self
    }

    /// An elastic topic's automatic policy (docs/RANGES.md §7): split an open range
    /// whose writes stay above `bytes_per_s` for a whole window, merge cold neighbours;
    /// `None` turns it off. The window and cooldown stay as they were (the defaults if
    /// the policy was off). A plain topic refuses it (`INVALID_CONFIG`).
    pub fn auto_split(mut self, bytes_per_s: Option<u64>) -> Self {
        self.auto_split = Some(bytes_per_s);
        self
    }

    fn to_wire(self, stream: &str, topic: &str) -> Result<pb::AlterTopicRequest, ClientError> {
        let retention_ms = match self.retention {
            Some(Some(age)) if age < Duration::from_millis(1) => {
                return Err(ClientError::InvalidArgument(format!(
                    "a retention of {age:?} is below the least, a millisecond"
                )));
            }
            Some(age) => Some(pb::LimitChange {
                value: age.map(|a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX)),
            }),
            None => None,
        };
        let (durability, interval) = match self.durability {
            None => (pb::Durability::Unspecified, None),
            Some(Durability::Always) => (pb::Durability::Always, None),
            Some(Durability::Never) => (pb::Durability::Never, None),
            Some(d @ Durability::Interval(_)) => (pb::Durability::Interval, d.interval_ms()),
        };
        Ok(pb::AlterTopicRequest {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
            retention_ms,
            retention_bytes: self.retention_bytes.map(|value| pb::LimitChange { value }),
            auto_split: self.auto_split.map(|value| pb::LimitChange { value }),
            durability: durability as i32,
            durability_interval_ms: interval,
            partitions: self.partitions,
        })
    }
}

fn stored_offsets(offsets: Vec<pb::PartitionOffset>) -> Result<Vec<StoredOffset>, ClientError> {
    offsets
        .into_iter()
        .map(|o| {
            Ok(StoredOffset {
                partition: o.partition,
                next_offset: o.offset.ok_or_else(|| {
                    ClientError::Protocol("a reset answered a partition without its offset".into())
                })?,
            })
        })
        .collect()
}

impl Topic {
    /// Every consumer group of the topic — those with live members and those with
    /// stored offsets — in name order, with its members, generation and lag. In a
    /// cluster the consumer groups' coordinator answers.
    pub async fn groups(&self) -> Result<Vec<GroupSummary>, ClientError> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let body = RequestBody::ListGroups(pb::ListGroupsRequest {
                stream: self.stream.to_string(),
                topic: self.name.to_string(),
                after,
            });
            let page = match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
                ResponseBody::ListGroups(r) => r,
                other => return Err(unexpected(&other)),
            };
            out.extend(page.groups.into_iter().map(|g| GroupSummary {
                name: g.group,
                members: g.members,
                generation: g.generation,
                lag: g.lag,
            }));
            match page.next {
                Some(next) => after = next,
                None => return Ok(out),
            }
        }
    }

    /// Every named consumer of the topic ([`Topic::consumer`]) in name order, with
    /// its stored offset and lag per partition.
    pub async fn consumers(&self) -> Result<Vec<ConsumerSummary>, ClientError> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let body = RequestBody::ListConsumers(pb::ListConsumersRequest {
                stream: self.stream.to_string(),
                topic: self.name.to_string(),
                after,
            });
            let page = match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
                ResponseBody::ListConsumers(r) => r,
                other => return Err(unexpected(&other)),
            };
            out.extend(page.consumers.into_iter().map(|c| {
                ConsumerSummary {
                    name: c.consumer,
                    lag: c.lag,
                    partitions: c
                        .partitions
                        .into_iter()
                        .map(|p| ConsumerPartition {
                            partition: p.partition,
                            next_offset: p.offset,
                            log_end: p.log_end,
                            lag: p.lag,
                        })
                        .collect(),
                }
            }));
            match page.next {
                Some(next) => after = next,
                None => return Ok(out),
            }
        }
    }

    /// Deletes consumer group `group`'s stored offsets of every partition (Kafka's
    /// `DeleteGroups`) and returns how many there were. Refused with
    /// `GROUP_NOT_EMPTY` while the group has live members (stop them first: they would
    /// store their offsets again), and with `GROUP_NOT_FOUND` for a group with neither
    /// members nor stored offsets. A group of that name joined later starts where its
    /// members' `start_at` says.
    pub async fn delete_group(&self, group: &str) -> Result<u32, ClientError> {
        let body = RequestBody::DeleteGroup(pb::DeleteGroupRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            group: group.to_owned(),
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::DeleteGroup(r) => Ok(r.offsets_deleted),
            other => Err(unexpected(&other)),
        }
    }

    /// Moves consumer group `group`'s stored offsets of `partition` (`None`: every
    /// partition) to `to`, and returns the offsets now stored. All of them change, or
    /// none: an [`ResetTo::Offset`] outside a partition's records is refused naming the
    /// partition (`OFFSET_BEFORE_START` or `OFFSET_BEYOND_END`). Refused with
    /// `GROUP_NOT_EMPTY` while the group has live members (stop them first: they would
    /// commit over it). A group that does not exist yet gets the offsets, so its first
    /// members start there.
    pub async fn reset_group(
        &self,
        group: &str,
        to: ResetTo,
        partition: Option<u32>,
    ) -> Result<Vec<StoredOffset>, ClientError> {
        let (to, offset, timestamp_us) = to.to_wire();
        let body = RequestBody::ResetGroupOffsets(pb::ResetGroupOffsetsRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            group: group.to_owned(),
            to: to as i32,
            offset,
            timestamp_us,
            partition,
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::ResetGroupOffsets(r) => stored_offsets(r.offsets),
            other => Err(unexpected(&other)),
        }
    }

    /// Moves named consumer `consumer`'s stored offsets as [`Topic::reset_group`] moves
    /// a group's. The server cannot tell whether the consumer runs: stop it first, or
    /// it stores its own offsets over the reset.
    pub async fn reset_consumer(
        &self,
        consumer: &str,
        to: ResetTo,
        partition: Option<u32>,
    ) -> Result<Vec<StoredOffset>, ClientError> {
        let (to, offset, timestamp_us) = to.to_wire();
        let body = RequestBody::ResetConsumerOffsets(pb::ResetConsumerOffsetsRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            consumer: consumer.to_owned(),
            to: to as i32,
            offset,
            timestamp_us,
            partition,
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::ResetConsumerOffsets(r) => stored_offsets(r.offsets),
            other => Err(unexpected(&other)),
        }
    }

    /// Changes the topic's options while it serves, and returns them as they are now.
    /// Retention and durability take effect on the running partitions at once; added
    /// partitions take records at once, and consumer groups assign them. This client
    /// routes keys over the new partition count from then on; other clients do once
    /// they look the topic up again (a new [`Client`](crate::Client)).
    pub async fn alter(&self, changes: TopicChanges) -> Result<crate::TopicConfig, ClientError> {
        let body = RequestBody::AlterTopic(changes.to_wire(&self.stream, &self.name)?);
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::AlterTopic(r) => {
                let config = crate::info::topic_config(r.options)?;
                self.client
                    .remember_partitions(&self.stream, &self.name, config.partitions);
                Ok(config)
            }
            other => Err(unexpected(&other)),
        }
    }
}

impl Topic {
    /// Makes the records of `partition` (`None`: of every partition) below `to` gone,
    /// exactly, as Kafka's `DeleteRecords` does, and returns each partition's log start
    /// afterwards. A read below it fails with `OFFSET_BEFORE_START` naming the new start
    /// (readers and consumers go on from there), and the partition's whole segments
    /// below it are deleted. A point at or below a partition's start changes nothing
    /// there. Every partition is checked before any is purged: [`PurgeTo::Offset`] past
    /// a partition's end is refused (`OFFSET_BEYOND_END`, naming it) with nothing
    /// purged. Stored offsets are left as they are. A cluster refuses it for now
    /// (`INVALID_REQUEST`).
    pub async fn purge(
        &self,
        to: PurgeTo,
        partition: Option<u32>,
    ) -> Result<Vec<LogStart>, ClientError> {
        let (before, offset, timestamp_us) = match to {
            PurgeTo::Offset(n) => (pb::PurgeTo::Offset, n, 0),
            PurgeTo::TimestampMicros(ts) => (pb::PurgeTo::Timestamp, 0, ts),
            PurgeTo::End => (pb::PurgeTo::End, 0, 0),
        };
        let body = RequestBody::PurgeTopic(pb::PurgeTopicRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            partition,
            before: before as i32,
            offset,
            timestamp_us,
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::PurgeTopic(r) => r
                .log_starts
                .into_iter()
                .map(|s| {
                    Ok(LogStart {
                        partition: s.partition,
                        log_start: s.offset.ok_or_else(|| {
                            ClientError::Protocol(
                                "a purge answered a partition without its start".into(),
                            )
                        })?,
                    })
                })
                .collect(),
            other => Err(unexpected(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_only_what_was_set() {
        let none = TopicChanges::new().to_wire("s", "t").unwrap();
        assert_eq!(none.retention_ms, None);
        assert_eq!(none.retention_bytes, None);
        assert_eq!(none.durability, pb::Durability::Unspecified as i32);
        assert_eq!(none.partitions, None);
        let some = TopicChanges::new()
            .retention(Some(Duration::from_secs(2)))
            .retention_bytes(None)
            .durability(Durability::Interval(Duration::from_millis(30)))
            .partitions(6)
            .to_wire("s", "t")
            .unwrap();
        assert_eq!(
            some.retention_ms,
            Some(pb::LimitChange { value: Some(2000) })
        );
        assert_eq!(some.retention_bytes, Some(pb::LimitChange { value: None }));
        assert_eq!(some.durability, pb::Durability::Interval as i32);
        assert_eq!(some.durability_interval_ms, Some(30));
        assert_eq!(some.partitions, Some(6));
        assert!(matches!(
            TopicChanges::new()
                .retention(Some(Duration::from_micros(10)))
                .to_wire("s", "t"),
            Err(ClientError::InvalidArgument(_))
        ));
    }
}
