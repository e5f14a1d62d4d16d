//! A named consumer of an elastic topic (docs/RANGES.md §6.2): it reads the whole topic,
//! every range through a consumer of its own (with the broker storing each range's
//! offset under the consumer's name, as for any partition), and starts a range only
//! once each of its parents is *finished* — sealed, and handed out up to its seal — so
//! every key's records come out in the order they were appended, across any number of
//! splits and merges.
//!
//! Which ranges are finished is settled in id order (a range's parents have smaller
//! ids): a consumer of each range whose parents are all finished is built (it finds its
//! stored offset, or its start), and a sealed one whose next record to hand out is at or
//! past its seal is finished at once and shut down (storing what its policy stores).
//! Restarting therefore walks the lineage again from the stored offsets, and hands out
//! again only what a single-partition consumer would (at least once).
//!
//! Waiting: a record a range's consumer has fetched already is handed out first (ranges
//! in turn); otherwise the consumers of every active range wait together, and the
//! first record any of them gets is handed out (the others' waits are dropped, which
//! their cancel-safety allows). At least every [`REFRESH`] without a record, and
//! whenever a range is finished, the ranges are read again, so a split made meanwhile
//! is followed: the sealed parent's consumer reaches the seal, and its children start.
//!
//! Bounds: one consumer per active range, at most the open-range bound plus the sealed
//! ranges not yet finished; each holds what a single-partition consumer holds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use rill_proto::RequestBody;
use rill_proto::pb::{DeleteOffsetRequest, StoreOffsetRequest};
use rill_proto::ranges::RangeMap;

use crate::client::Retry;
use crate::{ClientError, Consumer, ConsumerBuilder, Position, Record, StartAt};

/// Longest wait without a record before the ranges are read again.
const REFRESH: Duration = Duration::from_secs(1);

/// The consumers of an elastic topic's ranges; see the module's documentation.
#[derive(Debug)]
pub(crate) struct Ranged {
    template: ConsumerBuilder,
    map: Arc<RangeMap>,
    /// A consumer per range being read: ready, not finished.
    active: BTreeMap<u32, Consumer>,
    /// Ranges read to their seal (or started past it).
    finished: BTreeSet<u32>,
    /// The range in turn to hand out a fetched record first.
    turn: u32,
    closed: bool,
}

impl Ranged {
    /// The consumer of an elastic topic whose ranges are `map`, with `template`'s
    /// options for each range.
    pub(crate) async fn start(
        template: ConsumerBuilder,
        map: Arc<RangeMap>,
    ) -> Result<Consumer, ClientError> {
        let (partition, start_at, _) = template.shape();
        let (topic, name) = template.names();
        if partition != 0 {
            return Err(ClientError::InvalidArgument(format!(
                "{}/{} is an elastic topic: a named consumer reads all of its ranges, so its partition is 0, not {partition}",
                topic.stream, topic.name
            )));
        }
        if let StartAt::Offset(_) = start_at {
            return Err(ClientError::InvalidArgument(format!(
                "consumer {name:?} of elastic topic {}/{}: an offset names a place in one range; start at First, Last, End, Next or a time",
                topic.stream, topic.name
            )));
        }
        let mut ranged = Self {
            template: template.clone(),
            map,
            active: BTreeMap::new(),
            finished: BTreeSet::new(),
            turn: 0,
            closed: false,
        };
        ranged.advance().await?;
        Ok(Consumer::of_ranges(&template, ranged))
    }

    /// Starts a consumer for every range whose parents are all finished, finishing at
    /// once the sealed ones already read to their seal; in id order, so a range
    /// finished here makes its children ready in the same pass.
    async fn advance(&mut self) -> Result<(), ClientError> {
        let map = Arc::clone(&self.map);
        for r in map.ranges() {
            if self.finished.contains(&r.id) || self.active.contains_key(&r.id) {
                continue;
            }
            if !r.parents.iter().all(|p| self.finished.contains(p)) {
                continue;
            }
            let consumer = self.template.for_range(r.id).build_one().await?;
            self.active.insert(r.id, consumer);
            self.finish_if_done(r.id).await?;
        }
        Ok(())
    }

    /// Finishes range `id` if it is sealed and handed out to its seal: its consumer
    /// shuts down (storing what its policy stores) and goes.
    async fn finish_if_done(&mut self, id: u32) -> Result<bool, ClientError> {
        let Some(end) = self.map.get(id).and_then(|r| r.sealed) else {
            return Ok(false);
        };
        let Some(c) = self.active.get_mut(&id) else {
            return Ok(false);
        };
        if c.has_buffered() || c.next_to_hand() < end {
            return Ok(false);
        }
        c.shutdown_one().await?;
        self.active.remove(&id);
        self.finished.insert(id);
        Ok(true)
    }

    /// Finishes every active range read to its seal, then starts what became ready.
    async fn settle(&mut self) -> Result<(), ClientError> {
        let ids: Vec<u32> = self.active.keys().copied().collect();
        let mut any = false;
        for id in ids {
            any |= self.finish_if_done(id).await?;
        }
        if any {
            self.advance().await?;
        }
        Ok(())
    }

    /// Reads the ranges again and starts what became ready.
    async fn refresh(&mut self) -> Result<(), ClientError> {
        let (topic, _) = self.template.names();
        let d = topic.describe().await?;
        let Some(map) = d.range_map else {
            return Err(ClientError::Protocol(format!(
                "{}/{} is no longer an elastic topic",
                topic.stream, topic.name
            )));
        };
        if map.epoch() < self.map.epoch() || map.ranges().len() < self.map.ranges().len() {
            return Err(ClientError::Protocol(format!(
                "the ranges of {}/{} went back from epoch {} to {}",
                topic.stream,
                topic.name,
                self.map.epoch(),
                map.epoch()
            )));
        }
        self.map = map;
        self.settle().await?;
        self.advance().await
    }

    /// The next record of any ready range, waiting for one.
    pub(crate) async fn next(&mut self) -> Option<Result<Record, ClientError>> {
        loop {
            if self.closed {
                return None;
            }
            if let Err(e) = self.settle().await {
                return Some(Err(e));
            }
            // A record fetched already, ranges in turn.
            if let Some(id) = self.buffered_in_turn() {
                self.turn = id.wrapping_add(1);
                let c = self.active.get_mut(&id).expect("an active range");
                return c.next_one().await;
            }
            if self.active.is_empty() {
                tokio::time::sleep(REFRESH).await;
                if let Err(e) = self.refresh().await {
                    return Some(Err(e));
                }
                continue;
            }
            // Every active range waits; the first record any gets is handed out.
            let waits: Vec<_> = self
                .active
                .iter_mut()
                .map(|(&id, c)| c.next_one().map(move |r| (id, r)).boxed())
                .collect();
            let waited = tokio::time::timeout(REFRESH, futures::future::select_all(waits))
                .await
                .map(|((id, result), _, rest)| {
                    // The other ranges' waits end here, which their cancel-safety allows.
                    drop(rest);
                    (id, result)
                });
            match waited {
                Ok((id, Some(result))) => {
                    self.turn = id.wrapping_add(1);
                    return Some(result);
                }
                // A range's consumer shut down under it: nothing more comes.
                Ok((_, None)) => return None,
                Err(_) => {
                    if let Err(e) = self.refresh().await {
                        return Some(Err(e));
                    }
                }
            }
        }
    }

    /// A record fetched already, without waiting (see [`Consumer::try_next`]).
    pub(crate) fn try_next(&mut self) -> Option<Record> {
        if self.closed {
            return None;
        }
        let id = self.buffered_in_turn()?;
        let record = self.active.get_mut(&id)?.try_next()?;
        self.turn = id.wrapping_add(1);
        Some(record)
    }

    /// The first active range from the one in turn on whose consumer has fetched
    /// records not handed out yet.
    fn buffered_in_turn(&self) -> Option<u32> {
        self.active
            .range(self.turn..)
            .chain(self.active.range(..self.turn))
            .find(|(_, c)| c.has_buffered())
            .map(|(&id, _)| id)
    }

    /// The consumer of range `id`, if it is being read.
    pub(crate) fn consumer(&self, id: u32) -> Option<&Consumer> {
        self.active.get(&id)
    }

    /// Stores the record at `consumed` as consumed, through its range's consumer (or,
    /// for a range finished meanwhile, whose consumer is gone, directly: a caller that
    /// commits after asking for the next record commits a finished range's last one).
    pub(crate) async fn store_offset(&mut self, consumed: Position) -> Result<(), ClientError> {
        if let Some(c) = self.active.get_mut(&consumed.partition) {
            return c.store_offset_one(consumed).await;
        }
        if self.map.get(consumed.partition).is_none() {
            return Err(ClientError::InvalidArgument(format!(
                "this elastic topic has no range {}",
                consumed.partition
            )));
        }
        let (topic, name) = self.template.names();
        let body = RequestBody::StoreOffset(StoreOffsetRequest {
            stream: topic.stream.to_string(),
            topic: topic.name.to_string(),
            partition: consumed.partition,
            consumer: name.to_owned(),
            offset: consumed.offset + 1,
        });
        topic
            .client
            .call(body, Bytes::new(), Retry::Safe)
            .await
            .map(drop)
    }

    /// Deletes the stored offset of range `id`.
    pub(crate) async fn delete_offset(&mut self, id: u32) -> Result<(), ClientError> {
        if let Some(c) = self.active.get_mut(&id) {
            return c.delete_offset_one(id).await;
        }
        let (topic, name) = self.template.names();
        let body = RequestBody::DeleteOffset(DeleteOffsetRequest {
            stream: topic.stream.to_string(),
            topic: topic.name.to_string(),
            partition: id,
            consumer: name.to_owned(),
        });
        topic
            .client
            .call(body, Bytes::new(), Retry::Safe)
            .await
            .map(drop)
    }

    /// Shuts every range's consumer down (each storing what its policy stores).
    pub(crate) async fn shutdown(&mut self) -> Result<(), ClientError> {
        if self.closed {
            return Ok(());
        }
        let mut first = Ok(());
        for c in self.active.values_mut() {
            if let Err(e) = c.shutdown_one().await {
                first = first.and(Err(e));
            }
        }
        // Closed once every range's consumer is: a shutdown cancelled halfway finishes
        // the rest when called again.
        self.closed = true;
        first
    }
}
