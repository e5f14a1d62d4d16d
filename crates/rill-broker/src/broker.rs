//! The broker: catalog of streams and topics, produce, fetch, stored offsets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use rill_storage::{
    Clock, DamagedRange, FileCache, Flusher, Io, LogEnv, OPEN_FILES_DEFAULT, StdIo, SystemClock,
};

use crate::BrokerError;
use crate::catalog::{self, CatalogFile, StreamFile, TopicConfig, TopicFile, catalog_err};
use crate::offsets::OffsetStore;
use crate::partition::{Partition, PartitionOptions};
use crate::producer::RECENT_BATCHES;
use crate::reserve::Reserve;

/// Options of a broker.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Where everything is stored.
    pub data_dir: PathBuf,
    /// Durability of topics created without one (default `always`).
    pub default_durability: rill_storage::Durability,
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
    /// Batches remembered per idempotent producer and partition, for recognising
    /// retries (default 5, at most 64). Clients learn it from `InitProducer` and keep
    /// at most this many batches per partition in flight.
    pub producer_batches_remembered: usize,
    /// How long a pipelined idempotent batch that arrived before an earlier one waits
    /// for it (default 5 s).
    pub sequence_wait: Duration,
    /// How far ahead of the broker's clock record timestamps may reach (default 1 h).
    pub max_timestamp_ahead: Duration,
    /// Sealed-segment files kept open, shared by every partition (default 256).
    pub open_files_max: usize,
    /// Disk space kept in reserve (a file of zeros) so that catalog changes, and above
    /// all topic deletes, still work on a full disk (default 8 MiB; 0 keeps none).
    pub reserved_space_bytes: u64,
    /// How much of each partition's newest data stays in the page cache when memory is
    /// short; older data, once written back, is dropped from it then (default 2 GiB;
    /// `None` leaves the cache to the kernel). See
    /// [`rill_storage::LogConfig::cache_tail_bytes`].
    pub cache_tail_bytes: Option<u64>,
    /// The disk: every file operation of the broker goes through it (default the real
    /// file system; tests use a simulated one).
    pub io: Arc<dyn Io>,
    /// Whether connections must authenticate (`rill serve --auth`; default off).
    /// Embedded mode is the directory's owner either way.
    pub auth_required: bool,
    /// PBKDF2 iterations of the SCRAM verifiers the server derives itself and of the
    /// stand-ins it shows for unknown users (default 32,768; 4,096 to 1,000,000).
    pub scram_iterations: u32,
}

impl BrokerConfig {
    /// Defaults with data in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            default_durability: rill_storage::Durability::Always,
            max_batch_bytes: 16 << 20,
            max_frame_bytes: rill_proto::DEFAULT_MAX_FRAME_BYTES,
            max_fetch_bytes: 32 << 20,
            max_wait: Duration::from_secs(60),
            retention_interval: Duration::from_secs(60),
            flush_tick: Duration::from_millis(10),
            producers_per_partition_max: 10_000,
            producer_batches_remembered: RECENT_BATCHES,
            sequence_wait: Duration::from_secs(5),
            max_timestamp_ahead: Duration::from_secs(3600),
            open_files_max: OPEN_FILES_DEFAULT,
            reserved_space_bytes: 8 << 20,
            cache_tail_bytes: rill_storage::LogConfig::default().cache_tail_bytes,
            io: Arc::new(StdIo),
            auth_required: false,
            scram_iterations: rill_auth::password::SCRAM_ITERATIONS_DEFAULT,
        }
    }

    /// Checks the options' ranges.
    pub fn validate(&self) -> Result<(), BrokerError> {
        let bad = |m: &str| Err(BrokerError::InvalidConfig(m.to_owned()));
        if !(1..=crate::producer::RECENT_BATCHES_MAX).contains(&self.producer_batches_remembered) {
            return bad("producer_batches_remembered must be 1..=64");
        }
        if self.producers_per_partition_max == 0 {
            return bad("producers_per_partition_max must be positive");
        }
        if self.open_files_max == 0 {
            return bad("open_files_max must be positive");
        }
        if self.max_timestamp_ahead.is_zero() {
            return bad("max_timestamp_ahead must be positive");
        }
        if self.max_fetch_bytes == 0 || self.max_batch_bytes < rill_format::BATCH_HEADER_LEN as u32
        {
            return bad("max_fetch_bytes and max_batch_bytes must hold a batch");
        }
        Ok(())
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
pub(crate) struct Stream {
    pub(crate) created_us: i64,
    pub(crate) topics: BTreeMap<String, Arc<Topic>>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Why the partition refuses appends; `None` while it is healthy.
    pub failure: Option<String>,
    /// Damaged ranges of its log.
    pub damaged: Vec<DamagedRange>,
}

/// A partition that refuses appends, for `/health` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedPartition {
    /// Its stream.
    pub stream: String,
    /// Its topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// Why it refuses appends.
    pub reason: String,
}

/// The broker core, embeddable: no sockets. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Broker {
    pub(crate) config: BrokerConfig,
    /// The disk, the clock and the shared file cache every log uses.
    pub(crate) env: LogEnv,
    streams: RwLock<BTreeMap<String, Stream>>,
    /// Serializes catalog changes (and their file I/O). It guards no state of its own.
    pub(crate) admin: Mutex<()>,
    pub(crate) offsets: OffsetStore,
    pub(crate) groups: crate::groups::Groups,
    pub(crate) flusher: Flusher,
    pub(crate) clock: SystemClock,
    shutting_down: AtomicBool,
    pub(crate) reserve: Reserve,
    /// Held until shutdown: one broker per data directory. Released by `shutdown`
    /// rather than on drop, so the directory can be opened again at once even while a
    /// background task still holds a reference to this broker.
    lock: Mutex<Option<Box<dyn std::fmt::Debug + Send + Sync>>>,
    /// Upkeep (retention, reopening partitions) holds it shared while it works on files;
    /// shutdown takes it exclusively after setting `shutting_down`, so no upkeep runs on
    /// files after shutdown has closed them.
    pub(crate) upkeep_gate: RwLock<()>,
    /// In a cluster: the cluster the catalog, offsets and partitions come from.
    pub(crate) cluster: Option<Arc<dyn crate::cluster::Cluster>>,
    /// In a cluster: the catalog version mirrored into `streams` so far.
    pub(crate) mirrored: tokio::sync::watch::Sender<u64>,
    /// In a cluster: the nodes' client addresses, by id.
    pub(crate) cluster_members: RwLock<BTreeMap<u64, String>>,
    /// In a cluster: the stored offsets as this node applied them.
    pub(crate) cluster_offsets: RwLock<Arc<BTreeMap<crate::cluster::OffsetName, u64>>>,
    /// Users, tokens and ACLs (`auth.json`), and the failed-attempt limiter.
    pub(crate) auth: crate::auth::Auth,
    /// The users' byte-rate buckets on this node (docs/SECURITY.md §7).
    pub(crate) quotas: crate::quota::Quotas,
    /// The elastic topics' automatic policy's samples (docs/RANGES.md §7).
    pub(crate) range_policy: crate::policy::RangePolicy,
    /// In a cluster: the ranges this node is sealing for a pending split or merge
    /// (docs/RANGES.md §9), so that each is driven once at a time.
    pub(crate) sealing_ranges: Mutex<std::collections::HashSet<(String, String, u32)>>,
}

impl Broker {
    /// Opens the broker on its data directory, recovering every partition.
    ///
    /// Fails if another broker holds the directory, or the catalog or the offsets log
    /// cannot be read. A partition whose files are damaged or unreadable does not fail
    /// the open: it is opened failed (see [`Broker::failed_partitions`]).
    pub fn open(config: BrokerConfig) -> Result<Self, BrokerError> {
        Self::open_inner(config, None)
    }

    /// Opens the broker of a cluster node (docs/REPLICATION.md §11.1): its catalog,
    /// stored offsets and partitions come from `cluster`, which a task mirrors into it
    /// as they change. Must be called within a tokio runtime.
    pub fn open_clustered(
        config: BrokerConfig,
        cluster: Arc<dyn crate::cluster::Cluster>,
    ) -> Result<Arc<Self>, BrokerError> {
        let broker = Arc::new(Self::open_inner(config, Some(Arc::clone(&cluster)))?);
        broker.auth.attach_cluster(Arc::clone(&cluster));
        crate::clustered::start_mirror(&broker, cluster);
        Ok(broker)
    }

    fn open_inner(
        config: BrokerConfig,
        cluster: Option<Arc<dyn crate::cluster::Cluster>>,
    ) -> Result<Self, BrokerError> {
        config.validate()?;
        let io = Arc::clone(&config.io);
        let dir = &config.data_dir;
        io.create_dir_all(dir).map_err(catalog_err("create", dir))?;
        // The data directory's own entry (a new one, or one an earlier open created
        // and crashed before syncing) must be durable before anything in it counts.
        sync_dirs(io.as_ref(), dir, dir.parent().unwrap_or(dir))?;
        let lock_path = dir.join("rill.lock");
        let lock = io.try_lock(&lock_path).map_err(|e| BrokerError::Catalog {
            op: "lock (is another rill using this data directory?)",
            path: lock_path.clone(),
            source: e,
        })?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let env = LogEnv::new(Arc::clone(&io), clock)
            .with_files(Arc::new(FileCache::new(config.open_files_max)));
        // A cluster's catalog is the metadata group's, mirrored once the broker runs.
        let file = if cluster.is_some() {
            CatalogFile::default()
        } else {
            catalog::load(io.as_ref(), dir)?
        };
        let flusher = Flusher::start(config.flush_tick);
        let mut streams = BTreeMap::new();
        for (name, stream) in &file.streams {
            let mut topics = BTreeMap::new();
            for (topic_name, topic) in &stream.topics {
                let opened = open_topic(
                    &config,
                    &env,
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
        if cluster.is_none() {
            remove_orphan_topic_dirs(io.as_ref(), dir, &file)?;
        }
        let offsets = OffsetStore::open_in(dir, &env)?;
        let auth = crate::auth::Auth::open(
            io.as_ref(),
            dir,
            config.auth_required,
            config.scram_iterations,
        )?;
        let reserve = Reserve::new(Arc::clone(&io), dir, config.reserved_space_bytes);
        reserve.ensure();
        tracing::info!(data_dir = %dir.display(), streams = streams.len(), "broker opened");
        Ok(Self {
            config,
            env,
            streams: RwLock::new(streams),
            admin: Mutex::new(()),
            offsets,
            groups: crate::groups::Groups::default(),
            flusher,
            clock: SystemClock,
            shutting_down: AtomicBool::new(false),
            reserve,
            lock: Mutex::new(Some(lock)),
            upkeep_gate: RwLock::new(()),
            cluster,
            mirrored: tokio::sync::watch::channel(0).0,
            cluster_members: RwLock::new(BTreeMap::new()),
            cluster_offsets: RwLock::new(Arc::new(BTreeMap::new())),
            auth,
            quotas: crate::quota::Quotas::new(rill_auth::store::USERS_MAX),
            range_policy: crate::policy::RangePolicy::default(),
            sealing_ranges: Mutex::default(),
        })
    }

    /// Whether connections must authenticate (`--auth`).
    pub fn auth_required(&self) -> bool {
        self.auth.required()
    }

    /// Every user's use of its quotas on this node, for `/metrics`: only users with a
    /// quota who made a request since the broker opened.
    pub fn quota_usage(&self) -> Vec<crate::quota::QuotaUsage> {
        self.quotas.usage()
    }

    /// On a cluster node whose metadata holds no credentials yet: proposes this node's
    /// own `auth.json`, if it has users (docs/SECURITY.md §2.3). Blocks until the
    /// cluster answers: call it where blocking is allowed.
    pub fn adopt_local_auth(&self) -> Result<(), BrokerError> {
        self.auth.adopt_local()
    }

    /// Whether the credential store has any user.
    pub fn has_users(&self) -> bool {
        self.auth.has_users()
    }

    /// Makes the first admin, named `admin`, with `password`, if there is no user yet
    /// (docs/SECURITY.md §2.2). Returns whether it did.
    pub fn bootstrap_admin(&self, password: &rill_auth::Secret) -> Result<bool, BrokerError> {
        self.auth
            .bootstrap_admin(self.config.io.as_ref(), &self.config.data_dir, password)
    }

    /// The broker's options.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    // The catalog map changes by one insert or remove at a time, so a panic cannot
    // leave it half-changed: a lock without poisoning.
    pub(crate) fn read_streams(&self) -> RwLockReadGuard<'_, BTreeMap<String, Stream>> {
        self.streams.read()
    }

    pub(crate) fn write_streams(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Stream>> {
        self.streams.write()
    }

    pub(crate) fn check_running(&self) -> Result<(), BrokerError> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(BrokerError::ShuttingDown);
        }
        Ok(())
    }

    /// The catalog as it would be saved.
    /// Creates partitions `from..to` of a topic that grows (an alter adding partitions,
    /// a split or merge opening ranges): a directory left by a change that crashed
    /// before its catalog was saved is removed first; the new directories are synced
    /// down from the data directory. On failure nothing it created is left.
    pub(crate) fn create_partitions(
        &self,
        stream: &str,
        topic: &str,
        (from, to): (u32, u32),
        options: &PartitionOptions,
    ) -> Result<Vec<Arc<Partition>>, BrokerError> {
        let dir = topic_dir(&self.config.data_dir, stream, topic);
        let io = self.env.io.as_ref();
        let mut created = Vec::new();
        for p in from..to {
            let path = dir.join(p.to_string());
            if io.exists(&path)
                && let Err(e) = io.remove_dir_all(&path)
            {
                self.remove_partitions(stream, topic, from, &created);
                return Err(catalog_err("remove", &path)(e));
            }
            let partition = Arc::new(open_partition(
                &self.env,
                &self.flusher,
                &dir,
                (stream, topic, p),
                options,
            ));
            let failure = partition.failure();
            created.push(partition);
            if let Some(reason) = failure {
                self.remove_partitions(stream, topic, from, &created);
                return Err(BrokerError::PartitionUnavailable {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                    partition: p,
                    reason,
                });
            }
        }
        if !created.is_empty()
            && let Err(e) = sync_dirs(io, &dir, &self.config.data_dir)
        {
            self.remove_partitions(stream, topic, from, &created);
            return Err(e);
        }
        Ok(created)
    }

    /// Closes and deletes partitions [`Broker::create_partitions`] made from `from` on
    /// (a change that failed before its catalog was saved).
    pub(crate) fn remove_partitions(
        &self,
        stream: &str,
        topic: &str,
        from: u32,
        created: &[Arc<Partition>],
    ) {
        let dir = topic_dir(&self.config.data_dir, stream, topic);
        for (i, p) in created.iter().enumerate() {
            let _ = p.close();
            let _ = self
                .env
                .io
                .remove_dir_all(&dir.join((from as usize + i).to_string()));
        }
    }

    /// Saves the catalog with a topic's options replaced (the commit point of an alter,
    /// a split or a merge).
    pub(crate) fn save_topic_config(
        &self,
        stream: &str,
        topic: &str,
        config: &TopicConfig,
    ) -> Result<(), BrokerError> {
        let mut file = self.catalog_file();
        if let Some(t) = file
            .streams
            .get_mut(stream)
            .and_then(|s| s.topics.get_mut(topic))
        {
            t.config = config.clone();
        }
        self.save_catalog(&file)
    }

    /// Puts in memory what [`Broker::save_topic_config`] saved: the topic with its new
    /// options and its partitions followed by `added`.
    pub(crate) fn replace_topic(
        &self,
        stream: &str,
        topic: &str,
        old: &Topic,
        config: TopicConfig,
        added: Vec<Arc<Partition>>,
    ) {
        let mut partitions = old.partitions.clone();
        partitions.extend(added);
        let changed = Arc::new(Topic {
            created_us: old.created_us,
            config,
            partitions,
        });
        if let Some(s) = self.write_streams().get_mut(stream) {
            s.topics.insert(topic.to_owned(), changed);
        }
    }

    pub(crate) fn catalog_file(&self) -> CatalogFile {
        let streams = self.read_streams();
        let elastic = streams
            .values()
            .any(|s| s.topics.values().any(|t| t.config.ranges.is_some()));
        CatalogFile {
            version: if elastic {
                catalog::CATALOG_VERSION_RANGES
            } else {
                catalog::CATALOG_VERSION
            },
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

    /// Persists a catalog; on a full disk it gives back the reserved space and tries
    /// once more, so an operator can still delete topics to free space.
    pub(crate) fn save_catalog(&self, file: &CatalogFile) -> Result<(), BrokerError> {
        match catalog::save(self.env.io.as_ref(), &self.config.data_dir, file) {
            Err(BrokerError::Catalog { source, .. })
                if crate::reserve::is_no_space(&source) && self.reserve.release() =>
            {
                tracing::warn!("the disk is full: used the reserved space to save the catalog");
                catalog::save(self.env.io.as_ref(), &self.config.data_dir, file)
            }
            other => other,
        }
    }

    // ---- upkeep --------------------------------------------------------------------

    /// Every open partition, of every topic, with its name.
    /// Every topic, with its stream's and its own name.
    pub(crate) fn all_topics(&self) -> Vec<(String, String, Arc<Topic>)> {
        self.read_streams()
            .iter()
            .flat_map(|(s, stream)| {
                stream
                    .topics
                    .iter()
                    .map(move |(t, topic)| (s.clone(), t.clone(), Arc::clone(topic)))
            })
            .collect()
    }

    pub(crate) fn all_partitions(&self) -> Vec<(String, String, u32, Arc<Partition>)> {
        self.read_streams()
            .iter()
            .flat_map(|(s, stream)| {
                stream.topics.iter().flat_map(move |(t, topic)| {
                    topic
                        .partitions
                        .iter()
                        .enumerate()
                        .map(move |(i, p)| (s.clone(), t.clone(), i as u32, Arc::clone(p)))
                })
            })
            .collect()
    }

    /// File descriptors the broker may hold open at once with the topics it has now:
    /// three per partition (the active segment's `.log` and indexes), the offsets
    /// log's three, the cache of sealed-segment files, and a few for the lock and
    /// catalog changes. A server derives its connection limit from what is left.
    pub fn files_needed(&self) -> usize {
        const FIXED: usize = 3 + 1 + 8;
        let partitions: usize = self
            .read_streams()
            .values()
            .flat_map(|s| s.topics.values())
            .map(|t| t.partitions.len())
            .sum();
        3 * partitions + self.env.files.capacity() + FIXED
    }

    /// Sealed-segment files open now (for metrics).
    pub fn open_segment_files(&self) -> usize {
        self.env.files.open_files()
    }

    /// Registers a reopened log with the flusher.
    pub(crate) fn register_flush(&self, partition: &Partition) {
        if let Ok(log) = partition.log() {
            self.flusher.register(&log);
        }
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Stops accepting requests, syncs and closes every partition and the offsets log.
    pub fn shutdown(&self) -> Result<(), BrokerError> {
        if self.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let _no_upkeep = self.upkeep_gate.write();
        let mut first_error = None;
        for (_, _, _, p) in self.all_partitions() {
            if let Err(e) = p.close() {
                tracing::error!(error = %e, "closing a partition at shutdown");
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.offsets.close() {
            first_error.get_or_insert(e);
        }
        // Nothing touches the files any more (upkeep checks for shutdown first).
        self.lock.lock().take();
        tracing::info!("broker shut down");
        first_error.map_or(Ok(()), Err)
    }
}

/// Syncs `dir` and every directory above it up to and including `top`, so each one's
/// entry in its parent is durable.
pub(crate) fn sync_dirs(io: &dyn Io, dir: &Path, top: &Path) -> Result<(), BrokerError> {
    for d in dir.ancestors() {
        let d = if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        };
        io.sync_dir(d).map_err(catalog_err("sync directory", d))?;
        if d == top || !d.starts_with(top) {
            break;
        }
    }
    Ok(())
}

pub(crate) fn topic_dir(data_dir: &Path, stream: &str, topic: &str) -> PathBuf {
    data_dir.join("streams").join(stream).join(topic)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn open_topic(
    config: &BrokerConfig,
    env: &LogEnv,
    flusher: &Flusher,
    stream: &str,
    topic: &str,
    topic_config: &TopicConfig,
    created_us: i64,
    fresh: bool,
) -> Result<Topic, BrokerError> {
    let dir = topic_dir(&config.data_dir, stream, topic);
    let io = env.io.as_ref();
    if fresh && io.exists(&dir) {
        // Left over from a delete that crashed before removing its files.
        io.remove_dir_all(&dir)
            .map_err(catalog_err("remove", &dir))?;
    }
    let options = partition_options(config, topic_config);
    let partitions: Vec<Arc<Partition>> = (0..topic_config.partitions)
        .map(|p| {
            Arc::new(open_partition(
                env,
                flusher,
                &dir,
                (stream, topic, p),
                &options,
            ))
        })
        .collect();
    // An elastic topic's sealed ranges take no appends (docs/RANGES.md §3).
    if let Some(stored) = &topic_config.ranges {
        for r in &stored.ranges {
            if let (Some(end), Some(p)) = (r.sealed_at, partitions.get(r.id as usize)) {
                p.open_sealed(end);
            }
        }
    }
    Ok(Topic {
        created_us,
        config: topic_config.clone(),
        partitions,
    })
}

/// The options a partition of a topic with `topic_config` is opened with.
pub(crate) fn partition_options(
    config: &BrokerConfig,
    topic_config: &TopicConfig,
) -> PartitionOptions {
    let mut log = topic_config.log_config(config.max_batch_bytes);
    log.timestamp_ahead_max = config.max_timestamp_ahead;
    log.cache_tail_bytes = config.cache_tail_bytes;
    PartitionOptions {
        log,
        producers_max: config.producers_per_partition_max,
        recent_batches: config.producer_batches_remembered,
        sequence_wait: config.sequence_wait,
    }
}

/// Opens partition `name.2` of a topic in `topic_dir` (failed, not an error, if its
/// files cannot be opened) and registers its log with the flusher (write-behind,
/// drop-behind and `interval` syncs).
pub(crate) fn open_partition(
    env: &LogEnv,
    flusher: &Flusher,
    topic_dir: &Path,
    name: (&str, &str, u32),
    options: &PartitionOptions,
) -> Partition {
    let (stream, topic, p) = name;
    let partition = Partition::open(
        (stream.to_owned(), topic.to_owned(), p),
        &topic_dir.join(p.to_string()),
        options.clone(),
        env,
    );
    if let Ok(log) = partition.log() {
        flusher.register(&log);
    }
    partition
}

/// Removes topic directories that the catalog does not name: the remains of a create
/// that crashed before saving the catalog, or of a delete that crashed after.
fn remove_orphan_topic_dirs(
    io: &dyn Io,
    data_dir: &Path,
    file: &CatalogFile,
) -> Result<(), BrokerError> {
    let streams_dir = data_dir.join("streams");
    let Ok(streams) = io.read_dir(&streams_dir) else {
        return Ok(());
    };
    for stream in streams.into_iter().filter(|p| io.is_dir(p)) {
        let stream_name = name_of(&stream);
        let known = file.streams.get(&stream_name);
        let Ok(topics) = io.read_dir(&stream) else {
            continue;
        };
        for topic in topics.into_iter().filter(|p| io.is_dir(p)) {
            let topic_name = name_of(&topic);
            let Some(t) = known.and_then(|s| s.topics.get(&topic_name)) else {
                tracing::warn!(path = %topic.display(), "removing a topic directory the catalog does not know");
                io.remove_dir_all(&topic)
                    .map_err(catalog_err("remove", &topic))?;
                continue;
            };
            // Partitions an alter created and then crashed before the catalog counted
            // them (docs/PROTOCOL.md §3.30).
            let Ok(partitions) = io.read_dir(&topic) else {
                continue;
            };
            for partition in partitions.into_iter().filter(|p| io.is_dir(p)) {
                let beyond = name_of(&partition)
                    .parse::<u32>()
                    .is_ok_and(|n| n >= t.config.partitions);
                if beyond {
                    tracing::warn!(path = %partition.display(), "removing a partition directory the catalog does not count");
                    io.remove_dir_all(&partition)
                        .map_err(catalog_err("remove", &partition))?;
                }
            }
        }
    }
    Ok(())
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
