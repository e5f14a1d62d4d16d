//! Every request and response kind decoded from arbitrary control bytes.
//!
//! The first input byte picks the kind (every `Kind`, an unknown number, or an error
//! response), the second the frame's flavour; a valid frame header is built around the
//! rest, so the fuzzer spends its time inside the protobuf decoders rather than on
//! frame headers. Properties: decoding never panics; a decode error names the frame's
//! correlation id; a decoded message has the frame's kind and payload; a request frame
//! is never a response and vice versa; and decode → encode → decode is stable (the
//! second decode equals the first and re-encodes to the same bytes).
#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use rill_proto::{
    FLAG_ERROR, FLAG_MORE, FLAG_RESPONSE, Frame, FrameDecoder, Kind, PROTOCOL_VERSION, ProtoError, Request,
    Response,
};

/// Frame header fields after the length prefix, as `docs/PROTOCOL.md` §1 lays them out.
fn frame_bytes(
    kind: u16,
    version: u8,
    flags: u8,
    cid: u64,
    control: &[u8],
    payload: &[u8],
) -> BytesMut {
    let mut wire = BytesMut::new();
    wire.put_u32_le((16 + control.len() + payload.len()) as u32);
    wire.put_u16_le(kind);
    wire.put_u8(version);
    wire.put_u8(flags);
    wire.put_u64_le(cid);
    wire.put_u32_le(control.len() as u32);
    wire.extend_from_slice(control);
    wire.extend_from_slice(payload);
    wire
}

fn one_frame(mut wire: BytesMut) -> Frame {
    let frame = FrameDecoder::new(u32::MAX)
        .decode(&mut wire)
        .expect("a well-formed frame header")
        .expect("a whole frame");
    assert!(wire.is_empty(), "exactly one frame");
    frame
}

fn check_error(e: &ProtoError, frame: &Frame) {
    // Only stream-level errors lack a correlation id, and a decoded frame has one.
    assert_eq!(e.correlation_id(), Some(frame.correlation_id), "{e:?}");
    assert!(
        e.is_recoverable() || matches!(e, ProtoError::MalformedFrame { .. }),
        "{e:?}"
    );
    let _ = (e.code(), e.to_string());
}

fn request(frame: Frame) {
    let decoded = match Request::decode(frame.clone()) {
        Ok(r) => r,
        Err(e) => return check_error(&e, &frame),
    };
    assert!(!frame.is_response());
    assert_eq!(decoded.body.kind() as u16, frame.kind);
    assert_eq!(decoded.payload, frame.payload);
    let wire = decoded
        .encode(frame.correlation_id)
        .expect("re-encode")
        .to_bytes();
    let again = one_frame(BytesMut::from(&wire[..]));
    assert_eq!(again.correlation_id, frame.correlation_id);
    assert!(
        Response::decode(again.clone()).is_err(),
        "a request frame is not a response"
    );
    let back = Request::decode(again).expect("a re-encoded request decodes");
    assert_eq!(back, decoded);
    assert_eq!(
        back.encode(frame.correlation_id).unwrap().to_bytes(),
        wire,
        "encoding is stable"
    );
}

fn response(frame: Frame) {
    let decoded = match Response::decode(frame.clone()) {
        Ok(r) => r,
        Err(e) => return check_error(&e, &frame),
    };
    assert!(frame.is_response());
    match &decoded {
        Response::Ok { body, payload } => {
            assert!(!frame.is_error());
            assert_eq!(body.kind() as u16, frame.kind);
            assert_eq!(payload, &frame.payload);
        }
        Response::Err { kind, error } => {
            assert!(frame.is_error());
            assert_eq!(*kind, frame.kind);
            let _ = error.code();
        }
    }
    let wire = decoded
        .encode(frame.correlation_id)
        .expect("re-encode")
        .to_bytes();
    let again = one_frame(BytesMut::from(&wire[..]));
    assert!(
        Request::decode(again.clone()).is_err(),
        "a response frame is not a request"
    );
    let back = Response::decode(again).expect("a re-encoded response decodes");
    assert_eq!(back, decoded);
    assert_eq!(
        back.encode(frame.correlation_id).unwrap().to_bytes(),
        wire,
        "encoding is stable"
    );
}

fuzz_target!(|data: &[u8]| {
    let [pick, flavour, rest @ ..] = data else {
        return;
    };
    let kinds = Kind::ALL.len();
    let kind = match usize::from(*pick) % (kinds + 2) {
        i if i < kinds => Kind::ALL[i] as u16,
        // A number no kind has (responses with it are still decodable as errors).
        i if i == kinds => 0,
        _ => u16::from(*pick).wrapping_mul(257),
    };
    // Low two bits: request, response, error response, or the error flag on a request;
    // bits 4-5 both set (and not a version change): the flag MORE as well (a
    // subscription's pushes; refused on requests).
    let mut flags = match flavour & 3 {
        0 => 0,
        1 => FLAG_RESPONSE,
        2 => FLAG_RESPONSE | FLAG_ERROR,
        _ => FLAG_ERROR,
    };
    if flavour & 0x30 == 0x30 && flavour & 0xf0 != 0xf0 {
        flags |= FLAG_MORE;
    }
    // Rarely, another protocol version.
    let version = if flavour & 0xf0 == 0xf0 {
        flavour & 0x0f
    } else {
        PROTOCOL_VERSION
    };
    // Bits 2-3 choose how much of the rest is payload (most kinds carry none).
    let payload_len = match (flavour >> 2) & 3 {
        0 | 1 => 0,
        2 => rest.len().min(8),
        _ => rest.len() / 2,
    };
    let (control, payload) = rest.split_at(rest.len() - payload_len);
    let cid = u64::from_le_bytes(*b"rillcid!") ^ u64::from(*pick);
    let frame = one_frame(frame_bytes(kind, version, flags, cid, control, payload));
    assert_eq!(frame.control, Bytes::copy_from_slice(control));
    if frame.is_response() {
        assert!(Request::decode(frame.clone()).is_err());
        response(frame);
    } else if frame.has_more() {
        assert!(Request::decode(frame.clone()).is_err(), "MORE on a request");
        assert!(Response::decode(frame).is_err());
    } else {
        assert!(Response::decode(frame.clone()).is_err());
        request(frame);
    }
});
