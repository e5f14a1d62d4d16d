//! The batch parser on arbitrary bytes must never panic, hang or over-read; and on a
//! valid batch built from the input, any corruption of one byte must be detected.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use rill_format::{BatchBuilder, BatchHeader, BatchView, Batches, Header, HeaderValue, NewRecord};

#[derive(Arbitrary, Debug)]
struct Rec<'a> {
    key: Option<&'a [u8]>,
    value: &'a [u8],
    header: Option<(u8, i64, &'a [u8])>,
    delta: u32,
}

fn walk(bytes: &[u8]) {
    let _ = BatchHeader::parse(bytes);
    for batch in Batches::new(bytes) {
        let Ok(batch) = batch else { break };
        let _ = (
            batch.header(),
            batch.producer(),
            batch.largest_record_bytes(),
        );
        for record in batch.records() {
            for header in record.headers() {
                std::hint::black_box(header);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    walk(data);

    // Structured: build a valid batch from the input, then corrupt one byte.
    let mut u = Unstructured::new(data);
    let Ok(records) = Vec::<Rec<'_>>::arbitrary(&mut u) else {
        return;
    };
    if records.is_empty() {
        return;
    }
    let mut builder = BatchBuilder::new();
    for r in &records {
        let headers;
        let mut rec = NewRecord::value(r.value).timestamp_delta_us(u64::from(r.delta));
        if let Some(k) = r.key {
            rec = rec.key(k);
        }
        if let Some((kind, n, b)) = r.header {
            let value = match kind % 3 {
                0 => HeaderValue::I64(n),
                1 => HeaderValue::Bytes(b),
                _ => HeaderValue::Bool(n % 2 == 0),
            };
            headers = [Header::new("h", value)];
            rec = rec.headers(&headers);
        }
        builder.push(rec).expect("valid header name");
    }
    let mut bytes = builder.finish().expect("non-empty batch");
    rill_format::stamp(&mut bytes, 7, 1_700_000_000_000_000).expect("stamp");
    let view = BatchView::parse(&bytes).expect("a built batch parses");
    assert_eq!(view.record_count() as usize, records.len());
    let Ok(at) = u.int_in_range(0..=bytes.len() - 1) else {
        return;
    };
    let Ok(flip) = u.int_in_range(1..=255u8) else {
        return;
    };
    bytes[at] ^= flip;
    assert!(
        BatchView::parse(&bytes).is_err(),
        "flip {flip:#x} at {at} undetected"
    );
    walk(&bytes);
});
