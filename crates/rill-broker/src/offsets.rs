//! Durable stored offsets of named consumers (and, later, groups).
//!
//! Every store is a record in an internal log of the same engine (`offsets/` in the
//! data directory, `fsync=always`): key `stream \0 topic \0 partition \0 consumer`,
//! value the 8-byte little-endian offset, or empty for a deletion. The live map is
//! kept in memory and rebuilt by replaying the log on open. When the log grows well past
//! the live data it is compacted: a snapshot is written to `offsets.compact/`, then the
//! directories are swapped with two renames; open finishes an interrupted swap.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use rill_format::{BatchBuilder, BatchHeader, BatchView, NewRecord};
use rill_storage::{DurableTicket, LogConfig, LogEnv, PartitionLog, StorageError};

use crate::BrokerError;
use crate::catalog::catalog_err;

/// Back-off between reopens of a poisoned offsets log.
const HEAL_BACKOFF: Duration = Duration::from_secs(1);

/// Compact once the log is this large and four times the live data.
const COMPACT_BYTES_MIN: u64 = 16 << 20;

/// Identifies one stored offset.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct OffsetKey {
    /// Stream name.
    pub stream: String,
    /// Topic name.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Consumer (or group) name.
    pub consumer: String,
}

impl OffsetKey {
    fn encode(&self) -> Vec<u8> {
        format!(
            "{}\0{}\0{}\0{}",
            self.stream, self.topic, self.partition, self.consumer
        )
        .into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut parts = text.split('\0');
        let key = Self {
            stream: parts.next()?.to_owned(),
            topic: parts.next()?.to_owned(),
            partition: parts.next()?.parse().ok()?,
            consumer: parts.next()?.to_owned(),
        };
        parts.next().is_none().then_some(key)
    }
}

/// Stored offsets and the write that stored each; a later write wins.
type Live = HashMap<OffsetKey, (u64, DurableTicket)>;

#[derive(Debug)]
struct Inner {
    log: Arc<PartitionLog>,
    live: Live,
}

/// A store appended to the offsets log but not yet known durable.
#[derive(Debug)]
pub(crate) struct PendingStore {
    log: Arc<PartitionLog>,
    ticket: DurableTicket,
}

/// The stored-offset table.
#[derive(Debug)]
pub(crate) struct OffsetStore {
    data_dir: PathBuf,
    env: LogEnv,
    compact_bytes_min: u64,
    // Every change to `Inner` is an append followed by one map update; a panic between
    // leaves a map that is at worst ahead of a write that failed, which the next reopen
    // (replaying the log) corrects. So a lock without poisoning.
    inner: Mutex<Inner>,
    /// When the next reopen of a poisoned log may be tried.
    heal_at: Mutex<Instant>,
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 64 << 20,
        ..LogConfig::default()
    }
}

impl OffsetStore {
    /// Opens (recovering) the store in `data_dir`.
    #[cfg(test)]
    pub(crate) fn open(data_dir: &Path) -> Result<Self, BrokerError> {
        Self::open_with(data_dir, COMPACT_BYTES_MIN)
    }

    /// Like [`OffsetStore::open`], compacting once the log passes `compact_bytes_min`.
    #[cfg(test)]
    pub(crate) fn open_with(data_dir: &Path, compact_bytes_min: u64) -> Result<Self, BrokerError> {
        Self::open_env(data_dir, &LogEnv::default(), compact_bytes_min)
    }

    /// Opens the store in an environment (the broker's disk and file cache).
    pub(crate) fn open_in(data_dir: &Path, env: &LogEnv) -> Result<Self, BrokerError> {
        Self::open_env(data_dir, env, COMPACT_BYTES_MIN)
    }

    fn open_env(
        data_dir: &Path,
        env: &LogEnv,
        compact_bytes_min: u64,
    ) -> Result<Self, BrokerError> {
        let io = env.io.as_ref();
        let dir = data_dir.join("offsets");
        let compact = data_dir.join("offsets.compact");
        let old = data_dir.join("offsets.old");
        if !io.exists(&dir) && io.exists(&compact) {
            // Crashed between the two renames: the snapshot is complete.
            io.rename(&compact, &dir)
                .map_err(catalog_err("rename", &compact))?;
            io.sync_dir(data_dir)
                .map_err(catalog_err("sync directory", data_dir))?;
        }
        for leftover in [&compact, &old] {
            if io.exists(leftover) {
                io.remove_dir_all(leftover)
                    .map_err(catalog_err("remove", leftover))?;
            }
        }
        let (log, live) = replay(&dir, env)?;
        let store = Self {
            data_dir: data_dir.to_path_buf(),
            env: env.clone(),
            compact_bytes_min,
            inner: Mutex::new(Inner {
                log: Arc::new(log),
                live,
            }),
            heal_at: Mutex::new(Instant::now()),
        };
        store.heal_damage(&mut store.lock())?;
        Ok(store)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Why stores are refused, if they are (the log is poisoned after a failed write
    /// or fsync, a full disk say, or damaged).
    pub(crate) fn failure(&self) -> Option<String> {
        self.lock().log.failure()
    }

    /// Whether a reopen of a poisoned log is due.
    pub(crate) fn heal_due(&self, now: Instant) -> bool {
        self.lock().log.poisoned().is_some() && *self.heal_at.lock() <= now
    }

    /// Reopens the log with recovery and rebuilds the table from it: what a failed
    /// write left unsynced is gone from both (blocking).
    pub(crate) fn reopen(&self) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        let _ = inner.log.close();
        *self.heal_at.lock() = Instant::now() + HEAL_BACKOFF;
        let (log, live) = replay(&self.data_dir.join("offsets"), &self.env)?;
        inner.log = Arc::new(log);
        inner.live = live;
        tracing::warn!("offsets log reopened with recovery");
        self.heal_damage(&mut inner)
    }

    /// The stored offset, if any.
    pub(crate) fn get(&self, key: &OffsetKey) -> Option<u64> {
        self.lock().live.get(key).map(|(offset, _)| *offset)
    }

    /// Stores `offset` durably (blocking).
    pub(crate) fn store(&self, key: OffsetKey, offset: u64) -> Result<(), BrokerError> {
        self.write(key, Some(offset)).map(drop)
    }

    /// Deletes the stored offset; returns whether there was one (blocking).
    pub(crate) fn delete(&self, key: OffsetKey) -> Result<bool, BrokerError> {
        self.write(key, None)
    }

    /// Every stored offset of a topic, for describing and for deleting the topic.
    pub(crate) fn for_topic(&self, stream: &str, topic: &str) -> Vec<(OffsetKey, u64)> {
        let mut out: Vec<_> = self
            .lock()
            .live
            .iter()
            .filter(|(k, _)| k.stream == stream && k.topic == topic)
            .map(|(k, (o, _))| (k.clone(), *o))
            .collect();
        out.sort();
        out
    }

    fn write(&self, key: OffsetKey, offset: Option<u64>) -> Result<bool, BrokerError> {
        let (pending, existed) = self.begin(key, offset)?;
        self.finish(pending)?;
        Ok(existed)
    }

    /// Stores `offset` in two steps: `begin_store` appends (a write, no fsync) and
    /// `finish` waits until it is durable. A caller that must order stores with its own
    /// decisions (group commits against ownership changes) calls `begin_store` under its
    /// lock and `finish` after releasing it.
    pub(crate) fn begin_store(
        &self,
        key: OffsetKey,
        offset: u64,
    ) -> Result<PendingStore, BrokerError> {
        self.begin(key, Some(offset)).map(|(pending, _)| pending)
    }

    /// Deletes the stored offset in two steps, like [`OffsetStore::begin_store`]; also
    /// says whether one was stored.
    pub(crate) fn begin_delete(&self, key: OffsetKey) -> Result<(PendingStore, bool), BrokerError> {
        self.begin(key, None)
    }

    fn begin(
        &self,
        key: OffsetKey,
        offset: Option<u64>,
    ) -> Result<(PendingStore, bool), BrokerError> {
        let (pending, existed) = self.begin_many(vec![(key, offset)])?;
        Ok((pending, existed[0]))
    }

    /// Stores and deletes several offsets in one batch of the log, so all of them or
    /// none survive a crash (a torn batch is cut whole by recovery): a group reset or
    /// delete is never half done. Also says, per change, whether an offset was stored.
    /// Two steps, like [`OffsetStore::begin_store`].
    pub(crate) fn begin_many(
        &self,
        changes: Vec<(OffsetKey, Option<u64>)>,
    ) -> Result<(PendingStore, Vec<bool>), BrokerError> {
        let encoded: Vec<(Vec<u8>, Option<[u8; 8]>)> = changes
            .iter()
            .map(|(k, o)| (k.encode(), o.map(u64::to_le_bytes)))
            .collect();
        let mut builder = BatchBuilder::new();
        for (key, value) in &encoded {
            builder
                .push(NewRecord::value(value.as_ref().map_or(&[][..], |v| &v[..])).key(key))
                .map_err(StorageError::from)?;
        }
        let batch = builder.finish().map_err(StorageError::from)?;
        let mut inner = self.lock();
        let (_, ticket) = inner.log.append_deferred(&batch)?;
        // Map updates happen in log order, under the same lock as the write.
        let existed = changes
            .into_iter()
            .map(|(key, offset)| match offset {
                Some(o) => inner.live.insert(key, (o, ticket)).is_some(),
                None => inner.live.remove(&key).is_some(),
            })
            .collect();
        Ok((
            PendingStore {
                log: Arc::clone(&inner.log),
                ticket,
            },
            existed,
        ))
    }

    /// Waits until a store begun with `begin_store` is durable.
    pub(crate) fn finish(&self, pending: PendingStore) -> Result<(), BrokerError> {
        pending.log.wait_durable(pending.ticket)?;
        self.maybe_compact()
    }

    fn maybe_compact(&self) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        let size = inner.log.size_bytes();
        let live_bytes: u64 = inner
            .live
            .keys()
            .map(|k| k.encode().len() as u64 + 32)
            .sum();
        if size < self.compact_bytes_min || size < 4 * live_bytes.max(1) {
            return Ok(());
        }
        self.compact(&mut inner)
    }

    /// The broker's own recovery of a damaged offsets log: the stores in the damaged
    /// ranges are lost (their consumers resume from an earlier store, or where they
    /// start without one: records are delivered again, never skipped), and the log is
    /// rewritten from the table replayed around them, so the damage does not refuse
    /// every later store. There is no operator to accept it, unlike a topic's.
    fn heal_damage(&self, inner: &mut Inner) -> Result<(), BrokerError> {
        let damage = inner.log.damage();
        if damage.is_empty() {
            return Ok(());
        }
        for range in &damage {
            tracing::error!(
                range = %range.describe(),
                "stored offsets in a damaged range of the offsets log are lost; rewriting the log without them"
            );
        }
        self.compact(inner)
    }

    /// Rewrites the log as a snapshot of the table: written aside, then swapped in by
    /// two renames (an open after a crash between them takes the complete snapshot).
    fn compact(&self, inner: &mut Inner) -> Result<(), BrokerError> {
        let size = inner.log.size_bytes();
        let io = self.env.io.as_ref();
        let dir = self.data_dir.join("offsets");
        let compact = self.data_dir.join("offsets.compact");
        let old = self.data_dir.join("offsets.old");
        if io.exists(&compact) {
            io.remove_dir_all(&compact)
                .map_err(catalog_err("remove", &compact))?;
        }
        let snapshot = PartitionLog::open_in(&compact, log_config(), &self.env)?;
        let mut entries: Vec<_> = inner
            .live
            .iter()
            .map(|(k, (o, _))| (k.encode(), *o))
            .collect();
        entries.sort();
        for chunk in entries.chunks(1000) {
            let mut builder = BatchBuilder::new();
            for (key, offset) in chunk {
                builder
                    .push(NewRecord::value(&offset.to_le_bytes()).key(key))
                    .map_err(StorageError::from)?;
            }
            snapshot.append(&builder.finish().map_err(StorageError::from)?)?;
        }
        snapshot.close()?;
        drop(snapshot);
        inner.log.close()?;
        io.rename(&dir, &old).map_err(catalog_err("rename", &dir))?;
        io.rename(&compact, &dir)
            .map_err(catalog_err("rename", &compact))?;
        io.sync_dir(&self.data_dir)
            .map_err(catalog_err("sync directory", &self.data_dir))?;
        io.remove_dir_all(&old)
            .map_err(catalog_err("remove", &old))?;
        inner.log = Arc::new(PartitionLog::open_in(&dir, log_config(), &self.env)?);
        for (_, ticket) in inner.live.values_mut() {
            *ticket = DurableTicket::DURABLE;
        }
        tracing::info!(
            before_bytes = size,
            after_bytes = inner.log.size_bytes(),
            "compacted the offsets log"
        );
        Ok(())
    }

    /// Syncs and closes the log.
    pub(crate) fn close(&self) -> Result<(), BrokerError> {
        Ok(self.lock().log.close()?)
    }
}

/// Opens the offsets log and replays it into the live table.
fn replay(dir: &Path, env: &LogEnv) -> Result<(PartitionLog, Live), BrokerError> {
    let log = PartitionLog::open_in(dir, log_config(), env)?;
    let mut live = HashMap::new();
    let mut at = log.log_start();
    while at < log.next_offset() {
        let read = match log.read(at, 4 << 20) {
            Ok(read) => read,
            Err(StorageError::DataLoss { to: Some(to), .. }) => {
                // Damaged stores are lost; later ones still count (a later store of the
                // same key wins anyway).
                tracing::error!(from = at, to, "stored offsets in a damaged range are lost");
                at = to;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // Step batch by batch by the headers (a read returns only batches whose header
        // parses), so a batch with a damaged body loses its stores and no others: an
        // iterator over the read stops at the first bad batch, and the read's
        // `next_offset` would then skip the intact batches after it.
        let mut rest = &read.bytes[..];
        while !rest.is_empty() {
            let Some(len) = BatchHeader::parse(rest)
                .ok()
                .map(|h| h.batch_length as usize)
                .filter(|&len| len <= rest.len())
            else {
                return Err(StorageError::Corrupt {
                    path: dir.to_path_buf(),
                    position: 0,
                    reason: format!("a read of the offsets log at {at} holds a partial batch"),
                }
                .into());
            };
            let (bytes, tail) = rest.split_at(len);
            rest = tail;
            let batch = match BatchView::parse(bytes) {
                Ok(batch) => batch,
                Err(e) => {
                    let offset = BatchHeader::parse(bytes).map_or(at, |h| h.base_offset);
                    tracing::error!(offset, error = %e, "skipping a damaged batch of stored offsets");
                    continue;
                }
            };
            for record in batch.records() {
                let Some(key) = record.key.and_then(OffsetKey::decode) else {
                    tracing::warn!(offset = record.offset, "skipping unreadable offset record");
                    continue;
                };
                match <[u8; 8]>::try_from(record.value) {
                    Ok(v) => {
                        live.insert(key, (u64::from_le_bytes(v), DurableTicket::DURABLE));
                    }
                    Err(_) => {
                        live.remove(&key);
                    }
                }
            }
        }
        if read.next_offset <= at {
            break;
        }
        at = read.next_offset;
    }
    Ok((log, live))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(consumer: &str, partition: u32) -> OffsetKey {
        OffsetKey {
            stream: "s".into(),
            topic: "t".into(),
            partition,
            consumer: consumer.into(),
        }
    }

    #[test]
    fn stores_survive_reopen_and_deletes_stick() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path()).unwrap();
        store.store(key("a", 0), 5).unwrap();
        store.store(key("a", 0), 9).unwrap();
        store.store(key("b", 1), 3).unwrap();
        assert!(store.delete(key("b", 1)).unwrap());
        assert!(!store.delete(key("b", 1)).unwrap());
        drop(store);
        let store = OffsetStore::open(dir.path()).unwrap();
        assert_eq!(store.get(&key("a", 0)), Some(9));
        assert_eq!(store.get(&key("b", 1)), None);
        assert_eq!(store.for_topic("s", "t"), vec![(key("a", 0), 9)]);
    }

    #[test]
    fn compaction_keeps_live_offsets_and_shrinks_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open_with(dir.path(), 16 * 1024).unwrap();
        // Enough stores of a few keys to pass the compaction threshold several times.
        let mut last = HashMap::new();
        for i in 0..1500u64 {
            let k = key(&format!("c{}", i % 7), (i % 3) as u32);
            store.store(k.clone(), i).unwrap();
            last.insert(k, i);
        }
        let size = store.lock().log.size_bytes();
        assert!(size < 16 * 1024, "compacted to {size} bytes");
        drop(store);
        let store = OffsetStore::open(dir.path()).unwrap();
        for (k, v) in last {
            assert_eq!(store.get(&k), Some(v));
        }
    }

    #[test]
    fn an_interrupted_swap_is_finished_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path()).unwrap();
        store.store(key("a", 0), 42).unwrap();
        store.close().unwrap();
        drop(store);
        // Simulate a crash after the first rename: only the complete snapshot remains.
        std::fs::rename(
            dir.path().join("offsets"),
            dir.path().join("offsets.compact"),
        )
        .unwrap();
        let store = OffsetStore::open(dir.path()).unwrap();
        assert_eq!(store.get(&key("a", 0)), Some(42));
    }
}
