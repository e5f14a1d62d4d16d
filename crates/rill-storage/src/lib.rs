//! Rill's log engine: the durable, append-only log of one partition.
//!
//! A [`PartitionLog`] is a directory of segments (`{base_offset:020}.log` with sparse
//! `.index` and `.timeindex` files). [`PartitionLog::append`] validates a record batch
//! (see `rill-format`), stamps its base offset and append time into a copy of its
//! header, writes header and records (never copying the records) and returns once the
//! [`Durability`] policy holds; [`PartitionLog::read`]
//! returns whole stored batches. Opening a log recovers it: a torn or corrupt tail is
//! truncated, damaged indexes are rebuilt. The byte layout and the crash analysis are
//! in `docs/FORMAT.md`.
//!
//! ```
//! use rill_format::{BatchBuilder, NewRecord};
//! use rill_storage::{Durability, LogConfig, PartitionLog};
//!
//! let dir = tempfile::tempdir()?;
//! let mut config = LogConfig::default();
//! config.durability = Durability::Never;
//! let log = PartitionLog::open(dir.path(), config)?;
//! let mut builder = BatchBuilder::new();
//! builder.push(NewRecord::value(b"hello"))?;
//! let mut batch = builder.finish()?;
//! let appended = log.append(&batch)?;
//! assert_eq!(appended.base_offset, 0);
//! let read = log.read(0, 1 << 20)?;
//! let batch = read.batches().next().unwrap()?;
//! assert_eq!(batch.records().next().unwrap().value, b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Architecture Invariant: this crate knows batches only through `rill-format` and never
//! depends on `rill-proto` or any network code. Every disk operation goes through the
//! [`Io`] trait. A failed write or fsync poisons the log (fail-stop); it is never
//! retried.
//!
//! Feature `fault-injection` (off by default; for tests only) adds the test-only disks
//! behind that seam: `fault::FaultyIo` (fsync failures, write errors, a full disk) and
//! `sim::SimIo` (the power-loss model).

#![deny(missing_docs, unreachable_pub)]

mod clock;
mod config;
mod damage;
mod env;
mod error;
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault;
mod files;
mod flusher;
mod index;
mod io;
mod log;
mod memory;
mod recovery;
mod recovery_point;
mod segment;
#[cfg(any(test, feature = "fault-injection"))]
pub mod sim;
mod stats;
mod sys;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{Durability, LogConfig};
pub use damage::DamagedRange;
pub use env::LogEnv;
pub use error::{ConfigError, StorageError};
pub use files::{FileCache, OPEN_FILES_DEFAULT};
pub use flusher::Flusher;
pub use io::{Io, IoFile, StdIo};
pub use log::{Appended, CheckedBatch, DurableTicket, LogRead, PartitionLog, RetentionOutcome};
pub use memory::{Memory, MemoryWatch};
pub use stats::{FSYNC_BUCKETS_SECONDS, FsyncStats, fsync_stats};
