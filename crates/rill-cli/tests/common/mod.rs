//! Starts the real `rill` binary as a server on free ports in a temp directory.
#![allow(dead_code, unreachable_pub)]

pub mod cluster;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn rill_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rill")
}

/// A `rill serve` child process; killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub addr: String,
    pub http: String,
    pub data: PathBuf,
}

impl ServerProcess {
    /// Starts `rill serve` on `data` with ports chosen by the OS.
    pub fn start(data: &Path) -> Self {
        let mut child = Command::new(rill_bin())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--data",
            ])
            .arg(data)
            .env("RILL_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rill serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && line.starts_with("rill listening on ") {
                    let _ = tx.send(line.clone());
                    sent = true;
                }
                // Keep draining so the server never blocks on a full pipe.
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("rill serve did not report its address");
        // "rill listening on 127.0.0.1:PORT (http 127.0.0.1:PORT)"
        let rest = line.trim_start_matches("rill listening on ");
        let (addr, http) = rest.split_once(" (http ").unwrap();
        Self {
            child,
            addr: addr.to_owned(),
            http: http.trim_end_matches(')').to_owned(),
            data: data.to_path_buf(),
        }
    }

    pub fn url(&self) -> String {
        format!("rill://{}", self.addr)
    }

    /// SIGKILL, no cleanup.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit; returns the exit status code.
    pub fn terminate(&mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                self.kill9();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `rill serve` on a fixed port, so a restarted server is found by the same client.
pub struct FixedServer {
    child: Child,
}

impl FixedServer {
    /// Starts `rill serve` on `127.0.0.1:port` and waits until it listens. Retries a
    /// start that fails (say the port is briefly unavailable) for up to 20 s.
    pub fn start(data: &Path, port: u16) -> Self {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match Self::try_start(data, port) {
                Ok(server) => return server,
                Err(why) if Instant::now() < deadline => {
                    eprintln!("[server] start failed ({why}); retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(why) => panic!("rill serve did not start on port {port}: {why}"),
            }
        }
    }

    fn try_start(data: &Path, port: u16) -> Result<Self, String> {
        let mut child = Command::new(rill_bin())
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--http", "127.0.0.1:0"])
            .env("RILL_LOG", "warn")
            .env_remove("RILL_SERVER")
            .env_remove("RILL_LISTEN")
            .env_remove("RILL_HTTP")
            .env_remove("RILL_CONFIG")
            .env_remove("RILL_DATA")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && line.starts_with("rill listening on ") {
                    let _ = tx.send(line);
                    sent = true;
                } else {
                    // Keep draining (a full pipe would block the server) and show it.
                    eprintln!("[server] {line}");
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(_) => Ok(Self { child }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(format!("it exited ({status}) without listening"))
            }
        }
    }

    /// SIGKILL, and wait until the process is gone (its data-directory lock with it).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for FixedServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A port for a server to bind, that no other test holds (`rill_testkit::ports`).
pub fn free_port() -> u16 {
    rill_testkit::ports::free_port().expect("choose a free port")
}

/// A client and what keeps its broker alive.
pub struct Harness {
    pub client: rill_client::Client,
    pub _server: Option<ServerProcess>,
    pub _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn tcp() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = ServerProcess::start(&dir.path().join("data"));
        let client = rill_client::Client::connect(&server.url()).await.unwrap();
        Self {
            client,
            _server: Some(server),
            _dir: dir,
        }
    }

    pub async fn embedded() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let client = rill_client::Client::open(dir.path().join("data"))
            .await
            .unwrap();
        Self {
            client,
            _server: None,
            _dir: dir,
        }
    }
}

/// Runs each named `async fn(&Client)` of the calling test file twice: against the real
/// `rill` binary on a free port (`tcp::NAME`) and embedded (`embedded::NAME`).
#[allow(unused_macros)]
macro_rules! over_both_transports {
    ($($name:ident),* $(,)?) => {
        mod tcp {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = $crate::common::Harness::tcp().await;
                    super::$name(&h.client).await;
                }
            )*
        }
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = $crate::common::Harness::embedded().await;
                    super::$name(&h.client).await;
                    h.client.close().await.unwrap();
                }
            )*
        }
    };
}

/// This test binary run again as a child process, running only the ignored test `test`,
/// which reads what to do from the environment variable `env`. The lines it prints
/// after `prefix` (libtest's `test NAME ... ` may come first on a line) arrive in order.
/// Killed (SIGKILL) when dropped.
pub struct ChildTest {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildTest {
    pub fn spawn(test: &str, env: (&str, &str), prefix: &'static str) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(env.0, env.1)
            .env("RILL_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child test process");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find(prefix)
                    && tx
                        .send(line[at + prefix.len()..].trim().to_owned())
                        .is_err()
                {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line after the prefix, or `None` if the child printed none for `quiet`.
    pub fn line(&self, quiet: Duration) -> Option<String> {
        self.lines.recv_timeout(quiet).ok()
    }

    /// SIGKILL, then wait for the process.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildTest {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The raw answer (status line, headers, body) of `GET path` on an HTTP address.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// A `rill serve` with extra arguments and environment; its whole stderr is kept.
pub struct Served {
    pub child: Child,
    pub addr: String,
    pub http: String,
    pub log: Arc<Mutex<String>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn serve(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
    let mut cmd = Command::new(rill_bin());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--data",
    ])
    .arg(data)
    .args(args)
    .env("RILL_LOG", "info")
    .env_remove("RILL_ADMIN_PASSWORD")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn rill serve");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let kept = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("rill listening on ") {
                let (addr, http) = rest.split_once(" (http ").unwrap();
                let _ = tx.send((addr.to_owned(), http.trim_end_matches(')').to_owned()));
            }
            let mut log = kept.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let (addr, http) = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("rill serve did not start: {}", log.lock().unwrap()));
    Served {
        child,
        addr,
        http,
        log,
    }
}

/// Runs the CLI with `input` on its stdin, with no credential or server from the
/// test's own environment.
pub fn rill_in(args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(rill_bin());
    cmd.args(args)
        .env_remove("RILL_USER")
        .env_remove("RILL_PASSWORD")
        .env_remove("RILL_TOKEN")
        .env_remove("RILL_SERVER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The stdout of a command that must have succeeded (else a failure showing both
/// streams).
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A command's stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a usage error (exit 2) whose message contains `says`.
pub fn usage_error(out: &Output, says: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "expected {says:?} in: {err}");
}

/// Asserts a runtime error (exit 1): one line on stderr, containing `says`.
pub fn runtime_error(out: &Output, says: &str) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(says), "expected {says:?} in: {err}");
    err
}

/// Every file under `dir`, at any depth.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
