//! Typed events over Rill: a service describes each event type once, as a Rust type,
//! and Rill decides which topic and partition it goes to, how its body is encoded,
//! which events of a key must be applied in order, which may be folded together, and
//! what happens when a handler fails. The design, the bytes on the wire and the crash
//! analysis are in `docs/EVENTS.md`.

#![deny(missing_docs, unreachable_pub)]

mod algebra;
mod config;
mod dlq;
mod error;
mod handler;
mod header;
mod model;
pub mod plan;
mod publisher;
mod registry;
mod runtime;

pub use algebra::{
    Algebra, AlgebraKind, Associative, Commutative, Idempotent, IdempotentCommutative, Merge,
    NonAssociative, Semigroup,
};
pub use config::{
    Assignment, ConsumerConfig, DeliveryMode, Unhandled, dead_letter_topic, retry_topic,
};
pub use dlq::{DeadLetter, KEY_HEADER, dead_letters, replay_dead_letters};
pub use error::{PublishError, StartError};
pub use handler::{Context, ErrorKind, EventHandler, HandleError};
pub use header::{
    DLQ_HEADER, DeadLetterReason, ERROR_HEADER, ERROR_TEXT_BYTES_MAX, EVENT_HEADER, ErrorClass,
    EventHeader, HeaderError, RETRY_HEADER, RetryHeader, RetryKind, error_text,
};
#[doc(hidden)]
pub use model::finish_key;
pub use model::tag_for_name;
pub use model::{BodyCodec, BodyError, Event, EventKey, KeyError, KeyPart, Ordering, key_hash};
pub use publisher::Publisher;
pub use registry::Handlers;
pub use rill_events_derive::{Event, EventKey};
pub use runtime::{Ended, EventConsumer, Metrics, PartitionGauges};
