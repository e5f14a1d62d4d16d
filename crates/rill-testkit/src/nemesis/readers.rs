//! The nemesis's readers: one named consumer per partition that reads, records what it
//! was handed, and stores its offset explicitly every few records (and when idle); on
//! an error, and now and then at a seeded moment, it drops its consumer and builds a new
//! one, which starts after the stored offset. A watcher reads the stored offsets every
//! 200 ms. What they record goes to the same [`Shared`] the soak's checker reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rill_client::{ClientError, CommitPolicy, Consumer, Position, Topic};
use tokio::sync::watch;

use crate::soak::check::parse_record;
use crate::soak::load::{Shared, lock};

/// The named consumer's name.
pub(crate) const READER: &str = "nemesis";
/// Records between two explicit commits.
const COMMIT_EVERY: u32 = 10;
/// How long a reader waits for a record before it counts as idle (and commits).
const IDLE: Duration = Duration::from_millis(100);
/// One record in this many makes the reader start over from its stored offset.
const RESTART_ONE_IN: u32 = 500;
/// Pause between two readings of the stored offsets.
const OFFSETS_EVERY: Duration = Duration::from_millis(200);
/// Errors described on stderr at most (all are counted).
const SHOWN_ERRORS: u64 = 10;

/// Reads `partition` until `stop` turns true.
pub(crate) async fn reader(
    topic: Topic,
    partition: u32,
    shared: Arc<Shared>,
    seed: u64,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ u64::from(partition));
    'consumer: loop {
        let built = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            built = topic
                .consumer(READER, partition)
                .commit_policy(CommitPolicy::Disabled)
                .poll_interval(Duration::from_millis(10))
                .batch_length(200)
                .build() => built,
        };
        let mut consumer = match built {
            Ok(c) => c,
            Err(e) => {
                error(&shared, partition, &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        shared.events.log(format_args!(
            "reader {partition} starts after {:?}",
            consumer.last_stored_offset(partition)
        ));
        let mut pending = None;
        let mut since_commit = 0;
        loop {
            let next = tokio::select! {
                _ = stop.wait_for(|s| *s) => None,
                next = consumer.next_within(IDLE) => Some(next),
            };
            let Some(next) = next else {
                commit(&mut consumer, partition, &mut pending, &shared).await;
                return;
            };
            match next {
                Ok(record) => {
                    let id = parse_record(record.key.as_deref(), &record.value);
                    lock(&shared.deliveries).delivered(record.partition, record.offset, id);
                    pending = Some(record.offset);
                    since_commit += 1;
                    if since_commit >= COMMIT_EVERY {
                        commit(&mut consumer, partition, &mut pending, &shared).await;
                        since_commit = 0;
                    }
                    if rng.random_range(0..RESTART_ONE_IN) == 0 {
                        // Start over without storing what was read since the last
                        // commit: it is handed out again (at least once).
                        shared
                            .events
                            .log(format_args!("reader {partition} starts over"));
                        continue 'consumer;
                    }
                }
                Err(ClientError::Timeout(_)) => {
                    commit(&mut consumer, partition, &mut pending, &shared).await;
                    since_commit = 0;
                }
                Err(e) => {
                    error(&shared, partition, &e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue 'consumer;
                }
            }
        }
    }
}

fn error(shared: &Shared, partition: u32, e: &ClientError) {
    shared
        .events
        .log(format_args!("reader {partition} error: {e}"));
    let n = shared.member_errors.fetch_add(1, Ordering::Relaxed) + 1;
    if n <= SHOWN_ERRORS {
        eprintln!("[nemesis] reader {partition}: {e}");
    }
}

/// Stores the last record handed out, if any since the last store.
async fn commit(
    consumer: &mut Consumer,
    partition: u32,
    pending: &mut Option<u64>,
    shared: &Shared,
) {
    let Some(offset) = pending.take() else {
        return;
    };
    match consumer
        .store_offset(Position::new(partition, offset))
        .await
    {
        Ok(()) => {
            shared.events.log(format_args!(
                "reader {partition} committed {partition}:{}",
                offset + 1
            ));
            lock(&shared.offsets).committed(partition, offset + 1);
            shared.commits_acked.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            shared.events.log(format_args!(
                "reader {partition} commit of {}: {e}",
                offset + 1
            ));
            shared.commits_failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Reads the stored offsets every `OFFSETS_EVERY` until `stop` turns true.
pub(crate) async fn watch_offsets(
    topic: Topic,
    partitions: u32,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(OFFSETS_EVERY) => {}
        }
        // A failed reading (no node answered in time) is skipped.
        let _ = read_offsets(&topic, partitions, &shared, "periodic").await;
    }
}

/// One reading of every partition's stored offset, checked against the earlier ones
/// and every acknowledged commit.
pub(crate) async fn read_offsets(
    topic: &Topic,
    partitions: u32,
    shared: &Shared,
    when: &str,
) -> Result<(), ClientError> {
    let _one_at_a_time = shared.reading.lock().await;
    let baseline = lock(&shared.offsets).begin();
    let mut stored = BTreeMap::new();
    for p in 0..partitions {
        match topic.stored_offset(READER, p).await {
            Ok(consumed) => {
                stored.insert(p, consumed.map(|c| c + 1));
            }
            Err(e) => {
                lock(&shared.offsets).abandon();
                return Err(e);
            }
        }
    }
    shared
        .events
        .log(format_args!("offsets {when}: {stored:?}"));
    lock(&shared.offsets).observe(baseline, &stored, when);
    Ok(())
}
