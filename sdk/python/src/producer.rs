//! The tuned write path: `rill_client::Producer` (batching, retries, idempotence,
//! background sending).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rill_client::{
    Background, Backpressure, ClientError, Producer, ProducerBuilder, Routing, Sharding, Topic,
};

use crate::convert::{Kwargs, PackedPositions, bytes_of, message_of, messages_of, position_out};
use crate::error::{invalid, to_py};
use crate::runtime::{InRuntime, spawn};

/// Options of a producer, as `topic.producer(**options)` takes them.
#[derive(Debug, Clone)]
pub(crate) struct ProducerOptions {
    batch_length: Option<usize>,
    linger_ms: Option<u64>,
    max_batch_bytes: Option<usize>,
    retries: Option<u32>,
    retry_interval_ms: Option<u64>,
    max_in_flight: Option<usize>,
    idempotence: Option<bool>,
    routing: Routing,
    background: Option<Background>,
}

impl ProducerOptions {
    /// Options from keyword arguments; unknown names and bad values are errors.
    pub(crate) fn from_py(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut kw = Kwargs::new(py, "producer", options)?;
        let key: Option<Bound<'_, PyAny>> = kw.take("key")?;
        let partition: Option<u32> = kw.take("partition")?;
        let routing = match (key, partition) {
            (None, None) => Routing::Balanced,
            (Some(key), None) => Routing::Key(bytes_of("the producer's key", &key)?),
            (None, Some(p)) => Routing::Partition(p),
            (Some(_), Some(_)) => {
                return Err(to_py(
                    py,
                    invalid("a producer routes by a key or to a partition, not both"),
                ));
            }
        };
        let background_on: bool = kw.take("background")?.unwrap_or(false);
        let shards: Option<usize> = kw.take("shards")?;
        let sharding: Option<String> = kw.take("sharding")?;
        let buffer_messages: Option<usize> = kw.take("buffer_messages")?;
        let backpressure: Option<String> = kw.take("backpressure")?;
        let backpressure_timeout_ms: Option<u64> = kw.take("backpressure_timeout_ms")?;
        let options = Self {
            batch_length: kw.take("batch_length")?,
            linger_ms: kw.take("linger_ms")?,
            max_batch_bytes: kw.take("max_batch_bytes")?,
            retries: kw.take("retries")?,
            retry_interval_ms: kw.take("retry_interval_ms")?,
            max_in_flight: kw.take("max_in_flight")?,
            idempotence: kw.take("idempotence")?,
            routing,
            background: None,
        };
        kw.finish()?;
        let background = background_options(
            background_on,
            shards,
            sharding.as_deref(),
            buffer_messages,
            backpressure.as_deref(),
            backpressure_timeout_ms,
        )
        .map_err(|e| to_py(py, e))?;
        Ok(Self {
            background,
            ..options
        })
    }

    fn builder(&self, topic: &Topic) -> ProducerBuilder {
        let mut b = topic.producer().routing(self.routing.clone());
        if let Some(n) = self.batch_length {
            b = b.batch_length(n);
        }
        if let Some(ms) = self.linger_ms {
            b = b.linger(Duration::from_millis(ms));
        }
        if let Some(n) = self.max_batch_bytes {
            b = b.max_batch_bytes(n);
        }
        if self.retries.is_some() || self.retry_interval_ms.is_some() {
            b = b.retries(
                self.retries.unwrap_or(3),
                Duration::from_millis(self.retry_interval_ms.unwrap_or(1000)),
            );
        }
        if let Some(n) = self.max_in_flight {
            b = b.max_in_flight(n);
        }
        if let Some(on) = self.idempotence {
            b = b.idempotence(on);
        }
        if let Some(background) = self.background {
            b = b.background(background);
        }
        b
    }
}

fn background_options(
    on: bool,
    shards: Option<usize>,
    sharding: Option<&str>,
    buffer_messages: Option<usize>,
    backpressure: Option<&str>,
    backpressure_timeout_ms: Option<u64>,
) -> Result<Option<Background>, ClientError> {
    let any = shards.is_some()
        || sharding.is_some()
        || buffer_messages.is_some()
        || backpressure.is_some()
        || backpressure_timeout_ms.is_some();
    if !on {
        if any {
            return Err(invalid(
                "shards, sharding, buffer_messages and backpressure need background=True",
            ));
        }
        return Ok(None);
    }
    let default = Background::default();
    let sharding = match sharding {
        None | Some("ordered") => Sharding::Ordered,
        Some("balanced") => Sharding::Balanced,
        Some(other) => {
            return Err(invalid(format!(
                "sharding {other:?}: expected \"ordered\" or \"balanced\""
            )));
        }
    };
    let backpressure = match (backpressure, backpressure_timeout_ms) {
        (None | Some("block"), None) => Backpressure::Block,
        (Some("fail"), None) => Backpressure::Fail,
        (Some("block_for"), Some(ms)) => {
            Backpressure::BlockFor(crate::convert::positive_ms("backpressure_timeout_ms", ms)?)
        }
        (Some("block_for"), None) => {
            return Err(invalid(
                "backpressure \"block_for\" needs backpressure_timeout_ms",
            ));
        }
        (None | Some("block" | "fail"), Some(_)) => {
            return Err(invalid(
                "backpressure_timeout_ms goes with backpressure=\"block_for\" only",
            ));
        }
        (Some(other), _) => {
            return Err(invalid(format!(
                "backpressure {other:?}: expected \"block\", \"block_for\" or \"fail\""
            )));
        }
    };
    Ok(Some(Background {
        shards: shards.unwrap_or(default.shards),
        sharding,
        buffer_messages: buffer_messages.unwrap_or(default.buffer_messages),
        backpressure,
    }))
}

/// The state of a producer: not built yet, running, or shut down.
#[derive(Debug)]
enum State {
    New,
    Running(InRuntime<Producer>),
    ShutDown,
}

/// A producer (`rill_client::Producer`). Sends run concurrently; `shutdown()` waits
/// for those in flight, flushes and stops.
#[pyclass(frozen, module = "rill._native", name = "Producer")]
#[derive(Debug)]
pub(crate) struct PyProducer {
    topic: Topic,
    options: ProducerOptions,
    /// Sends hold it shared; `init` and `shutdown` exclusively.
    state: Arc<tokio::sync::RwLock<State>>,
}

impl PyProducer {
    pub(crate) fn new(topic: Topic, options: ProducerOptions) -> Self {
        Self {
            topic,
            options,
            state: Arc::new(tokio::sync::RwLock::new(State::New)),
        }
    }
}

/// The running producer of `state`, or why there is none.
fn running(state: &State) -> Result<&Producer, ClientError> {
    match state {
        State::Running(p) => p.get().ok_or(ClientError::Shutdown),
        State::New => Err(invalid(
            "the producer is not initialized: await init() first",
        )),
        State::ShutDown => Err(ClientError::Shutdown),
    }
}

#[pymethods]
impl PyProducer {
    /// Validates the options and starts the producer (an idempotent one asks the broker
    /// for its producer id). Calling it again does nothing.
    fn init<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let state = Arc::clone(&self.state);
        let builder = self.options.builder(&self.topic);
        spawn(py, async move {
            let mut state = state.write().await;
            match &*state {
                State::Running(_) => Ok(()),
                State::ShutDown => Err(ClientError::Shutdown),
                State::New => {
                    *state = State::Running(InRuntime::new(builder.build().await?));
                    Ok(())
                }
            }
        })
    }

    /// Sends one message with the producer's routing, to `key`'s partition, or to
    /// `partition` (a key together with a partition is an error). Returns `(partition,
    /// offset)` in direct mode, `None` in background mode (once buffered).
    #[pyo3(signature = (value, *, key=None, partition=None, headers=None))]
    fn send<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
        key: Option<&Bound<'py, PyAny>>,
        partition: Option<u32>,
        headers: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let message = message_of(value, key, headers)?;
        let state = Arc::clone(&self.state);
        spawn(py, async move {
            let state = state.read().await;
            let producer = running(&state)?;
            let at = match partition {
                Some(p) => producer.send_to_partition(message, p).await?,
                None => producer.send(message).await?,
            };
            Ok(at.map(position_out))
        })
    }

    /// Sends many `(value, key, headers)` messages, each checked before anything is
    /// sent. Positions in direct mode, `[]` in background mode.
    fn send_batch<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let messages = messages_of(messages)?;
        let state = Arc::clone(&self.state);
        spawn(py, async move {
            let state = state.read().await;
            let positions = running(&state)?.send_batch(messages).await?;
            Ok(PackedPositions::new(positions))
        })
    }

    /// Waits until everything buffered is sent (reports a failed background send).
    fn flush<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let state = Arc::clone(&self.state);
        spawn(py, async move {
            let state = state.read().await;
            running(&state)?.flush().await
        })
    }

    /// Flushes everything buffered and stops. Later sends fail with `ShutdownError`;
    /// shutting down again does nothing.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let state = Arc::clone(&self.state);
        spawn(py, async move {
            let mut state = state.write().await;
            match std::mem::replace(&mut *state, State::ShutDown) {
                State::Running(mut p) => match p.take() {
                    Some(producer) => producer.shutdown().await,
                    None => Ok(()),
                },
                State::New | State::ShutDown => Ok(()),
            }
        })
    }
}
