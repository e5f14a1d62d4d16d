//! Cursor readers: the caller keeps the position (per-partition next offsets).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rill_proto::ranges::RangeMap;

use crate::ErrorCode;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::ahead::{Ahead, Shape};
use crate::{ClientError, Record, Topic};

/// Per-partition next offsets of a reader: save them, and resume with
/// [`Reader::from_offsets`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets(pub BTreeMap<u32, u64>);

pub(crate) type Decode<V> = Arc<dyn Fn(Bytes) -> Result<V, String> + Send + Sync>;

/// Reads every partition of a topic from a position the caller keeps.
///
/// A fresh reader starts at the beginning; [`Reader::next`] returns `None` once it has
/// caught up with the tail it saw. A record that fails to decode is returned as an
/// error carrying its position, and reading continues after it.
///
/// Records that cannot be delivered are returned once as an error naming them —
/// [`ClientError::DataLoss`] (damaged on the broker) or [`ClientError::Corrupt`] (a
/// batch that fails its checks) — and reading continues after them (their range counts
/// as read in [`Reader::offsets`]). A loss whose end is not known yet (damage at the end
/// of a partition) is reported once; the partition then counts as caught up at its start
/// until the end is known.
///
/// On an elastic topic (docs/RANGES.md) the reader reads a range only once it has handed
/// out every record of its parents below their seals, so each key's records come in
/// the order they were appended across any number of splits and merges. It reads the
/// topic's ranges when it starts and again whenever it has caught up, so it follows
/// splits made meanwhile. Its [`Offsets`] are keyed by range and are best kept as an
/// opaque token: ranges missing from them start at their beginning.
pub struct Reader<V> {
    topic: Topic,
    name: String,
    decode: Decode<V>,
    /// Next offset to fetch, per partition.
    fetch_at: Vec<u64>,
    /// Next offset after the last record handed out, per partition.
    handed: Vec<u64>,
    /// The log end seen by the last fetch of each partition.
    ends: Vec<Option<u64>>,
    /// The start of an open-ended loss already reported, per partition.
    reported: Vec<Option<u64>>,
    buffered: VecDeque<Record>,
    next_partition: usize,
    start: Option<Offsets>,
    initialized: bool,
    max_bytes: u32,
    /// The fetch the reader will make next, already under way while the caller takes
    /// the records of the one before (at most one: one more `max_bytes` in memory).
    ahead: Option<Ahead>,
    /// An elastic topic's ranges, as last read: which ranges are ready is read from them.
    ranges: Option<Arc<RangeMap>>,
}

impl<V> std::fmt::Debug for Reader<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("topic", &self.topic.name())
            .field("name", &self.name)
            .field("offsets", &self.offsets())
            .finish()
    }
}

impl<V> Reader<V> {
    pub(crate) fn new(topic: Topic, name: &str, decode: Decode<V>) -> Self {
        Self {
            topic,
            name: name.to_owned(),
            decode,
            fetch_at: Vec::new(),
            handed: Vec::new(),
            ends: Vec::new(),
            reported: Vec::new(),
            buffered: VecDeque::new(),
            next_partition: 0,
            start: None,
            initialized: false,
            max_bytes: 1 << 20,
            ahead: None,
            ranges: None,
        }
    }

    /// Resumes from saved offsets (partitions not named start at the beginning).
    pub fn from_offsets(mut self, offsets: Offsets) -> Self {
        self.start = Some(offsets);
        self.initialized = false;
        self.ahead = None;
        self
    }

    /// Bytes fetched per request (default 1 MiB). A reader holds up to two answers: the
    /// records it hands out and the fetch it makes ahead meanwhile.
    pub fn max_bytes(mut self, bytes: u32) -> Self {
        self.max_bytes = bytes.max(1);
        self.ahead = None;
        self
    }

    /// The reader's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Next offset per partition after the records handed out so far.
    pub fn offsets(&self) -> Offsets {
        if !self.initialized {
            return self.start.clone().unwrap_or_default();
        }
        Offsets(
            self.handed
                .iter()
                .enumerate()
                .map(|(p, &o)| (p as u32, o))
                .collect(),
        )
    }

    async fn init(&mut self) -> Result<(), ClientError> {
        let d = self.topic.describe().await?;
        self.ranges = d.range_map.clone();
        self.fetch_at.clear();
        self.handed.clear();
        self.ends.clear();
        self.reported.clear();
        self.grow(d.config.partitions as usize);
        self.buffered.clear();
        self.ahead = None;
        self.initialized = true;
        Ok(())
    }

    /// Tracks partitions (ranges) up to `partitions`, each new one from its offset in
    /// the saved position, or its beginning.
    fn grow(&mut self, partitions: usize) {
        let start = self.start.as_ref();
        for p in self.fetch_at.len()..partitions {
            let at = start
                .and_then(|s| s.0.get(&(p as u32)).copied())
                .unwrap_or(0);
            self.fetch_at.push(at);
            self.handed.push(at);
            self.ends.push(None);
            self.reported.push(None);
        }
    }

    /// Reads an elastic topic's ranges again; whether they changed (new ranges, or
    /// ranges sealed since), so the reader has more to look at.
    async fn refresh_ranges(&mut self) -> Result<bool, ClientError> {
        let Some(before) = self.ranges.as_ref().map(|m| m.epoch()) else {
            return Ok(false);
        };
        let d = self.topic.describe().await?;
        let Some(map) = d.range_map else {
            return Err(ClientError::Protocol(format!(
                "{}/{} is no longer an elastic topic",
                self.topic.stream, self.topic.name
            )));
        };
        if map.epoch() < before || map.ranges().len() < self.fetch_at.len() {
            // Another topic of the same name (deleted and created again), or a stale
            // answer: nothing the reader can follow.
            return Err(ClientError::Protocol(format!(
                "the ranges of {}/{} went back from epoch {before} to {}",
                self.topic.stream,
                self.topic.name,
                map.epoch()
            )));
        }
        let changed = map.epoch() != before;
        self.grow(map.ranges().len());
        self.ranges = Some(map);
        Ok(changed)
    }

    /// Per range of an elastic topic, whether it is ready: every parent is finished,
    /// that is ready itself, sealed, and handed out to its seal. Parents have smaller
    /// ids than their children, so one pass in id order settles all. `None` for a
    /// plain topic (every partition is ready).
    fn readiness(&self) -> Option<Vec<bool>> {
        let map = self.ranges.as_ref()?;
        let n = self.fetch_at.len();
        let mut ready = vec![false; n];
        let mut finished = vec![false; n];
        for r in map.ranges() {
            let id = r.id as usize;
            if id >= n {
                continue;
            }
            ready[id] = r
                .parents
                .iter()
                .all(|&p| finished.get(p as usize).copied().unwrap_or(false));
            finished[id] = ready[id] && r.sealed.is_some_and(|end| self.handed[id] >= end);
        }
        Some(ready)
    }

    /// The next record, `None` once caught up.
    pub async fn next(&mut self) -> Option<Result<Record<V>, ClientError>> {
        if !self.initialized
            && let Err(e) = self.init().await
        {
            return Some(Err(e));
        }
        loop {
            if let Some(record) = self.buffered.pop_front() {
                return Some(self.hand_out(record));
            }
            let Some(p) = self.pending() else {
                // Caught up with the tails seen. An elastic topic may have split
                // meanwhile: its new ranges, or a parent's seal, are read first.
                match self.refresh_ranges().await {
                    Ok(true) => {
                        self.ends.iter_mut().for_each(|e| *e = None);
                        self.ahead = None;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => return Some(Err(e)),
                }
                // A later call looks at the tails again.
                self.ends.iter_mut().for_each(|e| *e = None);
                self.ahead = None;
                return None;
            };
            self.next_partition = (p + 1) % self.fetch_at.len();
            let Err(e) = self.fetch(p).await else {
                continue;
            };
            let Some((_, from, to)) = e.lost_range() else {
                return Some(Err(e));
            };
            match to {
                Some(to) => {
                    // Nothing is buffered for `p` (it is fetched only once drained), so
                    // the whole position moves past the range.
                    self.fetch_at[p] = self.fetch_at[p].max(to);
                    self.handed[p] = self.handed[p].max(to);
                    self.reported[p] = None;
                    return Some(Err(e));
                }
                None => {
                    // Nothing after it can be read yet: done with `p` for this pass.
                    self.ends[p] = Some(self.fetch_at[p]);
                    if self.reported[p] != Some(from) {
                        self.reported[p] = Some(from);
                        return Some(Err(e));
                    }
                }
            }
        }
    }

    /// The next record if one was fetched already, without waiting: `None` says only
    /// that nothing is buffered now (call [`Reader::next`]), not that the reader caught
    /// up. For handing out a fetched batch without an `await` per record (the SDKs for
    /// other languages do); mixing it with [`Reader::next`] keeps the order.
    pub fn try_next(&mut self) -> Option<Result<Record<V>, ClientError>> {
        let record = self.buffered.pop_front()?;
        Some(self.hand_out(record))
    }

    fn hand_out(&mut self, record: Record) -> Result<Record<V>, ClientError> {
        self.handed[record.partition as usize] = record.offset + 1;
        match (self.decode)(record.value.clone()) {
            Ok(v) => Ok(record.map(v)),
            Err(reason) => Err(ClientError::Decode {
                partition: record.partition,
                offset: record.offset,
                reason,
            }),
        }
    }

    /// The partition the next fetch reads: the first from `next_partition` on, in
    /// turn, that has not caught up with the tail its last fetch saw.
    fn pending(&self) -> Option<usize> {
        let partitions = self.fetch_at.len();
        let ready = self.readiness();
        (0..partitions)
            .map(|i| (self.next_partition + i) % partitions)
            .filter(|&p| ready.as_ref().is_none_or(|r| r[p]))
            .find(|&p| self.ends[p].is_none_or(|end| self.fetch_at[p] < end))
    }

    async fn fetch(&mut self, p: usize) -> Result<(), ClientError> {
        let at = self.fetch_at[p];
        let fetched = match &mut self.ahead {
            // The answer of a fetch made ahead counts as if it were made now: it saw
            // a tail that was there before this call.
            Some(ahead) if ahead.is_for(p as u32, at) => {
                let answer = ahead.answer().await;
                self.ahead = None;
                answer.map(|(f, mut records)| {
                    self.buffered.append(&mut records);
                    f
                })
            }
            _ => {
                self.ahead = None;
                self.topic
                    .fetch_into(
                        p as u32,
                        at,
                        self.max_bytes,
                        Duration::ZERO,
                        0,
                        &mut self.buffered,
                    )
                    .await
            }
        };
        match fetched {
            Ok(f) => {
                self.fetch_at[p] = f.next_offset.max(at);
                self.ends[p] = Some(f.log_end);
                // Fetch what comes next while the caller takes these records: the
                // same fetch the reader would make once they are drained.
                if !self.buffered.is_empty()
                    && let Some(next) = self.pending()
                {
                    let shape = Shape {
                        max_bytes: self.max_bytes,
                        max_wait: Duration::ZERO,
                        min_bytes: 0,
                    };
                    self.ahead = Some(Ahead::spawn(
                        &self.topic,
                        next as u32,
                        self.fetch_at[next],
                        shape,
                    ));
                }
                Ok(())
            }
            Err(ClientError::Server {
                code: ErrorCode::OffsetBeforeStart,
                offset: Some(start),
                ..
            }) => {
                // Retention removed what we wanted; carry on from what is left.
                tracing::warn!(reader = %self.name, partition = p, from = at, to = start, "records were deleted by retention; skipping ahead");
                self.fetch_at[p] = start;
                self.handed[p] = self.handed[p].max(start);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether `topic` is an elastic topic (`false` if it cannot be looked up now: that is
/// the caller's to wait for or report, as before elastic topics).
pub(crate) async fn is_elastic(topic: &Topic) -> bool {
    topic
        .client
        .shape(&topic.stream, &topic.name)
        .await
        .is_ok_and(|(_, ranges)| ranges.is_some())
}
