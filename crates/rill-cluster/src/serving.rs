//! A cluster node as the broker's seam (docs/REPLICATION.md §11.1): [`NodeCluster`]
//! implements `rill_broker::cluster::Cluster` over a [`ClusterNode`], and a [`Replica`]
//! is a `ReplicaLog`. The catalog the broker mirrors is the applied metadata, with the
//! replicas the node runs, published after each reconciliation.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::ClientWriteError;
use openraft::impls::ProgressResponder;
use rill_broker::BrokerError;
use rill_broker::TopicConfig;
use rill_broker::cluster::{
    CatalogChange, CatalogOutcome, Cluster, ClusterCatalog, ClusterFuture, ClusterMember,
    ClusterTopic, Commit, OffsetName, Placement, ReplicaLog,
};
use rill_storage::PartitionLog;
use tokio::sync::watch;

use crate::meta::{MetaCommand, MetaResponse, MetaState, OffsetKey, TopicSpec};
use crate::node::{ClusterNode, NodeError, Replica};
use crate::partition::{PartitionCommand, PartitionResponse};
use crate::peer::PartitionId;

/// The broker's view of a cluster node.
#[derive(Debug, Clone)]
pub struct NodeCluster {
    node: ClusterNode,
}

impl NodeCluster {
    /// The seam over `node`.
    pub fn new(node: ClusterNode) -> Self {
        Self { node }
    }

    /// The node.
    pub fn node(&self) -> &ClusterNode {
        &self.node
    }
}

fn cluster_error(e: NodeError) -> BrokerError {
    match e {
        NodeError::NotLeader { leader } => BrokerError::NotLeader {
            what: "the metadata group".into(),
            leader,
            address: None,
        },
        NodeError::Timeout(d) => {
            BrokerError::ClusterTimeout(format!("the metadata group did not commit within {d:?}"))
        }
        other => BrokerError::ClusterTimeout(other.to_string()),
    }
}

fn outcome(response: MetaResponse) -> CatalogOutcome {
    match response {
        MetaResponse::Exists => CatalogOutcome::Exists,
        MetaResponse::NotFound(m) => CatalogOutcome::NotFound(m),
        MetaResponse::Conflict(m) => CatalogOutcome::Conflict(m),
        _ => CatalogOutcome::Done,
    }
}

/// The replicas of partition `p` of a topic with `replicas` replicas on `nodes` (sorted
/// ids): round-robin from the partition's number, the same on whichever node places it.
pub fn place(nodes: &[u64], partitions: u32, replicas: u32) -> Vec<Vec<u64>> {
    let n = nodes.len();
    (0..partitions as usize)
        .map(|p| (0..replicas as usize).map(|i| nodes[(p + i) % n]).collect())
        .collect()
}

impl Cluster for NodeCluster {
    fn node_id(&self) -> u64 {
        self.node.id()
    }

    fn change_catalog(&self, change: CatalogChange) -> ClusterFuture<'_, CatalogOutcome> {
        Box::pin(async move {
            let command = match change {
                CatalogChange::CreateStream(name) => MetaCommand::CreateStream { name },
                CatalogChange::DeleteStream(name) => MetaCommand::DeleteStream { name },
                CatalogChange::DeleteTopic { stream, topic } => {
                    MetaCommand::DeleteTopic { stream, topic }
                }
                CatalogChange::AlterTopic {
                    stream,
                    topic,
                    from,
                    to,
                } => match self.alter_command(stream, topic, &from, &to).await? {
                    Ok(command) => command,
                    Err(outcome) => return Ok(outcome),
                },
                CatalogChange::CreateTopic {
                    stream,
                    topic,
                    config,
                    replicas,
                } => {
                    let nodes = self.node.node_ids();
                    let n = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
                    let replicas = replicas.unwrap_or(n.min(3));
                    if !(1..=n).contains(&replicas) {
                        return Err(BrokerError::InvalidConfig(format!(
                            "replicas {replicas} must be between 1 and the cluster's {n} nodes"
                        )));
                    }
                    let options = serde_json::to_vec(&config)
                        .map_err(|e| BrokerError::Internal(e.to_string()))?;
                    MetaCommand::CreateTopic {
                        stream,
                        topic,
                        spec: TopicSpec {
                            replicas: place(&nodes, config.partitions, replicas),
                            options,
                            // Never 0, which marks topics from before incarnations.
                            incarnation: rand::random::<u64>() | 1,
                        },
                    }
                }
            };
            let (response, index) = self
                .node
                .propose_indexed(command)
                .await
                .map_err(cluster_error)?;
            // Answer once this node applied it too (and started its replicas).
            self.node.wait_published(index).await?;
            Ok(outcome(response))
        })
    }

    fn catalog(&self) -> watch::Receiver<Arc<ClusterCatalog>> {
        self.node.catalog()
    }

    fn store_offsets(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, ()> {
        Box::pin(async move {
            let offsets = offsets
                .into_iter()
                .map(|(k, o)| (offset_key(k), o))
                .collect();
            let (response, index) = self
                .node
                .propose_indexed(MetaCommand::StoreOffsets { offsets })
                .await
                .map_err(cluster_error)?;
            match response {
                MetaResponse::Stored { refused } if !refused.is_empty() => {
                    Err(BrokerError::InvalidRequest(
                        "the topic or partition of the offset no longer exists".into(),
                    ))
                }
                _ => self.node.wait_published(index).await,
            }
        })
    }

    fn catalog_current(&self) -> bool {
        self.node.metadata_current()
    }

    fn replace_auth(&self, expected: u64, text: Arc<str>) -> ClusterFuture<'_, CatalogOutcome> {
        Box::pin(async move {
            let (response, index) = self
                .node
                .propose_indexed(MetaCommand::ReplaceAuth { expected, text })
                .await
                .map_err(cluster_error)?;
            self.node.wait_published(index).await?;
            Ok(outcome(response))
        })
    }

    fn health(&self) -> rill_broker::cluster::ClusterHealth {
        self.node.health()
    }

    fn status(&self) -> ClusterFuture<'_, rill_broker::cluster::ClusterStatus> {
        Box::pin(async move { Ok(self.node.status().await) })
    }

    fn coordinator_term(&self) -> Result<u64, BrokerError> {
        self.node.coordinator_term().map_err(|e| match e {
            NodeError::NotLeader { leader } => BrokerError::NotLeader {
                what: "the consumer groups' coordinator (the metadata group's leader)".into(),
                leader,
                address: None,
            },
            other => cluster_error(other),
        })
    }

    fn read_index_here(&self, term: u64) -> ClusterFuture<'_, u64> {
        Box::pin(async move {
            self.node.read_index_here(term).await.map_err(|e| match e {
                NodeError::NotLeader { leader } => BrokerError::NotLeader {
                    what: "the consumer groups' coordinator (the metadata group's leader)".into(),
                    leader,
                    address: None,
                },
                other => cluster_error(other),
            })
        })
    }

    fn store_offsets_here(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, u64> {
        Box::pin(async move {
            let offsets = offsets
                .into_iter()
                .map(|(k, o)| (offset_key(k), o))
                .collect();
            let (response, index) = self
                .node
                .propose_here(MetaCommand::StoreOffsets { offsets })
                .await
                .map_err(cluster_error)?;
            match response {
                MetaResponse::Stored { refused } if !refused.is_empty() => {
                    Err(BrokerError::InvalidRequest(
                        "the topic or partition of the offset no longer exists".into(),
                    ))
                }
                _ => Ok(index),
            }
        })
    }

    fn delete_offset_here(&self, key: OffsetName) -> ClusterFuture<'_, (bool, u64)> {
        Box::pin(async move {
            let (response, index) = self
                .node
                .propose_here(MetaCommand::DeleteOffset {
                    key: offset_key(key),
                })
                .await
                .map_err(cluster_error)?;
            Ok((matches!(response, MetaResponse::Deleted(true)), index))
        })
    }

    fn reset_offsets(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, ()> {
        Box::pin(async move {
            let offsets = offsets
                .into_iter()
                .map(|(k, o)| (offset_key(k), o))
                .collect();
            let (response, index) = self
                .node
                .propose_indexed(MetaCommand::ResetOffsets { offsets })
                .await
                .map_err(cluster_error)?;
            reset_outcome(response)?;
            self.node.wait_published(index).await
        })
    }

    fn reset_offsets_here(&self, offsets: Vec<(OffsetName, u64)>) -> ClusterFuture<'_, u64> {
        Box::pin(async move {
            let offsets = offsets
                .into_iter()
                .map(|(k, o)| (offset_key(k), o))
                .collect();
            let (response, index) = self
                .node
                .propose_here(MetaCommand::ResetOffsets { offsets })
                .await
                .map_err(cluster_error)?;
            reset_outcome(response)?;
            Ok(index)
        })
    }

    fn delete_consumer_here(
        &self,
        stream: &str,
        topic: &str,
        consumer: &str,
    ) -> ClusterFuture<'_, (u32, u64)> {
        let command = MetaCommand::DeleteConsumer {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
            consumer: consumer.to_owned(),
        };
        Box::pin(async move {
            let (response, index) = self
                .node
                .propose_here(command)
                .await
                .map_err(cluster_error)?;
            match response {
                MetaResponse::DeletedCount(n) => Ok((n, index)),
                other => Err(BrokerError::Internal(format!(
                    "deleting a consumer's offsets answered {other}"
                ))),
            }
        })
    }

    fn read_index(&self) -> ClusterFuture<'_, u64> {
        Box::pin(async move { self.node.read_index().await.map_err(cluster_error) })
    }

    fn delete_offset(&self, key: OffsetName) -> ClusterFuture<'_, bool> {
        Box::pin(async move {
            let (response, index) = self
                .node
                .propose_indexed(MetaCommand::DeleteOffset {
                    key: offset_key(key),
                })
                .await
                .map_err(cluster_error)?;
            self.node.wait_published(index).await?;
            Ok(matches!(response, MetaResponse::Deleted(true)))
        })
    }
}

/// A reset's answer: refused whole when a partition it names no longer exists.
fn reset_outcome(response: MetaResponse) -> Result<(), BrokerError> {
    match response {
        MetaResponse::NotFound(what) => Err(BrokerError::InvalidRequest(format!(
            "{what} no longer exists: no offset was reset"
        ))),
        _ => Ok(()),
    }
}

impl NodeCluster {
    /// The metadata command of an alter from `from` to `to`, made against the options
    /// as this node applied them (the proposer made sure they are current): the command
    /// is a compare-and-set on their bytes, and the added partitions are placed as a
    /// new topic's, with the topic's replica count. An outcome instead when the topic
    /// is gone or is no longer at `from`.
    async fn alter_command(
        &self,
        stream: String,
        topic: String,
        from: &TopicConfig,
        to: &TopicConfig,
    ) -> Result<Result<MetaCommand, CatalogOutcome>, BrokerError> {
        let state = self.node.metadata().await;
        let Some(spec) = state.topic(&stream, &topic) else {
            return Ok(Err(CatalogOutcome::NotFound(format!(
                "topic {stream}/{topic}"
            ))));
        };
        let current: TopicConfig = serde_json::from_slice(&spec.options)
            .map_err(|e| BrokerError::Internal(format!("{stream}/{topic}'s options: {e}")))?;
        if current != *from {
            return Ok(Err(CatalogOutcome::Conflict(format!(
                "{stream}/{topic} was altered meanwhile: try again"
            ))));
        }
        let have = spec.partitions();
        let per_partition = spec
            .replicas
            .first()
            .map_or(1, |r| u32::try_from(r.len()).unwrap_or(u32::MAX));
        let add = if to.partitions > have {
            place(&self.node.node_ids(), to.partitions, per_partition).split_off(have as usize)
        } else {
            Vec::new()
        };
        Ok(Ok(MetaCommand::AlterTopic {
            expected: spec.options.clone(),
            options: serde_json::to_vec(to).map_err(|e| BrokerError::Internal(e.to_string()))?,
            add,
            stream,
            topic,
        }))
    }
}

fn offset_key(k: OffsetName) -> OffsetKey {
    OffsetKey {
        stream: k.stream,
        topic: k.topic,
        partition: k.partition,
        consumer: k.consumer,
    }
}

/// The catalog the broker mirrors: the applied metadata with this node's replicas.
pub(crate) fn catalog_view(
    version: u64,
    state: &MetaState,
    peers: &BTreeMap<u64, String>,
    replicas: &std::collections::HashMap<PartitionId, Arc<Replica>>,
) -> ClusterCatalog {
    let mut streams = BTreeMap::new();
    for (stream, topics) in &state.streams {
        let mut view = BTreeMap::new();
        for (topic, spec) in topics {
            let config: TopicConfig = match serde_json::from_slice(&spec.options) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(stream, topic, error = %e, "a topic's options do not decode: not served");
                    continue;
                }
            };
            let partitions = spec
                .replicas
                .iter()
                .enumerate()
                .map(|(p, set)| {
                    let id = PartitionId {
                        stream: stream.clone(),
                        topic: topic.clone(),
                        partition: p as u32,
                    };
                    Placement {
                        replicas: set.clone(),
                        local: replicas
                            .get(&id)
                            .map(|r| Arc::clone(r) as Arc<dyn ReplicaLog>),
                    }
                })
                .collect();
            view.insert(topic.clone(), ClusterTopic { config, partitions });
        }
        streams.insert(stream.clone(), view);
    }
    let members = peers
        .keys()
        .map(|&id| ClusterMember {
            id,
            client: state.nodes.get(&id).map(|n| n.client.clone()),
        })
        .collect();
    let offsets = state
        .offsets
        .iter()
        .map(|(k, &o)| {
            (
                OffsetName {
                    stream: k.stream.clone(),
                    topic: k.topic.clone(),
                    partition: k.partition,
                    consumer: k.consumer.clone(),
                },
                o,
            )
        })
        .collect();
    ClusterCatalog {
        version,
        streams,
        offsets,
        members,
        auth: state
            .auth
            .as_ref()
            .map(|a| (a.version, Arc::clone(&a.text))),
    }
}

impl ReplicaLog for Replica {
    fn propose(&self, batch: Bytes) -> ClusterFuture<'_, Commit> {
        Box::pin(async move {
            let started = std::time::Instant::now();
            let latency = Arc::clone(&self.commit_latency);
            // The commit notice is kept until the answer comes (dropped early, the
            // library warns at every commit).
            let (responder, committed, answer) = ProgressResponder::new();
            {
                // Shared with other proposals, exclusive with a seal: no batch is
                // enqueued after a seal.
                let sealing = self.sealing.read().await;
                if *sealing || self.store().sealed().is_some() {
                    return Err(self.migrating());
                }
                self.raft()
                    .client_write_ff(PartitionCommand::Propose(batch), Some(responder))
                    .await
                    .map_err(|e| BrokerError::ClusterTimeout(e.to_string()))?;
            }
            let id = self.id().clone();
            let commit: Commit = Box::pin(async move {
                let what = format!("partition {id}");
                let answer = answer.await;
                drop(committed);
                if matches!(answer, Ok(Ok(_))) {
                    latency.observe(started.elapsed());
                }
                match answer {
                    Ok(Ok(done)) => match done.data {
                        PartitionResponse::Appended {
                            base_offset,
                            last_offset,
                            timestamp_us,
                        } => Ok((base_offset, last_offset, timestamp_us)),
                        PartitionResponse::Sealed { .. } => Err(BrokerError::RangeMigrating {
                            stream: id.stream.clone(),
                            topic: id.topic.clone(),
                            partition: id.partition,
                        }),
                        PartitionResponse::Done => Err(BrokerError::Internal(
                            "a batch committed without offsets".into(),
                        )),
                    },
                    Ok(Err(
                        ClientWriteError::ForwardToLeader(f)
                        | ClientWriteError::LogEntryDiscarded(f),
                    )) => Err(BrokerError::NotLeader {
                        what,
                        leader: f.leader_id,
                        address: None,
                    }),
                    Ok(Err(e)) => Err(BrokerError::ClusterTimeout(e.to_string())),
                    Err(_) => Err(BrokerError::NotLeader {
                        what,
                        leader: None,
                        address: None,
                    }),
                }
            });
            Ok(commit)
        })
    }

    fn seal(&self) -> ClusterFuture<'_, u64> {
        Box::pin(async move {
            if ReplicaLog::leading(self).is_none() {
                return Err(self.not_leading());
            }
            let mut sealing = self.sealing.write().await;
            if let Some((index, end)) = self.store().sealed() {
                drop(sealing);
                return self.seal_committed(index, end).await;
            }
            *sealing = true;
            let (responder, committed, answer) = ProgressResponder::new();
            let sent = self
                .raft()
                .client_write_ff(PartitionCommand::Seal, Some(responder))
                .await;
            drop(sealing);
            let answer = match sent {
                Ok(()) => {
                    let answer = answer.await;
                    drop(committed);
                    answer
                }
                Err(e) => {
                    *self.sealing.write().await = false;
                    return Err(BrokerError::ClusterTimeout(e.to_string()));
                }
            };
            match answer {
                Ok(Ok(done)) => match done.data {
                    PartitionResponse::Sealed { end } => {
                        tracing::info!(partition = %self.id(), end, "sealed a range");
                        Ok(end)
                    }
                    // A seal raced this one: it stands.
                    _ => match self.store().sealed() {
                        Some((index, end)) => self.seal_committed(index, end).await,
                        None => Err(BrokerError::Internal(
                            "a seal committed without an end".into(),
                        )),
                    },
                },
                other => {
                    // Leadership moved: whether the seal survives is the next leader's
                    // log's to say (its store refuses batches after one).
                    *self.sealing.write().await = false;
                    Err(match other {
                        Ok(Err(
                            ClientWriteError::ForwardToLeader(f)
                            | ClientWriteError::LogEntryDiscarded(f),
                        )) => BrokerError::NotLeader {
                            what: format!("partition {}", self.id()),
                            leader: f.leader_id,
                            address: None,
                        },
                        Ok(Err(e)) => BrokerError::ClusterTimeout(e.to_string()),
                        _ => self.not_leading(),
                    })
                }
            }
        })
    }

    fn sealed(&self) -> Option<u64> {
        self.store().sealed().map(|(_, end)| end)
    }

    fn leading(&self) -> Option<u64> {
        let metrics = self.raft().metrics();
        let m = metrics.borrow_watched();
        // A new leader serves once it applied an entry of its own term (its blank one):
        // before, its high watermark may still be what it had as a follower, or 0 after
        // a restart, and a reader would take that for the end of the log.
        let ready = m
            .last_applied
            .as_ref()
            .is_some_and(|applied| applied.leader_id.term == m.current_term);
        (m.state == ServerState::Leader && ready).then_some(m.current_term)
    }

    fn leader(&self) -> Option<u64> {
        Replica::leader(self)
    }

    fn high_watermark(&self) -> u64 {
        Replica::high_watermark(self)
    }

    fn watch_high_watermark(&self) -> watch::Receiver<u64> {
        Replica::watch_high_watermark(self)
    }

    fn log(&self) -> Arc<PartitionLog> {
        Replica::log(self)
    }

    fn retain(&self) -> ClusterFuture<'_, Option<u64>> {
        Box::pin(async move {
            Replica::retain(self)
                .await
                .map_err(|e| BrokerError::ClusterTimeout(e.to_string()))
        })
    }
}

/// How long a leader waits for a seal its log holds to commit.
const SEAL_COMMIT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Replica {
    fn migrating(&self) -> BrokerError {
        BrokerError::RangeMigrating {
            stream: self.id().stream.clone(),
            topic: self.id().topic.clone(),
            partition: self.id().partition,
        }
    }

    fn not_leading(&self) -> BrokerError {
        BrokerError::NotLeader {
            what: format!("partition {}", self.id()),
            leader: Replica::leader(self),
            address: None,
        }
    }

    /// `end` once the seal entry at `index` is applied here, this replica still
    /// leading (so it is committed).
    async fn seal_committed(&self, index: u64, end: u64) -> Result<u64, BrokerError> {
        self.raft()
            .wait(Some(SEAL_COMMIT_WAIT))
            .applied_index_at_least(Some(index), "the seal")
            .await
            .map_err(|e| BrokerError::ClusterTimeout(format!("partition {}: {e}", self.id())))?;
        if ReplicaLog::leading(self).is_none() {
            return Err(self.not_leading());
        }
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_spreads_partitions_round_robin_and_is_the_same_everywhere() {
        let nodes = [1, 2, 3];
        assert_eq!(
            place(&nodes, 4, 3),
            vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2], vec![1, 2, 3]]
        );
        assert_eq!(place(&nodes, 3, 1), vec![vec![1], vec![2], vec![3]]);
    }
}
