//! Length-prefixed frames (docs/PROTOCOL.md §1).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::ProtoError;

/// Bytes before the control part: length, kind, version, flags, correlation id,
/// control length.
pub const FRAME_HEADER_LEN: usize = 20;
/// Bytes covered by `frame_length` before the control part.
const AFTER_LENGTH_HEADER: u32 = 16;
/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u8 = 1;
/// Default bound on one frame (length prefix excluded).
pub const DEFAULT_MAX_FRAME_BYTES: u32 = 64 << 20;

/// Frame flag: the frame is a response.
pub const FLAG_RESPONSE: u8 = 1 << 0;
/// Frame flag: the response is an `ErrorResponse`.
pub const FLAG_ERROR: u8 = 1 << 1;
/// Frame flag: more responses follow for this correlation id (a subscription's pushes,
/// docs/PROTOCOL.md §3.32). Only on responses to a `Subscribe`.
pub const FLAG_MORE: u8 = 1 << 2;
const FLAGS_KNOWN: u8 = FLAG_RESPONSE | FLAG_ERROR | FLAG_MORE;
/// `HelloResponse.features` bit: the server serves `Subscribe`, `Credit`, `Unsubscribe`.
pub const FEATURE_SUBSCRIBE: u32 = 1 << 0;
/// `HelloResponse.features` bit: the server serves elastic topics (docs/RANGES.md §5):
/// it creates them, splits and merges their ranges, and refuses produces not routed by
/// range.
pub const FEATURE_RANGES: u32 = 1 << 1;

/// One decoded frame: header fields plus the control and payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Request kind (responses echo the request's).
    pub kind: u16,
    /// Protocol version of the control schema.
    pub version: u8,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Chosen by the client, echoed by the server.
    pub correlation_id: u64,
    /// The protobuf control message.
    pub control: Bytes,
    /// Raw bytes after the control part (record batches).
    pub payload: Bytes,
}

impl Frame {
    /// Whether this frame is a response.
    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }

    /// Whether this response carries an `ErrorResponse`.
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }

    /// Whether more responses follow for this correlation id.
    pub fn has_more(&self) -> bool {
        self.flags & FLAG_MORE != 0
    }
}

/// An encoded frame in two parts, so a large payload is written without a copy.
#[derive(Debug, Clone, Default)]
pub struct EncodedFrame {
    /// Header and control bytes.
    pub head: BytesMut,
    /// Payload bytes.
    pub payload: Bytes,
}

impl EncodedFrame {
    /// Total bytes on the wire.
    pub fn len(&self) -> usize {
        self.head.len() + self.payload.len()
    }

    /// Whether the frame is empty (never true for a built frame).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Both parts in one buffer (tests and small frames).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.len());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.payload);
        out.freeze()
    }
}

/// Builds a frame around an already encoded control message.
pub fn encode_frame(
    kind: u16,
    flags: u8,
    correlation_id: u64,
    control: &impl prost::Message,
    payload: Bytes,
) -> Result<EncodedFrame, ProtoError> {
    let control_len = control.encoded_len();
    let total = AFTER_LENGTH_HEADER as usize + control_len + payload.len();
    let frame_length = u32::try_from(total).map_err(|_| ProtoError::FrameTooLarge {
        bytes: total as u64,
        max: u32::MAX,
    })?;
    let mut head = BytesMut::with_capacity(FRAME_HEADER_LEN + control_len);
    head.put_u32_le(frame_length);
    head.put_u16_le(kind);
    head.put_u8(PROTOCOL_VERSION);
    head.put_u8(flags);
    head.put_u64_le(correlation_id);
    head.put_u32_le(control_len as u32);
    control.encode(&mut head).expect("BytesMut grows as needed");
    Ok(EncodedFrame { head, payload })
}

/// Splits frames off a byte stream, enforcing a size bound.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_bytes: u32,
}

impl FrameDecoder {
    /// A decoder that rejects frames longer than `max_frame_bytes`.
    pub fn new(max_frame_bytes: u32) -> Self {
        Self { max_frame_bytes }
    }

    /// The bytes on the wire (length prefix included) of the frame at the front of
    /// `buf` while only part of it is there: `Some` once its length prefix is buffered
    /// and within bounds but its body is not all buffered yet; `None` with fewer than 4
    /// bytes, with a whole frame, or with a length [`decode`](Self::decode) rejects.
    ///
    /// A reader uses it to make room for (and account for) a frame before reading its
    /// body, rather than after.
    pub fn pending_frame_len(&self, buf: &[u8]) -> Option<usize> {
        let prefix: [u8; 4] = buf.get(..4)?.try_into().expect("4 bytes");
        let frame_length = u32::from_le_bytes(prefix);
        if frame_length > self.max_frame_bytes || frame_length < AFTER_LENGTH_HEADER {
            return None;
        }
        let total = 4 + frame_length as usize;
        (buf.len() < total).then_some(total)
    }

    /// Takes one whole frame off the front of `buf`, or `Ok(None)` if more bytes are
    /// needed. An error means the stream cannot be trusted any further: reply if the
    /// error names a correlation id, then close.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let frame_length = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
        if frame_length > self.max_frame_bytes {
            return Err(ProtoError::FrameTooLarge {
                bytes: u64::from(frame_length),
                max: self.max_frame_bytes,
            });
        }
        if frame_length < AFTER_LENGTH_HEADER {
            return Err(ProtoError::Malformed("frame shorter than its header"));
        }
        let total = 4 + frame_length as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(total).freeze();
        frame.advance(4);
        let kind = frame.get_u16_le();
        let version = frame.get_u8();
        let flags = frame.get_u8();
        let correlation_id = frame.get_u64_le();
        let control_len = frame.get_u32_le() as usize;
        if control_len > frame.len() {
            return Err(ProtoError::MalformedFrame {
                correlation_id,
                reason: "control part longer than the frame",
            });
        }
        if flags & !FLAGS_KNOWN != 0 {
            return Err(ProtoError::MalformedFrame {
                correlation_id,
                reason: "unknown frame flags",
            });
        }
        let control = frame.split_to(control_len);
        Ok(Some(Frame {
            kind,
            version,
            flags,
            correlation_id,
            control,
            payload: frame,
        }))
    }
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_frame_len_names_an_incomplete_frame_only() {
        let decoder = FrameDecoder::new(1 << 20);
        let frame = encode_frame(4, 0, 9, &crate::pb::ListStreamsRequest {}, Bytes::new())
            .unwrap()
            .to_bytes();
        let whole = frame.len();
        assert_eq!(
            decoder.pending_frame_len(&frame[..3]),
            None,
            "no prefix yet"
        );
        for cut in 4..whole {
            assert_eq!(
                decoder.pending_frame_len(&frame[..cut]),
                Some(whole),
                "{cut}"
            );
        }
        assert_eq!(decoder.pending_frame_len(&frame), None, "whole");
        let mut two = frame.to_vec();
        two.extend_from_slice(&frame[..5]);
        assert_eq!(decoder.pending_frame_len(&two), None, "a whole frame first");

        // A huge but allowed length is announced before any of its body is there.
        let mut big = ((1u32 << 20) - 8).to_le_bytes().to_vec();
        big.extend_from_slice(&[0; 10]);
        assert_eq!(decoder.pending_frame_len(&big), Some(4 + (1 << 20) - 8));
        // Lengths decode() rejects are left to it.
        assert_eq!(
            decoder.pending_frame_len(&((1u32 << 20) + 1).to_le_bytes()),
            None
        );
        assert_eq!(decoder.pending_frame_len(&15u32.to_le_bytes()), None);
        assert!(
            decoder
                .decode(&mut BytesMut::from(&15u32.to_le_bytes()[..]))
                .is_err()
        );
    }
}
