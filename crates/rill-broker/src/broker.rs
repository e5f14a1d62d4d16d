//! The broker: catalog of streams and topics, produce, fetch, stored offsets.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use rill_proto::pb;
use rill_storage::{Clock, Flusher, LogRead, SystemClock};

use crate::BrokerError;
use crate::catalog::{
    self, CatalogFile, DurabilityConfig, StreamFile, TopicConfig, TopicFile, catalog_err,
};
use crate::names::validate_name;
use crate::offsets::{OffsetKey, OffsetStore};
use crate::partition::{Partition, Produced};

/// Options of a broker.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Where everything is stored.
    pub data_dir: PathBuf,
    /// Durability of topics created without one (default `always`).
    pub default_durability: DurabilityConfig,
    /// Largest batch accepted (default 16 MiB).
    pub max_batch_bytes: u32,
    /// Largest frame the server in front accepts, as told to clients in `Hello`
    /// (default 64 MiB; the server sets it to its own limit).
    pub max_frame_bytes: u32,
    /// Largest fetch answered (default 32 MiB, so a reply fits a default 64 MiB frame).
    pub max_fetch_bytes: u32,
    /// Longest long poll (default 60 s).
    pub max_wait: Duration,
    /// How often retention runs (default 60 s).
    pub retention_interval: Duration,
    /// How often `interval` topics are checked for a due sync (default 10 ms).
    pub flush_tick: Duration,
    /// Idempotent producers remembered per partition (default 10,000).
    pub producers_per_partition_max: usize,
    /// How long a pipelined idempotent batch that arrived before an earlier one waits
    /// for it (default 5 s).
    pub sequence_wait: Duration,
}

impl BrokerConfig {
    /// Defaults with data in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            default_durability: DurabilityConfig::Always,
            max_batch_bytes: 16 << 20,
            max_frame_bytes: rill_proto::DEFAULT_MAX_FRAME_BYTES,
            max_fetch_bytes: 32 << 20,
            max_wait: Duration::from_secs(60),
            retention_interval: Duration::from_secs(60),
            flush_tick: Duration::from_millis(10),
            producers_per_partition_max: 10_000,
            sequence_wait: Duration::from_secs(5),
        }
    }
}

/// A topic and its open partitions.
#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) created_us: i64,
    pub(crate) config: TopicConfig,
    pub(crate) partitions: Vec<Arc<Partition>>,
}

#[derive(Debug, Default)]
struct Stream {
    created_us: i64,
    topics: BTreeMap<String, Arc<Topic>>,
}

/// What a fetch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetch {
    /// First offset wanted.
    pub offset: u64,
    /// Bytes at most (at least one batch is returned).
    pub max_bytes: u32,
    /// Long poll: wait this long for `min_bytes`.
    pub max_wait: Duration,
    /// Bytes to wait for.
    pub min_bytes: u32,
}

/// A partition's state for `describe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionState {
    /// Partition number.
    pub partition: u32,
    /// First stored offset.
    pub first_offset: u64,
    /// Next offset to be written.
    pub next_offset: u64,
    /// Bytes stored.
    pub size_bytes: u64,
    /// Segments.
    pub segments: u32,
}

/// The broker core, embeddable: no sockets. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Broker {
    config: BrokerConfig,
    streams: RwLock<BTreeMap<String, Stream>>,
    /// Serializes catalog changes (and their file I/O).
    admin: Mutex<()>,
    pub(crate) offsets: OffsetStore,
    pub(crate) groups: crate::groups::Groups,
    flusher: Flusher,
    clock: SystemClock,
    shutting_down: AtomicBool,
    /// Held for the broker's life: one broker per data directory.
    _lock: File,
}

impl Broker {
    /// Opens the broker on its data directory, recovering every partition.
    ///
    /// Fails if another broker holds the directory.
    pub fn open(config: BrokerConfig) -> Result<Self, BrokerError> {
        let dir = &config.data_dir;
        std::fs::create_dir_all(dir).map_err(catalog_err("create", dir))?;
        let lock_path = dir.join("rill.lock");
        let lock = File::create(&lock_path).map_err(catalog_err("create", &lock_path))?;
        lock.try_lock().map_err(|e| BrokerError::Catalog {
            op: "lock (is another rill using this data directory?)",
            path: lock_path.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let file = catalog::load(dir)?;
        let flusher = Flusher::start(config.flush_tick);
        let mut streams = BTreeMap::new();
        for (name, stream) in &file.streams {
            let mut topics = BTreeMap::new();
            for (topic_name, topic) in &stream.topics {
                let opened = open_topic(
                    &config,
                    &flusher,
                    name,
                    topic_name,
                    &topic.config,
                    topic.created_us,
                    false,
                )?;
                topics.insert(topic_name.clone(), Arc::new(opened));
            }
            streams.insert(
                name.clone(),
                Stream {
                    created_us: stream.created_us,
                    topics,
                },
            );
        }
        remove_orphan_topic_dirs(dir, &file)?;
        let offsets = OffsetStore::open(dir)?;
        tracing::info!(data_dir = %dir.display(), streams = streams.len(), "broker opened");
        Ok(Self {
            config,
            streams: RwLock::new(streams),
            admin: Mutex::new(()),
            offsets,
            groups: crate::groups::Groups::default(),
            flusher,
            clock: SystemClock,
            shutting_down: AtomicBool::new(false),
            _lock: lock,
        })
    }

    /// The broker's options.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    fn read_streams(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Stream>> {
        self.streams.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_streams(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Stream>> {
        self.streams.write().unwrap_or_else(|e| e.into_inner())
    }

    fn check_running(&self) -> Result<(), BrokerError> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(BrokerError::ShuttingDown);
        }
        Ok(())
    }

    /// The catalog as it would be saved.
    fn catalog_file(&self) -> CatalogFile {
        let streams = self.read_streams();
        CatalogFile {
            version: 1,
            streams: streams
                .iter()
                .map(|(name, s)| {
                    (
                        name.clone(),
                        StreamFile {
                            created_us: s.created_us,
                            topics: s
                                .topics
                                .iter()
                                .map(|(t, topic)| {
                                    (
                                        t.clone(),
                                        TopicFile {
                                            created_us: topic.created_us,
                                            config: topic.config.clone(),
                                        },
                                    )
                                })
                                .collect(),
                        },
                    )
                })
                .collect(),
        }
    }

    // ---- admin ---------------------------------------------------------------------

    /// Creates a stream. With `if_missing`, an existing stream is not an error.
    /// Returns whether it was created.
    pub fn create_stream(&self, name: &str, if_missing: bool) -> Result<bool, BrokerError> {
        self.check_running()?;
        validate_name("stream", name)?;
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        if self.read_streams().contains_key(name) {
            return if if_missing {
                Ok(false)
            } else {
                Err(BrokerError::StreamExists(name.to_owned()))
            };
        }
        let mut file = self.catalog_file();
        let created_us = self.clock.now_us();
        file.streams.insert(
            name.to_owned(),
            StreamFile {
                created_us,
                topics: BTreeMap::new(),
            },
        );
        catalog::save(&self.config.data_dir, &file)?;
        self.write_streams().insert(
            name.to_owned(),
            Stream {
                created_us,
                topics: BTreeMap::new(),
            },
        );
        tracing::info!(stream = name, "stream created");
        Ok(true)
    }

    /// Deletes a stream and every topic in it.
    pub fn delete_stream(&self, name: &str) -> Result<(), BrokerError> {
        self.check_running()?;
        let topics: Vec<String> = {
            let streams = self.read_streams();
            let stream = streams
                .get(name)
                .ok_or_else(|| BrokerError::StreamNotFound(name.to_owned()))?;
            stream.topics.keys().cloned().collect()
        };
        for topic in topics {
            self.delete_topic(name, &topic)?;
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = self.catalog_file();
        file.streams.remove(name);
        catalog::save(&self.config.data_dir, &file)?;
        self.write_streams().remove(name);
        let dir = self.config.data_dir.join("streams").join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(catalog_err("remove", &dir))?;
        }
        tracing::info!(stream = name, "stream deleted");
        Ok(())
    }

    /// Streams with their topic counts, by name.
    pub fn list_streams(&self) -> Vec<(String, u32)> {
        self.read_streams()
            .iter()
            .map(|(n, s)| (n.clone(), s.topics.len() as u32))
            .collect()
    }

    /// Creates a topic. With `if_missing`, an existing topic whose options agree with
    /// the requested ones is not an error; `create_stream` creates the stream too.
    /// Returns whether it was created and the topic's options.
    pub fn create_topic(
        &self,
        stream: &str,
        topic: &str,
        options: &pb::TopicOptions,
        if_missing: bool,
        create_stream: bool,
    ) -> Result<(bool, TopicConfig), BrokerError> {
        self.check_running()?;
        validate_name("stream", stream)?;
        validate_name("topic", topic)?;
        let config = TopicConfig::from_proto(options, self.config.default_durability)?;
        if create_stream {
            self.create_stream(stream, true)?;
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        {
            let streams = self.read_streams();
            let s = streams
                .get(stream)
                .ok_or_else(|| BrokerError::StreamNotFound(stream.to_owned()))?;
            if let Some(existing) = s.topics.get(topic) {
                let conflicts = existing.config.conflicts(options);
                return if if_missing && conflicts.is_empty() {
                    Ok((false, existing.config.clone()))
                } else {
                    Err(BrokerError::TopicExists {
                        stream: stream.to_owned(),
                        topic: topic.to_owned(),
                        detail: if conflicts.is_empty() {
                            String::new()
                        } else {
                            format!(" and {}", conflicts.join(", "))
                        },
                    })
                };
            }
        }
        let created_us = self.clock.now_us();
        let opened = open_topic(
            &self.config,
            &self.flusher,
            stream,
            topic,
            &config,
            created_us,
            true,
        )?;
        let mut file = self.catalog_file();
        file.streams
            .get_mut(stream)
            .expect("checked above under the admin lock")
            .topics
            .insert(
                topic.to_owned(),
                TopicFile {
                    created_us,
                    config: config.clone(),
                },
            );
        catalog::save(&self.config.data_dir, &file)?;
        self.write_streams()
            .get_mut(stream)
            .expect("checked above under the admin lock")
            .topics
            .insert(topic.to_owned(), Arc::new(opened));
        tracing::info!(
            stream,
            topic,
            partitions = config.partitions,
            "topic created"
        );
        Ok((true, config))
    }

    /// Deletes a topic, its data and its stored offsets.
    pub fn delete_topic(&self, stream: &str, topic: &str) -> Result<(), BrokerError> {
        self.check_running()?;
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let removed = {
            let mut streams = self.write_streams();
            let s = streams
                .get_mut(stream)
                .ok_or_else(|| BrokerError::StreamNotFound(stream.to_owned()))?;
            s.topics
                .remove(topic)
                .ok_or_else(|| BrokerError::TopicNotFound {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                })?
        };
        catalog::save(&self.config.data_dir, &self.catalog_file())?;
        for partition in &removed.partitions {
            // A partition whose log failed stays poisoned; its files go anyway.
            if let Err(e) = partition.close() {
                tracing::warn!(error = %e, "closing a deleted topic's partition");
            }
        }
        let dir = topic_dir(&self.config.data_dir, stream, topic);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(catalog_err("remove", &dir))?;
        }
        for (key, _) in self.offsets.for_topic(stream, topic) {
            self.offsets.delete(key)?;
        }
        self.groups.forget_topic(stream, topic);
        tracing::info!(stream, topic, "topic deleted");
        Ok(())
    }

    /// Topics of one stream (or of all, with `None`), with their options.
    pub fn list_topics(
        &self,
        stream: Option<&str>,
    ) -> Result<Vec<(String, String, TopicConfig)>, BrokerError> {
        let streams = self.read_streams();
        if let Some(name) = stream
            && !streams.contains_key(name)
        {
            return Err(BrokerError::StreamNotFound(name.to_owned()));
        }
        Ok(streams
            .iter()
            .filter(|(n, _)| stream.is_none_or(|s| s == n.as_str()))
            .flat_map(|(n, s)| {
                s.topics
                    .iter()
                    .map(|(t, topic)| (n.clone(), t.clone(), topic.config.clone()))
            })
            .collect())
    }

    pub(crate) fn topic(&self, stream: &str, topic: &str) -> Result<Arc<Topic>, BrokerError> {
        let streams = self.read_streams();
        let s = streams
            .get(stream)
            .ok_or_else(|| BrokerError::StreamNotFound(stream.to_owned()))?;
        s.topics
            .get(topic)
            .cloned()
            .ok_or_else(|| BrokerError::TopicNotFound {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
            })
    }

    pub(crate) fn partition(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Arc<Partition>, BrokerError> {
        let t = self.topic(stream, topic)?;
        t.partitions
            .get(partition as usize)
            .cloned()
            .ok_or_else(|| BrokerError::PartitionNotFound {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                partition,
                partitions: t.config.partitions,
            })
    }

    /// A topic's options and per-partition state.
    pub fn describe_topic(
        &self,
        stream: &str,
        topic: &str,
    ) -> Result<(TopicConfig, Vec<PartitionState>), BrokerError> {
        let t = self.topic(stream, topic)?;
        let partitions = t
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| PartitionState {
                partition: i as u32,
                first_offset: p.log.log_start(),
                next_offset: p.log.next_offset(),
                size_bytes: p.log.size_bytes(),
                segments: p.log.segment_count() as u32,
            })
            .collect();
        Ok((t.config.clone(), partitions))
    }

    // ---- data ----------------------------------------------------------------------

    /// A fresh idempotent-producer identity.
    pub fn init_producer(&self) -> (u64, u16) {
        // Random 64-bit ids: collisions are negligible and no allocation state is
        // needed; the epoch starts at 0.
        (rand::random::<u64>() | 1, 0)
    }

    /// Appends one batch to a partition and returns once it is durable per the topic's
    /// policy. A retried idempotent batch is acknowledged again without a second append.
    pub async fn produce(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<Produced, BrokerError> {
        self.check_running()?;
        if batch.len() > self.config.max_batch_bytes as usize {
            return Err(rill_storage::StorageError::BatchTooLarge {
                bytes: batch.len(),
                max: self.config.max_batch_bytes,
            }
            .into());
        }
        let p = self.partition(stream, topic, partition)?;
        let header =
            rill_format::BatchHeader::parse(&batch).map_err(rill_storage::StorageError::from)?;
        // A batch that waits for nothing is a write into the page cache: append it here
        // rather than paying a hop to the blocking pool and back.
        if !p.append_may_block(&header) {
            return p.append_blocking(&batch, &header);
        }
        // The log stamps a copy of the header and writes the records from this shared
        // buffer as they are: no copy of the batch, whoever else holds it.
        tokio::task::spawn_blocking(move || p.append_blocking(&batch, &header))
            .await
            .map_err(|e| BrokerError::Internal(format!("append task failed: {e}")))?
    }

    /// Reads from `fetch.offset`, waiting up to `fetch.max_wait` (capped) for
    /// `fetch.min_bytes`.
    pub async fn fetch(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        fetch: Fetch,
    ) -> Result<LogRead, BrokerError> {
        self.check_running()?;
        let p = self.partition(stream, topic, partition)?;
        let max_bytes = fetch.max_bytes.clamp(1, self.config.max_fetch_bytes) as usize;
        p.fetch(
            fetch.offset,
            max_bytes,
            fetch.max_wait.min(self.config.max_wait),
            fetch.min_bytes as usize,
        )
        .await
    }

    /// The first offset, the end, or the first offset at or after a timestamp.
    pub fn resolve_offset(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        spec: pb::OffsetSpec,
        timestamp_us: i64,
    ) -> Result<u64, BrokerError> {
        let p = self.partition(stream, topic, partition)?;
        Ok(match spec {
            pb::OffsetSpec::First => p.log.log_start(),
            pb::OffsetSpec::End => p.log.next_offset(),
            pb::OffsetSpec::Timestamp => p
                .log
                .offset_for_timestamp(timestamp_us)?
                .unwrap_or_else(|| p.log.next_offset()),
            pb::OffsetSpec::Unspecified => {
                return Err(BrokerError::InvalidRequest("offset spec is missing".into()));
            }
        })
    }

    fn offset_key(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
    ) -> Result<OffsetKey, BrokerError> {
        validate_name("consumer", consumer)?;
        self.partition(stream, topic, partition)?;
        Ok(OffsetKey {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
            partition,
            consumer: consumer.to_owned(),
        })
    }

    /// Stores a consumer's next offset durably.
    pub async fn store_offset(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
        offset: u64,
    ) -> Result<(), BrokerError> {
        self.check_running()?;
        let key = self.offset_key(stream, topic, partition, consumer)?;
        self.store_offset_key(key, offset).await
    }

    /// Stores an offset durably, refusing one beyond the partition's end.
    pub(crate) async fn store_offset_key(
        self: &Arc<Self>,
        key: OffsetKey,
        offset: u64,
    ) -> Result<(), BrokerError> {
        let end = self
            .partition(&key.stream, &key.topic, key.partition)?
            .log
            .next_offset();
        if offset > end {
            return Err(rill_storage::StorageError::OffsetBeyondEnd {
                requested: offset,
                next_offset: end,
            }
            .into());
        }
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || broker.offsets.store(key, offset))
            .await
            .map_err(|e| BrokerError::Internal(format!("offset store task failed: {e}")))?
    }

    /// A consumer's stored offset.
    pub fn get_offset(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
    ) -> Result<Option<u64>, BrokerError> {
        let key = self.offset_key(stream, topic, partition, consumer)?;
        Ok(self.offsets.get(&key))
    }

    /// Deletes a consumer's stored offset; returns whether there was one.
    pub async fn delete_offset(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
    ) -> Result<bool, BrokerError> {
        self.check_running()?;
        let key = self.offset_key(stream, topic, partition, consumer)?;
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || broker.offsets.delete(key))
            .await
            .map_err(|e| BrokerError::Internal(format!("offset delete task failed: {e}")))?
    }

    /// Stored offsets of a topic: (partition, consumer, offset).
    pub fn stored_offsets(&self, stream: &str, topic: &str) -> Vec<(u32, String, u64)> {
        self.offsets
            .for_topic(stream, topic)
            .into_iter()
            .map(|(k, o)| (k.partition, k.consumer, o))
            .collect()
    }

    // ---- upkeep --------------------------------------------------------------------

    /// Every open partition, of every topic.
    fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.read_streams()
            .values()
            .flat_map(|s| s.topics.values())
            .flat_map(|t| t.partitions.iter().cloned())
            .collect()
    }

    /// Applies retention to every partition once (blocking file deletes).
    pub fn apply_retention(&self) -> Result<(), BrokerError> {
        for p in self.all_partitions() {
            p.log.apply_retention()?;
        }
        Ok(())
    }

    /// Runs retention every `retention_interval` (first after one interval) until the
    /// broker shuts down.
    pub async fn run_upkeep(self: Arc<Self>) {
        let period = self.config.retention_interval;
        let mut retention = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Group sessions are checked every second, so a silent member is removed within
        // a second of its timeout.
        let mut sessions = tokio::time::interval(Duration::from_secs(1));
        sessions.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = retention.tick() => {}
                _ = sessions.tick() => {
                    self.groups.expire(std::time::Instant::now());
                    continue;
                }
            }
            if self.shutting_down.load(Ordering::Acquire) {
                return;
            }
            let broker = Arc::clone(&self);
            match tokio::task::spawn_blocking(move || broker.apply_retention()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "retention failed"),
                // The runtime is shutting down with the process.
                Err(e) if e.is_cancelled() => return,
                Err(e) => tracing::error!(error = %e, "retention task failed"),
            }
        }
    }

    /// Stops accepting requests, syncs and closes every partition and the offsets log.
    pub fn shutdown(&self) -> Result<(), BrokerError> {
        if self.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut first_error = None;
        for p in self.all_partitions() {
            if let Err(e) = p.close() {
                tracing::error!(error = %e, "closing a partition at shutdown");
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.offsets.close() {
            first_error.get_or_insert(e);
        }
        tracing::info!("broker shut down");
        first_error.map_or(Ok(()), Err)
    }
}

pub(crate) fn topic_dir(data_dir: &Path, stream: &str, topic: &str) -> PathBuf {
    data_dir.join("streams").join(stream).join(topic)
}

fn open_topic(
    config: &BrokerConfig,
    flusher: &Flusher,
    stream: &str,
    topic: &str,
    topic_config: &TopicConfig,
    created_us: i64,
    fresh: bool,
) -> Result<Topic, BrokerError> {
    let dir = topic_dir(&config.data_dir, stream, topic);
    if fresh && dir.exists() {
        // Left over from a delete that crashed before removing its files.
        std::fs::remove_dir_all(&dir).map_err(catalog_err("remove", &dir))?;
    }
    let log_config = topic_config.log_config(config.max_batch_bytes);
    let mut partitions = Vec::with_capacity(topic_config.partitions as usize);
    for p in 0..topic_config.partitions {
        let partition = Partition::open(
            &dir.join(p.to_string()),
            log_config.clone(),
            config.producers_per_partition_max,
            config.sequence_wait,
        )?;
        if matches!(topic_config.durability, DurabilityConfig::Interval { .. }) {
            flusher.register(&partition.log);
        }
        partitions.push(Arc::new(partition));
    }
    Ok(Topic {
        created_us,
        config: topic_config.clone(),
        partitions,
    })
}

/// Removes topic directories that the catalog does not name: the remains of a create
/// that crashed before saving the catalog, or of a delete that crashed after.
fn remove_orphan_topic_dirs(data_dir: &Path, file: &CatalogFile) -> Result<(), BrokerError> {
    let streams_dir = data_dir.join("streams");
    let Ok(streams) = std::fs::read_dir(&streams_dir) else {
        return Ok(());
    };
    for stream in streams.flatten() {
        let stream_name = stream.file_name().to_string_lossy().into_owned();
        let known = file.streams.get(&stream_name);
        let Ok(topics) = std::fs::read_dir(stream.path()) else {
            continue;
        };
        for topic in topics.flatten() {
            let topic_name = topic.file_name().to_string_lossy().into_owned();
            if known.is_none_or(|s| !s.topics.contains_key(&topic_name)) {
                tracing::warn!(path = %topic.path().display(), "removing a topic directory the catalog does not know");
                std::fs::remove_dir_all(topic.path())
                    .map_err(catalog_err("remove", &topic.path()))?;
            }
        }
    }
    Ok(())
}
