//! A fetch made ahead: the fetch a reader or consumer will make next, started while
//! the caller still takes the records of the one before, so the wire and the caller's
//! work overlap. At most one per reader or consumer partition (one more `max_bytes` in
//! memory); aborted when dropped, and used only if the reader still wants exactly that
//! partition and offset.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{ClientError, Fetched, Record, Topic};

/// What one fetch brings: the answer and its records.
pub(crate) type FetchResult = Result<(Fetched, VecDeque<Record>), ClientError>;

/// A fetch of one partition at one offset, running in its own task.
#[derive(Debug)]
pub(crate) struct Ahead {
    partition: u32,
    at: u64,
    task: JoinHandle<FetchResult>,
}

/// The shape of a fetch: bytes, long-poll wait, and the bytes that end the wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) max_bytes: u32,
    pub(crate) max_wait: Duration,
    pub(crate) min_bytes: u32,
}

impl Ahead {
    /// Starts fetching `partition` at `at` (needs a Tokio runtime, as every call of the
    /// SDK does).
    pub(crate) fn spawn(topic: &Topic, partition: u32, at: u64, shape: Shape) -> Self {
        let topic = topic.clone();
        let task = tokio::spawn(async move {
            let mut records = VecDeque::new();
            let f = topic
                .fetch_into(
                    partition,
                    at,
                    shape.max_bytes,
                    shape.max_wait,
                    shape.min_bytes,
                    &mut records,
                )
                .await?;
            Ok((f, records))
        });
        Self {
            partition,
            at,
            task,
        }
    }

    /// Whether this is the fetch of `partition` at `at`.
    pub(crate) fn is_for(&self, partition: u32, at: u64) -> bool {
        self.partition == partition && self.at == at
    }

    /// The answer. Cancel-safe: dropping the future leaves the fetch running, and a
    /// later call gets its answer.
    pub(crate) async fn answer(&mut self) -> FetchResult {
        match (&mut self.task).await {
            Ok(result) => result,
            // The task is aborted only when `self` is dropped, so this is a panic.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.task.abort();
    }
}
