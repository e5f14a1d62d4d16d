//! Cursor readers: the caller keeps the position.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use pyo3::prelude::*;
use rill_client::Reader;

use crate::convert::PyRecord;
use crate::error::to_py;
use crate::runtime::{InRuntime, spawn};

/// A cursor over every partition of a topic (`rill_client::Reader`): `next()` returns
/// records until it has caught up with the tail it saw, then `None`.
#[pyclass(frozen, module = "rill._native", name = "Reader")]
#[derive(Debug)]
pub(crate) struct PyReader {
    /// One `next()` at a time: a second waits for the first.
    reader: Arc<tokio::sync::Mutex<InRuntime<Reader<Bytes>>>>,
    /// The offsets after the last `next()` that completed, for `offsets()` while
    /// another `next()` holds the reader.
    offsets: Arc<parking_lot::Mutex<BTreeMap<u32, u64>>>,
    name: String,
}

impl PyReader {
    pub(crate) fn new(reader: Reader<Bytes>) -> Self {
        let offsets = reader.offsets().0;
        Self {
            name: reader.name().to_owned(),
            reader: Arc::new(tokio::sync::Mutex::new(InRuntime::new(reader))),
            offsets: Arc::new(parking_lot::Mutex::new(offsets)),
        }
    }
}

#[pymethods]
impl PyReader {
    /// The reader's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The next record as a tuple, or `None` once caught up. A record that cannot be
    /// delivered is raised once (`DataLossError`, `CorruptError`) and reading goes on.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (reader, offsets) = (Arc::clone(&self.reader), Arc::clone(&self.offsets));
        spawn(py, async move {
            let mut guard = reader.lock().await;
            let Some(reader) = guard.get_mut() else {
                return Ok(None);
            };
            // Records handed out by `try_next` since the last call count for
            // `offsets()` while this one waits.
            *offsets.lock() = reader.offsets().0;
            let next = reader.next().await;
            *offsets.lock() = reader.offsets().0;
            next.transpose().map(|r| r.map(PyRecord))
        })
    }

    /// The next record if one was fetched already, without an awaitable; else `None`,
    /// and `next()` is needed (it says whether the reader caught up).
    fn try_next(&self, py: Python<'_>) -> PyResult<Option<PyRecord>> {
        let Ok(mut guard) = self.reader.try_lock() else {
            return Ok(None);
        };
        let Some(reader) = guard.get_mut() else {
            return Ok(None);
        };
        reader
            .try_next()
            .transpose()
            .map(|r| r.map(PyRecord))
            .map_err(|e| to_py(py, e))
    }

    /// Up to `max` records fetched already, as `try_next` hands them out, in one call:
    /// an empty list says only that `next()` is needed (`poll()` in Python).
    fn try_take(&self, py: Python<'_>, max: usize) -> PyResult<Vec<PyRecord>> {
        let Ok(mut guard) = self.reader.try_lock() else {
            return Ok(Vec::new());
        };
        let Some(reader) = guard.get_mut() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        while out.len() < max {
            match reader.try_next() {
                None => break,
                Some(Ok(r)) => out.push(PyRecord(r)),
                // A raw reader's values always decode; should one not, what came
                // before it is handed out and it is raised by the next call.
                Some(Err(e)) if out.is_empty() => return Err(to_py(py, e)),
                Some(Err(_)) => break,
            }
        }
        Ok(out)
    }

    /// Per partition, the next offset after the records handed out so far: save it and
    /// resume with `topic.records(name, offsets=saved)`.
    fn offsets(&self) -> BTreeMap<u32, u64> {
        match self.reader.try_lock() {
            Ok(guard) => guard
                .get()
                .map_or_else(|| self.offsets.lock().clone(), |r| r.offsets().0),
            Err(_) => self.offsets.lock().clone(),
        }
    }
}
