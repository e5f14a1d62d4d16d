//! Topic handles: admin, publish, typed views.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rill_format::{Durability, ProducerInfo};
use rill_proto::pb::{self, ProduceRequest, ProduceResponse};
use rill_proto::ranges::RangeMap;
use rill_proto::{RequestBody, ResponseBody};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::{Retry, unexpected};
use crate::codec::{Codec, Json, MsgPack};
use crate::message::build_batch;
use crate::{
    Client, ClientError, ConsumerBuilder, ErrorCode, Message, Position, ProducerBuilder, Reader,
    Routing, Value, partition_for_key,
};

/// Options for creating a topic. Unset fields take the broker's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicOptions {
    /// Partitions (default 1).
    pub partitions: Option<u32>,
    /// Delete data older than this.
    pub retention: Option<Duration>,
    /// Per partition: delete the oldest data beyond this many bytes.
    pub retention_bytes: Option<u64>,
    /// Segment size (default 1 GiB).
    pub segment_bytes: Option<u64>,
    /// Durability (default `Always`).
    pub durability: Option<Durability>,
    /// Largest record (default 1 MiB).
    pub max_record_bytes: Option<u32>,
    /// In a cluster: replicas of each partition (default min(3, nodes)).
    pub replicas: Option<u32>,
    /// An elastic topic (docs/RANGES.md): `partitions` key ranges that cover the key
    /// hashes evenly and split and merge online ([`Topic::split_range`],
    /// [`Topic::merge_ranges`]) without moving a key out of order. Publish calls route
    /// by range; a [`Reader`] reads each range only after its parents. A single-node
    /// server only, for now: a cluster refuses it. Every write path (publishes, the
    /// [`Producer`](crate::Producer), [`Batching`](crate::Batching)) routes by range, and
    /// a [`Reader`], a named consumer (of partition 0: it reads every range) and a
    /// consumer group read a range only after its parents (a group once it has stored
    /// their seals, docs/RANGES.md §6.3).
    pub elastic: bool,
    /// An elastic topic's automatic policy (docs/RANGES.md §7); `None`: off.
    pub auto_split: Option<crate::AutoSplit>,
}

impl TopicOptions {
    /// Options with `n` partitions and defaults otherwise.
    pub fn partitions(n: u32) -> Self {
        Self {
            partitions: Some(n),
            ..Self::default()
        }
    }

    pub(crate) fn to_proto(&self) -> pb::TopicOptions {
        let (durability, interval) = match self.durability {
            None => (pb::Durability::Unspecified, None),
            Some(Durability::Always) => (pb::Durability::Always, None),
            Some(Durability::Never) => (pb::Durability::Never, None),
            Some(d @ Durability::Interval(_)) => (pb::Durability::Interval, d.interval_ms()),
        };
        pb::TopicOptions {
            partitions: self.partitions.unwrap_or(0),
            retention_ms: self.retention.map(|d| d.as_millis() as u64),
            retention_bytes: self.retention_bytes,
            segment_bytes: self.segment_bytes,
            durability: durability as i32,
            durability_interval_ms: interval,
            max_record_bytes: self.max_record_bytes,
            replicas: self.replicas,
            elastic: self.elastic,
            auto_split: self.auto_split.map(|a| a.bytes_per_s),
            auto_split_window_ms: self
                .auto_split
                .and_then(|a| a.window)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            auto_split_cooldown_ms: self
                .auto_split
                .and_then(|a| a.cooldown)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// The result of [`Topic::fetch`].
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    /// Records at or after the requested offset.
    pub records: Vec<crate::Record>,
    /// Where the next fetch continues.
    pub next_offset: u64,
    /// First stored offset of the partition.
    pub log_start: u64,
    /// Offset the next record will get.
    pub log_end: u64,
}

/// A topic of a stream. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Topic {
    pub(crate) client: Client,
    pub(crate) stream: Arc<str>,
    pub(crate) name: Arc<str>,
    balanced: Arc<AtomicU32>,
}

impl Topic {
    pub(crate) fn new(client: Client, stream: String, name: String) -> Self {
        Self {
            client,
            stream: stream.into(),
            name: name.into(),
            balanced: Arc::new(AtomicU32::new(rand_start())),
        }
    }

    /// The stream's name.
    pub fn stream_name(&self) -> &str {
        &self.stream
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client this topic belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates the stream and the topic with `partitions` partitions if missing.
    /// An existing topic with another partition count is an error that says so.
    pub async fn ensure(&self, partitions: u32) -> Result<crate::TopicConfig, ClientError> {
        if partitions == 0 {
            return Err(ClientError::InvalidArgument(
                "a topic needs at least one partition".into(),
            ));
        }
        self.create_with(&TopicOptions::partitions(partitions), true)
            .await
    }

    /// Creates the topic (and its stream) with `options`; with `if_missing`, an existing
    /// topic whose options agree is fine.
    pub async fn create_with(
        &self,
        options: &TopicOptions,
        if_missing: bool,
    ) -> Result<crate::TopicConfig, ClientError> {
        let body = RequestBody::CreateTopic(pb::CreateTopicRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            options: Some(options.to_proto()),
            if_missing,
            create_stream: true,
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::CreateTopic(r) => {
                let config = crate::info::topic_config(r.options)?;
                if config.elastic {
                    // Routing needs the range map, which only a description carries.
                    self.client.forget_partitions(&self.stream, &self.name);
                } else {
                    self.client
                        .remember_partitions(&self.stream, &self.name, config.partitions);
                }
                if options.elastic && !config.elastic {
                    // A server from before elastic topics ignores the option and creates
                    // a plain topic (docs/RANGES.md §5).
                    return Err(ClientError::InvalidArgument(format!(
                        "the server created {}/{} as a plain topic: it does not serve elastic topics",
                        self.stream, self.name
                    )));
                }
                Ok(config)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Splits an open range of an elastic topic in two (docs/RANGES.md §3): `range`
    /// (`None`: the busiest open range) is sealed at its end and two new ranges cover
    /// its hashes below `at` and from `at` on (`None`: its middle). Producers and
    /// readers carry on; this client routes by the new ranges at once.
    pub async fn split_range(
        &self,
        range: Option<u32>,
        at: Option<u64>,
    ) -> Result<crate::RangeChange, ClientError> {
        self.change_ranges(RequestBody::SplitRange(pb::SplitRangeRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            range,
            at,
        }))
        .await
    }

    /// Merges two adjacent open ranges of an elastic topic into one (docs/RANGES.md §3):
    /// both are sealed at their ends and one new range covers their hashes.
    pub async fn merge_ranges(
        &self,
        first: u32,
        second: u32,
    ) -> Result<crate::RangeChange, ClientError> {
        self.change_ranges(RequestBody::MergeRanges(pb::MergeRangesRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            first,
            second,
        }))
        .await
    }

    /// Sends a split or a merge and forgets the cached ranges whatever the answer. A lost
    /// answer is not resent: a second split would split a child, and a second merge
    /// would fail naming ranges the first sealed, hiding its result.
    async fn change_ranges(&self, body: RequestBody) -> Result<crate::RangeChange, ClientError> {
        let answer = self
            .client
            .call(body, Bytes::new(), Retry::UnsafeAfterSend)
            .await;
        self.client.forget_partitions(&self.stream, &self.name);
        match answer?.0 {
            ResponseBody::SplitRange(pb::SplitRangeResponse { change })
            | ResponseBody::MergeRanges(pb::MergeRangesResponse { change }) => {
                crate::info::range_change(change)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes the topic, its data and its stored offsets.
    pub async fn delete(&self) -> Result<(), ClientError> {
        self.client.forget_partitions(&self.stream, &self.name);
        self.client
            .call(
                RequestBody::DeleteTopic(pb::DeleteTopicRequest {
                    stream: self.stream.to_string(),
                    topic: self.name.to_string(),
                }),
                Bytes::new(),
                Retry::Safe,
            )
            .await
            .map(drop)
    }

    /// Options and per-partition offsets.
    pub async fn describe(&self) -> Result<crate::TopicDescription, ClientError> {
        self.client.describe_topic(&self.stream, &self.name).await
    }

    /// Repairs a partition and returns its state afterwards: the broker reopens its log
    /// with recovery (after a failed write or fsync, once the disk is fixed), and with
    /// `accept_data_loss` also accepts its damaged ranges as lost, so it takes appends
    /// again (reads of those ranges still fail with [`ClientError::DataLoss`]). Appends
    /// then resume after every stored consumer offset. Harmless on a healthy partition.
    pub async fn repair(
        &self,
        partition: u32,
        accept_data_loss: bool,
    ) -> Result<crate::PartitionInfo, ClientError> {
        let body = RequestBody::RepairPartition(pb::RepairPartitionRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            partition,
            accept_data_loss,
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::RepairPartition(r) => r
                .partition
                .map(Into::into)
                .ok_or_else(|| ClientError::Protocol("repair answered without a state".into())),
            other => Err(unexpected(&other)),
        }
    }

    /// Number of partitions (cached after the first look-up).
    pub async fn partitions(&self) -> Result<u32, ClientError> {
        self.client.partitions(&self.stream, &self.name).await
    }

    /// The first stored offset of a partition.
    pub async fn first_offset(&self, partition: u32) -> Result<u64, ClientError> {
        self.resolve(partition, pb::OffsetSpec::First, 0).await
    }

    /// The offset the next record of a partition will get (its end).
    pub async fn end_offset(&self, partition: u32) -> Result<u64, ClientError> {
        self.resolve(partition, pb::OffsetSpec::End, 0).await
    }

    /// The first offset of a partition at or after `timestamp_us` (the end if none).
    pub async fn offset_for_time(
        &self,
        partition: u32,
        timestamp_us: i64,
    ) -> Result<u64, ClientError> {
        self.resolve(partition, pb::OffsetSpec::Timestamp, timestamp_us)
            .await
    }

    /// Where reading `partition` from `start` begins. `Next` means "after a stored
    /// offset", which a topic alone does not have: it resolves like `First`.
    pub async fn offset_for(
        &self,
        partition: u32,
        start: crate::StartAt,
    ) -> Result<u64, ClientError> {
        use crate::StartAt;
        Ok(match start {
            StartAt::First | StartAt::Next => self.first_offset(partition).await?,
            StartAt::Last => {
                let end = self.end_offset(partition).await?;
                end.saturating_sub(1)
                    .max(self.first_offset(partition).await?)
            }
            StartAt::End => self.end_offset(partition).await?,
            StartAt::Offset(n) => n,
            StartAt::TimestampMicros(ts) => self.offset_for_time(partition, ts).await?,
        })
    }

    async fn resolve(
        &self,
        partition: u32,
        spec: pb::OffsetSpec,
        timestamp_us: i64,
    ) -> Result<u64, ClientError> {
        let body = RequestBody::ResolveOffset(pb::ResolveOffsetRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            partition,
            spec: spec as i32,
            timestamp_us,
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::ResolveOffset(r) => Ok(r.offset),
            other => Err(unexpected(&other)),
        }
    }

    /// One fetch from a partition: records from `from` (at most `max_bytes`, at
    /// least one batch), waiting up to `max_wait` for some to arrive. The building
    /// block of readers and consumers, for callers that manage positions themselves.
    ///
    /// Records that cannot be delivered are an error naming them, after which the
    /// caller goes on at its `to`: [`ClientError::DataLoss`] (the broker reports them
    /// damaged) and [`ClientError::Corrupt`] (a served batch fails its checks). Records
    /// before a corrupt batch are returned first, with `next_offset` at the corrupt
    /// batch, so the next fetch reports it.
    pub async fn fetch(
        &self,
        from: Position,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<Fetched, ClientError> {
        let mut records = std::collections::VecDeque::new();
        let mut fetched = self
            .fetch_into(
                from.partition,
                from.offset,
                max_bytes,
                max_wait,
                1,
                &mut records,
            )
            .await?;
        fetched.records = records.into();
        Ok(fetched)
    }

    /// [`Topic::fetch`] into a caller's buffer (`records` of the answer stays empty).
    pub(crate) async fn fetch_into(
        &self,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
        min_bytes: u32,
        out: &mut std::collections::VecDeque<crate::Record>,
    ) -> Result<Fetched, ClientError> {
        let body = RequestBody::Fetch(pb::FetchRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            partition,
            offset,
            max_bytes,
            max_wait_ms: u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX),
            min_bytes,
        });
        let (r, payload) = match self.client.call(body, Bytes::new(), Retry::Safe).await? {
            (ResponseBody::Fetch(r), payload) => (r, payload),
            (other, _) => return Err(unexpected(&other)),
        };
        let before = out.len();
        let next_offset = match crate::message::decode_records(partition, &payload, offset, out)? {
            None => r.next_offset.max(offset),
            Some(corrupt) if out.len() == before => {
                tracing::warn!(stream = %self.stream, topic = %self.name, partition, from = corrupt.from, to = corrupt.to, reason = %corrupt.reason, "a fetched batch is corrupt: skipping its records");
                return Err(ClientError::Corrupt {
                    partition,
                    from: corrupt.from,
                    to: corrupt.to,
                    reason: corrupt.reason,
                });
            }
            // The records before it first; the next fetch starts at it and reports it.
            Some(corrupt) => corrupt.from,
        };
        Ok(Fetched {
            records: Vec::new(),
            next_offset,
            log_start: r.log_start,
            log_end: r.log_end,
        })
    }

    /// Starts a single-record publish.
    pub fn publish(&self) -> Publish {
        Publish {
            topic: self.clone(),
            message: Message::default(),
            routing: Routing::Balanced,
            deferred: None,
        }
    }

    /// Publishes many messages. Keyed messages go to their key's partition; unkeyed
    /// ones all go to one partition (round-robin per call), so an unkeyed batch is one
    /// round trip. Positions are returned in input order. A message with an empty key
    /// fails the call with [`ClientError::InvalidArgument`] before anything is sent.
    pub async fn publish_batch(
        &self,
        messages: impl IntoIterator<Item = Message>,
    ) -> Result<Vec<Position>, ClientError> {
        let messages: Vec<Message> = messages.into_iter().collect();
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        for m in &messages {
            crate::routing::check(m, &Routing::Balanced)?;
        }
        let mut positions: Vec<Option<Position>> = vec![None; messages.len()];
        // Every message, then (on an elastic topic) those a sealed range refused: each
        // round routes them by the topic's current shape.
        let mut pending: Vec<usize> = (0..messages.len()).collect();
        let mut rounds = 0;
        while !pending.is_empty() {
            let shape = self.client.shape(&self.stream, &self.name).await?;
            let ranged = shape.1.is_some();
            let unkeyed = self.balanced_in(&shape);
            let mut groups: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
            for &i in &pending {
                let p = messages[i]
                    .key
                    .as_ref()
                    .map_or(unkeyed, |k| keyed_in(&shape, k));
                groups.entry(p).or_default().push(i);
            }
            let sends = groups.iter().map(|(&p, idx)| {
                let batch: Vec<Message> = idx.iter().map(|&i| messages[i].clone()).collect();
                async move {
                    self.produce(p, &batch, None, Retry::UnsafeAfterSend, ranged)
                        .await
                        .map(|r| (p, r))
                }
            });
            let results = futures::future::join_all(sends).await;
            pending.clear();
            for (result, idx) in results.into_iter().zip(groups.values()) {
                match result {
                    Ok((p, response)) => {
                        for (k, &i) in idx.iter().enumerate() {
                            positions[i] = Some(Position {
                                partition: p,
                                offset: response.base_offset + k as u64,
                            });
                        }
                    }
                    Err(e) if self.resealed(&e, &shape, &mut rounds) => pending.extend(idx),
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(positions
            .into_iter()
            .map(|p| p.expect("every message was sent"))
            .collect())
    }

    /// Whether a produce refused with `e` is to be routed again: an elastic topic's
    /// range was sealed under it (`NOT_OWNER`), which is final for that range and
    /// certain not to have stored the batch. Forgets the cached ranges, so the next
    /// round reads them anew, and counts the rounds (a topic sealed under a producer
    /// more times than the retry budget allows is an error).
    fn resealed(
        &self,
        e: &ClientError,
        shape: &(u32, Option<Arc<RangeMap>>),
        rounds: &mut u32,
    ) -> bool {
        if e.code() != Some(ErrorCode::NotOwner) || shape.1.is_none() {
            return false;
        }
        if *rounds >= self.client.retry_policy().retries {
            return false;
        }
        *rounds += 1;
        self.client.forget_partitions(&self.stream, &self.name);
        true
    }

    pub(crate) fn next_balanced(&self, partitions: u32) -> u32 {
        self.balanced.fetch_add(1, Ordering::Relaxed) % partitions.max(1)
    }

    /// The next partition for unkeyed records: round-robin over the partitions, or over
    /// an elastic topic's open ranges.
    pub(crate) fn balanced_in(&self, shape: &(u32, Option<Arc<RangeMap>>)) -> u32 {
        match &shape.1 {
            None => self.next_balanced(shape.0),
            Some(map) => {
                let n = map.open_count().max(1) as u32;
                let i = self.balanced.fetch_add(1, Ordering::Relaxed) % n;
                map.open().nth(i as usize).map_or(0, |r| r.id)
            }
        }
    }

    /// Resolves a routing to a partition.
    pub(crate) async fn route(&self, routing: &Routing) -> Result<u32, ClientError> {
        if let Routing::Partition(p) = routing {
            return Ok(*p);
        }
        let shape = self.client.shape(&self.stream, &self.name).await?;
        Ok(match routing {
            Routing::Key(k) => keyed_in(&shape, k),
            _ => self.balanced_in(&shape),
        })
    }

    /// Sends one batch of messages to a partition; `ranged` when they were routed by an
    /// elastic topic's ranges (the shape they were routed by says so: the client's cache
    /// may be forgotten meanwhile by another task).
    pub(crate) async fn produce(
        &self,
        partition: u32,
        messages: &[Message],
        producer: Option<ProducerInfo>,
        retry: Retry,
        ranged: bool,
    ) -> Result<ProduceResponse, ClientError> {
        let batch = build_batch(messages, producer)?;
        let body = RequestBody::Produce(ProduceRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            partition,
            ranged,
        });
        match self.client.call_built(body, batch, retry).await {
            Ok((ResponseBody::Produce(r), _)) => Ok(r),
            Ok((other, _)) => Err(unexpected(&other)),
            Err(e) => {
                if matches!(
                    e.code(),
                    Some(ErrorCode::PartitionNotFound | ErrorCode::TopicNotFound)
                ) {
                    self.client.forget_partitions(&self.stream, &self.name);
                }
                Err(e)
            }
        }
    }

    /// Explicit client-side batching (512 records, 1 MiB, 5 ms linger by default),
    /// buffered in the caller's task: `send` buffers and sends what is due (a full
    /// batch, a lingered one), `flush` and `close` send everything buffered.
    pub fn batching(&self) -> crate::BatchingBuilder {
        crate::BatchingBuilder::new(self.clone())
    }

    /// A tuned producer: batching, retries, idempotence, background sending.
    pub fn producer(&self) -> ProducerBuilder {
        ProducerBuilder::new(self.clone())
    }

    /// A cursor reader of raw records; `name` labels it in logs.
    pub fn records(&self, name: &str) -> Reader<Bytes> {
        Reader::new(self.clone(), name, Arc::new(Ok))
    }

    /// A named consumer of one partition whose offsets the broker stores.
    pub fn consumer(&self, name: &str, partition: u32) -> ConsumerBuilder {
        ConsumerBuilder::new(self.clone(), name, partition)
    }

    /// The last offset of `partition` stored as consumed by the named consumer `name`,
    /// if any: what [`Consumer::last_stored_offset`](crate::Consumer::last_stored_offset)
    /// starts from, for callers that manage positions themselves (with
    /// [`Topic::fetch`]).
    pub async fn stored_offset(
        &self,
        name: &str,
        partition: u32,
    ) -> Result<Option<u64>, ClientError> {
        let body = RequestBody::GetOffset(pb::GetOffsetRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            partition,
            consumer: name.to_owned(),
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            // The wire stores the next offset; this API speaks of the consumed one.
            ResponseBody::GetOffset(r) => Ok(r.offset.and_then(|next| next.checked_sub(1))),
            other => Err(unexpected(&other)),
        }
    }

    /// Stores the record at `consumed` as consumed by the named consumer `name`, as
    /// [`Consumer::store_offset`](crate::Consumer::store_offset) does, for callers that
    /// manage positions themselves.
    pub async fn store_offset(&self, name: &str, consumed: Position) -> Result<(), ClientError> {
        let body = RequestBody::StoreOffset(pb::StoreOffsetRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            partition: consumed.partition,
            consumer: name.to_owned(),
            offset: consumed.offset.checked_add(1).ok_or_else(|| {
                ClientError::InvalidArgument("an offset of u64::MAX cannot be consumed".into())
            })?,
        });
        self.client.call(body, Bytes::new(), Retry::Safe).await?;
        Ok(())
    }

    /// A consumer group's members, assignment, stored offsets and lag.
    pub async fn describe_group(
        &self,
        group: &str,
    ) -> Result<crate::GroupDescription, ClientError> {
        let body = RequestBody::DescribeGroup(pb::DescribeGroupRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            group: group.to_owned(),
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::DescribeGroup(r) => Ok(r.into()),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes consumer group `group`'s stored offset of `partition`, as an operator
    /// (Kafka's `DeleteConsumerGroupOffsets`); returns whether one was stored. Refused
    /// with `GROUP_NOT_EMPTY` while the group has live members (they would store it
    /// again: stop them first, or let the member that owns the partition call
    /// [`GroupConsumer::delete_offset`](crate::GroupConsumer::delete_offset)), and with
    /// `GROUP_NOT_FOUND` for a group with neither members nor stored offsets. The next
    /// member to get the partition starts at its `start_at`.
    pub async fn delete_group_offset(
        &self,
        group: &str,
        partition: u32,
    ) -> Result<bool, ClientError> {
        let body = RequestBody::DeleteGroupOffset(pb::DeleteGroupOffsetRequest {
            stream: self.stream.to_string(),
            topic: self.name.to_string(),
            group: group.to_owned(),
            member_id: String::new(),
            generation: 0,
            partition,
        });
        match self.client.call(body, Bytes::new(), Retry::Safe).await?.0 {
            ResponseBody::DeleteGroupOffset(r) => Ok(r.deleted),
            other => Err(unexpected(&other)),
        }
    }

    /// A member of consumer group `group` (created at its first join): the broker
    /// assigns partitions and moves them as members join, leave or go silent.
    pub fn consumer_group(&self, group: &str) -> crate::GroupConsumerBuilder {
        crate::GroupConsumerBuilder::new(self.clone(), group)
    }

    /// A typed view whose values `codec` writes and reads.
    pub fn typed<T, C: Codec>(&self, codec: C) -> TypedTopic<T, C> {
        TypedTopic::new(self.clone(), Arc::new(codec))
    }

    /// A typed view whose values are JSON.
    pub fn json<T>(&self) -> TypedTopic<T, Json> {
        self.typed(Json)
    }

    /// A typed view whose values are Avro datums of `schema`.
    #[cfg(feature = "avro")]
    pub fn avro<T>(&self, schema: apache_avro::Schema) -> TypedTopic<T, crate::avro::Avro> {
        self.typed(crate::avro::Avro::new(schema))
    }

    /// A typed view whose values are MessagePack.
    pub fn msgpack<T>(&self) -> TypedTopic<T, MsgPack> {
        self.typed(MsgPack)
    }
}

fn rand_start() -> u32 {
    // Spread independent clients over partitions without a shared counter.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos.wrapping_mul(2_654_435_761)
}

/// A single-record publish; see [`Topic::publish`].
#[derive(Debug)]
#[must_use = "a publish does nothing until `send` is awaited"]
pub struct Publish {
    topic: Topic,
    message: Message,
    routing: Routing,
    deferred: Option<ClientError>,
}

impl Publish {
    /// The value's bytes.
    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.message.value = value.into();
        self
    }

    /// The value as JSON.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Self {
        self.encoded(&Json, value)
    }

    /// The value as MessagePack.
    pub fn msgpack<T: Serialize + ?Sized>(self, value: &T) -> Self {
        self.encoded(&MsgPack, value)
    }

    /// The value as an Avro datum of `schema` (no container header).
    #[cfg(feature = "avro")]
    pub fn avro<T: Serialize + ?Sized>(mut self, value: &T, schema: &apache_avro::Schema) -> Self {
        match crate::avro::encode(value, schema) {
            Ok(bytes) => self.message.value = bytes.into(),
            Err(e) => self.deferred = Some(e),
        }
        self
    }

    /// The value written by `codec`; an encoding failure is returned by `send`.
    pub fn encoded<C: Codec, T: Serialize + ?Sized>(mut self, codec: &C, value: &T) -> Self {
        match codec.encode(value) {
            Ok(bytes) => self.message.value = bytes.into(),
            Err(e) => self.deferred = Some(e),
        }
        self
    }

    /// Routes by key: the same key always lands in the same partition, in order.
    ///
    /// A key together with [`Publish::partition`], or an empty key, makes `send` fail
    /// with [`ClientError::InvalidArgument`] without sending anything.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        let key = key.into();
        if matches!(self.routing, Routing::Partition(_)) {
            self.deferred = Some(crate::routing::key_and_partition());
        }
        self.message.key = Some(key.clone());
        self.routing = Routing::Key(key);
        self
    }

    /// Sends to this partition (together with a key, `send` fails; see
    /// [`Publish::key`]).
    pub fn partition(mut self, partition: u32) -> Self {
        if self.message.key.is_some() {
            self.deferred = Some(crate::routing::key_and_partition());
        }
        self.routing = Routing::Partition(partition);
        self
    }

    /// Adds a typed header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.message.headers.push((name.into(), value.into()));
        self
    }

    /// Sends the record: one round trip. Returns where it was stored.
    pub async fn send(self) -> Result<Position, ClientError> {
        if let Some(e) = self.deferred {
            return Err(e);
        }
        crate::routing::check(&self.message, &self.routing)?;
        let mut rounds = 0;
        loop {
            let shape = self
                .topic
                .client
                .shape(&self.topic.stream, &self.topic.name)
                .await?;
            let partition = match &self.routing {
                Routing::Partition(p) => *p,
                Routing::Key(k) => keyed_in(&shape, k),
                Routing::Balanced => match &self.message.key {
                    Some(k) => keyed_in(&shape, k),
                    None => self.topic.balanced_in(&shape),
                },
            };
            match self
                .topic
                .produce(
                    partition,
                    std::slice::from_ref(&self.message),
                    None,
                    Retry::UnsafeAfterSend,
                    shape.1.is_some(),
                )
                .await
            {
                Ok(r) => {
                    return Ok(Position {
                        partition,
                        offset: r.base_offset,
                    });
                }
                // A sealed range: routed again (an explicit partition is the caller's).
                Err(e)
                    if !matches!(self.routing, Routing::Partition(_))
                        && self.topic.resealed(&e, &shape, &mut rounds) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The partition of a key: its plain topic's `% partitions`, or the open range of an
/// elastic topic covering its hash.
pub(crate) fn keyed_in(shape: &(u32, Option<Arc<RangeMap>>), key: &[u8]) -> u32 {
    match &shape.1 {
        None => partition_for_key(key, shape.0),
        Some(map) => map.route(crate::routing::key_hash(key)),
    }
}

/// A topic viewed through a codec for values of type `T`; see [`Topic::typed`].
#[derive(Debug)]
pub struct TypedTopic<T, C> {
    topic: Topic,
    codec: Arc<C>,
    _type: PhantomData<fn() -> T>,
}

impl<T, C> Clone for TypedTopic<T, C> {
    fn clone(&self) -> Self {
        Self::new(self.topic.clone(), Arc::clone(&self.codec))
    }
}

impl<T, C> TypedTopic<T, C> {
    fn new(topic: Topic, codec: Arc<C>) -> Self {
        Self {
            topic,
            codec,
            _type: PhantomData,
        }
    }

    /// The underlying topic.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// The codec values are written and read with.
    pub fn codec(&self) -> &C {
        &self.codec
    }
}

impl<T: Serialize, C: Codec> TypedTopic<T, C> {
    /// Publishes one value (balanced routing).
    pub async fn publish(&self, value: &T) -> Result<Position, ClientError> {
        self.topic
            .publish()
            .value(self.codec.encode(value)?)
            .send()
            .await
    }

    /// Publishes one value with a key.
    pub async fn publish_keyed(
        &self,
        key: impl Into<Bytes>,
        value: &T,
    ) -> Result<Position, ClientError> {
        self.topic
            .publish()
            .key(key)
            .value(self.codec.encode(value)?)
            .send()
            .await
    }
}

impl<T: DeserializeOwned + Send + 'static, C: Codec> TypedTopic<T, C> {
    /// A cursor reader that decodes values; a value that fails to decode is returned
    /// as an error carrying its position, and reading continues.
    pub fn records(&self, name: &str) -> Result<Reader<T>, ClientError> {
        let codec = Arc::clone(&self.codec);
        Ok(Reader::new(
            self.topic.clone(),
            name,
            Arc::new(move |bytes: Bytes| codec.decode(&bytes)),
        ))
    }
}
