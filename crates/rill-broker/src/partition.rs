//! One partition in the broker: its log, its idempotent-producer table and the signal
//! that wakes long polls.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rill_format::BatchHeader;
use rill_storage::{LogConfig, LogRead, PartitionLog};
use tokio::sync::watch;

use crate::BrokerError;
use crate::producer::{Check, ProducerTable, RecentBatch};

/// Segments scanned at open to rebuild producer state: a retry that crosses a restart
/// targets a recent batch, which lives in the last segments.
const PRODUCER_SCAN_SEGMENTS: usize = 2;

/// The outcome of a produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// First offset of the batch.
    pub base_offset: u64,
    /// Last offset of the batch.
    pub last_offset: u64,
    /// Its append time, µs.
    pub timestamp_us: i64,
    /// The batch was a retry of an appended one; nothing was appended.
    pub duplicate: bool,
}

#[derive(Debug)]
pub(crate) struct Partition {
    pub(crate) log: Arc<PartitionLog>,
    producers: Mutex<ProducerTable>,
    /// How long a pipelined idempotent batch waits for the batches before it.
    sequence_wait: Duration,
    /// Signalled after every idempotent append, for batches waiting on a predecessor.
    sequenced: Condvar,
    /// The visible next offset, for long polls.
    appended: watch::Sender<u64>,
}

impl Partition {
    pub(crate) fn open(
        dir: &Path,
        config: LogConfig,
        producers_max: usize,
        sequence_wait: Duration,
    ) -> Result<Self, BrokerError> {
        let log = PartitionLog::open(dir, config)?;
        let mut producers = ProducerTable::new(producers_max);
        producers.rebuild(&log.recent_batch_headers(PRODUCER_SCAN_SEGMENTS)?);
        let (appended, _) = watch::channel(log.next_offset());
        Ok(Self {
            log: Arc::new(log),
            producers: Mutex::new(producers),
            sequence_wait,
            sequenced: Condvar::new(),
            appended,
        })
    }

    /// Whether appending a batch with this header may block: on an fsync (`always`),
    /// or on a producer sequence waiting for its predecessor. Otherwise the append is a
    /// write into the page cache.
    pub(crate) fn append_may_block(&self, header: &BatchHeader) -> bool {
        self.log.config().durability == rill_storage::Durability::Always
            || header.producer.is_some()
    }

    /// Appends a batch whose header was parsed from it (blocking: writes, and waits for
    /// the durability policy). The header alone (checked by its own CRC) names the
    /// producer and the count; the log validates the whole batch when it appends it.
    pub(crate) fn append_blocking(
        &self,
        batch: &[u8],
        header: &BatchHeader,
    ) -> Result<Produced, BrokerError> {
        let (producer, count) = (header.producer, header.record_count);
        let (produced, ticket) = {
            // Held across the write only, not the sync, so concurrent appends of this
            // partition still share one fsync.
            let mut producers = self.producers.lock().unwrap_or_else(|e| e.into_inner());
            let deadline = std::time::Instant::now() + self.sequence_wait;
            while let Some(p) = producer {
                match producers.check(p, count)? {
                    Check::Append => break,
                    Check::Duplicate(recent) => {
                        drop(producers);
                        self.log.wait_durable(recent.ticket)?;
                        return Ok(Produced {
                            base_offset: recent.base_offset,
                            last_offset: recent.base_offset + u64::from(recent.count) - 1,
                            timestamp_us: recent.timestamp_us,
                            duplicate: true,
                        });
                    }
                    Check::Wait { known } => {
                        let now = std::time::Instant::now();
                        if now >= deadline {
                            if known {
                                return Err(BrokerError::OutOfOrderSequence {
                                    producer_id: p.id,
                                    expected: producers.next_sequence(p.id).unwrap_or(0),
                                    got: p.base_sequence,
                                });
                            }
                            // Its predecessor never came: state from before a restart.
                            break;
                        }
                        producers = self
                            .sequenced
                            .wait_timeout(producers, deadline - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            }
            let (appended, ticket) = self.log.append_deferred(batch)?;
            if let Some(p) = producer {
                producers.record(
                    p,
                    RecentBatch {
                        base_sequence: p.base_sequence,
                        count,
                        base_offset: appended.base_offset,
                        timestamp_us: appended.timestamp_us,
                        ticket,
                    },
                );
                self.sequenced.notify_all();
            }
            (
                Produced {
                    base_offset: appended.base_offset,
                    last_offset: appended.last_offset,
                    timestamp_us: appended.timestamp_us,
                    duplicate: false,
                },
                ticket,
            )
        };
        let durable = self.log.wait_durable(ticket);
        // Wake long polls whether or not this append succeeded: a group sync may have
        // published other batches.
        self.appended.send_replace(self.log.next_offset());
        durable?;
        Ok(produced)
    }

    /// Reads from `offset`; waits up to `max_wait` for at least `min_bytes`.
    pub(crate) async fn fetch(
        &self,
        offset: u64,
        max_bytes: usize,
        max_wait: Duration,
        min_bytes: usize,
    ) -> Result<LogRead, BrokerError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut waiter = self.appended.subscribe();
        let mut read = self.log.read(offset, max_bytes)?;
        loop {
            if read.bytes.len() >= min_bytes.max(1) || max_wait.is_zero() {
                return Ok(read);
            }
            // The waiter was subscribed before the read (and `changed` marks what it
            // saw), so an append between a read and this wait is never missed.
            match tokio::time::timeout_at(deadline, waiter.changed()).await {
                Ok(Ok(())) => {}
                // Timed out, or the partition is being dropped: answer with what we have.
                Ok(Err(_)) | Err(_) => return Ok(self.log.read(offset, max_bytes)?),
            }
            read = self.log.read(offset, max_bytes)?;
        }
    }

    pub(crate) fn close(&self) -> Result<(), BrokerError> {
        self.log.close()?;
        // Wake long polls so they answer now.
        self.appended.send_replace(self.log.next_offset());
        Ok(())
    }
}
