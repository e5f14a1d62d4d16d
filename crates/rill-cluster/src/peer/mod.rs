//! The node-to-node transport (docs/REPLICATION.md §9): Raft's requests between nodes
//! over TCP, one connection per ordered node pair, pipelined by correlation id.
//!
//! A frame is `len u32 LE` (of what follows), `kind u8`, `correlation u64 LE`, then the
//! body. The metadata group's requests are kinds 1 (append), 2 (vote), 3 (full
//! snapshot), 4 (a command proposed through a node that does not lead, forwarded to the
//! leader: answered with the command's response, or with who leads), their bodies JSON
//! wrapped with the group's name; kind 10 asks a node for the replicas it runs (its
//! [`LocalReport`], for `ClusterStatus`); a partition group's are
//! kinds 5–9 ([`partition`]: batches travel as raw bytes after a JSON head). A response
//! has its request's kind with bit 7 set, or kind `0xff` with an error text. Bounds: a
//! frame of at most [`FRAME_MAX`] bytes (a bigger length closes the connection), at
//! most [`IN_FLIGHT_MAX`] requests being handled per connection (the reader waits), and
//! every request of a client has the library's time limit. Every group of a node is
//! served on its one listener ([`Groups`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{EmptyNode, Raft, RaftNetworkV2};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore, mpsc, oneshot};

use crate::meta::{MetaCommand, MetaResponse};
use crate::store::{MetaStateMachine, MetaTypes};

pub mod partition;

pub use partition::{
    PartitionClient, PartitionGroup, PartitionId, PartitionNetwork, PartitionRaft,
};

/// The largest frame, header included.
pub const FRAME_MAX: u32 = 64 << 20;
/// Requests handled at once per connection.
pub const IN_FLIGHT_MAX: usize = 256;
/// Frames queued for a connection's writer.
const WRITE_QUEUE: usize = 256;
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

const KIND_APPEND: u8 = 1;
const KIND_VOTE: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;
const KIND_PROPOSE: u8 = 4;
const KIND_STATUS: u8 = 10;
const KIND_READ_INDEX: u8 = 11;
const RESPONSE: u8 = 0x80;
const KIND_ERROR: u8 = 0xff;

/// The name of the metadata group on the wire.
pub const META_GROUP: &str = "meta";

/// Why a peer request failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The connection failed or closed.
    #[error("peer connection: {0}")]
    Io(#[from] std::io::Error),
    /// A frame or body that does not decode, or a frame too large.
    #[error("bad peer frame: {0}")]
    Frame(String),
    /// The other node answered with an error.
    #[error("the peer refused: {0}")]
    Remote(String),
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    group: String,
    body: T,
}

/// A full snapshot on the wire.
#[derive(Serialize, Deserialize)]
struct SnapshotMessage {
    vote: VoteOf<MetaTypes>,
    meta: openraft::alias::SnapshotMetaOf<MetaTypes>,
    data: Vec<u8>,
}

fn encode_frame(kind: u8, correlation: u64, body: &[u8]) -> Result<Vec<u8>, PeerError> {
    let len = u32::try_from(body.len() + 9)
        .ok()
        .filter(|&l| l <= FRAME_MAX)
        .ok_or_else(|| PeerError::Frame(format!("a body of {} bytes", body.len())))?;
    let mut out = Vec::with_capacity(4 + len as usize);
    out.extend_from_slice(&len.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&correlation.to_le_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// The length a frame's first four bytes announce, if it is one a peer may send.
fn frame_len(head: [u8; 4]) -> Result<usize, PeerError> {
    let len = u32::from_le_bytes(head);
    if !(9..=FRAME_MAX).contains(&len) {
        return Err(PeerError::Frame(format!("a frame length of {len}")));
    }
    Ok(len as usize)
}

/// Splits `after_len` (a frame without its length) into kind, correlation and body.
fn frame_parts(after_len: &[u8]) -> (u8, u64, &[u8]) {
    let correlation = u64::from_le_bytes(after_len[1..9].try_into().expect("8 bytes"));
    (after_len[0], correlation, &after_len[9..])
}

async fn read_frame(
    reader: &mut (impl AsyncReadExt + Unpin),
) -> Result<Option<(u8, u64, Bytes)>, PeerError> {
    let mut head = [0u8; 4];
    match reader.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let mut frame = vec![0u8; frame_len(head)?];
    reader.read_exact(&mut frame).await?;
    let (kind, correlation, _) = frame_parts(&frame);
    Ok(Some((kind, correlation, Bytes::from(frame).slice(9..))))
}

/// A frame read from a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Its kind.
    pub kind: u8,
    /// Its correlation id.
    pub correlation: u64,
    /// Its body.
    pub body: &'a [u8],
    /// The bytes it took, its length included.
    pub len: usize,
}

/// The first frame of `bytes`; `None` if `bytes` holds less than a whole frame.
pub fn decode_frame(bytes: &[u8]) -> Result<Option<Frame<'_>>, PeerError> {
    let Some(head) = bytes.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = frame_len(*head)?;
    let Some(frame) = bytes.get(4..4 + len) else {
        return Ok(None);
    };
    let (kind, correlation, body) = frame_parts(frame);
    Ok(Some(Frame {
        kind,
        correlation,
        body,
        len: 4 + len,
    }))
}

/// A request of the metadata group, as a peer sent it.
#[derive(Debug)]
pub enum PeerRequest {
    /// Append entries (or a heartbeat).
    Append(AppendEntriesRequest<MetaTypes>),
    /// A vote request.
    Vote(VoteRequest<MetaTypes>),
    /// A full snapshot to install.
    Snapshot(
        VoteOf<MetaTypes>,
        SnapshotOf<MetaTypes, std::io::Cursor<Vec<u8>>>,
    ),
}

/// Decodes the body of a request frame of `kind`, checking that it is for the metadata
/// group.
pub fn decode_request(kind: u8, body: &[u8]) -> Result<PeerRequest, PeerError> {
    fn group<T>(envelope: Envelope<T>) -> Result<T, PeerError> {
        if envelope.group == META_GROUP {
            Ok(envelope.body)
        } else {
            Err(PeerError::Remote(format!("no group {}", envelope.group)))
        }
    }
    match kind {
        KIND_APPEND => Ok(PeerRequest::Append(group(from_json(body)?)?)),
        KIND_VOTE => Ok(PeerRequest::Vote(group(from_json(body)?)?)),
        KIND_SNAPSHOT => {
            let m: SnapshotMessage = group(from_json(body)?)?;
            let snapshot = SnapshotOf::<MetaTypes, std::io::Cursor<Vec<u8>>> {
                meta: m.meta,
                snapshot: std::io::Cursor::new(m.data),
            };
            Ok(PeerRequest::Snapshot(m.vote, snapshot))
        }
        other => Err(PeerError::Frame(format!("unknown request kind {other}"))),
    }
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>, PeerError> {
    serde_json::to_vec(value).map_err(|e| PeerError::Frame(e.to_string()))
}

fn from_json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, PeerError> {
    serde_json::from_slice(bytes).map_err(|e| PeerError::Frame(e.to_string()))
}

/// The local metadata node, as the peer server hands it requests.
pub type MetaRaft = Raft<MetaTypes, MetaStateMachine>;

/// The Raft groups a node serves to its peers: the metadata group and the partition
/// groups it holds a replica of (they come and go with topics). Cheap to clone.
#[derive(Clone, Default)]
pub struct Groups {
    meta: Arc<parking_lot::RwLock<Option<MetaRaft>>>,
    partitions: Arc<parking_lot::RwLock<HashMap<PartitionId, Arc<PartitionGroup>>>>,
    reporter: Arc<parking_lot::RwLock<Option<Reporter>>>,
}

/// What a node answers a status request with.
pub type Reporter = Arc<dyn Fn() -> LocalReport + Send + Sync>;

/// The replicas one node runs, as it reports them to another (for `ClusterStatus`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalReport {
    /// The reporting node.
    pub node: u64,
    /// Its replicas.
    pub replicas: Vec<ReplicaReport>,
}

/// One replica in a [`LocalReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaReport {
    /// The partition.
    pub partition: PartitionId,
    /// The leader this replica knows of.
    pub leader: Option<u64>,
    /// Whether this replica leads now.
    pub leading: bool,
    /// Its high watermark.
    pub high_watermark: u64,
    /// When leading: per follower it heard from, records behind the high watermark.
    pub lag: std::collections::BTreeMap<u64, u64>,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("meta", &self.meta.read().is_some())
            .field("partitions", &self.partitions.read().len())
            .finish()
    }
}

impl Groups {
    /// No groups yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves the metadata group through `raft`.
    pub fn set_meta(&self, raft: MetaRaft) {
        *self.meta.write() = Some(raft);
    }

    /// Answers status requests with `reporter`.
    pub fn set_reporter(&self, reporter: Reporter) {
        *self.reporter.write() = Some(reporter);
    }

    /// Serves a partition group.
    pub fn add_partition(&self, group: PartitionGroup) {
        self.partitions
            .write()
            .insert(group.id().clone(), Arc::new(group));
    }

    /// Stops serving a partition group; its requests get an error from now on.
    pub fn remove_partition(&self, id: &PartitionId) -> Option<Arc<PartitionGroup>> {
        self.partitions.write().remove(id)
    }

    fn meta(&self) -> Result<MetaRaft, PeerError> {
        self.meta
            .read()
            .clone()
            .ok_or_else(|| PeerError::Remote("this node serves no metadata group yet".into()))
    }

    fn partition(&self, id: &PartitionId) -> Result<Arc<PartitionGroup>, PeerError> {
        self.partitions
            .read()
            .get(id)
            .cloned()
            .ok_or_else(|| PeerError::Remote(format!("no replica of {id} here")))
    }
}

/// Serves peer connections on `listener`, handing each request to its group in
/// `groups`, until the listener fails. The connections belong to this future: dropping
/// it (or aborting its task) closes every one of them, as a node that stops must.
pub async fn serve(listener: TcpListener, groups: Groups) -> std::io::Result<()> {
    serve_from(listener, groups, None).await
}

/// The addresses the hosts of `addresses` (`HOST:PORT`) resolve to: where peers
/// connect from.
pub async fn peer_hosts(
    addresses: impl IntoIterator<Item = &str>,
) -> std::io::Result<std::collections::BTreeSet<std::net::IpAddr>> {
    let mut hosts = std::collections::BTreeSet::new();
    for addr in addresses {
        for resolved in tokio::net::lookup_host(addr).await? {
            hosts.insert(resolved.ip());
        }
    }
    Ok(hosts)
}

/// Like [`serve`], but closes at once every connection that does not come from one of
/// `allowed` (the hosts of `--peers`, [`peer_hosts`]), when given.
pub async fn serve_from(
    listener: TcpListener,
    groups: Groups,
    allowed: Option<std::collections::BTreeSet<std::net::IpAddr>>,
) -> std::io::Result<()> {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, from) = accepted?;
                if let Some(allowed) = &allowed
                    && !allowed.contains(&from.ip())
                {
                    tracing::warn!(%from, "refused a peer connection from a host that --peers does not name");
                    drop(stream);
                    continue;
                }
                let groups = groups.clone();
                connections.spawn(async move {
                    if let Err(e) = serve_connection(stream, groups).await {
                        tracing::debug!(%from, error = %e, "peer connection ended");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, groups: Groups) -> Result<(), PeerError> {
    stream.set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
    let writing = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            writer.write_all(&frame).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let permits = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    // The requests being handled belong to the connection, like its writer.
    let mut requests = tokio::task::JoinSet::new();
    let _writer = AbortOnDrop(writing.abort_handle());
    while let Some((kind, correlation, body)) = read_frame(&mut reader).await? {
        let permit = Arc::clone(&permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        while requests.try_join_next().is_some() {}
        let (groups, tx) = (groups.clone(), tx.clone());
        requests.spawn(async move {
            let answer = match handle(&groups, kind, body).await {
                Ok(body) => encode_frame(kind | RESPONSE, correlation, &body),
                Err(e) => encode_frame(KIND_ERROR, correlation, e.to_string().as_bytes()),
            };
            if let Ok(frame) = answer {
                let _ = tx.send(frame).await;
            }
            drop(permit);
        });
    }
    // The other side is done sending: answer what it asked, then close.
    while requests.join_next().await.is_some() {}
    drop(tx);
    writing
        .await
        .map_err(|e| PeerError::Frame(format!("the writer task failed: {e}")))??;
    Ok(())
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn handle(groups: &Groups, kind: u8, body: Bytes) -> Result<Vec<u8>, PeerError> {
    if partition::is_partition_kind(kind) {
        return partition::handle(groups, kind, body).await;
    }
    if kind == KIND_STATUS {
        let reporter = groups.reporter.read().clone();
        return match reporter {
            Some(report) => json(&report()),
            None => Err(PeerError::Remote("this node reports no status".into())),
        };
    }
    let raft = groups.meta()?;
    if kind == KIND_READ_INDEX {
        let envelope: Envelope<ReadIndexAsk> = from_json(&body)?;
        if envelope.group != META_GROUP {
            return Err(PeerError::Remote(format!("no group {}", envelope.group)));
        }
        return json(&read_index(&raft).await?);
    }
    if kind == KIND_PROPOSE {
        let envelope: Envelope<MetaCommand> = from_json(&body)?;
        if envelope.group != META_GROUP {
            return Err(PeerError::Remote(format!("no group {}", envelope.group)));
        }
        return json(&match raft.client_write(envelope.body).await {
            Ok(done) => Proposed::Done(done.data, done.log_id.index),
            Err(openraft::error::RaftError::APIError(
                openraft::error::ClientWriteError::ForwardToLeader(f),
            )) => Proposed::NotLeader(f.leader_id),
            Err(e) => return Err(PeerError::Remote(e.to_string())),
        });
    }
    let remote = |e: &dyn std::fmt::Display| PeerError::Remote(e.to_string());
    match decode_request(kind, &body)? {
        PeerRequest::Append(rpc) => json(&raft.append_entries(rpc).await.map_err(|e| remote(&e))?),
        PeerRequest::Vote(rpc) => json(&raft.vote(rpc).await.map_err(|e| remote(&e))?),
        PeerRequest::Snapshot(vote, snapshot) => json(
            &raft
                .install_full_snapshot(vote, snapshot)
                .await
                .map_err(|e| remote(&e))?,
        ),
    }
}

type Pending = Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<Result<Bytes, PeerError>>>>>;

/// One live connection to a peer.
struct Connection {
    writer: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    reading: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reading.abort();
    }
}

/// The connection to one peer, made on first use and again after it fails.
struct PeerLink {
    addr: String,
    connection: Mutex<Option<Arc<Connection>>>,
    next: AtomicU64,
}

impl PeerLink {
    async fn connect(&self) -> Result<Arc<Connection>, PeerError> {
        let mut slot = self.connection.lock().await;
        if let Some(c) = slot
            .as_ref()
            .filter(|c| !c.writer.is_closed() && !c.reading.is_finished())
        {
            return Ok(Arc::clone(c));
        }
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| PeerError::Timeout(CONNECT_TIMEOUT))??;
        stream.set_nodelay(true)?;
        let (mut reader, mut writer) = stream.into_split();
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
        let pending: Pending = Arc::default();
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if writer.write_all(&frame).await.is_err() {
                    break;
                }
            }
        });
        let answers = Arc::clone(&pending);
        let reading = tokio::spawn(async move {
            loop {
                let Ok(Some((kind, correlation, body))) = read_frame(&mut reader).await else {
                    break;
                };
                let Some(waiter) = answers.lock().expect("not poisoned").remove(&correlation)
                else {
                    continue;
                };
                let answer = if kind == KIND_ERROR {
                    Err(PeerError::Remote(
                        String::from_utf8_lossy(&body).into_owned(),
                    ))
                } else {
                    Ok(body)
                };
                let _ = waiter.send(answer);
            }
            // Closed: every waiter learns it now, not at its time limit.
            answers.lock().expect("not poisoned").clear();
        });
        let connection = Arc::new(Connection {
            writer: tx,
            pending,
            reading,
        });
        *slot = Some(Arc::clone(&connection));
        Ok(connection)
    }

    async fn call(&self, kind: u8, body: Vec<u8>, limit: Duration) -> Result<Bytes, PeerError> {
        let connection = self.connect().await?;
        let correlation = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        connection
            .pending
            .lock()
            .expect("not poisoned")
            .insert(correlation, tx);
        let frame = encode_frame(kind, correlation, &body)?;
        let sent = connection.writer.send(frame).await;
        let answer = async {
            sent.map_err(|_| PeerError::Frame("the connection closed".into()))?;
            match rx.await {
                Ok(answer) => answer,
                Err(_) => Err(PeerError::Frame("the connection closed".into())),
            }
        };
        let result = tokio::time::timeout(limit, answer)
            .await
            .unwrap_or(Err(PeerError::Timeout(limit)));
        if result.is_err() {
            connection
                .pending
                .lock()
                .expect("not poisoned")
                .remove(&correlation);
        }
        if matches!(result, Err(PeerError::Io(_) | PeerError::Frame(_))) {
            // Start afresh next time.
            *self.connection.lock().await = None;
        }
        result
    }
}

/// The peers of this node: node id → node-to-node address, from its own `--peers`
/// (docs/REPLICATION.md §3: the Raft membership names ids only).
#[derive(Clone)]
pub struct Peers {
    links: Arc<HashMap<u64, Arc<PeerLink>>>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<_> = self.links.keys().collect();
        ids.sort();
        f.debug_struct("Peers").field("nodes", &ids).finish()
    }
}

/// What a node answers a forwarded metadata command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Proposed {
    /// The leader committed and applied it, at this index of the metadata log.
    Done(MetaResponse, u64),
    /// The node does not lead (any more); the leader it knows, if any.
    NotLeader(Option<u64>),
}

/// The body of a read-index request (nothing yet: the envelope names the group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadIndexAsk {}

/// What the metadata group's leader answers a read-index request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadIndex {
    /// It leads, a quorum confirmed it just now, and a read that reflects every entry up
    /// to this index of the metadata log is linearizable.
    At(u64),
    /// The node does not lead (any more); the leader it knows, if any.
    NotLeader(Option<u64>),
}

/// The read index of the metadata group on this node, if it leads (the ReadIndex
/// protocol: the leader confirms its leadership with a quorum first).
pub(crate) async fn read_index(raft: &MetaRaft) -> Result<ReadIndex, PeerError> {
    match raft
        .get_read_linearizer(openraft::raft::ReadPolicy::ReadIndex)
        .await
    {
        Ok(linearizer) => Ok(ReadIndex::At(linearizer.read_log_id().index())),
        Err(openraft::error::RaftError::APIError(
            openraft::error::LinearizableReadError::ForwardToLeader(f),
        )) => Ok(ReadIndex::NotLeader(f.leader_id)),
        Err(e) => Err(PeerError::Remote(e.to_string())),
    }
}

impl Peers {
    /// Asks node `target` (the leader, as far as the caller knows) for the metadata
    /// group's read index, waiting at most `limit`.
    pub async fn read_index(&self, target: u64, limit: Duration) -> Result<ReadIndex, PeerError> {
        let envelope = Envelope {
            group: META_GROUP.to_owned(),
            body: ReadIndexAsk {},
        };
        let answer = self
            .call(target, KIND_READ_INDEX, json(&envelope)?, limit)
            .await?;
        from_json(&answer)
    }

    /// Forwards a metadata command to node `target` (the leader, as far as the caller
    /// knows), waiting at most `limit`.
    pub async fn propose(
        &self,
        target: u64,
        command: &MetaCommand,
        limit: Duration,
    ) -> Result<Proposed, PeerError> {
        let envelope = Envelope {
            group: META_GROUP.to_owned(),
            body: command,
        };
        let answer = self
            .call(target, KIND_PROPOSE, json(&envelope)?, limit)
            .await?;
        from_json(&answer)
    }

    /// Asks node `target` for the replicas it runs, waiting at most `limit`.
    pub async fn report(&self, target: u64, limit: Duration) -> Result<LocalReport, PeerError> {
        let answer = self
            .call(target, KIND_STATUS, b"{}".to_vec(), limit)
            .await?;
        from_json(&answer)
    }

    /// Sends a request of `kind` to node `target` and waits (at most `limit`) for its
    /// answer's body.
    async fn call(
        &self,
        target: u64,
        kind: u8,
        body: Vec<u8>,
        limit: Duration,
    ) -> Result<Bytes, PeerError> {
        let Some(link) = self.links.get(&target) else {
            return Err(PeerError::Frame(format!("node {target} is not in --peers")));
        };
        link.call(kind, body, limit).await
    }

    /// The peers at these addresses.
    pub fn new(addresses: impl IntoIterator<Item = (u64, String)>) -> Self {
        let links = addresses
            .into_iter()
            .map(|(id, addr)| {
                let link = PeerLink {
                    addr,
                    connection: Mutex::new(None),
                    next: AtomicU64::new(1),
                };
                (id, Arc::new(link))
            })
            .collect();
        Self {
            links: Arc::new(links),
        }
    }
}

/// openraft's network of the metadata group over [`Peers`].
#[derive(Debug, Clone)]
pub struct MetaNetwork {
    peers: Peers,
}

impl MetaNetwork {
    /// A network over `peers`.
    pub fn new(peers: Peers) -> Self {
        Self { peers }
    }
}

/// A client of one peer for the metadata group.
#[derive(Debug)]
pub struct MetaClient {
    target: u64,
    peers: Peers,
}

impl MetaClient {
    async fn call<Req: Serialize, Resp: for<'de> Deserialize<'de>>(
        &self,
        kind: u8,
        body: Req,
        limit: Duration,
    ) -> Result<Resp, PeerError> {
        let envelope = Envelope {
            group: META_GROUP.to_owned(),
            body,
        };
        let answer = self
            .peers
            .call(self.target, kind, json(&envelope)?, limit)
            .await?;
        from_json(&answer)
    }
}

fn unreachable(e: &PeerError) -> RPCError<MetaTypes> {
    RPCError::Unreachable(Unreachable::new(e))
}

impl RaftNetworkV2<MetaTypes> for MetaClient {
    type SnapshotData = std::io::Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetaTypes>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<MetaTypes>, RPCError<MetaTypes>> {
        self.call(KIND_APPEND, rpc, option.hard_ttl())
            .await
            .map_err(|e| unreachable(&e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MetaTypes>,
        option: RPCOption,
    ) -> Result<VoteResponse<MetaTypes>, RPCError<MetaTypes>> {
        self.call(KIND_VOTE, rpc, option.hard_ttl())
            .await
            .map_err(|e| unreachable(&e))
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<MetaTypes>,
        snapshot: SnapshotOf<MetaTypes, Self::SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<MetaTypes>, StreamingError<MetaTypes>> {
        let message = SnapshotMessage {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot.into_inner(),
        };
        tokio::select! {
            answer = self.call(KIND_SNAPSHOT, message, option.hard_ttl()) => {
                answer.map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))
            }
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }
}

impl RaftNetworkFactory<MetaTypes> for MetaNetwork {
    type Network = MetaClient;

    async fn new_client(&mut self, target: u64, _node: &EmptyNode) -> MetaClient {
        MetaClient {
            target,
            peers: self.peers.clone(),
        }
    }
}
