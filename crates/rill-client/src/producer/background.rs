//! Background sending: shards that gather buffered messages into batches and send them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::{Background, Backpressure, Core, Sharding};
use crate::{ClientError, Message};

enum ShardMsg {
    Send(Target, Message),
    Flush(oneshot::Sender<()>),
}

/// Where a buffered message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Target {
    /// The partition the caller named: a sealed range's refusal is the caller's error.
    Named(u32),
    /// The partition the producer's routing chose when the message was buffered.
    Chosen(u32),
    /// A keyed message of an elastic topic: routed by the ranges when its shard sends
    /// it. All of one key's messages go through one shard (by key hash), and a shard
    /// routes all it sends at once by one map, so a message routed by an older map is
    /// sent (and routed again if refused) before one routed by a newer map.
    ByRange,
}

/// The shards of a background producer. Its locks do not poison: the first failure
/// is set or taken whole, and the task list is only taken at shutdown.
#[derive(Debug)]
pub(super) struct Shards {
    senders: Vec<mpsc::Sender<ShardMsg>>,
    config: Background,
    next: std::sync::atomic::AtomicUsize,
    failure: Arc<Mutex<Option<String>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for ShardMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Send(t, _) => write!(f, "Send({t:?})"),
            Self::Flush(_) => f.write_str("Flush"),
        }
    }
}

impl Shards {
    pub(super) fn start(core: Arc<Core>, config: Background, linger: Duration) -> Self {
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
        match self.failure.lock().take() {
            Some(e) => Err(ClientError::Background(e)),
            None => Ok(()),
        }
    }

    pub(super) async fn push(&self, target: Target, message: Message) -> Result<(), ClientError> {
        self.take_failure()?;
        let n = self.senders.len();
        let shard = match (self.config.sharding, target) {
            (_, Target::ByRange) => {
                let key = message.key.as_deref().unwrap_or_default();
                (crate::routing::key_hash(key) % n as u64) as usize
            }
            (Sharding::Ordered, Target::Named(p) | Target::Chosen(p)) => p as usize % n,
            (Sharding::Balanced, _) => {
                self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % n
            }
        };
        let tx = &self.senders[shard];
        let msg = ShardMsg::Send(target, message);
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

    pub(super) async fn flush(&self) -> Result<(), ClientError> {
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
    // Per partition and whether the caller named it, the messages to send.
    let mut pending: BTreeMap<(u32, bool), Vec<Message>> = BTreeMap::new();
    // Keyed messages of an elastic topic, in arrival order, routed when sent.
    let mut by_range: Vec<Message> = Vec::new();
    let mut count = 0usize;
    let mut flushes = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let deadline = tokio::time::Instant::now() + linger;
        loop {
            match next.take() {
                Some(ShardMsg::Send(target, m)) => {
                    match target {
                        Target::Named(p) => pending.entry((p, true)).or_default().push(m),
                        Target::Chosen(p) => pending.entry((p, false)).or_default().push(m),
                        Target::ByRange => by_range.push(m),
                    }
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
        count = 0;
        if !by_range.is_empty() {
            match core
                .topic
                .client
                .shape(&core.topic.stream, &core.topic.name)
                .await
            {
                Ok(shape) => {
                    for m in by_range.drain(..) {
                        let key = m.key.as_deref().unwrap_or_default();
                        let p = crate::topic::keyed_in(&shape, key);
                        pending.entry((p, false)).or_default().push(m);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, records = by_range.len(), "background send failed: cannot read the topic's ranges");
                    failure.lock().get_or_insert_with(|| e.to_string());
                    by_range.clear();
                }
            }
        }
        let batches = std::mem::take(&mut pending);
        let sends = batches.into_iter().map(|((p, named), msgs)| {
            let core = Arc::clone(&core);
            async move { core.send_partition(p, msgs, !named, 0).await }
        });
        for result in futures::future::join_all(sends).await {
            if let Err(e) = result {
                tracing::warn!(error = %e, "background send failed");
                failure.lock().get_or_insert_with(|| e.to_string());
            }
        }
        for ack in flushes.drain(..) {
            let _ = ack.send(());
        }
    }
}

impl Shards {
    /// Stops the shards once they have sent what they hold, and waits for them.
    pub(super) async fn stop(self) {
        let tasks = std::mem::take(&mut *self.tasks.lock());
        drop(self.senders);
        for t in tasks {
            let _ = t.await;
        }
    }
}
