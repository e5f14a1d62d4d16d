//! Background sending: shards that gather buffered messages into batches and send them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::{Background, Backpressure, Core, Sharding};
use crate::{ClientError, Message};

enum ShardMsg {
    Send(u32, Message),
    Flush(oneshot::Sender<()>),
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
            Self::Send(p, _) => write!(f, "Send({p})"),
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

    pub(super) async fn push(&self, partition: u32, message: Message) -> Result<(), ClientError> {
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
