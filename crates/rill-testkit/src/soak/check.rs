//! The soak's checker, pure: what was produced, stored and delivered goes in, the
//! problems found come out. No I/O, so every rule is unit-tested below.

use std::collections::{BTreeMap, HashMap, HashSet};

use rill_client::{Position, partition_for_key};

/// Problems shown per kind; the counts are always complete.
const SHOWN_PER_KIND: usize = 10;

/// One record of the soak: key `k{key}`, the `seq`-th record made for that key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RecordId {
    pub(crate) key: u32,
    pub(crate) seq: u64,
}

impl std::fmt::Display for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "k{}#{}", self.key, self.seq)
    }
}

/// The record key of key number `key`.
pub(crate) fn key_of(key: u32) -> String {
    format!("k{key}")
}

/// The value of a record: `k{key}:{seq}:` and a padding whose length and letter follow
/// from the record, so sizes vary and the whole value can be checked byte for byte.
pub(crate) fn value_of(id: RecordId) -> String {
    let mut value = format!("k{}:{}:", id.key, id.seq);
    let pad = ((id.seq * 31 + u64::from(id.key) * 7) % 48) as usize;
    let letter = char::from(b'a' + (id.seq % 26) as u8);
    value.extend(std::iter::repeat_n(letter, pad));
    value
}

/// The record a stored key and value are, if they are exactly what the soak writes.
pub(crate) fn parse_record(key: Option<&[u8]>, value: &[u8]) -> Option<RecordId> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.strip_prefix('k')?.splitn(3, ':');
    let id = RecordId {
        key: parts.next()?.parse().ok()?,
        seq: parts.next()?.parse().ok()?,
    };
    let exact = value_of(id).as_bytes() == value && key == Some(key_of(id.key).as_bytes());
    exact.then_some(id)
}

/// What the producer made and what the broker said about it.
#[derive(Debug, Clone)]
pub(crate) struct Produced {
    /// Acknowledged records and the position each was acknowledged with.
    pub(crate) acked: HashMap<RecordId, Position>,
    /// Records of failed sends: each may be stored at most once, or not at all.
    pub(crate) unknown: HashSet<RecordId>,
    /// Per key, the next sequence number: every lower one was generated.
    next_seq: Vec<u64>,
    /// Send calls made, and how many of them failed.
    pub(crate) sends: u64,
    pub(crate) failed_sends: u64,
}

impl Produced {
    pub(crate) fn new(keys: u32) -> Self {
        Self {
            acked: HashMap::new(),
            unknown: HashSet::new(),
            next_seq: vec![0; keys as usize],
            sends: 0,
            failed_sends: 0,
        }
    }

    /// The next record of `key`.
    pub(crate) fn next_id(&mut self, key: u32) -> RecordId {
        let next = &mut self.next_seq[key as usize];
        let id = RecordId { key, seq: *next };
        *next += 1;
        id
    }

    /// A send of `ids` was acknowledged with `positions` (one per record, in order).
    pub(crate) fn acknowledged(&mut self, ids: &[RecordId], positions: &[Position]) {
        assert_eq!(ids.len(), positions.len(), "one position per record sent");
        self.sends += 1;
        self.acked
            .extend(ids.iter().copied().zip(positions.iter().copied()));
    }

    /// A send of `ids` failed: their outcome is unknown.
    pub(crate) fn failed(&mut self, ids: &[RecordId]) {
        self.sends += 1;
        self.failed_sends += 1;
        self.unknown.extend(ids.iter().copied());
    }

    fn generated(&self, id: RecordId) -> bool {
        self.next_seq
            .get(id.key as usize)
            .is_some_and(|&next| id.seq < next)
    }

    fn keys(&self) -> u32 {
        self.next_seq.len() as u32
    }
}

/// A record read back at the end: where it is and which soak record it is (`None`: its
/// key and value are not anything the soak writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) partition: u32,
    pub(crate) offset: u64,
    pub(crate) id: Option<RecordId>,
}

/// What the consumer group handed out, by position.
#[derive(Debug, Clone, Default)]
pub(crate) struct Deliveries {
    first: HashMap<(u32, u64), Option<RecordId>>,
    total: u64,
}

impl Deliveries {
    /// A member handed out the record at `partition:offset`, which was `id`.
    pub(crate) fn delivered(&mut self, partition: u32, offset: u64, id: Option<RecordId>) {
        self.total += 1;
        self.first.entry((partition, offset)).or_insert(id);
    }

    /// Distinct positions handed out.
    pub(crate) fn distinct(&self) -> u64 {
        self.first.len() as u64
    }

    /// Hand-outs of a position already handed out (at-least-once re-deliveries).
    pub(crate) fn redelivered(&self) -> u64 {
        self.total - self.distinct()
    }

    /// Whether `partition:offset` was handed out.
    pub(crate) fn contains(&self, partition: u32, offset: u64) -> bool {
        self.first.contains_key(&(partition, offset))
    }
}

/// The verdict on a history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Findings {
    /// Acknowledged records not stored at the acknowledged position.
    pub(crate) lost: u64,
    /// Extra copies of records stored more than once.
    pub(crate) duplicated: u64,
    /// Records stored after a later record of the same key.
    pub(crate) reordered: u64,
    /// Stored records that are not a record the soak sent, sit in another partition
    /// than their key's, or leave a gap in the offsets.
    pub(crate) corrupt: u64,
    /// Records the group handed out that are not (or no longer) stored where they were
    /// read: a reader saw something a crash then took back.
    pub(crate) vanished: u64,
    /// Stored records the group never handed out.
    pub(crate) undelivered: u64,
    /// Records of failed sends that were stored (allowed, once).
    pub(crate) unknown_stored: u64,
    /// One line per problem, at most [`SHOWN_PER_KIND`] per kind.
    pub(crate) problems: Vec<String>,
}

/// Counts one problem of `kind`, keeping its description if few of that kind were kept.
fn note(
    problems: &mut Vec<String>,
    shown: &mut BTreeMap<&'static str, usize>,
    kind: &'static str,
    count: &mut u64,
    what: impl FnOnce() -> String,
) {
    *count += 1;
    let n = shown.entry(kind).or_default();
    *n += 1;
    if *n <= SHOWN_PER_KIND {
        problems.push(format!("{kind}: {}", what()));
    }
}

/// Checks the final log (`stored`, read from the start of every partition) against what
/// was produced and what the group handed out.
pub(crate) fn verify(
    produced: &Produced,
    stored: &[Stored],
    partitions: u32,
    deliveries: &Deliveries,
) -> Findings {
    let mut f = Findings::default();
    let mut problems = Vec::new();
    let mut shown = BTreeMap::new();

    let mut by_partition: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for s in stored {
        by_partition.entry(s.partition).or_default().push(*s);
    }
    let mut at: HashMap<(u32, u64), Option<RecordId>> = HashMap::new();
    let mut copies: HashMap<RecordId, Vec<(u32, u64)>> = HashMap::new();
    let mut last_of_key: HashMap<u32, (u64, u64)> = HashMap::new();
    for (&partition, records) in &mut by_partition {
        records.sort_unstable_by_key(|s| s.offset);
        let mut expected_offset = 0;
        for s in records.iter() {
            if s.offset != expected_offset {
                note(&mut problems, &mut shown, "corrupt", &mut f.corrupt, || {
                    format!(
                        "partition {partition}: offset {expected_offset} is missing \
                         (the next stored is {})",
                        s.offset
                    )
                });
            }
            expected_offset = s.offset + 1;
            at.insert((partition, s.offset), s.id);
            let Some(id) = s.id else {
                note(&mut problems, &mut shown, "corrupt", &mut f.corrupt, || {
                    format!("{partition}:{} is not a record the soak writes", s.offset)
                });
                continue;
            };
            if id.key >= produced.keys() || !produced.generated(id) {
                note(&mut problems, &mut shown, "corrupt", &mut f.corrupt, || {
                    format!("{id} at {partition}:{} was never sent", s.offset)
                });
                continue;
            }
            let home = partition_for_key(key_of(id.key).as_bytes(), partitions);
            if partition != home {
                note(&mut problems, &mut shown, "corrupt", &mut f.corrupt, || {
                    format!("{id} is in partition {partition}, its key's is {home}")
                });
            }
            let places = copies.entry(id).or_default();
            places.push((partition, s.offset));
            if places.len() > 1 {
                // Only the first copy takes part in the order check: a duplicate is
                // counted once, as a duplicate.
                continue;
            }
            match last_of_key.get(&id.key) {
                Some(&(prev_seq, prev_offset)) if prev_seq > id.seq => {
                    note(
                        &mut problems,
                        &mut shown,
                        "reordered",
                        &mut f.reordered,
                        || {
                            format!(
                                "{id} at {partition}:{} follows k{}#{prev_seq} at offset {prev_offset}",
                                s.offset, id.key
                            )
                        },
                    );
                }
                _ => {
                    last_of_key.insert(id.key, (id.seq, s.offset));
                }
            }
        }
    }

    let mut duplicated: Vec<_> = copies.iter().filter(|(_, at)| at.len() > 1).collect();
    duplicated.sort_unstable();
    for (id, places) in duplicated {
        for _ in 1..places.len() {
            note(
                &mut problems,
                &mut shown,
                "duplicated",
                &mut f.duplicated,
                || {
                    let acked = produced.acked.contains_key(id);
                    format!(
                        "{id} is stored {} times, at {places:?} (acknowledged: {acked})",
                        places.len()
                    )
                },
            );
        }
    }

    let mut acked: Vec<_> = produced.acked.iter().collect();
    acked.sort_unstable_by_key(|&(id, _)| (id.seq, id.key));
    for (id, position) in acked {
        let places = copies.get(id).map_or(&[][..], Vec::as_slice);
        if !places.contains(&(position.partition, position.offset)) {
            note(&mut problems, &mut shown, "lost", &mut f.lost, || {
                let found = if places.is_empty() {
                    "is not stored".to_owned()
                } else {
                    format!("is stored at {places:?} instead")
                };
                format!(
                    "{id} acknowledged at {}:{} {found} (there: {:?})",
                    position.partition,
                    position.offset,
                    at.get(&(position.partition, position.offset))
                        .copied()
                        .flatten()
                )
            });
        }
    }

    f.unknown_stored = produced
        .unknown
        .iter()
        .filter(|id| copies.contains_key(id))
        .count() as u64;

    let mut handed: Vec<_> = deliveries.first.iter().collect();
    handed.sort_unstable();
    for (&(partition, offset), &id) in handed {
        match at.get(&(partition, offset)) {
            Some(&now) if now == id => {}
            now => note(
                &mut problems,
                &mut shown,
                "vanished",
                &mut f.vanished,
                || {
                    let read = id.map_or("a foreign record".to_owned(), |id| id.to_string());
                    let now = match now {
                        None => "nothing is stored there".to_owned(),
                        Some(None) => "a foreign record is stored there".to_owned(),
                        Some(Some(id)) => format!("{id} is stored there"),
                    };
                    format!("the group read {read} at {partition}:{offset}; now {now}")
                },
            ),
        }
    }
    for (&partition, records) in &by_partition {
        for s in records {
            if !deliveries.contains(partition, s.offset) {
                note(
                    &mut problems,
                    &mut shown,
                    "undelivered",
                    &mut f.undelivered,
                    || {
                        let what =
                            s.id.map_or("a foreign record".to_owned(), |id| id.to_string());
                        format!(
                            "the group never handed out {partition}:{} ({what})",
                            s.offset
                        )
                    },
                );
            }
        }
    }

    for (kind, count) in [
        ("lost", f.lost),
        ("duplicated", f.duplicated),
        ("reordered", f.reordered),
        ("corrupt", f.corrupt),
        ("vanished", f.vanished),
        ("undelivered", f.undelivered),
    ] {
        if count as usize > SHOWN_PER_KIND {
            problems.push(format!("{kind}: … {count} in all"));
        }
    }
    f.problems = problems;
    f
}

/// The group's stored offsets over time: none may move backward.
///
/// A reading is taken in three steps: [`OffsetWatch::begin`] (the baseline: the highest
/// offset seen so far per partition, and every commit acknowledged before the reading
/// was asked for), the request, then [`OffsetWatch::observe`]. A stored offset below
/// its baseline, or gone, moved backward. Commits acknowledged while the request was in
/// flight raise the mark for the next reading, not this one. One reading at a time.
#[derive(Debug, Clone, Default)]
pub(crate) struct OffsetWatch {
    /// Per partition, the highest next-offset seen stored or acknowledged.
    high: BTreeMap<u32, u64>,
    /// Commits acknowledged since the reading in progress began.
    during: Option<BTreeMap<u32, u64>>,
    pub(crate) readings: u64,
    pub(crate) backward: u64,
    pub(crate) problems: Vec<String>,
}

/// What a reading is compared with; see [`OffsetWatch::begin`].
#[derive(Debug, Clone)]
pub(crate) struct Baseline(BTreeMap<u32, u64>);

impl OffsetWatch {
    /// A member's commit of next offset `next` for `partition` was acknowledged.
    pub(crate) fn committed(&mut self, partition: u32, next: u64) {
        let high = self.high.entry(partition).or_insert(next);
        *high = (*high).max(next);
        if let Some(during) = &mut self.during {
            let d = during.entry(partition).or_insert(next);
            *d = (*d).max(next);
        }
    }

    /// Starts a reading.
    pub(crate) fn begin(&mut self) -> Baseline {
        assert!(self.during.is_none(), "one offsets reading at a time");
        self.during = Some(BTreeMap::new());
        Baseline(self.high.clone())
    }

    /// Abandons a reading whose request failed.
    pub(crate) fn abandon(&mut self) {
        self.during = None;
    }

    /// Ends a reading: `stored` is each partition's stored next offset (`None`: none).
    /// `when` says where in the run it was taken, for the report.
    pub(crate) fn observe(
        &mut self,
        baseline: Baseline,
        stored: &BTreeMap<u32, Option<u64>>,
        when: &str,
    ) {
        let during = self.during.take().unwrap_or_default();
        self.readings += 1;
        let partitions: std::collections::BTreeSet<u32> =
            baseline.0.keys().chain(stored.keys()).copied().collect();
        for p in partitions {
            let was = baseline.0.get(&p).copied();
            let now = stored.get(&p).copied().flatten();
            let behind = match (was, now) {
                (Some(was), Some(now)) => now < was,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if behind {
                self.backward += 1;
                if self.problems.len() < SHOWN_PER_KIND {
                    self.problems.push(format!(
                        "offsets_backward: {when}: partition {p}'s stored offset is {} after {} \
                         (the highest stored or acknowledged before)",
                        now.map_or("gone".to_owned(), |n| n.to_string()),
                        was.unwrap_or_default()
                    ));
                }
                // Compare later readings with this one (and what was acknowledged
                // since), so one regression is counted once.
                match now.max(during.get(&p).copied()) {
                    Some(mark) => self.high.insert(p, mark),
                    None => self.high.remove(&p),
                };
            } else if let Some(now) = now {
                let high = self.high.entry(p).or_insert(now);
                *high = (*high).max(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(key: u32, seq: u64) -> RecordId {
        RecordId { key, seq }
    }

    /// A history of `per_key` records for each of `keys` keys, all acknowledged and
    /// stored in order at the positions routing gives them, all delivered once.
    fn clean(keys: u32, per_key: u64, partitions: u32) -> (Produced, Vec<Stored>, Deliveries) {
        let mut produced = Produced::new(keys);
        let mut stored = Vec::new();
        let mut ends = vec![0u64; partitions as usize];
        let mut deliveries = Deliveries::default();
        for _ in 0..per_key {
            for key in 0..keys {
                let rid = produced.next_id(key);
                let partition = partition_for_key(key_of(key).as_bytes(), partitions);
                let offset = ends[partition as usize];
                ends[partition as usize] += 1;
                produced.acknowledged(&[rid], &[Position { partition, offset }]);
                stored.push(Stored {
                    partition,
                    offset,
                    id: Some(rid),
                });
                deliveries.delivered(partition, offset, Some(rid));
            }
        }
        (produced, stored, deliveries)
    }

    #[test]
    fn values_round_trip_and_reject_anything_else() {
        for rid in [id(0, 0), id(7, 12345), id(63, u64::from(u32::MAX) + 9)] {
            let value = value_of(rid);
            assert_eq!(
                parse_record(Some(key_of(rid.key).as_bytes()), value.as_bytes()),
                Some(rid)
            );
            assert_eq!(
                parse_record(Some(b"k999"), value.as_bytes()),
                None,
                "wrong key"
            );
            assert_eq!(parse_record(None, value.as_bytes()), None, "no key");
            let mut bad = value.clone().into_bytes();
            bad.push(b'!');
            assert_eq!(
                parse_record(Some(key_of(rid.key).as_bytes()), &bad),
                None,
                "extra byte"
            );
        }
        assert_eq!(parse_record(Some(b"k1"), b"garbage"), None);
    }

    #[test]
    fn a_clean_history_passes() {
        let (produced, stored, deliveries) = clean(8, 20, 4);
        let f = verify(&produced, &stored, 4, &deliveries);
        assert_eq!(f, Findings::default());
    }

    #[test]
    fn a_lost_and_a_misplaced_record_are_lost() {
        let (produced, mut stored, deliveries) = clean(8, 20, 4);
        let gone = stored.pop().unwrap();
        let f = verify(&produced, &stored, 4, &deliveries);
        assert_eq!(f.lost, 1, "{:?}", f.problems);
        assert_eq!(f.vanished, 1, "the group read it, then it was gone");

        let (mut produced, stored, deliveries) = clean(8, 20, 4);
        let rid = gone.id.unwrap();
        produced.acked.insert(
            rid,
            Position {
                partition: gone.partition,
                offset: gone.offset + 100,
            },
        );
        let f = verify(&produced, &stored, 4, &deliveries);
        assert_eq!(f.lost, 1, "{:?}", f.problems);
        assert!(f.problems[0].contains("instead"), "{:?}", f.problems);
    }

    #[test]
    fn a_second_copy_is_duplicated_not_reordered() {
        let (produced, mut stored, mut deliveries) = clean(8, 20, 4);
        let first = stored[0];
        let end = stored
            .iter()
            .filter(|s| s.partition == first.partition)
            .count() as u64;
        stored.push(Stored {
            offset: end,
            ..first
        });
        deliveries.delivered(first.partition, end, first.id);
        let f = verify(&produced, &stored, 4, &deliveries);
        assert_eq!(
            (f.duplicated, f.reordered, f.lost),
            (1, 0, 0),
            "{:?}",
            f.problems
        );
    }

    #[test]
    fn an_unknown_record_stored_once_is_fine_twice_is_not() {
        let (mut produced, mut stored, mut deliveries) = clean(1, 3, 1);
        let rid = produced.next_id(0);
        produced.failed(&[rid]);
        stored.push(Stored {
            partition: 0,
            offset: 3,
            id: Some(rid),
        });
        deliveries.delivered(0, 3, Some(rid));
        let f = verify(&produced, &stored, 1, &deliveries);
        assert_eq!((f.unknown_stored, f.duplicated), (1, 0));
        stored.push(Stored {
            partition: 0,
            offset: 4,
            id: Some(rid),
        });
        deliveries.delivered(0, 4, Some(rid));
        let f = verify(&produced, &stored, 1, &deliveries);
        assert_eq!(f.duplicated, 1, "{:?}", f.problems);
    }

    #[test]
    fn swapped_records_of_a_key_are_reordered() {
        let (mut produced, _, _) = clean(1, 0, 1);
        let (a, b) = (produced.next_id(0), produced.next_id(0));
        produced.acknowledged(
            &[a, b],
            &[
                Position {
                    partition: 0,
                    offset: 1,
                },
                Position {
                    partition: 0,
                    offset: 0,
                },
            ],
        );
        let stored = [
            Stored {
                partition: 0,
                offset: 0,
                id: Some(b),
            },
            Stored {
                partition: 0,
                offset: 1,
                id: Some(a),
            },
        ];
        let mut deliveries = Deliveries::default();
        deliveries.delivered(0, 0, Some(b));
        deliveries.delivered(0, 1, Some(a));
        let f = verify(&produced, &stored, 1, &deliveries);
        assert_eq!((f.reordered, f.lost), (1, 0), "{:?}", f.problems);
    }

    #[test]
    fn strays_gaps_and_wrong_partitions_are_corrupt() {
        let (produced, mut stored, mut deliveries) = clean(2, 2, 1);
        stored.push(Stored {
            partition: 0,
            offset: 4,
            id: Some(id(0, 99)),
        });
        stored.push(Stored {
            partition: 0,
            offset: 6,
            id: None,
        });
        deliveries.delivered(0, 4, Some(id(0, 99)));
        deliveries.delivered(0, 6, None);
        let f = verify(&produced, &stored, 1, &deliveries);
        assert_eq!(f.corrupt, 3, "never sent, a gap, foreign: {:?}", f.problems);
        // With 4 partitions, every record of a 1-partition history whose key routes
        // elsewhere is in the wrong partition.
        let (produced, stored, deliveries) = clean(8, 1, 1);
        let misrouted = (0..8)
            .filter(|&k| partition_for_key(key_of(k).as_bytes(), 4) != 0)
            .count() as u64;
        assert_eq!(
            verify(&produced, &stored, 4, &deliveries).corrupt,
            misrouted
        );
    }

    #[test]
    fn deliveries_count_redeliveries_and_what_was_never_handed_out() {
        let (produced, stored, _) = clean(4, 5, 2);
        let mut deliveries = Deliveries::default();
        for s in &stored[1..] {
            deliveries.delivered(s.partition, s.offset, s.id);
        }
        deliveries.delivered(stored[1].partition, stored[1].offset, stored[1].id);
        let f = verify(&produced, &stored, 2, &deliveries);
        assert_eq!(f.undelivered, 1, "{:?}", f.problems);
        assert_eq!((deliveries.distinct(), deliveries.redelivered()), (19, 1));
        // A delivery of something else than what is stored there now: vanished.
        deliveries.delivered(stored[0].partition, stored[0].offset, Some(id(3, 77)));
        assert_eq!(verify(&produced, &stored, 2, &deliveries).vanished, 1);
    }

    fn reading(pairs: &[(u32, Option<u64>)]) -> BTreeMap<u32, Option<u64>> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn offsets_that_only_grow_pass() {
        let mut w = OffsetWatch::default();
        for (i, stored) in [
            reading(&[(0, None), (1, None)]),
            reading(&[(0, Some(3)), (1, None)]),
            reading(&[(0, Some(3)), (1, Some(1))]),
            reading(&[(0, Some(9)), (1, Some(1))]),
        ]
        .iter()
        .enumerate()
        {
            let b = w.begin();
            w.observe(b, stored, &format!("reading {i}"));
        }
        assert_eq!((w.readings, w.backward), (4, 0), "{:?}", w.problems);
    }

    #[test]
    fn a_regression_is_counted_once() {
        let mut w = OffsetWatch::default();
        for stored in [
            reading(&[(0, Some(10))]),
            reading(&[(0, Some(7))]),
            reading(&[(0, Some(7))]),
            reading(&[(0, Some(8))]),
            reading(&[(0, None)]),
        ] {
            let b = w.begin();
            w.observe(b, &stored, "t");
        }
        assert_eq!(w.backward, 2, "10 → 7, then 8 → gone: {:?}", w.problems);
    }

    #[test]
    fn an_acknowledged_commit_is_the_floor_of_later_readings_only() {
        let mut w = OffsetWatch::default();
        w.committed(0, 5);
        let b = w.begin();
        // Acknowledged while the reading was in flight: the reading need not show it.
        w.committed(0, 8);
        w.observe(b, &reading(&[(0, Some(5))]), "t");
        assert_eq!(w.backward, 0);
        // The next reading must.
        let b = w.begin();
        w.observe(b, &reading(&[(0, Some(6))]), "t");
        assert_eq!(w.backward, 1, "{:?}", w.problems);
        // An acknowledged commit that never shows up at all is a regression too.
        let mut w = OffsetWatch::default();
        w.committed(1, 2);
        let b = w.begin();
        w.observe(b, &reading(&[(1, None)]), "t");
        assert_eq!(w.backward, 1);
    }
}
