//! Explicit client-side batching: `topic.batching()`.
//!
//! No background task: a [`Batching`] buffers in the caller's task (so its methods take
//! `&mut self`) and sends from inside the caller's calls — a batch that is full, every
//! batch whose linger has passed when the next call comes, or everything on `flush` and
//! `close`. Sending goes through a direct-mode [`Producer`] (idempotent, retried).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::{ClientError, Message, Producer, Routing, Topic};

/// Options of a [`Batching`] sender; see [`Topic::batching`].
///
/// Defaults: 512 records or 1 MiB per batch, 5 ms linger, idempotent, balanced routing.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct BatchingBuilder {
    topic: Topic,
    batch_length: usize,
    max_batch_bytes: usize,
    linger: Duration,
    routing: Routing,
}

impl BatchingBuilder {
    pub(crate) fn new(topic: Topic) -> Self {
        Self {
            topic,
            batch_length: 512,
            max_batch_bytes: 1 << 20,
            linger: Duration::from_millis(5),
            routing: Routing::Balanced,
        }
    }

    /// Records per batch at most (default 512).
    pub fn batch_length(mut self, n: usize) -> Self {
        self.batch_length = n;
        self
    }

    /// Bytes per batch at most (default 1 MiB).
    pub fn max_batch_bytes(mut self, n: usize) -> Self {
        self.max_batch_bytes = n;
        self
    }

    /// How long a batch waits to fill (default 5 ms, must be positive). There is no
    /// timer: a batch that has waited this long goes out at the next call of the
    /// [`Batching`] (a `send`, `flush` or `close`), so an idle sender holds its records
    /// until then.
    pub fn linger(mut self, d: Duration) -> Self {
        self.linger = d;
        self
    }

    /// Routing of unkeyed messages (default `Balanced`: they fill one partition's batch
    /// until it is sent, then the next partition's). Keyed messages go to their key's
    /// partition; with `Routing::Partition` a keyed message is an error.
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Validates the options and returns the sender.
    pub async fn build(self) -> Result<Batching, ClientError> {
        if self.linger.is_zero() {
            return Err(ClientError::InvalidArgument(
                "linger must be positive".into(),
            ));
        }
        let producer = self
            .topic
            .producer()
            .batch_length(self.batch_length)
            .max_batch_bytes(self.max_batch_bytes)
            .routing(self.routing.clone())
            .build()
            .await?;
        Ok(Batching {
            producer,
            routing: self.routing,
            batch_length: self.batch_length,
            max_batch_bytes: self.max_batch_bytes,
            linger: self.linger,
            open: BTreeMap::new(),
            balanced: None,
            epoch: None,
        })
    }
}

/// Collects messages into one batch per partition and sends a batch when it is full,
/// when its linger has passed (checked at each call), or on [`Batching::flush`] and
/// [`Batching::close`].
///
/// Each call that sends waits for the broker's answer and returns the first error of
/// what it sent; the records of a failed batch are not kept (they were not stored, or
/// — for [`ClientError::Indeterminate`] — may have been). Dropping a call's future
/// while it sends leaves the outcome of those records unknown. Dropping the `Batching`
/// itself discards what is buffered: call `close` (or `flush`) first.
///
/// A message with an empty key, or a keyed message with `Routing::Partition`, fails
/// with [`ClientError::InvalidArgument`] and is not buffered.
#[derive(Debug)]
pub struct Batching {
    producer: Producer,
    routing: Routing,
    batch_length: usize,
    max_batch_bytes: usize,
    linger: Duration,
    /// Per partition, the batch being filled (never empty).
    open: BTreeMap<u32, Open>,
    /// The partition balanced messages fill, until its batch is sent.
    balanced: Option<u32>,
    /// On an elastic topic: the epoch of the range map the buffered messages were
    /// routed by.
    epoch: Option<u64>,
}

#[derive(Debug)]
struct Open {
    messages: Vec<Message>,
    bytes: usize,
    /// When its first record came.
    since: Instant,
}

impl Batching {
    /// Buffers a message; sends the batches that are due (its own if the message
    /// filled it, and every one whose linger has passed) and returns their first error.
    pub async fn send(&mut self, message: Message) -> Result<(), ClientError> {
        crate::routing::check(&message, &self.routing)?;
        // With the partition, the epoch of the range map a keyed message was routed by.
        let (partition, epoch) = match (&message.key, &self.routing) {
            (None, Routing::Balanced) => match self.balanced {
                Some(p) => (p, None),
                None => {
                    let (p, _) = self.producer.partition_of(&message, &self.routing).await?;
                    (*self.balanced.insert(p), None)
                }
            },
            _ => self.producer.partition_of(&message, &self.routing).await?,
        };
        let mut due = Vec::new();
        // On an elastic topic, a message routed by a newer range map than the buffered
        // ones goes after them: they are sent first (and routed again if a sealed range
        // refuses them), so no key's records change order.
        let mut older = Ok(());
        if let Some(current) = epoch {
            if self.epoch.is_some_and(|before| before != current) {
                let partitions: Vec<u32> = self.open.keys().copied().collect();
                let buffered: Vec<_> = partitions
                    .into_iter()
                    .filter_map(|p| self.take(p))
                    .collect();
                older = self.send_due(buffered).await;
            }
            self.epoch = Some(current);
        }
        let now = Instant::now();
        due.extend(self.add(partition, message, now));
        let lingered: Vec<u32> = self
            .open
            .iter()
            .filter(|(_, o)| now >= o.since + self.linger)
            .map(|(&p, _)| p)
            .collect();
        for p in lingered {
            due.extend(self.take(p));
        }
        let sent = self.send_due(due).await;
        older.and(sent)
    }

    /// Sends everything buffered and waits for it; returns the first error.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        let partitions: Vec<u32> = self.open.keys().copied().collect();
        let due = partitions
            .into_iter()
            .filter_map(|p| self.take(p))
            .collect();
        self.send_due(due).await
    }

    /// Flushes, then releases the sender.
    pub async fn close(mut self) -> Result<(), ClientError> {
        self.flush().await
    }

    /// Records buffered, not yet sent.
    pub fn buffered(&self) -> usize {
        self.open.values().map(|o| o.messages.len()).sum()
    }

    /// Buffers `message` for `partition`; returns the batches it made due (the
    /// partition's open batch, if the message does not fit in it, and the message's
    /// own if it filled it).
    fn add(&mut self, partition: u32, message: Message, now: Instant) -> Vec<(u32, Vec<Message>)> {
        let mut due = Vec::new();
        let len = message.approx_len();
        if self
            .open
            .get(&partition)
            .is_some_and(|o| o.bytes + len > self.max_batch_bytes)
        {
            due.extend(self.take(partition));
        }
        let open = self.open.entry(partition).or_insert_with(|| Open {
            messages: Vec::new(),
            bytes: 0,
            since: now,
        });
        open.messages.push(message);
        open.bytes += len;
        if open.messages.len() >= self.batch_length || open.bytes >= self.max_batch_bytes {
            due.extend(self.take(partition));
        }
        due
    }

    fn take(&mut self, partition: u32) -> Option<(u32, Vec<Message>)> {
        let open = self.open.remove(&partition)?;
        if self.balanced == Some(partition) {
            self.balanced = None;
        }
        Some((partition, open.messages))
    }

    /// Sends each partition's batch at once; every send runs to its end (one cancelled
    /// half-way could be stored without the caller hearing of it).
    async fn send_due(&self, due: Vec<(u32, Vec<Message>)>) -> Result<(), ClientError> {
        // A partition the caller named is not routed again if it is a sealed range.
        let named = matches!(self.routing, Routing::Partition(_));
        let sends = due
            .into_iter()
            .map(|(p, messages)| self.producer.send_now(p, messages, !named));
        futures::future::join_all(sends)
            .await
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }
}

impl Drop for Batching {
    fn drop(&mut self) {
        let lost = self.buffered();
        if lost > 0 {
            tracing::warn!(
                records = lost,
                "a Batching was dropped with records buffered: they are not sent (call close)"
            );
        }
    }
}
