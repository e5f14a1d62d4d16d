//! The nemesis: the soak's checks over a cluster of real `rill serve` processes under a
//! seeded schedule of faults (docs/REPLICATION.md §12).
//!
//! [`run`] starts a cluster on loopback (three nodes by default) whose node-to-node
//! links all pass through fault proxies (`cluster.rs`), creates a topic (`--partitions`,
//! durability `always`, a replica on every node) and runs, concurrently: the soak's
//! idempotent keyed producer, one named consumer per partition that reads and stores
//! its offset explicitly (`readers.rs`) and a watcher of those offsets, and the soak's
//! consumer-group members (`--members`, the first committing explicitly, the others
//! with automatic policies) with the watcher of the group's offsets. Meanwhile it walks the schedule (`schedule.rs`, drawn from the seed
//! alone and printed at the start): a quiet spell, then one fault (kill -9, SIGSTOP,
//! every link of a node cut or black-holed, the links between two nodes cut, one
//! direction of a link black-holed) held for a while, then everything healed.
//!
//! At the end the producer stops, the cluster heals and must converge (every node up,
//! every partition led, no follower behind), the readers read to the end, and a cursor
//! reader reads every partition from the start. Then every node stops on SIGTERM and
//! each replica's log is read from its data directory. The checker requires, besides
//! the soak's checks (every acknowledged record stored exactly once at its position, no
//! record of an unknown send stored twice, each key's records in order, stored offsets
//! never below an earlier reading or an acknowledged commit, every record a reader was
//! handed still stored where it was read, every stored record handed out): that the
//! replicas of each partition hold identical logs up to its high watermark
//! (`replicas_differ`), that the cluster converged, and that every node exits 0.
//!
//! The group is checked as the soak checks it (its stored offsets never backward, every
//! stored record handed out, none it handed out gone), apart from the readers. The
//! run is replayable from its seed as the soak is: the schedule, the records and
//! the readers' restarts follow from it, the processes' timing does not. A failing run
//! keeps its directory, with the histories (`events.log`, `group-events.log`) and each
//! node's log.

mod cluster;
mod readers;
pub mod schedule;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rill_client::{Client, Durability, RetryPolicy, Topic, TopicOptions};
use tokio::sync::watch;

use crate::soak::check::{self, Findings};
use crate::soak::events::Events;
use crate::soak::load::{self, Shared, lock};
use crate::soak::{STREAM, SoakError, TOPIC, client_err, drain, read_back};
use cluster::Cluster;
use schedule::{Shape, Step};

/// How long the cluster may take to form, or to converge after healing.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the end of the run waits for the producer's last send.
const PRODUCER_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a reader or the watcher may take to stop.
const TASK_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a reading of the offsets that must happen is retried.
const READING_DEADLINE: Duration = Duration::from_secs(30);

/// What a nemesis run does; [`Options::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `rill` binary the nodes run.
    pub rill: PathBuf,
    /// The seed of every random choice (default: [`crate::soak::seed_from_env`]).
    pub seed: u64,
    /// How long the schedule runs at least (its quiet spells and holds; the run takes
    /// longer by the restarts and the end).
    pub length: Duration,
    /// Faults at least, however short that makes the schedule.
    pub min_faults: u32,
    /// Nodes, fault kinds, holds and quiet spells.
    pub shape: Shape,
    /// Partitions of the topic (default 3).
    pub partitions: u32,
    /// Distinct record keys (default 64).
    pub keys: u32,
    /// Records per send at most (default 32).
    pub batch_max: u32,
    /// Run the readers and the offsets watcher (default true).
    pub readers: bool,
    /// Consumer-group members (default 2, at most 8; 0: no group): the first commits
    /// explicitly, each other one with an automatic policy drawn from the seed.
    pub members: u32,
    /// The directory of the nodes' data (default: a new temporary one, removed after a
    /// passing run and kept after a failing one).
    pub data: Option<PathBuf>,
    /// Keep the temporary directory even after a passing run.
    pub keep_data: bool,
}

impl Options {
    /// The defaults: a schedule of `length` with the seed from
    /// [`crate::soak::seed_from_env`].
    pub fn new(rill: impl Into<PathBuf>, length: Duration) -> Self {
        Self {
            rill: rill.into(),
            seed: crate::soak::seed_from_env(),
            length,
            min_faults: 0,
            shape: Shape::default(),
            partitions: 3,
            keys: 64,
            batch_max: 32,
            readers: true,
            members: 2,
            data: None,
            keep_data: false,
        }
    }

    fn validate(&self) -> Result<(), SoakError> {
        let bad = |m: String| Err(SoakError::Options(m));
        if !self.rill.is_file() {
            return Err(SoakError::NoBinary {
                path: self.rill.clone(),
            });
        }
        if let Some(why) = self.shape.invalid() {
            return bad(why);
        }
        if self.shape.nodes > 9 {
            return bad("at most 9 nodes".into());
        }
        if self.members > 8 {
            return bad("at most 8 members".into());
        }
        if self.partitions == 0 || self.keys == 0 || self.batch_max == 0 {
            return bad("partitions, keys and batch_max must be positive".into());
        }
        Ok(())
    }

    /// The schedule this run walks.
    pub fn schedule(&self) -> Vec<Step> {
        schedule::draw(self.seed, &self.shape, self.length, self.min_faults)
    }
}

/// The outcome of a run. [`Summary::line`] is the one line the nemesis prints.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Summary {
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Records acknowledged.
    pub acked: u64,
    /// Records of failed sends (unknown outcome).
    pub unknown: u64,
    /// Of those, stored (once).
    pub unknown_stored: u64,
    /// Acknowledged records not stored at their acknowledged position.
    pub lost: u64,
    /// Extra copies of records stored more than once.
    pub duplicated: u64,
    /// Records stored after a later record of their key.
    pub reordered: u64,
    /// Readings where a stored offset was below an earlier one or an acknowledged commit.
    pub offsets_backward: u64,
    /// Distinct records the readers were handed.
    pub delivered: u64,
    /// Records handed out again (allowed).
    pub redelivered: u64,
    /// Stored records no reader was handed.
    pub undelivered: u64,
    /// Records a reader was handed that are not stored where it read them.
    pub vanished: u64,
    /// Stored records that are not what was sent, or misplaced, or offset gaps.
    pub corrupt: u64,
    /// Partitions whose replicas' logs differ below the high watermark (or end short
    /// of it).
    pub replicas_differ: u64,
    /// Whether the cluster converged after the last heal.
    pub converged: bool,
    /// Each node's exit code on the final SIGTERM (`None`: killed, or a signal).
    pub shutdown_exits: BTreeMap<u64, Option<i32>>,
    /// The seed.
    pub seed: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The directory of the nodes' data (kept after a failing run).
    pub data_dir: PathBuf,
    /// Send calls, and failed ones.
    pub sends: u64,
    /// See [`Summary::sends`].
    pub failed_sends: u64,
    /// Readings of the stored offsets taken.
    pub offset_readings: u64,
    /// Commits acknowledged, and failed.
    pub commits_acked: u64,
    /// See [`Summary::commits_acked`].
    pub commits_failed: u64,
    /// Errors the readers saw (each made the reader start over).
    pub reader_errors: u64,
    /// Distinct records the consumer group handed out.
    pub group_delivered: u64,
    /// Records the group handed out again (allowed).
    pub group_redelivered: u64,
    /// Stored records the group never handed out.
    pub group_undelivered: u64,
    /// Records the group handed out that are not stored where they were read.
    pub group_vanished: u64,
    /// Readings where a group's stored offset was below an earlier one or an
    /// acknowledged commit.
    pub group_offsets_backward: u64,
    /// The group's explicit commits acknowledged, refused (fenced) and failed.
    pub group_commits: (u64, u64, u64),
    /// Errors the group's members saw (retried).
    pub member_errors: u64,
    /// Slowest restart of a killed node (until it listened).
    pub restart_max: Duration,
    /// Records in the partitions at the end (the sum of the high watermarks).
    pub stored: u64,
    /// One line per problem found (a few per kind).
    pub problems: Vec<String>,
}

impl Summary {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.reordered == 0
            && self.offsets_backward == 0
            && self.corrupt == 0
            && self.vanished == 0
            && self.undelivered == 0
            && self.group_undelivered == 0
            && self.group_vanished == 0
            && self.group_offsets_backward == 0
            && self.replicas_differ == 0
            && self.converged
            && self.shutdown_exits.values().all(|c| *c == Some(0))
    }

    /// Faults injected in all.
    pub fn fault_count(&self) -> u32 {
        self.faults.values().sum()
    }

    /// `faults=N (kill=… pause=…) acked=A unknown=U lost=L duplicated=D reordered=R
    /// offsets_backward=B vanished=V undelivered=X replicas_differ=Y delivered=Z
    /// redelivered=W seed=S elapsed_s=T`
    pub fn line(&self) -> String {
        let kinds: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        format!(
            "faults={} ({}) acked={} unknown={} lost={} duplicated={} reordered={} \
             offsets_backward={} vanished={} undelivered={} replicas_differ={} \
             delivered={} redelivered={} group_delivered={} group_redelivered={} \
             group_offsets_backward={} group_vanished={} group_undelivered={} seed={} \
             elapsed_s={:.1}",
            self.fault_count(),
            kinds.join(" "),
            self.acked,
            self.unknown,
            self.lost,
            self.duplicated,
            self.reordered,
            self.offsets_backward,
            self.vanished,
            self.undelivered,
            self.replicas_differ,
            self.delivered,
            self.redelivered,
            self.group_delivered,
            self.group_redelivered,
            self.group_offsets_backward,
            self.group_vanished,
            self.group_undelivered,
            self.seed,
            self.elapsed.as_secs_f64()
        )
    }

    /// The checks not in [`Summary::line`] and the run's statistics, for stderr.
    pub fn details(&self) -> String {
        let exits: Vec<String> = self
            .shutdown_exits
            .iter()
            .map(|(n, c)| format!("{n}:{}", c.map_or("none".to_owned(), |c| c.to_string())))
            .collect();
        format!(
            "stored={} sends={} failed_sends={} unknown_stored={} corrupt={} converged={} \
             shutdown_exits={} offset_readings={} commits_acked={} commits_failed={} \
             reader_errors={} group_commits={:?} member_errors={} restart_max_ms={} data={}",
            self.stored,
            self.sends,
            self.failed_sends,
            self.unknown_stored,
            self.corrupt,
            self.converged,
            exits.join(","),
            self.offset_readings,
            self.commits_acked,
            self.commits_failed,
            self.reader_errors,
            self.group_commits,
            self.member_errors,
            self.restart_max.as_millis(),
            self.data_dir.display()
        )
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line())
    }
}

/// Runs the nemesis (blocking; it starts its own tokio runtime) and returns its
/// verdict. Progress goes to stderr. A failing run keeps its directory (see
/// [`Summary::data_dir`]); so does a run that ends in an error.
pub fn run(options: &Options) -> Result<Summary, SoakError> {
    options.validate()?;
    let (root, temp) = match &options.data {
        Some(dir) => (dir.clone(), None),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("rill-nemesis-")
                .tempdir()
                .map_err(|source| SoakError::Io {
                    what: "create a temporary directory".into(),
                    source,
                })?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    let result = run_in(options, &root);
    let keep = options.keep_data || !matches!(&result, Ok(s) if s.passed());
    if let Some(temp) = temp
        && keep
    {
        let root = temp.keep();
        eprintln!(
            "[nemesis] kept {} (history in events.log, each node's log in n*.server.log)",
            root.display()
        );
    }
    result
}

fn run_in(options: &Options, root: &Path) -> Result<Summary, SoakError> {
    let started = Instant::now();
    let seed = options.seed;
    let steps = options.schedule();
    eprintln!(
        "[nemesis] seed {seed} (replay with --seed {seed} or RILL_SEED={seed}); {} nodes, \
         {} faults; rill {}; data {}",
        options.shape.nodes,
        steps.len(),
        options.rill.display(),
        root.display()
    );
    for (i, step) in steps.iter().enumerate() {
        eprintln!("[nemesis] schedule {}: {step}", i + 1);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| SoakError::Io {
            what: "start a tokio runtime".into(),
            source,
        })?;
    std::fs::create_dir_all(root).map_err(|source| SoakError::Io {
        what: format!("create {}", root.display()),
        source,
    })?;
    let events = Events::create(&root.join("events.log"))?;
    let mut cluster = Cluster::start(&runtime, &options.rill, root, options.shape.nodes)?;
    let url = cluster.url();
    let connect = |what: &'static str| {
        let url = url.clone();
        runtime.block_on(async move {
            Client::builder()
                .retry(RetryPolicy {
                    retries: 200,
                    backoff: Duration::from_millis(20),
                    backoff_max: Duration::from_millis(200),
                })
                .connect(&url)
                .await
                .map(|c| c.stream(STREAM).topic(TOPIC))
                .map_err(client_err(format!("connect the {what}")))
        })
    };
    let admin = connect("admin client")?;
    runtime.block_on(create_topic(&admin, options.partitions))?;
    if !runtime.block_on(converge(&admin, options.shape.nodes))? {
        return Err(SoakError::Stalled(format!(
            "the cluster did not form within {CONVERGE_TIMEOUT:?}"
        )));
    }
    eprintln!("[nemesis] the cluster formed; {url}");

    let shared = Arc::new(Shared::new(options.keys, events));
    // The group's deliveries, offsets and commits apart from the readers': its own
    // history (its `produced` is not used).
    let group = Arc::new(Shared::new(
        options.keys,
        Events::create(&root.join("group-events.log"))?,
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let producer_topic = connect("producer")?;
    let producer = runtime
        .block_on(load::producer(&producer_topic))
        .map_err(client_err("build the producer"))?;
    let producing = runtime.spawn(load::produce(
        producer,
        Arc::clone(&shared),
        seed ^ 0x5eed_0f10_ad00,
        options.keys,
        options.batch_max,
    ));
    let mut tasks = Vec::new();
    if options.readers {
        for p in 0..options.partitions {
            tasks.push(runtime.spawn(readers::reader(
                connect("reader")?,
                p,
                Arc::clone(&shared),
                seed ^ 0x7ead_e500,
                stop_rx.clone(),
            )));
        }
        tasks.push(runtime.spawn(readers::watch_offsets(
            connect("offsets watcher")?,
            options.partitions,
            Arc::clone(&shared),
            stop_rx.clone(),
        )));
    }
    let mut members = Vec::new();
    if options.members > 0 {
        let mut policies = StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        for index in 0..options.members {
            let policy = load::member_policy(index, &[], &mut policies);
            eprintln!("[nemesis] member {index}: commit policy {policy:?}");
            members.push(runtime.spawn(load::member(
                index,
                policy,
                connect("member")?,
                Arc::clone(&group),
                stop_rx.clone(),
            )));
        }
        tasks.push(runtime.spawn(load::watch_offsets(
            connect("group offsets watcher")?,
            Arc::clone(&group),
            stop_rx,
        )));
    }

    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut restart_max = Duration::ZERO;
    let mut last_acked = 0;
    for (i, step) in steps.iter().enumerate() {
        std::thread::sleep(step.quiet);
        if producing.is_finished() {
            return Err(SoakError::Stalled(
                "the producer task ended before it was told to stop".into(),
            ));
        }
        shared
            .events
            .log(format_args!("fault {}: {}", i + 1, step.fault));
        cluster.inject(step.fault);
        std::thread::sleep(step.hold);
        restart_max = restart_max.max(cluster.heal()?);
        shared.events.log(format_args!("fault {}: healed", i + 1));
        *faults.entry(step.fault.kind()).or_default() += 1;
        let (acked, unknown) = {
            let p = lock(&shared.produced);
            (p.acked.len() as u64, p.unknown.len())
        };
        let delivered = lock(&shared.deliveries).distinct();
        let backward = lock(&shared.offsets).backward;
        eprintln!(
            "[nemesis] {}/{}: {step}; acked {acked} (+{}), unknown {unknown}, delivered \
             {delivered}, offsets backward {backward}",
            i + 1,
            steps.len(),
            acked - last_acked
        );
        last_acked = acked;
    }

    // The end: stop producing, heal (done), converge, let the readers read to the end,
    // then read everything back.
    shared.stop_producing();
    if runtime
        .block_on(async { tokio::time::timeout(PRODUCER_STOP_TIMEOUT, producing).await })
        .is_err()
    {
        return Err(SoakError::Stalled(format!(
            "the producer's last send did not end within {PRODUCER_STOP_TIMEOUT:?}"
        )));
    }
    let mut problems = Vec::new();
    let converged = runtime.block_on(converge(&admin, options.shape.nodes))?;
    if !converged {
        problems.push(format!(
            "converged: the cluster did not converge within {CONVERGE_TIMEOUT:?} of the last heal"
        ));
    }
    if options.readers {
        problems.extend(runtime.block_on(drain(&admin, &shared))?);
    }
    if options.members > 0 {
        problems.extend(
            runtime
                .block_on(drain(&admin, &group))?
                .map(|p| format!("group {p}")),
        );
    }
    let _ = stop_tx.send(true);
    for m in members {
        match runtime.block_on(async { tokio::time::timeout(TASK_STOP_TIMEOUT, m).await }) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("[nemesis] a member ended with an error: {e}"),
            Ok(Err(e)) => eprintln!("[nemesis] a member task failed: {e}"),
            Err(_) => {
                return Err(SoakError::Stalled(format!(
                    "a member did not stop within {TASK_STOP_TIMEOUT:?}"
                )));
            }
        }
    }
    for task in tasks {
        if runtime
            .block_on(async { tokio::time::timeout(TASK_STOP_TIMEOUT, task).await })
            .is_err()
        {
            return Err(SoakError::Stalled(format!(
                "a reader or the watcher did not stop within {TASK_STOP_TIMEOUT:?}"
            )));
        }
    }
    if options.readers {
        runtime.block_on(reading_after(&admin, options.partitions, &shared))?;
    }
    if options.members > 0 {
        runtime.block_on(crate::soak::reading_after(
            &admin,
            &group,
            "after the members left",
        ))?;
    }
    let stored = runtime.block_on(read_back(&admin))?;
    let watermarks = runtime.block_on(watermarks(&admin))?;
    let shutdown_exits = cluster.terminate();
    drop(runtime);
    shared.events.flush();
    group.events.flush();
    for (node, code) in &shutdown_exits {
        if *code != Some(0) {
            problems.push(format!(
                "shutdown: node {node} exited with {code:?} on SIGTERM, not 0"
            ));
        }
    }
    let (replicas_differ, differ) = compare_replicas(&cluster, &watermarks);
    problems.extend(differ);

    let produced = lock(&shared.produced).clone();
    let deliveries = lock(&shared.deliveries).clone();
    let mut findings = check::verify(&produced, &stored, options.partitions, &deliveries);
    if !options.readers {
        findings.undelivered = 0;
        findings.problems.retain(|p| !p.starts_with("undelivered"));
    }
    let offsets = lock(&shared.offsets).clone();
    let Findings {
        lost,
        duplicated,
        reordered,
        corrupt,
        vanished,
        undelivered,
        unknown_stored,
        problems: found,
    } = findings;
    problems.splice(0..0, found);
    problems.extend(offsets.problems.iter().cloned());
    let group_deliveries = lock(&group.deliveries).clone();
    let group_offsets = lock(&group.offsets).clone();
    let (group_vanished, group_undelivered) = if options.members > 0 {
        // The log's checks are the same as above; only the group's own are new.
        let f = check::verify(&produced, &stored, options.partitions, &group_deliveries);
        problems.extend(
            f.problems
                .iter()
                .filter(|p| p.starts_with("vanished") || p.starts_with("undelivered"))
                .map(|p| format!("group {p}")),
        );
        problems.extend(group_offsets.problems.iter().map(|p| format!("group {p}")));
        (f.vanished, f.undelivered)
    } else {
        (0, 0)
    };
    Ok(Summary {
        faults,
        acked: produced.acked.len() as u64,
        unknown: produced.unknown.len() as u64,
        unknown_stored,
        lost,
        duplicated,
        reordered,
        offsets_backward: offsets.backward,
        delivered: deliveries.distinct(),
        redelivered: deliveries.redelivered(),
        undelivered,
        vanished,
        corrupt,
        replicas_differ,
        converged,
        shutdown_exits,
        seed,
        elapsed: started.elapsed(),
        data_dir: root.to_path_buf(),
        sends: produced.sends,
        failed_sends: produced.failed_sends,
        offset_readings: offsets.readings,
        commits_acked: shared.commits_acked.load(Ordering::Relaxed),
        commits_failed: shared.commits_failed.load(Ordering::Relaxed),
        reader_errors: shared.member_errors.load(Ordering::Relaxed),
        group_delivered: group_deliveries.distinct(),
        group_redelivered: group_deliveries.redelivered(),
        group_undelivered,
        group_vanished,
        group_offsets_backward: group_offsets.backward,
        group_commits: (
            group.commits_acked.load(Ordering::Relaxed),
            group.commits_refused.load(Ordering::Relaxed),
            group.commits_failed.load(Ordering::Relaxed),
        ),
        member_errors: group.member_errors.load(Ordering::Relaxed),
        restart_max,
        stored: watermarks.values().sum(),
        problems,
    })
}

/// Creates the topic, retrying while the cluster forms.
async fn create_topic(topic: &Topic, partitions: u32) -> Result<(), SoakError> {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let created = topic
            .create_with(
                &TopicOptions {
                    partitions: Some(partitions),
                    durability: Some(Durability::Always),
                    ..TopicOptions::default()
                },
                false,
            )
            .await;
        match created {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                eprintln!("[nemesis] creating the topic failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(client_err("create the topic soak/t")(e)),
        }
    }
}

/// Waits until every node is up, every partition of the topic has a leader, and no
/// follower is behind; `false` if that did not happen within `CONVERGE_TIMEOUT`.
async fn converge(topic: &Topic, nodes: u64) -> Result<bool, SoakError> {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let mut last = String::from("no status");
    while Instant::now() < deadline {
        match topic.client().cluster_status().await {
            Ok(status) => {
                let ours: Vec<_> = status
                    .partitions
                    .iter()
                    .filter(|p| p.stream == STREAM && p.topic == TOPIC)
                    .collect();
                let done = status.nodes.len() as u64 == nodes
                    && status.nodes.iter().all(|n| n.up)
                    && !ours.is_empty()
                    && ours.iter().all(|p| {
                        p.leader.is_some()
                            && p.lag.len() + 1 == p.replicas.len()
                            && p.lag.values().all(|&l| l == 0)
                    });
                if done {
                    return Ok(true);
                }
                last = format!("{status:?}");
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("[nemesis] not converged; last status: {last}");
    Ok(false)
}

/// Each partition's high watermark, from the converged cluster.
async fn watermarks(topic: &Topic) -> Result<BTreeMap<u32, u64>, SoakError> {
    let status = topic
        .client()
        .cluster_status()
        .await
        .map_err(client_err("read the cluster's status"))?;
    Ok(status
        .partitions
        .iter()
        .filter(|p| p.stream == STREAM && p.topic == TOPIC)
        .map(|p| (p.partition, p.high_watermark))
        .collect())
}

/// The reading of the stored offsets after the readers stopped: retried until it
/// succeeds.
async fn reading_after(topic: &Topic, partitions: u32, shared: &Shared) -> Result<(), SoakError> {
    let deadline = Instant::now() + READING_DEADLINE;
    loop {
        match readers::read_offsets(topic, partitions, shared, "at the end").await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                eprintln!("[nemesis] reading the stored offsets failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(client_err("read the stored offsets at the end")(e)),
        }
    }
}

/// Compares every partition's replicas, read from the stopped nodes' data directories:
/// each must hold the same batches, byte for byte, up to the partition's high watermark.
/// Returns the partitions that differ and a line for each.
fn compare_replicas(cluster: &Cluster, watermarks: &BTreeMap<u32, u64>) -> (u64, Vec<String>) {
    let mut differ = 0;
    let mut problems = Vec::new();
    for (&partition, &hw) in watermarks {
        let mut first: Option<(u64, Batches)> = None;
        let mut bad = None;
        for node in cluster.ids() {
            let dir = cluster
                .data(node)
                .join("cluster/streams")
                .join(STREAM)
                .join(TOPIC)
                .join(partition.to_string());
            let batches = match replica_batches(&dir, hw) {
                Ok(b) => b,
                Err(e) => {
                    bad = Some(format!("node {node}'s replica: {e}"));
                    break;
                }
            };
            match &first {
                None => first = Some((node, batches)),
                Some((other, theirs)) if *theirs != batches => {
                    bad = Some(format!(
                        "nodes {other} and {node} hold different batches below {hw} \
                         ({} and {} batches)",
                        theirs.len(),
                        batches.len()
                    ));
                    break;
                }
                Some(_) => {}
            }
        }
        if let Some(why) = bad {
            differ += 1;
            problems.push(format!("replicas_differ: partition {partition}: {why}"));
        }
    }
    (differ, problems)
}

/// A replica's batches as (base offset, bytes).
type Batches = Vec<(u64, Vec<u8>)>;

/// The batches of the replica in `dir` below `hw`, as (base offset, bytes); an error if
/// the log cannot be read or ends short of `hw`.
fn replica_batches(dir: &Path, hw: u64) -> Result<Batches, String> {
    let config = rill_storage::LogConfig {
        durability: Durability::Never,
        ..rill_storage::LogConfig::default()
    };
    let log = rill_storage::PartitionLog::open(dir, config)
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    if log.next_offset() < hw {
        return Err(format!(
            "it ends at {}, short of the high watermark {hw}",
            log.next_offset()
        ));
    }
    let mut out = Vec::new();
    let mut at = log.log_start();
    while at < hw {
        let read = log
            .read(at, 1 << 20)
            .map_err(|e| format!("reading at {at}: {e}"))?;
        if read.bytes.is_empty() {
            return Err(format!("nothing to read at {at}, below {hw}"));
        }
        for b in read.batches() {
            let b = b.map_err(|e| format!("a batch at {at}: {e}"))?;
            if b.base_offset() < hw {
                out.push((b.base_offset(), b.as_bytes().to_vec()));
            }
        }
        at = read.next_offset;
    }
    Ok(out)
}
