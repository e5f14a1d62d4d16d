//! Rill's record-batch format: the bytes a producer builds, the broker stamps and
//! stores, and a consumer iterates. Pure: no I/O, no allocation on the read path.
//!
//! The layout is specified in `docs/FORMAT.md`. In short: a 64-byte little-endian
//! header with two CRC-32C checksums — `body_crc` over everything the producer owns,
//! `header_crc` over the length, the broker-stamped fields (base offset, timestamps)
//! and `body_crc` — followed by varint-framed records with typed headers.
//!
//! Architecture Invariant: this crate performs no I/O and depends on no other Rill
//! crate. Every parser here is bounds-checked and returns [`FormatError`] for bad input;
//! a panic on any input is a bug (the fuzz targets look for one).

#![deny(missing_docs, unreachable_pub)]

mod batch;
mod builder;
mod durability;
mod error;
mod header;
mod layout;
mod varint;

pub use batch::{
    BATCH_HEADER_LEN, BatchHeader, BatchView, Batches, Compression, MAGIC_V1, ProducerInfo, Record,
    Records, stamp,
};
pub use builder::{BatchBuilder, BuiltBatch, NewRecord};
pub use durability::{Durability, ParseDurabilityError};
pub use error::{FormatError, RecordError};
pub use header::{HEADER_NAME_LEN_MAX, Header, HeaderValue, Headers};
