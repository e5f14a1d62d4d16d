use proptest::prelude::*;
use rill_format::{BatchBuilder, BatchView, Header, NewRecord};

use super::*;

/// An owned header value, to generate and to compare.
#[derive(Debug, Clone, PartialEq)]
enum Owned {
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
    /// Bits, so NaNs compare by payload.
    F32(u32),
    F64(u64),
}

impl Owned {
    fn borrow(&self) -> HeaderValue<'_> {
        match self {
            Owned::Str(s) => HeaderValue::Str(s),
            Owned::Bytes(b) => HeaderValue::Bytes(b),
            Owned::Bool(v) => HeaderValue::Bool(*v),
            Owned::I8(v) => HeaderValue::I8(*v),
            Owned::I16(v) => HeaderValue::I16(*v),
            Owned::I32(v) => HeaderValue::I32(*v),
            Owned::I64(v) => HeaderValue::I64(*v),
            Owned::I128(v) => HeaderValue::I128(*v),
            Owned::U8(v) => HeaderValue::U8(*v),
            Owned::U16(v) => HeaderValue::U16(*v),
            Owned::U32(v) => HeaderValue::U32(*v),
            Owned::U64(v) => HeaderValue::U64(*v),
            Owned::U128(v) => HeaderValue::U128(*v),
            Owned::F32(bits) => HeaderValue::F32(f32::from_bits(*bits)),
            Owned::F64(bits) => HeaderValue::F64(f64::from_bits(*bits)),
        }
    }
}

/// Reads a header back from the API's JSON, as a client following docs/HTTP_API.md
/// would: the inverse of `HeaderJson::new`.
fn decode(h: &serde_json::Value) -> Result<(String, Owned), String> {
    let name = h["name"].as_str().ok_or("no name")?.to_owned();
    let v = &h["value"];
    let text = || v.as_str().ok_or_else(|| format!("{v} is not a string"));
    let int = || v.as_i64().ok_or_else(|| format!("{v} is not an integer"));
    let value = match h["type"].as_str().ok_or("no type")? {
        "str" => Owned::Str(text()?.to_owned()),
        "bytes" => Owned::Bytes(
            base64::engine::general_purpose::STANDARD
                .decode(text()?)
                .map_err(|e| e.to_string())?,
        ),
        "bool" => Owned::Bool(v.as_bool().ok_or("not a bool")?),
        "i8" => Owned::I8(int()?.try_into().map_err(|_| "i8 range")?),
        "i16" => Owned::I16(int()?.try_into().map_err(|_| "i16 range")?),
        "i32" => Owned::I32(int()?.try_into().map_err(|_| "i32 range")?),
        "u8" => Owned::U8(int()?.try_into().map_err(|_| "u8 range")?),
        "u16" => Owned::U16(int()?.try_into().map_err(|_| "u16 range")?),
        "u32" => Owned::U32(int()?.try_into().map_err(|_| "u32 range")?),
        "i64" => Owned::I64(text()?.parse().map_err(|_| "i64")?),
        "i128" => Owned::I128(text()?.parse().map_err(|_| "i128")?),
        "u64" => Owned::U64(text()?.parse().map_err(|_| "u64")?),
        "u128" => Owned::U128(text()?.parse().map_err(|_| "u128")?),
        "f32" => Owned::F32(match v.as_str() {
            None => (v.as_f64().ok_or("not a number")? as f32).to_bits(),
            Some("NaN") => f32::NAN.to_bits(),
            Some("Infinity") => f32::INFINITY.to_bits(),
            Some("-Infinity") => f32::NEG_INFINITY.to_bits(),
            Some(t) => match t.strip_prefix("NaN:0x") {
                Some(hex) => u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?,
                None => return Err(format!("{t} is not a float word")),
            },
        }),
        "f64" => Owned::F64(match v.as_str() {
            None => v.as_f64().ok_or("not a number")?.to_bits(),
            Some("NaN") => f64::NAN.to_bits(),
            Some("Infinity") => f64::INFINITY.to_bits(),
            Some("-Infinity") => f64::NEG_INFINITY.to_bits(),
            Some(t) => match t.strip_prefix("NaN:0x") {
                Some(hex) => u64::from_str_radix(hex, 16).map_err(|e| e.to_string())?,
                None => return Err(format!("{t} is not a float word")),
            },
        }),
        other => return Err(format!("unknown type {other}")),
    };
    Ok((name, value))
}

fn any_value() -> impl Strategy<Value = Owned> {
    prop_oneof![
        ".{0,20}".prop_map(Owned::Str),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Owned::Bytes),
        any::<bool>().prop_map(Owned::Bool),
        any::<i8>().prop_map(Owned::I8),
        any::<i16>().prop_map(Owned::I16),
        any::<i32>().prop_map(Owned::I32),
        any::<i64>().prop_map(Owned::I64),
        any::<i128>().prop_map(Owned::I128),
        any::<u8>().prop_map(Owned::U8),
        any::<u16>().prop_map(Owned::U16),
        any::<u32>().prop_map(Owned::U32),
        any::<u64>().prop_map(Owned::U64),
        any::<u128>().prop_map(Owned::U128),
        // Every bit pattern: finite values, both zeros, infinities, NaNs of any payload.
        any::<u32>().prop_map(Owned::F32),
        any::<u64>().prop_map(Owned::F64),
        Just(Owned::F32(f32::NAN.to_bits())),
        Just(Owned::F64((-0.0f64).to_bits())),
    ]
}

/// Builds a one-record batch with `headers` and converts its record.
fn record_json(headers: &[(String, Owned)], key: Option<&[u8]>, value: &[u8]) -> String {
    let hs: Vec<Header<'_>> = headers
        .iter()
        .map(|(n, v)| Header::new(n, v.borrow()))
        .collect();
    let mut b = BatchBuilder::new();
    let mut record = NewRecord::value(value).headers(&hs);
    if let Some(key) = key {
        record = record.key(key);
    }
    b.push(record).unwrap();
    let bytes = b.finish().unwrap();
    let batch = BatchView::parse(&bytes).unwrap();
    let record = batch.records().next().unwrap();
    serde_json::to_string(&RecordJson::new(&record)).unwrap()
}

proptest! {
    #[test]
    fn headers_of_every_type_round_trip(
        headers in proptest::collection::vec(("[a-z]{1,8}", any_value()), 0..12)
    ) {
        let text = record_json(&headers, None, b"v");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let back: Vec<(String, Owned)> = json["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| decode(h).unwrap())
            .collect();
        prop_assert_eq!(back, headers);
    }
}

#[test]
fn floats_are_numbers_or_words() {
    // The value as written in the JSON text.
    let h = |v| {
        let text = serde_json::to_string(&HeaderJson::new("x", v)).unwrap();
        let (_, value) = text.split_once("\"value\":").unwrap();
        value.trim_end_matches('}').to_owned()
    };
    assert_eq!(h(HeaderValue::F32(0.1)), "0.1");
    assert_eq!(h(HeaderValue::F64(-0.0)), "-0.0");
    assert_eq!(h(HeaderValue::F32(f32::INFINITY)), "\"Infinity\"");
    assert_eq!(h(HeaderValue::F64(f64::NEG_INFINITY)), "\"-Infinity\"");
    assert_eq!(h(HeaderValue::F64(f64::NAN)), "\"NaN\"");
    assert_eq!(
        h(HeaderValue::F32(f32::from_bits(0x7fc0_0001))),
        "\"NaN:0x7fc00001\""
    );
    assert_eq!(h(HeaderValue::U64(u64::MAX)), "\"18446744073709551615\"");
    assert_eq!(h(HeaderValue::U32(u32::MAX)), "4294967295");
}

#[test]
fn keys_and_values_are_text_json_or_base64() {
    let json: serde_json::Value =
        serde_json::from_str(&record_json(&[], Some(b"k"), br#" {"total": 12.5} "#)).unwrap();
    assert_eq!(json["key"]["text"], "k");
    assert_eq!(json["key"]["bytes"], 1);
    assert_eq!(json["value"]["json"]["total"], 12.5);
    assert_eq!(json["value"]["truncated"], false);
    assert!(json["value"].get("base64").is_none());

    let json: serde_json::Value =
        serde_json::from_str(&record_json(&[], None, &[0xff, 0x00, 0x80])).unwrap();
    assert!(json["key"].is_null());
    assert_eq!(json["value"]["base64"], "/wCA");
    assert!(json["value"].get("text").is_none());

    let plain: serde_json::Value = serde_json::from_str(&record_json(&[], None, b"hello")).unwrap();
    assert_eq!(plain["value"]["text"], "hello");
    assert!(plain["value"].get("json").is_none(), "{plain}");
}

#[test]
fn long_values_are_cut_and_flagged() {
    // A multi-byte character straddles the cut: the text stops before it.
    let mut long = vec![b'a'; SHOWN_BYTES_MAX - 1];
    long.extend_from_slice("é".as_bytes());
    long.extend_from_slice(b"tail");
    let v = BytesJson::new(&long);
    assert!(v.truncated);
    assert_eq!(v.bytes, long.len());
    assert_eq!(v.text.as_ref().unwrap().len(), SHOWN_BYTES_MAX - 1);
    assert!(v.json.is_none());
    let binary = vec![0xffu8; SHOWN_BYTES_MAX + 10];
    let v = BytesJson::new(&binary);
    assert!(v.truncated);
    assert_eq!(v.shown, SHOWN_BYTES_MAX);
    // A cut JSON document is not offered as JSON.
    let mut doc = b"[".to_vec();
    doc.extend(std::iter::repeat_n(b'1', SHOWN_BYTES_MAX));
    doc.push(b']');
    assert!(BytesJson::new(&doc).json.is_none());
}

#[test]
fn times_format_and_parse() {
    assert_eq!(
        rfc3339_us(1_767_323_045_123_456).as_deref(),
        Some("2026-01-02T03:04:05.123456Z")
    );
    assert_eq!(rfc3339_us(i64::MAX), None);
    assert_eq!(
        parse_rfc3339_us("2026-01-02T05:04:05.123456+02:00"),
        Some(1_767_323_045_123_456)
    );
    assert_eq!(parse_rfc3339_us("yesterday"), None);
    assert_eq!(
        rfc3339_ms(0).as_deref(),
        Some("1970-01-01T00:00:00.000000Z")
    );
}
