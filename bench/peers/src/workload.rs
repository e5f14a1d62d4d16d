//! The workloads every system runs, and what each of their settings means.
//!
//! One [`Workload`] is run the same way on every system (see `docs/BENCHMARKS.md`):
//!
//! - **Records.** Values are `size` bytes. With `keyed`, record `i` of producer `j` has
//!   the key `format!("k{:05}", (j * 7919 + i) % KEYS)`; the partition is
//!   `xxh3_64(key) % partitions` (Rill routes by key itself with the same hash). Without
//!   keys, producer `j` sends its requests to partitions round-robin starting at
//!   `j % partitions`.
//! - **Partitions.** Rill: the topic's partitions. Redis: one stream per partition
//!   (`bench:{p}`). NATS: one JetStream stream `bench` with subjects `bench.{p}`.
//! - **Requests.** A producer sends up to `batch` records per request (Rill: one produce
//!   request; Redis: one pipeline of XADDs; NATS: that many async publishes, then all
//!   their acks awaited) with one request in flight per producer.
//! - **Rate.** `rate: None` sends as fast as requests are acknowledged. `rate: Some(r)`
//!   spreads `r` records/s over the producers: record `i` of a producer has an intended
//!   send time `start + i / r_producer`, every request carries the records already due
//!   (at most `batch`), and latency is measured from the intended time, so a stalled
//!   system is charged for the records it kept waiting (no coordinated omission).
//! - **Latency.** Produce: per request from send to acknowledgement (at a fixed rate:
//!   per record from its intended send time). Consume: per fetch request. E2e: per record
//!   from its send time (at a fixed rate: its intended send time), carried in the first 8
//!   bytes of the value as µs since the Unix epoch (little-endian), to its receipt.
//! - **Warm-up.** `warmup` records go through the same path first and are not counted.

use serde::Serialize;

/// Number of distinct keys in keyed workloads.
pub(crate) const KEYS: u64 = 10_000;

/// The key of record `i` of producer `j` in keyed workloads.
pub(crate) fn key(producer: u64, i: u64) -> String {
    format!("k{:05}", (producer * 7919 + i) % KEYS)
}

/// The partition a key goes to: Rill's routing (`xxh3_64(key) % partitions`).
pub(crate) fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    (xxhash_rust::xxh3::xxh3_64(key) % u64::from(partitions.max(1))) as u32
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// Publish as fast as acknowledged (or at `rate`); latency per request (per record
    /// at a fixed rate).
    Produce,
    /// Fill the log (not measured), then read `messages` records; latency per fetch.
    Consume,
    /// Consumers follow while producers publish; latency publish-to-receive per record.
    E2e,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Produce => "produce",
            Self::Consume => "consume",
            Self::E2e => "e2e",
        }
    }
}

/// Durability classes, compared like for like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Durability {
    /// Acknowledged once written to the OS; fsync in the background. Rill
    /// `interval:1000`, Redis AOF `appendfsync everysec`, NATS JetStream file storage
    /// (2.9 syncs in the background, every 2 minutes by default).
    Buffered,
    /// Acknowledged only after fsync. Rill `always`, Redis AOF `appendfsync always`;
    /// NATS 2.9 has no such setting, so it does not run these.
    Fsync,
}

impl Durability {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Buffered => "buffered",
            Self::Fsync => "fsync",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Workload {
    /// Short unique name, e.g. `produce-1k`.
    pub(crate) name: String,
    pub(crate) kind: Kind,
    /// Bytes per record value.
    pub(crate) size: usize,
    /// Records measured.
    pub(crate) messages: u64,
    /// Records sent (and read) first, not measured.
    pub(crate) warmup: u64,
    /// Records per request.
    pub(crate) batch: usize,
    pub(crate) partitions: u32,
    pub(crate) producers: u32,
    pub(crate) consumers: u32,
    pub(crate) keyed: bool,
    /// Records per second in all (`None`: as fast as acknowledged).
    pub(crate) rate: Option<u64>,
    pub(crate) durability: Durability,
}

impl Workload {
    /// A one-partition, one-producer, one-consumer, unkeyed, buffered workload.
    fn base(name: &str, kind: Kind, size: usize, messages: u64) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            size,
            messages,
            warmup: (messages / 10).max(1),
            batch: 1000,
            partitions: 1,
            producers: 1,
            consumers: 1,
            keyed: false,
            rate: None,
            durability: Durability::Buffered,
        }
    }

    fn parts(mut self, partitions: u32, producers: u32, consumers: u32) -> Self {
        (self.partitions, self.producers, self.consumers) = (partitions, producers, consumers);
        self
    }

    fn keyed(mut self) -> Self {
        self.keyed = true;
        self
    }

    fn fsync(mut self) -> Self {
        self.durability = Durability::Fsync;
        self
    }

    /// A fixed rate for `seconds` (plus one second's worth of warm-up).
    fn rate(mut self, per_second: u64, seconds: u64) -> Self {
        self.rate = Some(per_second);
        self.messages = per_second * seconds;
        self.warmup = per_second;
        self
    }

    /// A one-line description for tables.
    pub(crate) fn describe(&self) -> String {
        let size = if self.size >= 1024 && self.size.is_multiple_of(1024) {
            format!("{} KiB", self.size / 1024)
        } else {
            format!("{} B", self.size)
        };
        let rate = self
            .rate
            .map_or_else(|| "max rate".to_owned(), |r| format!("{r} rec/s"));
        format!(
            "{} {size}, {} part, {}P/{}C, {}, {rate}, {}",
            self.kind.name(),
            self.partitions,
            self.producers,
            self.consumers,
            if self.keyed { "keyed" } else { "unkeyed" },
            self.durability.name()
        )
    }
}

/// The default set: every axis of the issue (produce/consume/e2e, fixed rate, keyed,
/// 1 and N partitions, producers and consumers, both durability classes, 100 B and
/// 1 KiB), sized so that three rounds over three systems take well under 15 minutes.
pub(crate) fn default_set() -> Vec<Workload> {
    use Kind::{Consume, E2e, Produce};
    vec![
        Workload::base("produce-1k", Produce, 1024, 300_000),
        Workload::base("produce-100b", Produce, 100, 2_000_000),
        Workload::base("produce-1k-keyed-4p", Produce, 1024, 300_000)
            .parts(4, 4, 1)
            .keyed(),
        Workload::base("consume-1k", Consume, 1024, 300_000),
        Workload::base("consume-100b-4p", Consume, 100, 2_000_000).parts(4, 4, 4),
        Workload::base("e2e-1k", E2e, 1024, 300_000),
        Workload::base("e2e-1k-rate", E2e, 1024, 0).rate(20_000, 5),
        Workload::base("e2e-100b-rate-keyed-4p", E2e, 100, 0)
            .parts(4, 2, 2)
            .keyed()
            .rate(100_000, 5),
        Workload::base("produce-1k-fsync", Produce, 1024, 300_000).fsync(),
        Workload::base("e2e-1k-rate-fsync", E2e, 1024, 0)
            .rate(20_000, 5)
            .fsync(),
    ]
}

/// A tiny version of the default set, for the smoke test: same shapes, few records.
pub(crate) fn smoke_set() -> Vec<Workload> {
    default_set()
        .into_iter()
        .map(|mut w| {
            w.messages = 2_000;
            w.warmup = 200;
            w.batch = w.batch.min(100);
            if let Some(r) = w.rate.as_mut() {
                *r = 4_000;
            }
            w
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_sets_match() {
        let set = default_set();
        let mut names: Vec<&str> = set.iter().map(|w| w.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), set.len());
        let smoke = smoke_set();
        assert_eq!(smoke.len(), set.len());
        for (a, b) in set.iter().zip(&smoke) {
            assert_eq!(
                (a.kind, a.partitions, a.keyed),
                (b.kind, b.partitions, b.keyed)
            );
            assert!(b.messages < a.messages);
        }
    }

    #[test]
    fn keys_route_like_rill() {
        // Pinned by rill-client's routing test vector: xxh3_64 of the key, modulo.
        let k = key(0, 0);
        assert_eq!(k, "k00000");
        assert_eq!(
            partition_for_key(k.as_bytes(), 4),
            (xxhash_rust::xxh3::xxh3_64(b"k00000") % 4) as u32
        );
        assert_eq!(key(1, 2), "k07921");
        assert_eq!(key(2, 0), format!("k{:05}", 15_838 % KEYS));
    }
}
