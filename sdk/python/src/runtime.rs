//! Rust futures as Python awaitables, on the tokio runtime of `pyo3-async-runtimes`.
//!
//! Every awaitable the module returns is made by [`spawn`]: an `asyncio.Future` of the
//! running loop. The SDK's future is polled once on the loop's thread (without the
//! GIL); one that is not done then is finished by a tokio task, whose outcome goes to
//! the loop through its [`Mailbox`]: a queue and a socket pair whose reading end the
//! loop watches (`loop.add_reader`). The loop's thread converts the outcome and settles
//! the future, so a tokio thread never takes the GIL: no contention for it with the
//! loop on every answer, and no tokio thread inside Python when the interpreter
//! finalizes. An error becomes the `rill.errors` exception, and a panic is caught and
//! raised as `rill.errors.PanicError`, so no panic crosses into Python. Cancelling the
//! asyncio future aborts the task.
//!
//! Why not `pyo3_async_runtimes::tokio::future_into_py`: it spawns every future (a
//! thread hop before the request is even sent), and hands the result over from a tokio
//! thread that holds the GIL across `call_soon_threadsafe`: two GIL hand-overs per
//! call, and, if the awaiting coroutine was the program's last, an interpreter that
//! finalizes meanwhile tears the thread down inside Python, which aborts the process.
//!
//! Architecture Invariant: tokio threads never call into Python; they only push
//! outcomes into a [`Mailbox`] and drop Python references (which PyO3 defers to the
//! next holder of the GIL).

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use futures::FutureExt;
use parking_lot::Mutex;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;
use rill_client::ClientError;

use crate::error;

/// Set by [`quiesce`]: outcomes are no longer queued for Python.
static EXITING: AtomicBool = AtomicBool::new(false);

/// A settled outcome waiting for the loop's thread: sets the future it was made for.
type Delivery = Box<dyn FnOnce(Python<'_>) + Send>;

/// Where tokio tasks leave outcomes for one event loop.
struct Mailbox {
    /// Outcomes not yet taken by the loop.
    queue: Mutex<Vec<Delivery>>,
    /// Whether a wake byte is (or is about to be) on the socket: one per batch of
    /// outcomes, so the socket never fills.
    armed: AtomicBool,
    /// The end tokio tasks write to.
    wake: UnixStream,
    /// The end the loop watches.
    watched: UnixStream,
}

impl Mailbox {
    /// Queues `delivery` and wakes the loop if it is not woken already.
    fn post(&self, delivery: Delivery) {
        if EXITING.load(Ordering::SeqCst) {
            return;
        }
        self.queue.lock().push(delivery);
        if !self.armed.swap(true, Ordering::SeqCst) {
            // Nonblocking; a full socket already holds a wake byte.
            let _ = (&self.wake).write(&[1]);
        }
    }

    /// Run by the loop when the socket is readable: settles every queued outcome.
    fn drain(&self, py: Python<'_>) {
        let mut buf = [0u8; 64];
        loop {
            match (&self.watched).read(&mut buf) {
                Ok(n) if n == buf.len() => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                _ => break,
            }
        }
        // Disarmed before the queue is taken: an outcome queued after this writes a
        // byte of its own, and one queued before is taken now.
        self.armed.store(false, Ordering::SeqCst);
        let deliveries = std::mem::take(&mut *self.queue.lock());
        for delivery in deliveries {
            delivery(py);
        }
    }
}

/// The mailboxes of the event loops that have awaited something, each with its loop
/// (held, so that its identity is not reused while the entry exists); those of closed
/// loops are dropped when another loop registers.
static MAILBOXES: Mutex<Vec<(Py<PyAny>, Arc<Mailbox>)>> = Mutex::new(Vec::new());

/// The mailbox of `event_loop`, made and watched the first time it is asked for.
fn mailbox(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Mailbox>> {
    {
        let boxes = MAILBOXES.lock();
        if let Some((_, mailbox)) = boxes
            .iter()
            .find(|(l, _)| l.as_ptr() == event_loop.as_ptr())
        {
            return Ok(Arc::clone(mailbox));
        }
    }
    let (wake, watched) = UnixStream::pair()?;
    wake.set_nonblocking(true)?;
    watched.set_nonblocking(true)?;
    let mailbox = Arc::new(Mailbox {
        queue: Mutex::new(Vec::new()),
        armed: AtomicBool::new(false),
        wake,
        watched,
    });
    let drained = Arc::clone(&mailbox);
    let on_readable = PyCFunction::new_closure(py, None, None, move |args, _| -> PyResult<()> {
        drained.drain(args.py());
        Ok(())
    })?;
    event_loop.call_method1(
        pyo3::intern!(py, "add_reader"),
        (mailbox.watched.as_raw_fd(), on_readable),
    )?;
    // Entries of closed loops go (their sockets close with the last reference). The
    // loops are asked without the lock, which a GIL holder must never wait for.
    let known: Vec<Py<PyAny>> = MAILBOXES
        .lock()
        .iter()
        .map(|(l, _)| l.clone_ref(py))
        .collect();
    let closed: Vec<usize> = known
        .iter()
        .filter(|l| {
            l.bind(py)
                .call_method0(pyo3::intern!(py, "is_closed"))
                .and_then(|c| c.is_truthy())
                .unwrap_or(true)
        })
        .map(|l| l.as_ptr() as usize)
        .collect();
    let removed = {
        let mut boxes = MAILBOXES.lock();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *boxes)
            .into_iter()
            .partition(|(l, _)| closed.contains(&(l.as_ptr() as usize)));
        *boxes = kept;
        boxes.push((event_loop.clone().unbind(), Arc::clone(&mailbox)));
        gone
    };
    drop((known, removed));
    Ok(mailbox)
}

/// Runs `future` on the runtime and returns an `asyncio.Future` of its result, of the
/// running event loop (called outside of one, it raises `RuntimeError`).
///
/// The future is polled once here first, on the loop's thread without the GIL and
/// inside the runtime's context: a call that is answered at once (a flush with nothing
/// buffered, a poll of records already fetched) resolves with no thread hop, and one
/// that sends a request has handed it to the connection before the task is spawned,
/// so the hop to a tokio thread is off the request's path.
pub(crate) fn spawn<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, ClientError>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = get_running_loop(py)?;
    let py_future = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    // A panic of a poll is caught here, as the future's outcome.
    let mut future: Outcome<T> = Box::pin(AssertUnwindSafe(future).catch_unwind());
    let first = py.detach(|| {
        enter(|| {
            let mut cx = Context::from_waker(Waker::noop());
            future.as_mut().poll(&mut cx)
        })
    });
    if let Poll::Ready(outcome) = first {
        settle(py, py_future.as_any(), outcome);
        return Ok(py_future);
    }
    let mailbox = mailbox(py, &event_loop)?;
    let settled = py_future.clone().unbind();
    // Polled again by the task (tokio polls a new task at least once, so nothing the
    // no-op waker missed is lost).
    let task = pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
        let outcome = future.await;
        mailbox.post(Box::new(move |py| settle(py, settled.bind(py), outcome)));
    });
    let abort = task.abort_handle();
    let on_done = PyCFunction::new_closure(py, None, None, move |args, _| -> PyResult<()> {
        // Called once the future is done; cancelled, the task has no one to answer.
        if args.get_item(0)?.call_method0("cancelled")?.is_truthy()? {
            abort.abort();
        }
        Ok(())
    })?;
    py_future.call_method1(pyo3::intern!(py, "add_done_callback"), (on_done,))?;
    Ok(py_future)
}

/// A future of the SDK, its panic caught.
type Outcome<T> = Pin<Box<dyn Future<Output = std::thread::Result<Result<T, ClientError>>> + Send>>;

/// Sets `py_future` to `outcome` (its value, or the exception of its error or panic),
/// unless it is done already (cancelled).
fn settle<T>(
    py: Python<'_>,
    py_future: &Bound<'_, PyAny>,
    outcome: std::thread::Result<Result<T, ClientError>>,
) where
    T: for<'a> IntoPyObject<'a>,
{
    if py_future
        .call_method0(pyo3::intern!(py, "done"))
        .and_then(|d| d.is_truthy())
        .unwrap_or(true)
    {
        return;
    }
    let (method, value) = match outcome {
        Ok(Ok(value)) => match value.into_py_any(py) {
            Ok(value) => (pyo3::intern!(py, "set_result"), value),
            Err(e) => (
                pyo3::intern!(py, "set_exception"),
                e.into_value(py).into_any(),
            ),
        },
        Ok(Err(e)) => (
            pyo3::intern!(py, "set_exception"),
            error::to_py(py, e).into_value(py).into_any(),
        ),
        Err(panic) => (
            pyo3::intern!(py, "set_exception"),
            error::panic_to_py(py, &*panic).into_value(py).into_any(),
        ),
    };
    // Only a future of a closed loop refuses, and no one waits for it.
    drop(py_future.call_method1(method, (value,)));
}

fn get_running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
        })?
        .bind(py)
        .call0()
}

/// Stops queueing outcomes for Python: registered with `atexit`, so that nothing is
/// left for a loop that will not run again. (Tokio threads never call into Python, so
/// there is nothing to wait for.)
#[pyfunction]
pub(crate) fn quiesce() {
    EXITING.store(true, Ordering::SeqCst);
}

/// Runs `f` inside the runtime's context, for synchronous calls that may start tasks
/// or timers (building an SDK object, dropping one).
pub(crate) fn enter<R>(f: impl FnOnce() -> R) -> R {
    let _guard = pyo3_async_runtimes::tokio::get_runtime().enter();
    f()
}

/// An SDK object that is dropped inside the runtime's context: a Python object may be
/// collected on any thread, and dropping some SDK objects aborts or wakes tasks.
#[derive(Debug)]
pub(crate) struct InRuntime<T>(Option<T>);

impl<T> InRuntime<T> {
    /// Wraps `value`.
    pub(crate) fn new(value: T) -> Self {
        Self(Some(value))
    }

    /// The value (always there until dropped).
    pub(crate) fn get(&self) -> Option<&T> {
        self.0.as_ref()
    }

    /// The value, mutably.
    pub(crate) fn get_mut(&mut self) -> Option<&mut T> {
        self.0.as_mut()
    }

    /// Takes the value out, leaving nothing to drop.
    pub(crate) fn take(&mut self) -> Option<T> {
        self.0.take()
    }
}

impl<T> Drop for InRuntime<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            enter(move || drop(value));
        }
    }
}
