//! Rust futures as Python awaitables, on the tokio runtime of `pyo3-async-runtimes`.
//!
//! Every awaitable the module returns is made by [`spawn`]: an `asyncio.Future` of the
//! running loop, resolved by a tokio task that runs the SDK's future without the GIL
//! (so it never blocks the event loop). Its error becomes the `rill.errors` exception,
//! and a panic is caught here and raised as `rill.errors.PanicError`, so no panic
//! crosses into Python. Cancelling the asyncio future aborts the task.
//!
//! Why not `pyo3_async_runtimes::tokio::future_into_py`: it hands the result over from
//! a tokio thread that holds the GIL across `call_soon_threadsafe`, whose socket write
//! lets the GIL go; if the awaiting coroutine was the program's last, the interpreter
//! finalizes meanwhile and the thread is torn down inside Python, which aborts the
//! process (seen as a crash at exit in about one run in five). Here every hand-over is
//! counted, and an `atexit` hook ([`quiesce`]) stops new ones and waits for those under
//! way before the interpreter finalizes.
//!
//! Architecture Invariant: tokio threads touch Python only inside [`deliver`], between
//! [`Delivering::enter`] and its drop.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;
use rill_client::ClientError;

use crate::error;

/// Set by [`quiesce`]: results are no longer handed to Python.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Hand-overs to Python under way.
static DELIVERING: AtomicUsize = AtomicUsize::new(0);

/// Longest wait of [`quiesce`] for hand-overs under way.
const QUIESCE_WAIT_MAX: Duration = Duration::from_secs(5);

/// The right of a tokio thread to call into Python; none once the interpreter exits.
struct Delivering;

impl Delivering {
    fn enter() -> Option<Self> {
        DELIVERING.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            DELIVERING.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Self)
    }
}

impl Drop for Delivering {
    fn drop(&mut self) {
        DELIVERING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `future` on the runtime and returns an `asyncio.Future` of its result, of the
/// running event loop (called outside of one, it raises `RuntimeError`).
pub(crate) fn spawn<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, ClientError>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = get_running_loop(py)?;
    let py_future = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let task = pyo3_async_runtimes::tokio::get_runtime().spawn(deliver(
        event_loop.unbind(),
        py_future.clone().unbind(),
        future,
    ));
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

fn get_running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
        })?
        .bind(py)
        .call0()
}

/// Awaits `future` and hands its outcome to the loop's thread, which resolves
/// `py_future` (unless it was cancelled meanwhile).
async fn deliver<F, T>(event_loop: Py<PyAny>, py_future: Py<PyAny>, future: F)
where
    F: Future<Output = Result<T, ClientError>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let outcome = AssertUnwindSafe(future).catch_unwind().await;
    let Some(_delivering) = Delivering::enter() else {
        return;
    };
    Python::attach(|py| {
        let (ok, value) = match outcome {
            Ok(Ok(value)) => match value.into_py_any(py) {
                Ok(value) => (true, value),
                Err(e) => (false, e.into_value(py).into_any()),
            },
            Ok(Err(e)) => (false, error::to_py(py, e).into_value(py).into_any()),
            Err(panic) => (
                false,
                error::panic_to_py(py, &*panic).into_value(py).into_any(),
            ),
        };
        let settle = if ok { resolve_fn(py) } else { reject_fn(py) };
        let handed = settle.and_then(|settle| {
            event_loop.call_method1(
                py,
                pyo3::intern!(py, "call_soon_threadsafe"),
                (settle, py_future, value),
            )
        });
        // A loop that was closed meanwhile has no one waiting for the result.
        drop(handed);
    });
}

fn resolve_fn(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(RESOLVE
        .get_or_try_init(py, || {
            PyCFunction::new_closure(py, None, None, |args, _| -> PyResult<()> {
                let (future, value) = (args.get_item(0)?, args.get_item(1)?);
                if !future.call_method0("done")?.is_truthy()? {
                    future.call_method1("set_result", (value,))?;
                }
                Ok(())
            })
            .map(|f| f.into_any().unbind())
        })?
        .bind(py)
        .clone())
}

fn reject_fn(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static REJECT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(REJECT
        .get_or_try_init(py, || {
            PyCFunction::new_closure(py, None, None, |args, _| -> PyResult<()> {
                let (future, error) = (args.get_item(0)?, args.get_item(1)?);
                if !future.call_method0("done")?.is_truthy()? {
                    future.call_method1("set_exception", (error,))?;
                }
                Ok(())
            })
            .map(|f| f.into_any().unbind())
        })?
        .bind(py)
        .clone())
}

/// Stops handing results to Python and waits (without the GIL, at most 5 s) for the
/// hand-overs under way: registered with `atexit`, so that no tokio thread is inside
/// Python when the interpreter finalizes.
#[pyfunction]
pub(crate) fn quiesce(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = Instant::now() + QUIESCE_WAIT_MAX;
        while DELIVERING.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
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
