//! The tuned write path: batching, retries, idempotence, background sending.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill_format::ProducerInfo;
use rill_proto::pb::{InitProducerRequest, ProduceRequest};
use rill_proto::{RequestBody, ResponseBody};
use tokio::sync::{mpsc, oneshot};

use crate::client::{Retry, RetryPolicy, unexpected};
use crate::message::build_batch;
use crate::{ClientError, Message, Position, Routing, Topic, partition_for_key};

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

    /// In background mode, how long a shard waits to fill a batch (default 0: send
    /// what is buffered as soon as the shard is free).
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

    /// Routing of `send` (default `Balanced`).
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Batches in flight at once, across partitions (default 8). Per partition, an
    /// idempotent producer (the default) keeps up to 5 in flight — the broker appends
    /// them in sequence order — and a non-idempotent one keeps 1, so its batches keep
    /// their order too.
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
        if let Some(b) = &self.background
            && (b.shards == 0 || b.buffer_messages < b.shards)
        {
            return bad("background needs at least one shard and one buffered message per shard");
        }
        let identity = if self.idempotence {
            match self
                .topic
                .client
                .call(
                    RequestBody::InitProducer(InitProducerRequest {}),
                    bytes::Bytes::new(),
                    Retry::Safe,
                )
                .await?
                .0
            {
                ResponseBody::InitProducer(r) => Some(r.producer_id),
                other => return Err(unexpected(&other)),
            }
        } else {
            None
        };
        let core = Arc::new(Core {
            topic: self.topic,
            batch_length: self.batch_length,
            max_batch_bytes: self.max_batch_bytes,
            policy: RetryPolicy {
                retries: self.retries,
                backoff: self.retry_interval,
                backoff_max: self.retry_interval,
            },
            routing: self.routing,
            in_flight: Arc::new(tokio::sync::Semaphore::new(self.max_in_flight)),
            producer_id: identity,
            partitions: Mutex::new(HashMap::new()),
            partition_slots: Mutex::new(HashMap::new()),
        });
        let background = self
            .background
            .map(|b| Shards::start(Arc::clone(&core), b, self.linger));
        Ok(Producer { core, background })
    }
}

/// Per-partition idempotence state: the next sequence, and an epoch bumped after a send
/// whose outcome is unknown (so a reused sequence can never be taken for a retry).
#[derive(Debug, Default)]
struct PartitionState {
    epoch: u16,
    next_sequence: u32,
}

/// Starts a new epoch for a partition unless the send it guards was acknowledged.
#[derive(Debug)]
struct EpochGuard {
    state: Arc<Mutex<PartitionState>>,
    epoch: u16,
    settled: bool,
}

impl Drop for EpochGuard {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut state = lock(&self.state);
        // Once per failed epoch: other sends of the same epoch may fail too.
        if state.epoch == self.epoch {
            state.epoch = state.epoch.wrapping_add(1);
            state.next_sequence = 0;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug)]
struct Core {
    topic: Topic,
    batch_length: usize,
    max_batch_bytes: usize,
    policy: RetryPolicy,
    routing: Routing,
    in_flight: Arc<tokio::sync::Semaphore>,
    producer_id: Option<u64>,
    partitions: Mutex<HashMap<u32, Arc<Mutex<PartitionState>>>>,
    /// Batches in flight per partition. Idempotent: at most what the broker remembers
    /// for retries (5), so any of them can still be resent safely; the broker orders
    /// them by sequence. Not idempotent: one, since nothing would order them.
    partition_slots: Mutex<HashMap<u32, Arc<tokio::sync::Semaphore>>>,
}

/// Batches the broker remembers per producer and partition (`RECENT_BATCHES`).
const IDEMPOTENT_IN_FLIGHT_PER_PARTITION: usize = 5;

impl Core {
    async fn route(&self, message: &Message, routing: &Routing) -> Result<u32, ClientError> {
        match (&message.key, routing) {
            (_, Routing::Partition(p)) => Ok(*p),
            (Some(k), _) => Ok(partition_for_key(k, self.topic.partitions().await?)),
            (None, r) => self.topic.route(r).await,
        }
    }

    fn state(&self, partition: u32) -> Arc<Mutex<PartitionState>> {
        let mut map = self.partitions.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(partition).or_default())
    }

    /// Splits messages of one partition into batches and sends them, up to
    /// `max_in_flight` at once. With idempotence their sequence numbers are assigned in
    /// order up front, and the broker appends them in sequence order whatever order
    /// they arrive in, so pipelining keeps the partition's order.
    async fn send_partition(
        &self,
        partition: u32,
        messages: Vec<Message>,
    ) -> Result<Vec<u64>, ClientError> {
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
        let identities: Vec<Option<ProducerInfo>> = match self.producer_id {
            None => vec![None; chunks.len()],
            Some(id) => {
                let state = self.state(partition);
                let mut state = lock(&state);
                chunks
                    .iter()
                    .map(|c| {
                        let info = ProducerInfo {
                            id,
                            epoch: state.epoch,
                            base_sequence: state.next_sequence,
                        };
                        state.next_sequence = state.next_sequence.wrapping_add(c.len() as u32);
                        Some(info)
                    })
                    .collect()
            }
        };
        let sends = chunks
            .iter()
            .zip(identities)
            .map(|(chunk, identity)| self.send_batch(partition, chunk, identity));
        // Every send runs to its end, even when one fails: a send cancelled half-way
        // could be stored without this producer knowing (its guard would start a new
        // epoch, but the caller would be told nothing of the stored records).
        let bases = futures::future::join_all(sends)
            .await
            .into_iter()
            .collect::<Result<Vec<u64>, ClientError>>()?;
        let mut offsets = Vec::with_capacity(messages.len());
        for (chunk, base) in chunks.iter().zip(bases) {
            offsets.extend((0..chunk.len() as u64).map(|i| base + i));
        }
        Ok(offsets)
    }

    async fn send_batch(
        &self,
        partition: u32,
        messages: &[Message],
        identity: Option<ProducerInfo>,
    ) -> Result<u64, ClientError> {
        let slots = {
            let per_partition = if self.producer_id.is_some() {
                IDEMPOTENT_IN_FLIGHT_PER_PARTITION
            } else {
                1
            };
            let mut map = lock(&self.partition_slots);
            Arc::clone(
                map.entry(partition)
                    .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(per_partition))),
            )
        };
        let _slot = slots.acquire().await.map_err(|_| ClientError::Shutdown)?;
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| ClientError::Shutdown)?;
        let body = RequestBody::Produce(ProduceRequest {
            stream: self.topic.stream.to_string(),
            topic: self.topic.name.to_string(),
            partition,
        });
        // If this send does not finish with an answer (an error, or the future is
        // dropped), the batch may or may not be stored: the guard then starts a new
        // epoch, so no later batch can be mistaken for a retry of this one.
        let mut guard = identity.map(|info| EpochGuard {
            state: self.state(partition),
            epoch: info.epoch,
            settled: false,
        });
        let batch = build_batch(messages, identity)?;
        // An idempotent batch is safe to resend: a duplicate is acknowledged with the
        // original offsets.
        let retry = if identity.is_some() {
            Retry::Safe
        } else {
            Retry::UnsafeAfterSend
        };
        let result = match self
            .topic
            .client
            .call_with(body, batch, retry, self.policy)
            .await
        {
            Ok((ResponseBody::Produce(r), _)) => Ok(r.base_offset),
            Ok((other, _)) => Err(unexpected(&other)),
            Err(e) => Err(e),
        };
        if let (Some(g), Ok(_)) = (guard.as_mut(), &result) {
            g.settled = true;
        }
        result
    }

    async fn send_all(
        &self,
        messages: Vec<Message>,
        routing: &Routing,
    ) -> Result<Vec<Position>, ClientError> {
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
            let offsets = self.send_partition(p, messages).await?;
            return Ok(offsets
                .into_iter()
                .map(|offset| Position {
                    partition: p,
                    offset,
                })
                .collect());
        }
        // Keyed messages need the partition count: look it up once per call, not once
        // per message (the lookup locks the client's shared metadata).
        let partitions = if !matches!(routing, Routing::Partition(_))
            && messages.iter().any(|m| m.key.is_some())
        {
            Some(self.topic.partitions().await?)
        } else {
            None
        };
        for (i, m) in messages.into_iter().enumerate() {
            let p = match (balanced, &m.key, routing) {
                (_, _, Routing::Partition(p)) => *p,
                (_, Some(k), _) => match partitions {
                    Some(n) => partition_for_key(k, n),
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
            let offsets = self.send_partition(p, msgs).await?;
            Ok::<_, ClientError>((p, idx, offsets))
        });
        let mut positions = vec![
            Position {
                partition: 0,
                offset: 0
            };
            n
        ];
        for (p, idx, offsets) in futures::future::try_join_all(sends).await? {
            for (i, offset) in idx.into_iter().zip(offsets) {
                positions[i] = Position {
                    partition: p,
                    offset,
                };
            }
        }
        Ok(positions)
    }
}

enum ShardMsg {
    Send(u32, Message),
    Flush(oneshot::Sender<()>),
}

#[derive(Debug)]
struct Shards {
    senders: Vec<mpsc::Sender<ShardMsg>>,
    config: Background,
    next: std::sync::atomic::AtomicUsize,
    failure: Arc<Mutex<Option<String>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for ShardMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Send(p, _) => write!(f, "Send({p})"),
            Self::Flush(_) => f.write_str("Flush"),
        }
    }
}

impl Shards {
    fn start(core: Arc<Core>, config: Background, linger: Duration) -> Self {
        let failure: Arc<Mutex<Option<String>>> = Arc::default();
        let per_shard = (config.buffer_messages / config.shards).max(1);
        let mut senders = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..config.shards {
            let (tx, rx) = mpsc::channel(per_shard);
            senders.push(tx);
            tasks.push(tokio::spawn(shard(
                Arc::clone(&core),
                rx,
                linger,
                Arc::clone(&failure),
            )));
        }
        Self {
            senders,
            config,
            next: std::sync::atomic::AtomicUsize::new(0),
            failure,
            tasks: Mutex::new(tasks),
        }
    }

    fn take_failure(&self) -> Result<(), ClientError> {
        match self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            Some(e) => Err(ClientError::Background(e)),
            None => Ok(()),
        }
    }

    async fn push(&self, partition: u32, message: Message) -> Result<(), ClientError> {
        self.take_failure()?;
        let shard = match self.config.sharding {
            Sharding::Ordered => partition as usize % self.senders.len(),
            Sharding::Balanced => {
                self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.senders.len()
            }
        };
        let tx = &self.senders[shard];
        let msg = ShardMsg::Send(partition, message);
        match self.config.backpressure {
            Backpressure::Block => tx.send(msg).await.map_err(|_| ClientError::Shutdown),
            Backpressure::BlockFor(d) => match tokio::time::timeout(d, tx.send(msg)).await {
                Ok(r) => r.map_err(|_| ClientError::Shutdown),
                Err(_) => Err(ClientError::BufferFull),
            },
            Backpressure::Fail => tx.try_send(msg).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => ClientError::BufferFull,
                mpsc::error::TrySendError::Closed(_) => ClientError::Shutdown,
            }),
        }
    }

    async fn flush(&self) -> Result<(), ClientError> {
        let mut acks = Vec::new();
        for tx in &self.senders {
            let (ack, done) = oneshot::channel();
            tx.send(ShardMsg::Flush(ack))
                .await
                .map_err(|_| ClientError::Shutdown)?;
            acks.push(done);
        }
        for done in acks {
            let _ = done.await;
        }
        self.take_failure()
    }
}

/// A shard: gathers messages into batches (up to the batch limits, waiting at most
/// `linger` for more) and sends them, per partition in arrival order.
async fn shard(
    core: Arc<Core>,
    mut rx: mpsc::Receiver<ShardMsg>,
    linger: Duration,
    failure: Arc<Mutex<Option<String>>>,
) {
    let mut pending: BTreeMap<u32, Vec<Message>> = BTreeMap::new();
    let mut count = 0usize;
    let mut flushes = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let deadline = tokio::time::Instant::now() + linger;
        loop {
            match next.take() {
                Some(ShardMsg::Send(p, m)) => {
                    pending.entry(p).or_default().push(m);
                    count += 1;
                }
                Some(ShardMsg::Flush(ack)) => {
                    flushes.push(ack);
                    break;
                }
                None => {}
            }
            if count >= core.batch_length {
                break;
            }
            next = match rx.try_recv() {
                Ok(m) => Some(m),
                Err(_) if linger.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(m)) => Some(m),
                    Ok(None) | Err(_) => break,
                },
            };
        }
        let batches = std::mem::take(&mut pending);
        count = 0;
        let sends = batches.into_iter().map(|(p, msgs)| {
            let core = Arc::clone(&core);
            async move { core.send_partition(p, msgs).await }
        });
        for result in futures::future::join_all(sends).await {
            if let Err(e) = result {
                tracing::warn!(error = %e, "background send failed");
                failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert_with(|| e.to_string());
            }
        }
        for ack in flushes.drain(..) {
            let _ = ack.send(());
        }
    }
}

/// A producer; see [`ProducerBuilder`].
///
/// In direct mode each `send` returns once the broker acknowledged (idempotent sends
/// are retried safely). In background mode `send` returns once buffered; a failed
/// background send is reported by the next call.
#[derive(Debug)]
pub struct Producer {
    core: Arc<Core>,
    background: Option<Shards>,
}

impl Producer {
    /// Sends a message with the producer's routing. Returns its position in direct
    /// mode, `None` in background mode.
    pub async fn send(&self, message: Message) -> Result<Option<Position>, ClientError> {
        let routing = self.core.routing.clone();
        self.send_routed(message, &routing).await
    }

    /// Sends a message to its key's partition.
    pub async fn send_keyed(
        &self,
        message: Message,
        key: impl Into<bytes::Bytes>,
    ) -> Result<Option<Position>, ClientError> {
        self.send(message.with_key(key)).await
    }

    /// Sends a message to a partition.
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
        match &self.background {
            Some(shards) => {
                let p = self.core.route(&message, routing).await?;
                shards.push(p, message).await?;
                Ok(None)
            }
            None => Ok(self.core.send_all(vec![message], routing).await?.pop()),
        }
    }

    /// Sends many messages: keyed ones to their key's partition, unkeyed ones per the
    /// routing (one partition per call when balanced). Positions in direct mode.
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<Vec<Position>, ClientError> {
        match &self.background {
            Some(shards) => {
                for m in messages {
                    let p = self.core.route(&m, &self.core.routing).await?;
                    shards.push(p, m).await?;
                }
                Ok(Vec::new())
            }
            None => self.core.send_all(messages, &self.core.routing).await,
        }
    }

    /// Waits until everything buffered is sent; reports a failed background send.
    pub async fn flush(&self) -> Result<(), ClientError> {
        match &self.background {
            Some(shards) => shards.flush().await,
            None => Ok(()),
        }
    }

    /// Flushes everything buffered, then stops the background shards.
    pub async fn shutdown(self) -> Result<(), ClientError> {
        let result = self.flush().await;
        if let Some(shards) = self.background {
            let tasks =
                std::mem::take(&mut *shards.tasks.lock().unwrap_or_else(|e| e.into_inner()));
            drop(shards.senders);
            for t in tasks {
                let _ = t.await;
            }
        }
        result
    }
}
