//! Publishing typed events on the idempotent producer (docs/EVENTS.md §7).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use rill_client::{Client, Message, Position, Producer, StreamHandle, Value};
use tokio::sync::Mutex;

use crate::algebra::AlgebraKind;
use crate::{EVENT_HEADER, Event, EventHeader, EventKey, PublishError, key_hash};

/// Publishes events of any type to their key type's topic in one stream, with one
/// idempotent producer per topic: a retried publish is never stored twice.
#[derive(Debug)]
pub struct Publisher {
    stream: StreamHandle,
    producers: Mutex<HashMap<&'static str, Arc<Producer>>>,
}

/// The record of an event: the key's bytes, the encoded body and the `rill.ev` header.
pub(crate) fn event_message<E: Event>(event: &E) -> Result<Message, PublishError> {
    let key = event.key().encode();
    if key.is_empty() {
        return Err(PublishError::EmptyKey);
    }
    let body = E::CODEC.encode(event.body())?;
    let header = EventHeader {
        tag: E::TAG,
        key_hash: key_hash(&key),
        ordering: event.ordering(),
        algebra: <E::Algebra as AlgebraKind<E::Body>>::ALGEBRA,
        codec: E::CODEC,
    };
    Ok(Message::new(body).with_key(key).with_header(
        EVENT_HEADER,
        Value::Bytes(Bytes::copy_from_slice(&header.encode())),
    ))
}

impl Publisher {
    /// A publisher to `stream`.
    pub fn new(client: &Client, stream: impl Into<String>) -> Self {
        Self {
            stream: client.stream(stream),
            producers: Mutex::new(HashMap::new()),
        }
    }

    async fn producer(&self, topic: &'static str) -> Result<Arc<Producer>, PublishError> {
        let mut producers = self.producers.lock().await;
        if let Some(p) = producers.get(topic) {
            return Ok(Arc::clone(p));
        }
        let p = Arc::new(self.stream.topic(topic).producer().build().await?);
        producers.insert(topic, Arc::clone(&p));
        Ok(p)
    }

    /// Publishes one event and waits until it is stored; returns where.
    pub async fn publish<E: Event>(&self, event: &E) -> Result<Position, PublishError> {
        let message = event_message(event)?;
        let producer = self.producer(<E::Key as EventKey>::TOPIC).await?;
        let position = producer.send(message).await?;
        Ok(position.expect("a direct producer returns positions"))
    }

    /// Publishes events of one type, each keyed (one request per partition); every
    /// event is encoded before anything is sent. Returns their positions in order.
    pub async fn publish_batch<E: Event>(
        &self,
        events: &[E],
    ) -> Result<Vec<Position>, PublishError> {
        let messages = events
            .iter()
            .map(event_message)
            .collect::<Result<Vec<_>, _>>()?;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let producer = self.producer(<E::Key as EventKey>::TOPIC).await?;
        Ok(producer.send_batch(messages).await?)
    }

    /// Waits for everything sent and drops the producers.
    pub async fn close(&self) -> Result<(), PublishError> {
        let producers: Vec<Arc<Producer>> = self
            .producers
            .lock()
            .await
            .drain()
            .map(|(_, p)| p)
            .collect();
        for p in producers {
            match Arc::try_unwrap(p) {
                Ok(p) => p.shutdown().await?,
                // A publish in flight holds it: wait for what was sent.
                Err(p) => p.flush().await?,
            }
        }
        Ok(())
    }
}
