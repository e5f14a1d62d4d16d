//! What the peer drivers (Redis, NATS) share: the records producers send, the fixed-rate
//! schedule, and the phases of each workload kind, written once over a [`Peer`] that
//! only knows how to send one request, fetch once, or wait once for new records.
//!
//! Phases (see the contract in [`crate::workload`]):
//!
//! - **Produce.** Every producer sends its share of `warmup`, then waits; once all are
//!   done the measured phase starts for all of them at one instant and each sends its
//!   share of `messages`. Elapsed time ends when the last producer's last request is
//!   acknowledged.
//! - **Consume.** The producers fill the log with `warmup + messages` records (not
//!   measured). Each consumer then reads its partitions' part of the warm-up (split in
//!   proportion to what each partition holds), and after a common start reads the rest,
//!   exactly, one fetch at a time.
//! - **E2e.** Consumers start first (positioned at the end of the log), then producers
//!   send the warm-up; the measured phase starts once the consumers have received all
//!   of it, so every record received afterwards is a measured one. It ends at the
//!   receipt that brings the total to `warmup + messages`.
//!
//! Anything that makes no progress for [`STALL`] fails the run instead of hanging it.
//!
//! The parts: [`source`] (the records and keys a producer sends), [`pace`] (the
//! fixed-rate schedule), [`tasks`] (the start signal and the coordination of a run's
//! tasks), and one file per phase: [`produce`], [`consume`] and [`e2e`].

mod consume;
mod e2e;
mod pace;
mod produce;
mod source;
mod tasks;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

use crate::measure::RunResult;
use crate::workload::{Kind, Workload};

use pace::Pace;

/// A phase that makes no progress for this long fails.
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// How long a follower waits for new records before checking whether it is done.
pub(crate) const FOLLOW_WAIT: Duration = Duration::from_millis(500);

/// How often the coordinator checks a phase's condition.
const POLL: Duration = Duration::from_millis(2);

/// One record a producer sends.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) partition: u32,
    pub(crate) key: Option<String>,
    pub(crate) value: Bytes,
}

/// One producer's connection: sends one request (all of `records`, in one round trip
/// where the system allows it) and returns once all are acknowledged.
pub(crate) trait Sender: Send + 'static {
    fn send(&mut self, records: Vec<Record>) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// One consumer's connection for the consume workload, positioned at the start of its
/// partitions (created after the fill).
pub(crate) trait Reader: Send + 'static {
    /// One fetch request for at most `max` records of `partition`; how many came.
    fn fetch(
        &mut self,
        partition: u32,
        max: usize,
    ) -> impl Future<Output = anyhow::Result<usize>> + Send;
}

/// One consumer's connection for the e2e workload, following its partitions from the
/// end of the log (created before any producer sends).
pub(crate) trait Follower: Send + 'static {
    /// Waits up to about [`FOLLOW_WAIT`] for records and appends the send stamp of each
    /// one received (see [`crate::measure::stamp_of`]); appends nothing on a timeout.
    fn poll(&mut self, stamps: &mut Vec<u64>) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// A system under test, with a server already running.
pub(crate) trait Peer: Sync {
    type Producer: Sender;
    type Reader: Reader;
    type Follower: Follower;

    /// A producer on its own connection.
    fn producer(&self, index: u32) -> impl Future<Output = anyhow::Result<Self::Producer>> + Send;

    /// A consume-workload consumer of `partitions`, on its own connection.
    fn reader(
        &self,
        index: u32,
        partitions: &[u32],
    ) -> impl Future<Output = anyhow::Result<Self::Reader>> + Send;

    /// An e2e consumer of `partitions`, on its own connection, that will receive only
    /// records sent after this returns.
    fn follower(
        &self,
        index: u32,
        partitions: &[u32],
    ) -> impl Future<Output = anyhow::Result<Self::Follower>> + Send;
}

/// Records of `total` that worker `index` of `workers` handles: even shares, the first
/// `total % workers` workers one more.
pub(super) fn share(total: u64, workers: u32, index: u32) -> u64 {
    let n = u64::from(workers.max(1));
    total / n + u64::from(u64::from(index) < total % n)
}

/// The partitions consumer `consumer` reads: those with `p % consumers == consumer`, so
/// no partition has two consumers (consumers beyond `partitions` get none).
pub(super) fn partitions_of(consumer: u32, consumers: u32, partitions: u32) -> Vec<u32> {
    (0..partitions)
        .filter(|p| p % consumers.max(1) == consumer)
        .collect()
}

/// Runs `w` on `peer` (whose server is up) and measures it.
pub(crate) async fn run<P: Peer>(peer: &P, w: &Workload) -> anyhow::Result<RunResult> {
    anyhow::ensure!(
        w.partitions > 0 && w.producers > 0 && w.consumers > 0 && w.batch > 0,
        "workload {} needs at least one partition, producer, consumer and record per request",
        w.name
    );
    let pace = w.rate.map(|r| Pace::new(r, w.producers)).transpose()?;
    let m = match w.kind {
        Kind::Produce => produce::produce(peer, w, pace, None).await?,
        Kind::E2e => e2e::e2e(peer, w, pace).await?,
        Kind::Consume => consume::consume(peer, w).await?,
    };
    let bytes = w.messages * w.size as u64;
    Ok(RunResult::new(
        w.messages,
        bytes,
        m.end.saturating_duration_since(m.start),
        &m.latency,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::default_set;

    /// The workload of the default set named `name`.
    pub(super) fn workload(name: &str) -> Workload {
        default_set().into_iter().find(|w| w.name == name).unwrap()
    }

    #[test]
    fn shares_are_even_and_exact() {
        assert_eq!(share(10, 3, 0), 4);
        assert_eq!(share(10, 3, 1), 3);
        assert_eq!(share(10, 3, 2), 3);
        assert_eq!(share(2, 4, 3), 0);
        assert_eq!(share(7, 0, 0), 7);
        for (total, n) in [(0, 1), (1, 1), (2_000_000, 4), (300_001, 7), (5, 9)] {
            let sum: u64 = (0..n).map(|j| share(total, n, j)).sum();
            assert_eq!(sum, total, "{total} over {n}");
        }
    }

    #[test]
    fn each_partition_has_one_consumer() {
        assert_eq!(partitions_of(0, 2, 4), vec![0, 2]);
        assert_eq!(partitions_of(1, 2, 4), vec![1, 3]);
        assert_eq!(partitions_of(0, 1, 4), vec![0, 1, 2, 3]);
        assert_eq!(partitions_of(3, 4, 4), vec![3]);
        assert!(partitions_of(2, 4, 2).is_empty());
        for (consumers, partitions) in [(1, 1), (2, 4), (3, 4), (4, 4), (5, 4)] {
            let mut all: Vec<u32> = (0..consumers)
                .flat_map(|c| partitions_of(c, consumers, partitions))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..partitions).collect::<Vec<_>>());
        }
    }
}
