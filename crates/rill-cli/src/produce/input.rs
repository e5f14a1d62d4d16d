//! Records from standard input, read on a thread of their own as they arrive.
//!
//! The thread cuts the input into records at a delimiter (a line break by default),
//! makes each a [`Message`] and hands them over in chunks through a bounded channel.
//! A chunk goes as soon as the input has nothing more buffered, so a record written
//! to a pipe that then stays open (`tail -f app.log | rill produce …`) is sent at once
//! instead of when the input ends; while input keeps coming, chunks fill up and the
//! producer batches them.
//!
//! Bounds: a record holds at most [`RECORD_BYTES_MAX`] bytes (a longer one is an error
//! naming it), a chunk at most [`CHUNK_RECORDS_MAX`] records or about
//! [`CHUNK_BYTES_MAX`] bytes, and [`CHUNKS_BUFFERED_MAX`] chunks wait in the channel.

use std::io::{BufRead, BufReader, Read};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use rill_client::Message;
use tokio::sync::mpsc;

/// The largest record read (a line, a delimited record or a JSON line): the server's
/// default frame limit, beyond which nothing could be sent anyway.
pub(crate) const RECORD_BYTES_MAX: usize = 64 << 20;
/// Records per chunk at most.
const CHUNK_RECORDS_MAX: usize = 1024;
/// A chunk is handed over once it holds this many bytes.
const CHUNK_BYTES_MAX: usize = 1 << 20;
/// Chunks read ahead of the producer at most.
const CHUNKS_BUFFERED_MAX: usize = 4;
/// Bytes of standard input read at a time.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// How the input is cut into records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One record per line; a `\r` before the `\n` is dropped.
    Lines,
    /// Records end at these bytes, taken as they are.
    Delimited(Vec<u8>),
    /// One JSON object per line (blank lines are skipped).
    Json,
}

/// How a record's bytes become a message: key and headers from the flags.
#[derive(Debug, Clone)]
pub(crate) struct Maker {
    pub(crate) framing: Framing,
    /// `--key`: every record's key.
    pub(crate) key: Option<Bytes>,
    /// `--key-sep`: each record's key is what comes before the first SEP.
    pub(crate) key_sep: Option<Vec<u8>>,
    /// `--header`, added to every record.
    pub(crate) headers: Vec<(String, String)>,
}

impl Maker {
    /// The message of one record, or `None` for a record that is skipped (a blank line
    /// of JSON input).
    pub(crate) fn make(&self, record: Vec<u8>) -> anyhow::Result<Option<Message>> {
        let mut message = match self.framing {
            Framing::Json if record.iter().all(u8::is_ascii_whitespace) => return Ok(None),
            Framing::Json => crate::record_json::from_json(&record)?,
            Framing::Lines | Framing::Delimited(_) => match &self.key_sep {
                Some(sep) => match find(&record, sep) {
                    Some(0) => bail!(
                        "the key before the separator is empty (a key must not be empty; leave the separator out for no key)"
                    ),
                    Some(at) => {
                        let value = record[at + sep.len()..].to_vec();
                        let mut key = record;
                        key.truncate(at);
                        Message::new(value).with_key(key)
                    }
                    None => Message::new(record),
                },
                None => Message::new(record),
            },
        };
        if let Some(key) = &self.key {
            message.key = Some(key.clone());
        }
        for (name, value) in &self.headers {
            message = message.with_header(name.clone(), value.as_str());
        }
        Ok(Some(message))
    }

    /// What a record is called in messages: lines are numbered as lines.
    pub(crate) fn unit(&self) -> &'static str {
        match self.framing {
            Framing::Lines | Framing::Json => "line",
            Framing::Delimited(_) => "record",
        }
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Messages read, each with its number in the input (from 1), and the bytes of input
/// they took.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) messages: Vec<(u64, Message)>,
    pub(crate) input_bytes: u64,
}

/// Starts reading standard input on a thread of its own. The channel ends after the
/// last record, or after an error (the input's, or a record's, naming it by number).
pub(crate) fn spawn(maker: Maker) -> mpsc::Receiver<anyhow::Result<Chunk>> {
    let (tx, rx) = mpsc::channel(CHUNKS_BUFFERED_MAX);
    // A plain thread, not the runtime's blocking pool: a read of an idle pipe blocks for
    // as long as the pipe stays open, and the runtime must not wait for it at exit.
    std::thread::spawn(move || {
        let input = BufReader::with_capacity(READ_BUFFER_BYTES, std::io::stdin());
        read(input, &maker, |chunk| tx.blocking_send(chunk).is_ok());
    });
    rx
}

/// Reads records from `input` and hands `deliver` chunks of messages (and at most one
/// error, last); stops early when `deliver` returns false (the producer is gone).
fn read<R: Read>(
    mut input: BufReader<R>,
    maker: &Maker,
    mut deliver: impl FnMut(anyhow::Result<Chunk>) -> bool,
) {
    let delimiter: &[u8] = match &maker.framing {
        Framing::Lines | Framing::Json => b"\n",
        Framing::Delimited(d) => d,
    };
    let mut chunk = Chunk {
        messages: Vec::new(),
        input_bytes: 0,
    };
    let mut chunk_bytes = 0usize;
    let mut number = 0u64;
    loop {
        let mut record = Vec::new();
        let read = next_record(&mut input, delimiter, &mut record);
        number += 1;
        let outcome = match read {
            Ok(Some(taken)) => {
                chunk.input_bytes += taken;
                if maker.framing == Framing::Lines && record.last() == Some(&b'\r') {
                    record.pop();
                }
                let len = record.len();
                match maker.make(record) {
                    Ok(Some(message)) => {
                        chunk.messages.push((number, message));
                        chunk_bytes += len;
                        Ok(true)
                    }
                    Ok(None) => Ok(true),
                    Err(e) => Err(e.context(format!("{} {number}", maker.unit()))),
                }
            }
            Ok(None) => Ok(false),
            Err(e) => Err(e.context(format!("reading {} {number}", maker.unit()))),
        };
        let more = match outcome {
            Ok(more) => more,
            Err(e) => {
                // What came before the bad record is sent; then the error ends it.
                let full = std::mem::replace(
                    &mut chunk,
                    Chunk {
                        messages: Vec::new(),
                        input_bytes: 0,
                    },
                );
                if deliver(Ok(full)) {
                    deliver(Err(e));
                }
                return;
            }
        };
        // Hand over a full chunk, and any chunk when the input has nothing buffered:
        // the next read may wait for a long time.
        let due = !more
            || chunk.messages.len() >= CHUNK_RECORDS_MAX
            || chunk_bytes >= CHUNK_BYTES_MAX
            || input.buffer().is_empty();
        if due && (chunk.input_bytes > 0 || !chunk.messages.is_empty()) {
            let full = std::mem::replace(
                &mut chunk,
                Chunk {
                    messages: Vec::new(),
                    input_bytes: 0,
                },
            );
            chunk_bytes = 0;
            if !deliver(Ok(full)) {
                return;
            }
        }
        if !more {
            return;
        }
    }
}

/// Reads the next record into `record` (without its delimiter): the bytes of input it
/// took, or `None` at the end of the input. The last record may lack its delimiter.
fn next_record<R: Read>(
    input: &mut BufReader<R>,
    delimiter: &[u8],
    record: &mut Vec<u8>,
) -> anyhow::Result<Option<u64>> {
    let Some(&last) = delimiter.last() else {
        bail!("the delimiter is empty");
    };
    let too_long = || {
        anyhow::anyhow!(
            "a record is longer than {} MiB (the most a record may hold)",
            RECORD_BYTES_MAX >> 20
        )
    };
    let limit = RECORD_BYTES_MAX + delimiter.len();
    loop {
        // One byte more than a record and its delimiter may hold, to tell a record that
        // is too long without reading more of it.
        let room = (limit + 1).saturating_sub(record.len()) as u64;
        let n = input
            .by_ref()
            .take(room)
            .read_until(last, record)
            .context("cannot read standard input")?;
        if n == 0 {
            if record.is_empty() {
                return Ok(None);
            }
            if record.len() > RECORD_BYTES_MAX {
                return Err(too_long());
            }
            return Ok(Some(record.len() as u64));
        }
        if record.ends_with(delimiter) {
            let taken = record.len() as u64;
            record.truncate(record.len() - delimiter.len());
            if record.len() > RECORD_BYTES_MAX {
                return Err(too_long());
            }
            return Ok(Some(taken));
        }
        if record.len() > limit {
            return Err(too_long());
        }
    }
}

/// The bytes of `--delimiter` (a newtype: clap would take a `Vec<u8>` for many values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delimiter(pub(crate) Vec<u8>);

/// Parses `--delimiter`: text, with `\n`, `\r`, `\t`, `\0`, `\\` and `\xHH` for any
/// byte.
pub(crate) fn parse_delimiter(text: &str) -> Result<Delimiter, String> {
    let mut out = Vec::new();
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next() {
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(b't') => out.push(b'\t'),
            Some(b'0') => out.push(0),
            Some(b'\\') => out.push(b'\\'),
            Some(b'x') => {
                let hex: Vec<u8> = bytes.by_ref().take(2).collect();
                let byte = std::str::from_utf8(&hex)
                    .ok()
                    .filter(|h| h.len() == 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("\\x takes two hex digits, as in \\x1e")?;
                out.push(byte);
            }
            _ => return Err("unknown escape: use \\n, \\r, \\t, \\0, \\\\ or \\xHH".into()),
        }
    }
    if out.is_empty() {
        return Err("the delimiter must not be empty".into());
    }
    Ok(Delimiter(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maker(framing: Framing) -> Maker {
        Maker {
            framing,
            key: None,
            key_sep: None,
            headers: Vec::new(),
        }
    }

    /// Reads `input` whole; the values read, or the error's text.
    fn values(input: &[u8], maker: &Maker) -> Result<Vec<Vec<u8>>, String> {
        let mut out = Vec::new();
        let mut error = None;
        // A tiny buffer cuts records across reads; a large input gets a usual one.
        let capacity = if input.len() > 1024 { 64 << 10 } else { 7 };
        read(BufReader::with_capacity(capacity, input), maker, |chunk| {
            match chunk {
                Ok(c) => out.extend(c.messages.into_iter().map(|(_, m)| m.value.to_vec())),
                Err(e) => error = Some(format!("{e:#}")),
            }
            true
        });
        error.map_or(Ok(out), Err)
    }

    #[test]
    fn lines_drop_their_line_break_and_a_last_line_needs_none() {
        let got = values(b"a\r\nb\n\nc", &maker(Framing::Lines)).unwrap();
        assert_eq!(got, [&b"a"[..], b"b", b"", b"c"]);
        assert!(values(b"", &maker(Framing::Lines)).unwrap().is_empty());
    }

    #[test]
    fn delimited_records_are_taken_byte_for_byte() {
        let got = values(b"x\r\n\0\xff\0\0", &maker(Framing::Delimited(vec![0]))).unwrap();
        assert_eq!(got, [&b"x\r\n"[..], b"\xff", b""]);
        let got = values(b"a--b-c--", &maker(Framing::Delimited(b"--".to_vec()))).unwrap();
        assert_eq!(got, [&b"a"[..], b"b-c"]);
    }

    #[test]
    fn a_bad_json_line_is_named_after_the_good_ones() {
        let m = maker(Framing::Json);
        let mut delivered = Vec::new();
        read(
            BufReader::new(&b"{\"value\":\"a\"}\n\n{oops}\n{\"value\":\"c\"}\n"[..]),
            &m,
            |chunk| {
                delivered.push(
                    chunk
                        .map(|c| c.messages.len())
                        .map_err(|e| format!("{e:#}")),
                );
                true
            },
        );
        assert_eq!(delivered.len(), 2, "{delivered:?}");
        assert_eq!(delivered[0], Ok(1));
        let e = delivered[1].clone().unwrap_err();
        assert!(e.starts_with("line 3: not JSON"), "{e}");
    }

    #[test]
    fn key_separators_split_at_the_first_and_refuse_an_empty_key() {
        let mut m = maker(Framing::Lines);
        m.key_sep = Some(b"::".to_vec());
        let message = m.make(b"k::v::w".to_vec()).unwrap().unwrap();
        assert_eq!(message.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(&message.value[..], b"v::w");
        assert_eq!(m.make(b"v".to_vec()).unwrap().unwrap().key, None);
        assert!(m.make(b"::v".to_vec()).is_err());
    }

    #[test]
    fn a_record_beyond_the_bound_is_an_error() {
        let long = vec![b'x'; RECORD_BYTES_MAX + 1];
        let e = values(&long, &maker(Framing::Lines)).unwrap_err();
        assert!(e.contains("longer than 64 MiB"), "{e}");
        let fits = vec![b'x'; RECORD_BYTES_MAX];
        assert_eq!(values(&fits, &maker(Framing::Lines)).unwrap().len(), 1);
    }

    #[test]
    fn delimiters_take_escapes() {
        assert_eq!(parse_delimiter("\\0").unwrap().0, [0]);
        assert_eq!(parse_delimiter("\\x1e|\\t").unwrap().0, [0x1e, b'|', b'\t']);
        assert!(parse_delimiter("").is_err());
        assert!(parse_delimiter("\\q").is_err());
        assert!(parse_delimiter("\\x1").is_err());
    }
}
