//! Property tests of the batch format: build → parse round-trips, and every single-byte
//! corruption is detected. Proptest prints the seed and the shrunk input on failure;
//! persisted failures replay from `proptest-regressions/`.

use proptest::prelude::*;
use rill_format::{
    BatchBuilder, BatchView, Batches, FormatError, Header, HeaderValue, NewRecord, ProducerInfo,
    stamp,
};

#[derive(Debug, Clone, PartialEq)]
enum OwnedValue {
    Str(String),
    Bytes(Vec<u8>),
    Bool(bool),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    F32(u32),
    F64(u64),
}

impl OwnedValue {
    fn borrow(&self) -> HeaderValue<'_> {
        match self {
            Self::Str(s) => HeaderValue::Str(s),
            Self::Bytes(b) => HeaderValue::Bytes(b),
            Self::Bool(v) => HeaderValue::Bool(*v),
            Self::I8(v) => HeaderValue::I8(*v),
            Self::I16(v) => HeaderValue::I16(*v),
            Self::I32(v) => HeaderValue::I32(*v),
            Self::I64(v) => HeaderValue::I64(*v),
            Self::I128(v) => HeaderValue::I128(*v),
            Self::U8(v) => HeaderValue::U8(*v),
            Self::U16(v) => HeaderValue::U16(*v),
            Self::U32(v) => HeaderValue::U32(*v),
            Self::U64(v) => HeaderValue::U64(*v),
            Self::U128(v) => HeaderValue::U128(*v),
            Self::F32(bits) => HeaderValue::F32(f32::from_bits(*bits)),
            Self::F64(bits) => HeaderValue::F64(f64::from_bits(*bits)),
        }
    }

    /// Compares bit patterns so NaN headers round-trip too.
    fn matches(&self, value: &HeaderValue<'_>) -> bool {
        match (self, value) {
            (Self::F32(bits), HeaderValue::F32(v)) => *bits == v.to_bits(),
            (Self::F64(bits), HeaderValue::F64(v)) => *bits == v.to_bits(),
            _ => self.borrow() == *value,
        }
    }
}

#[derive(Debug, Clone)]
struct OwnedRecord {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    headers: Vec<(String, OwnedValue)>,
    delta: u64,
}

fn header_value() -> impl Strategy<Value = OwnedValue> {
    prop_oneof![
        ".{0,20}".prop_map(OwnedValue::Str),
        prop::collection::vec(any::<u8>(), 0..20).prop_map(OwnedValue::Bytes),
        any::<bool>().prop_map(OwnedValue::Bool),
        any::<i8>().prop_map(OwnedValue::I8),
        any::<i16>().prop_map(OwnedValue::I16),
        any::<i32>().prop_map(OwnedValue::I32),
        any::<i64>().prop_map(OwnedValue::I64),
        any::<i128>().prop_map(OwnedValue::I128),
        any::<u8>().prop_map(OwnedValue::U8),
        any::<u16>().prop_map(OwnedValue::U16),
        any::<u32>().prop_map(OwnedValue::U32),
        any::<u64>().prop_map(OwnedValue::U64),
        any::<u128>().prop_map(OwnedValue::U128),
        any::<u32>().prop_map(OwnedValue::F32),
        any::<u64>().prop_map(OwnedValue::F64),
    ]
}

fn record() -> impl Strategy<Value = OwnedRecord> {
    (
        prop::option::of(prop::collection::vec(any::<u8>(), 0..40)),
        prop::collection::vec(any::<u8>(), 0..200),
        prop::collection::vec(("[a-z][a-z0-9._-]{0,15}", header_value()), 0..4),
        prop_oneof![Just(0u64), 0..1_000_000u64, Just(i64::MAX as u64 / 2)],
    )
        .prop_map(|(key, value, headers, delta)| OwnedRecord {
            key,
            value,
            headers,
            delta,
        })
}

fn builder_of(records: &[OwnedRecord], producer: Option<ProducerInfo>) -> BatchBuilder {
    let mut builder = BatchBuilder::new();
    if let Some(p) = producer {
        builder.producer(p);
    }
    for r in records {
        let headers: Vec<Header<'_>> = r
            .headers
            .iter()
            .map(|(n, v)| Header::new(n, v.borrow()))
            .collect();
        let mut rec = NewRecord::value(&r.value)
            .headers(&headers)
            .timestamp_delta_us(r.delta);
        if let Some(k) = &r.key {
            rec = rec.key(k);
        }
        let before = builder.encoded_len();
        builder.push(rec).unwrap();
        assert_eq!(
            builder.encoded_len() - before,
            BatchBuilder::record_len(&rec)
        );
    }
    builder
}

fn build(records: &[OwnedRecord], producer: Option<ProducerInfo>) -> Vec<u8> {
    builder_of(records, producer).finish().unwrap()
}

fn producer() -> impl Strategy<Value = Option<ProducerInfo>> {
    prop::option::of((any::<u64>(), any::<u16>(), any::<u32>()).prop_map(
        |(id, epoch, base_sequence)| ProducerInfo {
            id,
            epoch,
            base_sequence,
        },
    ))
}

proptest! {
    #[test]
    fn build_parse_round_trips(
        records in prop::collection::vec(record(), 1..20),
        producer in producer(),
        base in 0..u64::MAX / 2,
        first_ts in -1_000_000_000_000i64..4_000_000_000_000_000,
    ) {
        let mut bytes = build(&records, producer);
        stamp(&mut bytes, base, first_ts).unwrap();
        let view = BatchView::parse(&bytes).unwrap();
        prop_assert_eq!(view.base_offset(), base);
        prop_assert_eq!(view.record_count() as usize, records.len());
        prop_assert_eq!(view.producer(), producer);
        prop_assert_eq!(view.first_timestamp_us(), first_ts);
        let max_delta = records.iter().map(|r| r.delta).max().unwrap();
        prop_assert_eq!(view.max_timestamp_us(), first_ts + max_delta as i64);
        prop_assert_eq!(view.next_offset(), base + records.len() as u64);
        let parsed: Vec<_> = view.records().collect();
        prop_assert_eq!(parsed.len(), records.len());
        // Validating and visiting in one pass sees exactly what iterating sees.
        let mut visited = Vec::new();
        BatchView::parse_with(&bytes, |r| visited.push(r)).unwrap();
        prop_assert_eq!(visited.len(), parsed.len());
        for (v, p) in visited.iter().zip(&parsed) {
            prop_assert_eq!((v.offset, v.timestamp_us, v.key, v.value), (p.offset, p.timestamp_us, p.key, p.value));
            prop_assert_eq!(format!("{:?}", v.headers().collect::<Vec<_>>()), format!("{:?}", p.headers().collect::<Vec<_>>()));
        }
        for (i, (got, want)) in parsed.iter().zip(&records).enumerate() {
            prop_assert_eq!(got.offset, base + i as u64);
            prop_assert_eq!(got.timestamp_us, first_ts + want.delta as i64);
            prop_assert_eq!(got.key, want.key.as_deref());
            prop_assert_eq!(got.value, &want.value[..]);
            let headers: Vec<_> = got.headers().collect();
            prop_assert_eq!(headers.len(), want.headers.len());
            for (h, (name, value)) in headers.iter().zip(&want.headers) {
                prop_assert_eq!(h.name, name.as_str());
                prop_assert!(value.matches(&h.value), "{:?} != {:?}", h.value, value);
            }
        }
    }

    /// What a broker in the same process trusts without parsing (docs/FORMAT.md §3):
    /// a built batch is the bytes `finish` makes, parses, has the largest record the
    /// parser finds, and is recognised by its own buffer only, never by a copy.
    #[test]
    fn built_batches_are_what_parsing_finds(
        records in prop::collection::vec(record(), 1..20),
        producer in producer(),
    ) {
        let built = builder_of(&records, producer).finish_built().unwrap();
        let bytes = build(&records, producer);
        prop_assert_eq!(&built.bytes()[..], &bytes[..]);
        let view = BatchView::parse(built.bytes()).unwrap();
        prop_assert_eq!(view.as_bytes().len(), bytes.len());
        prop_assert_eq!(built.largest_record_bytes(), view.largest_record_bytes());
        prop_assert!(built.is(built.bytes()));
        prop_assert!(built.is(&built.bytes().clone()));
        prop_assert!(!built.is(&bytes), "a copy is not the built batch");
        prop_assert!(!built.is(&built.bytes()[..bytes.len() - 1]));
        prop_assert!(!built.is(&built.bytes()[1..]));
    }

    #[test]
    fn any_single_byte_corruption_is_detected(
        records in prop::collection::vec(record(), 1..6),
        producer in producer(),
        position in any::<prop::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let mut bytes = build(&records, producer);
        stamp(&mut bytes, 1234, 1_700_000_000_000_000).unwrap();
        let at = position.index(bytes.len());
        bytes[at] ^= flip;
        prop_assert!(BatchView::parse(&bytes).is_err(), "flip {flip:#x} at {at} went unnoticed");
    }

    #[test]
    fn every_truncation_is_detected(
        records in prop::collection::vec(record(), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = build(&records, None);
        let at = cut.index(bytes.len());
        let err = BatchView::parse(&bytes[..at]).unwrap_err();
        let is_truncated = matches!(err, FormatError::Truncated { .. });
        prop_assert!(is_truncated, "{:?}", err);
    }

    #[test]
    fn a_batch_that_fails_to_parse_fails_the_same_when_visited(
        records in prop::collection::vec(record(), 1..6),
        position in any::<prop::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let mut bytes = build(&records, None);
        let at = position.index(bytes.len());
        bytes[at] ^= flip;
        let mut visited = 0;
        let visiting = BatchView::parse_with(&bytes, |_| visited += 1).map(|v| v.next_offset());
        prop_assert_eq!(visiting, BatchView::parse(&bytes).map(|v| v.next_offset()));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        for view in Batches::new(&bytes).map_while(Result::ok) {
            for record in view.records() {
                let _ = record.headers().count();
            }
        }
    }
}

#[test]
fn batches_iterates_back_to_back_and_stops_at_garbage() {
    let one = build(
        &[OwnedRecord {
            key: None,
            value: b"a".to_vec(),
            headers: vec![],
            delta: 0,
        }],
        None,
    );
    let mut buf = one.clone();
    buf.extend_from_slice(&one);
    buf.extend_from_slice(&[0xde, 0xad]);
    let results: Vec<_> = Batches::new(&buf).collect();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[1].is_ok());
    assert!(matches!(results[2], Err(FormatError::Truncated { .. })));
}

#[test]
fn builder_rejects_bad_header_names_and_empty_batches() {
    let mut builder = BatchBuilder::new();
    let long = "x".repeat(256);
    for name in ["", long.as_str()] {
        let headers = [Header::new(name, HeaderValue::Bool(true))];
        assert!(
            builder
                .push(NewRecord::value(b"v").headers(&headers))
                .is_err()
        );
    }
    assert_eq!(builder.record_count(), 0);
    assert_eq!(BatchBuilder::new().finish(), Err(FormatError::Empty));
}

#[test]
fn unsupported_compression_and_magic_are_typed_errors() {
    let mut bytes = build(
        &[OwnedRecord {
            key: None,
            value: b"a".to_vec(),
            headers: vec![],
            delta: 0,
        }],
        None,
    );
    // Set codec 1 and re-seal both CRCs so only the codec is wrong.
    bytes[38] = 1;
    reseal(&mut bytes);
    assert_eq!(
        BatchView::parse(&bytes).unwrap_err(),
        FormatError::UnsupportedCompression(1)
    );
    bytes[38] = 0;
    bytes[36] = 2;
    reseal(&mut bytes);
    assert_eq!(
        BatchView::parse(&bytes).unwrap_err(),
        FormatError::UnsupportedMagic(2)
    );
}

fn reseal(bytes: &mut [u8]) {
    let body = crc32c::crc32c(&bytes[36..]);
    bytes[32..36].copy_from_slice(&body.to_le_bytes());
    let header = crc32c::crc32c(&bytes[4..64]);
    bytes[0..4].copy_from_slice(&header.to_le_bytes());
}
