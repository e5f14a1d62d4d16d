//! Property tests of the elastic range map (docs/RANGES.md §2, §10): any sequence of
//! splits and merges keeps every hash covered by exactly one open range, keeps the
//! ranges a hash passed through in one parent-to-child chain (what per-key order rests
//! on), and leaves every sealed range reachable by a reader that finishes parents first.

use proptest::prelude::*;
use rill_proto::ranges::{RangeError, RangeMap};

#[derive(Debug, Clone)]
enum Op {
    /// Split the open range at this index (modulo the open count), at its middle or at
    /// this fraction of it.
    Split { pick: usize, at: Option<u64> },
    /// Merge the open range at this index with its right neighbour (if it has one).
    Merge { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<usize>(), proptest::option::of(any::<u64>()))
            .prop_map(|(pick, at)| Op::Split { pick, at }),
        2 => any::<usize>().prop_map(|pick| Op::Merge { pick }),
    ]
}

/// Hashes worth probing: the edges of every range and some random ones.
fn probes(map: &RangeMap, random: &[u64]) -> Vec<u64> {
    let mut v: Vec<u64> = random.to_vec();
    for r in map.ranges() {
        v.extend([r.lo, r.hi, r.lo.saturating_sub(1), r.hi.saturating_add(1)]);
    }
    v.extend([0, u64::MAX]);
    v
}

fn assert_sound(map: &RangeMap, random: &[u64]) -> Result<(), TestCaseError> {
    map.check()
        .map_err(|e| TestCaseError::fail(format!("{e}: {map:?}")))?;
    for h in probes(map, random) {
        // Exactly one open range covers the hash, and routing finds it.
        let open: Vec<u32> = map.open().filter(|r| r.covers(h)).map(|r| r.id).collect();
        prop_assert_eq!(open.len(), 1, "hash {:#x} is covered by {:?}", h, open);
        prop_assert_eq!(map.route(h), open[0]);
        // The ranges that ever covered it form one chain, each the child of the one
        // before, every one but the last sealed.
        let chain: Vec<_> = map.ranges().iter().filter(|r| r.covers(h)).collect();
        for pair in chain.windows(2) {
            prop_assert!(
                pair[1].parents.contains(&pair[0].id),
                "hash {:#x}: range {} follows {} without descending from it",
                h,
                pair[1].id,
                pair[0].id
            );
            prop_assert!(pair[0].sealed.is_some());
        }
        prop_assert!(chain.last().is_some_and(|r| r.is_open()));
    }
    // A map read back from its ranges is the same map.
    let again = RangeMap::from_ranges(map.ranges().to_vec(), map.epoch())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&again, map);
    Ok(())
}

/// A reader that finishes a range only once its parents are finished finishes every
/// sealed range, each after its parents.
fn assert_readable(map: &RangeMap) -> Result<(), TestCaseError> {
    let n = map.ranges().len();
    let mut finished = vec![false; n];
    loop {
        let next = map.ranges().iter().find(|r| {
            r.sealed.is_some()
                && !finished[r.id as usize]
                && map.is_ready(r.id, |p| finished[p as usize])
        });
        let Some(r) = next else { break };
        for &p in &r.parents {
            prop_assert!(finished[p as usize]);
        }
        finished[r.id as usize] = true;
    }
    for r in map.ranges() {
        prop_assert_eq!(
            finished[r.id as usize],
            r.sealed.is_some(),
            "range {}",
            r.id
        );
        if r.is_open() {
            prop_assert!(map.is_ready(r.id, |p| finished[p as usize]));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn splits_and_merges_keep_the_map_sound(
        initial in 1u32..6,
        ops in proptest::collection::vec(op(), 0..48),
        random in proptest::collection::vec(any::<u64>(), 8),
        max_open in 1usize..40,
    ) {
        let mut map = RangeMap::initial(initial).unwrap();
        assert_sound(&map, &random)?;
        let (mut splits, mut merges) = (0u64, 0u64);
        for (step, op) in ops.iter().enumerate() {
            let open: Vec<u32> = map.open().map(|r| r.id).collect();
            let before = map.clone();
            let planned = match *op {
                Op::Split { pick, at } => {
                    let r = map.get(open[pick % open.len()]).unwrap().clone();
                    // A point inside the range (or, for `u64::MAX`, its very top).
                    let at = at.map(|a| r.lo.saturating_add(a % (r.hi - r.lo).max(1)).saturating_add(1));
                    map.plan_split(r.id, at, max_open)
                }
                Op::Merge { pick } => {
                    let i = pick % open.len();
                    match open.get(i + 1) {
                        Some(&right) => map.plan_merge(right, open[i]),
                        None => Err(RangeError::NotAdjacent { a: open[i], b: open[i] }),
                    }
                }
            };
            let change = match planned {
                Ok(change) => change,
                Err(RangeError::Limit(_) | RangeError::SplitPoint { .. } | RangeError::NotAdjacent { .. }) => {
                    prop_assert_eq!(&map, &before, "a refused plan changed the map");
                    continue;
                }
                Err(e) => return Err(TestCaseError::fail(format!("step {step}: {e}"))),
            };
            // A wrong number of seal offsets is refused and changes nothing.
            let wrong = vec![1; change.parents.len() + 1];
            prop_assert!(map.apply(&change, &wrong).is_err());
            prop_assert_eq!(&map, &before);
            let ends: Vec<u64> = (0..change.parents.len() as u64).map(|i| step as u64 * 10 + i).collect();
            let children = map.apply(&change, &ends).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(children.len(), change.children.len());
            // The same plan again is stale.
            let stale = map.apply(&change, &ends);
            prop_assert!(matches!(stale, Err(RangeError::Stale { .. })), "{:?}", stale);
            match change.parents.len() {
                1 => splits += 1,
                _ => merges += 1,
            }
            prop_assert!(map.open_count() <= max_open.max(initial as usize));
            assert_sound(&map, &random)?;
        }
        prop_assert_eq!(map.epoch(), splits + merges);
        prop_assert_eq!(map.open_count() as u64, u64::from(initial) + splits - merges);
        prop_assert_eq!(map.ranges().len() as u64, u64::from(initial) + 2 * splits + merges);
        assert_readable(&map)?;
    }
}
