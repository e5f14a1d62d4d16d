//! Rust futures as JavaScript promises, on napi's tokio runtime.
//!
//! Every promise the addon returns is made by [`spawn`]: the SDK's future runs on
//! tokio, off the JS thread; its error becomes a marked error (`error.rs`) and a panic
//! is caught here, so no panic crosses into Node. Waiting calls also take a
//! [`Canceller`], which `AbortSignal` listeners fire from JS.
//!
//! Architecture Invariant: native code touches JS values only on the JS thread (napi
//! resolves a promise there); futures hold Rust values only.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use napi::Env;
use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi_derive::napi;
use rill_client::ClientError;
use tokio::sync::watch;

use crate::error;

/// Runs `future` on the runtime and returns a promise of its result.
pub(crate) fn spawn<'env, F, T>(env: &'env Env, future: F) -> napi::Result<PromiseRaw<'env, T>>
where
    F: Future<Output = Result<T, Fail>> + Send + 'static,
    T: ToNapiValue + Send + 'static,
{
    env.spawn_future(async move {
        match AssertUnwindSafe(future).catch_unwind().await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Fail::Client(e))) => Err(error::to_napi(e)),
            Ok(Err(Fail::Aborted)) => Err(error::aborted_napi()),
            Err(panic) => Err(error::panic_to_napi(&*panic)),
        }
    })
}

/// Why a spawned call failed: an SDK error, or its `AbortSignal`.
#[derive(Debug)]
pub(crate) enum Fail {
    Client(ClientError),
    Aborted,
}

impl From<ClientError> for Fail {
    fn from(e: ClientError) -> Self {
        Self::Client(e)
    }
}

/// Runs `f` inside the runtime's context, for synchronous calls that may start tasks
/// or timers (building an SDK object).
pub(crate) fn enter<R>(f: impl FnOnce() -> R) -> R {
    napi::bindgen_prelude::within_runtime_if_available(f)
}

/// Ends one waiting call early: JS makes one per call that takes an `AbortSignal` and
/// calls `cancel()` when the signal aborts.
#[napi]
#[derive(Debug)]
pub struct Canceller {
    tx: watch::Sender<bool>,
}

impl Default for Canceller {
    fn default() -> Self {
        Self::new()
    }
}

#[napi]
impl Canceller {
    /// A canceller not yet fired.
    #[napi(constructor)]
    pub fn new() -> Self {
        Self {
            tx: watch::channel(false).0,
        }
    }

    /// Fires it: the call waiting on it ends (its promise rejects as aborted).
    #[napi]
    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }

    /// Whether it was fired.
    #[napi(getter)]
    pub fn cancelled(&self) -> bool {
        *self.tx.borrow()
    }
}

/// What a waiting future watches to end early.
#[derive(Debug, Clone)]
pub(crate) struct Cancel(Option<watch::Receiver<bool>>);

impl Cancel {
    /// The cancel of `canceller`, or one that never fires.
    pub(crate) fn of(canceller: Option<&Canceller>) -> Self {
        Self(canceller.map(|c| c.tx.subscribe()))
    }

    /// Resolves once the canceller fires (never without one).
    pub(crate) async fn fired(&mut self) {
        match &mut self.0 {
            Some(rx) => {
                // A dropped sender cannot fire any more: wait forever then.
                if rx.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// The runtime's handle: the current one inside a task, else napi's (which exists
/// while the addon is loaded; `None` once napi has shut it down at exit).
fn handle() -> Option<tokio::runtime::Handle> {
    if let Ok(h) = tokio::runtime::Handle::try_current() {
        return Some(h);
    }
    std::panic::catch_unwind(|| enter(tokio::runtime::Handle::current)).ok()
}

/// An SDK object that is dropped inside the runtime's context: JS collects objects on
/// its own thread (finalizers, possibly after napi shut its runtime down at exit), and
/// dropping some SDK objects aborts or starts tasks. A drop never panics into Node.
#[derive(Debug)]
pub(crate) struct InRuntime<T> {
    value: Option<T>,
    handle: Option<tokio::runtime::Handle>,
}

impl<T> InRuntime<T> {
    /// Wraps `value`.
    pub(crate) fn new(value: T) -> Self {
        Self {
            value: Some(value),
            handle: handle(),
        }
    }

    /// The value (always there until dropped or taken).
    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// The value, mutably.
    pub(crate) fn get_mut(&mut self) -> Option<&mut T> {
        self.value.as_mut()
    }

    /// Takes the value out, leaving nothing to drop.
    pub(crate) fn take(&mut self) -> Option<T> {
        self.value.take()
    }
}

impl<T> Drop for InRuntime<T> {
    fn drop(&mut self) {
        let Some(value) = self.value.take() else {
            return;
        };
        let handle = self.handle.take();
        let dropped = std::panic::catch_unwind(AssertUnwindSafe(move || {
            let _guard = handle.as_ref().map(tokio::runtime::Handle::enter);
            drop(value);
        }));
        // A panic while dropping (a runtime already gone at exit) is dropped with it:
        // nothing is left to clean up in a process that is exiting.
        drop(dropped);
    }
}
