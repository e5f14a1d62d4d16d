//! Records as JSON lines: what `rill consume --format json` prints and what
//! `rill produce --format json` reads (docs/CLI.md, "Consume" and "Produce").
//!
//! A record prints as
//! `{"partition":0,"offset":12,"timestamp_us":…,"key":"…","headers":{…},"header_list":[…],"value":"…"}`.
//! `headers`, an object, is the form scripts have read since the first release: a
//! repeated name keeps only its last value there and types are partly lost (bytes look
//! like strings, 64-bit integers lose precision in most JSON readers). `header_list`
//! beside it holds every header in order with its type, lossless: 64- and 128-bit
//! integers as decimal strings, bytes as base64, non-finite floats as `"NaN"`, `"inf"`
//! and `"-inf"`. Reading, `header_list` wins; without it `headers` is taken with its
//! types guessed from the JSON (strings, booleans, integers as `i64` or `u64`, other
//! numbers as `f64`).

use anyhow::{Context as _, bail};
use base64::Engine as _;
use bytes::Bytes;
use rill_client::{Message, Record, Value};
use serde_json::{Map, Value as Json, json};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The JSON object of a record (one line of `consume --format json`).
pub(crate) fn to_json(record: &Record) -> Json {
    let mut object = Map::new();
    object.insert("partition".into(), json!(record.partition));
    object.insert("offset".into(), json!(record.offset));
    object.insert("timestamp_us".into(), json!(record.timestamp_us));
    match &record.key {
        None => {
            object.insert("key".into(), Json::Null);
        }
        Some(k) => match std::str::from_utf8(k) {
            Ok(s) => {
                object.insert("key".into(), json!(s));
            }
            Err(_) => {
                object.insert("key_b64".into(), json!(B64.encode(k)));
            }
        },
    }
    let headers: Map<String, Json> = record
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), object_form(value)))
        .collect();
    object.insert("headers".into(), Json::Object(headers));
    let list: Vec<Json> = record
        .headers
        .iter()
        .map(|(name, value)| {
            let (kind, value) = typed_form(value);
            json!({ "name": name, "type": kind, "value": value })
        })
        .collect();
    object.insert("header_list".into(), Json::Array(list));
    match std::str::from_utf8(&record.value) {
        Ok(s) => object.insert("value".into(), json!(s)),
        Err(_) => object.insert("value_b64".into(), json!(B64.encode(&record.value))),
    };
    Json::Object(object)
}

/// A header value as the `headers` object has always shown it.
fn object_form(value: &Value) -> Json {
    match value {
        Value::Str(s) => json!(s),
        Value::Bytes(b) => json!(B64.encode(b)),
        Value::Bool(b) => json!(b),
        Value::I8(n) => json!(n),
        Value::I16(n) => json!(n),
        Value::I32(n) => json!(n),
        Value::I64(n) => json!(n),
        Value::I128(n) => json!(n.to_string()),
        Value::U8(n) => json!(n),
        Value::U16(n) => json!(n),
        Value::U32(n) => json!(n),
        Value::U64(n) => json!(n),
        Value::U128(n) => json!(n.to_string()),
        Value::F32(n) => json!(n),
        Value::F64(n) => json!(n),
    }
}

/// A header value's type name and lossless JSON form, for `header_list`.
fn typed_form(value: &Value) -> (&'static str, Json) {
    match value {
        Value::Str(s) => ("str", json!(s)),
        Value::Bytes(b) => ("bytes", json!(B64.encode(b))),
        Value::Bool(b) => ("bool", json!(b)),
        Value::I8(n) => ("i8", json!(n)),
        Value::I16(n) => ("i16", json!(n)),
        Value::I32(n) => ("i32", json!(n)),
        Value::I64(n) => ("i64", json!(n.to_string())),
        Value::I128(n) => ("i128", json!(n.to_string())),
        Value::U8(n) => ("u8", json!(n)),
        Value::U16(n) => ("u16", json!(n)),
        Value::U32(n) => ("u32", json!(n)),
        Value::U64(n) => ("u64", json!(n.to_string())),
        Value::U128(n) => ("u128", json!(n.to_string())),
        // An f32 widens to f64 exactly, so narrowing it back gives the same f32.
        Value::F32(n) => ("f32", float(f64::from(*n))),
        Value::F64(n) => ("f64", float(*n)),
    }
}

/// A float as a JSON number, or as a string where JSON has no number for it.
fn float(n: f64) -> Json {
    match serde_json::Number::from_f64(n) {
        Some(number) => Json::Number(number),
        None if n.is_nan() => json!("NaN"),
        None if n > 0.0 => json!("inf"),
        None => json!("-inf"),
    }
}

/// A record to produce from one JSON line: `key` (a string or null) or `key_b64`,
/// `value` or `value_b64`, and `header_list` or else `headers`. Other fields (the
/// partition, offset and timestamp that `consume` prints) are ignored: the target
/// topic gives its own.
pub(crate) fn from_json(line: &[u8]) -> anyhow::Result<Message> {
    let json: Json = serde_json::from_slice(line).context("not JSON")?;
    let Json::Object(object) = json else {
        bail!("expected a JSON object");
    };
    let bytes_of = |text_field: &str, b64_field: &str| -> anyhow::Result<Option<Bytes>> {
        match (object.get(text_field), object.get(b64_field)) {
            (Some(Json::String(_)), Some(_)) => {
                bail!("both {text_field:?} and {b64_field:?}: give one")
            }
            (Some(Json::String(s)), None) => Ok(Some(Bytes::from(s.clone()))),
            (Some(Json::Null) | None, Some(Json::String(b))) => B64
                .decode(b)
                .map(|b| Some(Bytes::from(b)))
                .with_context(|| format!("{b64_field:?} is not base64")),
            (Some(Json::Null) | None, Some(_)) => bail!("{b64_field:?} must be a string"),
            (Some(Json::Null) | None, None) => Ok(None),
            (Some(_), _) => bail!("{text_field:?} must be a string or null"),
        }
    };
    let value = bytes_of("value", "value_b64")?.context("no \"value\" (or \"value_b64\") field")?;
    let mut message = Message::new(value);
    if let Some(key) = bytes_of("key", "key_b64")? {
        message = message.with_key(key);
    }
    match (object.get("header_list"), object.get("headers")) {
        (Some(Json::Array(list)), _) => {
            for (i, item) in list.iter().enumerate() {
                let (name, value) =
                    typed_header(item).with_context(|| format!("header_list[{i}]"))?;
                message.headers.push((name, value));
            }
        }
        (Some(Json::Null) | None, Some(Json::Object(headers))) => {
            for (name, value) in headers {
                let value = guessed_header(value).with_context(|| format!("header {name:?}"))?;
                message.headers.push((name.clone(), value));
            }
        }
        (Some(Json::Null) | None, Some(Json::Null) | None) => {}
        (Some(Json::Null) | None, Some(_)) => bail!("\"headers\" must be an object"),
        (Some(_), _) => bail!("\"header_list\" must be an array"),
    }
    Ok(message)
}

/// One `{"name":…,"type":…,"value":…}` of `header_list`.
fn typed_header(item: &Json) -> anyhow::Result<(String, Value)> {
    let name = item
        .get("name")
        .and_then(Json::as_str)
        .context("no \"name\" string")?
        .to_owned();
    let kind = item
        .get("type")
        .and_then(Json::as_str)
        .context("no \"type\" string")?;
    let value = item.get("value").context("no \"value\"")?;
    let value = typed_value(kind, value).with_context(|| format!("a {kind} header {name:?}"))?;
    Ok((name, value))
}

fn typed_value(kind: &str, value: &Json) -> anyhow::Result<Value> {
    Ok(match kind {
        "str" => Value::Str(value.as_str().context("expected a string")?.to_owned()),
        "bytes" => {
            let text = value.as_str().context("expected a base64 string")?;
            Value::Bytes(B64.decode(text).context("not base64")?.into())
        }
        "bool" => Value::Bool(value.as_bool().context("expected true or false")?),
        "i8" => Value::I8(integer(value)?),
        "i16" => Value::I16(integer(value)?),
        "i32" => Value::I32(integer(value)?),
        "i64" => Value::I64(integer(value)?),
        "i128" => Value::I128(integer(value)?),
        "u8" => Value::U8(integer(value)?),
        "u16" => Value::U16(integer(value)?),
        "u32" => Value::U32(integer(value)?),
        "u64" => Value::U64(integer(value)?),
        "u128" => Value::U128(integer(value)?),
        // Narrowing is exact for what `consume` printed (an f32 widened to f64).
        "f32" => Value::F32(number(value)? as f32),
        "f64" => Value::F64(number(value)?),
        other => bail!(
            "unknown type {other:?} (expected str, bytes, bool, i8, i16, i32, i64, i128, u8, u16, u32, u64, u128, f32 or f64)"
        ),
    })
}

/// An integer given as a JSON number or a decimal string, in range for `T`.
fn integer<T: std::str::FromStr>(value: &Json) -> anyhow::Result<T> {
    let text = match value {
        Json::String(s) => s.clone(),
        Json::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        _ => bail!("expected an integer (a number or a decimal string)"),
    };
    text.parse()
        .map_err(|_| anyhow::anyhow!("{text} is not an integer in the type's range"))
}

/// A float given as a JSON number, or as `"NaN"`, `"inf"`, `"-inf"` or a decimal string.
fn number(value: &Json) -> anyhow::Result<f64> {
    match value {
        Json::Number(n) => n.as_f64().context("not a number"),
        Json::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            other => other
                .parse()
                .map_err(|_| anyhow::anyhow!("{other:?} is not a number")),
        },
        _ => bail!("expected a number"),
    }
}

/// A header of the `headers` object, its type guessed from the JSON.
fn guessed_header(value: &Json) -> anyhow::Result<Value> {
    Ok(match value {
        Json::String(s) => Value::Str(s.clone()),
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::I64(i)
            } else if let Some(u) = n.as_u64() {
                Value::U64(u)
            } else {
                Value::F64(n.as_f64().context("not a number")?)
            }
        }
        _ => bail!("expected a string, a boolean or a number"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(key: Option<Bytes>, headers: Vec<(String, Value)>, value: Bytes) -> Record {
        Record {
            partition: 1,
            offset: 7,
            timestamp_us: 1_767_225_600_000_000,
            key,
            headers,
            value,
        }
    }

    /// What `produce --format json` makes of what `consume --format json` printed.
    fn round_trip(r: &Record) -> Message {
        let line = serde_json::to_vec(&to_json(r)).unwrap();
        from_json(&line).unwrap()
    }

    #[test]
    fn the_object_form_keeps_its_shape_and_the_list_holds_every_header_typed() {
        let r = record(
            Some(Bytes::from_static(b"order-17")),
            vec![
                ("source".into(), Value::Str("cli".into())),
                ("n".into(), Value::U64(u64::MAX)),
                ("n".into(), Value::I128(-1)),
                ("raw".into(), Value::Bytes(Bytes::from_static(&[0, 255]))),
                ("nan".into(), Value::F64(f64::NAN)),
            ],
            Bytes::from_static(b"placed"),
        );
        let shown = to_json(&r).to_string();
        assert!(
            shown.starts_with(
                r#"{"partition":1,"offset":7,"timestamp_us":1767225600000000,"key":"order-17","headers":{"source":"cli","n":"-1","raw":"AP8=","nan":null},"header_list":[{"name":"source","type":"str","value":"cli"},{"name":"n","type":"u64","value":"18446744073709551615"}"#
            ),
            "{shown}"
        );
        assert!(shown.ends_with(r#""value":"placed"}"#), "{shown}");
        let back = round_trip(&r);
        assert_eq!(back.key, r.key);
        assert_eq!(back.value, r.value);
        assert_eq!(back.headers.len(), 5);
        assert_eq!(back.headers[..4], r.headers[..4]);
        assert!(matches!(back.headers[4].1, Value::F64(n) if n.is_nan()));
    }

    #[test]
    fn binary_keys_and_values_go_as_base64() {
        let r = record(
            Some(Bytes::from_static(&[0xff, 0])),
            vec![],
            Bytes::from_static(&[0xc3]),
        );
        let shown = to_json(&r);
        assert_eq!(shown["key_b64"], "/wA=");
        assert_eq!(shown["value_b64"], "ww==");
        assert!(shown.get("key").is_none() && shown.get("value").is_none());
        let back = round_trip(&r);
        assert_eq!((back.key, back.value), (r.key, r.value));
    }

    #[test]
    fn the_object_form_is_read_with_guessed_types() {
        let m = from_json(br#"{"key":null,"headers":{"a":"x","b":true,"c":-3,"d":18446744073709551615,"e":1.5},"value":"v"}"#).unwrap();
        assert_eq!(m.key, None);
        assert_eq!(
            m.headers,
            vec![
                ("a".into(), Value::Str("x".into())),
                ("b".into(), Value::Bool(true)),
                ("c".into(), Value::I64(-3)),
                ("d".into(), Value::U64(u64::MAX)),
                ("e".into(), Value::F64(1.5)),
            ]
        );
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        for (line, says) in [
            (&b"not json"[..], "not JSON"),
            (b"[1]", "JSON object"),
            (br#"{"key":"k"}"#, "no \"value\""),
            (br#"{"value":"v","value_b64":"dg=="}"#, "both"),
            (br#"{"value_b64":"***"}"#, "base64"),
            (br#"{"value":1}"#, "string or null"),
            (
                br#"{"value":"v","header_list":[{"name":"n","type":"u8","value":300}]}"#,
                "range",
            ),
            (
                br#"{"value":"v","header_list":[{"name":"n","type":"u9","value":3}]}"#,
                "unknown type",
            ),
            (br#"{"value":"v","header_list":{}}"#, "must be an array"),
            (br#"{"value":"v","headers":{"a":[1]}}"#, "header \"a\""),
        ] {
            let e = format!("{:#}", from_json(line).unwrap_err());
            assert!(e.contains(says), "{}: {e}", String::from_utf8_lossy(line));
        }
    }

    fn any_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<String>().prop_map(Value::Str),
            any::<Vec<u8>>().prop_map(|b| Value::Bytes(b.into())),
            any::<bool>().prop_map(Value::Bool),
            any::<i8>().prop_map(Value::I8),
            any::<i16>().prop_map(Value::I16),
            any::<i32>().prop_map(Value::I32),
            any::<i64>().prop_map(Value::I64),
            any::<i128>().prop_map(Value::I128),
            any::<u8>().prop_map(Value::U8),
            any::<u16>().prop_map(Value::U16),
            any::<u32>().prop_map(Value::U32),
            any::<u64>().prop_map(Value::U64),
            any::<u128>().prop_map(Value::U128),
            any::<f32>().prop_map(Value::F32),
            any::<f64>().prop_map(Value::F64),
        ]
    }

    /// Equal, with NaN equal to NaN (of the same type).
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::F32(x), Value::F32(y)) => {
                x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan()
            }
            (Value::F64(x), Value::F64(y)) => {
                x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan()
            }
            _ => a == b,
        }
    }

    proptest! {
        #[test]
        fn every_record_survives_consume_json_then_produce_json(
            key in proptest::option::of(any::<Vec<u8>>()),
            value in any::<Vec<u8>>(),
            headers in proptest::collection::vec(("[a-z]{0,3}", any_value()), 0..6),
        ) {
            let r = record(key.map(Bytes::from), headers, Bytes::from(value));
            let back = round_trip(&r);
            prop_assert_eq!(&back.key, &r.key);
            prop_assert_eq!(&back.value, &r.value);
            prop_assert_eq!(back.headers.len(), r.headers.len());
            for ((n1, v1), (n2, v2)) in back.headers.iter().zip(&r.headers) {
                prop_assert_eq!(n1, n2);
                prop_assert!(same(v1, v2), "{:?} != {:?}", v1, v2);
            }
        }
    }
}
