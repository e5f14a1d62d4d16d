//! Explicit client-side batching: `topic.batching()`.

use std::time::Duration;

use crate::{Background, Backpressure, ClientError, Message, Producer, Routing, Topic};

/// Options of a [`Batching`] sender; see [`Topic::batching`].
///
/// Defaults: 512 records or 1 MiB per batch, 5 ms linger, idempotent, balanced routing,
/// a buffer of 100,000 messages that blocks when full.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct BatchingBuilder {
    topic: Topic,
    batch_length: usize,
    max_batch_bytes: usize,
    linger: Duration,
    routing: Routing,
    backpressure: Backpressure,
    buffer_messages: usize,
}

impl BatchingBuilder {
    pub(crate) fn new(topic: Topic) -> Self {
        Self {
            topic,
            batch_length: 512,
            max_batch_bytes: 1 << 20,
            linger: Duration::from_millis(5),
            routing: Routing::Balanced,
            backpressure: Backpressure::Block,
            buffer_messages: 100_000,
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

    /// How long a batch waits to fill before it is sent (default 5 ms).
    pub fn linger(mut self, d: Duration) -> Self {
        self.linger = d;
        self
    }

    /// Routing of unkeyed messages (default `Balanced`).
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// What `send` does when the buffer is full (default `Block`).
    pub fn backpressure(mut self, backpressure: Backpressure) -> Self {
        self.backpressure = backpressure;
        self
    }

    /// Messages buffered at most (default 100,000).
    pub fn buffer_messages(mut self, n: usize) -> Self {
        self.buffer_messages = n;
        self
    }

    /// Validates the options and starts the background batching.
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
            .linger(self.linger)
            .routing(self.routing)
            .background(Background {
                buffer_messages: self.buffer_messages,
                backpressure: self.backpressure,
                ..Background::default()
            })
            .build()
            .await?;
        Ok(Batching { producer })
    }
}

/// Collects messages into batches in the background and sends them when a batch is
/// full or has lingered. A failed background send is reported by the next call.
#[derive(Debug)]
pub struct Batching {
    producer: Producer,
}

impl Batching {
    /// Buffers a message (keyed messages go to their key's partition).
    pub async fn send(&self, message: Message) -> Result<(), ClientError> {
        self.producer.send(message).await.map(drop)
    }

    /// Sends everything buffered and waits for it; reports a failed background send.
    pub async fn flush(&self) -> Result<(), ClientError> {
        self.producer.flush().await
    }

    /// Flushes, then stops the background tasks.
    pub async fn close(self) -> Result<(), ClientError> {
        self.producer.shutdown().await
    }
}
