//! What admin calls answer: streams, topics, partitions, damaged ranges and groups, as
//! the SDK's own types (the wire's messages stay behind [`raw`](crate::raw)).
//!
//! Every type here is `#[non_exhaustive]`: later versions may add fields.

use std::time::Duration;

use rill_format::Durability;
use rill_proto::pb;

use crate::ClientError;

/// A stream and how many topics it has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamInfo {
    /// The stream's name.
    pub name: String,
    /// Its topics.
    pub topics: u32,
}

/// A topic's options as the broker keeps them (every default filled in).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicConfig {
    /// Partitions.
    pub partitions: u32,
    /// Delete data older than this (`None`: kept until deleted by size or by hand).
    pub retention: Option<Duration>,
    /// Per partition: delete the oldest data beyond this many bytes.
    pub retention_bytes: Option<u64>,
    /// Segment size in bytes.
    pub segment_bytes: u64,
    /// The durability policy.
    pub durability: Durability,
    /// Largest record in bytes.
    pub max_record_bytes: u32,
    /// Whether it is an elastic topic (docs/RANGES.md): its partitions are key ranges,
    /// `partitions` counts every range, sealed or open.
    pub elastic: bool,
    /// An elastic topic's automatic policy, its window and cooldown filled in; `None`:
    /// off.
    pub auto_split: Option<AutoSplit>,
}

/// An elastic topic's automatic split and merge policy (docs/RANGES.md §7): the broker
/// splits, at its middle, an open range whose write rate stayed above `bytes_per_s`
/// for a whole `window`, and merges two neighbouring open ranges that both stayed
/// below a quarter of it (together below half), never touching a range younger than
/// `cooldown`, at most one change per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AutoSplit {
    /// The write rate, in bytes per second, above which a range splits.
    pub bytes_per_s: u64,
    /// The window (default 60 s; 1 s ..= 1 day). Filled in by the broker.
    pub window: Option<Duration>,
    /// How old a range must be to be split or merged (default 5 minutes, at least two
    /// windows). Filled in by the broker.
    pub cooldown: Option<Duration>,
}

impl AutoSplit {
    /// The policy at `bytes_per_s`, with the default window and cooldown.
    pub fn new(bytes_per_s: u64) -> Self {
        Self {
            bytes_per_s,
            window: None,
            cooldown: None,
        }
    }

    /// The window over which a range's rate is judged.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// How old a range must be before the policy touches it.
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = Some(cooldown);
        self
    }
}

/// What a split or a merge of an elastic topic's ranges did; see
/// [`Topic::split_range`](crate::Topic::split_range).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RangeChange {
    /// The ranges sealed, each with the offset it was sealed at (it took appends below
    /// it, and takes none again).
    pub sealed: Vec<(u32, u64)>,
    /// The ranges opened.
    pub opened: Vec<u32>,
    /// The topic's range epoch afterwards.
    pub epoch: u64,
}

/// A topic of a stream with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicInfo {
    /// The stream's name.
    pub stream: String,
    /// The topic's name.
    pub name: String,
    /// Its options.
    pub config: TopicConfig,
}

/// A topic with the state of each partition; see [`Topic::describe`](crate::Topic::describe).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicDescription {
    /// The stream's name.
    pub stream: String,
    /// The topic's name.
    pub name: String,
    /// Its options.
    pub config: TopicConfig,
    /// Each partition, in order.
    pub partitions: Vec<PartitionInfo>,
    /// Whether it is an elastic topic (docs/RANGES.md): its partitions are key ranges.
    pub elastic: bool,
    /// An elastic topic's key ranges, by id (= partition); empty for other topics.
    pub ranges: Vec<RangeInfo>,
    /// How many splits and merges made the ranges.
    pub range_epoch: u64,
    /// The ranges as the routing map they were checked as (`None` for other topics).
    pub(crate) range_map: Option<std::sync::Arc<rill_proto::ranges::RangeMap>>,
}

/// One key range of an elastic topic (docs/RANGES.md §2): partition `id` takes the keys
/// whose routing hash is in `lo..=hi`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RangeInfo {
    /// Its partition number.
    pub id: u32,
    /// The first hash it covers.
    pub lo: u64,
    /// The last hash it covers (inclusive).
    pub hi: u64,
    /// The ranges it was split or merged from.
    pub parents: Vec<u32>,
    /// Where it was sealed (it took appends below this offset, never again), once sealed.
    pub sealed_at: Option<u64>,
    /// An open range's write rate, bytes appended per second over the last 10 s the
    /// server watched (`None`: sealed, not watched for a second yet, or an older
    /// server).
    pub bytes_per_s: Option<u64>,
}

/// One partition's offsets, size and health.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionInfo {
    /// The partition.
    pub partition: u32,
    /// The first offset still stored (retention moves it up).
    pub first_offset: u64,
    /// The offset the next record will get.
    pub next_offset: u64,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// Segment files.
    pub segments: u32,
    /// Why the partition refuses appends (a failed write or fsync, damaged data not
    /// accepted yet, ...); `None` while it takes them.
    pub failure: Option<String>,
    /// Ranges of records it cannot serve.
    pub damaged: Vec<DamagedRange>,
}

/// Records a partition cannot serve: their bytes are damaged or missing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DamagedRange {
    /// The range's first offset.
    pub from: u64,
    /// The first offset after the range; `None` while it is not known (damage at the
    /// end of the log, before an operator accepted it).
    pub to: Option<u64>,
    /// The segment file holding the damage.
    pub segment: String,
    /// The byte position of the damage in that file.
    pub position: u64,
    /// What is wrong there.
    pub reason: String,
    /// An operator accepted the loss ([`Topic::repair`](crate::Topic::repair) with
    /// `accept_data_loss`): the partition takes appends again; reads of the range
    /// still fail with [`ClientError::DataLoss`].
    pub accepted: bool,
}

/// A consumer group: members, assignment, stored offsets and lag; see
/// [`Topic::describe_group`](crate::Topic::describe_group).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupDescription {
    /// Grows with every change of the assignment.
    pub generation: u64,
    /// The members.
    pub members: Vec<GroupMember>,
    /// Each partition of the topic.
    pub partitions: Vec<GroupPartition>,
}

/// A member of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupMember {
    /// Its member id.
    pub id: String,
    /// The partitions it may read and commit.
    pub owned: Vec<u32>,
    /// Owned partitions it was asked to give up (a rebalance moving them).
    pub revoking: Vec<u32>,
    /// What it last reported about itself with its heartbeats
    /// ([`GroupConsumer::report`](crate::GroupConsumer::report)), in name order.
    pub metrics: Vec<(String, u64)>,
}

/// A partition as a consumer group sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupPartition {
    /// The partition.
    pub partition: u32,
    /// The group's stored next offset (`None`: none stored).
    pub stored_offset: Option<u64>,
    /// The partition's end: the offset the next record will get.
    pub log_end: u64,
    /// Records not consumed yet: `log_end` minus the stored offset (or minus the log
    /// start when none is stored).
    pub lag: u64,
    /// The member that owns it now.
    pub owner: Option<String>,
}

impl TryFrom<pb::TopicOptions> for TopicConfig {
    type Error = ClientError;

    fn try_from(o: pb::TopicOptions) -> Result<Self, ClientError> {
        let durability = match pb::Durability::try_from(o.durability) {
            Ok(pb::Durability::Always) => Durability::Always,
            Ok(pb::Durability::Never) => Durability::Never,
            Ok(pb::Durability::Interval) => match o.durability_interval_ms {
                Some(ms) if ms > 0 => Durability::Interval(Duration::from_millis(ms)),
                _ => {
                    return Err(ClientError::Protocol(
                        "an interval durability without an interval".into(),
                    ));
                }
            },
            _ => {
                return Err(ClientError::Protocol(format!(
                    "a topic with unknown durability {}",
                    o.durability
                )));
            }
        };
        Ok(Self {
            partitions: o.partitions,
            retention: o.retention_ms.map(Duration::from_millis),
            retention_bytes: o.retention_bytes,
            segment_bytes: o.segment_bytes.unwrap_or_default(),
            durability,
            max_record_bytes: o.max_record_bytes.unwrap_or_default(),
            elastic: o.elastic,
            auto_split: o.auto_split.map(|bytes_per_s| AutoSplit {
                bytes_per_s,
                window: o.auto_split_window_ms.map(Duration::from_millis),
                cooldown: o.auto_split_cooldown_ms.map(Duration::from_millis),
            }),
        })
    }
}

/// A split's or a merge's answer, checked: one or two ranges sealed, one or two opened.
pub(crate) fn range_change(c: Option<pb::RangeChange>) -> Result<RangeChange, ClientError> {
    let c = c.ok_or_else(|| ClientError::Protocol("a range change answered without it".into()))?;
    let sealed = c
        .sealed
        .iter()
        .map(|s| {
            s.offset.map(|o| (s.partition, o)).ok_or_else(|| {
                ClientError::Protocol("a sealed range answered without its seal".into())
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shape_ok = matches!((sealed.len(), c.opened.len()), (1, 2) | (2, 1));
    if !shape_ok || c.epoch == 0 {
        return Err(ClientError::Protocol(format!(
            "a range change sealed {} and opened {} ranges at epoch {}",
            sealed.len(),
            c.opened.len(),
            c.epoch
        )));
    }
    Ok(RangeChange {
        sealed,
        opened: c.opened,
        epoch: c.epoch,
    })
}

pub(crate) fn topic_config(o: Option<pb::TopicOptions>) -> Result<TopicConfig, ClientError> {
    o.ok_or_else(|| ClientError::Protocol("a topic answered without its options".into()))?
        .try_into()
}

impl From<pb::StreamInfo> for StreamInfo {
    fn from(s: pb::StreamInfo) -> Self {
        Self {
            name: s.name,
            topics: s.topics,
        }
    }
}

impl TryFrom<pb::TopicSummary> for TopicInfo {
    type Error = ClientError;

    fn try_from(t: pb::TopicSummary) -> Result<Self, ClientError> {
        Ok(Self {
            stream: t.stream,
            name: t.topic,
            config: topic_config(t.options)?,
        })
    }
}

impl TryFrom<pb::DescribeTopicResponse> for TopicDescription {
    type Error = ClientError;

    fn try_from(d: pb::DescribeTopicResponse) -> Result<Self, ClientError> {
        let elastic = d.options.as_ref().is_some_and(|o| o.elastic);
        let ranges: Vec<RangeInfo> = d
            .ranges
            .into_iter()
            .map(|r| RangeInfo {
                id: r.id,
                lo: r.lo,
                hi: r.hi,
                parents: r.parents,
                sealed_at: r.sealed_at,
                bytes_per_s: r.bytes_per_s,
            })
            .collect();
        // The map comes from outside: checked whole before anyone routes by it.
        let mut range_map = None;
        if elastic || !ranges.is_empty() {
            let map = rill_proto::ranges::RangeMap::from_ranges(
                ranges
                    .iter()
                    .map(|r| rill_proto::ranges::Range {
                        id: r.id,
                        lo: r.lo,
                        hi: r.hi,
                        parents: r.parents.clone(),
                        sealed: r.sealed_at,
                    })
                    .collect(),
                d.range_epoch,
            )
            .map_err(|e| ClientError::Protocol(format!("the topic's ranges: {e}")))?;
            if !elastic || map.ranges().len() != d.partitions.len() {
                return Err(ClientError::Protocol(format!(
                    "a topic described with {} ranges and {} partitions (elastic: {elastic})",
                    map.ranges().len(),
                    d.partitions.len()
                )));
            }
            range_map = Some(std::sync::Arc::new(map));
        }
        Ok(Self {
            stream: d.stream,
            name: d.topic,
            config: topic_config(d.options)?,
            partitions: d.partitions.into_iter().map(PartitionInfo::from).collect(),
            elastic,
            ranges,
            range_epoch: d.range_epoch,
            range_map,
        })
    }
}

impl From<pb::PartitionInfo> for PartitionInfo {
    fn from(p: pb::PartitionInfo) -> Self {
        Self {
            partition: p.partition,
            first_offset: p.first_offset,
            next_offset: p.next_offset,
            size_bytes: p.size_bytes,
            segments: p.segments,
            failure: (!p.failure.is_empty()).then_some(p.failure),
            damaged: p.damaged.into_iter().map(DamagedRange::from).collect(),
        }
    }
}

impl From<pb::DamagedRange> for DamagedRange {
    fn from(d: pb::DamagedRange) -> Self {
        Self {
            from: d.from_offset,
            to: d.to_offset,
            segment: d.segment,
            position: d.position,
            reason: d.reason,
            accepted: d.accepted,
        }
    }
}

impl From<pb::DescribeGroupResponse> for GroupDescription {
    fn from(g: pb::DescribeGroupResponse) -> Self {
        Self {
            generation: g.generation,
            members: g
                .members
                .into_iter()
                .map(|m| GroupMember {
                    id: m.member_id,
                    owned: m.owned,
                    revoking: m.revoke,
                    metrics: m.metrics.into_iter().map(|x| (x.name, x.value)).collect(),
                })
                .collect(),
            partitions: g
                .partitions
                .into_iter()
                .map(|p| GroupPartition {
                    partition: p.partition,
                    stored_offset: p.stored_offset,
                    log_end: p.log_end,
                    lag: p.lag,
                    owner: p.owner,
                })
                .collect(),
        }
    }
}

/// A node of a cluster, in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterNodeInfo {
    /// Its id.
    pub id: u64,
    /// Its node-to-node address.
    pub peer: String,
    /// Its client address, once it registered.
    pub client: Option<String>,
    /// Whether it answered the node that was asked, just now.
    pub up: bool,
    /// Whether it leads the metadata group (the controller: catalog changes and consumer
    /// groups), as the node that was asked knows.
    pub controller: bool,
}

/// A partition's replication, in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterPartitionInfo {
    /// Its stream.
    pub stream: String,
    /// Its topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// Its leader; `None` while none is known.
    pub leader: Option<u64>,
    /// Its replicas (node ids).
    pub replicas: Vec<u64>,
    /// Per follower the leader heard from: records it is behind.
    pub lag: std::collections::BTreeMap<u64, u64>,
    /// The leader's high watermark.
    pub high_watermark: u64,
}

/// The nodes of a cluster and its partitions' replication
/// ([`Client::cluster_status`](crate::Client::cluster_status)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterStatus {
    /// The nodes, by id.
    pub nodes: Vec<ClusterNodeInfo>,
    /// Every partition of every topic.
    pub partitions: Vec<ClusterPartitionInfo>,
}

impl From<pb::ClusterStatusResponse> for ClusterStatus {
    fn from(r: pb::ClusterStatusResponse) -> Self {
        Self {
            nodes: r
                .nodes
                .into_iter()
                .map(|n| ClusterNodeInfo {
                    id: n.id,
                    peer: n.peer,
                    client: (!n.client.is_empty()).then_some(n.client),
                    up: n.up,
                    controller: n.controller,
                })
                .collect(),
            partitions: r
                .partitions
                .into_iter()
                .map(|p| ClusterPartitionInfo {
                    stream: p.stream,
                    topic: p.topic,
                    partition: p.partition,
                    leader: p.leader,
                    replicas: p.replicas,
                    lag: p.lag.into_iter().collect(),
                    high_watermark: p.high_watermark,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(
        elastic: bool,
        ranges: Vec<pb::RangeInfo>,
        partitions: u32,
    ) -> pb::DescribeTopicResponse {
        pb::DescribeTopicResponse {
            stream: "s".into(),
            topic: "t".into(),
            options: Some(pb::TopicOptions {
                partitions,
                elastic,
                durability: pb::Durability::Never as i32,
                segment_bytes: Some(1 << 20),
                max_record_bytes: Some(1 << 20),
                ..Default::default()
            }),
            partitions: (0..partitions)
                .map(|p| pb::PartitionInfo {
                    partition: p,
                    ..Default::default()
                })
                .collect(),
            ranges,
            range_epoch: 1,
        }
    }

    fn range(
        id: u32,
        lo: u64,
        hi: u64,
        parents: Vec<u32>,
        sealed_at: Option<u64>,
    ) -> pb::RangeInfo {
        pb::RangeInfo {
            id,
            lo,
            hi,
            parents,
            sealed_at,
            bytes_per_s: None,
        }
    }

    #[test]
    fn a_described_topics_ranges_are_checked_whole() {
        let split = || {
            vec![
                range(0, 0, u64::MAX, vec![], Some(5)),
                range(1, 0, (1 << 63) - 1, vec![0], None),
                range(2, 1 << 63, u64::MAX, vec![0], None),
            ]
        };
        let d = TopicDescription::try_from(described(true, split(), 3)).unwrap();
        assert!(d.elastic);
        assert_eq!(d.range_epoch, 1);
        assert_eq!(d.ranges[0].sealed_at, Some(5));
        assert_eq!(d.ranges[2].parents, vec![0]);
        // A plain topic has none.
        let d = TopicDescription::try_from(described(false, vec![], 2)).unwrap();
        assert!(!d.elastic && d.ranges.is_empty());
        // What a server must not send: a gap, ranges of a plain topic, an elastic topic
        // without ranges, and a count that disagrees with its partitions.
        let mut gap = split();
        gap[2].lo += 1;
        for (what, bad) in [
            ("gap", described(true, gap, 3)),
            ("plain with ranges", described(false, split(), 3)),
            ("elastic without", described(true, vec![], 3)),
            ("count", described(true, split(), 4)),
        ] {
            assert!(
                matches!(
                    TopicDescription::try_from(bad),
                    Err(ClientError::Protocol(_))
                ),
                "{what} was accepted"
            );
        }
    }
}
