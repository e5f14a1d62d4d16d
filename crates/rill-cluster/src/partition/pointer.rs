//! Entry pointers: the records of a partition's `raft/entries` file
//! (docs/REPLICATION.md §5). One per Raft entry, each one frame (see the `files`
//! module); the batch of a data entry stays in the partition's segments.
//!
//! A pointer's body, little-endian:
//!
//! | bytes | field |
//! |---:|---|
//! | 8 | `index` u64: the entry's Raft index |
//! | 8 | `term` u64 |
//! | 8 | `node` u64: the leader that proposed it |
//! | 1 | `kind`: 0 blank, 1 data, 2 membership, 3 seal |
//! | data: 8 + 8 + 4 | `base_offset` u64, `next_offset` u64, `batch_bytes` u32 |
//! | membership: the rest | the membership as JSON |
//! | seal: 8 | `end` u64: the offset the range is sealed at (docs/RANGES.md §9) |

use std::io;

use openraft::Membership;
use openraft::alias::LogIdOf;
use openraft::vote::RaftLeaderIdExt;

use super::PartitionTypes;
use crate::files::invalid;

const KIND_BLANK: u8 = 0;
const KIND_DATA: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;
const KIND_SEAL: u8 = 3;
const HEAD: usize = 25;

/// What an entry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointerKind {
    /// The no-op a new leader commits: no offsets.
    Blank,
    /// A record batch at `[base_offset, next_offset)` of the segments, `bytes` long.
    Data {
        /// Offset of the batch's first record.
        base_offset: u64,
        /// Offset after its last record.
        next_offset: u64,
        /// Bytes of the batch.
        bytes: u32,
    },
    /// A change of the group's voters: no offsets.
    Membership(Membership<u64, openraft::EmptyNode>),
    /// An elastic topic's range sealed at `end` (docs/RANGES.md §9): no offsets, and
    /// no batch after it.
    Seal {
        /// The offset after the range's last record.
        end: u64,
    },
}

/// One entry of a partition's Raft log, as `raft/entries` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// The entry's log id.
    pub log_id: LogIdOf<PartitionTypes>,
    /// What it holds.
    pub kind: PointerKind,
}

impl Pointer {
    /// The entry's Raft index.
    pub fn index(&self) -> u64 {
        self.log_id.index
    }

    /// The batch's offsets, for a data entry.
    pub fn offsets(&self) -> Option<(u64, u64)> {
        match self.kind {
            PointerKind::Data {
                base_offset,
                next_offset,
                ..
            } => Some((base_offset, next_offset)),
            _ => None,
        }
    }

    /// Where the range is sealed, for a seal entry.
    pub fn seal(&self) -> Option<u64> {
        match self.kind {
            PointerKind::Seal { end } => Some(end),
            _ => None,
        }
    }

    /// The pointer's body.
    pub fn encode(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(HEAD + 20);
        out.extend_from_slice(&self.log_id.index.to_le_bytes());
        out.extend_from_slice(&self.log_id.leader_id.term.to_le_bytes());
        out.extend_from_slice(&self.log_id.leader_id.node_id.to_le_bytes());
        match &self.kind {
            PointerKind::Blank => out.push(KIND_BLANK),
            PointerKind::Data {
                base_offset,
                next_offset,
                bytes,
            } => {
                out.push(KIND_DATA);
                out.extend_from_slice(&base_offset.to_le_bytes());
                out.extend_from_slice(&next_offset.to_le_bytes());
                out.extend_from_slice(&bytes.to_le_bytes());
            }
            PointerKind::Membership(m) => {
                out.push(KIND_MEMBERSHIP);
                out.extend_from_slice(&serde_json::to_vec(m).map_err(invalid)?);
            }
            PointerKind::Seal { end } => {
                out.push(KIND_SEAL);
                out.extend_from_slice(&end.to_le_bytes());
            }
        }
        Ok(out)
    }

    /// Decodes a pointer's body; every malformed input is an error.
    pub fn decode(body: &[u8]) -> io::Result<Self> {
        if body.len() < HEAD {
            return Err(invalid("an entry pointer shorter than its header"));
        }
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let (index, term, node) = (u64_at(0), u64_at(8), u64_at(16));
        let rest = &body[HEAD..];
        let kind = match body[24] {
            KIND_BLANK if rest.is_empty() => PointerKind::Blank,
            KIND_DATA if rest.len() == 20 => {
                let base_offset = u64::from_le_bytes(rest[0..8].try_into().expect("8 bytes"));
                let next_offset = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes"));
                let bytes = u32::from_le_bytes(rest[16..20].try_into().expect("4 bytes"));
                if next_offset <= base_offset || bytes < 64 {
                    return Err(invalid(format!(
                        "a data pointer with offsets {base_offset}..{next_offset} and {bytes} bytes"
                    )));
                }
                PointerKind::Data {
                    base_offset,
                    next_offset,
                    bytes,
                }
            }
            KIND_SEAL if rest.len() == 8 => PointerKind::Seal {
                end: u64::from_le_bytes(rest.try_into().expect("8 bytes")),
            },
            KIND_MEMBERSHIP => PointerKind::Membership(
                serde_json::from_slice(rest)
                    .map_err(|e| invalid(format!("a membership pointer: {e}")))?,
            ),
            kind => {
                return Err(invalid(format!(
                    "an entry pointer of kind {kind} with {} bytes after its header",
                    rest.len()
                )));
            }
        };
        Ok(Self {
            log_id: log_id(term, node, index),
            kind,
        })
    }
}

/// The log id of an entry of `term`, proposed by `node`, at `index`.
pub fn log_id(term: u64, node: u64, index: u64) -> LogIdOf<PartitionTypes> {
    LogIdOf::<PartitionTypes>::new(
        <openraft::alias::LeaderIdOf<PartitionTypes>>::new_committed(term, node),
        index,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_pointer_round_trips_and_a_malformed_one_is_refused() {
        let seal = Pointer {
            log_id: log_id(3, 2, 41),
            kind: PointerKind::Seal { end: 1_200 },
        };
        let body = seal.encode().unwrap();
        assert_eq!(body.len(), HEAD + 8);
        let back = Pointer::decode(&body).unwrap();
        assert_eq!(back, seal);
        assert_eq!(back.seal(), Some(1_200));
        assert_eq!(back.offsets(), None);
        // A seal's end is exactly eight bytes.
        assert!(Pointer::decode(&body[..body.len() - 1]).is_err());
        let mut longer = body.clone();
        longer.push(0);
        assert!(Pointer::decode(&longer).is_err());
        // An unknown kind is refused.
        let mut unknown = body;
        unknown[24] = 9;
        assert!(Pointer::decode(&unknown).is_err());
    }
}
