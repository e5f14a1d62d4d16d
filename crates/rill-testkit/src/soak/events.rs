//! The run's history as text, for the post-mortem of a failing run: kills and
//! restarts, assignments and revocations, acknowledged explicit commits and every
//! offsets reading, each stamped with the milliseconds since the start. Written next to
//! the data directory (`<data>.events.log`) as it happens, so it survives a hang.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use parking_lot::Mutex;

use super::SoakError;

/// An append-only event log.
#[derive(Debug)]
pub(crate) struct Events {
    started: Instant,
    out: Mutex<BufWriter<File>>,
}

impl Events {
    pub(crate) fn create(path: &Path) -> Result<Self, SoakError> {
        let file = File::create(path).map_err(|source| SoakError::Io {
            what: format!("create {}", path.display()),
            source,
        })?;
        Ok(Self {
            started: Instant::now(),
            out: Mutex::new(BufWriter::new(file)),
        })
    }

    /// Appends one line. A failed write loses history, never the run: it is ignored.
    pub(crate) fn log(&self, what: std::fmt::Arguments<'_>) {
        let ms = self.started.elapsed().as_millis();
        let mut out = self.out.lock();
        let _ = writeln!(out, "{ms:>9} {what}");
    }

    pub(crate) fn flush(&self) {
        let _ = self.out.lock().flush();
    }
}
