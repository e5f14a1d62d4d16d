//! Redis Streams driver: XADD pipelines, XREADGROUP readers, AOF durability.
//!
//! Each run starts its own `redis-server` on a free port of 127.0.0.1 with a fresh data
//! directory, AOF on (`appendfsync everysec` or `always`) and RDB snapshots off.
//! Partition `p` is the stream `bench:p`. Every producer and consumer has its own
//! connection (a [`MultiplexedConnection`] used by one task only, so one request is in
//! flight on it at a time):
//!
//! - a producer request is one pipeline of `XADD bench:p * [k KEY] v VALUE`, written at
//!   once and answered in one go;
//! - consumers read with `XREADGROUP GROUP g cN COUNT batch NOACK STREAMS ...`, from a
//!   group created at `0` after the fill (consume) or at `$` before any producer sends
//!   (e2e, with `BLOCK 500`).

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use crate::drive::{self, FOLLOW_WAIT, Follower, Peer, Reader, Record, STALL, Sender};
use crate::measure::{RunResult, stamp_of};
use crate::servers::{ServerProcess, find_program, free_port};
use crate::workload::{Durability, Workload};

/// The consumer group every consumer belongs to.
const GROUP: &str = "g";

/// How long the server has to start accepting connections.
const STARTUP: Duration = Duration::from_secs(20);

/// The AOF setting a durability class runs with.
pub(crate) fn setting(durability: Durability) -> String {
    match durability {
        Durability::Buffered => "AOF appendfsync everysec".into(),
        Durability::Fsync => "AOF appendfsync always".into(),
    }
}

/// `appendfsync`'s value for a durability class.
fn appendfsync(durability: Durability) -> &'static str {
    match durability {
        Durability::Buffered => "everysec",
        Durability::Fsync => "always",
    }
}

pub(crate) async fn run(workload: &Workload) -> anyhow::Result<RunResult> {
    let program = find_program("redis-server")?;
    let dir = tempfile::Builder::new()
        .prefix("rill-peers-redis-")
        .tempdir()
        .context("creating a temporary directory for redis-server")?;
    let port = free_port()?;
    let args = server_args(port, dir.path().as_os_str(), workload.durability);
    let mut server =
        ServerProcess::start_ready(&program, &args, dir, port, "redis-server", STARTUP).await?;
    let peer = Redis::connect(server.port(), workload).await?;
    let result = drive::run(&peer, workload).await;
    // A server that died explains a failed run better than the client's error.
    server.ensure_running()?;
    result.with_context(|| {
        format!(
            "redis {} ({} on port {}, data in {}, log {})",
            workload.name,
            server.name(),
            server.port(),
            server.dir().display(),
            server.log_path().display()
        )
    })
}

/// The command line: 127.0.0.1 only, in the foreground, AOF with the durability class's
/// fsync policy, no RDB snapshots.
fn server_args(port: u16, dir: &std::ffi::OsStr, durability: Durability) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--appendonly",
        "yes",
        "--appendfsync",
        appendfsync(durability),
        "--appenddirname",
        "appendonlydir",
        "--save",
        "",
        "--dir",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push(dir.to_owned());
    args
}

/// A running server and the workload's stream names.
#[derive(Debug)]
struct Redis {
    client: redis::Client,
    config: AsyncConnectionConfig,
    streams: Vec<String>,
    batch: usize,
}

impl Redis {
    async fn connect(port: u16, w: &Workload) -> anyhow::Result<Self> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .context("building the redis client")?;
        // The default response timeout (0.5 s) is shorter than a slow fsync; stalls
        // are bounded by the driver's own timeout instead.
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(STALL))
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let peer = Self {
            client,
            config,
            streams: (0..w.partitions).map(|p| format!("bench:{p}")).collect(),
            batch: w.batch,
        };
        let mut conn = peer.connection().await?;
        let pong: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .context("PING")?;
        anyhow::ensure!(pong == "PONG", "redis answered PING with {pong:?}");
        Ok(peer)
    }

    /// A new connection (its own socket).
    async fn connection(&self) -> anyhow::Result<MultiplexedConnection> {
        self.client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
            .context("connecting to redis-server")
    }

    fn stream(&self, partition: u32) -> anyhow::Result<&str> {
        self.streams
            .get(partition as usize)
            .map(String::as_str)
            .ok_or_else(|| anyhow::anyhow!("no partition {partition}"))
    }

    /// A consumer: creates the group on each of `partitions` at `from` (`0` or `$`).
    async fn consumer(&self, index: u32, partitions: &[u32], from: &str) -> anyhow::Result<Xread> {
        let mut conn = self.connection().await?;
        let mut streams = Vec::with_capacity(partitions.len());
        for &p in partitions {
            let stream = self.stream(p)?.to_owned();
            let () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&stream)
                .arg(GROUP)
                .arg(from)
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await
                .with_context(|| format!("XGROUP CREATE {stream} {GROUP} {from}"))?;
            streams.push(stream);
        }
        Ok(Xread {
            conn,
            name: format!("c{index}"),
            partitions: partitions.to_vec(),
            streams,
            batch: self.batch,
        })
    }
}

impl Peer for Redis {
    type Producer = Xadd;
    type Reader = Xread;
    type Follower = Xread;

    async fn producer(&self, _index: u32) -> anyhow::Result<Xadd> {
        Ok(Xadd {
            conn: self.connection().await?,
            streams: self.streams.clone(),
        })
    }

    async fn reader(&self, index: u32, partitions: &[u32]) -> anyhow::Result<Xread> {
        self.consumer(index, partitions, "0").await
    }

    async fn follower(&self, index: u32, partitions: &[u32]) -> anyhow::Result<Xread> {
        self.consumer(index, partitions, "$").await
    }
}

/// A producer: pipelines of XADD.
#[derive(Debug)]
struct Xadd {
    conn: MultiplexedConnection,
    streams: Vec<String>,
}

impl Sender for Xadd {
    async fn send(&mut self, records: Vec<Record>) -> anyhow::Result<()> {
        let mut pipe = redis::pipe();
        for r in &records {
            let stream = self
                .streams
                .get(r.partition as usize)
                .ok_or_else(|| anyhow::anyhow!("no partition {}", r.partition))?;
            pipe.cmd("XADD").arg(stream).arg("*");
            if let Some(key) = &r.key {
                pipe.arg("k").arg(key.as_bytes());
            }
            pipe.arg("v").arg(&r.value[..]);
        }
        // One write of the whole pipeline, then its replies; an error reply fails it.
        let ids: Vec<Value> = pipe
            .query_async(&mut self.conn)
            .await
            .context("XADD pipeline")?;
        anyhow::ensure!(
            ids.len() == records.len(),
            "{} XADDs answered with {} replies",
            records.len(),
            ids.len()
        );
        Ok(())
    }
}

/// A consumer: XREADGROUP on its partitions' streams.
#[derive(Debug)]
struct Xread {
    conn: MultiplexedConnection,
    /// Consumer name within the group.
    name: String,
    /// The partitions it reads, and their streams (same order).
    partitions: Vec<u32>,
    streams: Vec<String>,
    batch: usize,
}

/// `XREADGROUP GROUP g NAME COUNT count [BLOCK ms] NOACK STREAMS s... >...`.
async fn xreadgroup(
    conn: &mut MultiplexedConnection,
    name: &str,
    streams: &[String],
    count: usize,
    block: Option<Duration>,
) -> anyhow::Result<Value> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(GROUP)
        .arg(name)
        .arg("COUNT")
        .arg(count);
    if let Some(block) = block {
        cmd.arg("BLOCK")
            .arg(u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1));
    }
    cmd.arg("NOACK").arg("STREAMS").arg(streams);
    for _ in streams {
        cmd.arg(">");
    }
    cmd.query_async(conn)
        .await
        .with_context(|| format!("XREADGROUP on {}", streams.join(" ")))
}

impl Reader for Xread {
    async fn fetch(&mut self, partition: u32, max: usize) -> anyhow::Result<usize> {
        let i = self
            .partitions
            .iter()
            .position(|&p| p == partition)
            .ok_or_else(|| anyhow::anyhow!("consumer {} does not read {partition}", self.name))?;
        let stream = std::slice::from_ref(&self.streams[i]);
        let reply = xreadgroup(&mut self.conn, &self.name, stream, max, None).await?;
        for_each_value(&reply, |_| Ok(()))
    }
}

impl Follower for Xread {
    async fn poll(&mut self, stamps: &mut Vec<u64>) -> anyhow::Result<()> {
        let reply = xreadgroup(
            &mut self.conn,
            &self.name,
            &self.streams,
            self.batch,
            Some(FOLLOW_WAIT),
        )
        .await?;
        for_each_value(&reply, |v| {
            let stamp =
                stamp_of(v).ok_or_else(|| anyhow::anyhow!("a value of {} bytes", v.len()))?;
            stamps.push(stamp);
            Ok(())
        })?;
        Ok(())
    }
}

/// Calls `f` with the `v` field of each entry of an XREAD(GROUP) reply and returns how
/// many entries there were. Accepts RESP2 (an array of `[stream, entries]`) and RESP3 (a
/// map from stream to entries); nil (a BLOCK timeout) has none.
fn for_each_value(
    reply: &Value,
    mut f: impl FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    let per_stream: Vec<&Value> = match reply {
        Value::Nil => return Ok(0),
        Value::Array(streams) => streams
            .iter()
            .map(|s| match s {
                Value::Array(pair) if pair.len() == 2 => Ok(&pair[1]),
                other => Err(anyhow::anyhow!(
                    "unexpected stream in XREADGROUP reply: {other:?}"
                )),
            })
            .collect::<anyhow::Result<_>>()?,
        Value::Map(streams) => streams.iter().map(|(_, entries)| entries).collect(),
        other => anyhow::bail!("unexpected XREADGROUP reply: {other:?}"),
    };
    let mut count = 0;
    for entries in per_stream {
        let Value::Array(entries) = entries else {
            anyhow::bail!("unexpected entries in XREADGROUP reply: {entries:?}");
        };
        for entry in entries {
            let fields = match entry {
                Value::Array(id_fields) if id_fields.len() == 2 => &id_fields[1],
                other => anyhow::bail!("unexpected entry in XREADGROUP reply: {other:?}"),
            };
            let value = match fields {
                Value::Array(kv) => kv.chunks_exact(2).find_map(|pair| match pair {
                    [Value::BulkString(k), Value::BulkString(v)] if k == b"v" => Some(v),
                    _ => None,
                }),
                Value::Map(kv) => kv.iter().find_map(|pair| match pair {
                    (Value::BulkString(k), Value::BulkString(v)) if k == b"v" => Some(v),
                    _ => None,
                }),
                _ => None,
            };
            let value =
                value.ok_or_else(|| anyhow::anyhow!("an entry without a v field: {fields:?}"))?;
            f(value)?;
            count += 1;
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    fn entry(id: &[u8], fields: &[&[u8]]) -> Value {
        Value::Array(vec![
            bulk(id),
            Value::Array(fields.iter().map(|f| bulk(f)).collect()),
        ])
    }

    #[test]
    fn parses_xreadgroup_replies() {
        let stamp = 42u64.to_le_bytes();
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk(b"bench:0"),
                Value::Array(vec![
                    entry(b"1-0", &[b"v", &stamp]),
                    entry(b"1-1", &[b"k", b"k00001", b"v", &stamp]),
                ]),
            ]),
            Value::Array(vec![
                bulk(b"bench:2"),
                Value::Array(vec![entry(b"2-0", &[b"v", b"12345678xyz"])]),
            ]),
        ]);
        let mut stamps = Vec::new();
        let n = for_each_value(&reply, |v| {
            stamps.push(stamp_of(v).unwrap());
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(stamps[..2], [42, 42]);
        assert_eq!(for_each_value(&Value::Nil, |_| Ok(())).unwrap(), 0);
        let resp3 = Value::Map(vec![(
            bulk(b"bench:0"),
            Value::Array(vec![entry(b"1-0", &[b"v", b"x"])]),
        )]);
        assert_eq!(for_each_value(&resp3, |_| Ok(())).unwrap(), 1);
        let bad = Value::Array(vec![Value::Array(vec![
            bulk(b"bench:0"),
            Value::Array(vec![entry(b"1-0", &[b"k", b"x"])]),
        ])]);
        assert!(for_each_value(&bad, |_| Ok(())).is_err());
    }

    #[test]
    fn command_line_binds_localhost_with_aof() {
        let args = server_args(7000, std::ffi::OsStr::new("/tmp/x"), Durability::Fsync);
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        let after = |flag: &str| {
            let i = args.iter().position(|a| *a == flag).unwrap();
            args[i + 1]
        };
        assert_eq!(after("--port"), "7000");
        assert_eq!(after("--bind"), "127.0.0.1");
        assert_eq!(after("--appendonly"), "yes");
        assert_eq!(after("--appendfsync"), "always");
        assert_eq!(after("--save"), "");
        assert_eq!(after("--dir"), "/tmp/x");
    }
}
