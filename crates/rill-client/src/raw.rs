//! The low-level escape hatch: any request of `docs/PROTOCOL.md`, sent as it is, with its
//! typed response; see [`Client::raw`](crate::Client::raw).
//!
//! These are the wire protocol's own messages (generated from `rill.proto`), so they
//! follow the protocol's versioning rules (PROTOCOL.md §8), not the SDK's: fields are
//! added over time, and code using them may need to change with the protocol. Prefer the
//! typed API; reach for this only for a protocol feature it does not wrap (yet).

pub use bytes::Bytes;
pub use rill_proto::pb as messages;
pub use rill_proto::{Kind, RequestBody as Request, ResponseBody as Response};
