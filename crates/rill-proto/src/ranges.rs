//! The key ranges of an elastic topic and their lineage (docs/RANGES.md §2): which
//! range a key's hash goes to, how a split or a merge changes the map, and which ranges
//! a reader may read. Pure: the broker applies changes to it and stores it, clients
//! route by it, and a map that comes from outside (a catalog file, a frame) is checked
//! whole before it is used ([`RangeMap::from_ranges`]).
//!
//! A range is a partition: its id is the partition number. Ids are dense and never
//! reused; a change seals open ranges and appends new ones, and never alters a range
//! otherwise.

use std::fmt;

/// A key's routing hash: `xxh3_64(key bytes, seed 0)` (docs/PROTOCOL.md §6). A plain
/// topic takes it modulo its partitions; an elastic topic's key goes to the open range
/// covering it. One definition for the SDK and the broker, which checks a ranged
/// produce's keys against its range.
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Ids per topic at most: the broker's partition limit.
pub const RANGE_IDS_MAX: u32 = 4096;

/// One range: a partition covering the hashes `lo..=hi`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// Its partition number.
    pub id: u32,
    /// The first hash it covers.
    pub lo: u64,
    /// The last hash it covers (inclusive).
    pub hi: u64,
    /// The ranges it came from: none (an initial range), one (a split's child) or two
    /// (a merge's child, the lower one first).
    pub parents: Vec<u32>,
    /// `Some(end)` once sealed: it took appends below offset `end`, never again.
    pub sealed: Option<u64>,
}

impl Range {
    /// Whether it covers `hash`.
    pub fn covers(&self, hash: u64) -> bool {
        self.lo <= hash && hash <= self.hi
    }

    /// Whether it still takes appends.
    pub fn is_open(&self) -> bool {
        self.sealed.is_none()
    }
}

/// Why a map or a change of it was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// No range has this id.
    #[error("range {0} does not exist")]
    NotFound(u32),
    /// The range is sealed already.
    #[error("range {id} is sealed (at offset {end})")]
    Sealed {
        /// The range.
        id: u32,
        /// Where it was sealed.
        end: u64,
    },
    /// The split point is not inside the range (a split needs `lo < at <= hi`).
    #[error(
        "cannot split range {id} ({lo:#018x}..={hi:#018x}) at {at:#018x}: the point must be above its first hash and at most its last"
    )]
    SplitPoint {
        /// The range.
        id: u32,
        /// Its first hash.
        lo: u64,
        /// Its last hash.
        hi: u64,
        /// The point asked for.
        at: u64,
    },
    /// The two ranges of a merge are not neighbours.
    #[error(
        "ranges {a} and {b} are not adjacent open ranges (a merge needs the first's last hash right before the second's first)"
    )]
    NotAdjacent {
        /// The first range named.
        a: u32,
        /// The second.
        b: u32,
    },
    /// The change would pass a bound.
    #[error("{0}")]
    Limit(String),
    /// The map was changed since the change was planned.
    #[error("the range map changed (epoch {planned} when planned, {now} now)")]
    Stale {
        /// The epoch the change was planned against.
        planned: u64,
        /// The epoch now.
        now: u64,
    },
    /// A map from outside breaks an invariant.
    #[error("invalid range map: {0}")]
    Invalid(String),
}

/// A split or a merge, planned against one epoch of a map and applied with the seal
/// offsets of its parents ([`RangeMap::apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The epoch of the map it was planned against.
    pub epoch: u64,
    /// The ranges it seals, in id order.
    pub parents: Vec<u32>,
    /// The new ranges' bounds, in hash order; their ids follow the map's last.
    pub children: Vec<(u64, u64)>,
}

/// The ranges of one elastic topic, indexed by id.
#[derive(Clone, PartialEq, Eq)]
pub struct RangeMap {
    ranges: Vec<Range>,
    /// Open range ids, ordered by their first hash.
    open: Vec<u32>,
    epoch: u64,
}

impl fmt::Debug for RangeMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RangeMap")
            .field("epoch", &self.epoch)
            .field("ranges", &self.ranges)
            .finish()
    }
}

impl RangeMap {
    /// `n` open ranges cutting the hash space evenly: range `i` covers
    /// `⌊i·2⁶⁴/n⌋ ..= ⌊(i+1)·2⁶⁴/n⌋ − 1`.
    pub fn initial(n: u32) -> Result<Self, RangeError> {
        if n == 0 || n > RANGE_IDS_MAX {
            return Err(RangeError::Limit(format!(
                "an elastic topic starts with 1..={RANGE_IDS_MAX} ranges, not {n}"
            )));
        }
        let edge = |i: u32| -> u128 { (u128::from(i) << 64) / u128::from(n) };
        let ranges = (0..n)
            .map(|i| Range {
                id: i,
                lo: edge(i) as u64,
                hi: (edge(i + 1) - 1) as u64,
                parents: Vec::new(),
                sealed: None,
            })
            .collect();
        Ok(Self::indexed(ranges, 0))
    }

    /// A map from its ranges (read from a file or a frame), checked whole: ids dense
    /// from 0, and every invariant of docs/RANGES.md §2.
    pub fn from_ranges(ranges: Vec<Range>, epoch: u64) -> Result<Self, RangeError> {
        let map = Self::indexed(ranges, epoch);
        map.check()?;
        Ok(map)
    }

    fn indexed(ranges: Vec<Range>, epoch: u64) -> Self {
        let mut open: Vec<u32> = ranges
            .iter()
            .filter(|r| r.is_open())
            .map(|r| r.id)
            .collect();
        open.sort_by_key(|&id| ranges.get(id as usize).map_or(0, |r| r.lo));
        Self {
            ranges,
            open,
            epoch,
        }
    }

    /// Every range, by id.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// The range with this id.
    pub fn get(&self, id: u32) -> Option<&Range> {
        self.ranges.get(id as usize)
    }

    /// How many changes made it.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The open ranges, in hash order.
    pub fn open(&self) -> impl Iterator<Item = &Range> + '_ {
        self.open.iter().map(|&id| &self.ranges[id as usize])
    }

    /// How many ranges are open.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The open range covering `hash`.
    pub fn route(&self, hash: u64) -> u32 {
        // The open ranges tile the hash space in order: the last whose first hash is at
        // most `hash` covers it.
        let i = self
            .open
            .partition_point(|&id| self.ranges[id as usize].lo <= hash);
        self.open[i.saturating_sub(1)]
    }

    /// The ranges made from `id` by a split or a merge (none while it is open).
    pub fn children(&self, id: u32) -> Vec<u32> {
        self.ranges
            .iter()
            .filter(|r| r.parents.contains(&id))
            .map(|r| r.id)
            .collect()
    }

    /// Whether a reader may read range `id`: every parent is finished for it (has been
    /// read to its seal, as `finished` says). Initial ranges are always ready.
    pub fn is_ready(&self, id: u32, finished: impl Fn(u32) -> bool) -> bool {
        self.get(id)
            .is_some_and(|r| r.parents.iter().all(|&p| finished(p)))
    }

    /// Plans splitting open range `id` at `at` (default: its middle) into `lo..=at-1`
    /// and `at..=hi`, with at most `max_open` ranges open afterwards.
    pub fn plan_split(
        &self,
        id: u32,
        at: Option<u64>,
        max_open: usize,
    ) -> Result<Change, RangeError> {
        let r = self.open_range(id)?;
        let at = match at {
            Some(at) => at,
            // lo + ⌈(hi − lo + 1) / 2⌉, in u128 so the whole space (2⁶⁴ hashes) fits.
            None => {
                let size = u128::from(r.hi - r.lo) + 1;
                (u128::from(r.lo) + size.div_ceil(2)).min(u128::from(u64::MAX)) as u64
            }
        };
        if at <= r.lo || at > r.hi {
            return Err(RangeError::SplitPoint {
                id,
                lo: r.lo,
                hi: r.hi,
                at,
            });
        }
        if self.open.len() + 1 > max_open {
            return Err(RangeError::Limit(format!(
                "a split would leave {} ranges open; the topic allows {max_open}",
                self.open.len() + 1
            )));
        }
        self.check_ids(2)?;
        Ok(Change {
            epoch: self.epoch,
            parents: vec![id],
            children: vec![(r.lo, at - 1), (at, r.hi)],
        })
    }

    /// Plans merging two adjacent open ranges (in either order) into one.
    pub fn plan_merge(&self, a: u32, b: u32) -> Result<Change, RangeError> {
        let (ra, rb) = (self.open_range(a)?, self.open_range(b)?);
        let (low, high) = if ra.lo <= rb.lo { (ra, rb) } else { (rb, ra) };
        if a == b || low.hi.checked_add(1) != Some(high.lo) {
            return Err(RangeError::NotAdjacent { a, b });
        }
        self.check_ids(1)?;
        let mut parents = vec![low.id, high.id];
        parents.sort_unstable();
        Ok(Change {
            epoch: self.epoch,
            parents,
            children: vec![(low.lo, high.hi)],
        })
    }

    /// Applies a planned change: seals its parents at `ends` (one per parent, in the
    /// change's order) and opens its children. Returns the children's ids. Refused,
    /// leaving the map as it was, if the map changed since the plan or the change does
    /// not fit it.
    pub fn apply(&mut self, change: &Change, ends: &[u64]) -> Result<Vec<u32>, RangeError> {
        if change.epoch != self.epoch {
            return Err(RangeError::Stale {
                planned: change.epoch,
                now: self.epoch,
            });
        }
        if ends.len() != change.parents.len() {
            return Err(RangeError::Invalid(format!(
                "{} seal offsets for {} parents",
                ends.len(),
                change.parents.len()
            )));
        }
        let mut next = self.clone();
        for (&p, &end) in change.parents.iter().zip(ends) {
            next.open_range(p)?;
            next.ranges[p as usize].sealed = Some(end);
        }
        let first = next.ranges.len() as u32;
        for (i, &(lo, hi)) in change.children.iter().enumerate() {
            let parents = change
                .parents
                .iter()
                .copied()
                .filter(|&p| {
                    let r = &next.ranges[p as usize];
                    r.lo <= hi && lo <= r.hi
                })
                .collect();
            next.ranges.push(Range {
                id: first + i as u32,
                lo,
                hi,
                parents,
                sealed: None,
            });
        }
        next.epoch += 1;
        let next = Self::indexed(next.ranges, next.epoch);
        next.check()?;
        *self = next;
        Ok((first..first + change.children.len() as u32).collect())
    }

    /// Checks every invariant of docs/RANGES.md §2.
    pub fn check(&self) -> Result<(), RangeError> {
        let bad = |m: String| Err(RangeError::Invalid(m));
        if self.ranges.is_empty() {
            return bad("no ranges".into());
        }
        if self.ranges.len() > RANGE_IDS_MAX as usize {
            return bad(format!(
                "{} ranges; at most {RANGE_IDS_MAX}",
                self.ranges.len()
            ));
        }
        for (i, r) in self.ranges.iter().enumerate() {
            if r.id as usize != i {
                return bad(format!("range at index {i} has id {}", r.id));
            }
            if r.lo > r.hi {
                return bad(format!("range {} ends before it starts", r.id));
            }
            if r.parents.len() > 2 {
                return bad(format!("range {} has {} parents", r.id, r.parents.len()));
            }
            if r.parents.windows(2).any(|w| w[0] >= w[1]) {
                return bad(format!("range {}'s parents are not in id order", r.id));
            }
            if let Some(&p) = r.parents.iter().find(|&&p| p >= r.id) {
                return bad(format!(
                    "range {} names parent {p}, not an older range",
                    r.id
                ));
            }
        }
        // Coverage: the open ranges tile the hash space.
        let mut expect = Some(0u64);
        for r in self.open() {
            if Some(r.lo) != expect {
                return bad(format!(
                    "open range {} starts at {:#018x}; the open ranges must tile the hash space",
                    r.id, r.lo
                ));
            }
            expect = r.hi.checked_add(1);
        }
        if expect.is_some() {
            return bad("the open ranges do not reach the last hash".into());
        }
        // Lineage: a range with children is sealed, and its children cover exactly its
        // hashes; a sealed range has children; children of one parent come from one
        // change (a split's two, or one merge child).
        let mut children: Vec<Vec<u32>> = vec![Vec::new(); self.ranges.len()];
        for r in &self.ranges {
            for &p in &r.parents {
                children[p as usize].push(r.id);
            }
        }
        for r in &self.ranges {
            let kids = &children[r.id as usize];
            match (r.sealed, kids.is_empty()) {
                (None, false) => return bad(format!("open range {} has children", r.id)),
                (Some(_), true) => return bad(format!("sealed range {} has no children", r.id)),
                _ => {}
            }
            if kids.is_empty() {
                continue;
            }
            let shape = match kids.as_slice() {
                // A merge: one child, of this range and one neighbour.
                [c] => {
                    let c = &self.ranges[*c as usize];
                    c.parents.len() == 2 && self.merged_from(c)
                }
                // A split: two children, each of this range alone, its two halves.
                [a, b] => {
                    let (a, b) = (&self.ranges[*a as usize], &self.ranges[*b as usize]);
                    a.parents.len() == 1
                        && b.parents.len() == 1
                        && b.id == a.id + 1
                        && a.lo == r.lo
                        && b.hi == r.hi
                        && a.hi.checked_add(1) == Some(b.lo)
                }
                _ => false,
            };
            if !shape {
                return bad(format!(
                    "range {}'s children {kids:?} are neither a split of it nor a merge",
                    r.id
                ));
            }
        }
        // A split's child has one parent; check it is the parent's split.
        for r in self.ranges.iter().filter(|r| r.parents.len() == 1) {
            let p = &self.ranges[r.parents[0] as usize];
            if children[p.id as usize].len() != 2 {
                return bad(format!(
                    "range {} is the only child of range {}",
                    r.id, p.id
                ));
            }
        }
        Ok(())
    }

    /// Whether merge child `c` covers exactly its two parents, which are neighbours.
    fn merged_from(&self, c: &Range) -> bool {
        let (a, b) = (
            &self.ranges[c.parents[0] as usize],
            &self.ranges[c.parents[1] as usize],
        );
        let (low, high) = if a.lo <= b.lo { (a, b) } else { (b, a) };
        low.hi.checked_add(1) == Some(high.lo) && c.lo == low.lo && c.hi == high.hi
    }

    fn open_range(&self, id: u32) -> Result<&Range, RangeError> {
        let r = self.get(id).ok_or(RangeError::NotFound(id))?;
        match r.sealed {
            Some(end) => Err(RangeError::Sealed { id, end }),
            None => Ok(r),
        }
    }

    fn check_ids(&self, more: usize) -> Result<(), RangeError> {
        if self.ranges.len() + more > RANGE_IDS_MAX as usize {
            return Err(RangeError::Limit(format!(
                "the topic has used {} of its {RANGE_IDS_MAX} range ids",
                self.ranges.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_ranges_cut_the_space_evenly() {
        let one = RangeMap::initial(1).unwrap();
        assert_eq!((one.ranges()[0].lo, one.ranges()[0].hi), (0, u64::MAX));
        let four = RangeMap::initial(4).unwrap();
        let bounds: Vec<(u64, u64)> = four.ranges().iter().map(|r| (r.lo, r.hi)).collect();
        assert_eq!(
            bounds,
            [
                (0, (1 << 62) - 1),
                (1 << 62, (1 << 63) - 1),
                (1 << 63, (3 << 62) - 1),
                (3 << 62, u64::MAX)
            ]
        );
        assert_eq!(four.route(0), 0);
        assert_eq!(four.route((1 << 62) - 1), 0);
        assert_eq!(four.route(1 << 62), 1);
        assert_eq!(four.route(u64::MAX), 3);
        assert!(RangeMap::initial(0).is_err());
        assert!(RangeMap::initial(RANGE_IDS_MAX + 1).is_err());
        RangeMap::initial(3).unwrap().check().unwrap();
    }

    #[test]
    fn a_split_seals_the_parent_and_opens_its_halves() {
        let mut map = RangeMap::initial(1).unwrap();
        let change = map.plan_split(0, None, 256).unwrap();
        assert_eq!(
            change.children,
            vec![(0, (1 << 63) - 1), (1 << 63, u64::MAX)]
        );
        assert_eq!(map.apply(&change, &[42]).unwrap(), vec![1, 2]);
        assert_eq!(map.get(0).unwrap().sealed, Some(42));
        assert_eq!(map.children(0), vec![1, 2]);
        assert_eq!(map.get(2).unwrap().parents, vec![0]);
        assert_eq!(map.epoch(), 1);
        assert_eq!(map.route(5), 1);
        assert_eq!(map.route(u64::MAX), 2);
        // Applying the same plan again: the map moved on.
        assert_eq!(
            map.apply(&change, &[42]),
            Err(RangeError::Stale { planned: 0, now: 1 })
        );
        // Sealed ranges cannot be split; points outside the range are refused.
        assert_eq!(
            map.plan_split(0, None, 256),
            Err(RangeError::Sealed { id: 0, end: 42 })
        );
        assert!(matches!(
            map.plan_split(1, Some(0), 256),
            Err(RangeError::SplitPoint { .. })
        ));
        assert!(matches!(
            map.plan_split(1, Some(1 << 63), 256),
            Err(RangeError::SplitPoint { .. })
        ));
        assert!(map.plan_split(1, Some((1 << 63) - 1), 256).is_ok());
        assert!(matches!(
            map.plan_split(1, None, 2),
            Err(RangeError::Limit(_))
        ));
        assert_eq!(map.plan_split(9, None, 256), Err(RangeError::NotFound(9)));
    }

    #[test]
    fn a_range_of_one_hash_cannot_split() {
        let mut map = RangeMap::initial(1).unwrap();
        // Split off the single hash 0.
        let c = map.plan_split(0, Some(1), 256).unwrap();
        map.apply(&c, &[0]).unwrap();
        assert_eq!((map.get(1).unwrap().lo, map.get(1).unwrap().hi), (0, 0));
        assert!(matches!(
            map.plan_split(1, None, 256),
            Err(RangeError::SplitPoint { .. })
        ));
    }

    #[test]
    fn a_merge_needs_adjacent_open_ranges() {
        let mut map = RangeMap::initial(3).unwrap();
        assert_eq!(
            map.plan_merge(0, 2),
            Err(RangeError::NotAdjacent { a: 0, b: 2 })
        );
        assert_eq!(
            map.plan_merge(1, 1),
            Err(RangeError::NotAdjacent { a: 1, b: 1 })
        );
        let c = map.plan_merge(2, 1).unwrap();
        assert_eq!(c.parents, vec![1, 2]);
        assert_eq!(map.apply(&c, &[7, 9]).unwrap(), vec![3]);
        let child = map.get(3).unwrap();
        assert_eq!(child.parents, vec![1, 2]);
        assert_eq!((child.lo, child.hi), (map.get(1).unwrap().lo, u64::MAX));
        assert_eq!(map.get(2).unwrap().sealed, Some(9));
        assert_eq!(map.open_count(), 2);
        assert!(map.is_ready(3, |p| p == 1 || p == 2));
        assert!(!map.is_ready(3, |p| p == 1));
        assert!(map.is_ready(0, |_| false));
        assert!(!map.is_ready(99, |_| true));
    }

    #[test]
    fn maps_from_outside_are_checked_whole() {
        let mut map = RangeMap::initial(2).unwrap();
        let c = map.plan_split(1, None, 256).unwrap();
        map.apply(&c, &[10]).unwrap();
        let good = map.ranges().to_vec();
        RangeMap::from_ranges(good.clone(), 1).unwrap();

        let mut broken: Vec<(&str, Vec<Range>)> = Vec::new();
        let mut v = good.clone();
        v[0].hi += 1; // overlaps its neighbour
        broken.push(("overlap", v));
        let mut v = good.clone();
        v.pop(); // a split child missing: a gap, and a lone child
        broken.push(("gap", v));
        let mut v = good.clone();
        v[1].sealed = None; // open with children
        broken.push(("open parent", v));
        let mut v = good.clone();
        v[2].parents = vec![3]; // a younger parent
        broken.push(("younger parent", v));
        let mut v = good.clone();
        v[3].id = 7; // ids not dense
        broken.push(("ids", v));
        let mut v = good.clone();
        v[0].lo = 5; // hash 0 uncovered
        broken.push(("start", v));
        let mut v = good.clone();
        v[2].hi -= 1; // the halves do not meet
        broken.push(("halves", v));
        let mut v = good;
        v[2].parents = vec![0]; // a split child of the wrong parent
        broken.push(("wrong parent", v));
        broken.push(("empty", Vec::new()));
        for (what, v) in broken {
            assert!(
                matches!(RangeMap::from_ranges(v, 1), Err(RangeError::Invalid(_))),
                "{what} was accepted"
            );
        }
    }
}
