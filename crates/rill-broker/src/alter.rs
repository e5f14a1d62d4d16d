//! Changing a topic's options while it serves (docs/PROTOCOL.md §3.30): retention,
//! durability and partitions, applied to the catalog first (write-ahead, as every
//! catalog change) and then to the live partition logs, so they take effect without a
//! restart.
//!
//! Crash analysis of a single node's alter, step by step (the answer comes after the
//! last one):
//!
//! 1. Added partitions' directories are created and synced: a crash leaves directories
//!    the catalog does not count, removed at the next open (and before the partition is
//!    added again).
//! 2. The catalog with the new options is saved (`catalog.json` replaced atomically):
//!    before the rename, the old options stand; after, the new ones, and the next open
//!    opens every partition with them.
//! 3. The partitions take the new durability and retention in memory, then the new
//!    topic (with the added partitions) replaces the old one: a crash here is a restart
//!    with the saved catalog, which is what step 3 was making true in memory.

use std::time::Duration;

use rill_proto::pb;
use rill_storage::Durability;

use crate::broker::partition_options;
use crate::catalog::TopicConfig;
use crate::{Broker, BrokerError};

/// What an `AlterTopic` asks to change; `None` leaves an option as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TopicChanges {
    /// The new age limit in ms (`Some(None)`: no limit).
    pub(crate) retention_ms: Option<Option<u64>>,
    /// The new size limit per partition (`Some(None)`: no limit).
    pub(crate) retention_bytes: Option<Option<u64>>,
    /// The new durability policy.
    pub(crate) durability: Option<Durability>,
    /// The new partition count (only ever more).
    pub(crate) partitions: Option<u32>,
    /// An elastic topic's new policy threshold (`Some(None)`: off).
    pub(crate) auto_split: Option<Option<u64>>,
}

impl TopicChanges {
    /// The changes a request asks for, refusing what it cannot mean.
    pub(crate) fn from_proto(r: &pb::AlterTopicRequest) -> Result<Self, BrokerError> {
        let durability = match pb::Durability::try_from(r.durability) {
            Ok(pb::Durability::Unspecified) => None,
            Ok(pb::Durability::Always) => Some(Durability::Always),
            Ok(pb::Durability::Never) => Some(Durability::Never),
            Ok(pb::Durability::Interval) => Some(Durability::Interval(Duration::from_millis(
                r.durability_interval_ms.ok_or_else(|| {
                    BrokerError::InvalidConfig("interval durability needs an interval in ms".into())
                })?,
            ))),
            Err(_) => {
                return Err(BrokerError::InvalidConfig(format!(
                    "unknown durability {}",
                    r.durability
                )));
            }
        };
        if r.durability_interval_ms.is_some()
            && !matches!(durability, Some(Durability::Interval(_)))
        {
            return Err(BrokerError::InvalidConfig(
                "durability_interval_ms goes with durability INTERVAL".into(),
            ));
        }
        Ok(Self {
            retention_ms: r.retention_ms.map(|c| c.value),
            retention_bytes: r.retention_bytes.map(|c| c.value),
            durability,
            partitions: r.partitions,
            auto_split: r.auto_split.map(|c| c.value),
        })
    }

    /// `config` with the changes, checked as a new topic's options are. Fewer
    /// partitions than `config` has is `INVALID_CONFIG`: a partition's records cannot
    /// go anywhere else.
    pub(crate) fn applied_to(
        &self,
        config: &TopicConfig,
        stream: &str,
        topic: &str,
    ) -> Result<TopicConfig, BrokerError> {
        let mut new = config.clone();
        if let Some(p) = self.partitions {
            if config.ranges.is_some() && p != config.partitions {
                return Err(BrokerError::InvalidConfig(format!(
                    "{stream}/{topic} is elastic: it grows by splitting ranges, not by \
                     adding partitions (docs/RANGES.md)"
                )));
            }
            if p < config.partitions {
                return Err(BrokerError::InvalidConfig(format!(
                    "partitions can only be added: {stream}/{topic} has {}, not {p} \
                     (a partition's records cannot move to another)",
                    config.partitions
                )));
            }
            new.partitions = p;
        }
        if let Some(r) = self.retention_ms {
            new.retention_ms = r;
        }
        if let Some(r) = self.retention_bytes {
            new.retention_bytes = r;
        }
        if let Some(d) = self.durability {
            new.durability = d;
        }
        match self.auto_split {
            None => {}
            Some(None) => new.auto_split = None,
            // A new threshold keeps the window and cooldown the policy had.
            Some(Some(rate)) => {
                new.auto_split = Some(match config.auto_split {
                    Some(a) => crate::catalog::AutoSplit {
                        bytes_per_s: rate,
                        ..a
                    },
                    None => crate::catalog::AutoSplit::new(rate, None, None),
                });
            }
        }
        new.validate()?;
        Ok(new)
    }
}

impl Broker {
    /// Alters a topic on a single node (blocking: files and fsyncs) and returns its
    /// options afterwards. Changing nothing (or to what it is) is not an error.
    pub(crate) fn alter_topic(
        &self,
        stream: &str,
        topic: &str,
        changes: &TopicChanges,
    ) -> Result<TopicConfig, BrokerError> {
        self.check_running()?;
        let _admin = self.admin.lock();
        let old = self.topic(stream, topic)?;
        let config = changes.applied_to(&old.config, stream, topic)?;
        if config == old.config {
            return Ok(config);
        }
        // Step 1: the added partitions' files.
        let options = partition_options(&self.config, &config);
        let range = (old.config.partitions, config.partitions);
        let added = self.create_partitions(stream, topic, range, &options)?;
        // Step 2: the catalog.
        if let Err(e) = self.save_topic_config(stream, topic, &config) {
            self.remove_partitions(stream, topic, range.0, &added);
            return Err(e);
        }
        // Step 3: memory and the live logs.
        for (i, p) in old.partitions.iter().enumerate() {
            if let Err(e) = p.retune(&options.log) {
                // Poisoned by a failed sync: reopened with the new options (§3.8).
                tracing::warn!(stream, topic, partition = i, error = %e, "a partition did not take the altered options at once");
            }
            self.register_flush(p);
        }
        self.replace_topic(stream, topic, &old, config.clone(), added);
        if config.partitions > old.config.partitions {
            self.groups.grow_topic(stream, topic, config.partitions);
        }
        tracing::info!(stream, topic, ?config, "topic altered");
        Ok(config)
    }
}

impl Broker {
    /// Alters a topic in a cluster (docs/REPLICATION.md §11.1): one metadata command,
    /// made against the options as this node's mirror has them once it is current (a
    /// compare-and-set: an alter committed meanwhile makes it fail, never lost), with
    /// the added partitions placed as a new topic's. Every node then changes its
    /// replicas' logs and starts the added partitions' replicas as it applies it; the
    /// answer comes once this node's mirror shows the new options.
    pub(crate) async fn cluster_alter_topic(
        &self,
        stream: &str,
        topic: &str,
        changes: &TopicChanges,
    ) -> Result<TopicConfig, BrokerError> {
        self.cluster_linearize().await?;
        let from = self.topic(stream, topic)?.config.clone();
        let to = changes.applied_to(&from, stream, topic)?;
        if to == from {
            return Ok(to);
        }
        let change = crate::cluster::CatalogChange::AlterTopic {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
            from,
            to: to.clone(),
        };
        match self.change(change).await? {
            crate::cluster::CatalogOutcome::Done | crate::cluster::CatalogOutcome::Exists => {}
            crate::cluster::CatalogOutcome::NotFound(_) => {
                return Err(BrokerError::TopicNotFound {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                });
            }
            crate::cluster::CatalogOutcome::Conflict(m) => {
                return Err(BrokerError::InvalidRequest(m));
            }
        }
        self.mirrored_until("the altered topic", |s| {
            s.get(stream)
                .and_then(|s| s.topics.get(topic))
                .is_some_and(|t| t.config == to)
        })
        .await?;
        tracing::info!(stream, topic, config = ?to, "topic altered through the cluster");
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> pb::AlterTopicRequest {
        pb::AlterTopicRequest {
            stream: "s".into(),
            topic: "t".into(),
            ..Default::default()
        }
    }

    #[test]
    fn changes_set_clear_or_keep_each_option() {
        let mut config = TopicConfig::with_partitions(2, Durability::Always);
        config.retention_ms = Some(1000);
        let keep = TopicChanges::from_proto(&request()).unwrap();
        assert_eq!(keep.applied_to(&config, "s", "t").unwrap(), config);
        let r = pb::AlterTopicRequest {
            retention_ms: Some(pb::LimitChange { value: None }),
            retention_bytes: Some(pb::LimitChange { value: Some(4096) }),
            durability: pb::Durability::Interval as i32,
            durability_interval_ms: Some(50),
            partitions: Some(3),
            ..request()
        };
        let new = TopicChanges::from_proto(&r)
            .unwrap()
            .applied_to(&config, "s", "t")
            .unwrap();
        assert_eq!(new.retention_ms, None);
        assert_eq!(new.retention_bytes, Some(4096));
        assert_eq!(
            new.durability,
            Durability::Interval(Duration::from_millis(50))
        );
        assert_eq!(new.partitions, 3);
    }

    #[test]
    fn bad_changes_are_refused_with_a_reason() {
        let config = TopicConfig::with_partitions(4, Durability::Always);
        let refused = |r: pb::AlterTopicRequest| match TopicChanges::from_proto(&r)
            .and_then(|c| c.applied_to(&config, "s", "t"))
        {
            Err(BrokerError::InvalidConfig(m)) => m,
            other => panic!("{other:?}"),
        };
        let fewer = refused(pb::AlterTopicRequest {
            partitions: Some(2),
            ..request()
        });
        assert!(
            fewer.contains("can only be added") && fewer.contains("has 4, not 2"),
            "{fewer}"
        );
        let no_interval = refused(pb::AlterTopicRequest {
            durability: pb::Durability::Interval as i32,
            ..request()
        });
        assert!(no_interval.contains("needs an interval"), "{no_interval}");
        let stray = refused(pb::AlterTopicRequest {
            durability_interval_ms: Some(5),
            ..request()
        });
        assert!(stray.contains("goes with durability INTERVAL"), "{stray}");
        let zero = refused(pb::AlterTopicRequest {
            retention_ms: Some(pb::LimitChange { value: Some(0) }),
            ..request()
        });
        assert!(zero.contains("positive"), "{zero}");
        let unknown = refused(pb::AlterTopicRequest {
            durability: 99,
            ..request()
        });
        assert!(unknown.contains("unknown durability"), "{unknown}");
        let too_many = refused(pb::AlterTopicRequest {
            partitions: Some(5000),
            ..request()
        });
        assert!(too_many.contains("partitions must be"), "{too_many}");
    }
}
