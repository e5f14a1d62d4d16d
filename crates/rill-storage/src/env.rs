//! What a log runs on: the disk, the clock, and the shared cache of open files.

use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::files::FileCache;
use crate::io::{Io, StdIo};

/// The environment of a [`PartitionLog`](crate::PartitionLog): its disk seam, its
/// clock, and the cache of open sealed-segment files (share one cache between the logs
/// of a process to bound its open files).
#[derive(Debug, Clone)]
pub struct LogEnv {
    /// Every disk operation goes through this.
    pub io: Arc<dyn Io>,
    /// Append times come from this.
    pub clock: Arc<dyn Clock>,
    /// Open sealed-segment files.
    pub files: Arc<FileCache>,
}

impl LogEnv {
    /// An environment on `io` and `clock` with a cache of its own.
    pub fn new(io: Arc<dyn Io>, clock: Arc<dyn Clock>) -> Self {
        Self {
            io,
            clock,
            files: Arc::new(FileCache::default()),
        }
    }

    /// The same environment with a shared file cache.
    pub fn with_files(mut self, files: Arc<FileCache>) -> Self {
        self.files = files;
        self
    }
}

impl Default for LogEnv {
    fn default() -> Self {
        Self::new(Arc::new(StdIo), Arc::new(SystemClock))
    }
}
