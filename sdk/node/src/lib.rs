//! Rill's Node.js SDK, its native half: a napi-rs addon over the Rust SDK
//! (`rill-client`) so that Node gets the same behaviour, routing and idempotence,
//! embedded (`open`) or over TCP (`connect`).
//!
//! Values cross as `Buffer`s and typed headers as `{name, kind, text|bytes|number|flag}`;
//! the JS package (`index.cjs`) adds codecs, records as objects, async iteration,
//! `AbortSignal`s and the error classes.
//!
//! Architecture Invariant: every promise is made by `runtime::spawn`, which runs the
//! SDK's future on tokio, marks its error for the JS layer and catches panics;
//! synchronous entry points that do work are `catch_unwind`. No JS input reaches the
//! SDK unchecked (a bad one is an `InvalidArgumentError`, never a panic).

#![deny(missing_docs)]
// napi-derive generates items without docs for the exported objects' fields.
#![allow(missing_docs)]
// Under `cfg(test)` napi-derive registers no exports, so free functions look unused.
#![cfg_attr(test, allow(dead_code))]

mod client;
mod consumer;
mod convert;
mod error;
mod group;
mod producer;
mod reader;
mod runtime;
mod topic;

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;

/// The partition of `key` among `partitions` (`xxh3_64(key) % partitions`), as every
/// SDK computes it (docs/PROTOCOL.md §6).
#[napi(catch_unwind)]
pub fn partition_for_key(key: Buffer, partitions: u32) -> napi::Result<u32> {
    if partitions == 0 {
        return Err(error::invalid_napi("a topic has at least one partition"));
    }
    Ok(rill_client::partition_for_key(&key, partitions))
}

/// Why `name` breaks the name rule of streams, topics, consumers and groups, or `null`.
#[napi]
pub fn name_problem(name: String) -> Option<String> {
    rill_client::name_problem(&name).map(|p| p.to_string())
}

/// The longest name, in bytes.
#[napi]
pub fn name_len_max() -> u32 {
    u32::try_from(rill_client::NAME_LEN_MAX).unwrap_or(u32::MAX)
}

/// The marker that starts the reason of every error the addon makes.
#[napi]
pub fn error_marker() -> String {
    error::MARKER.to_owned()
}

/// This addon's version.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
