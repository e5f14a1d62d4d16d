//! Registration: the handlers of a consumer, erased to one shape per tag so the runtime
//! can decode, reduce and call them without knowing their types.

use std::future::Future;
use std::marker::PhantomData;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::algebra::{AlgebraKind, Merge};
use crate::{Algebra, BodyCodec, Context, Event, EventHandler, EventKey, HandleError};

/// The main offsets a run item stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) first: u64,
    pub(crate) last: u64,
}

impl Merge for Source {
    fn merge(self, other: Self) -> Self {
        Self {
            first: self.first.min(other.first),
            last: self.last.max(other.last),
        }
    }
}

/// A record's body before decoding.
#[derive(Debug, Clone)]
pub(crate) struct RawItem<'a> {
    /// The body, borrowed from its record (so no reference count of the fetched
    /// buffer, which every record of a fetch shares, is touched per item).
    pub(crate) value: &'a [u8],
    pub(crate) codec: BodyCodec,
    pub(crate) source: Source,
    /// Where the item's record is in the batch it was read in.
    pub(crate) record: usize,
}

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A handler of one tag, erased.
pub(crate) trait Erased: Send + Sync {
    fn tag(&self) -> u32;
    fn topic(&self) -> &'static str;
    fn algebra(&self) -> Algebra;
    fn type_name(&self) -> &'static str;
    /// Decodes and reduces a run; the records (as `RawItem::record`) of items whose
    /// body does not decode come back with why.
    fn prepare(
        &self,
        items: &[RawItem<'_>],
        undecodable: &mut Vec<(usize, String)>,
    ) -> Arc<dyn Prepared>;
    /// Calls the handler with items `range` of a run this handler prepared. The run
    /// does not hold the handler: a reference count of it per run would be one more
    /// atomic the threads running keys share.
    fn call<'a>(
        &'a self,
        run: &'a dyn Prepared,
        ctx: &'a Context,
        range: Range<usize>,
    ) -> BoxFuture<'a, Result<(), HandleError>>;
}

/// A decoded, reduced run, ready to be called in chunks.
pub(crate) trait Prepared: Send + Sync {
    fn len(&self) -> usize;
    fn max_batch(&self) -> usize;
    fn source(&self, i: usize) -> Source;
    fn as_any(&self) -> &dyn std::any::Any;
    /// The item's body, encoded again with its type's codec (for the retry topic).
    fn encode(&self, i: usize) -> Result<(Vec<u8>, BodyCodec), String>;
}

struct Typed<E, H> {
    handler: Arc<H>,
    _event: PhantomData<fn() -> E>,
}

struct TypedRun<E: Event> {
    max_batch: usize,
    /// A run of one item (the usual case with many keys) holds it in place.
    bodies: SmallVec<[E::Body; 1]>,
    sources: SmallVec<[Source; 1]>,
}

impl<E: Event, H: EventHandler<E>> Erased for Typed<E, H> {
    fn tag(&self) -> u32 {
        E::TAG
    }
    fn topic(&self) -> &'static str {
        <E::Key as EventKey>::TOPIC
    }
    fn algebra(&self) -> Algebra {
        <E::Algebra as AlgebraKind<E::Body>>::ALGEBRA
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<E>()
    }
    fn prepare(
        &self,
        items: &[RawItem<'_>],
        undecodable: &mut Vec<(usize, String)>,
    ) -> Arc<dyn Prepared> {
        let mut bodies = SmallVec::with_capacity(items.len());
        let mut sources = SmallVec::with_capacity(items.len());
        let reduces = !matches!(
            <E::Algebra as AlgebraKind<E::Body>>::ALGEBRA,
            Algebra::NonAssociative | Algebra::Commutative
        );
        if reduces {
            let mut decoded = Vec::with_capacity(items.len());
            for item in items {
                match item.codec.decode::<E::Body>(item.value) {
                    Ok(body) => decoded.push((body, item.source)),
                    Err(e) => undecodable.push((item.record, e.to_string())),
                }
            }
            (bodies, sources) = E::Algebra::reduce(decoded).into_iter().unzip();
        } else {
            // No reduction: decoded straight into place.
            for item in items {
                match item.codec.decode::<E::Body>(item.value) {
                    Ok(body) => {
                        bodies.push(body);
                        sources.push(item.source);
                    }
                    Err(e) => undecodable.push((item.record, e.to_string())),
                }
            }
        }
        Arc::new(TypedRun::<E> {
            max_batch: H::MAX_BATCH,
            bodies,
            sources,
        })
    }
    fn call<'a>(
        &'a self,
        run: &'a dyn Prepared,
        ctx: &'a Context,
        range: Range<usize>,
    ) -> BoxFuture<'a, Result<(), HandleError>> {
        let run = run
            .as_any()
            .downcast_ref::<TypedRun<E>>()
            .expect("a run is called by the handler that prepared it");
        Box::pin(self.handler.handle(ctx, &run.bodies[range]))
    }
}

impl<E: Event> Prepared for TypedRun<E> {
    fn len(&self) -> usize {
        self.bodies.len()
    }
    fn max_batch(&self) -> usize {
        self.max_batch
    }
    fn source(&self, i: usize) -> Source {
        self.sources[i]
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn encode(&self, i: usize) -> Result<(Vec<u8>, BodyCodec), String> {
        E::CODEC
            .encode(&self.bodies[i])
            .map(|b| (b, E::CODEC))
            .map_err(|e| e.to_string())
    }
}

/// The handlers of a consumer, built from shared dependencies `D` (or none), then
/// started with [`Handlers::start`].
///
/// ```ignore
/// let consumer = Handlers::with(deps)
///     .on::<OrderPlaced, _>(|d| RecordOrder::new(&d.store))
///     .on::<PaymentReceived, _>(|d| ApplyPayment::new(&d.store))
///     .start(&client, config)
///     .await?;
/// ```
pub struct Handlers<D = ()> {
    deps: D,
    pub(crate) entries: Vec<Arc<dyn Erased>>,
}

impl<D> std::fmt::Debug for Handlers<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field(
                "types",
                &self
                    .entries
                    .iter()
                    .map(|e| e.type_name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for Handlers<()> {
    fn default() -> Self {
        Self::new()
    }
}

impl Handlers<()> {
    /// No handlers yet, and no dependencies to build them from.
    pub fn new() -> Self {
        Self {
            deps: (),
            entries: Vec::new(),
        }
    }
}

impl<D> Handlers<D> {
    /// No handlers yet; [`Handlers::on`] builds each from `deps`.
    pub fn with(deps: D) -> Self {
        Self {
            deps,
            entries: Vec::new(),
        }
    }

    /// Registers `handler` for events of type `E`. To serve several types with one
    /// value, register an `Arc` of it for each.
    pub fn handle<E: Event, H: EventHandler<E>>(mut self, handler: H) -> Self {
        const { assert!(H::MAX_BATCH > 0, "EventHandler::MAX_BATCH must not be zero") };
        self.entries.push(Arc::new(Typed::<E, H> {
            handler: Arc::new(handler),
            _event: PhantomData,
        }));
        self
    }

    /// Registers the handler `build` makes from the dependencies, for events of type
    /// `E`.
    pub fn on<E: Event, H: EventHandler<E>>(self, build: impl FnOnce(&D) -> H) -> Self {
        let handler = build(&self.deps);
        self.handle::<E, H>(handler)
    }

    /// The dependencies.
    pub fn deps(&self) -> &D {
        &self.deps
    }
}

/// One value serving several event types is shared as an `Arc`.
impl<E: Event, H: EventHandler<E>> EventHandler<E> for Arc<H> {
    const MAX_BATCH: usize = H::MAX_BATCH;

    fn handle(
        &self,
        ctx: &Context,
        run: &[E::Body],
    ) -> impl Future<Output = Result<(), HandleError>> + Send {
        H::handle(self, ctx, run)
    }
}
