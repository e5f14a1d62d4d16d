//! The soak: kill -9 a real `rill serve` under load, many times, and check the history.
//!
//! [`run`] starts `rill serve` on a free port of 127.0.0.1 with one data directory,
//! creates a topic (`--partitions`, durability `always`) and runs, concurrently: an
//! idempotent keyed producer (records `k{j}` whose values encode the key and a per-key
//! sequence number), consumer-group members that consume and commit, and a watcher that
//! reads the group's stored offsets every 200 ms. Each cycle lets the load run for a
//! seeded random time, SIGKILLs the server, restarts it on the same port and data, and
//! reads the stored offsets again. At the end the producer stops, the server is killed
//! and restarted once more, the group catches up and leaves, and a cursor reader reads
//! every partition from the start. The checker (`check.rs`) then requires:
//!
//! - every acknowledged record stored exactly once, at the acknowledged position
//!   (`lost` counts those that are not);
//! - no record, acknowledged or of a failed send (unknown outcome), stored twice
//!   (`duplicated`);
//! - each key's records stored in the order they were sent (`reordered`);
//! - no stored group offset ever below an earlier reading or an acknowledged commit
//!   (`offsets_backward`);
//! - and, reported on stderr and failing the run likewise: only records the soak sent,
//!   in their key's partition, at dense offsets (`corrupt`); every record the group
//!   handed out still stored where it was read (`vanished`); every stored record handed
//!   out by the group at least once (`undelivered`); a clean exit on SIGTERM.
//!
//! Re-deliveries by the group (at least once) are allowed and only counted. The run is
//! replayable from its seed: the kill schedule, the produced records and the members'
//! commit policies follow from it (the timing of the processes does not). A failing run
//! keeps its data directory, with the run's history (`<data>.events.log`) and the
//! server's log (`<data>.server.log`) beside it.

pub(crate) mod check;
pub(crate) mod events;
pub(crate) mod load;
pub(crate) mod server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rill_client::{
    Client, ClientError, CommitPolicy, Durability, RetryPolicy, Topic, TopicOptions,
};
use tokio::sync::watch;

use check::{Findings, Stored, parse_record};
use events::Events;
use load::{Shared, lock};
use server::Server;

/// The stream and topic the soak writes.
pub(crate) const STREAM: &str = "soak";
pub(crate) const TOPIC: &str = "t";
/// Members at most.
const MEMBERS_MAX: u32 = 8;
/// How long the end of the run waits for the producer's last send.
const PRODUCER_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a member (storing its last offsets, leaving) or the watcher may take to stop.
const TASK_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the group may go without handing out a new record before the final drain
/// gives up (and reports what it never handed out).
const DRAIN_STALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the offsets reading after a restart is retried.
const READING_DEADLINE: Duration = Duration::from_secs(30);

/// What a soak run does; [`Options::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `rill` binary to run as the server.
    pub rill: PathBuf,
    /// Kill-and-restart cycles.
    pub cycles: u32,
    /// Partitions of the topic (default 4).
    pub partitions: u32,
    /// The seed of every random choice (default: [`seed_from_env`]).
    pub seed: u64,
    /// The server's data directory (default: a new temporary directory, removed after
    /// a passing run and kept after a failing one). Must not hold a soak topic yet.
    pub data: Option<PathBuf>,
    /// Keep the temporary data directory even after a passing run.
    pub keep_data: bool,
    /// Load time per cycle before the kill, drawn from this range, in ms (default 100–800).
    pub load_ms_min: u64,
    /// See [`Options::load_ms_min`].
    pub load_ms_max: u64,
    /// Time the server stays down after a kill, drawn from 0..=this, in ms (default 50).
    pub down_ms_max: u64,
    /// Distinct record keys (default 64).
    pub keys: u32,
    /// Records per send at most; each send has 1..=this (default 64).
    pub batch_max: u32,
    /// Consumer-group members (default 2, at most 8; 0: no group).
    pub members: u32,
    /// Commit policies of the members, in turn (default empty: the first member commits
    /// explicitly, each other one gets an automatic policy drawn from the seed); see
    /// [`policy_by_name`].
    pub policies: Vec<CommitPolicy>,
}

impl Options {
    /// The defaults, with `rill` as the server binary, `cycles` cycles and the seed
    /// from [`seed_from_env`].
    pub fn new(rill: impl Into<PathBuf>, cycles: u32) -> Self {
        Self {
            rill: rill.into(),
            cycles,
            partitions: 4,
            seed: seed_from_env(),
            data: None,
            keep_data: false,
            load_ms_min: 100,
            load_ms_max: 800,
            down_ms_max: 50,
            keys: 64,
            batch_max: 64,
            members: 2,
            policies: Vec::new(),
        }
    }

    fn validate(&self) -> Result<(), SoakError> {
        let bad = |m: &str| Err(SoakError::Options(m.to_owned()));
        if !self.rill.is_file() {
            return Err(SoakError::NoBinary {
                path: self.rill.clone(),
            });
        }
        if self.partitions == 0 || self.keys == 0 || self.batch_max == 0 {
            return bad("partitions, keys and batch_max must be positive");
        }
        if self.load_ms_min > self.load_ms_max {
            return bad("the load time's minimum is above its maximum");
        }
        if self.members > MEMBERS_MAX {
            return bad("at most 8 members");
        }
        Ok(())
    }
}

/// The commit policy a member gets for `name`: `disabled` (explicit commits every 10
/// records and when idle), `polling`, `each`, `every` (10), `all`, `interval-polling`
/// (100 ms), `interval-every` (100 ms, 10).
pub fn policy_by_name(name: &str) -> Option<CommitPolicy> {
    load::POLICIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
}

/// The names [`policy_by_name`] knows.
pub fn policy_names() -> impl Iterator<Item = &'static str> {
    load::POLICIES.iter().map(|(n, _)| *n)
}

/// `RILL_SEED` if set (and a number), else a random seed.
pub fn seed_from_env() -> u64 {
    std::env::var("RILL_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(rand::random)
}

/// Why a soak could not run to its verdict (a failed check is a [`Summary`], not this).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SoakError {
    /// The options are inconsistent.
    #[error("invalid options: {0}")]
    Options(String),
    /// The `rill` binary is missing.
    #[error(
        "no rill binary at {}: build it with `cargo build -p rill-cli` \
         (with the soak's profile, e.g. `--release`), or give its path",
        path.display()
    )]
    NoBinary {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A local operation failed (a temporary directory, a socket, the runtime).
    #[error("cannot {what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// `rill serve` did not start.
    #[error("rill serve did not start on port {port}: {reason}")]
    ServerStart {
        /// The port it was to listen on.
        port: u16,
        /// What happened.
        reason: String,
    },
    /// A client call the run cannot do without failed.
    #[error("{what}: {source}")]
    Client {
        /// What was attempted.
        what: String,
        /// The error.
        #[source]
        source: ClientError,
    },
    /// A part of the load stopped making progress (a hang in Rill, or in the soak).
    #[error("{0}")]
    Stalled(String),
}

pub(crate) fn client_err(what: impl Into<String>) -> impl FnOnce(ClientError) -> SoakError {
    let what = what.into();
    move |source| SoakError::Client { what, source }
}

/// The outcome of a run. [`Summary::line`] is the one line the soak prints.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Summary {
    /// Kill-and-restart cycles done (the final kill not counted).
    pub cycles: u32,
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
    /// Readings where a stored group offset was below an earlier one.
    pub offsets_backward: u64,
    /// Distinct records the group handed out.
    pub delivered: u64,
    /// Re-deliveries by the group (allowed).
    pub redelivered: u64,
    /// Stored records the group never handed out.
    pub undelivered: u64,
    /// Records the group read that a crash later took back or replaced.
    pub vanished: u64,
    /// Stored records that are not what the soak sent, or misplaced, or offset gaps.
    pub corrupt: u64,
    /// The server's exit code on the final SIGTERM (`None`: killed, or a signal).
    pub shutdown_exit: Option<i32>,
    /// The seed.
    pub seed: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The server's data directory (kept after a failing run).
    pub data_dir: PathBuf,
    /// Send calls, and failed ones.
    pub sends: u64,
    /// See [`Summary::sends`].
    pub failed_sends: u64,
    /// Group offsets readings taken.
    pub offset_readings: u64,
    /// Explicit commits acknowledged.
    pub commits_acked: u64,
    /// Explicit commits the broker refused (the partition had moved, the session ended).
    pub commits_refused: u64,
    /// Explicit commits that failed otherwise (the server was down too long).
    pub commits_failed: u64,
    /// Explicit commits not sent because the partition had moved away (and back) since
    /// the record was handed out.
    pub commits_skipped: u64,
    /// Errors the group members saw (retried).
    pub member_errors: u64,
    /// Slowest restart (until the server listened).
    pub restart_max: Duration,
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
            && self.shutdown_exit == Some(0)
    }

    /// `cycles=N acked=A unknown=U lost=L duplicated=D reordered=R offsets_backward=B
    /// delivered=X redelivered=Y seed=S elapsed_s=T`
    pub fn line(&self) -> String {
        format!(
            "cycles={} acked={} unknown={} lost={} duplicated={} reordered={} \
             offsets_backward={} delivered={} redelivered={} seed={} elapsed_s={:.1}",
            self.cycles,
            self.acked,
            self.unknown,
            self.lost,
            self.duplicated,
            self.reordered,
            self.offsets_backward,
            self.delivered,
            self.redelivered,
            self.seed,
            self.elapsed.as_secs_f64()
        )
    }

    /// The checks not in [`Summary::line`] and the run's statistics, for stderr.
    pub fn details(&self) -> String {
        format!(
            "sends={} failed_sends={} unknown_stored={} corrupt={} vanished={} \
             undelivered={} shutdown_exit={} offset_readings={} commits_acked={} \
             commits_refused={} commits_failed={} commits_skipped={} member_errors={} \
             restart_max_ms={} data={}",
            self.sends,
            self.failed_sends,
            self.unknown_stored,
            self.corrupt,
            self.vanished,
            self.undelivered,
            self.shutdown_exit
                .map_or("none".to_owned(), |c| c.to_string()),
            self.offset_readings,
            self.commits_acked,
            self.commits_refused,
            self.commits_failed,
            self.commits_skipped,
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

/// Runs a soak (blocking; it starts its own tokio runtime) and returns its verdict.
/// Progress goes to stderr. A failing run keeps its data directory (see
/// [`Summary::data_dir`]); so does a run that ends in an error, whose message says
/// where.
pub fn run(options: &Options) -> Result<Summary, SoakError> {
    options.validate()?;
    let (data_dir, temp) = match &options.data {
        Some(dir) => (dir.clone(), None),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("rill-soak-")
                .tempdir()
                .map_err(|source| SoakError::Io {
                    what: "create a temporary directory".into(),
                    source,
                })?;
            (temp.path().join("data"), Some(temp))
        }
    };
    let result = run_in(options, &data_dir);
    let keep = options.keep_data || !matches!(&result, Ok(s) if s.passed());
    if let Some(temp) = temp
        && keep
    {
        let data = temp.keep().join("data");
        eprintln!(
            "[soak] data kept in {} (history in {}, server log in {})",
            data.display(),
            sibling(&data, "events.log").display(),
            sibling(&data, "server.log").display()
        );
    }
    result
}

fn run_in(options: &Options, data_dir: &Path) -> Result<Summary, SoakError> {
    let started = Instant::now();
    let seed = options.seed;
    eprintln!(
        "[soak] seed {seed} (replay with --seed {seed} or RILL_SEED={seed}); {} cycles; \
         rill {}; data {}",
        options.cycles,
        options.rill.display(),
        data_dir.display()
    );
    let mut schedule = StdRng::seed_from_u64(seed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| SoakError::Io {
            what: "start a tokio runtime".into(),
            source,
        })?;
    let events = Events::create(&sibling(data_dir, "events.log"))?;
    let port = server::free_port()?;
    let mut server = Server::start(
        &options.rill,
        data_dir,
        &sibling(data_dir, "server.log"),
        port,
    )?;
    let url = server.url();

    // Separate connections, as separate applications would have: the producer, each
    // member (a group session lives as long as its connection), the watcher and admin.
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
    runtime
        .block_on(admin.create_with(
            &TopicOptions {
                partitions: Some(options.partitions),
                durability: Some(Durability::Always),
                ..TopicOptions::default()
            },
            false,
        ))
        .map_err(client_err("create the topic soak/t"))?;

    let shared = Arc::new(Shared::new(options.keys, events));
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
    let mut members = Vec::new();
    let mut policies = StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    for index in 0..options.members {
        let topic = connect("member")?;
        let policy = load::member_policy(index, &options.policies, &mut policies);
        eprintln!("[soak] member {index}: commit policy {policy:?}");
        members.push(runtime.spawn(load::member(
            index,
            policy,
            topic,
            Arc::clone(&shared),
            stop_rx.clone(),
        )));
    }
    let watcher = runtime.spawn(load::watch_offsets(
        connect("offsets watcher")?,
        Arc::clone(&shared),
        stop_rx,
    ));

    let mut restart_max = Duration::ZERO;
    let mut last_acked = 0;
    for cycle in 1..=options.cycles {
        let load_ms = schedule.random_range(options.load_ms_min..=options.load_ms_max);
        let down_ms = schedule.random_range(0..=options.down_ms_max);
        std::thread::sleep(Duration::from_millis(load_ms));
        if producing.is_finished() {
            return Err(SoakError::Stalled(
                "the producer task ended before it was told to stop".into(),
            ));
        }
        shared.events.log(format_args!("cycle {cycle}: SIGKILL"));
        server.kill9();
        std::thread::sleep(Duration::from_millis(down_ms));
        let took = server.start_again()?;
        shared.events.log(format_args!("cycle {cycle}: restarted"));
        restart_max = restart_max.max(took);
        runtime.block_on(reading_after(
            &admin,
            &shared,
            &format!("after restart {cycle}"),
        ))?;
        let (acked, unknown) = {
            let p = lock(&shared.produced);
            (p.acked.len() as u64, p.unknown.len())
        };
        let delivered = lock(&shared.deliveries).distinct();
        let backward = lock(&shared.offsets).backward;
        eprintln!(
            "[soak] cycle {cycle}/{}: load {load_ms} ms, down {down_ms} ms, restart {} ms; \
             acked {acked} (+{}), unknown {unknown}, delivered {delivered}, offsets backward {backward}",
            options.cycles,
            took.as_millis(),
            acked - last_acked
        );
        last_acked = acked;
    }

    // The end: stop producing, kill once more (the tail must survive it too), let the
    // group catch up and leave, then read everything back.
    shared.stop_producing();
    if runtime
        .block_on(async { tokio::time::timeout(PRODUCER_STOP_TIMEOUT, producing).await })
        .is_err()
    {
        return Err(SoakError::Stalled(format!(
            "the producer's last send did not end within {PRODUCER_STOP_TIMEOUT:?}"
        )));
    }
    shared.events.log(format_args!("final SIGKILL"));
    server.kill9();
    restart_max = restart_max.max(server.start_again()?);
    shared.events.log(format_args!("final restart"));
    runtime.block_on(reading_after(&admin, &shared, "after the final restart"))?;
    let mut drain_note = None;
    if options.members > 0 {
        drain_note = runtime.block_on(drain(&admin, &shared))?;
    }
    let _ = stop_tx.send(true);
    for m in members {
        match runtime.block_on(async { tokio::time::timeout(TASK_STOP_TIMEOUT, m).await }) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("[soak] a member ended with an error: {e}"),
            Ok(Err(e)) => eprintln!("[soak] a member task failed: {e}"),
            Err(_) => {
                return Err(SoakError::Stalled(format!(
                    "a member did not stop within {TASK_STOP_TIMEOUT:?}"
                )));
            }
        }
    }
    if runtime
        .block_on(async { tokio::time::timeout(TASK_STOP_TIMEOUT, watcher).await })
        .is_err()
    {
        return Err(SoakError::Stalled(format!(
            "the offsets watcher did not stop within {TASK_STOP_TIMEOUT:?}"
        )));
    }
    runtime.block_on(reading_after(&admin, &shared, "after the members left"))?;
    let stored = runtime.block_on(read_back(&admin))?;
    let shutdown_exit = server.terminate();
    drop(runtime);
    shared.events.flush();

    let produced = lock(&shared.produced).clone();
    let deliveries = lock(&shared.deliveries).clone();
    let mut findings = check::verify(&produced, &stored, options.partitions, &deliveries);
    if options.members == 0 {
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
        mut problems,
    } = findings;
    problems.extend(offsets.problems.iter().cloned());
    problems.extend(drain_note);
    if shutdown_exit != Some(0) {
        problems.push(format!(
            "shutdown: rill serve exited with {shutdown_exit:?} on SIGTERM, not 0"
        ));
    }
    Ok(Summary {
        cycles: options.cycles,
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
        shutdown_exit,
        seed,
        elapsed: started.elapsed(),
        data_dir: data_dir.to_path_buf(),
        sends: produced.sends,
        failed_sends: produced.failed_sends,
        offset_readings: offsets.readings,
        commits_acked: shared.commits_acked.load(Ordering::Relaxed),
        commits_refused: shared.commits_refused.load(Ordering::Relaxed),
        commits_failed: shared.commits_failed.load(Ordering::Relaxed),
        commits_skipped: shared.commits_skipped.load(Ordering::Relaxed),
        member_errors: shared.member_errors.load(Ordering::Relaxed),
        restart_max,
        problems,
    })
}

/// `<data>.<suffix>`: a file beside the data directory, named after it.
fn sibling(data_dir: &Path, suffix: &str) -> PathBuf {
    let mut name = data_dir.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    data_dir.with_file_name(name)
}

/// An offsets reading that must happen (after a restart): retried until it succeeds.
pub(crate) async fn reading_after(
    topic: &Topic,
    shared: &Shared,
    when: &str,
) -> Result<(), SoakError> {
    let deadline = Instant::now() + READING_DEADLINE;
    loop {
        match load::read_offsets(topic, shared, when).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                eprintln!("[soak] reading the group's offsets {when} failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(client_err(format!("read the group's offsets {when}"))(e)),
        }
    }
}

/// Waits until the group has handed out every stored record, or has handed out nothing
/// new for `DRAIN_STALL_TIMEOUT`; returns a note if it gave up.
pub(crate) async fn drain(topic: &Topic, shared: &Shared) -> Result<Option<String>, SoakError> {
    let ends: Vec<(u32, u64)> = topic
        .describe()
        .await
        .map_err(client_err("describe the topic"))?
        .partitions
        .iter()
        .map(|p| (p.partition, p.next_offset))
        .collect();
    let total: u64 = ends.iter().map(|(_, end)| end).sum();
    let mut last_progress = (Instant::now(), u64::MAX);
    loop {
        let missing = {
            let d = lock(&shared.deliveries);
            ends.iter()
                .map(|&(p, end)| (0..end).filter(|&o| !d.contains(p, o)).count() as u64)
                .sum::<u64>()
        };
        if missing == 0 {
            eprintln!("[soak] the group handed out all {total} stored records");
            return Ok(None);
        }
        if missing < last_progress.1 {
            last_progress = (Instant::now(), missing);
        } else if last_progress.0.elapsed() > DRAIN_STALL_TIMEOUT {
            return Ok(Some(format!(
                "drain: the group handed out nothing new for {DRAIN_STALL_TIMEOUT:?} with \
                 {missing} of {total} stored records never handed out"
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every stored record, read from the start of each partition with a cursor reader.
pub(crate) async fn read_back(topic: &Topic) -> Result<Vec<Stored>, SoakError> {
    let mut reader = topic.records("soak-verify");
    let mut stored = Vec::new();
    while let Some(record) = reader.next().await {
        let record = record.map_err(client_err("read the topic back"))?;
        stored.push(Stored {
            partition: record.partition,
            offset: record.offset,
            id: parse_record(record.key.as_deref(), &record.value),
        });
    }
    Ok(stored)
}
