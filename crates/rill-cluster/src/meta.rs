//! The metadata state machine (docs/REPLICATION.md §4.1), pure: commands in log order
//! in, a state and one response per command out. Every node applies the same committed
//! commands in the same order, so every node holds the same state; nothing here reads a
//! clock, a random number or the iteration order of a hash map.
//!
//! Commands are checked where they are proposed (the controller validates names and
//! options as the single-node broker does); applying one that no longer fits the state
//! (a topic deleted meanwhile, say) changes nothing and says why in its response, the
//! same on every node.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A node of the cluster as the metadata knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its node-to-node address (`--peers`).
    pub peer: String,
    /// Its client address (`--listen`).
    pub client: String,
}

/// A topic of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSpec {
    /// Per partition, its replicas (node ids; the partition group's voters).
    pub replicas: Vec<Vec<u64>>,
    /// The topic's options as the broker encodes them (opaque here: the controller
    /// validated them before proposing).
    pub options: Vec<u8>,
    /// Which topic of this name it is: drawn at random when it is created, so a topic
    /// deleted and created again is another one, and a replica's files left from the
    /// earlier one (its node was down when it was deleted) are known for what they are
    /// and removed, never taken up by the new topic's group. 0: created before
    /// incarnations existed.
    #[serde(default)]
    pub incarnation: u64,
}

impl TopicSpec {
    /// Whether `other` asks for the same topic: the same replicas and options, whatever
    /// its incarnation (a repeated create of an existing topic).
    pub fn same_as(&self, other: &Self) -> bool {
        self.replicas == other.replicas && self.options == other.options
    }

    /// How many partitions the topic has.
    pub fn partitions(&self) -> u32 {
        u32::try_from(self.replicas.len()).unwrap_or(u32::MAX)
    }
}

/// One consumer offset to store: the next offset of `consumer` (a named consumer or a
/// group) in a partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OffsetKey {
    /// The stream.
    pub stream: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The consumer's name.
    pub consumer: String,
}

/// The credential file (`auth.json`'s text; docs/SECURITY.md §2.3), opaque here, with
/// the number of changes made to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthBlob {
    /// 1 for the first file, one more per change.
    pub version: u64,
    /// The file's text (shared: every catalog view holds it).
    pub text: Arc<str>,
}

/// A change to the metadata, proposed by the controller and applied by every node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// A node says where it listens (at each start).
    RegisterNode {
        /// Its id.
        id: u64,
        /// Its addresses.
        info: NodeInfo,
    },
    /// Creates a stream.
    CreateStream {
        /// Its name.
        name: String,
    },
    /// Deletes a stream, its topics and their stored offsets.
    DeleteStream {
        /// Its name.
        name: String,
    },
    /// Creates a topic.
    CreateTopic {
        /// The stream.
        stream: String,
        /// The topic's name.
        topic: String,
        /// Its partitions' replicas and its options.
        spec: TopicSpec,
    },
    /// Deletes a topic and its stored offsets.
    DeleteTopic {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
    },
    /// Stores consumer offsets (many commits in one entry).
    StoreOffsets {
        /// The offsets, in the order they were asked for.
        offsets: Vec<(OffsetKey, u64)>,
    },
    /// Deletes a consumer's stored offset.
    DeleteOffset {
        /// Whose.
        key: OffsetKey,
    },
    /// Replaces the credential file if it is still at version `expected` (0: there is
    /// none yet); a compare-and-set, so two concurrent changes never lose one.
    ReplaceAuth {
        /// The version the change was made against.
        expected: u64,
        /// The whole new file.
        text: Arc<str>,
    },
    /// Changes a topic's options and adds partitions, if its options are still
    /// `expected` (a compare-and-set: two concurrent alters never lose one, and the
    /// added partitions continue the count the change was made against).
    AlterTopic {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
        /// The options the change was made against, byte for byte.
        expected: Vec<u8>,
        /// The new options.
        options: Vec<u8>,
        /// The replicas of each added partition, numbered from the topic's count.
        add: Vec<Vec<u64>>,
    },
    /// Deletes every stored offset of one consumer (a named consumer or a group) on a
    /// topic, at once.
    DeleteConsumer {
        /// The stream.
        stream: String,
        /// The topic.
        topic: String,
        /// The consumer's name as its offsets are keyed.
        consumer: String,
    },
    /// Stores offsets all at once or none (a reset): refused whole if one names a
    /// partition that does not exist.
    ResetOffsets {
        /// The offsets.
        offsets: Vec<(OffsetKey, u64)>,
    },
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum MetaResponse {
    /// Done.
    #[default]
    Done,
    /// It existed already, as asked (`CreateTopic` with the same spec, `CreateStream`).
    Exists,
    /// What it names does not exist.
    NotFound(String),
    /// It cannot be done as asked: why.
    Conflict(String),
    /// `StoreOffsets`: the positions (in the command) of the offsets refused because
    /// their topic or partition does not exist; the others were stored.
    Stored {
        /// Refused positions.
        refused: Vec<usize>,
    },
    /// `DeleteOffset`: whether an offset was stored.
    Deleted(bool),
    /// `DeleteConsumer`: how many offsets were stored.
    DeletedCount(u32),
}

/// The replicated metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MetaState {
    /// Nodes by id.
    pub nodes: BTreeMap<u64, NodeInfo>,
    /// Streams by name, each with its topics by name.
    pub streams: BTreeMap<String, BTreeMap<String, TopicSpec>>,
    /// Stored consumer offsets (a list of pairs in JSON: its keys are not strings).
    #[serde(with = "pairs")]
    pub offsets: BTreeMap<OffsetKey, u64>,
    /// Users, tokens, ACLs and quotas (absent in states from before security).
    #[serde(default)]
    pub auth: Option<AuthBlob>,
}

/// A map with keys that are not strings, as a JSON list of pairs.
mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub(super) fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

impl MetaState {
    /// Applies one committed command.
    pub fn apply(&mut self, command: &MetaCommand) -> MetaResponse {
        match command {
            MetaCommand::RegisterNode { id, info } => {
                self.nodes.insert(*id, info.clone());
                MetaResponse::Done
            }
            MetaCommand::CreateStream { name } => {
                if self.streams.contains_key(name) {
                    return MetaResponse::Exists;
                }
                self.streams.insert(name.clone(), BTreeMap::new());
                MetaResponse::Done
            }
            MetaCommand::DeleteStream { name } => {
                if self.streams.remove(name).is_none() {
                    return MetaResponse::NotFound(format!("stream {name}"));
                }
                self.offsets.retain(|k, _| k.stream != *name);
                MetaResponse::Done
            }
            MetaCommand::CreateTopic {
                stream,
                topic,
                spec,
            } => {
                let Some(topics) = self.streams.get_mut(stream) else {
                    return MetaResponse::NotFound(format!("stream {stream}"));
                };
                if spec.replicas.is_empty() || spec.replicas.iter().any(Vec::is_empty) {
                    return MetaResponse::Conflict(format!(
                        "{stream}/{topic}: every partition needs a replica"
                    ));
                }
                match topics.get(topic) {
                    Some(existing) if existing.same_as(spec) => MetaResponse::Exists,
                    Some(_) => MetaResponse::Conflict(format!(
                        "{stream}/{topic} exists with other options or replicas"
                    )),
                    None => {
                        topics.insert(topic.clone(), spec.clone());
                        MetaResponse::Done
                    }
                }
            }
            MetaCommand::DeleteTopic { stream, topic } => {
                let removed = self
                    .streams
                    .get_mut(stream)
                    .and_then(|topics| topics.remove(topic));
                if removed.is_none() {
                    return MetaResponse::NotFound(format!("topic {stream}/{topic}"));
                }
                self.offsets
                    .retain(|k, _| !(k.stream == *stream && k.topic == *topic));
                MetaResponse::Done
            }
            MetaCommand::StoreOffsets { offsets } => {
                let mut refused = Vec::new();
                for (i, (key, offset)) in offsets.iter().enumerate() {
                    if self.partition_exists(key) {
                        self.offsets.insert(key.clone(), *offset);
                    } else {
                        refused.push(i);
                    }
                }
                MetaResponse::Stored { refused }
            }
            MetaCommand::DeleteOffset { key } => {
                MetaResponse::Deleted(self.offsets.remove(key).is_some())
            }
            MetaCommand::ReplaceAuth { expected, text } => {
                let version = self.auth_version();
                if version != *expected {
                    return MetaResponse::Conflict(format!(
                        "the credentials are at version {version}, not {expected}: changed meanwhile"
                    ));
                }
                self.auth = Some(AuthBlob {
                    version: version + 1,
                    text: Arc::clone(text),
                });
                MetaResponse::Done
            }
            MetaCommand::AlterTopic {
                stream,
                topic,
                expected,
                options,
                add,
            } => {
                let Some(spec) = self
                    .streams
                    .get_mut(stream)
                    .and_then(|topics| topics.get_mut(topic))
                else {
                    return MetaResponse::NotFound(format!("topic {stream}/{topic}"));
                };
                if spec.options != *expected {
                    return MetaResponse::Conflict(format!(
                        "{stream}/{topic} was altered meanwhile: try again"
                    ));
                }
                if add.iter().any(Vec::is_empty) {
                    return MetaResponse::Conflict(format!(
                        "{stream}/{topic}: every partition needs a replica"
                    ));
                }
                spec.options.clone_from(options);
                spec.replicas.extend(add.iter().cloned());
                MetaResponse::Done
            }
            MetaCommand::DeleteConsumer {
                stream,
                topic,
                consumer,
            } => {
                let before = self.offsets.len();
                self.offsets.retain(|k, _| {
                    !(k.stream == *stream && k.topic == *topic && k.consumer == *consumer)
                });
                MetaResponse::DeletedCount(
                    u32::try_from(before - self.offsets.len()).unwrap_or(u32::MAX),
                )
            }
            MetaCommand::ResetOffsets { offsets } => {
                if let Some((k, _)) = offsets.iter().find(|(k, _)| !self.partition_exists(k)) {
                    return MetaResponse::NotFound(format!(
                        "partition {} of {}/{}",
                        k.partition, k.stream, k.topic
                    ));
                }
                for (k, o) in offsets {
                    self.offsets.insert(k.clone(), *o);
                }
                MetaResponse::Done
            }
        }
    }

    /// The credential file's version; 0 when there is none.
    pub fn auth_version(&self) -> u64 {
        self.auth.as_ref().map_or(0, |a| a.version)
    }

    /// The topic of `stream`/`topic`, if it exists.
    pub fn topic(&self, stream: &str, topic: &str) -> Option<&TopicSpec> {
        self.streams.get(stream)?.get(topic)
    }

    fn partition_exists(&self, key: &OffsetKey) -> bool {
        self.topic(&key.stream, &key.topic)
            .is_some_and(|t| key.partition < t.partitions())
    }

    /// Whether the state keeps its invariants: every stored offset names a partition
    /// that exists.
    pub fn consistent(&self) -> bool {
        self.offsets.keys().all(|k| self.partition_exists(k))
    }
}

impl std::fmt::Display for MetaCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RegisterNode { id, info } => {
                write!(
                    f,
                    "register node {id} (peer {}, client {})",
                    info.peer, info.client
                )
            }
            Self::CreateStream { name } => write!(f, "create stream {name}"),
            Self::DeleteStream { name } => write!(f, "delete stream {name}"),
            Self::CreateTopic {
                stream,
                topic,
                spec,
            } => write!(
                f,
                "create topic {stream}/{topic} ({} partitions)",
                spec.partitions()
            ),
            Self::DeleteTopic { stream, topic } => write!(f, "delete topic {stream}/{topic}"),
            Self::StoreOffsets { offsets } => write!(f, "store {} offsets", offsets.len()),
            Self::DeleteOffset { key } => write!(
                f,
                "delete the offset of {} in {}/{}:{}",
                key.consumer, key.stream, key.topic, key.partition
            ),
            // Never the text: it holds verifiers.
            Self::ReplaceAuth { expected, text } => write!(
                f,
                "replace the credentials at version {expected} ({} bytes)",
                text.len()
            ),
            Self::AlterTopic {
                stream, topic, add, ..
            } => write!(
                f,
                "alter topic {stream}/{topic} ({} partitions added)",
                add.len()
            ),
            Self::DeleteConsumer {
                stream,
                topic,
                consumer,
            } => write!(f, "delete the offsets of {consumer} in {stream}/{topic}"),
            Self::ResetOffsets { offsets } => write!(f, "reset {} offsets", offsets.len()),
        }
    }
}

impl std::fmt::Display for MetaResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done => f.write_str("done"),
            Self::Exists => f.write_str("exists"),
            Self::NotFound(what) => write!(f, "{what} does not exist"),
            Self::Conflict(why) => f.write_str(why),
            Self::Stored { refused } => write!(f, "stored ({} refused)", refused.len()),
            Self::Deleted(d) => write!(f, "deleted: {d}"),
            Self::DeletedCount(n) => write!(f, "deleted {n} offsets"),
        }
    }
}
