//! NATS JetStream driver: async publishes, pull consumers, file storage, one replica.
//!
//! Each run starts its own `nats-server -js` on a free port of 127.0.0.1 (no monitoring
//! port) with a fresh store directory, and creates the stream `bench` on subjects
//! `bench.*` (file storage, one replica, no limits). Partition `p` is the subject
//! `bench.p`. Every producer and consumer has its own client (its own socket):
//!
//! - a producer request is up to `batch` JetStream publishes (the key, if any, in a `k`
//!   header) sent without waiting, then all their acks awaited;
//! - each partition has a durable pull consumer filtered on its subject, without acks
//!   (`AckPolicy::None`): from the first record (consume, one fetch of at most `batch`
//!   records at a time) or from new records only (e2e, created before any producer
//!   sends, read with a continuous pull of `batch` records per request).

use std::pin::Pin;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::consumer::pull::{self, Stream as PullStream};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, StorageType};
use async_nats::jetstream::{self, Context};
use async_nats::{Client, Subject};
use futures::stream::SelectAll;
use futures::{FutureExt as _, StreamExt as _};

use crate::drive::{self, FOLLOW_WAIT, Follower, Peer, Reader, Record, STALL, Sender};
use crate::measure::{RunResult, stamp_of};
use crate::servers::{ServerProcess, find_program, free_port};
use crate::workload::{Durability, Workload};

/// The stream every partition is a subject of.
const STREAM: &str = "bench";

/// How long the server has to start accepting connections.
const STARTUP: Duration = Duration::from_secs(20);

/// The storage setting a durability class runs with; `None` for fsync before ack, which
/// nats-server 2.9 cannot do.
pub(crate) fn setting(durability: Durability) -> Option<String> {
    match durability {
        Durability::Buffered => Some("JetStream file storage, 1 replica".into()),
        Durability::Fsync => None,
    }
}

pub(crate) async fn run(workload: &Workload) -> anyhow::Result<RunResult> {
    anyhow::ensure!(
        setting(workload.durability).is_some(),
        "nats-server 2.9 has no {} durability setting",
        workload.durability.name()
    );
    let program = find_program("nats-server")?;
    let dir = tempfile::Builder::new()
        .prefix("rill-peers-nats-")
        .tempdir()
        .context("creating a temporary directory for nats-server")?;
    let port = free_port()?;
    let store = dir.path().join("jetstream");
    let args = [
        "-js".into(),
        "-a".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string().into(),
        "-sd".into(),
        store.into_os_string(),
    ];
    let mut server =
        ServerProcess::start_ready(&program, &args, dir, port, "nats-server", STARTUP).await?;
    let peer = Nats::connect(&server, workload).await?;
    let result = drive::run(&peer, workload).await;
    // A server that died explains a failed run better than the client's error.
    server.ensure_running()?;
    result.with_context(|| {
        format!(
            "nats {} ({} on port {}, data in {}, log {})",
            workload.name,
            server.name(),
            server.port(),
            server.dir().display(),
            server.log_path().display()
        )
    })
}

/// A running server with the stream `bench` created.
#[derive(Debug)]
struct Nats {
    url: String,
    subjects: Vec<Subject>,
    batch: usize,
}

impl Nats {
    async fn connect(server: &ServerProcess, w: &Workload) -> anyhow::Result<Self> {
        let url = format!("nats://{}", server.addr());
        let js = context(client(&url).await?, w.batch);
        js.create_stream(stream::Config {
            name: STREAM.to_owned(),
            subjects: vec![format!("{STREAM}.*")],
            storage: StorageType::File,
            num_replicas: 1,
            max_messages: -1,
            max_bytes: -1,
            max_messages_per_subject: -1,
            max_message_size: -1,
            max_consumers: -1,
            ..stream::Config::default()
        })
        .await
        .with_context(|| format!("creating the JetStream stream {STREAM}"))?;
        Ok(Self {
            url,
            subjects: (0..w.partitions)
                .map(|p| Subject::from(format!("{STREAM}.{p}")))
                .collect(),
            batch: w.batch,
        })
    }

    /// A durable pull consumer of `partition`'s subject, without acks.
    async fn consumer(
        &self,
        stream: &stream::Stream,
        partition: u32,
        deliver_policy: DeliverPolicy,
    ) -> anyhow::Result<PullConsumer> {
        let subject = self
            .subjects
            .get(partition as usize)
            .ok_or_else(|| anyhow::anyhow!("no partition {partition}"))?;
        stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("p{partition}")),
                filter_subject: subject.to_string(),
                deliver_policy,
                ack_policy: AckPolicy::None,
                ..pull::Config::default()
            })
            .await
            .with_context(|| format!("creating a pull consumer on {subject}"))
    }

    /// The stream, seen through a new client.
    async fn stream_on_new_client(&self) -> anyhow::Result<stream::Stream> {
        let js = context(client(&self.url).await?, self.batch);
        js.get_stream(STREAM)
            .await
            .with_context(|| format!("looking up the stream {STREAM}"))
    }
}

/// A new client (its own socket).
async fn client(url: &str) -> anyhow::Result<Client> {
    async_nats::ConnectOptions::new()
        .request_timeout(Some(STALL))
        .connect(url)
        .await
        .with_context(|| format!("connecting to nats-server at {url}"))
}

/// A JetStream context that lets a whole request's publishes be in flight.
fn context(client: Client, batch: usize) -> Context {
    jetstream::ContextBuilder::new()
        .timeout(STALL)
        .max_ack_inflight(batch.max(5_000))
        .build(client)
}

impl Peer for Nats {
    type Producer = Publisher;
    type Reader = Fetcher;
    type Follower = Puller;

    async fn producer(&self, _index: u32) -> anyhow::Result<Publisher> {
        Ok(Publisher {
            js: context(client(&self.url).await?, self.batch),
            subjects: self.subjects.clone(),
        })
    }

    async fn reader(&self, _index: u32, partitions: &[u32]) -> anyhow::Result<Fetcher> {
        let stream = self.stream_on_new_client().await?;
        let mut consumers = Vec::with_capacity(partitions.len());
        for &p in partitions {
            consumers.push((p, self.consumer(&stream, p, DeliverPolicy::All).await?));
        }
        Ok(Fetcher { consumers })
    }

    async fn follower(&self, _index: u32, partitions: &[u32]) -> anyhow::Result<Puller> {
        let stream = self.stream_on_new_client().await?;
        let mut messages = SelectAll::new();
        for &p in partitions {
            let consumer = self.consumer(&stream, p, DeliverPolicy::New).await?;
            let pull = consumer
                .stream()
                .max_messages_per_batch(self.batch)
                .messages()
                .await
                .with_context(|| format!("pulling from partition {p}"))?;
            messages.push(Box::pin(pull));
        }
        Ok(Puller {
            messages,
            batch: self.batch,
        })
    }
}

/// A producer: async JetStream publishes, then their acks.
#[derive(Debug)]
struct Publisher {
    js: Context,
    subjects: Vec<Subject>,
}

impl Sender for Publisher {
    async fn send(&mut self, records: Vec<Record>) -> anyhow::Result<()> {
        let mut acks = Vec::with_capacity(records.len());
        for r in records {
            let subject = self
                .subjects
                .get(r.partition as usize)
                .ok_or_else(|| anyhow::anyhow!("no partition {}", r.partition))?
                .clone();
            let mut msg = PublishMessage::build().payload(r.value);
            if let Some(key) = r.key {
                msg = msg.header("k", key.as_str());
            }
            acks.push(
                self.js
                    .send_publish(subject, msg)
                    .await
                    .context("publishing")?,
            );
        }
        for ack in acks {
            ack.await.context("waiting for a publish ack")?;
        }
        Ok(())
    }
}

/// A consume-workload consumer: one fetch (a no-wait pull request) at a time.
#[derive(Debug)]
struct Fetcher {
    consumers: Vec<(u32, PullConsumer)>,
}

impl Reader for Fetcher {
    async fn fetch(&mut self, partition: u32, max: usize) -> anyhow::Result<usize> {
        let consumer = self
            .consumers
            .iter()
            .find(|(p, _)| *p == partition)
            .map(|(_, c)| c)
            .ok_or_else(|| anyhow::anyhow!("this consumer does not read {partition}"))?;
        let mut batch = consumer
            .fetch()
            .max_messages(max)
            .messages()
            .await
            .with_context(|| format!("fetching from partition {partition}"))?;
        let mut n = 0;
        while let Some(msg) = batch.next().await {
            msg.map_err(|e| anyhow::anyhow!("fetching from partition {partition}: {e}"))?;
            n += 1;
        }
        Ok(n)
    }
}

/// An e2e consumer: the continuous pulls of its partitions, merged.
struct Puller {
    messages: SelectAll<Pin<Box<PullStream>>>,
    batch: usize,
}

impl std::fmt::Debug for Puller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Puller")
            .field("partitions", &self.messages.len())
            .field("batch", &self.batch)
            .finish()
    }
}

impl Puller {
    fn push(stamps: &mut Vec<u64>, msg: &jetstream::Message) -> anyhow::Result<()> {
        let stamp = stamp_of(&msg.payload)
            .ok_or_else(|| anyhow::anyhow!("a value of {} bytes", msg.payload.len()))?;
        stamps.push(stamp);
        Ok(())
    }
}

impl Follower for Puller {
    async fn poll(&mut self, stamps: &mut Vec<u64>) -> anyhow::Result<()> {
        let first = match tokio::time::timeout(FOLLOW_WAIT, self.messages.next()).await {
            Err(_elapsed) => return Ok(()),
            Ok(None) => anyhow::bail!("the pull consumers ended"),
            Ok(Some(msg)) => msg.map_err(|e| anyhow::anyhow!("pulling messages: {e}"))?,
        };
        Self::push(stamps, &first)?;
        // Then whatever else has already arrived, up to a batch.
        while stamps.len() < self.batch {
            match self.messages.next().now_or_never() {
                Some(Some(msg)) => {
                    let msg = msg.map_err(|e| anyhow::anyhow!("pulling messages: {e}"))?;
                    Self::push(stamps, &msg)?;
                }
                Some(None) | None => break,
            }
        }
        Ok(())
    }
}
