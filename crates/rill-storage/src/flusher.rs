//! A background thread that syncs [`Durability::Interval`](crate::Durability) logs
//! whose unsynced data has waited long enough, so an idle tail is synced too, and runs
//! every log's write-behind and drop-behind ([`PartitionLog::write_behind`]).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::PartitionLog;
use crate::memory::MemoryWatch;

/// Calls [`PartitionLog::write_behind`] (with whether memory is short now, from a
/// [`MemoryWatch`] of the machine) and [`PartitionLog::sync_if_due`] on registered logs
/// every `tick`.
///
/// Logs are held weakly: a dropped log is forgotten. Dropping the flusher stops the
/// thread.
#[derive(Debug)]
pub struct Flusher {
    logs: Arc<Mutex<Vec<Weak<PartitionLog>>>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Starts the thread.
    pub fn start(tick: Duration) -> Self {
        let logs: Arc<Mutex<Vec<Weak<PartitionLog>>>> = Arc::default();
        let (stop, stopped) = mpsc::channel::<()>();
        let shared = Arc::clone(&logs);
        let thread = std::thread::Builder::new()
            .name("rill-flusher".into())
            .spawn(move || {
                let mut memory = MemoryWatch::system();
                loop {
                    match stopped.recv_timeout(tick) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let live: Vec<Arc<PartitionLog>> = {
                        let mut logs = shared.lock();
                        logs.retain(|w| w.strong_count() > 0);
                        logs.iter().filter_map(Weak::upgrade).collect()
                    };
                    let memory = memory.check();
                    for log in live {
                        log.write_behind(memory);
                        if let Err(e) = log.sync_if_due() {
                            tracing::error!(dir = %log.dir().display(), error = %e, "interval sync failed");
                        }
                    }
                }
            })
            .expect("spawn the flusher thread");
        Self {
            logs,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Adds a log to sync; a log registered already is not added twice (a log whose
    /// durability became `interval` while it was open is registered again).
    pub fn register(&self, log: &Arc<PartitionLog>) {
        let mut logs = self.logs.lock();
        if !logs
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(log)))
        {
            logs.push(Arc::downgrade(log));
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
