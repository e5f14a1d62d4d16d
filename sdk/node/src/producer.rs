//! The tuned write path: `rill_client::Producer` (batching, retries, idempotence,
//! background sending).

use std::sync::Arc;
use std::time::Duration;

use napi::Env;
use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi_derive::napi;
use rill_client::{
    Background, Backpressure, ClientError, Producer, ProducerBuilder, Routing, Sharding, Topic,
};

use crate::convert::{
    MessageIn, PackedPositions, PositionOut, message_in, messages_in, packed_in, packed_positions,
    position_out, positive_ms,
};
use crate::error::{invalid, to_napi};
use crate::runtime::{InRuntime, spawn};

/// Options of a producer, as `topic.producer(options)` takes them.
#[napi(object)]
#[derive(Default)]
#[allow(missing_debug_implementations)] // `Buffer` has no `Debug`.
pub struct ProducerOptions {
    pub batch_length: Option<u32>,
    pub linger_ms: Option<u32>,
    pub max_batch_bytes: Option<u32>,
    pub retries: Option<u32>,
    pub retry_interval_ms: Option<u32>,
    pub max_in_flight: Option<u32>,
    pub idempotence: Option<bool>,
    /// Routes every message by this key (unless a send names its own key or partition).
    pub key: Option<Buffer>,
    /// Routes every message to this partition.
    pub partition: Option<u32>,
    pub background: Option<bool>,
    pub shards: Option<u32>,
    pub sharding: Option<String>,
    pub buffer_messages: Option<u32>,
    pub backpressure: Option<String>,
    pub backpressure_timeout_ms: Option<u32>,
}

fn ms(n: u32) -> Duration {
    Duration::from_millis(u64::from(n))
}

fn usize_of(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn background_of(o: &ProducerOptions) -> Result<Option<Background>, ClientError> {
    let any = o.shards.is_some()
        || o.sharding.is_some()
        || o.buffer_messages.is_some()
        || o.backpressure.is_some()
        || o.backpressure_timeout_ms.is_some();
    if !o.background.unwrap_or(false) {
        if any {
            return Err(invalid(
                "shards, sharding, bufferMessages and backpressure need background: true",
            ));
        }
        return Ok(None);
    }
    let default = Background::default();
    let sharding = match o.sharding.as_deref() {
        None | Some("ordered") => Sharding::Ordered,
        Some("balanced") => Sharding::Balanced,
        Some(other) => {
            return Err(invalid(format!(
                "sharding {other:?}: expected \"ordered\" or \"balanced\""
            )));
        }
    };
    let backpressure = match (o.backpressure.as_deref(), o.backpressure_timeout_ms) {
        (None | Some("block"), None) => Backpressure::Block,
        (Some("fail"), None) => Backpressure::Fail,
        (Some("blockFor"), Some(t)) => {
            Backpressure::BlockFor(positive_ms("backpressureTimeoutMs", t)?)
        }
        (Some("blockFor"), None) => {
            return Err(invalid(
                "backpressure \"blockFor\" needs backpressureTimeoutMs",
            ));
        }
        (None | Some("block" | "fail"), Some(_)) => {
            return Err(invalid(
                "backpressureTimeoutMs goes with backpressure: \"blockFor\" only",
            ));
        }
        (Some(other), _) => {
            return Err(invalid(format!(
                "backpressure {other:?}: expected \"block\", \"blockFor\" or \"fail\""
            )));
        }
    };
    Ok(Some(Background {
        shards: o.shards.map_or(default.shards, usize_of),
        sharding,
        buffer_messages: o.buffer_messages.map_or(default.buffer_messages, usize_of),
        backpressure,
    }))
}

/// The SDK's builder for `options` (checked here; the SDK checks the rest on build).
pub(crate) fn builder(topic: &Topic, o: ProducerOptions) -> napi::Result<ProducerBuilder> {
    let routing = match (&o.key, o.partition) {
        (None, None) => Routing::Balanced,
        (Some(key), None) => Routing::Key(bytes::Bytes::copy_from_slice(key)),
        (None, Some(p)) => Routing::Partition(p),
        (Some(_), Some(_)) => {
            return Err(to_napi(invalid(
                "a producer routes by a key or to a partition, not both",
            )));
        }
    };
    let background = background_of(&o).map_err(to_napi)?;
    let mut b = topic.producer().routing(routing);
    if let Some(n) = o.batch_length {
        b = b.batch_length(usize_of(n));
    }
    if let Some(t) = o.linger_ms {
        b = b.linger(ms(t));
    }
    if let Some(n) = o.max_batch_bytes {
        b = b.max_batch_bytes(usize_of(n));
    }
    if o.retries.is_some() || o.retry_interval_ms.is_some() {
        b = b.retries(
            o.retries.unwrap_or(3),
            ms(o.retry_interval_ms.unwrap_or(1000)),
        );
    }
    if let Some(n) = o.max_in_flight {
        b = b.max_in_flight(usize_of(n));
    }
    if let Some(on) = o.idempotence {
        b = b.idempotence(on);
    }
    if let Some(background) = background {
        b = b.background(background);
    }
    Ok(b)
}

/// A running producer (`rill_client::Producer`). Sends run concurrently; `shutdown()`
/// waits for those in flight, flushes and stops.
#[napi]
#[derive(Debug)]
pub struct NativeProducer {
    /// Sends hold it shared; `shutdown` exclusively. `None` once shut down.
    state: Arc<tokio::sync::RwLock<InRuntime<Producer>>>,
}

impl NativeProducer {
    pub(crate) fn new(producer: Producer) -> Self {
        Self {
            state: Arc::new(tokio::sync::RwLock::new(InRuntime::new(producer))),
        }
    }
}

#[napi]
impl NativeProducer {
    /// Sends one message with the producer's routing, its own key's partition, or
    /// `partition` (a key together with a partition is an error). The position in
    /// direct mode, `null` in background mode (once buffered).
    #[napi(catch_unwind)]
    pub fn send<'env>(
        &self,
        env: &'env Env,
        message: MessageIn,
        partition: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, Option<PositionOut>>> {
        let message = message_in(message)?;
        let state = Arc::clone(&self.state);
        spawn(env, async move {
            let state = state.read().await;
            let producer = state.get().ok_or(ClientError::Shutdown)?;
            let at = match partition {
                Some(p) => producer.send_to_partition(message, p).await?,
                None => producer.send(message).await?,
            };
            Ok(at.map(position_out))
        })
    }

    /// Sends many messages, each checked before anything is sent. Positions in direct
    /// mode, `[]` in background mode.
    #[napi(catch_unwind)]
    pub fn send_batch<'env>(
        &self,
        env: &'env Env,
        messages: Vec<MessageIn>,
    ) -> napi::Result<PromiseRaw<'env, Vec<PositionOut>>> {
        let messages = messages_in(messages)?;
        let state = Arc::clone(&self.state);
        spawn(env, async move {
            let state = state.read().await;
            let producer = state.get().ok_or(ClientError::Shutdown)?;
            let positions = producer.send_batch(messages).await?;
            Ok(positions.into_iter().map(position_out).collect())
        })
    }

    /// `sendBatch` of messages without headers, packed by JS (`packed_in`): one
    /// buffer of values and one of keys instead of an object per message.
    #[napi]
    pub fn send_packed<'env>(
        &self,
        env: &'env Env,
        values: &[u8],
        value_lengths: &[u32],
        keys: Option<&[u8]>,
        key_lengths: Option<&[i32]>,
    ) -> napi::Result<PromiseRaw<'env, PackedPositions>> {
        let messages = packed_in(values, value_lengths, keys.zip(key_lengths))?;
        let state = Arc::clone(&self.state);
        spawn(env, async move {
            let state = state.read().await;
            let producer = state.get().ok_or(ClientError::Shutdown)?;
            Ok(packed_positions(producer.send_batch(messages).await?))
        })
    }

    /// Waits until everything buffered is sent.
    #[napi]
    pub fn flush<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let state = Arc::clone(&self.state);
        spawn(env, async move {
            let state = state.read().await;
            Ok(state.get().ok_or(ClientError::Shutdown)?.flush().await?)
        })
    }

    /// Flushes everything buffered and stops; again: nothing.
    #[napi]
    pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let state = Arc::clone(&self.state);
        spawn(env, async move {
            let mut state = state.write().await;
            match state.take() {
                Some(producer) => Ok(producer.shutdown().await?),
                None => Ok(()),
            }
        })
    }
}
