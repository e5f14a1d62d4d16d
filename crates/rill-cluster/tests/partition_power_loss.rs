//! A partition group's log store under the power-loss model (`rill_storage::sim::SimIo`):
//! a seeded workload of appends (leader proposals and blanks), votes, truncations and
//! purges over small segments dies at a seeded operation; the store is then opened on
//! what a restart would find — after a killed process, after a power loss that kept
//! nothing unsynced, and after power losses that kept a random part — and must hold
//! exactly what was acknowledged, plus at most what the operation in flight was doing:
//!
//! - the entries acknowledged (an append returns once they are durable, under the
//!   `always` policy), each at its index and term, each data entry's batch at the
//!   offsets it was given and with its records; an append in flight adds at most a
//!   prefix of its entries, a truncation or purge in flight is done or not;
//! - the segments hold exactly the batches the data entries point at, and the log ends
//!   where the last one does (pointers and segments agree);
//! - the vote last saved, or the one being saved.
//!
//! `RILL_SEED=<n>` replays one seed; `RILL_SEEDS=<a>..<b>` runs a range (default
//! `0..200`). A failing seed prints its operations and the disk's trace.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{EntryPayload, RaftLogReader};
use rill_cluster::partition::pointer::log_id;
use rill_cluster::partition::{PartitionCommand, PartitionEntry, PartitionLogStore};
use rill_format::{BatchBuilder, BatchView, NewRecord};
use rill_storage::sim::{SimIo, SimRng};
use rill_storage::{Durability, Io, LogConfig, LogEnv, ManualClock};

const DIR: &str = "/data/s/t/0";

/// An entry as the model knows it: its term and, for a data entry, its batch's tag and
/// record count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Known {
    term: u64,
    data: Option<(u64, u64)>,
}

type Log = BTreeMap<u64, Known>;
type Vote = openraft::impls::Vote<openraft::impls::leader_id_adv::LeaderId<u64, u64>>;

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<(u64, Known)>),
    Vote(u64),
    Truncate(Option<u64>),
    Purge(u64),
}

fn batch(tag: u64, records: u64) -> Bytes {
    let mut b = BatchBuilder::new();
    for i in 0..records {
        let value = format!("{tag}:{i}:{}", ".".repeat(150));
        b.push(NewRecord::value(value.as_bytes())).unwrap();
    }
    Bytes::from(b.finish().unwrap())
}

fn entry(index: u64, known: &Known) -> PartitionEntry {
    let id = log_id(known.term, 1, index);
    match known.data {
        None => PartitionEntry::new_blank(id),
        Some((tag, records)) => {
            PartitionEntry::new_normal(id, PartitionCommand::Propose(batch(tag, records)))
        }
    }
}

fn open(io: &SimIo) -> std::io::Result<PartitionLogStore> {
    let config = LogConfig {
        durability: Durability::Always,
        segment_bytes_max: 2048,
        ..LogConfig::default()
    };
    let env = LogEnv::new(Arc::new(io.clone()), Arc::new(ManualClock::new(1_000_000)));
    PartitionLogStore::open(Path::new(DIR), config, &env)
}

fn allowed(log: &Log, in_flight: Option<&Op>) -> Vec<Log> {
    let mut out = vec![log.clone()];
    match in_flight {
        Some(Op::Append(entries)) => {
            for n in 1..=entries.len() {
                let mut l = log.clone();
                l.extend(entries[..n].iter().cloned());
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

/// What the reopened store holds, as the model writes it; checks each batch's records
/// and that the segments hold exactly the batches pointed at.
async fn found(store: &mut PartitionLogStore) -> Result<Log, String> {
    let entries = store
        .try_get_log_entries(0..)
        .await
        .map_err(|e| format!("reading entries: {e}"))?;
    let mut out = Log::new();
    let mut bases = Vec::new();
    for e in &entries {
        let data = match &e.payload {
            EntryPayload::Normal(PartitionCommand::Batch(b)) => {
                let v = BatchView::parse(b).map_err(|e| e.to_string())?;
                let first = v.records().next().ok_or("an empty batch")?;
                let value = std::str::from_utf8(first.value).map_err(|e| e.to_string())?;
                let tag: u64 = value
                    .split(':')
                    .next()
                    .and_then(|t| t.parse().ok())
                    .ok_or("a record without its tag")?;
                bases.push((v.base_offset(), v.next_offset()));
                Some((tag, u64::from(v.record_count())))
            }
            EntryPayload::Normal(PartitionCommand::Propose(_)) => {
                return Err("an unstamped batch read back".into());
            }
            _ => None,
        };
        out.insert(
            e.index(),
            Known {
                term: e.log_id().leader_id.term,
                data,
            },
        );
    }
    // Offsets are dense from the first data entry on, and the segments end with them.
    for w in bases.windows(2) {
        if w[0].1 != w[1].0 {
            return Err(format!("batches at {:?} then {:?}", w[0], w[1]));
        }
    }
    let log = store.log();
    let end = bases.last().map(|b| b.1);
    if let Some(end) = end
        && log.next_offset() != end
    {
        return Err(format!(
            "the segments end at {}, the last data entry at {end}",
            log.next_offset()
        ));
    }
    if end.is_none() && log.next_offset() != store.next_offset() {
        return Err(format!(
            "the segments end at {}, the store's pointers say {}",
            log.next_offset(),
            store.next_offset()
        ));
    }
    Ok(out)
}

async fn run(seed: u64) -> Result<(), String> {
    let mut rng = SimRng::new(seed);
    let sim = SimIo::new(seed);
    sim.create_dir_all(Path::new(DIR)).unwrap();
    for dir in Path::new(DIR).ancestors().skip(1) {
        sim.sync_dir(dir).unwrap();
    }
    sim.crash_after(rng.between(0, 400));
    let mut log = Log::new();
    let mut vote: Option<u64> = None;
    let mut ops: Vec<String> = Vec::new();
    let mut in_flight: Option<Op> = None;
    let (mut next, mut term, mut tag) = (0u64, 1u64, 0u64);
    let mut purged: Option<u64> = None;
    if let Ok(mut store) = open(&sim) {
        for _ in 0..40 {
            let op = match rng.below(10) {
                0..=4 => {
                    if rng.chance(20) {
                        term += 1;
                    }
                    let entries: Vec<(u64, Known)> = (next..next + rng.between(1, 4))
                        .map(|i| {
                            tag += 1;
                            let data = (!rng.chance(20)).then(|| (tag, rng.between(1, 6)));
                            (i, Known { term, data })
                        })
                        .collect();
                    Op::Append(entries)
                }
                5 => Op::Vote(vote.unwrap_or(0) + 1),
                6..=7 if !log.is_empty() => {
                    let first = *log.keys().next().unwrap();
                    let last = *log.keys().next_back().unwrap();
                    if purged.is_none() && rng.chance(15) {
                        Op::Truncate(None)
                    } else {
                        Op::Truncate(Some(rng.between(first, last)))
                    }
                }
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
                    .blocking_append(entries.iter().map(|(i, k)| entry(*i, k)))
                    .await
                    .is_ok(),
                Op::Vote(v) => store.save_vote(&Vote::new(*v, 1)).await.is_ok(),
                Op::Truncate(after) => {
                    let after = after.map(|a| log_id(log[&a].term, 1, a));
                    store.truncate_after(after).await.is_ok()
                }
                Op::Purge(upto) => store.purge(log_id(log[upto].term, 1, *upto)).await.is_ok(),
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
        store.close();
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
        let mut store = match open(&image) {
            Ok(s) => s,
            Err(e) => return fail(format!("{what}: the store does not open: {e}")),
        };
        let got = match found(&mut store).await {
            Ok(l) => l,
            Err(e) => return fail(format!("{what}: {e}")),
        };
        if !allowed_logs.contains(&got) {
            return fail(format!(
                "{what}: the log is {got:?}, allowed {allowed_logs:?}"
            ));
        }
        let v = store
            .read_vote()
            .await
            .map_err(|e| e.to_string())?
            .map(|v| v.leader_id.term);
        if !allowed_votes.contains(&v) {
            return fail(format!(
                "{what}: the vote is {v:?}, allowed {allowed_votes:?}"
            ));
        }
        store.close();
    }
    Ok(())
}

#[tokio::test]
async fn acknowledged_entries_and_their_batches_survive_every_crash_point_and_nothing_else_appears()
{
    let mut failures = Vec::new();
    let seeds = common::seeds(0..200);
    let count = seeds.end - seeds.start;
    for seed in seeds {
        if let Err(report) = run(seed).await {
            failures.push(report);
        }
    }
    eprintln!(
        "partition power loss: {count} seeds, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures[0]);
}
