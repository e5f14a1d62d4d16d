//! The data requests of the broker: produce, fetch, offset lookups, stored offsets.

use std::sync::Arc;

use bytes::Bytes;
use rill_proto::pb;
use rill_storage::LogRead;

use crate::names::validate_name;
use crate::offsets::OffsetKey;
use crate::partition::{Inline, Partition, Produced};
use crate::{Broker, BrokerError, Fetch};

impl Broker {
    /// A fresh idempotent-producer identity.
    pub fn init_producer(&self) -> (u64, u16) {
        // Random 64-bit ids: collisions are negligible and no allocation state is
        // needed; the epoch starts at 0.
        (rand::random::<u64>() | 1, 0)
    }

    /// Appends one batch to a partition and returns once it is durable per the topic's
    /// policy. A retried idempotent batch is acknowledged again without a second append.
    pub async fn produce(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<Produced, BrokerError> {
        self.produce_as(stream, topic, partition, batch, None).await
    }

    /// [`Broker::produce`], of a batch this process built if `built` is `batch`
    /// (embedded mode): its records and body checksum are not checked again
    /// (docs/FORMAT.md §3, "Batches built in-process").
    pub(crate) async fn produce_as(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        batch: Bytes,
        built: Option<rill_format::BuiltBatch>,
    ) -> Result<Produced, BrokerError> {
        self.check_running()?;
        if batch.len() > self.config().max_batch_bytes as usize {
            return Err(rill_storage::StorageError::BatchTooLarge {
                bytes: batch.len(),
                max: self.config().max_batch_bytes,
            }
            .into());
        }
        let p = self.partition(stream, topic, partition)?;
        let header =
            rill_format::BatchHeader::parse(&batch).map_err(rill_storage::StorageError::from)?;
        // Format-valid (stored batches with it stay readable), but refused on produce:
        // an id of 0 means the client set bit 3 and left the producer fields unset.
        if header.producer.is_some_and(|p| p.id == 0) {
            return Err(BrokerError::ProducerIdZero);
        }
        if p.is_clustered() {
            let Some(replica) = p.replica() else {
                return Err(self.locate(p.log().err().unwrap_or(BrokerError::NotLeader {
                    what: format!("partition {stream}/{topic}/{partition}"),
                    leader: None,
                    address: None,
                })));
            };
            let bytes = batch.len() as u64;
            let produced = p
                .produce_replicated(&replica, batch, &header)
                .await
                .map_err(|e| self.locate(e))?;
            // The leader counts what it appends (the range policy's rates).
            if !produced.duplicate {
                p.count_written(bytes);
            }
            return Ok(produced);
        }
        // A batch that waits for no fsync is a write into the page cache: append it
        // here rather than paying a hop to the blocking pool and back. An idempotent
        // batch that arrived before its predecessor (a pipelining producer's requests
        // are handled concurrently) waits for it here too. A segment roll (files and
        // syncs), and `always` appends, go to the pool.
        let bytes = batch.len() as u64;
        let count = |p: &Partition, produced: &Produced| {
            if !produced.duplicate {
                p.count_written(bytes);
            }
        };
        let deadline = p.sequence_deadline();
        if !p.append_waits_for_sync() {
            // The whole batch is checked first, so a bad batch is refused at once
            // rather than after a sequence wait. (The blocking pool checks it again
            // when a roll or the deadline sends it there: rarely.)
            let checked = p.check_as(&batch, built.as_ref())?;
            loop {
                let sequenced = p.sequenced();
                tokio::pin!(sequenced);
                sequenced.as_mut().enable();
                match p.try_append_inline(&checked, &header)? {
                    Inline::Appended(produced) => {
                        count(&p, &produced);
                        return Ok(produced);
                    }
                    Inline::Blocking => break,
                    // Past the deadline the blocking path answers why.
                    Inline::Wait => {
                        let until = tokio::time::Instant::from_std(deadline);
                        if tokio::time::timeout_at(until, sequenced).await.is_err() {
                            break;
                        }
                    }
                }
            }
        }
        // The log stamps a copy of the header and writes the records from this shared
        // buffer as they are: no copy of the batch, whoever else holds it.
        let counted = Arc::clone(&p);
        let produced = tokio::task::spawn_blocking(move || {
            let checked = p.check_as(&batch, built.as_ref())?;
            p.append_blocking(&checked, &header, deadline)
        })
        .await
        .map_err(|e| BrokerError::Internal(format!("append task failed: {e}")))??;
        count(&counted, &produced);
        Ok(produced)
    }

    /// Reads from `fetch.offset`, waiting up to `fetch.max_wait` (capped) for
    /// `fetch.min_bytes`.
    pub async fn fetch(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        fetch: Fetch,
    ) -> Result<LogRead, BrokerError> {
        self.check_running()?;
        let p = self.partition(stream, topic, partition)?;
        let max_bytes = fetch.max_bytes.clamp(1, self.config().max_fetch_bytes) as usize;
        p.fetch(
            fetch.offset,
            max_bytes,
            fetch.max_wait.min(self.config().max_wait),
            fetch.min_bytes as usize,
        )
        .await
        .map_err(|e| {
            // A partition closed under a long poll: gone with its topic, or closing
            // with the broker (SHUTTING_DOWN).
            match self.partition(stream, topic, partition) {
                Err(gone) => gone,
                Ok(_) => self.locate(e),
            }
        })
    }

    /// The first offset, the end, or the first offset at or after a timestamp (a scan:
    /// call it off the async runtime).
    pub fn resolve_offset(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        spec: pb::OffsetSpec,
        timestamp_us: i64,
    ) -> Result<u64, BrokerError> {
        let p = self.partition(stream, topic, partition)?;
        let log = p.log().map_err(|e| self.locate(e))?;
        // A replica answers within what is committed.
        let end = p.visible_end()?;
        Ok(match spec {
            pb::OffsetSpec::First => log.log_start(),
            pb::OffsetSpec::End => end,
            pb::OffsetSpec::Timestamp => log
                .offset_for_timestamp(timestamp_us)?
                .map_or(end, |o| o.min(end)),
            pb::OffsetSpec::Unspecified => {
                return Err(BrokerError::InvalidRequest("offset spec is missing".into()));
            }
        })
    }

    fn offset_key(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
    ) -> Result<OffsetKey, BrokerError> {
        validate_name("consumer", consumer)?;
        self.partition(stream, topic, partition)?;
        Ok(OffsetKey {
            stream: stream.to_owned(),
            topic: topic.to_owned(),
            partition,
            consumer: consumer.to_owned(),
        })
    }

    /// Stores a consumer's next offset durably.
    pub async fn store_offset(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
        offset: u64,
    ) -> Result<(), BrokerError> {
        self.check_running()?;
        let key = self.offset_key(stream, topic, partition, consumer)?;
        self.store_offset_key(key, offset).await
    }

    /// Refuses to store an offset beyond the partition's end.
    pub(crate) fn check_storable(&self, key: &OffsetKey, offset: u64) -> Result<(), BrokerError> {
        let end = self
            .partition(&key.stream, &key.topic, key.partition)?
            .visible_end()?;
        if offset > end {
            return Err(rill_storage::StorageError::OffsetBeyondEnd {
                requested: offset,
                next_offset: end,
            }
            .into());
        }
        Ok(())
    }

    /// Stores an offset durably, refusing one beyond the partition's end.
    pub(crate) async fn store_offset_key(
        self: &Arc<Self>,
        key: OffsetKey,
        offset: u64,
    ) -> Result<(), BrokerError> {
        if self.is_clustered() {
            // The end a cluster node knows for sure is the watermark of a replica it
            // leads (a follower's lags the leader's, and a consumer reads from the
            // leader): a stored offset is checked against it where it can be.
            if let Ok(p) = self.partition(&key.stream, &key.topic, key.partition)
                && p.replica().is_some_and(|r| r.leading().is_some())
            {
                self.check_storable(&key, offset)?;
            }
            return self.cluster_store_offset(offset_name(key), offset).await;
        }
        self.check_storable(&key, offset)?;
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || broker.offsets.store(key, offset))
            .await
            .map_err(|e| BrokerError::Internal(format!("offset store task failed: {e}")))?
    }

    /// A consumer's stored offset.
    pub fn get_offset(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
    ) -> Result<Option<u64>, BrokerError> {
        let key = self.offset_key(stream, topic, partition, consumer)?;
        if self.is_clustered() {
            return Ok(self.cluster_offset(&offset_name(key)));
        }
        Ok(self.offsets.get(&key))
    }

    /// Deletes a consumer's stored offset; returns whether there was one.
    pub async fn delete_offset(
        self: &Arc<Self>,
        stream: &str,
        topic: &str,
        partition: u32,
        consumer: &str,
    ) -> Result<bool, BrokerError> {
        self.check_running()?;
        let key = self.offset_key(stream, topic, partition, consumer)?;
        if self.is_clustered() {
            return self.cluster_delete_offset(offset_name(key)).await;
        }
        let broker = Arc::clone(self);
        tokio::task::spawn_blocking(move || broker.offsets.delete(key))
            .await
            .map_err(|e| BrokerError::Internal(format!("offset delete task failed: {e}")))?
    }

    /// Stored offsets of a topic: (partition, consumer, offset).
    pub fn stored_offsets(&self, stream: &str, topic: &str) -> Vec<(u32, String, u64)> {
        if self.is_clustered() {
            return self.cluster_topic_offsets(stream, topic);
        }
        self.offsets
            .for_topic(stream, topic)
            .into_iter()
            .map(|(k, o)| (k.partition, k.consumer, o))
            .collect()
    }
}

/// A stored offset's key as the cluster names it.
pub(crate) fn offset_name(key: OffsetKey) -> crate::cluster::OffsetName {
    crate::cluster::OffsetName {
        stream: key.stream,
        topic: key.topic,
        partition: key.partition,
        consumer: key.consumer,
    }
}
