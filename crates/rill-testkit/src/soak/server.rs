//! The real `rill serve` as a child process on a fixed port, so a restarted server is
//! found by the same clients, killed with SIGKILL and started again on its data.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::SoakError;

/// How long one start may take to print its "listening" line.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long starts are retried (a port briefly held elsewhere, say).
const START_DEADLINE: Duration = Duration::from_secs(20);
/// How long a SIGTERM may take to end the server.
const TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `rill serve`; killed when dropped. Its log (level `info`: joins, leaves,
/// expiries, recoveries) goes to `log`, appended over every start; errors are also
/// shown on stderr (warnings are not: every restart warns of the torn tail it cut).
#[derive(Debug)]
pub(crate) struct Server {
    child: Option<Child>,
    rill: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    /// Arguments after `serve`'s own (`--node-id`, `--peers` of a cluster node).
    extra: Vec<String>,
    /// Its name in what is shown on stderr (`server`, `node 2`).
    name: String,
    starts: u32,
    paused: bool,
}

impl Server {
    /// Starts `rill serve` on `127.0.0.1:port` with its data in `data` and waits until it
    /// listens.
    pub(crate) fn start(
        rill: &Path,
        data: &Path,
        log: &Path,
        port: u16,
    ) -> Result<Self, SoakError> {
        let mut server = Self::new(rill, data, log, port, Vec::new(), "server");
        server.start_again()?;
        Ok(server)
    }

    /// A server not started yet (see [`Server::start_again`]) that runs `rill serve`
    /// with `extra` after its data and addresses; `name` labels what it shows.
    pub(crate) fn new(
        rill: &Path,
        data: &Path,
        log: &Path,
        port: u16,
        extra: Vec<String>,
        name: &str,
    ) -> Self {
        Self {
            child: None,
            rill: rill.to_path_buf(),
            data: data.to_path_buf(),
            log: log.to_path_buf(),
            port,
            extra,
            name: name.to_owned(),
            starts: 0,
            paused: false,
        }
    }

    /// Whether the process runs (it may be paused).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process is stopped with SIGSTOP.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// SIGSTOP: the process stays, and does nothing (a long GC pause, a VM migration).
    pub(crate) fn pause(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-STOP", &child.id().to_string()])
                .status();
            self.paused = true;
        }
    }

    /// SIGCONT after [`Server::pause`].
    pub(crate) fn resume(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.paused = false;
    }

    /// The client URL.
    pub(crate) fn url(&self) -> String {
        format!("rill://127.0.0.1:{}", self.port)
    }

    /// Starts the server again (after [`Server::kill9`]) on the same port and data;
    /// returns how long it took to listen.
    pub(crate) fn start_again(&mut self) -> Result<Duration, SoakError> {
        assert!(self.child.is_none(), "the server is already running");
        let started = Instant::now();
        loop {
            match self.try_start() {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(started.elapsed());
                }
                Err(reason) if started.elapsed() < START_DEADLINE => {
                    eprintln!(
                        "[{}] rill serve did not start ({reason}); retrying",
                        self.name
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(reason) => {
                    return Err(SoakError::ServerStart {
                        port: self.port,
                        reason,
                    });
                }
            }
        }
    }

    fn try_start(&mut self) -> Result<Child, String> {
        self.starts += 1;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("cannot open {}: {e}", self.log.display()))?;
        let _ = writeln!(log, "--- start {}", self.starts);
        let mut child = Command::new(&self.rill)
            .arg("serve")
            .arg("--data")
            .arg(&self.data)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            // The admin endpoint cannot be turned off; a port of the OS's choosing keeps
            // it out of the way.
            .args(["--http", "127.0.0.1:0"])
            .args(&self.extra)
            .env("RILL_LOG", "info,openraft=warn")
            .env("NO_COLOR", "1")
            .env_remove("RILL_CONFIG")
            .env_remove("RILL_DATA")
            .env_remove("RILL_LISTEN")
            .env_remove("RILL_HTTP")
            .env_remove("RILL_DEFAULT_DURABILITY")
            .env_remove("RILL_NODE_ID")
            .env_remove("RILL_PEERS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.rill.display()))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        let name = self.name.clone();
        std::thread::spawn(move || {
            let mut listening = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // Keep draining: a full pipe would block the server.
                let _ = writeln!(log, "{line}");
                if line.starts_with("rill listening on ")
                    && let Some(tx) = listening.take()
                {
                    let _ = tx.send(());
                } else if line.contains("ERROR") {
                    eprintln!("[{name}] {line}");
                }
            }
        });
        match rx.recv_timeout(LISTEN_TIMEOUT) {
            Ok(()) => Ok(child),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(format!("it ended ({status}) without listening"))
            }
        }
    }

    /// SIGKILL, and wait until the process is gone (and its data-directory lock).
    pub(crate) fn kill9(&mut self) {
        self.paused = false;
        if let Some(mut child) = self.child.take() {
            // `kill` is SIGKILL on Unix; the server is one process (its threads die
            // with it), and a stopped one dies too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait for the clean exit it promises; returns the exit code (`None`:
    /// it did not exit in time and was killed, or died of a signal).
    pub(crate) fn terminate(&mut self) -> Option<i32> {
        if self.paused {
            self.resume();
        }
        let mut child = self.child.take()?;
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + TERMINATE_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A port of 127.0.0.1 for a server to bind ([`crate::ports`]).
pub(crate) fn free_port() -> Result<u16, SoakError> {
    crate::ports::free_port().map_err(|source| SoakError::Io {
        what: "choose a free port".into(),
        source,
    })
}
