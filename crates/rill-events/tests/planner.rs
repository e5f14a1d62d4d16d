//! The planner against the ordering contract (docs/EVENTS.md §3), exhaustively, and the
//! worked examples of §3.4.
//!
//! For every sequence of up to 4 records over 2 keys × 2 tags × 4 orderings and up to 5
//! over 1 key × 3 tags × 4 orderings, and every point where the sequence is split into
//! a polled batch and records that arrive later: the plan of the batch applies every
//! required pair in order; and for every way a key's execution can fail (any stage, any
//! set of its failed runs, any completed prefix of each), no required predecessor of a
//! completed record is left unfinished, and the remainder re-encoded as the retry path
//! writes it, followed by the key's later records, plans into an order that again
//! applies every required pair (judged by the original orderings) in order. The first
//! failing sequence is printed.

use rill_events::Ordering;
use rill_events::plan::{
    Entry, Failure, KeyPlan, Piece, Rank, plan, remainder, required, rewritten,
};

use Ordering::{AcqRel, Acquire, Relaxed, Release};

/// The position of each planned record in execution order: (segment, stage, run within
/// the stage, index within the run).
fn positions(plan: &KeyPlan, n: usize) -> Vec<Option<(usize, usize, usize, usize)>> {
    let mut at = vec![None; n];
    for (s, segment) in plan.segments.iter().enumerate() {
        for (stage, (_, runs)) in segment.stages().iter().enumerate() {
            for (r, run) in runs.iter().enumerate() {
                for (i, &rec) in run.records.iter().enumerate() {
                    assert!(at[rec].is_none(), "record {rec} planned twice");
                    at[rec] = Some((s, stage, r, i));
                }
            }
        }
    }
    at
}

/// Whether the record at `a` completes before the one at `b` starts.
fn before(a: (usize, usize, usize, usize), b: (usize, usize, usize, usize)) -> bool {
    if (a.0, a.1) != (b.0, b.1) {
        return (a.0, a.1) < (b.0, b.1);
    }
    // One stage: runs execute at once; inside a run, in slice order.
    a.2 == b.2 && a.3 < b.3
}

/// Checks the plan of `entries` (each key's records, given by `ids`: the identity of
/// each entry in the original sequence, for the required relation judged on `orig`).
fn check_order(entries: &[Entry], ids: &[usize], orig: &[Entry]) -> Result<Vec<KeyPlan>, String> {
    let plans = plan(entries);
    let planned: usize = plans
        .iter()
        .flat_map(|p| &p.segments)
        .map(|s| {
            s.head
                .iter()
                .chain(&s.body)
                .chain(&s.tail)
                .map(|r| r.records.len())
                .sum::<usize>()
        })
        .sum();
    if planned != entries.len() {
        return Err(format!("{planned} of {} records planned", entries.len()));
    }
    for p in &plans {
        let at = positions(p, entries.len());
        for x in 0..entries.len() {
            for y in x + 1..entries.len() {
                if entries[x].key != p.key || entries[y].key != p.key {
                    continue;
                }
                if required(&orig[ids[x]], &orig[ids[y]])
                    && !before(at[x].expect("planned"), at[y].expect("planned"))
                {
                    return Err(format!(
                        "required {:?} before {:?}, planned {:?} and {:?}",
                        orig[ids[x]], orig[ids[y]], at[x], at[y]
                    ));
                }
            }
        }
        // The invariants of §3.2.
        for seg in &p.segments {
            let mut recs: Vec<usize> = seg
                .head
                .iter()
                .chain(&seg.body)
                .chain(&seg.tail)
                .flat_map(|r| r.records.clone())
                .collect();
            recs.sort_unstable();
            for (i, &r) in recs.iter().enumerate() {
                if entries[r].ordering.acquires() && i != 0 {
                    return Err(format!("an acquire at {r} is not first of its segment"));
                }
                if entries[r].ordering == Release && i + 1 != recs.len() {
                    return Err(format!("a release at {r} is not last of its segment"));
                }
            }
        }
    }
    Ok(plans)
}

/// Every failure of a key's plan: a stage, a non-empty set of its runs, and for each a
/// completed prefix.
fn failures(plan: &KeyPlan) -> Vec<Failure> {
    let mut out = Vec::new();
    for (s, segment) in plan.segments.iter().enumerate() {
        for (rank, runs) in segment.stages() {
            let n = runs.len();
            for mask in 1u32..(1 << n) {
                let chosen: Vec<usize> = (0..n).filter(|r| mask & (1 << r) != 0).collect();
                // Every combination of prefixes.
                let mut prefixes = vec![vec![]];
                for &r in &chosen {
                    let mut next = Vec::new();
                    for p in &prefixes {
                        for done in 0..runs[r].records.len() {
                            let mut q: Vec<(usize, usize)> = p.clone();
                            q.push((r, done));
                            next.push(q);
                        }
                    }
                    prefixes = next;
                }
                for failed in prefixes {
                    out.push(Failure {
                        segment: s,
                        rank,
                        failed,
                    });
                }
            }
        }
    }
    out
}

fn run_of<'a>(plan: &'a KeyPlan, piece: &Piece) -> &'a [usize] {
    let stages = plan.segments[piece.segment].stages();
    let (_, runs) = stages
        .iter()
        .find(|(rank, _)| *rank == piece.rank)
        .expect("the stage exists");
    &runs[piece.run].records
}

/// Checks one sequence split into a batch `seq[..split]` and later records.
fn check(seq: &[Entry], split: usize) -> Result<(), String> {
    let ids: Vec<usize> = (0..split).collect();
    let plans = check_order(&seq[..split], &ids, seq)?;
    for p in &plans {
        let at = positions(p, split);
        for failure in failures(p) {
            let pieces = remainder(p, &failure);
            // What was sent and what completed.
            let mut sent = vec![false; split];
            let mut fifo: Vec<(Entry, usize)> = Vec::new();
            for piece in &pieces {
                let records = &run_of(p, piece)[piece.from..];
                for (&r, ordering) in records.iter().zip(rewritten(piece.rank, records.len())) {
                    if sent[r] {
                        return Err(format!("record {r} re-sent twice after {failure:?}"));
                    }
                    sent[r] = true;
                    fifo.push((Entry { ordering, ..seq[r] }, r));
                }
            }
            // Completed: every record of this key not sent, which must have run before
            // the failure point (earlier stages, or the failed runs' prefixes and the
            // stage's runs that did not fail).
            for x in 0..split {
                for y in x + 1..split {
                    let (kx, ky) = (seq[x].key == p.key, seq[y].key == p.key);
                    if !(kx && ky && required(&seq[x], &seq[y])) {
                        continue;
                    }
                    if sent[x] && !sent[y] {
                        return Err(format!(
                            "after {failure:?}, {:?} at {:?} completed while its required predecessor {:?} at {:?} was sent to retry",
                            seq[y], at[y], seq[x], at[x]
                        ));
                    }
                }
            }
            for (x, rec) in seq.iter().enumerate().take(split) {
                if rec.key == p.key && !sent[x] {
                    let (s, stage, _, _) = at[x].expect("planned");
                    let segment = &p.segments[s];
                    let rank = segment.stages()[stage].0;
                    let early = (s, rank) <= (failure.segment, failure.rank);
                    if !early {
                        return Err(format!(
                            "record {x} after the failure was neither sent nor run"
                        ));
                    }
                }
            }
            // The retry FIFO: the remainder, then the key's later records as published.
            for (r, rec) in seq.iter().enumerate().skip(split) {
                if rec.key == p.key {
                    fifo.push((*rec, r));
                }
            }
            let entries: Vec<Entry> = fifo.iter().map(|(e, _)| *e).collect();
            let ids: Vec<usize> = fifo.iter().map(|(_, r)| *r).collect();
            check_order(&entries, &ids, seq)
                .map_err(|e| format!("re-planned after {failure:?}: {e}"))?;
        }
    }
    Ok(())
}

fn all_sequences(len: usize, keys: u64, tags: u32, out: &mut Vec<Vec<Entry>>) {
    let options: Vec<Entry> = (0..keys)
        .flat_map(|key| {
            (1..=tags)
                .flat_map(move |tag| Ordering::ALL.map(|ordering| Entry { key, tag, ordering }))
        })
        .collect();
    let mut seqs: Vec<Vec<Entry>> = vec![vec![]];
    for _ in 0..len {
        seqs = seqs
            .iter()
            .flat_map(|s| {
                options.iter().map(move |o| {
                    let mut t = s.clone();
                    t.push(*o);
                    t
                })
            })
            .collect();
        out.extend(seqs.iter().cloned());
    }
}

fn exhaust(len: usize, keys: u64, tags: u32) -> usize {
    let mut seqs = Vec::new();
    all_sequences(len, keys, tags, &mut seqs);
    for seq in &seqs {
        for split in 0..=seq.len() {
            if let Err(e) = check(seq, split) {
                let shown: Vec<String> = seq
                    .iter()
                    .map(|e| {
                        format!(
                            "k{}:{}{:?}",
                            e.key,
                            (b'A' + e.tag as u8 - 1) as char,
                            e.ordering
                        )
                    })
                    .collect();
                panic!(
                    "sequence [{}] polled as the first {split}: {e}",
                    shown.join(" ")
                );
            }
        }
    }
    seqs.len()
}

#[test]
fn every_sequence_over_two_keys_and_two_tags_up_to_length_4_keeps_the_contract() {
    assert_eq!(exhaust(4, 2, 2), 16 + 256 + 4096 + 65536);
}

#[test]
fn every_sequence_over_one_key_and_three_tags_up_to_length_5_keeps_the_contract() {
    assert_eq!(exhaust(5, 1, 3), 12 + 144 + 1728 + 20736 + 248832);
}

/// The worked examples of docs/EVENTS.md §3.4, as (segments of (head, body, tail)).
type Shape = Vec<(Option<Vec<usize>>, Vec<Vec<usize>>, Option<Vec<usize>>)>;

fn shape(p: &KeyPlan) -> Shape {
    p.segments
        .iter()
        .map(|s| {
            (
                s.head.as_ref().map(|r| r.records.clone()),
                s.body.iter().map(|r| r.records.clone()).collect(),
                s.tail.as_ref().map(|r| r.records.clone()),
            )
        })
        .collect()
}

fn one_key(log: &[(u32, Ordering)]) -> Shape {
    let entries: Vec<Entry> = log
        .iter()
        .map(|&(tag, ordering)| Entry {
            key: 7,
            tag,
            ordering,
        })
        .collect();
    let plans = plan(&entries);
    assert_eq!(plans.len(), 1);
    shape(&plans[0])
}

const A: u32 = 1;
const B: u32 = 2;
const C: u32 = 3;

#[test]
fn the_worked_examples_plan_as_documented() {
    // Ex. 1: all Relaxed.
    assert_eq!(
        one_key(&[
            (A, Relaxed),
            (B, Relaxed),
            (A, Relaxed),
            (C, Relaxed),
            (B, Relaxed)
        ]),
        vec![(None, vec![vec![0, 2], vec![1, 4], vec![3]], None)]
    );
    // Ex. 2: Acquire.
    assert_eq!(
        one_key(&[
            (A, Relaxed),
            (B, Acquire),
            (A, Relaxed),
            (B, Relaxed),
            (C, Relaxed)
        ]),
        vec![
            (None, vec![vec![0]], None),
            (Some(vec![1, 3]), vec![vec![2], vec![4]], None)
        ]
    );
    // Ex. 3: Release, and the variant where the tail takes in earlier events.
    assert_eq!(
        one_key(&[(A, Relaxed), (B, Relaxed), (C, Release), (A, Relaxed)]),
        vec![
            (None, vec![vec![0], vec![1]], Some(vec![2])),
            (None, vec![vec![3]], None)
        ]
    );
    assert_eq!(
        one_key(&[(A, Relaxed), (B, Relaxed), (A, Release), (B, Relaxed)]),
        vec![
            (None, vec![vec![1]], Some(vec![0, 2])),
            (None, vec![vec![3]], None)
        ]
    );
    // Ex. 4: AcqRel, then a Release of the head's type.
    assert_eq!(
        one_key(&[
            (A, Relaxed),
            (B, AcqRel),
            (C, Relaxed),
            (B, Release),
            (C, Relaxed)
        ]),
        vec![
            (None, vec![vec![0]], None),
            (Some(vec![1]), vec![vec![2]], None),
            (None, vec![], Some(vec![3])),
            (None, vec![vec![4]], None)
        ]
    );
    // Ex. 5: a Release of the head's type in a segment that is not mixed.
    assert_eq!(
        one_key(&[(A, Acquire), (A, Release), (B, Relaxed)]),
        vec![
            (Some(vec![0, 1]), vec![], None),
            (None, vec![vec![2]], None)
        ]
    );
    // Ex. 6: two keys.
    let entries = [
        Entry {
            key: 1,
            tag: A,
            ordering: Relaxed,
        },
        Entry {
            key: 2,
            tag: A,
            ordering: Acquire,
        },
        Entry {
            key: 1,
            tag: B,
            ordering: Release,
        },
        Entry {
            key: 2,
            tag: B,
            ordering: Relaxed,
        },
    ];
    let plans = plan(&entries);
    assert_eq!(plans.iter().map(|p| p.key).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(shape(&plans[0]), vec![(None, vec![vec![0]], Some(vec![2]))]);
    assert_eq!(shape(&plans[1]), vec![(Some(vec![1]), vec![vec![3]], None)]);
}

#[test]
fn a_failed_body_stage_resends_its_failed_runs_and_everything_after() {
    // Ex. 2's key failing in seg1's body stage, run C only, after the head completed.
    let entries: Vec<Entry> = [
        (A, Relaxed),
        (B, Acquire),
        (A, Relaxed),
        (B, Relaxed),
        (C, Relaxed),
    ]
    .map(|(tag, ordering)| Entry {
        key: 7,
        tag,
        ordering,
    })
    .to_vec();
    let plans = plan(&entries);
    let pieces = remainder(
        &plans[0],
        &Failure {
            segment: 1,
            rank: Rank::Body,
            failed: vec![(1, 0)],
        },
    );
    assert_eq!(
        pieces,
        [Piece {
            segment: 1,
            rank: Rank::Body,
            run: 1,
            from: 0
        }]
    );
    assert_eq!(run_of(&plans[0], &pieces[0]), [4]);
}
