//! Frame and message round-trips, split delivery, and bad input.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use rill_proto::pb::*;
use rill_proto::{
    ErrorCode, FrameDecoder, Kind, ProtoError, Request, RequestBody, Response, ResponseBody,
};

fn produce(stream: String, partition: u32, batch: Vec<u8>) -> Request {
    Request::with_payload(
        RequestBody::Produce(ProduceRequest {
            stream,
            topic: "orders".into(),
            partition,
            ranged: false,
        }),
        Bytes::from(batch),
    )
}

proptest! {
    #[test]
    fn requests_round_trip_through_split_delivery(
        stream in "[a-z]{1,20}",
        partition: u32,
        batch in prop::collection::vec(any::<u8>(), 0..500),
        correlation_id: u64,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let request = produce(stream, partition, batch);
        let wire = request.encode(correlation_id).unwrap().to_bytes();
        // Deliver the bytes in arbitrary pieces, as TCP may.
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len())).collect();
        points.sort_unstable();
        points.push(wire.len());
        let decoder = FrameDecoder::default();
        let mut buf = BytesMut::new();
        let mut start = 0;
        let mut frames = Vec::new();
        for p in points {
            buf.extend_from_slice(&wire[start..p]);
            start = p;
            while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                frames.push(frame);
            }
        }
        prop_assert_eq!(frames.len(), 1);
        prop_assert_eq!(frames[0].correlation_id, correlation_id);
        prop_assert_eq!(Request::decode(frames.pop().unwrap()).unwrap(), request);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let decoder = FrameDecoder::new(1024);
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(frame)) = decoder.decode(&mut buf) {
            let _ = Request::decode(frame.clone());
            let _ = Response::decode(frame);
        }
    }
}

#[test]
fn every_kind_round_trips_requests_and_responses() {
    for &kind in Kind::ALL {
        let (req, resp) = match kind {
            Kind::Hello => (
                RequestBody::Hello(HelloRequest {
                    client: "c".into(),
                    protocol_version: 1,
                }),
                ResponseBody::Hello(HelloResponse {
                    server: "s".into(),
                    protocol_version: 1,
                    max_frame_bytes: 9,
                    max_batch_bytes: 8,
                    features: rill_proto::FEATURE_SUBSCRIBE,
                }),
            ),
            Kind::Fetch => (
                RequestBody::Fetch(FetchRequest {
                    stream: "s".into(),
                    topic: "t".into(),
                    partition: 3,
                    offset: 9,
                    max_bytes: 10,
                    max_wait_ms: 5,
                    min_bytes: 1,
                }),
                ResponseBody::Fetch(FetchResponse {
                    next_offset: 10,
                    log_start: 0,
                    log_end: 11,
                }),
            ),
            Kind::GetOffset => (
                RequestBody::GetOffset(GetOffsetRequest {
                    stream: "s".into(),
                    topic: "t".into(),
                    partition: 0,
                    consumer: "c".into(),
                }),
                ResponseBody::GetOffset(GetOffsetResponse { offset: Some(4) }),
            ),
            Kind::JoinGroup => (
                RequestBody::JoinGroup(JoinGroupRequest {
                    stream: "s".into(),
                    topic: "t".into(),
                    group: "g".into(),
                    member_id: "m".into(),
                    session_timeout_ms: None,
                    create_group: Some(false),
                }),
                ResponseBody::JoinGroup(JoinGroupResponse { assignment: None }),
            ),
            Kind::DeleteGroupOffset => (
                RequestBody::DeleteGroupOffset(DeleteGroupOffsetRequest {
                    stream: "s".into(),
                    topic: "t".into(),
                    group: "g".into(),
                    member_id: String::new(),
                    generation: 7,
                    partition: 2,
                }),
                ResponseBody::DeleteGroupOffset(DeleteGroupOffsetResponse { deleted: true }),
            ),
            Kind::Subscribe => (
                RequestBody::Subscribe(SubscribeRequest {
                    stream: "s".into(),
                    topic: "t".into(),
                    partition: 2,
                    offset: 9,
                    credit_bytes: 1 << 40,
                    credit_frames: 7,
                }),
                ResponseBody::Subscribe(SubscribeResponse {
                    next_offset: 10,
                    log_start: 1,
                    log_end: 12,
                    last: true,
                }),
            ),
            Kind::Credit => (
                RequestBody::Credit(CreditRequest {
                    subscription: 5,
                    bytes: u64::MAX,
                    frames: 3,
                }),
                ResponseBody::Credit(CreditResponse {}),
            ),
            Kind::Unsubscribe => (
                RequestBody::Unsubscribe(UnsubscribeRequest { subscription: 5 }),
                ResponseBody::Unsubscribe(UnsubscribeResponse { next_offset: 10 }),
            ),
            Kind::SplitRange => (
                RequestBody::SplitRange(SplitRangeRequest {
                    stream: "s".into(),
                    topic: "t".into(),
                    range: Some(3),
                    at: Some(u64::MAX),
                }),
                ResponseBody::SplitRange(SplitRangeResponse {
                    change: Some(RangeChange {
                        sealed: vec![PartitionOffset {
                            partition: 3,
                            offset: Some(1 << 40),
                        }],
                        opened: vec![7, 8],
                        epoch: 4,
                    }),
                }),
            ),
            Kind::MergeRanges => (
                RequestBody::MergeRanges(MergeRangesRequest {
                    stream: "s".into(),
                    topic: "t".into(),
                    first: 8,
                    second: 7,
                }),
                ResponseBody::MergeRanges(MergeRangesResponse { change: None }),
            ),
            _ => continue,
        };
        let request = Request::new(req);
        let frame = decode_one(request.encode(1).unwrap().to_bytes());
        assert_eq!(Request::decode(frame).unwrap(), request);
        let response = Response::Ok {
            body: resp,
            payload: Bytes::from_static(b"batches"),
        };
        let frame = decode_one(response.encode(1).unwrap().to_bytes());
        assert_eq!(Response::decode(frame).unwrap(), response);
    }
}

/// A join from a client that predates `create_group` leaves it absent: "create".
#[test]
fn a_join_without_create_group_decodes_as_absent() {
    use prost::Message;
    let old = JoinGroupRequest {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        member_id: String::new(),
        session_timeout_ms: Some(1000),
        create_group: None,
    };
    let decoded = JoinGroupRequest::decode(&old.encode_to_vec()[..]).unwrap();
    assert_eq!(decoded.create_group, None);
    let refusing = JoinGroupRequest {
        create_group: Some(false),
        ..old
    };
    let decoded = JoinGroupRequest::decode(&refusing.encode_to_vec()[..]).unwrap();
    assert_eq!(decoded.create_group, Some(false));
}

#[test]
fn error_responses_round_trip() {
    let response = Response::error(Kind::Fetch as u16, ErrorCode::OffsetBeforeStart, "gone");
    let frame = decode_one(response.encode(42).unwrap().to_bytes());
    assert!(frame.is_error());
    assert_eq!(Response::decode(frame).unwrap(), response);
    assert!(ErrorCode::NotOwner.is_transient());
    assert!(!ErrorCode::TopicNotFound.is_transient());
}

/// Record batches carry the producer epoch in 16 bits; `InitProducerResponse` has it as
/// a protobuf `uint32`. A larger value is refused as out of range, never truncated
/// (docs/PROTOCOL.md §3.9).
#[test]
fn a_producer_epoch_beyond_16_bits_is_refused() {
    let init = |producer_epoch| {
        Response::ok(ResponseBody::InitProducer(InitProducerResponse {
            producer_id: 7,
            producer_epoch,
            recent_batches: 5,
        }))
    };
    let largest = init(u32::from(u16::MAX));
    let frame = decode_one(largest.encode(3).unwrap().to_bytes());
    assert_eq!(Response::decode(frame).unwrap(), largest);

    let frame = decode_one(init(u32::from(u16::MAX) + 1).encode(3).unwrap().to_bytes());
    let e = Response::decode(frame).unwrap_err();
    assert_eq!(
        e,
        ProtoError::OutOfRange {
            correlation_id: 3,
            field: "InitProducerResponse.producer_epoch",
            value: 65_536,
            max: 65_535,
        }
    );
    // The frame was well formed: only this request fails, the connection goes on.
    assert!(e.is_recoverable());
    assert_eq!(e.correlation_id(), Some(3));
}

fn decode_one(bytes: Bytes) -> rill_proto::Frame {
    let mut buf = BytesMut::from(&bytes[..]);
    let frame = FrameDecoder::default().decode(&mut buf).unwrap().unwrap();
    assert!(buf.is_empty());
    frame
}

#[test]
fn oversized_length_prefix_is_rejected_before_buffering() {
    let mut buf = BytesMut::from(&u32::MAX.to_le_bytes()[..]);
    match FrameDecoder::new(1 << 20).decode(&mut buf) {
        Err(e @ ProtoError::FrameTooLarge { .. }) => {
            assert_eq!(e.code(), ErrorCode::FrameTooLarge);
            assert!(!e.is_recoverable());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_kind_and_version_name_the_correlation_id() {
    let mut wire = Request::new(RequestBody::ListStreams(ListStreamsRequest {}))
        .encode(77)
        .unwrap()
        .to_bytes()
        .to_vec();
    wire[4] = 0xee; // kind
    let err = Request::decode(decode_one(Bytes::from(wire.clone()))).unwrap_err();
    assert_eq!(err.correlation_id(), Some(77));
    assert_eq!(err.code(), ErrorCode::UnknownKind);
    assert!(err.is_recoverable());
    wire[4] = 4;
    wire[6] = 9; // version
    let err = Request::decode(decode_one(Bytes::from(wire))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::UnsupportedVersion);
}

/// The flag MORE marks a subscription's pushes: it survives a round trip on responses
/// (errors included), and a request that carries it is refused, naming its id.
#[test]
fn the_flag_more_is_for_pushed_responses_only() {
    let push = Response::Ok {
        body: ResponseBody::Subscribe(SubscribeResponse {
            next_offset: 3,
            log_start: 0,
            log_end: 3,
            last: false,
        }),
        payload: Bytes::from_static(b"batches"),
    };
    let frame = decode_one(push.encode_more(7).unwrap().to_bytes());
    assert!(frame.has_more());
    assert!(frame.is_response());
    assert_eq!(Response::decode(frame).unwrap(), push);
    let plain = decode_one(push.encode(7).unwrap().to_bytes());
    assert!(!plain.has_more());
    let error = Response::error(43, rill_proto::ErrorCode::Busy, "full");
    let frame = decode_one(error.encode_more(7).unwrap().to_bytes());
    assert!(frame.has_more() && frame.is_error());
    assert_eq!(Response::decode(frame).unwrap(), error);

    let mut wire = Request::new(RequestBody::ListStreams(ListStreamsRequest {}))
        .encode(9)
        .unwrap()
        .to_bytes()
        .to_vec();
    wire[7] |= rill_proto::FLAG_MORE;
    let frame = decode_one(Bytes::from(wire));
    assert!(matches!(
        Request::decode(frame),
        Err(ProtoError::MalformedFrame {
            correlation_id: 9,
            ..
        })
    ));
    // Bits beyond the known ones are still framing errors.
    let mut wire = push.encode(7).unwrap().to_bytes().to_vec();
    wire[7] |= 1 << 3;
    let mut buf = BytesMut::from(&wire[..]);
    assert!(FrameDecoder::default().decode(&mut buf).is_err());
}

#[test]
fn truncated_and_inconsistent_frames_are_errors() {
    let wire = Request::new(RequestBody::ListStreams(ListStreamsRequest {}))
        .encode(1)
        .unwrap()
        .to_bytes();
    // Truncated: needs more bytes, not an error.
    let mut buf = BytesMut::from(&wire[..wire.len() - 1]);
    assert_eq!(FrameDecoder::default().decode(&mut buf).unwrap(), None);
    // A control length beyond the frame.
    let mut bad = wire.to_vec();
    bad[16..20].copy_from_slice(&1000u32.to_le_bytes());
    let mut buf = BytesMut::from(&bad[..]);
    assert!(matches!(
        FrameDecoder::default().decode(&mut buf),
        Err(ProtoError::MalformedFrame {
            correlation_id: 1,
            ..
        })
    ));
    // A frame shorter than its header.
    let mut buf = BytesMut::from(&[3u8, 0, 0, 0, 1, 2, 3][..]);
    assert!(matches!(
        FrameDecoder::default().decode(&mut buf),
        Err(ProtoError::Malformed(_))
    ));
}
