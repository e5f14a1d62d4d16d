//! The metadata group's log store and state machine: openraft's storage conformance
//! suite (every contract the library relies on), and what the suite does not cover —
//! a restart keeps what was reported durable, and a torn last entry is cut, not fatal;
//! the log store and the state machine replace their files side by side.

use std::io::Write;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{RaftLogReader, StorageError};
use rill_cluster::{MetaEntry, MetaLogStore, MetaStateMachine, MetaTypes};
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<MetaTypes, MetaLogStore, MetaStateMachine, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, MetaLogStore, MetaStateMachine), StorageError<MetaTypes>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = MetaLogStore::open(dir.path()).expect("the log opens");
        let sm = MetaStateMachine::open(dir.path()).expect("the state machine opens");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_store_keeps_every_contract_of_the_library_s_suite() {
    Suite::test_all(Builder)
        .await
        .expect("the storage suite passes");
}

fn blank(term: u64, index: u64) -> MetaEntry {
    openraft::testing::blank_ent::<MetaTypes>(term, 1, index)
}

async fn append(log: &mut MetaLogStore, entries: Vec<MetaEntry>) {
    log.blocking_append(entries)
        .await
        .expect("appended and durable");
}

#[tokio::test]
async fn a_reopened_log_has_every_entry_reported_durable_and_its_vote() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = MetaLogStore::open(dir.path()).unwrap();
        append(&mut log, (0..5).map(|i| blank(1, i)).collect()).await;
        log.save_vote(&openraft::impls::Vote::new(2, 1))
            .await
            .unwrap();
        log.truncate_after(Some(openraft::testing::log_id::<MetaTypes>(1, 1, 3)))
            .await
            .unwrap();
        append(&mut log, vec![blank(2, 4)]).await;
    }
    let mut log = MetaLogStore::open(dir.path()).unwrap();
    let entries = log.try_get_log_entries(0..).await.unwrap();
    let ids: Vec<(u64, u64)> = entries
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect();
    assert_eq!(ids, vec![(1, 0), (1, 1), (1, 2), (1, 3), (2, 4)]);
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(openraft::impls::Vote::new(2, 1))
    );
}

#[tokio::test]
async fn a_torn_last_entry_is_cut_and_damage_before_the_end_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = MetaLogStore::open(dir.path()).unwrap();
        // Three appends: three frames.
        for i in 0..3 {
            append(&mut log, vec![blank(1, i)]).await;
        }
    }
    let path = dir.path().join("meta.log");
    let whole = std::fs::read(&path).unwrap();
    // A crash in the middle of a fourth append: half a frame at the end.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&[40, 0, 0, 0, 1, 2, 3, 4, b'{']).unwrap();
    drop(f);
    let mut log = MetaLogStore::open(dir.path()).unwrap();
    assert_eq!(log.try_get_log_entries(0..).await.unwrap().len(), 3);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        whole,
        "the torn frame is cut"
    );
    drop(log);
    // A flipped byte in the first frame, with whole frames after it: not a torn tail.
    let mut damaged = whole.clone();
    damaged[10] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    let err = MetaLogStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("damaged entry"), "{err}");
}

#[tokio::test]
async fn the_state_machine_restarts_from_its_snapshot() {
    use openraft::RaftSnapshotBuilder;
    let dir = tempfile::tempdir().unwrap();
    let mut sm = MetaStateMachine::open(dir.path()).unwrap();
    use rill_cluster::{MetaCommand, OffsetKey, TopicSpec};
    let key = OffsetKey {
        stream: "shop".into(),
        topic: "orders".into(),
        partition: 1,
        consumer: "billing".into(),
    };
    let commands = [
        MetaCommand::CreateStream {
            name: "shop".into(),
        },
        MetaCommand::CreateTopic {
            stream: "shop".into(),
            topic: "orders".into(),
            spec: TopicSpec {
                replicas: vec![vec![1, 2, 3]; 2],
                options: vec![],
                incarnation: 1,
            },
        },
        MetaCommand::StoreOffsets {
            offsets: vec![(key.clone(), 42)],
        },
    ];
    let entries = commands.into_iter().zip(1..).map(|(command, index)| {
        Ok((
            MetaEntry {
                log_id: openraft::testing::log_id::<MetaTypes>(1, 1, index),
                payload: openraft::EntryPayload::Normal(command),
            },
            None,
        ))
    });
    sm.apply(futures::stream::iter(entries)).await.unwrap();
    let built = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let reopened = MetaStateMachine::open(dir.path()).unwrap();
    assert_eq!(reopened.state().await, sm.state().await);
    let mut reopened = reopened;
    let (applied, _) = reopened.applied_state().await.unwrap();
    assert_eq!(applied, built.meta.last_log_id);
    assert!(reopened.state().await.streams.contains_key("shop"));
    assert_eq!(reopened.state().await.offsets.get(&key), Some(&42));
}

/// The log store's files (`meta.vote`, `meta.log`, `meta.purged`) and the state
/// machine's snapshot (`meta.snapshot`) share a directory but not a lock: openraft saves
/// a vote while the state machine builds a snapshot. Each replacement has a temporary
/// file of its own, so neither takes the other's bytes (with one shared `meta.tmp`, a
/// vote saved during a build could be renamed away, or land in the other file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_saved_while_a_snapshot_is_built_keeps_both_files_whole() {
    use openraft::RaftSnapshotBuilder;
    const ROUNDS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let mut log = MetaLogStore::open(dir.path()).unwrap();
    let mut sm = MetaStateMachine::open(dir.path()).unwrap();
    let stream = MetaEntry {
        log_id: openraft::testing::log_id::<MetaTypes>(1, 1, 1),
        payload: openraft::EntryPayload::Normal(rill_cluster::MetaCommand::CreateStream {
            name: "shop".into(),
        }),
    };
    sm.apply(futures::stream::iter([Ok((stream, None))]))
        .await
        .unwrap();
    let votes = tokio::spawn(async move {
        for term in 1..=ROUNDS {
            log.save_vote(&openraft::impls::Vote::new(term, 1))
                .await
                .map_err(|e| format!("saving the vote of term {term}: {e}"))?;
        }
        Ok::<_, String>(())
    });
    let snapshots = tokio::spawn(async move {
        for round in 0..ROUNDS {
            sm.get_snapshot_builder()
                .await
                .build_snapshot()
                .await
                .map_err(|e| format!("building snapshot {round}: {e}"))?;
        }
        Ok::<_, String>(())
    });
    let (votes, snapshots) = (votes.await.unwrap(), snapshots.await.unwrap());
    votes.unwrap();
    snapshots.unwrap();
    let mut log = MetaLogStore::open(dir.path()).expect("the log opens with its vote");
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(openraft::impls::Vote::new(ROUNDS, 1))
    );
    let reopened = MetaStateMachine::open(dir.path()).expect("the snapshot reads back");
    assert!(reopened.state().await.streams.contains_key("shop"));
}
