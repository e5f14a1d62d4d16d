//! Installing a partition snapshot is all or nothing (docs/REPLICATION.md §7.5), on the
//! simulated disk: a follower holding the first entries of a leader's log installs the
//! leader's snapshot — by copying the batches after its end when the leader's log still
//! holds them, by replacing its log whole through a staging log when the leader's
//! retention deleted them — and dies at every operation of the install in turn. After a
//! killed process, a power loss that kept nothing unsynced and a torn power loss, the
//! reopened follower holds either its old entries and batches, or the snapshot: the
//! leader's batches at their offsets, the snapshot's last entry as its purge point and
//! its state machine's applied entry. An install that returned holds the snapshot on
//! every restart, and an interrupted one can be installed again.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use openraft::alias::{LogIdOf, SnapshotOf};
use openraft::entry::RaftEntry;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{RaftLogReader, RaftSnapshotBuilder};
use rill_cluster::partition::pointer::log_id;
use rill_cluster::partition::{
    PartitionCommand, PartitionEntry, PartitionLogStore, PartitionSnapshot, PartitionStateMachine,
    PartitionTypes,
};
use rill_format::{BatchBuilder, BatchView, NewRecord};
use rill_storage::sim::{SimIo, SimRng};
use rill_storage::{Durability, Io, LogConfig, LogEnv, ManualClock, PartitionLog};

const LEADER: &str = "/leader/s/t/0";
const FOLLOWER: &str = "/follower/s/t/0";
const ENTRIES: u64 = 40;
/// Entries the follower holds before the install.
const HELD: usize = 5;

fn disk(dir: &str) -> SimIo {
    let sim = SimIo::new(0);
    sim.create_dir_all(Path::new(dir)).unwrap();
    for d in Path::new(dir).ancestors().skip(1) {
        sim.sync_dir(d).unwrap();
    }
    sim
}

fn open(sim: &SimIo, dir: &str) -> std::io::Result<PartitionLogStore> {
    let config = LogConfig {
        durability: Durability::Always,
        segment_bytes_max: 2048,
        ..LogConfig::default()
    };
    let env = LogEnv::new(Arc::new(sim.clone()), Arc::new(ManualClock::new(5_000_000)));
    PartitionLogStore::open(Path::new(dir), config, &env)
}

fn batch(i: u64) -> Bytes {
    let mut b = BatchBuilder::new();
    for r in 0..3 {
        b.push(NewRecord::value(
            format!("{i}/{r}/{}", "x".repeat(120)).as_bytes(),
        ))
        .unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

/// Every batch of a log from its start.
fn batches(log: &PartitionLog) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = log.log_start();
    while at < log.next_offset() {
        let read = log.read(at, 1 << 20).unwrap();
        for b in read.batches() {
            let b: BatchView<'_> = b.unwrap();
            out.push((b.base_offset(), b.as_bytes().to_vec()));
        }
        at = read.next_offset;
    }
    out
}

struct Leader {
    _sim: SimIo,
    store: PartitionLogStore,
    entries: Vec<PartitionEntry>,
    snapshot: SnapshotOf<PartitionTypes, PartitionSnapshot>,
}

/// A leader with [`ENTRIES`] entries applied and a snapshot of them; with `purged`, its
/// log purged so that it no longer holds the follower's end.
async fn leader(purged: bool) -> Leader {
    let sim = disk(LEADER);
    let mut store = open(&sim, LEADER).unwrap();
    let mut sm = PartitionStateMachine::open(&store).unwrap();
    let proposals: Vec<PartitionEntry> = (0..ENTRIES)
        .map(|i| PartitionEntry::new_normal(log_id(1, 1, i), PartitionCommand::Propose(batch(i))))
        .collect();
    store.blocking_append(proposals).await.unwrap();
    let entries = store.try_get_log_entries(0..).await.unwrap();
    sm.apply(futures::stream::iter(
        entries.iter().cloned().map(|e| Ok((e, None))),
    ))
    .await
    .unwrap();
    let snapshot = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    if purged {
        store.purge(log_id(1, 1, ENTRIES - 5)).await.unwrap();
        let end_held = batches(&store.log())[..].first().map(|(b, _)| *b).unwrap();
        assert!(
            end_held > 3 * HELD as u64,
            "the leader no longer holds the follower's end"
        );
    }
    let snapshot = SnapshotOf::<PartitionTypes, PartitionSnapshot> {
        meta: snapshot.meta,
        snapshot: PartitionSnapshot {
            log_start: store.log().log_start(),
            ..snapshot.snapshot
        },
    };
    Leader {
        _sim: sim,
        store,
        entries,
        snapshot,
    }
}

/// What a follower holds.
#[derive(Debug, PartialEq, Eq)]
struct Held {
    entries: Vec<(u64, u64)>,
    purged: Option<LogIdOf<PartitionTypes>>,
    batches: Vec<(u64, Vec<u8>)>,
    applied: Option<LogIdOf<PartitionTypes>>,
    high_watermark: u64,
}

async fn held(sim: &SimIo) -> Result<Held, String> {
    let mut store = open(sim, FOLLOWER).map_err(|e| format!("the store does not open: {e}"))?;
    let mut sm = PartitionStateMachine::open(&store).map_err(|e| e.to_string())?;
    let entries = store
        .try_get_log_entries(0..)
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|e| (e.index(), e.log_id().leader_id.term))
        .collect();
    let state = store.get_log_state().await.map_err(|e| e.to_string())?;
    let applied = sm.applied_state().await.map_err(|e| e.to_string())?.0;
    let held = Held {
        entries,
        purged: state.last_purged_log_id,
        batches: batches(&store.log()),
        applied,
        high_watermark: sm.high_watermark(),
    };
    store.close();
    Ok(held)
}

/// A follower on a fresh disk holding the leader's first [`HELD`] entries.
async fn follower(leader: &Leader) -> (SimIo, PartitionLogStore, PartitionStateMachine) {
    let sim = disk(FOLLOWER);
    let mut store = open(&sim, FOLLOWER).unwrap();
    store
        .blocking_append(leader.entries[..HELD].to_vec())
        .await
        .unwrap();
    let sm = PartitionStateMachine::open(&store).unwrap();
    (sim, store, sm)
}

async fn crash_points(purged: bool) -> usize {
    let leader = leader(purged).await;
    let (sim, store, _) = follower(&leader).await;
    store.close();
    drop(store);
    let old = held(&sim).await.unwrap();
    let snap = &leader.snapshot;
    let last = snap.meta.last_log_id.unwrap();
    let leader_log = leader.store.log();
    let new = Held {
        entries: vec![],
        purged: Some(last),
        batches: batches(&leader_log)
            .into_iter()
            .filter(|(b, _)| *b >= snap.snapshot.log_start)
            .collect(),
        applied: Some(last),
        high_watermark: snap.snapshot.next_offset,
    };
    let mut checked = 0;
    for crash_at in 0.. {
        assert!(crash_at < 2000, "an install takes fewer operations");
        let (sim, store, mut sm) = follower(&leader).await;
        sim.crash_after(crash_at);
        let done = sm
            .install_snapshot(&snap.meta, snap.snapshot.clone())
            .await
            .is_ok();
        store.close();
        drop((store, sm));
        let mut rng = SimRng::new(crash_at);
        let images = [
            ("a killed process", sim.process_crash()),
            (
                "a power loss of what was not synced",
                sim.power_loss_durable(),
            ),
            ("a torn power loss", sim.power_loss(&mut rng)),
        ];
        for (how, image) in images {
            let what = format!("purged {purged}, crash at {crash_at}, {how}");
            let found = held(&image)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}\n{}", sim.trace_tail().join("\n")));
            if found == new {
            } else if found == old {
                assert!(!done, "{what}: a finished install was undone");
                // An interrupted install can be installed again.
                let store = open(&image, FOLLOWER).unwrap();
                let mut sm = PartitionStateMachine::open(&store).unwrap();
                sm.install_snapshot(&snap.meta, snap.snapshot.clone())
                    .await
                    .unwrap_or_else(|e| panic!("{what}: installing again: {e}"));
                store.close();
                drop((store, sm));
                assert_eq!(
                    held(&image).await.unwrap(),
                    new,
                    "{what}: after installing again"
                );
            } else {
                panic!(
                    "{what}: neither the old state nor the snapshot: entries {:?}, purged {:?}, batches at {:?}, applied {:?}, watermark {}",
                    found.entries,
                    found.purged,
                    found.batches.iter().map(|(b, _)| *b).collect::<Vec<_>>(),
                    found.applied,
                    found.high_watermark
                );
            }
            checked += 1;
        }
        if done {
            break;
        }
    }
    checked
}

#[tokio::test]
async fn an_install_that_copies_after_the_follower_s_end_is_all_or_nothing() {
    let checked = crash_points(false).await;
    eprintln!("{checked} restarts checked");
    assert!(checked > 3 * 5);
}

#[tokio::test]
async fn an_install_that_replaces_the_follower_s_log_whole_is_all_or_nothing() {
    let checked = crash_points(true).await;
    eprintln!("{checked} restarts checked");
    assert!(checked > 3 * 5);
}
