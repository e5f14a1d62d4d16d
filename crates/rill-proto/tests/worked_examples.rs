//! The worked examples of `docs/PROTOCOL.md` §9, read out of the document itself: each
//! hex dump must decode with the real frame and message decoders to the message the
//! section describes, every row of its table must name the bytes at its offset and the
//! value they decode to, and encoding the message again must give the same bytes. A
//! change to the document's bytes, its tables or the codec fails here.

use bytes::BytesMut;
use rill_proto::pb::{ErrorCode, StreamInfo};
use rill_proto::pb::{ErrorResponse, HelloRequest, ListStreamsRequest, ListStreamsResponse};
use rill_proto::{Frame, FrameDecoder, Request, RequestBody, Response, ResponseBody};

const PROTOCOL_MD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/PROTOCOL.md"
));

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
    let start = PROTOCOL_MD
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/PROTOCOL.md has no {marker}"));
    let mut lines = PROTOCOL_MD[start + marker.len()..].lines().skip(1);
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
    let rows = lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and the alignment row
        .map(|line| {
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
    Number(u64),
    Text(String),
}

fn said(value: &str) -> Said {
    if let Some(rest) = value.strip_prefix('"') {
        return Said::Text(rest[..rest.find('"').expect("a closing quote")].to_owned());
    }
    let token: String = value
        .trim_start_matches('`')
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    let number = match token.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => token.parse(),
    };
    Said::Number(number.unwrap_or_else(|_| panic!("no number in {value:?}")))
}

/// A protobuf varint that ends at the end of its row.
fn varint(bytes: &[u8]) -> u64 {
    let mut value = 0;
    for (i, &b) in bytes.iter().enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        assert_eq!(
            b & 0x80 == 0,
            i + 1 == bytes.len(),
            "a varint ends at its row"
        );
    }
    value
}

/// Splits the dump into one frame with the real decoder.
fn one_frame(dump: &[u8]) -> Frame {
    let mut wire = BytesMut::from(dump);
    let frame = FrameDecoder::default()
        .decode(&mut wire)
        .expect("a valid frame")
        .expect("a whole frame");
    assert!(wire.is_empty(), "the dump is exactly one frame");
    frame
}

/// Every row names the bytes at its offset, the rows cover the frame in order, and each
/// says what the decoders read there: header fields from `frame`, message fields from
/// `field` (protobuf tags and lengths are checked against the bytes themselves).
fn check_rows(name: &str, dump: &[u8], rows: &[Row], frame: &Frame, field: impl Fn(&str) -> Said) {
    let mut at = 0;
    for row in rows {
        assert_eq!(
            row.offset, at,
            "{name}: rows in order, none missing: {row:?}"
        );
        at += row.bytes.len();
        assert_eq!(
            dump.get(row.offset..at),
            Some(&row.bytes[..]),
            "{name}: {row:?}"
        );
        let decoded = match row.field.as_str() {
            "frame_length" => Said::Number(dump.len() as u64 - 4),
            "kind" => Said::Number(u64::from(frame.kind)),
            "version" => Said::Number(u64::from(frame.version)),
            "flags" => Said::Number(u64::from(frame.flags)),
            "correlation_id" => Said::Number(frame.correlation_id),
            "control_length" => Said::Number(frame.control.len() as u64),
            f if f.ends_with(".tag") => {
                // "field N, wire type W": the key byte is N << 3 | W.
                let words: Vec<&str> = row.value.split([' ', ',']).collect();
                let after = |word: &str| -> u64 {
                    let i = words.iter().position(|w| *w == word).expect(word);
                    words[i + 1].parse().expect("a number")
                };
                let (number, wire_type) = (after("field"), after("type"));
                assert_eq!(
                    varint(&row.bytes),
                    number << 3 | wire_type,
                    "{name}: {row:?}"
                );
                continue;
            }
            f if f.ends_with(".length") => Said::Number(varint(&row.bytes)),
            f => field(f),
        };
        assert_eq!(decoded, said(&row.value), "{name}: {row:?}");
    }
    assert_eq!(at, dump.len(), "{name}: the table covers every byte");
}

fn none(field: &str) -> Said {
    panic!("the test does not know field {field:?}")
}

#[test]
fn list_streams_request() {
    let (dump, rows) = example("list-streams-request");
    let frame = one_frame(&dump);
    check_rows("list-streams-request", &dump, &rows, &frame, none);
    let request = Request::decode(frame).unwrap();
    let expected = Request::new(RequestBody::ListStreams(ListStreamsRequest {}));
    assert_eq!(request, expected);
    assert_eq!(&expected.encode(7).unwrap().to_bytes()[..], &dump[..]);
}

#[test]
fn list_streams_response() {
    let (dump, rows) = example("list-streams-response");
    let frame = one_frame(&dump);
    let response = Response::decode(frame.clone()).unwrap();
    let expected = Response::ok(ResponseBody::ListStreams(ListStreamsResponse {
        streams: vec![StreamInfo {
            name: "shop".into(),
            topics: 2,
        }],
    }));
    assert_eq!(response, expected);
    let Response::Ok {
        body: ResponseBody::ListStreams(body),
        ..
    } = &response
    else {
        unreachable!("checked above")
    };
    check_rows(
        "list-streams-response",
        &dump,
        &rows,
        &frame,
        |field| match field {
            "streams[0].name" => Said::Text(body.streams[0].name.clone()),
            "streams[0].topics" => Said::Number(u64::from(body.streams[0].topics)),
            other => none(other),
        },
    );
    assert_eq!(&expected.encode(7).unwrap().to_bytes()[..], &dump[..]);
}

#[test]
fn hello_request() {
    let (dump, rows) = example("hello-request");
    let frame = one_frame(&dump);
    let request = Request::decode(frame.clone()).unwrap();
    let expected = Request::new(RequestBody::Hello(HelloRequest {
        client: "x".into(),
        protocol_version: 1,
    }));
    assert_eq!(request, expected);
    let RequestBody::Hello(hello) = &request.body else {
        unreachable!("checked above")
    };
    check_rows("hello-request", &dump, &rows, &frame, |field| match field {
        "client" => Said::Text(hello.client.clone()),
        "protocol_version" => Said::Number(u64::from(hello.protocol_version)),
        other => none(other),
    });
    assert_eq!(&expected.encode(1).unwrap().to_bytes()[..], &dump[..]);
}

#[test]
fn busy_error_response() {
    let (dump, rows) = example("busy-error-response");
    let frame = one_frame(&dump);
    assert!(frame.is_error());
    let response = Response::decode(frame.clone()).unwrap();
    let expected = Response::error(4, ErrorCode::Busy, "");
    assert_eq!(response, expected);
    let Response::Err {
        error: ErrorResponse { code, .. },
        ..
    } = &response
    else {
        unreachable!("checked above")
    };
    check_rows(
        "busy-error-response",
        &dump,
        &rows,
        &frame,
        |field| match field {
            "code" => Said::Number(u64::try_from(*code).unwrap()),
            other => none(other),
        },
    );
    assert_eq!(&expected.encode(7).unwrap().to_bytes()[..], &dump[..]);
}

#[test]
fn every_example_of_the_page_is_checked() {
    let checked = [
        "list-streams-request",
        "list-streams-response",
        "hello-request",
        "busy-error-response",
    ];
    let found: Vec<&str> = PROTOCOL_MD
        .match_indices("<!-- example: ")
        .map(|(i, m)| {
            let rest = &PROTOCOL_MD[i + m.len()..];
            &rest[..rest.find(" -->").expect("a closed marker")]
        })
        .collect();
    assert_eq!(found, checked, "a new example needs a test here");
}
