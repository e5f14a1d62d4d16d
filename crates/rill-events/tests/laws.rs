//! Property tests: the algebra reductions keep their laws (applying the reduced run has
//! the effect of applying the run, and every item's provenance survives), and the
//! headers round-trip and refuse what they do not know.

use proptest::prelude::*;
use rill_events::{
    Algebra, AlgebraKind, Associative, BodyCodec, Commutative, EventHeader, HeaderError,
    Idempotent, IdempotentCommutative, Merge, NonAssociative, Ordering, RetryHeader, RetryKind,
    Semigroup, error_text,
};

/// Provenance for the tests: the set of source offsets an item stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sources(Vec<u64>);

impl Merge for Sources {
    fn merge(mut self, other: Self) -> Self {
        self.0.extend(other.0);
        self
    }
}

fn with_sources<B>(run: Vec<B>) -> Vec<(B, Sources)> {
    run.into_iter()
        .enumerate()
        .map(|(i, b)| (b, Sources(vec![i as u64])))
        .collect()
}

fn all_sources<B>(run: &[(B, Sources)]) -> Vec<u64> {
    let mut all: Vec<u64> = run.iter().flat_map(|(_, s)| s.0.clone()).collect();
    all.sort_unstable();
    all
}

/// A register: applying `v` sets the state to `v`, so s·a·a = s·a.
fn register(state: Option<u8>, run: &[u8]) -> Option<u8> {
    run.iter().fold(state, |_, v| Some(*v))
}

/// A set: applying `v` inserts it, so s·a·a = s·a and s·a·b = s·b·a.
fn set(run: &[u8]) -> std::collections::BTreeSet<u8> {
    run.iter().copied().collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Append(String);

impl Semigroup for Append {
    fn combine(mut self, next: Self) -> Self {
        self.0.push_str(&next.0);
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Add(u64);

impl Semigroup for Add {
    fn combine(self, next: Self) -> Self {
        Add(self.0 + next.0)
    }
}

proptest! {
    #[test]
    fn idempotent_drops_only_adjacent_duplicates(run in prop::collection::vec(0u8..4, 0..40), start in prop::option::of(0u8..4)) {
        let reduced = Idempotent::reduce(with_sources(run.clone()));
        let bodies: Vec<u8> = reduced.iter().map(|(b, _)| *b).collect();
        prop_assert_eq!(register(start, &bodies), register(start, &run));
        prop_assert!(bodies.windows(2).all(|w| w[0] != w[1]));
        let mut dedup = run.clone();
        dedup.dedup();
        prop_assert_eq!(&bodies, &dedup);
        prop_assert_eq!(all_sources(&reduced), (0..run.len() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn idempotent_commutative_keeps_the_set_in_order(run in prop::collection::vec(0u8..6, 0..40)) {
        let reduced = IdempotentCommutative::reduce(with_sources(run.clone()));
        let bodies: Vec<u8> = reduced.iter().map(|(b, _)| *b).collect();
        prop_assert_eq!(set(&bodies), set(&run));
        prop_assert!(bodies.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates: {:?}", bodies);
        prop_assert_eq!(all_sources(&reduced), (0..run.len() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn associative_folds_in_log_order(run in prop::collection::vec("[a-c]{0,3}", 0..20)) {
        let items: Vec<Append> = run.iter().cloned().map(Append).collect();
        let reduced = Associative::reduce(with_sources(items));
        prop_assert_eq!(reduced.len(), usize::from(!run.is_empty()));
        if let Some((folded, sources)) = reduced.first() {
            prop_assert_eq!(&folded.0, &run.concat());
            prop_assert_eq!(&sources.0, &(0..run.len() as u64).collect::<Vec<_>>());
        }
    }

    #[test]
    fn no_reduction_for_non_associative_and_commutative(run in prop::collection::vec(any::<u8>(), 0..20)) {
        let kept: Vec<u8> = NonAssociative::reduce(with_sources(run.clone())).into_iter().map(|(b, _)| b).collect();
        prop_assert_eq!(&kept, &run);
        let kept: Vec<u8> = <Commutative as AlgebraKind<u8>>::reduce(with_sources(run.clone())).into_iter().map(|(b, _)| b).collect();
        prop_assert_eq!(&kept, &run);
    }

    #[test]
    fn event_headers_round_trip(tag in any::<u32>(), key_hash in any::<u64>(), o in 0u8..4, a in 0u8..5, c in 0u8..2) {
        let h = EventHeader {
            tag,
            key_hash,
            ordering: Ordering::from_byte(o).unwrap(),
            algebra: Algebra::from_byte(a).unwrap(),
            codec: BodyCodec::from_byte(c).unwrap(),
        };
        let bytes = h.encode();
        prop_assert_eq!(bytes.len(), 16);
        prop_assert_eq!(EventHeader::decode(&bytes), Ok(h));
    }

    #[test]
    fn event_header_decoding_never_panics_and_accepts_only_valid_bytes(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..24),
            prop::collection::vec(any::<u8>(), 15).prop_map(|t| [vec![1], t].concat()),
        ]
    ) {
        match EventHeader::decode(&bytes) {
            Ok(h) => prop_assert_eq!(&h.encode()[..], &bytes[..]),
            Err(_) => prop_assert!(
                bytes.len() != 16 || bytes[0] != 1 || bytes[13] > 3 || bytes[14] > 4 || bytes[15] > 1
            ),
        }
    }

    #[test]
    fn retry_headers_round_trip(
        done in any::<bool>(), attempt in any::<u32>(), first in any::<i64>(), last in any::<i64>(),
        class in 0usize..5, partition in any::<u32>(), from in any::<u64>(), span in any::<u64>(),
    ) {
        let classes = [rill_events::ErrorClass::None, rill_events::ErrorClass::Transient, rill_events::ErrorClass::Retryable, rill_events::ErrorClass::Unrecoverable, rill_events::ErrorClass::Undecodable];
        let h = RetryHeader {
            kind: if done { RetryKind::Done } else { RetryKind::Work },
            attempt,
            first_failure_us: first,
            last_failure_us: last,
            last_error: classes[class],
            source_partition: partition,
            source_first: from,
            source_last: from.saturating_add(span),
        };
        let bytes = h.encode();
        prop_assert_eq!(bytes.len(), 48);
        prop_assert_eq!(RetryHeader::decode(&bytes), Ok(h));
    }

    #[test]
    fn retry_header_decoding_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..56)) {
        if let Ok(h) = RetryHeader::decode(&bytes) {
            prop_assert_eq!(&h.encode()[..], &bytes[..]);
        }
    }

    #[test]
    fn error_text_is_cut_at_a_character_boundary(text in "\\PC{0,700}") {
        let cut = error_text(&text);
        prop_assert!(cut.len() <= 1024);
        prop_assert!(text.starts_with(cut));
        if text.len() <= 1024 {
            prop_assert_eq!(cut, text.as_str());
        }
    }
}

#[test]
fn the_documented_reductions() {
    let bodies = |r: Vec<(u8, ())>| r.into_iter().map(|(b, _)| b).collect::<Vec<_>>();
    let run = || [1u8, 1, 2, 1, 1].map(|b| (b, ())).to_vec();
    assert_eq!(bodies(Idempotent::reduce(run())), [1, 2, 1]);
    assert_eq!(bodies(IdempotentCommutative::reduce(run())), [1, 2]);
    let abc = ["a", "b", "c"].map(|s| (Append(s.into()), ())).to_vec();
    assert_eq!(Associative::reduce(abc), [(Append("abc".into()), ())]);
    assert_eq!(
        Associative::reduce(vec![(Add(1), ()), (Add(2), ())]),
        [(Add(3), ())]
    );
    assert!(Associative::reduce(Vec::<(Add, ())>::new()).is_empty());
}

#[test]
fn headers_refuse_other_versions_and_lengths() {
    let mut bytes = EventHeader {
        tag: 1,
        key_hash: 2,
        ordering: Ordering::Acquire,
        algebra: Algebra::Associative,
        codec: BodyCodec::Json,
    }
    .encode();
    assert_eq!(
        EventHeader::decode(&bytes[..15]),
        Err(HeaderError::Length {
            header: "rill.ev",
            len: 15,
            expected: 16
        })
    );
    bytes[0] = 2;
    assert_eq!(
        EventHeader::decode(&bytes),
        Err(HeaderError::Version {
            header: "rill.ev",
            version: 2
        })
    );
}
