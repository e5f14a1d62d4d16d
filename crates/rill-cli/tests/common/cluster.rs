//! Three real `rill serve --node-id --peers` processes on loopback (docs/REPLICATION.md).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, rill_bin};

/// One node: a `rill serve` process with fixed ports; killed when dropped.
pub struct Node {
    pub id: u64,
    pub data: PathBuf,
    pub client_port: u16,
    pub peers: String,
    pub child: Option<Child>,
    /// The HTTP admin address of the running process.
    pub http: String,
    /// A settings file (`RILL_CONFIG`).
    pub config: Option<PathBuf>,
    /// More environment for the process.
    pub env: Vec<(String, String)>,
}

impl Node {
    pub fn start(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut child = Command::new(rill_bin())
                .arg("serve")
                .arg("--data")
                .arg(&self.data)
                .args(["--listen", &format!("127.0.0.1:{}", self.client_port)])
                .args(["--http", "127.0.0.1:0"])
                .args(["--node-id", &self.id.to_string()])
                .args(["--peers", &self.peers])
                .env(
                    "RILL_LOG",
                    std::env::var("RILL_TEST_NODE_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .env_remove("RILL_SERVER")
                .env_remove("RILL_CONFIG")
                .env_remove("RILL_ADMIN_PASSWORD")
                .envs(self.config.iter().map(|c| ("RILL_CONFIG", c)))
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn rill serve");
            let stderr = child.stderr.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let id = self.id;
            std::thread::spawn(move || {
                let mut sent = false;
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if !sent && line.starts_with("rill listening on ") {
                        // "rill listening on ADDR (http ADDR)"
                        let http = line
                            .split_once("(http ")
                            .map(|(_, h)| h.trim_end_matches(')').to_owned())
                            .unwrap_or_default();
                        let _ = tx.send(http);
                        sent = true;
                    } else if !line.starts_with("rill node ") {
                        eprintln!("[node {id}] {line}");
                    }
                }
            });
            if let Ok(http) = rx.recv_timeout(Duration::from_secs(30)) {
                self.child = Some(child);
                self.http = http;
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
            assert!(Instant::now() < deadline, "node {} did not start", self.id);
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn cluster(dir: &Path) -> (Vec<Node>, String) {
    let peer_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = peer_ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let nodes: Vec<Node> = (1..=3u64)
        .map(|id| Node {
            id,
            data: dir.join(format!("n{id}")),
            client_port: free_port(),
            peers: peers.clone(),
            child: None,
            http: String::new(),
            config: None,
            env: Vec::new(),
        })
        .collect();
    let url = format!(
        "rill://{}",
        nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    );
    (nodes, url)
}

pub fn rill(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(rill_bin())
        .args(["--server", url])
        .args(args)
        .env("RILL_LOG", "warn")
        .output()
        .expect("run rill")
}

/// `rill cluster status --json`, asked until `done` holds (at most 20 s).
pub fn wait_status(url: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = rill(url, &["cluster", "status", "--json"]);
        if out.status.success() {
            let status: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("cluster status prints JSON");
            if done(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "cluster status never became {status}"
            );
        } else {
            assert!(
                Instant::now() < deadline,
                "cluster status failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
