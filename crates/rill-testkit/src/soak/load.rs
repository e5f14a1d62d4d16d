//! The load that runs while the server is killed and restarted: one idempotent keyed
//! producer, consumer-group members, and a watcher of the group's stored offsets. All of
//! them record what they saw in [`Shared`], which the checker reads at the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rill_client::{ClientError, CommitPolicy, ErrorCode, Message, Position, Producer, Topic};
use tokio::sync::watch;

use super::check::{Deliveries, OffsetWatch, Produced, RecordId, key_of, parse_record, value_of};
use super::events::Events;

/// The consumer group's name.
pub(crate) const GROUP: &str = "soak";
/// Records per produced batch: a send of up to `batch_max` records is split into
/// several batches per partition, in flight together, so the broker's ordering of
/// pipelined sequences is exercised on every restart.
const PRODUCER_BATCH_LENGTH: usize = 8;
/// Members with explicit commits store their position after this many records (and
/// whenever they are idle).
const COMMIT_EVERY: u32 = 10;
/// How long a member waits for a record before it counts as idle.
const MEMBER_IDLE: Duration = Duration::from_millis(100);
/// A member's session timeout: long enough to ride out a restart, short enough that a
/// lost member's partitions move within the run.
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause between two periodic readings of the group's stored offsets.
const OFFSETS_EVERY: Duration = Duration::from_millis(200);
/// Failed sends and member errors described on stderr at most (all are counted).
const SHOWN_ERRORS: u64 = 10;

/// Everything the load tasks record, shared with the orchestrator.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) events: Events,
    pub(crate) produced: Mutex<Produced>,
    pub(crate) deliveries: Mutex<Deliveries>,
    pub(crate) offsets: Mutex<OffsetWatch>,
    /// Held across one offsets reading, so readings never overlap.
    pub(crate) reading: tokio::sync::Mutex<()>,
    /// Set to stop the producer after its current send.
    stop_producing: AtomicBool,
    pub(crate) commits_acked: AtomicU64,
    /// Commits the broker fenced off (the partition moved, the session ended).
    pub(crate) commits_refused: AtomicU64,
    /// Commits that failed otherwise (the server was down past the retry budget).
    pub(crate) commits_failed: AtomicU64,
    /// Commits not sent: the partition had moved since the record was handed out.
    pub(crate) commits_skipped: AtomicU64,
    pub(crate) member_errors: AtomicU64,
}

/// Locks a mutex whose holders never panic half-way; a poisoned one is a bug.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("a soak task panicked holding shared state")
}

impl Shared {
    pub(crate) fn new(keys: u32, events: Events) -> Self {
        Self {
            events,
            produced: Mutex::new(Produced::new(keys)),
            deliveries: Mutex::new(Deliveries::default()),
            offsets: Mutex::new(OffsetWatch::default()),
            reading: tokio::sync::Mutex::new(()),
            stop_producing: AtomicBool::new(false),
            commits_acked: AtomicU64::new(0),
            commits_refused: AtomicU64::new(0),
            commits_failed: AtomicU64::new(0),
            commits_skipped: AtomicU64::new(0),
            member_errors: AtomicU64::new(0),
        }
    }

    pub(crate) fn stop_producing(&self) {
        self.stop_producing.store(true, Ordering::Release);
    }
}

/// Builds the idempotent producer: retries enough to wait out any restart (the pause
/// is constant, so a send finds the server soon after it is back).
pub(crate) async fn producer(topic: &Topic) -> Result<Producer, ClientError> {
    topic
        .producer()
        .batch_length(PRODUCER_BATCH_LENGTH)
        .retries(800, Duration::from_millis(25))
        .build()
        .await
}

/// Sends batches of 1..=`batch_max` records with random keys of `0..keys` until told
/// to stop, one send at a time so each key's records are sent in sequence order.
/// Every send runs to its end: its outcome is then known (acknowledged) or recorded
/// as unknown (failed).
pub(crate) async fn produce(
    producer: Producer,
    shared: Arc<Shared>,
    seed: u64,
    keys: u32,
    batch_max: u32,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !shared.stop_producing.load(Ordering::Acquire) {
        let n = rng.random_range(1..=batch_max);
        let ids: Vec<RecordId> = {
            let mut produced = lock(&shared.produced);
            (0..n)
                .map(|_| produced.next_id(rng.random_range(0..keys)))
                .collect()
        };
        let messages = ids
            .iter()
            .map(|&id| Message::new(value_of(id)).with_key(key_of(id.key)))
            .collect();
        match producer.send_batch(messages).await {
            Ok(positions) => lock(&shared.produced).acknowledged(&ids, &positions),
            Err(e) => {
                let failed = {
                    let mut produced = lock(&shared.produced);
                    produced.failed(&ids);
                    produced.failed_sends
                };
                if failed <= SHOWN_ERRORS {
                    eprintln!(
                        "[soak] a send of {n} records failed (their outcome is unknown): {e}"
                    );
                }
            }
        }
    }
    if let Err(e) = producer.shutdown().await {
        eprintln!("[soak] the producer's shutdown failed: {e}");
    }
}

/// The commit policies a member can have, by the names the soak's `--policies` takes.
/// `disabled` commits explicitly: a store per partition every `COMMIT_EVERY` records
/// and when idle (the crash-safe mode, whose acknowledged commits the offsets watch
/// holds the broker to).
pub(crate) const POLICIES: &[(&str, CommitPolicy)] = &[
    ("disabled", CommitPolicy::Disabled),
    ("polling", CommitPolicy::Polling),
    ("each", CommitPolicy::Each),
    ("every", CommitPolicy::Every(COMMIT_EVERY)),
    ("all", CommitPolicy::All),
    (
        "interval-polling",
        CommitPolicy::IntervalOrPolling(Duration::from_millis(100)),
    ),
    (
        "interval-every",
        CommitPolicy::IntervalOrEvery(Duration::from_millis(100), COMMIT_EVERY),
    ),
];

/// The commit policy of member `index`: `given[index % len]`, or if none are given,
/// `Disabled` for the first member and one drawn with `rng` for each other.
pub(crate) fn member_policy(index: u32, given: &[CommitPolicy], rng: &mut StdRng) -> CommitPolicy {
    if !given.is_empty() {
        return given[index as usize % given.len()];
    }
    if index == 0 {
        return CommitPolicy::Disabled;
    }
    POLICIES[rng.random_range(1..POLICIES.len())].1
}

/// One consumer-group member with commit policy `policy` (see [`member_policy`]),
/// until `stop` turns true. Each record handed out is recorded in `shared.deliveries`.
pub(crate) async fn member(
    index: u32,
    policy: CommitPolicy,
    topic: Topic,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ClientError> {
    let explicit = policy == CommitPolicy::Disabled;
    let (on_assigned, on_revoked) = (Arc::clone(&shared), Arc::clone(&shared));
    let mut consumer = topic
        .consumer_group(GROUP)
        .commit_policy(policy)
        .on_assigned(move |ps| {
            on_assigned
                .events
                .log(format_args!("member {index} assigned {ps:?}"));
        })
        .on_revoked(move |ps| {
            on_revoked
                .events
                .log(format_args!("member {index} revoked {ps:?}"));
        })
        .poll_interval(Duration::from_millis(10))
        .session_timeout(SESSION_TIMEOUT)
        .batch_length(200)
        .build()
        .await?;
    // Per partition, the last record handed out and not yet stored.
    let mut pending: BTreeMap<u32, u64> = BTreeMap::new();
    let mut since_commit = 0;
    loop {
        // Only the explicit member waits with a timeout (to commit when idle); the
        // automatic ones wait without one and are cancelled only at the end. (Both are
        // cancel-safe: `next` hands out a record only after its last await.)
        let wait = async {
            if explicit {
                consumer.next_within(MEMBER_IDLE).await
            } else {
                consumer.next().await.unwrap_or(Err(ClientError::Shutdown))
            }
        };
        let next = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            next = wait => next,
        };
        match next {
            Ok(record) => {
                let id = parse_record(record.key.as_deref(), &record.value);
                lock(&shared.deliveries).delivered(record.partition, record.offset, id);
                if explicit {
                    pending.insert(record.partition, record.offset);
                    since_commit += 1;
                    if since_commit >= COMMIT_EVERY {
                        commit_pending(index, &consumer, &mut pending, &shared).await;
                        since_commit = 0;
                    }
                }
            }
            Err(ClientError::Timeout(_)) => {
                commit_pending(index, &consumer, &mut pending, &shared).await;
                since_commit = 0;
            }
            Err(e) => {
                shared.events.log(format_args!("member {index} error: {e}"));
                let n = shared.member_errors.fetch_add(1, Ordering::Relaxed) + 1;
                if n <= SHOWN_ERRORS {
                    eprintln!("[soak] member {index}: {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    commit_pending(index, &consumer, &mut pending, &shared).await;
    consumer.shutdown().await
}

/// Stores each pending partition's last handed-out record, recording acknowledged
/// commits in the offsets watch (they are the floor of later readings).
///
/// A record is committed only if it is still the last one handed out of its partition
/// in the member's current tenure: a partition that moved away and back since it was
/// handed out now starts where another member stored, and committing the old record
/// would move the group's offset backward by the soak's own doing.
async fn commit_pending(
    index: u32,
    consumer: &rill_client::GroupConsumer,
    pending: &mut BTreeMap<u32, u64>,
    shared: &Shared,
) {
    for (partition, offset) in std::mem::take(pending) {
        if consumer.last_consumed_offset(partition) != Some(offset) {
            shared.commits_skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match consumer
            .store_offset(Position::new(partition, offset))
            .await
        {
            Ok(()) => {
                shared.events.log(format_args!(
                    "member {index} committed {partition}:{}",
                    offset + 1
                ));
                lock(&shared.offsets).committed(partition, offset + 1);
                shared.commits_acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.code(),
                    Some(
                        ErrorCode::NotAssigned | ErrorCode::NotMember | ErrorCode::StaleGeneration
                    )
                ) =>
            {
                shared.commits_refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                shared.commits_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Reads the group's stored offsets every `OFFSETS_EVERY` until `stop` turns true.
pub(crate) async fn watch_offsets(
    topic: Topic,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(OFFSETS_EVERY) => {}
        }
        // Not cancelled half-way: a reading in progress ends before the loop looks at
        // `stop` again. A failed one (the server is down) is just skipped.
        let _ = read_offsets(&topic, &shared, "periodic").await;
    }
}

/// One reading of the group's stored offsets, checked against the earlier ones.
pub(crate) async fn read_offsets(
    topic: &Topic,
    shared: &Shared,
    when: &str,
) -> Result<(), ClientError> {
    let _one_at_a_time = shared.reading.lock().await;
    let baseline = lock(&shared.offsets).begin();
    let stored: BTreeMap<u32, Option<u64>> = match topic.describe_group(GROUP).await {
        Ok(d) => d
            .partitions
            .iter()
            .map(|p| (p.partition, p.stored_offset))
            .collect(),
        // Before the first member joins and stores, the group does not exist.
        Err(e) if e.code() == Some(ErrorCode::GroupNotFound) => BTreeMap::new(),
        Err(e) => {
            lock(&shared.offsets).abandon();
            return Err(e);
        }
    };
    shared
        .events
        .log(format_args!("offsets {when}: {stored:?}"));
    lock(&shared.offsets).observe(baseline, &stored, when);
    Ok(())
}
