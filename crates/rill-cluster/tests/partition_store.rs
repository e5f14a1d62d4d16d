//! A partition group's log store and state machine (docs/REPLICATION.md §5): openraft's
//! storage conformance suite, and what the suite does not cover — data entries are
//! stamped by the leader's store and appended unchanged by a follower's, truncation
//! cuts pointers and batches, a purge drops old segments, a restart makes pointers and
//! segments agree, a snapshot carries its batches, and a seal ends the log for good.

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageError};
use rill_cluster::partition::pointer::log_id;
use rill_cluster::partition::{
    PartitionCommand, PartitionEntry, PartitionLogStore, PartitionStateMachine, PartitionTypes,
};
use rill_format::{BatchBuilder, BatchView, NewRecord};
use rill_storage::{Durability, LogConfig, LogEnv, PartitionLog};
use tempfile::TempDir;

fn config(durability: Durability) -> LogConfig {
    LogConfig {
        durability,
        segment_bytes_max: 4096,
        ..LogConfig::default()
    }
}

fn open(dir: &std::path::Path, durability: Durability) -> PartitionLogStore {
    PartitionLogStore::open(dir, config(durability), &LogEnv::default()).expect("the store opens")
}

struct Builder;

impl StoreBuilder<PartitionTypes, PartitionLogStore, PartitionStateMachine, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, PartitionLogStore, PartitionStateMachine), StorageError<PartitionTypes>>
    {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = open(dir.path(), Durability::Always);
        let sm = PartitionStateMachine::open(&store).expect("the state machine opens");
        Ok((dir, store, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partition_store_keeps_every_contract_of_the_library_s_suite() {
    Suite::test_all(Builder)
        .await
        .expect("the storage suite passes");
}

fn batch(tag: &str, records: usize) -> Bytes {
    let mut b = BatchBuilder::new();
    for i in 0..records {
        let value = format!("{tag}-{i}-{}", "x".repeat(100));
        b.push(NewRecord::value(value.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

fn propose(term: u64, index: u64, tag: &str, records: usize) -> PartitionEntry {
    PartitionEntry::new_normal(
        log_id(term, 1, index),
        PartitionCommand::Propose(batch(tag, records)),
    )
}

fn blank(term: u64, index: u64) -> PartitionEntry {
    PartitionEntry::new_blank(log_id(term, 1, index))
}

async fn append(store: &mut PartitionLogStore, entries: Vec<PartitionEntry>) {
    store
        .blocking_append(entries)
        .await
        .expect("appended and durable");
}

async fn entries(store: &mut PartitionLogStore) -> Vec<PartitionEntry> {
    store.try_get_log_entries(0..).await.expect("entries read")
}

/// Every batch of a log from its start: (base offset, bytes).
fn batches(log: &PartitionLog) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = log.log_start();
    loop {
        let read = log.read(at, 1 << 20).unwrap();
        if read.bytes.is_empty() {
            return out;
        }
        for b in read.batches() {
            let b: BatchView<'_> = b.unwrap();
            out.push((b.base_offset(), b.as_bytes().to_vec()));
        }
        at = read.next_offset;
    }
}

/// The offsets of a stamped data entry.
fn offsets(entry: &PartitionEntry) -> Option<(u64, u64)> {
    match &entry.payload {
        EntryPayload::Normal(PartitionCommand::Batch(b)) => {
            let v = BatchView::parse(b).unwrap();
            Some((v.base_offset(), v.next_offset()))
        }
        EntryPayload::Normal(PartitionCommand::Propose(_)) => {
            panic!("an unstamped entry read back")
        }
        _ => None,
    }
}

#[tokio::test]
async fn a_leader_s_proposals_are_stamped_and_a_follower_stores_the_same_bytes() {
    for durability in [Durability::Always, Durability::Never] {
        let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut leader = open(ld.path(), durability);
        let mut follower = open(fd.path(), durability);
        append(
            &mut leader,
            vec![
                blank(1, 0),
                propose(1, 1, "a", 3),
                propose(1, 2, "b", 1),
                blank(2, 3),
                propose(2, 4, "c", 40),
            ],
        )
        .await;
        let sent = entries(&mut leader).await;
        let got: Vec<_> = sent.iter().map(offsets).collect();
        assert_eq!(
            got,
            vec![None, Some((0, 3)), Some((3, 4)), None, Some((4, 44))]
        );
        // The follower receives the leader's entries as they read back.
        append(&mut follower, sent.clone()).await;
        assert_eq!(entries(&mut follower).await, sent);
        assert_eq!(batches(&leader.log()), batches(&follower.log()));
        assert_eq!(follower.next_offset(), 44);
        // The leader's reads after its tail cache: the same from the segments, after a
        // restart.
        drop(leader);
        let mut leader = open(ld.path(), durability);
        assert_eq!(entries(&mut leader).await, sent);
    }
}

#[tokio::test]
async fn truncation_cuts_pointers_and_batches_and_the_log_continues_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), Durability::Always);
    let first: Vec<_> = (0..30)
        .map(|i| propose(1, i, &format!("t1-{i}"), 5))
        .collect();
    append(&mut store, first).await;
    let before = entries(&mut store).await;
    assert!(store.log().segment_count() > 2);
    // A new leader of term 2 has entries 0..=11 only.
    store.truncate_after(Some(log_id(1, 1, 11))).await.unwrap();
    assert_eq!(store.next_offset(), 60);
    assert_eq!(store.log().next_offset(), 60);
    append(&mut store, vec![propose(2, 12, "t2", 2)]).await;
    let after = entries(&mut store).await;
    assert_eq!(after[..12], before[..12]);
    assert_eq!(offsets(&after[12]), Some((60, 62)));
    assert_eq!(after.len(), 13);
    // Everything as it was after a restart.
    drop(store);
    let mut store = open(dir.path(), Durability::Always);
    assert_eq!(entries(&mut store).await, after);
    // Truncating everything.
    store.truncate_after(None).await.unwrap();
    assert!(entries(&mut store).await.is_empty());
    assert_eq!(store.log().next_offset(), 0);
}

#[tokio::test]
async fn a_purge_drops_pointers_and_the_segments_below_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), Durability::Always);
    append(
        &mut store,
        (0..40)
            .map(|i| propose(1, i, &format!("p{i}"), 5))
            .collect(),
    )
    .await;
    let segments = store.log().segment_count();
    store.purge(log_id(1, 1, 29)).await.unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 29)));
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 39)));
    let left = entries(&mut store).await;
    assert_eq!(left.first().map(|e| e.log_id.index), Some(30));
    assert!(
        store.log().segment_count() < segments,
        "old segments removed"
    );
    assert!(
        store.log().log_start() <= 150,
        "no batch after the purge point removed"
    );
    drop(store);
    let mut store = open(dir.path(), Durability::Always);
    assert_eq!(entries(&mut store).await, left);
}

#[tokio::test]
async fn at_open_pointers_whose_batches_were_lost_are_cut_and_batches_no_pointer_names_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), Durability::Always);
    append(
        &mut store,
        (0..10)
            .map(|i| propose(1, i, &format!("r{i}"), 2))
            .collect(),
    )
    .await;
    let all = entries(&mut store).await;
    drop(store);
    // As if a crash lost the last three batches but not their pointers.
    {
        let log = PartitionLog::open(dir.path(), config(Durability::Always)).unwrap();
        log.truncate_from(14).unwrap();
    }
    let mut store = open(dir.path(), Durability::Always);
    assert_eq!(entries(&mut store).await, all[..7]);
    drop(store);
    // As if a crash kept a batch whose pointer never reached the disk.
    {
        let log = PartitionLog::open(dir.path(), config(Durability::Always)).unwrap();
        log.append(&batch("orphan", 3)).unwrap();
        assert_eq!(log.next_offset(), 17);
    }
    let store = open(dir.path(), Durability::Always);
    assert_eq!(store.log().next_offset(), 14);
}

#[tokio::test]
async fn a_snapshot_carries_its_batches_to_a_follower_that_is_behind() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = open(ld.path(), Durability::Always);
    let mut follower = open(fd.path(), Durability::Always);
    let mut leader_sm = PartitionStateMachine::open(&leader).unwrap();
    let mut follower_sm = PartitionStateMachine::open(&follower).unwrap();
    append(
        &mut leader,
        (0..20)
            .map(|i| propose(1, i, &format!("s{i}"), 4))
            .collect(),
    )
    .await;
    let sent = entries(&mut leader).await;
    // The follower has the first five entries only.
    append(&mut follower, sent[..5].to_vec()).await;
    let stream = futures::stream::iter(sent.iter().cloned().map(|e| Ok((e, None))));
    leader_sm.apply(stream).await.unwrap();
    assert_eq!(leader_sm.high_watermark(), 80);
    let snapshot = leader_sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 1, 19)));
    follower_sm
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    assert_eq!(batches(&follower.log()), batches(&leader.log()));
    assert_eq!(follower_sm.high_watermark(), 80);
    let state = follower.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 19)));
    // Entries after the snapshot follow by ordinary appends, and all survive a restart.
    append(&mut leader, vec![propose(1, 20, "later", 2)]).await;
    let later = leader.try_get_log_entries(20..).await.unwrap();
    append(&mut follower, later.clone()).await;
    drop((follower_sm, follower));
    let mut follower = open(fd.path(), Durability::Always);
    assert_eq!(entries(&mut follower).await, later);
    assert_eq!(batches(&follower.log()), batches(&leader.log()));
    let mut sm = PartitionStateMachine::open(&follower).unwrap();
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 1, 19)));
    assert_eq!(sm.high_watermark(), 80);
}

/// An altered topic's durability reaches a running replica's store
/// (`PartitionLogStore::retune`): entries appended under `never` are not synced, and the
/// move to `always` syncs them, batches and pointers, so a power loss that keeps only
/// synced bytes keeps them; the options are those a reopen of the log takes.
#[tokio::test]
async fn a_move_to_always_syncs_what_a_replica_appended_before() {
    use std::path::Path;
    use std::sync::Arc;

    use rill_storage::Io;
    use rill_storage::sim::SimIo;

    const DIR: &str = "/data/cluster/streams/s/t/0";
    let sim = SimIo::new(3);
    sim.create_dir_all(Path::new(DIR)).unwrap();
    for dir in Path::new(DIR).ancestors() {
        sim.sync_dir(dir).unwrap();
    }
    let env = LogEnv::new(Arc::new(sim.clone()), Arc::new(rill_storage::SystemClock));
    let open_on = |env: &LogEnv| {
        PartitionLogStore::open(Path::new(DIR), config(Durability::Never), env).unwrap()
    };
    let mut store = open_on(&env);
    append(
        &mut store,
        vec![blank(1, 1), propose(1, 2, "a", 3), propose(1, 3, "b", 2)],
    )
    .await;
    // Under `never`, nothing of it was synced.
    let lost = sim.power_loss_durable();
    let mut retuned = config(Durability::Always);
    retuned.retention_bytes = Some(1 << 20);
    store.retune(&retuned).unwrap();
    assert_eq!(store.config().durability, Durability::Always);
    assert_eq!(store.config().retention_bytes, Some(1 << 20));
    assert_eq!(store.log().durability(), Durability::Always);
    let kept = sim.power_loss_durable();
    store.close();
    drop(store);
    let env_of =
        |disk: &SimIo| LogEnv::new(Arc::new(disk.clone()), Arc::new(rill_storage::SystemClock));
    let mut before = open_on(&env_of(&lost));
    assert!(
        entries(&mut before).await.len() < 3,
        "appended under `never`: not synced"
    );
    let mut after = open_on(&env_of(&kept));
    let kept_entries = entries(&mut after).await;
    assert_eq!(
        kept_entries.len(),
        3,
        "the move to `always` synced batches and pointers"
    );
    assert_eq!(after.log().next_offset(), 5);
}

fn seal(term: u64, index: u64) -> PartitionEntry {
    PartitionEntry::new_normal(log_id(term, 1, index), PartitionCommand::Seal)
}

#[tokio::test]
async fn a_seal_is_stamped_with_the_log_s_end_and_no_batch_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), Durability::Never);
    assert_eq!(store.sealed(), None);
    // Proposals and the seal in one append: the seal is stamped with the end of the
    // batches before it in the same write (under `never`, the log's own visible end
    // may lag them).
    append(
        &mut store,
        vec![propose(1, 0, "a", 5), propose(1, 1, "b", 3), seal(1, 2)],
    )
    .await;
    assert_eq!(store.sealed(), Some((2, 8)));
    let read = entries(&mut store).await;
    assert_eq!(
        read[2].payload,
        EntryPayload::Normal(PartitionCommand::Sealed(8))
    );
    // A batch proposed after the seal is stored as a blank, and so is a second seal.
    append(&mut store, vec![propose(1, 3, "late", 2), seal(1, 4)]).await;
    let read = entries(&mut store).await;
    assert_eq!(read[3].payload, EntryPayload::Blank);
    assert_eq!(read[4].payload, EntryPayload::Blank);
    assert_eq!(store.log().next_offset(), 8);
    assert_eq!(store.sealed(), Some((2, 8)));
    // The same after a restart.
    drop(store);
    let mut store = open(dir.path(), Durability::Never);
    assert_eq!(store.sealed(), Some((2, 8)));
    assert_eq!(entries(&mut store).await, read);

    // A follower appends the stamped seal unchanged, and refuses one that does not end
    // its log.
    let other = tempfile::tempdir().unwrap();
    let mut follower = open(other.path(), Durability::Never);
    append(&mut follower, read[..2].to_vec()).await;
    let wrong = PartitionEntry::new_normal(log_id(1, 1, 2), PartitionCommand::Sealed(9));
    assert!(follower.blocking_append(vec![wrong]).await.is_err());
    append(&mut follower, read[2..].to_vec()).await;
    assert_eq!(follower.sealed(), Some((2, 8)));
    assert_eq!(entries(&mut follower).await, read);

    // A seal that a new leader's log does not hold is truncated: batches follow again.
    follower
        .truncate_after(Some(log_id(1, 1, 1)))
        .await
        .unwrap();
    assert_eq!(follower.sealed(), None);
    append(&mut follower, vec![propose(2, 2, "c", 4)]).await;
    assert_eq!(offsets(&entries(&mut follower).await[2]), Some((8, 12)));
}

#[tokio::test]
async fn a_snapshot_that_covers_a_seal_carries_it_to_the_follower_that_installs_it() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = open(ld.path(), Durability::Always);
    let follower = open(fd.path(), Durability::Always);
    let mut leader_sm = PartitionStateMachine::open(&leader).unwrap();
    let mut follower_sm = PartitionStateMachine::open(&follower).unwrap();
    let mut proposed: Vec<_> = (0..6).map(|i| propose(1, i, &format!("s{i}"), 4)).collect();
    proposed.push(seal(1, 6));
    append(&mut leader, proposed).await;
    let sent = entries(&mut leader).await;
    let stream = futures::stream::iter(sent.iter().cloned().map(|e| Ok((e, None))));
    leader_sm.apply(stream).await.unwrap();
    let snapshot = leader_sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(snapshot.snapshot.sealed, Some(24));
    follower_sm
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    // The follower holds no seal entry, but knows the seal: it appends no batch after.
    assert_eq!(follower.sealed(), Some((6, 24)));
    let mut follower = follower;
    append(&mut follower, vec![propose(2, 7, "late", 1)]).await;
    assert_eq!(follower.log().next_offset(), 24);
    drop((follower_sm, follower));
    let follower = open(fd.path(), Durability::Always);
    assert_eq!(follower.sealed(), Some((6, 24)));
    let sm = PartitionStateMachine::open(&follower).unwrap();
    assert_eq!(sm.high_watermark(), 24);
}
