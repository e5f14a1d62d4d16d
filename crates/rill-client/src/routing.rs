//! How a published record picks its partition.

use xxhash_rust::xxh3::xxh3_64;

/// Routing of a published record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Routing {
    /// Spread records over partitions round-robin (the default).
    #[default]
    Balanced,
    /// The partition of this key: `xxh3_64(key) % partitions`, so one key keeps its order.
    Key(bytes::Bytes),
    /// This partition.
    Partition(u32),
}

/// The partition of `key` among `partitions`: `xxh3_64(key bytes, seed 0) % partitions`.
///
/// Specified so every SDK and the embedded mode agree (see docs/PROTOCOL.md).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    (xxh3_64(key) % u64::from(partitions)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_is_stable() {
        // Pinned values: changing the hash would move every key to another partition.
        assert_eq!(xxh3_64(b""), 0x2d06800538d394c2);
        assert_eq!(partition_for_key(b"order-17", 1), 0);
        let p = partition_for_key(b"order-17", 12);
        assert_eq!(p, partition_for_key(b"order-17", 12));
        assert!(p < 12);
    }
}
