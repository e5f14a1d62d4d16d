//! Cursor readers: the caller keeps the position.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;
use rill_client::Reader;

use crate::convert::{PackedRecords, offset_out, pack_records};
use crate::error::to_reason;
use crate::runtime::{InRuntime, spawn};

/// Most results one `poll()` returns: each is a copy JS holds at once.
pub(crate) const POLL_RESULTS_MAX: u32 = 100_000;

/// What one `poll()` brings: an error that names records that cannot be delivered
/// (its marked reason, decoded by JS; reading goes on after them), or records.
#[napi(object)]
#[allow(missing_debug_implementations)] // `Buffer` has no `Debug`.
pub struct PollOut {
    pub error: Option<String>,
    pub records: PackedRecords,
}

/// A cursor over every partition of a topic (`rill_client::Reader`).
#[napi]
#[derive(Debug)]
pub struct NativeReader {
    /// One call at a time: a second waits for the first.
    reader: Arc<tokio::sync::Mutex<InRuntime<Reader<Bytes>>>>,
    /// The offsets after the last call that completed, for `offsets()` while another
    /// call holds the reader.
    offsets: Arc<parking_lot::Mutex<BTreeMap<u32, u64>>>,
    name: String,
}

impl NativeReader {
    pub(crate) fn new(reader: Reader<Bytes>) -> Self {
        let offsets = reader.offsets().0;
        Self {
            name: reader.name().to_owned(),
            reader: Arc::new(tokio::sync::Mutex::new(InRuntime::new(reader))),
            offsets: Arc::new(parking_lot::Mutex::new(offsets)),
        }
    }
}

#[napi]
impl NativeReader {
    /// The reader's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// What is there now, up to `maxResults` records: what one fetch of one partition
    /// brought (records in order, or an error that names records that cannot be
    /// delivered), so at most one batch per partition. No records and no error once
    /// caught up with the tails it saw.
    #[napi]
    pub fn poll<'env>(
        &self,
        env: &'env Env,
        max_results: u32,
    ) -> napi::Result<PromiseRaw<'env, PollOut>> {
        let max_results = max_results.clamp(1, POLL_RESULTS_MAX) as usize;
        let (reader, offsets) = (Arc::clone(&self.reader), Arc::clone(&self.offsets));
        spawn(env, async move {
            let mut guard = reader.lock().await;
            let mut records = Vec::new();
            let mut error = None;
            if let Some(reader) = guard.get_mut() {
                match reader.next().await {
                    None => {}
                    Some(Ok(r)) => records.push(r),
                    Some(Err(e))
                        if e.lost_range().is_some()
                            || matches!(e, rill_client::ClientError::Corrupt { .. }) =>
                    {
                        error = Some(to_reason(e));
                    }
                    Some(Err(e)) => {
                        *offsets.lock() = reader.offsets().0;
                        return Err(e.into());
                    }
                }
                // The rest of that fetch, handed out without waiting. A raw reader's
                // values always decode.
                while records.len() < max_results
                    && let Some(Ok(r)) = reader.try_next()
                {
                    records.push(r);
                }
                *offsets.lock() = reader.offsets().0;
            }
            Ok(PollOut {
                error,
                records: pack_records(&records),
            })
        })
    }

    /// Per partition, the next offset after the records handed out so far, as
    /// `[partition, offset]` pairs: save them and resume with `records(name, saved)`.
    #[napi]
    pub fn offsets(&self) -> Vec<Vec<i64>> {
        let map = match self.reader.try_lock() {
            Ok(guard) => guard
                .get()
                .map_or_else(|| self.offsets.lock().clone(), |r| r.offsets().0),
            Err(_) => self.offsets.lock().clone(),
        };
        map.into_iter()
            .map(|(p, o)| vec![i64::from(p), offset_out(o)])
            .collect()
    }
}
