//! The broker of a cluster node (docs/REPLICATION.md §11.1): the catalog mirrored from
//! the cluster, catalog changes and stored offsets proposed through it.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rill_proto::pb;

use crate::broker::partition_options;
use crate::broker::{Stream, Topic};
use crate::catalog::TopicConfig;
use crate::cluster::{CatalogChange, CatalogOutcome, Cluster, ClusterCatalog, OffsetName};
use crate::names::validate_name;
use crate::partition::Partition;
use crate::{Broker, BrokerError};

/// How long a request waits for the node to mirror a change it proposed.
const MIRROR_WAIT: Duration = Duration::from_secs(10);
/// How often a node looks for range changes to drive (docs/RANGES.md §9).
const RANGE_DRIVE_EVERY: Duration = Duration::from_secs(1);

/// Mirrors the cluster's applied catalog into the broker as it changes, until the
/// broker is dropped.
pub(crate) fn start_mirror(broker: &Arc<Broker>, cluster: Arc<dyn Cluster>) {
    let weak: Weak<Broker> = Arc::downgrade(broker);
    let mut catalog = cluster.catalog();
    let first = Arc::clone(&catalog.borrow_and_update());
    broker.apply_cluster_catalog(&first);
    tokio::spawn(async move {
        // A range change pending in the catalog is driven by whoever leads its parents:
        // at every change, and once a second for leaders elected meanwhile
        // (docs/RANGES.md §9).
        let mut tick = tokio::time::interval(RANGE_DRIVE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let changed = tokio::select! {
                changed = catalog.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    true
                }
                _ = tick.tick() => false,
            };
            let Some(broker) = weak.upgrade() else {
                return;
            };
            if broker.is_shutting_down() {
                return;
            }
            if changed {
                let view = Arc::clone(&catalog.borrow_and_update());
                broker.apply_cluster_catalog(&view);
            }
            broker.drive_range_changes();
        }
    });
}

impl Broker {
    fn cluster(&self) -> Option<&Arc<dyn Cluster>> {
        self.cluster.as_ref()
    }

    /// Whether this broker serves a cluster node.
    pub fn is_clustered(&self) -> bool {
        self.cluster.is_some()
    }

    /// In a cluster: this node's view of it (for `/health` and `/metrics`).
    pub fn cluster_health(&self) -> Option<crate::cluster::ClusterHealth> {
        self.cluster.as_ref().map(|c| c.health())
    }

    /// Replaces the mirrored catalog with `view`, keeping the topics that did not change
    /// (their partitions, and the long polls waiting on them).
    pub(crate) fn apply_cluster_catalog(&self, view: &ClusterCatalog) {
        if let Some((version, text)) = &view.auth {
            self.auth.apply_cluster(*version, text);
        }
        let mut streams = BTreeMap::new();
        let mut grown = Vec::new();
        {
            let old = self.read_streams();
            for (name, topics) in &view.streams {
                let mut mirrored = BTreeMap::new();
                for (topic_name, topic) in topics {
                    let before = old.get(name).and_then(|s| s.topics.get(topic_name));
                    let t = match before {
                        Some(t) if same_topic(t, topic) => Arc::clone(t),
                        _ => {
                            if let Some(b) = before
                                && topic.partitions.len() > b.partitions.len()
                            {
                                grown.push((
                                    name.clone(),
                                    topic_name.clone(),
                                    topic.config.partitions,
                                ));
                            }
                            self.mirror_topic(name, topic_name, topic, before.map(Arc::as_ref))
                        }
                    };
                    mirrored.insert(topic_name.clone(), t);
                }
                streams.insert(
                    name.clone(),
                    Stream {
                        created_us: 0,
                        topics: mirrored,
                    },
                );
            }
        }
        *self.write_streams() = streams;
        *self.cluster_members.write() = view
            .members
            .iter()
            .filter_map(|m| m.client.clone().map(|c| (m.id, c)))
            .collect();
        *self.cluster_offsets.write() = Arc::new(view.offsets.clone());
        // An alter added partitions: the groups this node coordinates assign them.
        for (stream, topic, partitions) in grown {
            self.groups.grow_topic(&stream, &topic, partitions);
        }
        self.mirrored.send_replace(view.version);
    }

    /// The broker's topic for the cluster's `topic`. The partitions of `before` (the
    /// topic as mirrored until now, if it was) whose replica is the same are kept, with
    /// their producer tables and long polls: an alter changes options and adds
    /// partitions without disturbing the others.
    fn mirror_topic(
        &self,
        stream: &str,
        name: &str,
        topic: &crate::cluster::ClusterTopic,
        before: Option<&Topic>,
    ) -> Arc<Topic> {
        let options = partition_options(&self.config, &topic.config);
        let partitions: Vec<Arc<Partition>> = topic
            .partitions
            .iter()
            .enumerate()
            .map(|(p, placement)| {
                if let Some(replica) = &placement.local {
                    // Its timer syncs the replica's log and drops its old pages from
                    // the cache, as a single node's (a log an install replaced is not).
                    self.flusher.register(&replica.log());
                }
                let kept = before.and_then(|t| t.partitions.get(p)).filter(|k| {
                    match (k.replica(), &placement.local) {
                        (Some(a), Some(b)) => Arc::ptr_eq(&a, b),
                        _ => false,
                    }
                });
                match kept {
                    Some(k) => Arc::clone(k),
                    None => Arc::new(Partition::clustered(
                        (stream.to_owned(), name.to_owned(), p as u32),
                        placement,
                        options.clone(),
                        &self.env,
                    )),
                }
            })
            .collect();
        // A range the catalog says is sealed refuses appends here too (its group holds
        // the seal).
        if let Some(map) = topic.config.range_map() {
            for r in map.ranges() {
                if let (Some(end), Some(p)) = (r.sealed, partitions.get(r.id as usize)) {
                    p.mark_sealed(end);
                }
            }
        }
        Arc::new(Topic {
            created_us: 0,
            config: topic.config.clone(),
            partitions,
        })
    }

    /// In a cluster, a name this node does not know may exist if its catalog is behind
    /// (it just started, or is cut off): then the answer is `NOT_LEADER` (transient, the
    /// client tries another node), not a final `*_NOT_FOUND`.
    pub(crate) fn unless_behind(&self, e: BrokerError) -> BrokerError {
        let Some(cluster) = self.cluster() else {
            return e;
        };
        let not_found = matches!(
            e,
            BrokerError::StreamNotFound(_)
                | BrokerError::TopicNotFound { .. }
                | BrokerError::PartitionNotFound { .. }
        );
        let mirrored = *self.mirrored.borrow() >= cluster.catalog().borrow().version;
        if not_found && !(mirrored && cluster.catalog_current()) {
            return BrokerError::NotLeader {
                what: format!("the catalog (this node is catching up: {e})"),
                leader: None,
                address: None,
            };
        }
        e
    }

    /// Fills in the leader's client address of a `NOT_LEADER` error.
    pub(crate) fn locate(&self, e: BrokerError) -> BrokerError {
        match e {
            BrokerError::NotLeader {
                what,
                leader: Some(leader),
                address: None,
            } => BrokerError::NotLeader {
                what,
                leader: Some(leader),
                address: self.cluster_members.read().get(&leader).cloned(),
            },
            other => other,
        }
    }

    /// Waits (bounded) until the mirrored catalog satisfies `done`.
    pub(crate) async fn mirrored_until(
        &self,
        what: &str,
        done: impl FnMut(&BTreeMap<String, Stream>) -> bool,
    ) -> Result<(), BrokerError> {
        self.mirrored_within(what, MIRROR_WAIT, done).await
    }

    /// Waits up to `wait` until the mirrored catalog satisfies `done`.
    pub(crate) async fn mirrored_within(
        &self,
        what: &str,
        wait: Duration,
        mut done: impl FnMut(&BTreeMap<String, Stream>) -> bool,
    ) -> Result<(), BrokerError> {
        let mut version = self.mirrored.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if done(&self.read_streams()) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, version.changed()).await {
                Ok(Ok(())) => {}
                _ => {
                    return Err(BrokerError::ClusterTimeout(format!(
                        "{what} was committed but this node did not apply it within {wait:?}"
                    )));
                }
            }
        }
    }

    pub(crate) async fn change(
        &self,
        change: CatalogChange,
    ) -> Result<CatalogOutcome, BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        cluster.change_catalog(change).await
    }

    /// `CreateStream` in a cluster.
    pub(crate) async fn cluster_create_stream(
        &self,
        name: &str,
        if_missing: bool,
    ) -> Result<bool, BrokerError> {
        validate_name("stream", name)?;
        let outcome = self
            .change(CatalogChange::CreateStream(name.to_owned()))
            .await?;
        let created = match outcome {
            CatalogOutcome::Done => true,
            CatalogOutcome::Exists if if_missing => false,
            CatalogOutcome::Exists => return Err(BrokerError::StreamExists(name.to_owned())),
            CatalogOutcome::NotFound(m) | CatalogOutcome::Conflict(m) => {
                return Err(BrokerError::InvalidRequest(m));
            }
        };
        self.mirrored_until("the stream", |s| s.contains_key(name))
            .await?;
        Ok(created)
    }

    /// `DeleteStream` in a cluster.
    pub(crate) async fn cluster_delete_stream(&self, name: &str) -> Result<(), BrokerError> {
        match self
            .change(CatalogChange::DeleteStream(name.to_owned()))
            .await?
        {
            CatalogOutcome::Done | CatalogOutcome::Exists => {}
            CatalogOutcome::NotFound(_) => {
                return Err(BrokerError::StreamNotFound(name.to_owned()));
            }
            CatalogOutcome::Conflict(m) => return Err(BrokerError::InvalidRequest(m)),
        }
        self.mirrored_until("the stream's deletion", |s| !s.contains_key(name))
            .await
    }

    /// `CreateTopic` in a cluster.
    pub(crate) async fn cluster_create_topic(
        &self,
        stream: &str,
        topic: &str,
        options: &pb::TopicOptions,
        if_missing: bool,
        create_stream: bool,
    ) -> Result<(bool, TopicConfig), BrokerError> {
        validate_name("stream", stream)?;
        validate_name("topic", topic)?;
        let config = TopicConfig::from_proto(options, self.config.default_durability)?;
        if create_stream {
            self.cluster_create_stream(stream, true).await?;
        }
        let outcome = self
            .change(CatalogChange::CreateTopic {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                config: config.clone(),
                replicas: options.replicas,
            })
            .await?;
        let created = match outcome {
            CatalogOutcome::Done => true,
            CatalogOutcome::Exists if if_missing => false,
            CatalogOutcome::Exists => {
                return Err(BrokerError::TopicExists {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                    detail: String::new(),
                });
            }
            CatalogOutcome::NotFound(_) => {
                return Err(BrokerError::StreamNotFound(stream.to_owned()));
            }
            CatalogOutcome::Conflict(m) => {
                return Err(BrokerError::TopicExists {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                    detail: format!(" with other options or replicas: {m}"),
                });
            }
        };
        self.mirrored_until("the topic", |s| {
            s.get(stream).is_some_and(|s| s.topics.contains_key(topic))
        })
        .await?;
        Ok((created, config))
    }

    /// `DeleteTopic` in a cluster.
    pub(crate) async fn cluster_delete_topic(
        &self,
        stream: &str,
        topic: &str,
    ) -> Result<(), BrokerError> {
        let change = CatalogChange::DeleteTopic {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
        };
        match self.change(change).await? {
            CatalogOutcome::Done | CatalogOutcome::Exists => {}
            CatalogOutcome::NotFound(_) => {
                return Err(if self.read_streams().contains_key(stream) {
                    BrokerError::TopicNotFound {
                        stream: stream.to_owned(),
                        topic: topic.to_owned(),
                    }
                } else {
                    BrokerError::StreamNotFound(stream.to_owned())
                });
            }
            CatalogOutcome::Conflict(m) => return Err(BrokerError::InvalidRequest(m)),
        }
        self.mirrored_until("the topic's deletion", |s| {
            s.get(stream).is_none_or(|s| !s.topics.contains_key(topic))
        })
        .await
    }

    /// Stores an offset through the cluster.
    pub(crate) async fn cluster_store_offset(
        &self,
        key: OffsetName,
        offset: u64,
    ) -> Result<(), BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        cluster.store_offsets(vec![(key, offset)]).await
    }

    /// Stores a group offset through the metadata group, from its leader only (this
    /// node: the coordinator), and waits until this node's mirror has it, so the next
    /// group request reads it.
    pub(crate) async fn cluster_store_offset_here(
        &self,
        key: OffsetName,
        offset: u64,
    ) -> Result<(), BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        let index = cluster
            .store_offsets_here(vec![(key, offset)])
            .await
            .map_err(|e| self.locate(e))?;
        self.mirrored_past(index).await
    }

    /// Deletes a group offset as [`Broker::cluster_store_offset_here`] stores one.
    pub(crate) async fn cluster_delete_offset_here(
        &self,
        key: OffsetName,
    ) -> Result<bool, BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        let (existed, index) = cluster
            .delete_offset_here(key)
            .await
            .map_err(|e| self.locate(e))?;
        self.mirrored_past(index).await?;
        Ok(existed)
    }

    /// A consumer-group request on a cluster node (docs/REPLICATION.md §11.1): only the
    /// coordinator, the metadata group's leader, answers (`NOT_LEADER` naming it
    /// otherwise). Returns the guard of `Groups::order`, held for the whole request.
    /// Each request first confirms the node's leadership with a quorum and waits until
    /// the mirror has every offset committed before (the read index); the first of a
    /// new tenure forgets the groups of earlier ones.
    pub(crate) async fn cluster_coordinate(
        &self,
    ) -> Result<tokio::sync::MutexGuard<'_, ()>, BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        let guard = self.groups.order.lock().await;
        let term = cluster.coordinator_term().map_err(|e| self.locate(e))?;
        // Confirmed with a quorum at every request: a leader that was deposed and does
        // not know it yet (paused, cut off) answers nothing from its stale state.
        let index = cluster
            .read_index_here(term)
            .await
            .map_err(|e| self.locate(e))?;
        self.mirrored_past(index).await?;
        if self.groups.term() != Some(term) {
            self.groups.start_term(term);
            tracing::info!(term, "coordinating the consumer groups");
        }
        Ok(guard)
    }

    /// Waits (bounded) until the mirror has applied the metadata entry `index`.
    async fn mirrored_past(&self, index: u64) -> Result<(), BrokerError> {
        let mut version = self.mirrored.subscribe();
        match tokio::time::timeout(MIRROR_WAIT, version.wait_for(|v| *v > index)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(BrokerError::ClusterTimeout(format!(
                "the metadata group committed entry {index} but this node did not apply it \
                 within {MIRROR_WAIT:?}"
            ))),
        }
    }

    /// Stores a named consumer's reset offsets through the cluster, all at once.
    pub(crate) async fn cluster_reset_offsets(
        &self,
        offsets: Vec<(OffsetName, u64)>,
    ) -> Result<(), BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        cluster.reset_offsets(offsets).await
    }

    /// Stores a group's reset offsets through the metadata group, all at once, from its
    /// leader only (this node: the coordinator), and waits until this node's mirror
    /// has them, as [`Broker::cluster_store_offset_here`] does.
    pub(crate) async fn cluster_reset_offsets_here(
        &self,
        offsets: Vec<(OffsetName, u64)>,
    ) -> Result<(), BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        let index = cluster
            .reset_offsets_here(offsets)
            .await
            .map_err(|e| self.locate(e))?;
        self.mirrored_past(index).await
    }

    /// Deletes every stored offset of `consumer` (a group's key) on a topic through the
    /// metadata group, from its leader only; returns how many there were.
    pub(crate) async fn cluster_delete_consumer_here(
        &self,
        stream: &str,
        topic: &str,
        consumer: &str,
    ) -> Result<u32, BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        let (deleted, index) = cluster
            .delete_consumer_here(stream, topic, consumer)
            .await
            .map_err(|e| self.locate(e))?;
        self.mirrored_past(index).await?;
        Ok(deleted)
    }

    /// Deletes a stored offset through the cluster.
    pub(crate) async fn cluster_delete_offset(&self, key: OffsetName) -> Result<bool, BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        cluster.delete_offset(key).await
    }

    /// Waits until this node's mirror of the catalog reflects every metadata entry
    /// committed before the call (the leader's read index), so what is read of it next
    /// is linearizable: a stored offset read after another node acknowledged a store is
    /// never an older one.
    pub(crate) async fn cluster_linearize(&self) -> Result<(), BrokerError> {
        let cluster = self
            .cluster()
            .ok_or_else(|| BrokerError::Internal("not a cluster node".into()))?;
        let index = cluster.read_index().await.map_err(|e| self.locate(e))?;
        self.mirrored_past(index).await
    }

    /// A stored offset as this node applied it.
    pub(crate) fn cluster_offset(&self, key: &OffsetName) -> Option<u64> {
        self.cluster_offsets.read().get(key).copied()
    }

    /// A topic's stored offsets as this node applied them.
    pub(crate) fn cluster_topic_offsets(
        &self,
        stream: &str,
        topic: &str,
    ) -> Vec<(u32, String, u64)> {
        self.cluster_offsets
            .read()
            .iter()
            .filter(|(k, _)| k.stream == stream && k.topic == topic)
            .map(|(k, &o)| (k.partition, k.consumer.clone(), o))
            .collect()
    }
}

/// Whether a mirrored topic still stands for the cluster's: same options and the same
/// replicas behind each partition.
fn same_topic(mirrored: &Topic, topic: &crate::cluster::ClusterTopic) -> bool {
    mirrored.config == topic.config
        && mirrored.partitions.len() == topic.partitions.len()
        && mirrored
            .partitions
            .iter()
            .zip(&topic.partitions)
            .all(|(p, placement)| match (p.replica(), &placement.local) {
                (Some(a), Some(b)) => Arc::ptr_eq(&a, b),
                (None, None) => true,
                _ => false,
            })
}
