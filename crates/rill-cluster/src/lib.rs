//! Replication for Rill (docs/REPLICATION.md). So far: the metadata group's pure state
//! machine ([`meta`]), its log store and state machine on disk for openraft
//! ([`store`], checked against the library's storage conformance suite), the
//! node-to-node transport ([`peer`]), and a partition group's log store and state
//! machine over the partition's own segments ([`partition`], checked against the same
//! suite and the power-loss model). Nothing here is on a serving path yet: `rill serve`
//! has no `--peers` until partitions replicate end to end (a cluster that replicated
//! metadata but not data would only look safe).

#![deny(missing_docs, unreachable_pub)]

mod files;
pub mod meta;
pub mod node;
pub mod partition;
pub mod peer;
pub mod serving;
pub mod store;

pub use meta::{MetaCommand, MetaResponse, MetaState, NodeInfo, OffsetKey, TopicSpec};
pub use peer::{MetaNetwork, MetaRaft, Peers};
pub use store::{MetaEntry, MetaLogStore, MetaStateMachine, MetaTypes};
