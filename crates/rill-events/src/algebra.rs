//! Reduction of a run by its type's algebra (docs/EVENTS.md §4).
//!
//! The algebra is a marker type, so what a reduction needs of the body (`Eq`, `Ord`, a
//! [`Semigroup`]) is checked when the event type is declared. Every item carries its
//! provenance (`S`: the main offsets it stands for), merged when items are folded or
//! deduplicated together, so a reduced item still names every record it came from.

/// The algebra of an event type, as written in the `rill.ev` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algebra {
    /// No reduction.
    NonAssociative,
    /// Events of a run commute; not used to reduce.
    Commutative,
    /// Applying an event twice in a row equals applying it once: adjacent duplicates go.
    Idempotent,
    /// Idempotent and commutative: the run is sorted and every duplicate goes.
    IdempotentCommutative,
    /// A run folds into one event with [`Semigroup::combine`].
    Associative,
}

impl Algebra {
    /// Every algebra, in wire order.
    pub const ALL: [Self; 5] = [
        Self::NonAssociative,
        Self::Commutative,
        Self::Idempotent,
        Self::IdempotentCommutative,
        Self::Associative,
    ];

    /// The wire byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Self::NonAssociative => 0,
            Self::Commutative => 1,
            Self::Idempotent => 2,
            Self::IdempotentCommutative => 3,
            Self::Associative => 4,
        }
    }

    /// The algebra of a wire byte, if it is one.
    pub fn from_byte(b: u8) -> Option<Self> {
        Self::ALL.get(usize::from(b)).copied()
    }
}

/// Bodies that fold: `combine` must be associative, and applying `a.combine(b)` must
/// equal applying `a` then `b`.
pub trait Semigroup {
    /// `self` then `next`, as one.
    fn combine(self, next: Self) -> Self;
}

/// Provenance of a run item: merged when items become one.
pub trait Merge {
    /// The provenance of an item standing for both.
    fn merge(self, other: Self) -> Self;
}

impl Merge for () {
    fn merge(self, _other: Self) {}
}

/// An algebra marker: how a run of bodies `B` is reduced.
pub trait AlgebraKind<B>: Send + Sync + 'static {
    /// The algebra, as on the wire.
    const ALGEBRA: Algebra;

    /// Reduces a run (one key, one type, in application order) so that applying the
    /// result in order has the effect of applying the run.
    fn reduce<S: Merge>(run: Vec<(B, S)>) -> Vec<(B, S)>;
}

/// No reduction.
#[derive(Debug, Clone, Copy, Default)]
pub struct NonAssociative;

/// Commutative: the permission to reorder is not used, so no reduction.
#[derive(Debug, Clone, Copy, Default)]
pub struct Commutative;

/// Idempotent: adjacent duplicates go (`1,1,2,1,1` → `1,2,1`: the second 1 overrides 2).
#[derive(Debug, Clone, Copy, Default)]
pub struct Idempotent;

/// Idempotent and commutative: sorted, then every duplicate goes (`1,1,2,1,1` → `1,2`);
/// the handler sees `Ord` order, not log order.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotentCommutative;

/// Associative: the run folds left in log order into one item.
#[derive(Debug, Clone, Copy, Default)]
pub struct Associative;

impl<B> AlgebraKind<B> for NonAssociative {
    const ALGEBRA: Algebra = Algebra::NonAssociative;
    fn reduce<S: Merge>(run: Vec<(B, S)>) -> Vec<(B, S)> {
        run
    }
}

impl<B> AlgebraKind<B> for Commutative {
    const ALGEBRA: Algebra = Algebra::Commutative;
    fn reduce<S: Merge>(run: Vec<(B, S)>) -> Vec<(B, S)> {
        run
    }
}

/// Removes adjacent duplicates, merging the provenance of each removed item into the
/// one kept.
fn dedup_adjacent<B: Eq, S: Merge>(run: Vec<(B, S)>) -> Vec<(B, S)> {
    let mut out: Vec<(B, S)> = Vec::with_capacity(run.len());
    for (body, source) in run {
        match out.pop() {
            Some((kept, from)) if kept == body => out.push((kept, from.merge(source))),
            Some(last) => {
                out.push(last);
                out.push((body, source));
            }
            None => out.push((body, source)),
        }
    }
    out
}

impl<B: Eq> AlgebraKind<B> for Idempotent {
    const ALGEBRA: Algebra = Algebra::Idempotent;
    fn reduce<S: Merge>(run: Vec<(B, S)>) -> Vec<(B, S)> {
        dedup_adjacent(run)
    }
}

impl<B: Ord> AlgebraKind<B> for IdempotentCommutative {
    const ALGEBRA: Algebra = Algebra::IdempotentCommutative;
    fn reduce<S: Merge>(mut run: Vec<(B, S)>) -> Vec<(B, S)> {
        run.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        dedup_adjacent(run)
    }
}

impl<B: Semigroup> AlgebraKind<B> for Associative {
    const ALGEBRA: Algebra = Algebra::Associative;
    fn reduce<S: Merge>(run: Vec<(B, S)>) -> Vec<(B, S)> {
        let mut items = run.into_iter();
        let Some(first) = items.next() else {
            return Vec::new();
        };
        let folded = items.fold(first, |(acc, s), (body, t)| (acc.combine(body), s.merge(t)));
        vec![folded]
    }
}
