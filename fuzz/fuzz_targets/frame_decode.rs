//! The frame decoder and message decoders on arbitrary byte streams: no panic, no
//! unbounded buffering, and every decoded request re-encodes to a decodable frame.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rill_proto::{FrameDecoder, Request, Response};

fuzz_target!(|data: &[u8]| {
    let decoder = FrameDecoder::new(64 * 1024);
    // Feed the bytes in two pieces to exercise partial frames.
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let mut buf = BytesMut::new();
    for piece in [&data[..split], &data[split..]] {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Ok(request) = Request::decode(frame.clone()) {
                        let again = request.encode(frame.correlation_id).expect("re-encode");
                        let mut wire = BytesMut::from(&again.to_bytes()[..]);
                        let back = FrameDecoder::new(u32::MAX)
                            .decode(&mut wire)
                            .expect("re-encoded frame decodes")
                            .expect("whole frame");
                        assert_eq!(Request::decode(back).expect("decodes"), request);
                    }
                    let _ = Response::decode(frame);
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = (e.code(), e.correlation_id(), e.is_recoverable());
                    return;
                }
            }
        }
        assert!(buf.len() <= 64 * 1024 + 4, "buffered beyond one frame");
    }
});
