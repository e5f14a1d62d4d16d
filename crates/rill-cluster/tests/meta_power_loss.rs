//! The metadata log store under the power-loss model (`rill_storage::sim::SimIo`): a
//! seeded workload of appends, votes, truncations and purges dies at a seeded
//! operation; the store is then opened on what a restart would find — after a killed
//! process, after power losses that kept a random part of the unsynced writes, and
//! after one that kept nothing unsynced — and must hold exactly what was acknowledged,
//! plus at most what the operation in flight was doing:
//!
//! - the entries acknowledged (an append returns once they are durable), with an append
//!   in flight adding at most a prefix of its entries, and a truncation or purge in
//!   flight either done or not;
//! - the vote last saved, or the one being saved;
//! - never an entry that was not written, nor one a finished truncation removed.
//!
//! `RILL_SEED=<n>` replays one seed; `RILL_SEEDS=<a>..<b>` runs a range (default
//! `0..300`). A failing seed prints its operations and the disk's trace.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use openraft::RaftLogReader;
use openraft::entry::RaftEntry;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use rill_cluster::{MetaEntry, MetaLogStore, MetaTypes};
use rill_storage::Io;
use rill_storage::sim::{SimIo, SimRng};

const DIR: &str = "/data/meta";

type Log = BTreeMap<u64, u64>;
type Vote = openraft::impls::Vote<openraft::impls::leader_id_adv::LeaderId<u64, u64>>;

/// What the store was doing when the process died.
#[derive(Debug, Clone)]
enum Op {
    Append(Vec<(u64, u64)>),
    Vote(u64),
    Truncate(Option<u64>),
    Purge(u64),
}

fn entry(index: u64, term: u64) -> MetaEntry {
    openraft::testing::blank_ent::<MetaTypes>(term, 1, index)
}

fn id(index: u64, term: u64) -> openraft::alias::LogIdOf<MetaTypes> {
    openraft::testing::log_id::<MetaTypes>(term, 1, index)
}

/// The log, votes and purge point a restart may find, given the acknowledged state and
/// the operation in flight.
fn allowed(log: &Log, in_flight: Option<&Op>) -> Vec<Log> {
    let mut out = vec![log.clone()];
    match in_flight {
        Some(Op::Append(entries)) => {
            for n in 1..=entries.len() {
                let mut l = log.clone();
                l.extend(entries[..n].iter().copied());
                out.push(l);
            }
        }
        Some(Op::Truncate(after)) => {
            let mut l = log.clone();
            l.retain(|&i, _| after.is_some_and(|a| i <= a));
            out.push(l);
        }
        Some(Op::Purge(upto)) => {
            let mut l = log.clone();
            l.retain(|&i, _| i > *upto);
            out.push(l);
        }
        Some(Op::Vote(_)) | None => {}
    }
    out
}

async fn run(seed: u64) -> Result<(), String> {
    let mut rng = SimRng::new(seed);
    let sim = SimIo::new(seed);
    sim.create_dir_all(Path::new("/data")).unwrap();
    sim.sync_dir(Path::new("/")).unwrap();
    sim.crash_after(rng.between(0, 120));
    let mut log: Log = BTreeMap::new();
    let mut vote: Option<u64> = None;
    let mut ops: Vec<String> = Vec::new();
    let mut in_flight: Option<Op> = None;
    let (mut next, mut term) = (0u64, 1u64);
    let mut purged: Option<u64> = None;
    match MetaLogStore::open_with(Arc::new(sim.clone()), DIR) {
        Err(_) => {}
        Ok(mut store) => {
            for _ in 0..40 {
                let op = match rng.below(10) {
                    0..=4 => {
                        let n = rng.between(1, 4);
                        if rng.chance(20) {
                            term += 1;
                        }
                        let entries: Vec<(u64, u64)> =
                            (next..next + n).map(|i| (i, term)).collect();
                        Op::Append(entries)
                    }
                    5 | 6 => Op::Vote(vote.unwrap_or(0) + 1),
                    // A suffix of what is not purged: everything (when nothing was
                    // purged), or from after an entry on.
                    7 | 8 if !log.is_empty() => {
                        let first = *log.keys().next().unwrap();
                        let last = *log.keys().next_back().unwrap();
                        if purged.is_none() && rng.chance(15) {
                            Op::Truncate(None)
                        } else {
                            Op::Truncate(Some(rng.between(first, last)))
                        }
                    }
                    // A prefix, keeping at least one entry.
                    _ if log.len() > 1 => {
                        let first = *log.keys().next().unwrap();
                        let last = *log.keys().next_back().unwrap();
                        Op::Purge(rng.between(first, last - 1))
                    }
                    _ => Op::Vote(vote.unwrap_or(0) + 1),
                };
                ops.push(format!("{op:?}"));
                in_flight = Some(op.clone());
                let done = match &op {
                    Op::Append(entries) => store
                        .blocking_append(entries.iter().map(|&(i, t)| entry(i, t)))
                        .await
                        .is_ok(),
                    Op::Vote(v) => store.save_vote(&Vote::new(*v, 1)).await.is_ok(),
                    Op::Truncate(after) => {
                        let after = after.map(|a| id(a, log[&a]));
                        store.truncate_after(after).await.is_ok()
                    }
                    Op::Purge(upto) => store.purge(id(*upto, log[upto])).await.is_ok(),
                };
                if !done {
                    break;
                }
                in_flight = None;
                match op {
                    Op::Append(entries) => {
                        next = entries.last().unwrap().0 + 1;
                        log.extend(entries);
                    }
                    Op::Vote(v) => vote = Some(v),
                    Op::Truncate(after) => {
                        log.retain(|&i, _| after.is_some_and(|a| i <= a));
                        next = log
                            .keys()
                            .next_back()
                            .map_or(purged.map_or(0, |p| p + 1), |&l| l + 1);
                    }
                    Op::Purge(upto) => {
                        log.retain(|&i, _| i > upto);
                        purged = Some(upto);
                    }
                }
            }
        }
    }
    let fail = |what: String| {
        Err(format!(
            "seed {seed}: {what}\nops: {ops:?}\nin flight: {in_flight:?}\nacknowledged log: {log:?}, vote {vote:?}\ntrace:\n{}",
            sim.trace_tail().join("\n")
        ))
    };
    let mut images = vec![
        ("process crash", sim.process_crash()),
        ("power loss, nothing unsynced", sim.power_loss_durable()),
    ];
    for _ in 0..3 {
        images.push(("torn power loss", sim.power_loss(&mut rng)));
    }
    let allowed_logs = allowed(&log, in_flight.as_ref());
    let allowed_votes: Vec<Option<u64>> = match &in_flight {
        Some(Op::Vote(v)) => vec![vote, Some(*v)],
        _ => vec![vote],
    };
    for (what, image) in images {
        let mut store = match MetaLogStore::open_with(Arc::new(image), DIR) {
            Ok(s) => s,
            Err(e) => return fail(format!("{what}: the store does not open: {e}")),
        };
        let found: Log = store
            .try_get_log_entries(0..)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .map(|e| (e.index(), e.log_id().leader_id.term))
            .collect();
        if !allowed_logs.contains(&found) {
            return fail(format!(
                "{what}: the log is {found:?}, allowed {allowed_logs:?}"
            ));
        }
        let v = store.read_vote().await.map_err(|e| e.to_string())?;
        let v = v.map(|v| v.leader_id.term);
        if !allowed_votes.contains(&v) {
            return fail(format!(
                "{what}: the vote is {v:?}, allowed {allowed_votes:?}"
            ));
        }
        let state = store.get_log_state().await.map_err(|e| e.to_string())?;
        if let (Some(last), Some((&i, _))) = (state.last_log_id, found.iter().next_back())
            && last.index() != i
        {
            return fail(format!(
                "{what}: last log id {last:?} but the last entry is {i}"
            ));
        }
    }
    Ok(())
}

#[tokio::test]
async fn acknowledged_entries_and_votes_survive_every_crash_point_and_nothing_else_appears() {
    let mut failures = Vec::new();
    let seeds = common::seeds(0..300);
    let count = seeds.end - seeds.start;
    for seed in seeds {
        if let Err(report) = run(seed).await {
            failures.push(report);
        }
    }
    eprintln!("meta power loss: {count} seeds, {} failed", failures.len());
    assert!(failures.is_empty(), "{}", failures[0]);
}
