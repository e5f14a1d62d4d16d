//! The tuned write path: batching, retries, idempotence (`sequence.rs`), coalescing of
//! concurrent direct-mode sends (`accumulator.rs`, run by `direct.rs`), background
//! sending (`background.rs`).

mod accumulator;
mod background;
mod direct;
mod sequence;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_proto::pb::{InitProducerRequest, ProduceRequest};
use rill_proto::{RequestBody, ResponseBody};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use self::accumulator::Accumulator;
use self::background::Shards;
use self::sequence::{Refusal, Sequencer, Ticket};
use crate::client::{Attempt, Retry, RetryPolicy, unexpected};
use crate::message::build_batch;
use crate::{ClientError, ErrorCode, Message, Position, Routing, Topic};

/// Batches per partition an idempotent producer keeps in flight when the broker does
/// not say how many it remembers (an older broker: its `RECENT_BATCHES`, 5).
const RECENT_BATCHES_DEFAULT: usize = 5;

/// How background shards split the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharding {
    /// A partition always goes through the same shard: per-partition order is kept.
    #[default]
    Ordered,
    /// Messages go to any shard: more parallel, no order across sends.
    Balanced,
}

/// What a background `send` does when the buffer is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backpressure {
    /// Wait for room.
    #[default]
    Block,
    /// Wait at most this long, then fail with [`ClientError::BufferFull`].
    BlockFor(Duration),
    /// Fail at once with [`ClientError::BufferFull`].
    Fail,
}

/// Background sending: `send` returns once the message is buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Background {
    /// Shard tasks sending in parallel (default 4).
    pub shards: usize,
    /// How messages map to shards (default `Ordered`).
    pub sharding: Sharding,
    /// Messages buffered at most, over all shards (default 100,000).
    pub buffer_messages: usize,
    /// What a full buffer does (default `Block`).
    pub backpressure: Backpressure,
}

impl Default for Background {
    fn default() -> Self {
        Self {
            shards: 4,
            sharding: Sharding::Ordered,
            buffer_messages: 100_000,
            backpressure: Backpressure::Block,
        }
    }
}

/// Options of a [`Producer`]; see [`Topic::producer`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ProducerBuilder {
    topic: Topic,
    batch_length: usize,
    linger: Duration,
    max_batch_bytes: usize,
    retries: u32,
    retry_interval: Duration,
    routing: Routing,
    max_in_flight: usize,
    idempotence: bool,
    background: Option<Background>,
}

impl ProducerBuilder {
    pub(crate) fn new(topic: Topic) -> Self {
        Self {
            topic,
            batch_length: 1000,
            linger: Duration::ZERO,
            max_batch_bytes: 1 << 20,
            retries: 3,
            retry_interval: Duration::from_secs(1),
            routing: Routing::Balanced,
            max_in_flight: 8,
            idempotence: true,
            background: None,
        }
    }

    /// Records per batch at most (default 1000).
    pub fn batch_length(mut self, n: usize) -> Self {
        self.batch_length = n;
        self
    }

    /// How long a batch waits for more records before it is sent (default 0).
    ///
    /// In direct mode, concurrent `send` and `send_keyed`/`send_to_partition` calls to
    /// one partition join one batch, and each caller gets its own position (or the
    /// batch's error). With a linger of 0 a batch goes as soon as the partition has a
    /// free in-flight slot (see [`ProducerBuilder::max_in_flight`]): a lone sender gets
    /// one round trip, and senders that arrive while batches are in flight coalesce.
    /// With a linger, a batch waits until it is full (`batch_length`,
    /// `max_batch_bytes`), `flush` is called, or its first record has waited this
    /// long, so a `send` may take up to the linger longer. `send_batch` is not delayed.
    ///
    /// In background mode, how long a shard waits to fill a batch (0: send what is
    /// buffered as soon as the shard is free).
    pub fn linger(mut self, d: Duration) -> Self {
        self.linger = d;
        self
    }

    /// Bytes per batch at most (default 1 MiB).
    pub fn max_batch_bytes(mut self, n: usize) -> Self {
        self.max_batch_bytes = n;
        self
    }

    /// Retries of a failed send and the pause between them (default 3, 1 s).
    pub fn retries(mut self, n: u32, interval: Duration) -> Self {
        self.retries = n;
        self.retry_interval = interval;
        self
    }

    /// Routing of `send` and `send_batch` (default `Balanced`). A keyed message goes to
    /// its key's partition — except with `Routing::Partition`, where a keyed message is
    /// an error ([`ClientError::InvalidArgument`]: a record takes a key or a partition).
    ///
    /// Balanced, a direct-mode `send` of an unkeyed message joins one partition's batch
    /// until that batch is taken for sending or fills, then the next partition's
    /// (round-robin): concurrent sends coalesce, and a lone sender still goes
    /// round-robin. `send_batch` sends each call's unkeyed messages to one partition.
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Batches in flight at once, across partitions (default 8). Per partition, an
    /// idempotent producer (the default) keeps as many in flight as the broker remembers
    /// per producer for recognising retries (it says so in `InitProducer`: 5 unless
    /// configured), at most this many — the broker appends them in sequence order, and
    /// any of them can still be resent safely. A non-idempotent one keeps 1, so its
    /// batches keep their order too.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Idempotence (default on): the broker drops duplicates of a retried batch.
    pub fn idempotence(mut self, on: bool) -> Self {
        self.idempotence = on;
        self
    }

    /// Sends in the background; `send` returns once buffered.
    pub fn background(mut self, background: Background) -> Self {
        self.background = Some(background);
        self
    }

    /// Validates the options and returns the producer.
    pub async fn build(self) -> Result<Producer, ClientError> {
        let bad = |m: &str| Err(ClientError::InvalidArgument(m.to_owned()));
        if self.batch_length == 0 {
            return bad("batch_length must be positive");
        }
        if self.max_batch_bytes < 1024 {
            return bad("max_batch_bytes must be at least 1024");
        }
        if self.max_in_flight == 0 {
            return bad("max_in_flight must be positive");
        }
        if matches!(&self.routing, Routing::Key(k) if k.is_empty()) {
            return Err(crate::routing::empty_key());
        }
        if let Some(b) = &self.background
            && (b.shards == 0 || b.buffer_messages < b.shards)
        {
            return bad("background needs at least one shard and one buffered message per shard");
        }
        let (identity, per_partition) = if self.idempotence {
            match self
                .topic
                .client
                .call(
                    RequestBody::InitProducer(InitProducerRequest {}),
                    Bytes::new(),
                    Retry::Safe,
                )
                .await?
                .0
            {
                ResponseBody::InitProducer(r) => {
                    let remembered = match r.recent_batches {
                        0 => RECENT_BATCHES_DEFAULT,
                        n => n as usize,
                    };
                    (Some(r.producer_id), remembered.min(self.max_in_flight))
                }
                other => return Err(unexpected(&other)),
            }
        } else {
            (None, 1)
        };
        // An elastic topic's records are routed by its ranges, and records a range
        // sealed under them refused are routed again (docs/RANGES.md §4).
        let elastic = self
            .topic
            .client
            .shape(&self.topic.stream, &self.topic.name)
            .await?
            .1
            .is_some();
        let core = Arc::new(Core {
            topic: self.topic,
            batch_length: self.batch_length,
            max_batch_bytes: self.max_batch_bytes,
            policy: RetryPolicy {
                retries: self.retries,
                backoff: self.retry_interval,
                backoff_max: self.retry_interval,
            },
            linger: self.linger,
            routing: self.routing,
            in_flight: Arc::new(Semaphore::new(self.max_in_flight)),
            producer_id: identity,
            per_partition,
            elastic,
            lanes: parking_lot::Mutex::new(HashMap::new()),
            sticky: parking_lot::Mutex::new(None),
        });
        let background = self
            .background
            .map(|b| Shards::start(Arc::clone(&core), b, self.linger));
        Ok(Producer { core, background })
    }
}

/// The sending state of one partition.
#[derive(Debug)]
struct Lane {
    partition: u32,
    /// Held while a batch takes its slot and its sequence, so that batches hold slots
    /// in the order of their sequences: a batch waiting for a slot never waits on a
    /// later one (which would wait at the broker for it).
    order: tokio::sync::Mutex<()>,
    /// Batches in flight: for an idempotent producer at most what the broker remembers
    /// (so any of them can be resent safely; the broker orders them by sequence), else
    /// one (nothing would order them).
    slots: Arc<Semaphore>,
    /// Direct-mode `send`s not yet in a batch in flight (`direct.rs`). A non-poisoning
    /// lock: each use is a few field updates that cannot panic half-way.
    accumulator: parking_lot::Mutex<Accumulator>,
    /// Wakes the lane's driver: a batch closed (full or flushed).
    ready: Notify,
    /// Wakes senders waiting for room: the driver took a batch.
    room: Notify,
    /// Wakes flushes: a taken batch was answered.
    answered: Notify,
    /// The idempotent sequencing. A poisoning lock on purpose: a panic while it is
    /// held may leave batches half renumbered, and a sequence used twice makes the
    /// broker acknowledge records it never stored as a duplicate. The producer then
    /// fails its sends to this partition instead.
    sequencer: Option<std::sync::Mutex<Sequencer>>,
    #[cfg(test)]
    seen: tests::InFlightSeen,
}

impl Lane {
    fn sequencer(&self) -> Result<std::sync::MutexGuard<'_, Sequencer>, ClientError> {
        let sequencer = self.sequencer.as_ref().ok_or_else(|| {
            ClientError::Protocol("sequencing asked of a non-idempotent producer".into())
        })?;
        sequencer.lock().map_err(|_| ClientError::Poisoned {
            what: "the producer's sequence numbers",
        })
    }
}

/// A batch registered with its partition's sequencer until its send ends. Dropped
/// unacknowledged (an error, or the future dropped half-way), its outcome may be
/// unknown: the sequencer then ends its epoch, so no later batch reuses its sequence.
#[derive(Debug)]
struct Registered {
    lane: Arc<Lane>,
    ticket: Ticket,
    acknowledged: bool,
}

impl Drop for Registered {
    fn drop(&mut self) {
        // A poisoned sequencer fails every later send anyway.
        if let Ok(mut s) = self.lane.sequencer() {
            s.finish(self.ticket, self.acknowledged);
        }
    }
}

/// A batch's right to be sent: its slots, taken in order, and its sequence. Fields drop
/// in order: the sequencer hears how the send ended before the slot is free for the
/// next batch.
#[derive(Debug)]
struct Admitted {
    registered: Option<Registered>,
    _slot: OwnedSemaphorePermit,
    _permit: OwnedSemaphorePermit,
}

#[derive(Debug)]
struct Core {
    topic: Topic,
    batch_length: usize,
    max_batch_bytes: usize,
    linger: Duration,
    policy: RetryPolicy,
    routing: Routing,
    in_flight: Arc<Semaphore>,
    producer_id: Option<u64>,
    /// Batches in flight per partition.
    per_partition: usize,
    /// An elastic topic: produces are marked `ranged`, and a sealed range's refusal
    /// (`NOT_OWNER`) routes the refused records again.
    elastic: bool,
    /// One lane per partition sent to. A non-poisoning lock: a lane is inserted whole.
    lanes: parking_lot::Mutex<HashMap<u32, Arc<Lane>>>,
    /// The partition balanced direct-mode sends join, until its batch closes or is
    /// taken. A non-poisoning lock: the value is set or taken whole.
    sticky: parking_lot::Mutex<Option<u32>>,
}

impl Core {
    async fn route(&self, message: &Message, routing: &Routing) -> Result<u32, ClientError> {
        match (&message.key, routing) {
            (_, Routing::Partition(p)) => Ok(*p),
            (Some(k), _) => {
                let shape = self
                    .topic
                    .client
                    .shape(&self.topic.stream, &self.topic.name)
                    .await?;
                Ok(crate::topic::keyed_in(&shape, k))
            }
            (None, r) => self.topic.route(r).await,
        }
    }

    /// Where a background send buffers `message`.
    async fn target(
        &self,
        message: &Message,
        routing: &Routing,
    ) -> Result<background::Target, ClientError> {
        Ok(match (&message.key, routing) {
            (_, Routing::Partition(p)) => background::Target::Named(*p),
            (Some(_), _) if self.elastic => background::Target::ByRange,
            _ => background::Target::Chosen(self.route(message, routing).await?),
        })
    }

    fn lane(&self, partition: u32) -> Arc<Lane> {
        let mut lanes = self.lanes.lock();
        Arc::clone(lanes.entry(partition).or_insert_with(|| {
            Arc::new(Lane {
                partition,
                order: tokio::sync::Mutex::new(()),
                slots: Arc::new(Semaphore::new(self.per_partition)),
                // One batch filling while the in-flight ones are answered, so a lane
                // holds at most `per_partition + 1` unsent batches.
                accumulator: parking_lot::Mutex::new(Accumulator::new(
                    self.batch_length,
                    self.max_batch_bytes,
                    self.linger,
                    self.per_partition + 1,
                )),
                ready: Notify::new(),
                room: Notify::new(),
                answered: Notify::new(),
                sequencer: self
                    .producer_id
                    .map(|id| std::sync::Mutex::new(Sequencer::new(id))),
                #[cfg(test)]
                seen: tests::InFlightSeen::default(),
            })
        }))
    }

    /// Splits messages of one partition into batches and sends them, up to
    /// the partition's in-flight bound at once. With idempotence their sequence numbers
    /// are assigned in order, and the broker appends them in sequence order whatever
    /// order they arrive in, so pipelining keeps the partition's order.
    ///
    /// On an elastic topic, the batches a sealed range refused (`NOT_OWNER`: certainly
    /// not stored there, as the broker checks for retries first) are routed again by
    /// the ranges read anew, in their order, unless the caller named the partition
    /// (`reroute` false: that refusal is the caller's error). `rounds` counts how often
    /// these records were routed again already.
    async fn send_partition(
        &self,
        partition: u32,
        messages: Vec<Message>,
        reroute: bool,
        rounds: u32,
    ) -> Result<Vec<Position>, ClientError> {
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < messages.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < messages.len()
                && end - start < self.batch_length
                && (end == start || bytes + messages[end].approx_len() <= self.max_batch_bytes)
            {
                bytes += messages[end].approx_len();
                end += 1;
            }
            chunks.push(&messages[start..end]);
            start = end;
        }
        let lane = self.lane(partition);
        // `join_all` polls the sends in order, so they queue for the lane's order lock
        // (which is fair) in order, and take their sequences in order.
        let sends = chunks
            .iter()
            .map(|chunk| self.send_batch(partition, &lane, chunk));
        // Every send runs to its end, even when one fails: a send cancelled half-way
        // could be stored without this producer knowing (its epoch would end, but the
        // caller would be told nothing of the stored records).
        let results = futures::future::join_all(sends).await;
        let mut positions = Vec::with_capacity(messages.len());
        // Where each refused chunk's positions go, and its records in order.
        let mut refused: Vec<(usize, Message)> = Vec::new();
        let mut failure = None;
        for (chunk, result) in chunks.iter().zip(results) {
            match result {
                Ok(base) => positions.extend((0..chunk.len() as u64).map(|i| Position {
                    partition,
                    offset: base + i,
                })),
                Err(e) if reroute && self.resealed(&e) => {
                    refused.extend(chunk.iter().cloned().map(|m| (positions.len(), m)));
                    positions.extend(chunk.iter().map(|_| Position {
                        partition,
                        offset: 0,
                    }));
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !refused.is_empty() {
            let (slots, again): (Vec<usize>, Vec<Message>) = refused.into_iter().unzip();
            let moved = self.reroute(again, rounds).await?;
            for (slot, position) in slots.into_iter().zip(moved) {
                positions[slot] = position;
            }
        }
        Ok(positions)
    }

    /// Whether a batch refused with `e` was refused by a sealed range of an elastic
    /// topic (`NOT_OWNER`), so it is certainly not stored and goes to the range now
    /// covering its keys.
    fn resealed(&self, e: &ClientError) -> bool {
        self.elastic && e.code() == Some(ErrorCode::NotOwner)
    }

    /// Sends records a sealed range refused again, routed by the topic's ranges read
    /// anew, in their order: keyed ones to the open range covering their key, unkeyed
    /// ones to one open range. More rounds than the retry budget is an error.
    fn reroute(
        &self,
        messages: Vec<Message>,
        rounds: u32,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Position>, ClientError>> + Send + '_>> {
        Box::pin(async move {
            if rounds >= self.policy.retries.max(1) {
                return Err(ClientError::Server {
                    code: ErrorCode::NotOwner,
                    message: format!(
                        "the ranges of {}/{} were sealed under these records {} times in a row",
                        self.topic.stream,
                        self.topic.name,
                        rounds + 1
                    ),
                    offset: None,
                });
            }
            tracing::debug!(
                records = messages.len(),
                rounds,
                "routing records a sealed range refused again"
            );
            self.topic
                .client
                .forget_partitions(&self.topic.stream, &self.topic.name);
            self.send_routed_all(messages, &Routing::Balanced, rounds + 1)
                .await
        })
    }

    /// Sends one batch, retrying within the producer's budget: a lost connection or a
    /// transient error resends it byte for byte (the broker recognises a retry of an
    /// idempotent batch); a batch the broker refused because it forgot the producer is
    /// sent again under a new epoch if nothing of it can be stored, and fails as
    /// [`ClientError::Indeterminate`] if an earlier attempt may be.
    async fn send_batch(
        &self,
        partition: u32,
        lane: &Arc<Lane>,
        messages: &[Message],
    ) -> Result<u64, ClientError> {
        let admitted = {
            let _order = lane.order.lock().await;
            let (slot, permit) = self.slots(lane).await?;
            Admitted {
                registered: Self::register(lane, messages.len())?,
                _slot: slot,
                _permit: permit,
            }
        };
        self.transmit(partition, lane, admitted, messages).await
    }

    /// A slot of the lane and one of the producer. Taken under `lane.order`.
    async fn slots(
        &self,
        lane: &Lane,
    ) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), ClientError> {
        let slot = Arc::clone(&lane.slots)
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Shutdown)?;
        let permit = Arc::clone(&self.in_flight)
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Shutdown)?;
        Ok((slot, permit))
    }

    /// Numbers a batch of `count` records, next in the lane's sequence (idempotent
    /// producers only). Called under `lane.order`, after the batch took its slots.
    fn register(lane: &Arc<Lane>, count: usize) -> Result<Option<Registered>, ClientError> {
        if lane.sequencer.is_none() {
            return Ok(None);
        }
        let (ticket, _) =
            lane.sequencer()?
                .number(count as u32)
                .ok_or(ClientError::EpochsExhausted {
                    partition: lane.partition,
                })?;
        Ok(Some(Registered {
            lane: Arc::clone(lane),
            ticket,
            acknowledged: false,
        }))
    }

    /// Sends an admitted batch; see [`Core::send_batch`].
    async fn transmit(
        &self,
        partition: u32,
        lane: &Lane,
        admitted: Admitted,
        messages: &[Message],
    ) -> Result<u64, ClientError> {
        #[cfg(test)]
        let _seen = lane.seen.enter();
        let mut admitted = admitted;
        let registered = &mut admitted.registered;
        let body = RequestBody::Produce(ProduceRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            partition,
            ranged: self.elastic,
        });
        let client = &self.topic.client;
        let mut sent = None;
        let mut batch = None;
        let mut backoff = self.policy.backoff;
        let mut migrating = crate::client::Migrating::default();
        let mut attempt = 0;
        loop {
            // The identity may change between attempts (renumbered into a new epoch).
            let identity = match &registered {
                Some(r) => lane.sequencer()?.identity(r.ticket),
                None => None,
            };
            let built = match batch.take() {
                Some(built) if sent.is_some() && identity == sent => built,
                _ => {
                    sent = identity;
                    build_batch(messages, identity)?
                }
            };
            let attempted = client.attempt(&body, built.bytes(), Some(&built)).await;
            batch = Some(built);
            let error = match attempted {
                Attempt::Answered(ResponseBody::Produce(r), _) => {
                    if let Some(r) = registered.as_mut() {
                        r.acknowledged = true;
                    }
                    return Ok(r.base_offset);
                }
                Attempt::Answered(other, _) => return Err(unexpected(&other)),
                Attempt::Refused(e) => {
                    let code = e.code().unwrap_or(ErrorCode::Unspecified);
                    let refusal = match (&registered, identity) {
                        (Some(r), Some(id)) => lane.sequencer()?.refused(r.ticket, id, code),
                        _ => Refusal::Fail,
                    };
                    match refusal {
                        Refusal::Resend(now) if attempt < self.policy.retries => {
                            tracing::info!(partition, producer_id = now.id, epoch = now.epoch, error = %e, "the broker forgot this producer: sending the batch again under a new epoch");
                            attempt += 1;
                            continue;
                        }
                        Refusal::Unknown => {
                            return Err(ClientError::Indeterminate(format!(
                                "partition {partition} forgot this idempotent producer ({e}) while an earlier attempt of the batch had no answer; it may be stored, and resending it under a new epoch could store it twice"
                            )));
                        }
                        Refusal::Resend(_) | Refusal::Fail => {}
                    }
                    // A sealed range's refusal is final: the caller routes the records again.
                    if !e.is_transient() || self.resealed(&e) {
                        return Err(e);
                    }
                    if code == ErrorCode::ShuttingDown
                        && let Some(r) = &registered
                    {
                        // Cancelled at the end of a drain: it may have been written.
                        lane.sequencer()?.maybe_stored(r.ticket);
                    }
                    e
                }
                Attempt::NotSent(e) => e,
                Attempt::Lost(e) => match &registered {
                    Some(r) => {
                        lane.sequencer()?.maybe_stored(r.ticket);
                        e
                    }
                    // Not safe to resend: it may have been applied.
                    None => return Err(ClientError::Indeterminate(e.to_string())),
                },
                Attempt::Failed(e) => return Err(e),
            };
            if client.is_closed() {
                return Err(ClientError::Closed);
            }
            // A range being sealed answers within one fdatasync and a catalog write
            // (docs/RANGES.md §3): its batches wait 20 ms, doubling, apart from the
            // retry budget (up to `MIGRATING_PATIENCE` in all).
            if let Some(pause) = migrating.pause(&error) {
                tracing::debug!(partition, error = %error, "resending a batch after the range's seal");
                tokio::time::sleep(pause).await;
                continue;
            }
            if attempt >= self.policy.retries {
                return Err(error);
            }
            attempt += 1;
            tracing::debug!(partition, attempt, error = %error, "resending a batch after a transient error");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.policy.backoff_max);
        }
    }

    async fn send_all(
        &self,
        messages: Vec<Message>,
        routing: &Routing,
    ) -> Result<Vec<Position>, ClientError> {
        self.send_routed_all(messages, routing, 0).await
    }

    async fn send_routed_all(
        &self,
        messages: Vec<Message>,
        routing: &Routing,
        rounds: u32,
    ) -> Result<Vec<Position>, ClientError> {
        let reroute = !matches!(routing, Routing::Partition(_));
        let n = messages.len();
        let mut groups: BTreeMap<u32, (Vec<usize>, Vec<Message>)> = BTreeMap::new();
        // Unkeyed messages of one call share one partition when balanced.
        let balanced = match routing {
            Routing::Balanced => Some(self.topic.route(routing).await?),
            _ => None,
        };
        // The whole call goes to one partition (a fixed one, or balanced and unkeyed):
        // send the messages as they are, without moving each into a per-partition group.
        let single = match (routing, balanced) {
            (Routing::Partition(p), _) => Some(*p),
            (_, Some(b)) if messages.iter().all(|m| m.key.is_none()) => Some(b),
            _ => None,
        };
        if let Some(p) = single {
            return self.send_partition(p, messages, reroute, rounds).await;
        }
        // Keyed messages need the topic's shape: look it up once per call, not once
        // per message (the lookup locks the client's shared metadata).
        let shape = if !matches!(routing, Routing::Partition(_))
            && messages.iter().any(|m| m.key.is_some())
        {
            Some(
                self.topic
                    .client
                    .shape(&self.topic.stream, &self.topic.name)
                    .await?,
            )
        } else {
            None
        };
        for (i, m) in messages.into_iter().enumerate() {
            let p = match (balanced, &m.key, routing) {
                (_, _, Routing::Partition(p)) => *p,
                (_, Some(k), _) => match &shape {
                    Some(shape) => crate::topic::keyed_in(shape, k),
                    None => self.route(&m, routing).await?,
                },
                (None, None, _) => self.route(&m, routing).await?,
                (Some(b), None, _) => b,
            };
            let entry = groups.entry(p).or_default();
            entry.0.push(i);
            entry.1.push(m);
        }
        let sends = groups.into_iter().map(|(p, (idx, msgs))| async move {
            let placed = self.send_partition(p, msgs, reroute, rounds).await?;
            Ok::<_, ClientError>((idx, placed))
        });
        let mut positions = vec![
            Position {
                partition: 0,
                offset: 0
            };
            n
        ];
        for (idx, placed) in futures::future::try_join_all(sends).await? {
            for (i, position) in idx.into_iter().zip(placed) {
                positions[i] = position;
            }
        }
        Ok(positions)
    }
}

/// A producer; see [`ProducerBuilder`].
///
/// In direct mode each `send` returns once the broker acknowledged (idempotent sends
/// are retried safely); concurrent sends to a partition share batches (see
/// [`ProducerBuilder::linger`]). In background mode `send` returns once buffered; a
/// failed background send is reported by the next call.
///
/// A message with an empty key, or with a key and an explicit partition (from
/// `send_to_partition` or `Routing::Partition`), fails with
/// [`ClientError::InvalidArgument`] in every mode, and nothing is sent.
///
/// Dropping a direct-mode producer cancels no batch that sends joined: each is still
/// sent (once its linger passed) by the producer's tasks. `shutdown` waits for them.
#[derive(Debug)]
pub struct Producer {
    core: Arc<Core>,
    background: Option<Shards>,
}

impl Producer {
    /// Sends a message with the producer's routing. Returns its position in direct
    /// mode, `None` in background mode.
    ///
    /// In direct mode the message joins its partition's open batch and the call waits
    /// for that batch's answer: its own position, or the batch's error (every caller in
    /// a failed batch gets it). Dropping the returned future before it is done does not
    /// withdraw the message once it joined a batch — the batch is sent for everyone in
    /// it, and only this caller's answer is lost. Dropped while it waited for room (a
    /// partition holds at most one more unsent batch than it may have in flight), it
    /// handed nothing over.
    pub async fn send(&self, message: Message) -> Result<Option<Position>, ClientError> {
        let routing = self.core.routing.clone();
        self.send_routed(message, &routing).await
    }

    /// Sends a message to its key's partition (as [`Producer::send`]). An empty key, or
    /// a producer routed to a fixed partition, is an error.
    pub async fn send_keyed(
        &self,
        message: Message,
        key: impl Into<Bytes>,
    ) -> Result<Option<Position>, ClientError> {
        self.send(message.with_key(key)).await
    }

    /// Sends a message to a partition (as [`Producer::send`]). A keyed message is an
    /// error: a record takes a key or a partition, not both.
    pub async fn send_to_partition(
        &self,
        message: Message,
        partition: u32,
    ) -> Result<Option<Position>, ClientError> {
        self.send_routed(message, &Routing::Partition(partition))
            .await
    }

    async fn send_routed(
        &self,
        message: Message,
        routing: &Routing,
    ) -> Result<Option<Position>, ClientError> {
        crate::routing::check(&message, routing)?;
        match &self.background {
            Some(shards) => {
                let target = self.core.target(&message, routing).await?;
                shards.push(target, message).await?;
                Ok(None)
            }
            None => self.core.send_one(message, routing).await.map(Some),
        }
    }

    /// Sends many messages: keyed ones to their key's partition, unkeyed ones per the
    /// routing (one partition per call when balanced). Positions in direct mode, where
    /// the call is sent at once in batches of its own (it does not wait for the linger).
    /// Every message is checked before anything is sent.
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<Vec<Position>, ClientError> {
        for m in &messages {
            crate::routing::check(m, &self.core.routing)?;
        }
        match &self.background {
            Some(shards) => {
                for m in messages {
                    let target = self.core.target(&m, &self.core.routing).await?;
                    shards.push(target, m).await?;
                }
                Ok(Vec::new())
            }
            None => self.core.send_all(messages, &self.core.routing).await,
        }
    }

    /// Waits until everything buffered is sent. In direct mode, every batch that sends
    /// joined before the call goes at once (without waiting for the linger) and the
    /// call waits for their answers, which go to those sends: it returns `Ok`. In
    /// background mode it reports a failed background send.
    pub async fn flush(&self) -> Result<(), ClientError> {
        match &self.background {
            Some(shards) => shards.flush().await,
            None => {
                self.core.flush().await;
                Ok(())
            }
        }
    }

    /// The partition `message` goes to with `routing` (balanced: the next one
    /// round-robin). For [`crate::Batching`], which batches in its caller's task.
    ///
    /// With the partition, the epoch of the range map it was routed by (an elastic
    /// topic's, when the map was read for it).
    pub(crate) async fn partition_of(
        &self,
        message: &Message,
        routing: &Routing,
    ) -> Result<(u32, Option<u64>), ClientError> {
        let topic = &self.core.topic;
        let key = match (&message.key, routing) {
            (_, Routing::Partition(p)) => return Ok((*p, None)),
            (Some(k), _) | (None, Routing::Key(k)) => Some(k),
            (None, Routing::Balanced) => None,
        };
        let shape = topic.client.shape(&topic.stream, &topic.name).await?;
        let partition = match key {
            Some(k) => crate::topic::keyed_in(&shape, k),
            None => topic.balanced_in(&shape),
        };
        Ok((partition, shape.1.map(|m| m.epoch())))
    }

    /// Sends `messages` to `partition` now, in batches within the limits, and returns
    /// their offsets. For [`crate::Batching`].
    pub(crate) async fn send_now(
        &self,
        partition: u32,
        messages: Vec<Message>,
        reroute: bool,
    ) -> Result<Vec<Position>, ClientError> {
        self.core
            .send_partition(partition, messages, reroute, 0)
            .await
    }

    /// Flushes everything buffered, then stops the background shards.
    pub async fn shutdown(self) -> Result<(), ClientError> {
        let result = self.flush().await;
        if let Some(shards) = self.background {
            shards.stop().await;
        }
        result
    }
}
