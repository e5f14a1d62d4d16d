//! `rill serve` at its file-descriptor limit: the real binary under a low
//! `RLIMIT_NOFILE` (set by `sh`'s `ulimit`, so the test needs no `unsafe`). The server
//! must raise its soft limit to the hard one, lower its connection limit to what the
//! descriptors allow so that clients over it get `BUSY`, and, when the broker's files
//! eat the rest, still answer `BUSY` and `/health` through its spare descriptors.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::rill_bin;

/// Long enough never to fire on a loaded machine; short enough that a hang fails.
const PATIENCE: Duration = Duration::from_secs(20);
const SOFT_LIMIT: u64 = 64;
const HARD_LIMIT: u64 = 128;
const FILES_RESERVED: u64 = 16;
/// Kinds of docs/PROTOCOL.md §3.
const LIST_STREAMS: u16 = 4;
const CREATE_TOPIC: u16 = 5;
const FLAG_ERROR: u8 = 1 << 1;

struct Server {
    child: Child,
    addr: String,
    http: String,
    /// Log lines up to "rill listening on".
    log: Vec<String>,
}

impl Server {
    fn start(data: &std::path::Path) -> Server {
        let script =
            format!("ulimit -S -n {SOFT_LIMIT} && ulimit -H -n {HARD_LIMIT} && exec \"$0\" \"$@\"");
        let mut child = Command::new("sh")
            .args(["-c", &script, rill_bin(), "serve"])
            .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data"])
            .arg(data)
            .env("RILL_LOG", "info")
            .env("RILL_FILES_RESERVED", FILES_RESERVED.to_string())
            .env_remove("RILL_CONFIG")
            .env_remove("RILL_MAX_CONNECTIONS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rill serve under sh");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sent {
                    // Keep draining so the server never blocks on a full pipe.
                    continue;
                }
                if line.starts_with("rill listening on ") {
                    let _ = tx.send((line, std::mem::take(&mut log)));
                    sent = true;
                } else {
                    log.push(line);
                }
            }
            if !sent {
                let _ = tx.send((String::new(), log));
            }
        });
        let (line, log) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("rill serve reports its address or exits");
        assert!(
            !line.is_empty(),
            "rill serve did not start:\n{}",
            log.join("\n")
        );
        let rest = line.trim_start_matches("rill listening on ");
        let (addr, http) = rest.split_once(" (http ").unwrap();
        Server {
            child,
            addr: addr.to_owned(),
            http: http.trim_end_matches(')').to_owned(),
            log,
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream
    }

    /// One HTTP exchange: status and body.
    fn get(&self, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.http).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: rill\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, body.to_owned())
    }

    fn metric(&self, name: &str) -> u64 {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200);
        let prefix = format!("{name} ");
        body.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
            .parse()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn frame(kind: u16, correlation_id: u64, control: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(16 + control.len() as u32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&[1, 0]); // version 1, no flags
    out.extend_from_slice(&correlation_id.to_le_bytes());
    out.extend_from_slice(&(control.len() as u32).to_le_bytes());
    out.extend_from_slice(control);
    out
}

/// `CreateTopicRequest { stream: "fd", topic, options: { partitions: 1 },
/// create_stream: true }`, encoded by hand.
fn create_topic(topic: &str) -> Vec<u8> {
    let mut control = vec![0x0a, 2, b'f', b'd', 0x12, topic.len() as u8];
    control.extend_from_slice(topic.as_bytes());
    control.extend_from_slice(&[0x1a, 2, 0x08, 1, 0x28, 1]);
    control
}

#[derive(Debug)]
struct Reply {
    correlation_id: u64,
    error: bool,
    /// The control part, as text where it is (error messages are).
    text: String,
}

/// The next response frame; `None` if the server closed the connection first.
fn recv(stream: &mut TcpStream) -> Option<Reply> {
    let mut length = [0; 4];
    stream.read_exact(&mut length).ok()?;
    let mut rest = vec![0; u32::from_le_bytes(length) as usize];
    stream.read_exact(&mut rest).ok()?;
    Some(Reply {
        correlation_id: u64::from_le_bytes(rest[4..12].try_into().unwrap()),
        error: rest[3] & FLAG_ERROR != 0,
        text: String::from_utf8_lossy(&rest[16..]).into_owned(),
    })
}

/// Sends a request and returns the answer.
fn call(stream: &mut TcpStream, kind: u16, correlation_id: u64, control: &[u8]) -> Reply {
    stream
        .write_all(&frame(kind, correlation_id, control))
        .unwrap();
    recv(stream).expect("an answer")
}

/// A new connection: `Ok` with it if the server serves it, `Err` with the `BUSY`
/// frame's text if it refuses it. Either way it answers: it never leaves it hanging.
fn open(server: &Server) -> Result<TcpStream, String> {
    let mut stream = server.connect();
    // A refused connection may be closed before the request arrives; the BUSY frame
    // is read all the same.
    let _ = stream.write_all(&frame(LIST_STREAMS, 1, &[]));
    let reply = recv(&mut stream).expect("the server answers a new connection");
    if reply.correlation_id == 0 {
        assert!(reply.error, "{reply:?}");
        return Err(reply.text);
    }
    assert!(!reply.error, "{reply:?}");
    Ok(stream)
}

#[test]
fn at_the_descriptor_limit_clients_get_busy_and_health_answers() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());

    // The soft limit was raised to the hard one.
    let raised = server
        .log
        .iter()
        .find(|l| l.contains("raised the open-files limit"))
        .unwrap_or_else(|| panic!("no raise logged:\n{}", server.log.join("\n")));
    assert!(
        raised.contains(&format!("before={SOFT_LIMIT}"))
            && raised.contains(&format!("after={HARD_LIMIT}")),
        "{raised}"
    );
    // The connection limit is what 128 descriptors leave, far below the default 1024.
    let limit = server.metric("rill_connections_max");
    assert!(
        (1..=HARD_LIMIT - 64 - FILES_RESERVED).contains(&limit),
        "rill_connections_max {limit}"
    );

    // Connections up to the limit are served; the next one is told BUSY.
    let mut open_ones = Vec::new();
    let refusal = loop {
        assert!(open_ones.len() as u64 <= limit, "the limit is not enforced");
        match open(&server) {
            Ok(stream) => open_ones.push(stream),
            Err(text) => break text,
        }
    };
    assert_eq!(open_ones.len() as u64, limit);
    assert!(refusal.contains("connections open"), "{refusal}");
    assert_eq!(server.get("/health"), (200, "ok\n".to_owned()));
    for stream in [0, open_ones.len() - 1] {
        assert!(!call(&mut open_ones[stream], LIST_STREAMS, 2, &[]).error);
    }

    // Now the broker's files take the descriptors the connections left: topics until
    // one cannot be created.
    let mut first = open_ones.swap_remove(0);
    drop(open_ones);
    let mut created = 0;
    let failed = (0..200).find_map(|i| {
        let reply = call(
            &mut first,
            CREATE_TOPIC,
            100 + i,
            &create_topic(&format!("t{i}")),
        );
        if reply.error {
            Some(reply.text)
        } else {
            created += 1;
            None
        }
    });
    let failed = failed.expect("the descriptors run out");
    assert!(created > 0, "{failed}");
    eprintln!("limit {limit}; {created} topics created, then: {failed}");

    // Out of descriptors, a new client still gets an answer: BUSY, through the spare.
    // The failed create gave back the few files it had opened, so hold connections
    // until those are gone too (far fewer than the connection limit).
    let mut held = Vec::new();
    let refusal = (0..limit + 1)
        .find_map(|_| match open(&server) {
            Ok(stream) => {
                held.push(stream);
                None
            }
            Err(text) => Some(text),
        })
        .expect("a connection is refused once the descriptors are gone");
    assert!(refusal.contains("file descriptors"), "{refusal}");
    // The admin endpoint answers too, through its own spare, and so does /metrics.
    assert_eq!(server.get("/health"), (200, "ok\n".to_owned()));
    assert!(server.metric("rill_accept_out_of_fds_total") >= 1);
    // The connection that was open all along is still served.
    assert!(!call(&mut first, LIST_STREAMS, 999, &[]).error);
}
