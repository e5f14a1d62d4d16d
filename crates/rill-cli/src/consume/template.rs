//! `consume --format template --template 'STRING'`: a line per record made from a
//! template with placeholders (docs/CLI.md lists them). A template is checked whole
//! before anything is read, so an unknown placeholder is a usage error, not a line of
//! output with a hole in it.

use base64::Engine as _;
use rill_client::{Record, Value};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The placeholders, as the usage error lists them.
const KNOWN: &str = "{partition}, {offset}, {timestamp}, {timestamp_us}, {key}, {key_hex}, {key_b64}, {value}, {value_hex}, {value_b64}, {header.NAME}";

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template(Vec<Piece>);

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(Vec<u8>),
    Partition,
    Offset,
    /// RFC 3339 with microseconds, UTC.
    Timestamp,
    TimestampUs,
    Key,
    KeyHex,
    KeyB64,
    Value,
    ValueHex,
    ValueB64,
    /// The first header of that name, as text.
    Header(String),
}

impl Template {
    /// Parses a template: placeholders in braces, `{{` and `}}` for braces, and `\n`,
    /// `\t`, `\\` for a line break, a tab and a backslash.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push(b'{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push(b'}');
                }
                '}' => return Err("a lone `}` in the template (write `}}` for a brace)".into()),
                '\\' => match chars.next() {
                    Some('n') => literal.push(b'\n'),
                    Some('t') => literal.push(b'\t'),
                    Some('\\') => literal.push(b'\\'),
                    _ => return Err("unknown escape in the template: use \\n, \\t or \\\\".into()),
                },
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => {
                                return Err(format!(
                                    "the placeholder {{{name} is not closed with `}}`"
                                ));
                            }
                        }
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(placeholder(&name)?);
                }
                c => {
                    let mut buf = [0; 4];
                    literal.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Self(pieces))
    }

    /// Appends the record's line (without its line break) to `out`.
    pub(crate) fn render(&self, record: &Record, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let key: &[u8] = record.key.as_deref().unwrap_or_default();
        for piece in &self.0 {
            // Writing to a Vec cannot fail.
            let _ = match piece {
                Piece::Text(t) => out.write_all(t),
                Piece::Partition => write!(out, "{}", record.partition),
                Piece::Offset => write!(out, "{}", record.offset),
                Piece::Timestamp => write_time(out, record.timestamp_us),
                Piece::TimestampUs => write!(out, "{}", record.timestamp_us),
                Piece::Key => out.write_all(key),
                Piece::KeyHex => out.write_all(hex(key).as_bytes()),
                Piece::KeyB64 => out.write_all(B64.encode(key).as_bytes()),
                Piece::Value => out.write_all(&record.value),
                Piece::ValueHex => out.write_all(hex(&record.value).as_bytes()),
                Piece::ValueB64 => out.write_all(B64.encode(&record.value).as_bytes()),
                Piece::Header(name) => match record.header(name) {
                    Some(value) => write_header(out, value),
                    None => Ok(()),
                },
            };
        }
    }
}

fn placeholder(name: &str) -> Result<Piece, String> {
    Ok(match name {
        "partition" => Piece::Partition,
        "offset" => Piece::Offset,
        "timestamp" => Piece::Timestamp,
        "timestamp_us" => Piece::TimestampUs,
        "key" => Piece::Key,
        "key_hex" => Piece::KeyHex,
        "key_b64" => Piece::KeyB64,
        "value" => Piece::Value,
        "value_hex" => Piece::ValueHex,
        "value_b64" => Piece::ValueB64,
        _ => match name.strip_prefix("header.") {
            Some(header) if !header.is_empty() => Piece::Header(header.to_owned()),
            _ => {
                return Err(format!(
                    "unknown placeholder {{{name}}} in the template (known: {KNOWN})"
                ));
            }
        },
    })
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The latest time RFC 3339 can show (year 9999), in µs since the epoch.
const RFC3339_US_MAX: i64 = 253_402_300_799_999_999;

/// A timestamp as RFC 3339 (UTC, µs); one outside years 1970-9999 as its µs.
fn write_time(out: &mut Vec<u8>, us: i64) -> std::io::Result<()> {
    use std::io::Write as _;
    match u64::try_from(us) {
        Ok(positive) if us <= RFC3339_US_MAX => {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(positive);
            write!(out, "{}", humantime::format_rfc3339_micros(at))
        }
        _ => write!(out, "{us}"),
    }
}

/// A header value as text: strings and bytes as they are, numbers in decimal.
fn write_header(out: &mut Vec<u8>, value: &Value) -> std::io::Result<()> {
    use std::io::Write as _;
    match value {
        Value::Str(s) => out.write_all(s.as_bytes()),
        Value::Bytes(b) => out.write_all(b),
        Value::Bool(b) => write!(out, "{b}"),
        Value::I8(n) => write!(out, "{n}"),
        Value::I16(n) => write!(out, "{n}"),
        Value::I32(n) => write!(out, "{n}"),
        Value::I64(n) => write!(out, "{n}"),
        Value::I128(n) => write!(out, "{n}"),
        Value::U8(n) => write!(out, "{n}"),
        Value::U16(n) => write!(out, "{n}"),
        Value::U32(n) => write!(out, "{n}"),
        Value::U64(n) => write!(out, "{n}"),
        Value::U128(n) => write!(out, "{n}"),
        Value::F32(n) => write!(out, "{n}"),
        Value::F64(n) => write!(out, "{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record() -> Record {
        Record {
            partition: 2,
            offset: 41,
            timestamp_us: 1_767_225_600_123_456,
            key: Some(Bytes::from_static(b"k\x01")),
            headers: vec![
                ("source".into(), Value::Str("cli".into())),
                ("n".into(), Value::U64(7)),
            ],
            value: Bytes::from_static(b"hi"),
        }
    }

    fn render(template: &str) -> String {
        let mut out = Vec::new();
        Template::parse(template)
            .unwrap()
            .render(&record(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn placeholders_escapes_and_braces() {
        assert_eq!(
            render("{partition}/{offset} {timestamp} {timestamp_us}"),
            "2/41 2026-01-01T00:00:00.123456Z 1767225600123456"
        );
        assert_eq!(
            render("{key_hex} {key_b64} {value_hex} {value_b64}"),
            "6b01 awE= 6869 aGk="
        );
        assert_eq!(
            render("{header.source}={header.n}{header.none}|{value}"),
            "cli=7|hi"
        );
        assert_eq!(render("{{{value}}}\\t\\n\\\\"), "{hi}\t\n\\");
    }

    #[test]
    fn unknown_or_unclosed_placeholders_are_refused() {
        for (bad, says) in [
            ("{values}", "unknown placeholder {values}"),
            ("{header.}", "unknown placeholder"),
            ("{value", "not closed"),
            ("x}", "lone"),
            ("\\q", "unknown escape"),
        ] {
            let e = Template::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn times_outside_rfc3339_print_as_microseconds() {
        let mut out = Vec::new();
        write_time(&mut out, -5).unwrap();
        write_time(&mut out, i64::MAX).unwrap();
        assert_eq!(out, format!("-5{}", i64::MAX).as_bytes());
    }
}
