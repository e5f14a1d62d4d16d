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

/// The error of a record that has both a key and an explicit partition: the two are
/// exclusive ways to pick its partition, in every write path.
pub(crate) fn key_and_partition() -> crate::ClientError {
    crate::ClientError::InvalidArgument(
        "a record takes a key or an explicit partition, not both".into(),
    )
}

/// The error of an empty key: it would hash like any other key, so a caller who meant
/// "no key" would silently pin every such record to one partition.
pub(crate) fn empty_key() -> crate::ClientError {
    crate::ClientError::InvalidArgument(
        "a key must not be empty (leave it out for an unkeyed record)".into(),
    )
}

/// Checks that `message` may be sent with `routing`: a non-empty key, if any, and no key
/// when the routing names a partition. Nothing is sent when it fails.
pub(crate) fn check(message: &crate::Message, routing: &Routing) -> Result<(), crate::ClientError> {
    match (&message.key, routing) {
        (Some(k), _) if k.is_empty() => Err(empty_key()),
        (Some(_), Routing::Partition(_)) => Err(key_and_partition()),
        (_, Routing::Key(k)) if k.is_empty() => Err(empty_key()),
        _ => Ok(()),
    }
}

/// A key's routing hash: `xxh3_64(key bytes, seed 0)`. A plain topic takes it modulo its
/// partitions ([`partition_for_key`]); an elastic topic sends the key to the open range
/// covering it (docs/RANGES.md §2).
pub fn key_hash(key: &[u8]) -> u64 {
    rill_proto::ranges::key_hash(key)
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

    /// The test vectors of docs/PROTOCOL.md §6, every row: the hash and the partition.
    /// Changing the hash would move every key to another partition, and every SDK must
    /// agree with this table.
    #[test]
    fn key_routing_matches_the_protocol_test_vectors() {
        let vectors: [(&[u8], u64, u32, u32); 5] = [
            (b"", 0x2d06800538d394c2, 1, 0),
            (b"order-17", 0x234cefc81040cbbe, 1, 0),
            (b"order-17", 0x234cefc81040cbbe, 12, 6),
            (b"k0", 0xbbb08e672f9190b3, 4, 3),
            (b"a", 0xe6c632b61e964e1f, 3, 1),
        ];
        for (key, hash, partitions, partition) in vectors {
            let shown = String::from_utf8_lossy(key);
            assert_eq!(xxh3_64(key), hash, "xxh3_64({shown:?})");
            assert_eq!(
                partition_for_key(key, partitions),
                partition,
                "{shown:?} among {partitions} partitions"
            );
        }
    }
}
