//! The records a producer sends: values, keys and partitions, in order across phases.

use bytes::{Bytes, BytesMut};

use super::Record;
use crate::workload::{self, Kind, Workload};

/// The records of one producer, in order, across phases: values of `size` bytes in 26
/// rotations of `abc...z`, keys as [`workload::key`], and, unkeyed, each request to
/// the next partition round-robin from `producer % partitions`.
#[derive(Debug)]
pub(super) struct Source {
    producer: u32,
    partitions: u32,
    keyed: bool,
    /// Write the send stamp into the first 8 bytes of each value (e2e).
    stamped: bool,
    values: Vec<Bytes>,
    /// Index of the next record.
    next: u64,
    /// Requests taken so far (for round-robin).
    requests: u64,
}

impl Source {
    pub(super) fn new(w: &Workload, producer: u32) -> Self {
        let stamped = w.kind == Kind::E2e;
        // A stamp needs 8 bytes; e2e values are never shorter.
        let size = if stamped { w.size.max(8) } else { w.size };
        let values = (0..26u8)
            .map(|r| {
                (0..size)
                    .map(|k| b'a' + ((k % 26) as u8 + r) % 26)
                    .collect::<Vec<u8>>()
                    .into()
            })
            .collect();
        Self {
            producer,
            partitions: w.partitions.max(1),
            keyed: w.keyed,
            stamped,
            values,
            next: 0,
            requests: 0,
        }
    }

    /// The next `n` records, as one request; record `k` of them stamped `stamp(k)`.
    pub(super) fn take(&mut self, n: usize, stamp: impl Fn(u64) -> u64) -> Vec<Record> {
        let round_robin =
            ((u64::from(self.producer) + self.requests) % u64::from(self.partitions)) as u32;
        self.requests += 1;
        let records = (0..n as u64)
            .map(|k| {
                let i = self.next + k;
                let base = &self.values[(i % 26) as usize];
                let value = if self.stamped {
                    let mut v = BytesMut::from(&base[..]);
                    v[..8].copy_from_slice(&stamp(k).to_le_bytes());
                    v.freeze()
                } else {
                    base.clone()
                };
                let (key, partition) = if self.keyed {
                    let key = workload::key(u64::from(self.producer), i);
                    let p = workload::partition_for_key(key.as_bytes(), self.partitions);
                    (Some(key), p)
                } else {
                    (None, round_robin)
                };
                Record {
                    partition,
                    key,
                    value,
                }
            })
            .collect();
        self.next += n as u64;
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive::tests::workload;

    #[test]
    fn unkeyed_requests_go_round_robin() {
        let w = workload("consume-100b-4p");
        let mut src = Source::new(&w, 1);
        let parts: Vec<u32> = (0..5).map(|_| src.take(3, |_| 0)[0].partition).collect();
        assert_eq!(parts, vec![1, 2, 3, 0, 1]);
        let req = src.take(4, |_| 0);
        assert!(req.iter().all(|r| r.partition == 2 && r.key.is_none()));
        assert!(req.iter().all(|r| r.value.len() == 100));
        // Record 15 onwards: values rotate through the alphabet.
        assert_eq!(req[0].value[0], b'a' + 15);
        assert_eq!(req[1].value[..3], *b"qrs");
    }

    #[test]
    fn keyed_records_route_by_key() {
        let w = workload("produce-1k-keyed-4p");
        let mut src = Source::new(&w, 2);
        src.take(5, |_| 0);
        let req = src.take(10, |_| 0);
        for (k, r) in req.iter().enumerate() {
            let key = workload::key(2, 5 + k as u64);
            assert_eq!(r.key.as_deref(), Some(key.as_str()));
            assert_eq!(r.partition, workload::partition_for_key(key.as_bytes(), 4));
        }
    }

    #[test]
    fn e2e_values_carry_their_stamp() {
        let w = workload("e2e-1k-rate");
        let mut src = Source::new(&w, 0);
        let req = src.take(3, |k| 1_000 + k);
        let stamps: Vec<u64> = req
            .iter()
            .map(|r| crate::measure::stamp_of(&r.value).unwrap())
            .collect();
        assert_eq!(stamps, vec![1_000, 1_001, 1_002]);
        assert_eq!(req[0].value.len(), 1024);
        assert_eq!(req[0].value[8], b'a' + 8);
    }
}
