//! Replication for Rill (docs/REPLICATION.md). So far: the metadata group's pure state
//! machine ([`meta`]) and its log store and state machine on disk for openraft
//! ([`store`]), checked against the library's storage conformance suite. Nothing here
//! is on a serving path yet: `rill serve` has no `--peers` until the rest of phase 1
//! lands.

#![deny(missing_docs, unreachable_pub)]

pub mod meta;
pub mod store;

pub use meta::{MetaCommand, MetaResponse, MetaState, NodeInfo, OffsetKey, TopicSpec};
pub use store::{MetaEntry, MetaLogStore, MetaStateMachine, MetaTypes};
