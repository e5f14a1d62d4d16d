//! Memory budgets, in bytes, for what the server buffers on behalf of clients: request
//! frames being read or handled, and responses waiting for the socket.
//!
//! Every connection draws from two pools at once: its own (`connection_buffer_bytes_max`)
//! and the server's (`buffer_bytes_max`). A [`Grant`] holds bytes of both and gives
//! them back when dropped, so the bytes travel with what they pay for (a frame into its
//! request task, a response into the writer) and nothing can leak them.
//!
//! The pools are first-fit, not first-come: a waiter takes its bytes as soon as they
//! are free, whoever waited first. A FIFO pool would let one connection waiting for a
//! 64 MiB frame hold up every small request of every other connection behind it; a
//! first-fit pool lets small grants pass, and a large one waits until enough is free.
//! The price is that a steady stream of small grants can keep a large one waiting; each
//! client's share of that stream is bounded by its own pool.
//!
//! Deadlock freedom rests on two rules the callers keep: the connection pool is always
//! taken before the server pool (a fixed order), and nobody waits for a grant while
//! holding another one, except that waiting for the server pool holds the same grant's
//! connection bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A pool of bytes.
#[derive(Debug)]
pub(crate) struct Pool {
    capacity: usize,
    used: AtomicUsize,
    /// Tasks waiting in `take`; `give` wakes them only when there are some, so the
    /// common release is two atomic operations and no lock.
    waiting: AtomicUsize,
    released: Notify,
}

impl Pool {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            used: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            released: Notify::new(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes granted now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(n).filter(|&after| after <= self.capacity)
            })
            .is_ok()
    }

    /// Waits until `n` bytes are free and takes them.
    async fn take(&self, n: usize) {
        assert!(
            n <= self.capacity,
            "a grant larger than its pool never fits"
        );
        if self.try_take(n) {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Decrement(&self.waiting);
        loop {
            let mut released = std::pin::pin!(self.released.notified());
            // Registered before the check, so a release between the check and the
            // wait still wakes this task.
            released.as_mut().enable();
            if self.try_take(n) {
                return;
            }
            released.await;
        }
    }

    fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.used.fetch_sub(n, Ordering::SeqCst);
        assert!(before >= n, "a pool got back more than it granted");
        // SeqCst on both sides: a waiter counted after this load sees the bytes freed
        // above when it checks, so skipping the wake-up cannot strand it.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.released.notify_waiters();
        }
    }
}

/// The `rill_buffer_bytes` gauges read the server-wide pool at scrape time.
impl rill_http::BufferGauge for Pool {
    fn used_bytes(&self) -> u64 {
        self.used() as u64
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity as u64
    }
}

struct Decrement<'a>(&'a AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One connection's view of the budgets: its own pool and the server's.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    connection: Arc<Pool>,
    server: Arc<Pool>,
}

impl Budget {
    /// `connection` must not be larger than `server` (the configuration checks it), so
    /// a grant that fits one fits both.
    pub(crate) fn new(connection: Arc<Pool>, server: Arc<Pool>) -> Self {
        debug_assert!(connection.capacity() <= server.capacity());
        Self { connection, server }
    }

    /// The most one grant can hold: what is asked for more is clamped to it.
    pub(crate) fn grant_bytes_max(&self) -> usize {
        self.connection.capacity()
    }

    /// A grant of nothing, to add to.
    pub(crate) fn none(&self) -> Grant {
        Grant {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Waits until `bytes` (clamped to [`grant_bytes_max`](Self::grant_bytes_max)) are
    /// free in both pools and takes them. Cancel-safe: dropped while waiting, it
    /// holds nothing.
    pub(crate) async fn acquire(&self, bytes: usize) -> Grant {
        let bytes = bytes.min(self.grant_bytes_max());
        self.connection.take(bytes).await;
        // Held from here: given back if this future is dropped while it waits below.
        let mut connection = Held {
            pool: &self.connection,
            bytes,
        };
        self.server.take(bytes).await;
        connection.bytes = 0;
        Grant {
            budget: self.clone(),
            bytes,
        }
    }

    /// Takes `bytes` if they are free in both pools now (never clamped).
    pub(crate) fn try_acquire(&self, bytes: usize) -> Option<Grant> {
        if !self.connection.try_take(bytes) {
            return None;
        }
        if !self.server.try_take(bytes) {
            self.connection.give(bytes);
            return None;
        }
        Some(Grant {
            budget: self.clone(),
            bytes,
        })
    }
}

/// Bytes of one pool, given back when dropped.
struct Held<'a> {
    pool: &'a Pool,
    bytes: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.pool.give(self.bytes);
    }
}

/// Bytes held from both pools of a [`Budget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Grant {
    budget: Budget,
    bytes: usize,
}

impl Grant {
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Moves everything this grant holds into a new one, leaving it empty.
    pub(crate) fn take(&mut self) -> Grant {
        Grant {
            budget: self.budget.clone(),
            bytes: std::mem::take(&mut self.bytes),
        }
    }

    /// Adds what `other` holds (both must come from the same budget).
    pub(crate) fn merge(&mut self, mut other: Grant) {
        debug_assert!(Arc::ptr_eq(&self.budget.server, &other.budget.server));
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Gives back all but `bytes` (no-op if it holds no more).
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            let extra = self.bytes - bytes;
            self.bytes = bytes;
            self.budget.connection.give(extra);
            self.budget.server.give(extra);
        }
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn budget(connection: usize, server: &Arc<Pool>) -> Budget {
        Budget::new(Arc::new(Pool::new(connection)), Arc::clone(server))
    }

    #[tokio::test]
    async fn grants_return_their_bytes_when_dropped_split_or_shrunk() {
        let server = Arc::new(Pool::new(100));
        let b = budget(60, &server);
        let mut g = b.acquire(50).await;
        assert_eq!((b.connection.used(), server.used()), (50, 50));
        let moved = g.take();
        assert_eq!((g.bytes(), moved.bytes()), (0, 50));
        g.merge(moved);
        g.shrink_to(20);
        assert_eq!((b.connection.used(), server.used()), (20, 20));
        assert!(
            b.try_acquire(41).is_none(),
            "the connection pool has 40 left"
        );
        assert_eq!(server.used(), 20, "a failed try takes nothing");
        drop(g);
        assert_eq!((b.connection.used(), server.used()), (0, 0));
        assert_eq!(b.acquire(1000).await.bytes(), 60, "clamped to the pool");
    }

    #[tokio::test]
    async fn a_waiter_proceeds_when_bytes_come_back_and_small_ones_pass_large_ones() {
        let server = Arc::new(Pool::new(100));
        let a = budget(100, &server);
        let b = budget(100, &server);
        let held = a.acquire(90).await;
        let large = tokio::spawn({
            let b = b.clone();
            async move { b.acquire(50).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!large.is_finished());
        // First fit: the small grant does not queue behind the large waiter.
        let small = tokio::time::timeout(Duration::from_secs(5), b.acquire(10))
            .await
            .expect("a small grant that fits is not held up");
        drop((held, small));
        let large = tokio::time::timeout(Duration::from_secs(5), large)
            .await
            .expect("the waiter is woken")
            .unwrap();
        assert_eq!((large.bytes(), server.used()), (50, 50));
    }

    #[tokio::test]
    async fn a_cancelled_wait_holds_nothing() {
        let server = Arc::new(Pool::new(100));
        let other = budget(100, &server);
        let held = other.acquire(80).await;
        let b = budget(50, &server);
        // Gets the connection's bytes, then waits for the server's and is cancelled.
        let waited = tokio::time::timeout(Duration::from_millis(20), b.acquire(40)).await;
        assert!(waited.is_err());
        assert_eq!((b.connection.used(), server.used()), (0, 80));
        drop(held);
        assert_eq!(server.used(), 0);
    }
}
