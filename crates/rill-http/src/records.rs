//! Stored records as JSON (docs/HTTP_API.md §4, "messages"): keys and values as text
//! (with parsed JSON) or base64, cut at [`SHOWN_BYTES_MAX`]; headers as an ordered list
//! of `{name, type, value}` that keeps every type losslessly; and the RFC 3339 times of
//! the API.

use base64::Engine as _;
use rill_format::HeaderValue;
use serde::Serialize;
use serde_json::value::RawValue;

/// Bytes of one key or value shown at most; the rest is cut and flagged.
pub(crate) const SHOWN_BYTES_MAX: usize = 64 << 10;

/// One record.
#[derive(Debug, Serialize)]
pub(crate) struct RecordJson {
    pub(crate) offset: u64,
    pub(crate) timestamp: Option<String>,
    pub(crate) timestamp_us: i64,
    pub(crate) key: Option<BytesJson>,
    pub(crate) headers: Vec<HeaderJson>,
    pub(crate) value: BytesJson,
}

impl RecordJson {
    /// The record as the API shows it.
    pub(crate) fn new(record: &rill_format::Record<'_>) -> Self {
        RecordJson {
            offset: record.offset,
            timestamp: rfc3339_us(record.timestamp_us),
            timestamp_us: record.timestamp_us,
            key: record.key.map(BytesJson::new),
            headers: record
                .headers()
                .map(|h| HeaderJson::new(h.name, h.value))
                .collect(),
            value: BytesJson::new(record.value),
        }
    }

    /// Bytes of key and value this record shows (for the page's budget).
    pub(crate) fn shown_bytes(&self) -> usize {
        self.key.as_ref().map_or(0, |k| k.shown) + self.value.shown
    }
}

/// A key or a value: its full length, whether it was cut, and its shown bytes as text
/// (with `json` when the text is a whole JSON document) or as base64.
#[derive(Debug, Serialize)]
pub(crate) struct BytesJson {
    pub(crate) bytes: usize,
    pub(crate) truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) json: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) base64: Option<String>,
    #[serde(skip)]
    shown: usize,
}

impl BytesJson {
    pub(crate) fn new(raw: &[u8]) -> Self {
        let truncated = raw.len() > SHOWN_BYTES_MAX;
        let shown = &raw[..raw.len().min(SHOWN_BYTES_MAX)];
        let text = match std::str::from_utf8(shown) {
            Ok(text) => Some(text),
            // Cut inside a character: the text up to it.
            Err(e) if truncated && e.error_len().is_none() => {
                std::str::from_utf8(&shown[..e.valid_up_to()]).ok()
            }
            Err(_) => None,
        };
        match text {
            Some(text) => BytesJson {
                bytes: raw.len(),
                truncated,
                text: Some(text.to_owned()),
                // A cut document is not JSON any more.
                json: (!truncated)
                    .then(|| serde_json::from_str::<Box<RawValue>>(text).ok())
                    .flatten(),
                base64: None,
                shown: text.len(),
            },
            None => BytesJson {
                bytes: raw.len(),
                truncated,
                text: None,
                json: None,
                base64: Some(base64::engine::general_purpose::STANDARD.encode(shown)),
                shown: shown.len(),
            },
        }
    }
}

/// One header: its name, its type's name and its value (docs/HTTP_API.md's table).
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct HeaderJson {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) value: HeaderValueJson,
}

/// A header value in JSON: a string, a boolean or a number of the kind that holds it
/// exactly.
#[derive(Debug, Serialize, PartialEq)]
#[serde(untagged)]
pub(crate) enum HeaderValueJson {
    Text(String),
    Bool(bool),
    Int(i64),
    F32(f32),
    F64(f64),
}

impl HeaderJson {
    pub(crate) fn new(name: &str, value: HeaderValue<'_>) -> Self {
        use HeaderValueJson as J;
        let (kind, value) = match value {
            HeaderValue::Str(s) => ("str", J::Text(s.to_owned())),
            HeaderValue::Bytes(b) => (
                "bytes",
                J::Text(base64::engine::general_purpose::STANDARD.encode(b)),
            ),
            HeaderValue::Bool(v) => ("bool", J::Bool(v)),
            HeaderValue::I8(v) => ("i8", J::Int(v.into())),
            HeaderValue::I16(v) => ("i16", J::Int(v.into())),
            HeaderValue::I32(v) => ("i32", J::Int(v.into())),
            HeaderValue::U8(v) => ("u8", J::Int(v.into())),
            HeaderValue::U16(v) => ("u16", J::Int(v.into())),
            HeaderValue::U32(v) => ("u32", J::Int(v.into())),
            // Past 2^53 a JSON number is not exact in most readers: a decimal string.
            HeaderValue::I64(v) => ("i64", J::Text(v.to_string())),
            HeaderValue::I128(v) => ("i128", J::Text(v.to_string())),
            HeaderValue::U64(v) => ("u64", J::Text(v.to_string())),
            HeaderValue::U128(v) => ("u128", J::Text(v.to_string())),
            HeaderValue::F32(v) if v.is_finite() => ("f32", J::F32(v)),
            HeaderValue::F32(v) => (
                "f32",
                J::Text(non_finite(v.is_nan(), v.is_sign_negative(), || {
                    (v.to_bits() != f32::NAN.to_bits()).then(|| format!("{:#x}", v.to_bits()))
                })),
            ),
            HeaderValue::F64(v) if v.is_finite() => ("f64", J::F64(v)),
            HeaderValue::F64(v) => (
                "f64",
                J::Text(non_finite(v.is_nan(), v.is_sign_negative(), || {
                    (v.to_bits() != f64::NAN.to_bits()).then(|| format!("{:#x}", v.to_bits()))
                })),
            ),
        };
        HeaderJson {
            name: name.to_owned(),
            kind,
            value,
        }
    }
}

/// `Infinity`, `-Infinity`, `NaN`, or `NaN:0x…` with the bits of a NaN that is not the
/// canonical quiet one (`bits` says which).
fn non_finite(nan: bool, negative: bool, bits: impl FnOnce() -> Option<String>) -> String {
    match (nan, negative) {
        (true, _) => match bits() {
            None => "NaN".to_owned(),
            Some(bits) => format!("NaN:{bits}"),
        },
        (false, false) => "Infinity".to_owned(),
        (false, true) => "-Infinity".to_owned(),
    }
}

const RFC3339_US: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
);

/// Microseconds since the Unix epoch as RFC 3339 in UTC; `None` past year 9999.
pub(crate) fn rfc3339_us(us: i64) -> Option<String> {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).ok()?;
    t.format(RFC3339_US).ok()
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC.
pub(crate) fn rfc3339_ms(ms: i64) -> Option<String> {
    rfc3339_us(ms.saturating_mul(1000))
}

/// An RFC 3339 time (any offset) as microseconds since the Unix epoch.
pub(crate) fn parse_rfc3339_us(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1000).ok()
}

#[cfg(test)]
mod tests;
