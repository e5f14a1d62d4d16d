//! A partition's Raft group (docs/REPLICATION.md §5–7): the partition log is the Raft
//! log. Each data entry is one record batch, stored once, in the partition's segments
//! (rill-storage's [`PartitionLog`](rill_storage::PartitionLog)); next to them, a
//! `raft/` directory holds the vote and one small pointer per entry ([`mod@pointer`]).
//!
//! - [`PartitionLogStore`] is the library's log store over the segments and pointers.
//!   A leader's own proposal ([`PartitionCommand::Propose`]) is stamped with its offsets
//!   and time as its store appends it, so offsets follow the log exactly whatever
//!   happened to leadership meanwhile; every replica (the leader's own reads included)
//!   gets it back as the stamped [`PartitionCommand::Batch`], which a follower's store
//!   appends unchanged.
//! - [`PartitionStateMachine`] applies committed entries: the high watermark moves
//!   past each batch and its producer learns the offsets.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub mod pointer;

mod install;
mod log_store;
mod machine;

pub use log_store::{PartitionLogStore, TAIL_CACHE_BYTES};
pub use machine::{PartitionSnapshot, PartitionStateMachine};

openraft::declare_raft_types!(
    /// A partition group's types: record batches and the offsets they got, nodes named
    /// by id only.
    pub PartitionTypes:
        D = PartitionCommand,
        R = PartitionResponse,
        NodeId = u64,
        Node = openraft::EmptyNode,
);

/// An entry of a partition's Raft log.
pub type PartitionEntry = <PartitionTypes as openraft::RaftTypeConfig>::Entry;

/// The application data of a partition's data entry: one record batch.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionCommand {
    /// A batch as a producer sent it, proposed by the leader: its store stamps the base
    /// offset and append time when it appends it.
    Propose(Bytes),
    /// A batch as stored, stamped: what the log gives back, and what a follower
    /// appends unchanged.
    Batch(Bytes),
    /// Seals an elastic topic's range where its log ends (docs/RANGES.md §9), proposed
    /// by the leader: its store stamps the end when it appends it, and appends no
    /// batch after it.
    Seal,
    /// A seal as stored, stamped with the offset the range is sealed at: what the log
    /// gives back, and what a follower appends unchanged.
    Sealed(u64),
}

impl fmt::Debug for PartitionCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for PartitionCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Propose(b) => write!(f, "propose({} bytes)", b.len()),
            Self::Batch(b) => write!(f, "batch({} bytes)", b.len()),
            Self::Seal => write!(f, "seal"),
            Self::Sealed(end) => write!(f, "sealed({end})"),
        }
    }
}

/// What applying an entry answers its proposer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionResponse {
    /// A batch is committed at these offsets.
    Appended {
        /// Offset of its first record.
        base_offset: u64,
        /// Offset of its last record.
        last_offset: u64,
        /// Its append time, µs.
        timestamp_us: i64,
    },
    /// An entry without records (blank, membership).
    Done,
    /// The range is sealed at `end`: a seal entry committed, or a batch proposed after
    /// one (never appended).
    Sealed {
        /// The offset after the range's last record.
        end: u64,
    },
}
