//! The worked example of `docs/FORMAT.md` ("Worked example: a batch of two records"),
//! read out of the document itself: its byte dumps must parse with the real parser,
//! every row of its tables must name the bytes at its offset and the value they decode
//! to, and building and stamping the same batch must give the same bytes. A change to
//! the document's bytes, its tables or the codec fails here.

use rill_format::{
    BatchBuilder, BatchView, Header, HeaderValue, NewRecord, ProducerInfo, Record, stamp,
};

const FORMAT_MD: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md"));

/// The stamp of the stored example: offset 42 at 2026-01-01 00:00:00 UTC.
const STORED_BASE_OFFSET: u64 = 42;
const STORED_FIRST_TIMESTAMP_US: i64 = 1_767_225_600_000_000;

/// One row of an example's table: `| offset | bytes | field | value |`.
#[derive(Debug)]
struct Row {
    offset: usize,
    bytes: Vec<u8>,
    field: String,
    value: String,
}

/// The hex dump after `<!-- example: NAME -->` and the table after it.
fn example(name: &str) -> (Vec<u8>, Vec<Row>) {
    let marker = format!("<!-- example: {name} -->");
    let start = FORMAT_MD
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/FORMAT.md has no {marker}"));
    let mut lines = FORMAT_MD[start + marker.len()..].lines().skip(1);
    assert_eq!(
        lines.next(),
        Some("```"),
        "{name}: a fence after the marker"
    );
    let mut dump = Vec::new();
    for line in lines.by_ref() {
        if line == "```" {
            break;
        }
        dump.extend(hex(line));
    }
    let table: Vec<&str> = lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and the alignment row
        .collect();
    let rows = table
        .iter()
        .map(|line| {
            let line = line.replace("\\|", "¦");
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "{name}: {line}");
            Row {
                offset: cells[0]
                    .parse()
                    .unwrap_or_else(|_| panic!("offset: {line}")),
                bytes: hex(cells[1].trim_matches('`')),
                field: cells[2].trim_matches('`').to_owned(),
                value: cells[3].to_owned(),
            }
        })
        .collect();
    (dump, rows)
}

fn hex(text: &str) -> Vec<u8> {
    text.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap_or_else(|_| panic!("not hex: {b:?}")))
        .collect()
}

/// What a value cell says: its leading number (decimal or `0x` hex, maybe in
/// backticks) or its leading quoted string.
#[derive(Debug, PartialEq)]
enum Said {
    Number(i128),
    Text(String),
}

fn said(value: &str) -> Said {
    if let Some(rest) = value.strip_prefix('"') {
        return Said::Text(rest[..rest.find('"').expect("a closing quote")].to_owned());
    }
    let token: String = value
        .trim_start_matches('`')
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let number = match token.strip_prefix("0x") {
        Some(h) => i128::from_str_radix(h, 16),
        None => token.parse(),
    };
    Said::Number(number.unwrap_or_else(|_| panic!("no number in {value:?}")))
}

fn le(bytes: &[u8]) -> i128 {
    bytes
        .iter()
        .rev()
        .fold(0i128, |acc, &b| (acc << 8) | i128::from(b))
}

/// A one-byte varint, as every varint of the example but one is.
fn varint(bytes: &[u8]) -> i128 {
    let mut value = 0i128;
    for (i, &b) in bytes.iter().enumerate() {
        value |= i128::from(b & 0x7f) << (7 * i);
        assert_eq!(
            b & 0x80 == 0,
            i + 1 == bytes.len(),
            "a varint ends at its row"
        );
    }
    value
}

/// What the decoded batch says the field of `row` is.
fn decoded(batch: &BatchView<'_>, records: &[Record<'_>], row: &Row) -> Said {
    let header = batch.header();
    let producer = header.producer.expect("the example is idempotent");
    let num = Said::Number;
    let text = |b: &[u8]| Said::Text(String::from_utf8(b.to_vec()).unwrap());
    let bytes = &row.bytes;
    // A record's fields: "records[i].field" and "records[i].headers[j].field".
    if let Some(rest) = row.field.strip_prefix("records[") {
        let (index, field) = rest.split_once("].").expect("records[i].field");
        let record = &records[index.parse::<usize>().unwrap()];
        if let Some(rest) = field.strip_prefix("headers[") {
            let (index, field) = rest.split_once("].").expect("headers[j].field");
            let h = record
                .headers()
                .nth(index.parse().unwrap())
                .expect("a header");
            return match (field, h.value) {
                ("name", _) => text(h.name.as_bytes()),
                ("name_length", _) => {
                    assert_eq!(varint(bytes), h.name.len() as i128);
                    num(varint(bytes))
                }
                ("type", HeaderValue::Str(_)) => num(i128::from(bytes[0])),
                ("value_length", HeaderValue::Str(v)) => {
                    assert_eq!(varint(bytes), v.len() as i128);
                    num(varint(bytes))
                }
                ("value", HeaderValue::Str(v)) => text(v.as_bytes()),
                other => panic!("the test does not know header field {other:?}"),
            };
        }
        let key_len = record.key.map_or(0, |k| k.len() as i128 + 1);
        let header_count = record.headers().count() as i128;
        let same = |want: i128| {
            assert_eq!(varint(bytes), want, "{row:?}");
            num(want)
        };
        return match field {
            // Not exposed by the parser: the bytes themselves, read as the format says.
            "length" | "attributes" => num(varint(bytes)),
            "timestamp_delta" => same(i128::from(record.timestamp_us - header.first_timestamp_us)),
            "offset_delta" => same(i128::from(record.offset - header.base_offset)),
            "key_length" => same(key_len),
            "key" => text(record.key.expect("a key")),
            "value_length" => same(record.value.len() as i128),
            "value" => text(record.value),
            "header_count" => same(header_count),
            other => panic!("the test does not know record field {other:?}"),
        };
    }
    match row.field.as_str() {
        "header_crc" | "body_crc" | "reserved" | "magic" | "attributes" => num(le(bytes)),
        "batch_length" => num(i128::from(header.batch_length)),
        "base_offset" => num(i128::from(header.base_offset)),
        "first_timestamp_us" => num(i128::from(header.first_timestamp_us)),
        "max_timestamp_us" => num(i128::from(header.max_timestamp_us)),
        "record_count" => num(i128::from(header.record_count)),
        "producer_id" => num(i128::from(producer.id)),
        "producer_epoch" => num(i128::from(producer.epoch)),
        "base_sequence" => num(i128::from(producer.base_sequence)),
        other => panic!("the test does not know header field {other:?}"),
    }
}

/// Every row names the bytes at its offset, and says what the parser decodes there.
fn check_rows(name: &str, dump: &[u8], rows: &[Row]) {
    let batch = BatchView::parse(dump).unwrap_or_else(|e| panic!("{name}: {e}"));
    let records: Vec<Record<'_>> = batch.records().collect();
    for row in rows {
        let end = row.offset + row.bytes.len();
        assert_eq!(
            dump.get(row.offset..end),
            Some(&row.bytes[..]),
            "{name}: {row:?}"
        );
        assert_eq!(
            decoded(&batch, &records, row),
            said(&row.value),
            "{name}: {row:?}"
        );
    }
}

fn build_the_example() -> Vec<u8> {
    let headers = [Header::new("h", HeaderValue::Str("v"))];
    let mut builder = BatchBuilder::new();
    builder.producer(ProducerInfo {
        id: 7,
        epoch: 1,
        base_sequence: 5,
    });
    builder
        .push(NewRecord::value(b"hi").key(b"k").headers(&headers))
        .unwrap();
    builder
        .push(NewRecord::value(b"yo").timestamp_delta_us(1500))
        .unwrap();
    builder.finish().unwrap()
}

#[test]
fn the_batch_as_sent_decodes_as_its_table_says_and_is_what_the_builder_makes() {
    let (dump, rows) = example("batch-as-sent");
    assert_eq!(dump.len(), 89);
    // The table covers the batch, byte for byte, in order.
    let mut at = 0;
    for row in &rows {
        assert_eq!(row.offset, at, "{row:?}");
        at += row.bytes.len();
    }
    assert_eq!(at, dump.len(), "the table covers every byte");
    check_rows("batch-as-sent", &dump, &rows);

    let batch = BatchView::parse(&dump).unwrap();
    assert_eq!(
        batch.largest_record_bytes(),
        14,
        "the length varint is not counted"
    );
    assert_eq!(build_the_example(), dump, "the builder makes these bytes");
}

#[test]
fn the_batch_as_stored_is_the_sent_one_stamped() {
    let (sent, _) = example("batch-as-sent");
    let (stored_header, rows) = example("batch-as-stored");
    assert_eq!(stored_header.len(), 64, "the dump is the stamped header");
    let mut stored = sent.clone();
    stamp(&mut stored, STORED_BASE_OFFSET, STORED_FIRST_TIMESTAMP_US).unwrap();
    assert_eq!(stored[..64], stored_header[..]);
    assert_eq!(
        stored[32..],
        sent[32..],
        "body_crc and the records are untouched"
    );
    check_rows("batch-as-stored", &stored, &rows);

    let batch = BatchView::parse(&stored).unwrap();
    let stamped: Vec<(u64, i64)> = batch
        .records()
        .map(|r| (r.offset, r.timestamp_us))
        .collect();
    assert_eq!(
        stamped,
        [(42, 1_767_225_600_000_000), (43, 1_767_225_600_001_500)]
    );
}
