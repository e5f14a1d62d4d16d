//! The planner: which events of a polled batch run in which order (docs/EVENTS.md §3).
//!
//! Pure: headers in, a plan out. [`plan`] splits each key's records into segments of a
//! head run, body runs and a tail run; executing a key's segments in order (head, then
//! the bodies at once, then the tail) applies every pair [`required`] orders in order.
//! [`remainder`] says what of a key goes to the retry topic when a stage fails, and
//! [`rewritten`] which orderings it is written with so that planning it again rebuilds
//! the fences.

use crate::Ordering;

/// One record of a batch, as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The key hash.
    pub key: u64,
    /// The event type's tag.
    pub tag: u32,
    /// The record's ordering.
    pub ordering: Ordering,
}

/// Whether `x`, earlier in the log than `y`, must be applied before it (§3.1): same
/// key, and the same tag, or `x` acquires, or `y` releases.
pub fn required(x: &Entry, y: &Entry) -> bool {
    x.key == y.key && (x.tag == y.tag || x.ordering.acquires() || y.ordering.releases())
}

/// Where a run sits in its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rank {
    /// Runs first.
    Head,
    /// Runs after the head, at once with the other body runs.
    Body,
    /// Runs last.
    Tail,
}

/// Every record of one tag in one segment, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The tag.
    pub tag: u32,
    /// Indexes into the planned entries, ascending.
    pub records: Vec<usize>,
}

/// A head run, body runs and a tail run, executed in that order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segment {
    /// Runs first.
    pub head: Option<Run>,
    /// Run at once after the head, by ascending tag.
    pub body: Vec<Run>,
    /// Runs last.
    pub tail: Option<Run>,
}

impl Segment {
    /// The segment's stages in execution order, leaving out empty ones: each is the
    /// runs that execute together, with their rank.
    pub fn stages(&self) -> Vec<(Rank, Vec<&Run>)> {
        let mut out = Vec::with_capacity(3);
        if let Some(h) = &self.head {
            out.push((Rank::Head, vec![h]));
        }
        if !self.body.is_empty() {
            out.push((Rank::Body, self.body.iter().collect()));
        }
        if let Some(t) = &self.tail {
            out.push((Rank::Tail, vec![t]));
        }
        out
    }

    /// Every run in execution order, with its rank and its position in its stage.
    pub fn in_order(&self) -> impl Iterator<Item = (Rank, usize, &Run)> {
        let head = self.head.iter().map(|r| (Rank::Head, 0, r));
        let body = self
            .body
            .iter()
            .enumerate()
            .map(|(i, r)| (Rank::Body, i, r));
        let tail = self.tail.iter().map(|r| (Rank::Tail, 0, r));
        head.chain(body).chain(tail)
    }

    /// How many runs it has.
    pub fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.body.len() + usize::from(self.tail.is_some())
    }

    /// Whether it has no run.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The plan of one key: its segments, executed in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPlan {
    /// The key hash.
    pub key: u64,
    /// The segments, in order.
    pub segments: Vec<Segment>,
}

/// A segment under construction.
struct Open {
    head: Option<u32>,
    tail: Option<u32>,
    mixed: bool,
    closed: bool,
    /// Whether its records have more than one tag.
    tags: bool,
    records: Vec<usize>,
    /// The key's next segment, an index into the segments of the batch.
    next: Option<usize>,
}

/// Plans a batch: for each key in order of first appearance, its segments (§3.2).
pub fn plan(entries: &[Entry]) -> Vec<KeyPlan> {
    // Keys in order of first appearance, each with its first and last segment: the
    // segments of all keys in one list, each linked to its key's next, so that a key
    // costs no list of its own while it is planned.
    let mut keys: Vec<(u64, usize, usize)> = Vec::with_capacity(entries.len());
    let mut opens: Vec<Open> = Vec::with_capacity(entries.len());
    let mut index: std::collections::HashMap<u64, usize, foldhash::fast::RandomState> =
        std::collections::HashMap::with_capacity_and_hasher(entries.len(), Default::default());
    for (i, r) in entries.iter().enumerate() {
        let k = match index.entry(r.key) {
            std::collections::hash_map::Entry::Occupied(o) => *o.get(),
            std::collections::hash_map::Entry::Vacant(v) => {
                opens.push(Open::new());
                keys.push((r.key, opens.len() - 1, opens.len() - 1));
                *v.insert(keys.len() - 1)
            }
        };
        let mut last = keys[k].2;
        // 1. The cut check, on the open segment.
        let s = &mut opens[last];
        if !s.closed && !s.records.is_empty() {
            let cut = r.ordering.acquires()
                || (r.ordering == Ordering::Release && s.mixed && s.head == Some(r.tag));
            if cut {
                s.closed = true;
            }
        }
        // 2. A new segment if none is open.
        if opens[last].closed {
            opens.push(Open::new());
            let new = opens.len() - 1;
            opens[last].next = Some(new);
            keys[k].2 = new;
            last = new;
        }
        let s = &mut opens[last];
        // 3. Assign; a fence of acquire kind is always a segment's first record.
        if s.records.first().is_some_and(|&f| entries[f].tag != r.tag) {
            s.tags = true;
        }
        s.records.push(i);
        if r.ordering.acquires() {
            debug_assert_eq!(s.records.len(), 1, "an acquire is first of its segment");
            s.head = Some(r.tag);
        }
        if s.head.is_some_and(|h| h != r.tag) {
            s.mixed = true;
        }
        // 4. Exactly Release: the tail, and the segment closes.
        if r.ordering == Ordering::Release {
            s.tail = Some(r.tag);
            s.closed = true;
        }
    }
    keys.into_iter()
        .map(|(key, first, _)| {
            let mut segments = Vec::with_capacity(1);
            let mut at = Some(first);
            while let Some(o) = at {
                let open = std::mem::replace(&mut opens[o], Open::new());
                at = open.next;
                segments.push(runs(entries, open));
            }
            KeyPlan { key, segments }
        })
        .collect()
}

impl Open {
    fn new() -> Self {
        Self {
            head: None,
            tail: None,
            mixed: false,
            closed: false,
            tags: false,
            records: Vec::new(),
            next: None,
        }
    }
}

/// Groups a segment's records into runs by rank and tag.
fn runs(entries: &[Entry], s: Open) -> Segment {
    let rank = |tag: u32| {
        if s.head == Some(tag) {
            Rank::Head
        } else if s.tail == Some(tag) {
            Rank::Tail
        } else {
            Rank::Body
        }
    };
    let mut out = Segment::default();
    if !s.tags {
        // One tag: one run, its records as they are.
        let tag = entries[s.records[0]].tag;
        let run = Some(Run {
            tag,
            records: s.records,
        });
        match rank(tag) {
            Rank::Head => out.head = run,
            Rank::Tail => out.tail = run,
            Rank::Body => out.body.extend(run),
        }
        return out;
    }
    let mut sorted = s.records.clone();
    // Stable: records of one run stay in log order.
    sorted.sort_by_key(|&i| (rank(entries[i].tag), entries[i].tag));
    for i in sorted {
        let tag = entries[i].tag;
        let slot = match rank(tag) {
            Rank::Head => &mut out.head,
            Rank::Tail => &mut out.tail,
            Rank::Body => {
                if out.body.last().is_none_or(|r| r.tag != tag) {
                    out.body.push(Run {
                        tag,
                        records: Vec::new(),
                    });
                }
                out.body.last_mut().expect("pushed").records.push(i);
                continue;
            }
        };
        slot.get_or_insert_with(|| Run {
            tag,
            records: Vec::new(),
        })
        .records
        .push(i);
    }
    out
}

/// Where a key's execution stopped: a stage of a segment, and its runs that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The segment's index in the key's plan.
    pub segment: usize,
    /// The failed stage.
    pub rank: Rank,
    /// The failed runs of the stage, by position among the stage's runs, each with how
    /// many of its items completed before the failed chunk (a prefix).
    pub failed: Vec<(usize, usize)>,
}

/// A piece of a key's work to re-send: items `from..` of run `run` of the stage `rank`
/// of segment `segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The segment's index in the key's plan.
    pub segment: usize,
    /// The stage.
    pub rank: Rank,
    /// The run's position among the stage's runs.
    pub run: usize,
    /// The first item to re-send.
    pub from: usize,
}

/// What of a key goes to the retry topic after `failure` (§6.2), in the order it is
/// written: the failed runs of the failed stage from their failed chunk on, then every
/// later stage and segment whole. Runs that completed are not re-sent.
pub fn remainder(plan: &KeyPlan, failure: &Failure) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut failed = failure.failed.clone();
    failed.sort_unstable();
    for &(run, from) in &failed {
        out.push(Piece {
            segment: failure.segment,
            rank: failure.rank,
            run,
            from,
        });
    }
    for (s, segment) in plan.segments.iter().enumerate().skip(failure.segment) {
        for (rank, runs) in segment.stages() {
            if s == failure.segment && rank <= failure.rank {
                continue;
            }
            for run in 0..runs.len() {
                out.push(Piece {
                    segment: s,
                    rank,
                    run,
                    from: 0,
                });
            }
        }
    }
    out
}

/// The orderings a piece of `len` items of a run of `rank` is written with to the retry
/// topic (§6.2): a head's first item Acquire, a tail's last Release, all else Relaxed.
pub fn rewritten(rank: Rank, len: usize) -> impl Iterator<Item = Ordering> {
    (0..len).map(move |i| match rank {
        Rank::Head if i == 0 => Ordering::Acquire,
        Rank::Tail if i + 1 == len => Ordering::Release,
        _ => Ordering::Relaxed,
    })
}
