//! Rill's Python SDK, its native half: the module `rill._native`, a thin layer over the
//! Rust SDK (`rill-client`) so that Python gets the same behaviour, routing and
//! idempotence, embedded (`open`) or over TCP (`connect`).
//!
//! Values cross as bytes and typed headers as `(type_name, value)` pairs; the Python
//! package `rill` (in `python/rill`) adds codecs, records as objects, `async for` and
//! the exception classes this module raises.
//!
//! Architecture Invariant: every awaitable is made by `runtime::spawn`, which runs the
//! SDK's future without the GIL (a first poll on the loop's thread, the rest on tokio),
//! maps its error to a `rill.errors` class and catches panics; tokio threads never call
//! into Python (outcomes reach the loop's thread through `runtime`'s mailbox). No Python input reaches the SDK unchecked (a
//! bad one is an `InvalidArgumentError`, never a panic).

#![deny(missing_docs)]

mod client;
mod consumer;
mod convert;
mod error;
mod group;
mod producer;
mod reader;
mod runtime;
mod topic;

use pyo3::prelude::*;

/// The partition of `key` among `partitions` (`xxh3_64(key) % partitions`), as every
/// SDK computes it (docs/PROTOCOL.md §6).
#[pyfunction]
fn partition_for_key(py: Python<'_>, key: &Bound<'_, PyAny>, partitions: u32) -> PyResult<u32> {
    let key = convert::bytes_of("a key", key)?;
    if partitions == 0 {
        return Err(error::invalid_py(py, "a topic has at least one partition"));
    }
    Ok(rill_client::partition_for_key(&key, partitions))
}

/// Why `name` breaks the name rule of streams, topics, consumers and groups, or
/// `None` if it does not.
#[pyfunction]
fn name_problem(name: &str) -> Option<String> {
    rill_client::name_problem(name).map(|p| p.to_string())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    m.add_function(wrap_pyfunction!(client::open, m)?)?;
    m.add_function(wrap_pyfunction!(partition_for_key, m)?)?;
    m.add_function(wrap_pyfunction!(name_problem, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::quiesce, m)?)?;
    m.add_function(wrap_pyfunction!(convert::encode_json, m)?)?;
    m.add_function(wrap_pyfunction!(convert::decode_json, m)?)?;
    m.add_function(wrap_pyfunction!(convert::encode_msgpack, m)?)?;
    m.add_function(wrap_pyfunction!(convert::decode_msgpack, m)?)?;
    m.add_class::<client::PyClient>()?;
    m.add_class::<topic::PyTopic>()?;
    m.add_class::<reader::PyReader>()?;
    m.add_class::<producer::PyProducer>()?;
    m.add_class::<consumer::PyConsumer>()?;
    m.add_class::<group::PyGroupConsumer>()?;
    m.add("NAME_LEN_MAX", rill_client::NAME_LEN_MAX)?;
    m.add("HEADER_TYPES", convert::HEADER_TYPES.to_vec())?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
