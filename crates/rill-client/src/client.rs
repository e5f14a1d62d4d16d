//! The client: one handle for every stream, over TCP or an embedded broker.

use std::collections::HashMap;
#[cfg(feature = "embedded")]
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
#[cfg(feature = "embedded")]
use rill_broker::{Broker, BrokerConfig};
use rill_proto::pb::*;
use rill_proto::ranges::RangeMap;
use rill_proto::{Request, RequestBody, Response, ResponseBody};

#[cfg(feature = "embedded")]
use crate::transport::Embedded;
use crate::transport::{CallError, Credentials, TcpOptions, Transport};
use crate::{ClientError, Topic};

/// Default server: `rill://127.0.0.1:7171`.
pub const DEFAULT_URL: &str = "rill://127.0.0.1:7171";

/// Whether a request may be sent again after a connection broke mid-call.
/// A topic's partition count and, for an elastic topic, its range map.
pub(crate) type Shape = (u32, Option<Arc<RangeMap>>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Reads, admin calls and idempotent produces: repeating them is harmless.
    Safe,
    /// A non-idempotent produce: repeating it could append twice.
    UnsafeAfterSend,
}

/// What one attempt at a request came to.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "an attempt lives on the stack for one call and is matched at once: boxing \
              every answer would cost an allocation per request"
)]
pub(crate) enum Attempt {
    /// The broker answered with success.
    Answered(ResponseBody, Bytes),
    /// The broker answered with an error (a server error, or a typed one such as
    /// `DataLoss`).
    Refused(ClientError),
    /// The request never left: nothing was applied.
    NotSent(ClientError),
    /// The connection broke after the request was sent: it may have been applied.
    Lost(ClientError),
    /// Not worth retrying: a protocol violation, or the client was closed.
    Failed(ClientError),
}

/// Retry budget for transient errors and connection loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub retries: u32,
    /// First back-off; doubles up to `backoff_max`.
    pub backoff: Duration,
    /// Largest back-off.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            retries: 8,
            backoff: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
        }
    }
}

pub(crate) struct Inner {
    transport: Box<dyn Transport>,
    pub(crate) default_stream: String,
    retry: RetryPolicy,
    /// Partition counts by (stream, topic), for routing, each with its range map if the
    /// topic is elastic (docs/RANGES.md §4). One entry holds both, so they are read and
    /// replaced together. A non-poisoning lock: an entry is inserted or removed whole.
    shapes: Mutex<HashMap<(String, String), Shape>>,
    embedded: bool,
    /// Set by `close`: every call fails with `ClientError::Closed` from then on.
    closed: AtomicBool,
    /// Attempts sent, by request kind (a test seam).
    #[cfg(feature = "test-seams")]
    sent: Mutex<HashMap<u16, u64>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("peer", &self.transport.peer())
            .field("default_stream", &self.default_stream)
            .finish()
    }
}

/// A Rill client. Cheap to clone; one client addresses every stream.
///
/// ```no_run
/// # async fn example() -> Result<(), rill_client::ClientError> {
/// use rill_client::Client;
///
/// let rill = Client::connect("rill://127.0.0.1:7171").await?; // a server
/// let orders = rill.stream("shop").topic("orders");
/// orders.ensure(2).await?;
/// let position = orders.publish().json(&serde_json::json!({"total": 12})).send().await?;
/// println!("stored at {position:?}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

/// Options of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    default_stream: String,
    retry: RetryPolicy,
    connect_timeout: Duration,
    max_frame_bytes: u32,
    init_retries: u32,
    init_interval: Duration,
    credentials: Option<Credentials>,
    tls: Option<crate::TlsOptions>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            default_stream: "default".into(),
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(5),
            max_frame_bytes: rill_proto::DEFAULT_MAX_FRAME_BYTES,
            init_retries: 3,
            init_interval: Duration::from_secs(1),
            credentials: None,
            tls: None,
        }
    }
}

impl ClientBuilder {
    /// The stream `Client::topic` uses (default `"default"`).
    pub fn default_stream(mut self, stream: impl Into<String>) -> Self {
        self.default_stream = stream.into();
        self
    }

    /// Retries of transient errors and lost connections (default 8, from 50 ms to 2 s).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// How long [`ClientBuilder::connect`] keeps trying to reach the server: `n` more
    /// attempts after the first, `interval` apart (default 3, 1 s). Each attempt makes a
    /// connection (within [`ClientBuilder::connect_timeout`]) and says hello; a server
    /// that is starting up is waited for, a wrong URL or protocol fails at once. Once
    /// connected, requests retry by [`ClientBuilder::retry`]. Not used by `open`.
    pub fn init_retries(mut self, n: u32, interval: Duration) -> Self {
        self.init_retries = n;
        self.init_interval = interval;
        self
    }

    /// What every connection authenticates with, to a server started with `--auth`
    /// (docs/SECURITY.md). Credentials in the URL (`rill://USER:PASSWORD@HOST:PORT`)
    /// take precedence. Embedded mode ignores them: it is the data directory's owner.
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// How to speak TLS to a `rills://` server: the certificate authorities to trust
    /// and a client certificate (default [`TlsOptions::new`](crate::TlsOptions::new):
    /// the public roots, no client certificate). A `rill://` URL with TLS options is
    /// refused, so a plaintext connection is never made by mistake.
    pub fn tls(mut self, tls: crate::TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How long a TCP connect (and a TLS handshake) may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connects to a server at `rill://HOST:PORT`, or with TLS at `rills://HOST:PORT`.
    /// The connection is made by the first request (and re-made after it breaks); this
    /// checks the URL and reachability.
    pub async fn connect(mut self, url: &str) -> Result<Client, ClientError> {
        let (url, in_url) = split_credentials(url)?;
        let addrs = parse_urls(&url)?;
        if in_url.is_some() {
            self.credentials = in_url;
        }
        let tls = match (url_uses_tls(&url), &self.tls) {
            (true, Some(tls)) => Some(tls.connector()?),
            (true, None) => Some(crate::TlsOptions::new().connector()?),
            (false, Some(_)) => {
                return Err(ClientError::InvalidUrl {
                    url: redact_url(&url),
                    reason: "TLS options were given for a rill:// URL; use rills://",
                });
            }
            (false, None) => None,
        };
        let transport = crate::routed::Routed::new(
            addrs,
            TcpOptions {
                connect_timeout: self.connect_timeout,
                max_frame_bytes: self.max_frame_bytes,
                credentials: self.credentials.clone(),
                tls,
            },
        );
        let init = RetryPolicy {
            retries: self.init_retries,
            backoff: self.init_interval,
            backoff_max: self.init_interval,
        };
        let client = self.build(Box::new(transport), false);
        client.hello(init).await?;
        Ok(client)
    }

    /// Opens a data directory with an in-process broker: the same API, no server.
    #[cfg(feature = "embedded")]
    pub async fn open(self, dir: impl AsRef<Path>) -> Result<Client, ClientError> {
        self.open_with(BrokerConfig::new(dir.as_ref())).await
    }

    /// Like [`ClientBuilder::open`] with explicit broker options.
    #[cfg(feature = "embedded")]
    pub async fn open_with(self, config: BrokerConfig) -> Result<Client, ClientError> {
        let broker = Arc::new(
            tokio::task::spawn_blocking(move || Broker::open(config))
                .await
                .map_err(|e| ClientError::Protocol(format!("broker open task failed: {e}")))??,
        );
        Ok(self.build(Box::new(Embedded::start(broker)), true))
    }

    fn build(self, transport: Box<dyn Transport>, embedded: bool) -> Client {
        Client {
            inner: Arc::new(Inner {
                transport,
                default_stream: self.default_stream,
                retry: self.retry,
                shapes: Mutex::new(HashMap::new()),
                embedded,
                closed: AtomicBool::new(false),
                #[cfg(feature = "test-seams")]
                sent: Mutex::new(HashMap::new()),
            }),
        }
    }
}

/// Takes `USER:PASSWORD@` off a URL (`rill://USER:PASSWORD@HOST:PORT,…`): the URL
/// without it, and the credentials (percent-decoded, so a password may hold `@`, `:`
/// or `,` as `%40`, `%3A`, `%2C`). A URL without `@` has none.
pub fn split_credentials(url: &str) -> Result<(String, Option<Credentials>), ClientError> {
    let bad = |reason| ClientError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let Some((userinfo, hosts)) = rest.rsplit_once('@') else {
        return Ok((url.to_owned(), None));
    };
    let (user, password) = userinfo
        .split_once(':')
        .ok_or_else(|| bad("credentials in a URL are USER:PASSWORD@"))?;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| bad("the credentials are not UTF-8 once percent-decoded"))
    };
    let user = decode(user)?;
    if user.is_empty() {
        return Err(bad("the user name is empty"));
    }
    let password = rill_auth::Secret::new(decode(password)?);
    let url = match scheme {
        Some(s) => format!("{s}://{hosts}"),
        None => hosts.to_owned(),
    };
    Ok((url, Some(Credentials::Password { user, password })))
}

/// A URL with any password replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}{user}:***@{hosts}")
        }
        None => url.to_owned(),
    }
}

/// Whether a URL asks for TLS (`rills://`).
pub fn url_uses_tls(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| scheme == "rills")
}

/// Checks a URL that may name several nodes of a cluster, `rill://HOST:PORT,HOST:PORT`,
/// and returns their `HOST:PORT`s (at least one, none twice).
pub fn parse_urls(url: &str) -> Result<Vec<String>, ClientError> {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let mut out: Vec<String> = Vec::new();
    for part in rest.trim_end_matches('/').split(',') {
        let one = match scheme {
            Some(s) => format!("{s}://{}", part.trim()),
            None => part.trim().to_owned(),
        };
        let addr = parse_url(&one).map_err(|e| match e {
            ClientError::InvalidUrl { reason, .. } => ClientError::InvalidUrl {
                url: url.to_owned(),
                reason,
            },
            other => other,
        })?;
        if out.contains(&addr) {
            return Err(ClientError::InvalidUrl {
                url: url.to_owned(),
                reason: "an address is named twice",
            });
        }
        out.push(addr);
    }
    Ok(out)
}

/// Checks a one-node URL and returns its `HOST:PORT`.
pub fn parse_url(url: &str) -> Result<String, ClientError> {
    let bad = |reason| ClientError::InvalidUrl {
        url: url.to_owned(),
        reason,
    };
    let rest = match url.split_once("://") {
        Some(("rill" | "rills", rest)) => rest,
        Some(_) => return Err(bad("the scheme must be rill:// or rills:// (TLS)")),
        None => url,
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad("a port is required, as in rill://127.0.0.1:7171"))?;
    if host.is_empty() {
        return Err(bad("the host is empty"));
    }
    port.parse::<u16>()
        .map_err(|_| bad("the port must be a number 0-65535"))?;
    Ok(rest.to_owned())
}

impl Client {
    /// Connects to a server at `rill://HOST:PORT` with default options.
    pub async fn connect(url: &str) -> Result<Self, ClientError> {
        ClientBuilder::default().connect(url).await
    }

    /// Opens a data directory with an in-process broker.
    #[cfg(feature = "embedded")]
    pub async fn open(dir: impl AsRef<Path>) -> Result<Self, ClientError> {
        ClientBuilder::default().open(dir).await
    }

    /// A builder for options.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A stream by name.
    pub fn stream(&self, name: impl Into<String>) -> StreamHandle {
        StreamHandle {
            client: self.clone(),
            name: name.into(),
        }
    }

    /// A topic of the default stream.
    pub fn topic(&self, name: impl Into<String>) -> Topic {
        Topic::new(self.clone(), self.inner.default_stream.clone(), name.into())
    }

    /// Whether this client runs an embedded broker.
    pub fn is_embedded(&self) -> bool {
        self.inner.embedded
    }

    /// Closes the client and every clone of it: the TCP connection is closed, an
    /// embedded broker is synced, shut down and let go (its data directory can be opened
    /// again once calls still running have ended). From then on every call — of this
    /// client, its topics, producers and consumers — fails at once with
    /// [`ClientError::Closed`]; a call in flight over TCP fails too (an unacknowledged
    /// non-idempotent publish as [`ClientError::Indeterminate`]). Closing again does
    /// nothing.
    pub async fn close(&self) -> Result<(), ClientError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.transport.close().await
    }

    /// How many requests of `kind` (a request name such as `"Fetch"`, as in
    /// docs/PROTOCOL.md §3) this client has sent, counting every attempt of a retried
    /// one. A test seam (feature `test-seams`): tests count requests to check, say,
    /// that an idle consumer waits on the broker instead of polling it.
    #[cfg(feature = "test-seams")]
    pub fn requests_sent(&self, kind: &str) -> u64 {
        let sent = self.inner.sent.lock();
        rill_proto::Kind::ALL
            .iter()
            .filter(|k| k.name() == kind)
            .map(|k| sent.get(&(*k as u16)).copied().unwrap_or(0))
            .sum()
    }

    /// Sends one request as it is and returns its answer, with the client's retries. A
    /// test seam (feature `test-seams`): tests reach requests the SDK does not offer
    /// yet (an elastic topic's creation and splits, docs/RANGES.md §11).
    #[cfg(feature = "test-seams")]
    pub async fn call_raw(&self, body: RequestBody) -> Result<ResponseBody, ClientError> {
        Ok(self.call(body, Bytes::new(), Retry::Safe).await?.0)
    }

    /// Whether [`Client::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    async fn hello(&self, policy: RetryPolicy) -> Result<HelloResponse, ClientError> {
        let body = self
            .call_with(
                RequestBody::Hello(HelloRequest {
                    client: format!("rill-client {}", env!("CARGO_PKG_VERSION")),
                    protocol_version: u32::from(rill_proto::PROTOCOL_VERSION),
                }),
                Bytes::new(),
                Retry::Safe,
                policy,
            )
            .await?
            .0;
        match body {
            ResponseBody::Hello(h) => Ok(h),
            other => Err(unexpected(&other)),
        }
    }

    /// Low level: sends any request of `docs/PROTOCOL.md` and returns the broker's
    /// typed answer and payload (a `Produce` carries its batch as `payload`; a `Fetch`
    /// answer its batches). For protocol features the typed API does not wrap; see
    /// [`raw`](crate::raw) for what may change with the protocol.
    ///
    /// Transient errors and lost connections are retried within the client's budget,
    /// except that a `Produce` whose connection broke after it was sent is not resent
    /// (it may have been stored) and fails as [`ClientError::Indeterminate`]. An error
    /// answer is a [`ClientError::Server`] (or a typed variant such as
    /// [`ClientError::DataLoss`]), as elsewhere.
    ///
    /// ```no_run
    /// # async fn example(rill: rill_client::Client) -> Result<(), rill_client::ClientError> {
    /// use rill_client::raw::{Bytes, Request, Response, messages};
    ///
    /// let (answer, _) = rill
    ///     .raw(Request::ListStreams(messages::ListStreamsRequest {}), Bytes::new())
    ///     .await?;
    /// if let Response::ListStreams(list) = answer {
    ///     println!("{} streams", list.streams.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn raw(
        &self,
        request: RequestBody,
        payload: Bytes,
    ) -> Result<(ResponseBody, Bytes), ClientError> {
        let retry = match request {
            RequestBody::Produce(_) => Retry::UnsafeAfterSend,
            _ => Retry::Safe,
        };
        self.call(request, payload, retry).await
    }

    /// Sends a request, retrying transient errors and lost connections within the
    /// retry budget (a lost connection only where `retry` allows).
    pub(crate) async fn call(
        &self,
        body: RequestBody,
        payload: Bytes,
        retry: Retry,
    ) -> Result<(ResponseBody, Bytes), ClientError> {
        self.call_with(body, payload, retry, self.inner.retry).await
    }

    /// Like `call`, with an explicit retry budget. A range being sealed (`MIGRATING`,
    /// docs/RANGES.md §3) is waited out apart from the budget: 20 ms, doubling to 1 s,
    /// for up to [`MIGRATING_PATIENCE`] in all (a split lasts about one fdatasync; one that
    /// fails lifts its fence).
    pub(crate) async fn call_with(
        &self,
        body: RequestBody,
        payload: Bytes,
        retry: Retry,
        policy: RetryPolicy,
    ) -> Result<(ResponseBody, Bytes), ClientError> {
        self.call_inner(body, payload, None, retry, policy).await
    }

    /// Like `call`, for a `Produce` of a batch this process built: an embedded broker
    /// need not check it again (docs/FORMAT.md §3, "Batches built in-process").
    pub(crate) async fn call_built(
        &self,
        body: RequestBody,
        built: rill_format::BuiltBatch,
        retry: Retry,
    ) -> Result<(ResponseBody, Bytes), ClientError> {
        let payload = built.bytes().clone();
        self.call_inner(body, payload, Some(built), retry, self.inner.retry)
            .await
    }

    async fn call_inner(
        &self,
        body: RequestBody,
        payload: Bytes,
        built: Option<rill_format::BuiltBatch>,
        retry: Retry,
        policy: RetryPolicy,
    ) -> Result<(ResponseBody, Bytes), ClientError> {
        let mut backoff = policy.backoff;
        let mut attempt = 0;
        let mut migrating = Migrating::default();
        loop {
            let error = match self.attempt(&body, &payload, built.as_ref()).await {
                Attempt::Answered(body, payload) => return Ok((body, payload)),
                Attempt::Refused(e) if !e.is_transient() => return Err(e),
                // A sealed range of an elastic topic: the same request would be refused
                // again; the caller routes the records anew (docs/RANGES.md §4).
                Attempt::Refused(e)
                    if e.code() == Some(crate::ErrorCode::NotOwner)
                        && matches!(&body, RequestBody::Produce(r) if r.ranged) =>
                {
                    return Err(e);
                }
                Attempt::Refused(e) | Attempt::NotSent(e) => e,
                Attempt::Lost(e) if retry == Retry::UnsafeAfterSend => {
                    return Err(ClientError::Indeterminate(e.to_string()));
                }
                Attempt::Lost(e) => e,
                Attempt::Failed(e) => return Err(e),
            };
            if self.is_closed() {
                return Err(ClientError::Closed);
            }
            if let Some(pause) = migrating.pause(&error) {
                tokio::time::sleep(pause).await;
                continue;
            }
            if attempt >= policy.retries {
                return Err(error);
            }
            attempt += 1;
            tracing::debug!(attempt, error = %error, "retrying after a transient error");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(policy.backoff_max);
        }
    }

    /// Sends a request once. The caller decides about retries. `built`, if given, is
    /// `payload` as this process built it.
    pub(crate) async fn attempt(
        &self,
        body: &RequestBody,
        payload: &Bytes,
        built: Option<&rill_format::BuiltBatch>,
    ) -> Attempt {
        if self.is_closed() {
            return Attempt::Failed(ClientError::Closed);
        }
        #[cfg(feature = "test-seams")]
        {
            *self
                .inner
                .sent
                .lock()
                .entry(body.kind() as u16)
                .or_default() += 1;
        }
        let request = Request::with_payload(body.clone(), payload.clone());
        let connection_error = |reason| ClientError::Connection {
            addr: self.inner.transport.peer(),
            reason,
        };
        let called = match built {
            Some(built) => self.inner.transport.call_built(request, built.clone()),
            None => self.inner.transport.call(request),
        };
        match called.await {
            Ok(Response::Ok { body, payload }) => Attempt::Answered(body, payload),
            Ok(Response::Err { error, .. }) => {
                Attempt::Refused(ClientError::from_response(error, body))
            }
            Err(CallError::NotSent(_)) if self.is_closed() => Attempt::Failed(ClientError::Closed),
            Err(CallError::NotSent(reason)) => Attempt::NotSent(connection_error(reason)),
            Err(CallError::Lost(reason)) => Attempt::Lost(connection_error(reason)),
            Err(CallError::Protocol(reason)) => Attempt::Failed(ClientError::Protocol(reason)),
        }
    }

    /// Opens a push subscription's stream (docs/PROTOCOL.md §3.32): `None` where the
    /// transport or the server does not serve it. Not retried.
    pub(crate) async fn open_stream(
        &self,
        request: Request,
        capacity: usize,
    ) -> Result<Option<crate::transport::PushStream>, ClientError> {
        if self.is_closed() {
            return Err(ClientError::Closed);
        }
        #[cfg(feature = "test-seams")]
        {
            *self
                .inner
                .sent
                .lock()
                .entry(request.body.kind() as u16)
                .or_default() += 1;
        }
        let connection_error = |reason| ClientError::Connection {
            addr: self.inner.transport.peer(),
            reason,
        };
        match self.inner.transport.subscribe(request, capacity).await {
            Ok(stream) => Ok(stream),
            Err(CallError::NotSent(reason) | CallError::Lost(reason)) => {
                Err(connection_error(reason))
            }
            Err(CallError::Protocol(reason)) => Err(ClientError::Protocol(reason)),
        }
    }

    /// The peer's name, for errors.
    pub(crate) fn peer(&self) -> String {
        self.inner.transport.peer()
    }

    /// The client's retry budget.
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        self.inner.retry
    }

    /// Partition count of a topic, cached.
    pub(crate) async fn partitions(&self, stream: &str, topic: &str) -> Result<u32, ClientError> {
        Ok(self.shape(stream, topic).await?.0)
    }

    pub(crate) fn forget_partitions(&self, stream: &str, topic: &str) {
        let key = (stream.to_owned(), topic.to_owned());
        self.inner.shapes.lock().remove(&key);
    }

    /// Caches a plain topic's partition count (an elastic topic's shape only
    /// [`Client::describe_topic`] caches, with its range map).
    pub(crate) fn remember_partitions(&self, stream: &str, topic: &str, n: u32) {
        let key = (stream.to_owned(), topic.to_owned());
        self.inner.shapes.lock().insert(key, (n, None));
    }

    /// A topic's partition count and, for an elastic topic, its range map; cached. Both
    /// come from one answer and are cached and read together, so a caller never sees
    /// an elastic topic's count without its map (which would route keys as a plain
    /// topic's).
    pub(crate) async fn shape(&self, stream: &str, topic: &str) -> Result<Shape, ClientError> {
        let key = (stream.to_owned(), topic.to_owned());
        if let Some(shape) = self.inner.shapes.lock().get(&key) {
            return Ok(shape.clone());
        }
        let d = self.describe_topic(stream, topic).await?;
        Ok((d.config.partitions, d.range_map))
    }

    // ---- admin -------------------------------------------------------------------------

    /// Creates a stream; with `if_missing` an existing one is fine. Returns whether it
    /// was created.
    pub async fn create_stream(&self, name: &str, if_missing: bool) -> Result<bool, ClientError> {
        match self
            .call(
                RequestBody::CreateStream(CreateStreamRequest {
                    name: name.to_owned(),
                    if_missing,
                }),
                Bytes::new(),
                Retry::Safe,
            )
            .await?
            .0
        {
            ResponseBody::CreateStream(r) => Ok(r.created),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes a stream and all its topics.
    pub async fn delete_stream(&self, name: &str) -> Result<(), ClientError> {
        self.call(
            RequestBody::DeleteStream(DeleteStreamRequest {
                name: name.to_owned(),
            }),
            Bytes::new(),
            Retry::Safe,
        )
        .await?;
        Ok(())
    }

    /// In a cluster: its nodes, and per partition its leader, replicas and how far
    /// behind each follower is (any node answers; a single server answers
    /// `INVALID_REQUEST`).
    pub async fn cluster_status(&self) -> Result<crate::ClusterStatus, ClientError> {
        match self
            .call(
                RequestBody::ClusterStatus(ClusterStatusRequest {}),
                Bytes::new(),
                Retry::Safe,
            )
            .await?
            .0
        {
            ResponseBody::ClusterStatus(r) => Ok(r.into()),
            other => Err(unexpected(&other)),
        }
    }

    /// Streams with their topic counts.
    pub async fn list_streams(&self) -> Result<Vec<crate::StreamInfo>, ClientError> {
        match self
            .call(
                RequestBody::ListStreams(ListStreamsRequest {}),
                Bytes::new(),
                Retry::Safe,
            )
            .await?
            .0
        {
            ResponseBody::ListStreams(r) => Ok(r.streams.into_iter().map(Into::into).collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// Topics of a stream, or of every stream with `None`.
    pub async fn list_topics(
        &self,
        stream: Option<&str>,
    ) -> Result<Vec<crate::TopicInfo>, ClientError> {
        match self
            .call(
                RequestBody::ListTopics(ListTopicsRequest {
                    stream: stream.unwrap_or_default().to_owned(),
                }),
                Bytes::new(),
                Retry::Safe,
            )
            .await?
            .0
        {
            ResponseBody::ListTopics(r) => r.topics.into_iter().map(TryInto::try_into).collect(),
            other => Err(unexpected(&other)),
        }
    }

    /// A topic's options and partitions.
    pub async fn describe_topic(
        &self,
        stream: &str,
        topic: &str,
    ) -> Result<crate::TopicDescription, ClientError> {
        match self
            .call(
                RequestBody::DescribeTopic(DescribeTopicRequest {
                    stream: stream.to_owned(),
                    topic: topic.to_owned(),
                }),
                Bytes::new(),
                Retry::Safe,
            )
            .await?
            .0
        {
            ResponseBody::DescribeTopic(r) => {
                let d = crate::TopicDescription::try_from(r)?;
                self.inner.shapes.lock().insert(
                    (stream.to_owned(), topic.to_owned()),
                    (d.config.partitions, d.range_map.clone()),
                );
                Ok(d)
            }
            other => Err(unexpected(&other)),
        }
    }
}

/// A stream by name.
#[derive(Debug, Clone)]
pub struct StreamHandle {
    client: Client,
    name: String,
}

impl StreamHandle {
    /// A topic of this stream.
    pub fn topic(&self, name: impl Into<String>) -> Topic {
        Topic::new(self.client.clone(), self.name.clone(), name.into())
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the stream if it is missing; returns whether it was created.
    pub async fn ensure(&self) -> Result<bool, ClientError> {
        self.client.create_stream(&self.name, true).await
    }

    /// Creates the stream; an existing one is an error.
    pub async fn create(&self) -> Result<(), ClientError> {
        self.client.create_stream(&self.name, false).await.map(drop)
    }

    /// Deletes the stream and its topics.
    pub async fn delete(&self) -> Result<(), ClientError> {
        self.client.delete_stream(&self.name).await
    }

    /// The stream's topics.
    pub async fn topics(&self) -> Result<Vec<crate::TopicInfo>, ClientError> {
        self.client.list_topics(Some(&self.name)).await
    }
}

pub(crate) fn unexpected(body: &ResponseBody) -> ClientError {
    ClientError::Protocol(format!("unexpected {:?} response", body.kind()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("rill://127.0.0.1:7171").unwrap(),
            "127.0.0.1:7171"
        );
        assert_eq!(parse_url("localhost:1").unwrap(), "localhost:1");
        assert_eq!(parse_url("rill://[::1]:7171/").unwrap(), "[::1]:7171");
        let (url, creds) = split_credentials("rill://alice:p%40ss:w@h1:1,h2:2").unwrap();
        assert_eq!(url, "rill://h1:1,h2:2");
        let Some(Credentials::Password { user, password }) = creds else {
            panic!()
        };
        assert_eq!((user.as_str(), password.expose()), ("alice", "p@ss:w"));
        assert_eq!(split_credentials("rill://h:1").unwrap().0, "rill://h:1");
        assert!(split_credentials("rill://alice@h:1").is_err());
        assert!(split_credentials("rill://:pw@h:1").is_err());
        let e = split_credentials("rill://alice@h:1")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("pw"), "{e}");
        assert_eq!(
            redact_url("rill://alice:secret@h:1"),
            "rill://alice:***@h:1"
        );
        for bad in [
            "http://x:1",
            "rill://x",
            "rill://:1",
            "rill://x:99999",
            "rill://x:port",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    /// A range being sealed is waited out 20 ms, doubling to 1 s, apart from the retry
    /// budget; other errors are the budget's.
    #[test]
    fn migrating_is_waited_out_apart_from_the_budget() {
        let server = |code| ClientError::Server {
            code,
            message: String::new(),
            offset: None,
        };
        let mut m = Migrating::default();
        assert_eq!(m.pause(&server(crate::ErrorCode::NotLeader)), None);
        let pauses: Vec<u64> = (0..8)
            .map(|_| {
                m.pause(&server(crate::ErrorCode::Migrating))
                    .map(|d| d.as_millis() as u64)
                    .unwrap()
            })
            .collect();
        assert_eq!(pauses, [20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(m.pause(&ClientError::Closed), None);
        // Out of patience: the budget decides.
        let mut late = Migrating {
            since: Some((
                std::time::Instant::now() - MIGRATING_PATIENCE,
                MIGRATING_BACKOFF,
            )),
        };
        assert_eq!(late.pause(&server(crate::ErrorCode::Migrating)), None);
    }
}

/// The first pause before a request a range being sealed answered `MIGRATING` is sent
/// again (docs/RANGES.md §4): a split takes about one fdatasync.
const MIGRATING_BACKOFF: Duration = Duration::from_millis(20);
/// The longest pause between two tries of a request answered `MIGRATING`.
const MIGRATING_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long a request answered `MIGRATING` is tried again, apart from the retry
/// budget: a split that takes longer (a disk stalled for that long) is reported.
pub(crate) const MIGRATING_PATIENCE: Duration = Duration::from_secs(30);

/// Waiting out a range being sealed, apart from the retry budget.
#[derive(Debug, Default)]
pub(crate) struct Migrating {
    /// When the first `MIGRATING` came, and the next pause.
    since: Option<(std::time::Instant, Duration)>,
}

impl Migrating {
    /// The pause before trying again if `error` is `MIGRATING` and patience is left;
    /// `None` for any other error (the retry budget decides) or when patience ran out.
    pub(crate) fn pause(&mut self, error: &ClientError) -> Option<Duration> {
        if error.code() != Some(crate::ErrorCode::Migrating) {
            return None;
        }
        let (since, next) = self
            .since
            .get_or_insert((std::time::Instant::now(), MIGRATING_BACKOFF));
        if since.elapsed() >= MIGRATING_PATIENCE {
            return None;
        }
        let pause = *next;
        *next = (*next * 2).min(MIGRATING_BACKOFF_MAX);
        Some(pause)
    }
}
