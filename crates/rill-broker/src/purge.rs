//! Purging a topic's records below a point (docs/PROTOCOL.md §3.31): exact, through
//! each partition log's persisted logical start (docs/FORMAT.md §4, "Purge").
//!
//! Every partition the request names is resolved and checked before any is purged, so
//! a refused request changes nothing. Each partition's purge is then durable on its
//! own; a storage failure on one leaves the ones before it purged, and the request,
//! retried, finishes (a purge to where a log already starts changes nothing).

use rill_proto::pb;

use crate::{Broker, BrokerError};

/// Below what a purge makes records gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PurgeTarget {
    /// This offset, at most each partition's end.
    Offset(u64),
    /// The first offset at or after this time (µs), or the end.
    Timestamp(i64),
    /// Each partition's end.
    End,
}

impl PurgeTarget {
    /// The target of a request's fields.
    pub(crate) fn from_wire(r: &pb::PurgeTopicRequest) -> Result<Self, BrokerError> {
        Ok(match pb::PurgeTo::try_from(r.before) {
            Ok(pb::PurgeTo::Offset) => Self::Offset(r.offset),
            Ok(pb::PurgeTo::Timestamp) => Self::Timestamp(r.timestamp_us),
            Ok(pb::PurgeTo::End) => Self::End,
            Ok(pb::PurgeTo::Unspecified) => {
                return Err(BrokerError::InvalidRequest(
                    "a purge needs a point: an offset, a timestamp or the end".into(),
                ));
            }
            Err(_) => {
                return Err(BrokerError::InvalidRequest(format!(
                    "unknown purge point {}",
                    r.before
                )));
            }
        })
    }
}

impl Broker {
    /// Purges one partition or all of a topic below `target` and returns each one's
    /// log start afterwards (blocking: syncs, file writes and deletes).
    pub(crate) fn purge_topic(
        &self,
        stream: &str,
        topic: &str,
        partition: Option<u32>,
        target: PurgeTarget,
    ) -> Result<Vec<(u32, u64)>, BrokerError> {
        // Upkeep's gate: shutdown does not close the logs under a purge.
        let _gate = self.upkeep_gate.read();
        self.check_running()?;
        let partitions = match partition {
            Some(p) => {
                self.partition(stream, topic, p)?;
                vec![p]
            }
            None => (0..self.topic(stream, topic)?.config.partitions).collect(),
        };
        let mut points = Vec::with_capacity(partitions.len());
        for p in partitions {
            let log = self.partition(stream, topic, p)?.log()?;
            let end = log.next_offset();
            let to = match target {
                PurgeTarget::Offset(n) if n > end => {
                    return Err(BrokerError::OffsetOutOfRange {
                        stream: stream.to_owned(),
                        topic: topic.to_owned(),
                        partition: p,
                        offset: n,
                        start: log.log_start(),
                        end,
                    });
                }
                PurgeTarget::Offset(n) => n,
                PurgeTarget::Timestamp(ts) => log.offset_for_timestamp(ts)?.unwrap_or(end),
                PurgeTarget::End => end,
            };
            points.push((p, log, to));
        }
        let mut starts = Vec::with_capacity(points.len());
        for (p, log, to) in points {
            let start = log.purge_before(to)?;
            tracing::warn!(
                stream,
                topic,
                partition = p,
                log_start = start,
                "records purged"
            );
            starts.push((p, start));
        }
        Ok(starts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_points_come_from_the_wire_or_are_refused() {
        let r = |before: i32| pb::PurgeTopicRequest {
            before,
            offset: 9,
            timestamp_us: -3,
            ..Default::default()
        };
        assert_eq!(
            PurgeTarget::from_wire(&r(pb::PurgeTo::Offset as i32)).unwrap(),
            PurgeTarget::Offset(9)
        );
        assert_eq!(
            PurgeTarget::from_wire(&r(pb::PurgeTo::Timestamp as i32)).unwrap(),
            PurgeTarget::Timestamp(-3)
        );
        assert_eq!(
            PurgeTarget::from_wire(&r(pb::PurgeTo::End as i32)).unwrap(),
            PurgeTarget::End
        );
        for bad in [0, 17] {
            assert!(matches!(
                PurgeTarget::from_wire(&r(bad)),
                Err(BrokerError::InvalidRequest(_))
            ));
        }
    }
}
