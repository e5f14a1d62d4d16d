//! Rill's wire protocol: length-prefixed frames carrying a protobuf control message and
//! raw record-batch bytes, with one never-reused error-code enum. Pure encode/decode:
//! no I/O, no async runtime; record batches are opaque bytes here.
//!
//! The frame layout and every message are documented in `docs/PROTOCOL.md`; the schema
//! is `proto/rill.proto`.
//!
//! ```
//! use rill_proto::{FrameDecoder, Request, RequestBody, pb};
//!
//! let request = Request::new(RequestBody::ListStreams(pb::ListStreamsRequest {}));
//! let mut wire = bytes::BytesMut::from(&request.encode(7)?.to_bytes()[..]);
//! let frame = FrameDecoder::default().decode(&mut wire)?.expect("a whole frame");
//! assert_eq!(frame.correlation_id, 7);
//! assert_eq!(Request::decode(frame)?, request);
//! # Ok::<(), rill_proto::ProtoError>(())
//! ```
//!
//! Architecture Invariant: this crate knows no other Rill crate, no sockets and no
//! tokio. Decoders are bounded and never panic (fuzzed by `fuzz/fuzz_targets/frame_decode.rs`).

#![deny(missing_docs, unreachable_pub)]

mod error;
mod frame;
mod message;
mod names;
pub mod ranges;

/// The generated protobuf messages of `proto/rill.proto`.
///
/// prost writes this code: `missing_docs` and `unreachable_pub`, denied for the rest of
/// the crate, are allowed here; the schema's comments are its documentation.
#[allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/rill.v1.rs"));
}

pub use error::ProtoError;
pub use frame::{
    DEFAULT_MAX_FRAME_BYTES, EncodedFrame, FEATURE_RANGES, FEATURE_SUBSCRIBE, FLAG_ERROR,
    FLAG_MORE, FLAG_RESPONSE, FRAME_HEADER_LEN, Frame, FrameDecoder, PROTOCOL_VERSION,
    encode_frame,
};
pub use message::{Kind, Request, RequestBody, Response, ResponseBody};
pub use names::{NAME_LEN_MAX, name_problem};
pub use pb::ErrorCode;

impl ErrorCode {
    /// Whether a client should retry a request that failed with this code.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Self::NotOwner
                | Self::NotLeader
                | Self::Rebalancing
                | Self::Migrating
                | Self::Timeout
                | Self::Busy
                | Self::ShuttingDown
        )
    }
}
