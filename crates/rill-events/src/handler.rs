//! Handlers, their errors and the context of a call (docs/EVENTS.md §5).

use std::future::Future;
use std::time::SystemTime;

use bytes::Bytes;

use crate::{Event, EventKey, KeyError};

/// A handler of event type `E`: called with runs of one key's events, reduced by the
/// type's algebra, in application order, in chunks of at most `MAX_BATCH`.
///
/// A handler is a plain value: a unit test calls [`EventHandler::handle`] directly. One
/// value may implement `EventHandler<E>` for several `E`.
pub trait EventHandler<E: Event>: Send + Sync + 'static {
    /// The most events of a call; checked non-zero when the handler is registered (a
    /// compile error for a zero).
    const MAX_BATCH: usize;

    /// Applies `run` (one key's events, in order). An error's class says what happens
    /// to the chunk (docs/EVENTS.md §5).
    fn handle(
        &self,
        ctx: &Context,
        run: &[E::Body],
    ) -> impl Future<Output = Result<(), HandleError>> + Send;
}

/// How a failure is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The infrastructure is briefly down: the same chunk is called again in place,
    /// after the next retry delay, at most `transient_max` times, then it is retryable.
    Transient,
    /// This key fails for now: the chunk and the rest of the key's work go to the retry
    /// topic and the key is quarantined.
    Retryable,
    /// This chunk can never succeed: it goes to the dead-letter topic; the run goes on.
    Unrecoverable,
}

/// A handler's failure: a class and the error.
#[derive(Debug)]
pub struct HandleError {
    kind: ErrorKind,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl HandleError {
    /// A transient failure.
    pub fn transient(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            kind: ErrorKind::Transient,
            error: error.into(),
        }
    }

    /// A retryable failure.
    pub fn retryable(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            kind: ErrorKind::Retryable,
            error: error.into(),
        }
    }

    /// An unrecoverable failure.
    pub fn unrecoverable(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            kind: ErrorKind::Unrecoverable,
            error: error.into(),
        }
    }

    /// The class.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The error.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.error.as_ref()
    }
}

impl std::fmt::Display for HandleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let class = match self.kind {
            ErrorKind::Transient => "transient",
            ErrorKind::Retryable => "retryable",
            ErrorKind::Unrecoverable => "unrecoverable",
        };
        write!(f, "{class}: {}", self.error)
    }
}

impl std::error::Error for HandleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error.as_ref())
    }
}

/// What a handler call is about.
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) key: Bytes,
    pub(crate) key_hash: u64,
    pub(crate) partition: u32,
    pub(crate) offsets: (u64, u64),
    pub(crate) attempt: u32,
    pub(crate) first_failure: Option<SystemTime>,
}

impl Context {
    /// A context for calling a handler outside a consumer (in a unit test).
    pub fn new(key: impl Into<Bytes>, partition: u32, offsets: (u64, u64)) -> Self {
        let key = key.into();
        Self {
            key_hash: crate::key_hash(&key),
            key,
            partition,
            offsets,
            attempt: 0,
            first_failure: None,
        }
    }

    /// The same context on a later attempt, first failing at `first_failure`.
    pub fn with_attempt(mut self, attempt: u32, first_failure: SystemTime) -> Self {
        self.attempt = attempt;
        self.first_failure = Some(first_failure);
        self
    }

    /// The key's bytes.
    pub fn key_bytes(&self) -> &[u8] {
        &self.key
    }

    /// The key, decoded as `K`.
    pub fn key<K: EventKey>(&self) -> Result<K, KeyError> {
        K::decode(&self.key)
    }

    /// The key hash (`xxh3_64` of the key's bytes).
    pub fn key_hash(&self) -> u64 {
        self.key_hash
    }

    /// The main topic's partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The lowest and highest main offsets the call's events stand for (a folded or
    /// deduplicated event stands for several).
    pub fn offsets(&self) -> (u64, u64) {
        self.offsets
    }

    /// Failed attempts of this key before this call (0 on first delivery).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When this key's work first failed, if it did.
    pub fn first_failure(&self) -> Option<SystemTime> {
        self.first_failure
    }
}
