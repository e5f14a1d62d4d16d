//! Three (or more) real `rill serve` processes on loopback whose node-to-node links
//! all run through fault proxies: node `i` names, in its `--peers`, its own listener
//! for itself and the proxy of the link `i -> j` for every other node `j`, so every
//! directed link can be passed, cut or black-holed on its own. Clients reach every
//! node directly (the faults are between the nodes, as in Jepsen's usual set-up).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::schedule::Fault;
use crate::proxy::{FaultProxy, LinkMode};
use crate::soak::SoakError;
use crate::soak::server::{Server, free_port};

/// The running cluster; dropping it kills every node.
#[derive(Debug)]
pub(crate) struct Cluster {
    nodes: BTreeMap<u64, Server>,
    /// The proxy of each directed link `(from, to)`.
    links: BTreeMap<(u64, u64), FaultProxy>,
    client_ports: BTreeMap<u64, u16>,
    data: BTreeMap<u64, PathBuf>,
}

impl Cluster {
    /// Starts `n` nodes with their data in `root/n{id}` (logs beside them); the proxies
    /// run on the current tokio runtime (`runtime`).
    pub(crate) fn start(
        runtime: &tokio::runtime::Runtime,
        rill: &Path,
        root: &Path,
        n: u64,
    ) -> Result<Self, SoakError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| SoakError::Io { what, source }
        };
        std::fs::create_dir_all(root).map_err(io("create the cluster's directory"))?;
        let ids: Vec<u64> = (1..=n).collect();
        let mut peer_ports = BTreeMap::new();
        let mut client_ports = BTreeMap::new();
        for &id in &ids {
            peer_ports.insert(id, free_port()?);
            client_ports.insert(id, free_port()?);
        }
        let mut links = BTreeMap::new();
        for &from in &ids {
            for &to in &ids {
                if from != to {
                    let target = ([127, 0, 0, 1], peer_ports[&to]).into();
                    let proxy = runtime
                        .block_on(FaultProxy::start(target))
                        .map_err(io("start a link's fault proxy"))?;
                    links.insert((from, to), proxy);
                }
            }
        }
        let mut nodes = BTreeMap::new();
        let mut data = BTreeMap::new();
        for &id in &ids {
            let peers = ids
                .iter()
                .map(|&j| {
                    let addr = if j == id {
                        format!("127.0.0.1:{}", peer_ports[&id])
                    } else {
                        links[&(id, j)].addr().to_string()
                    };
                    format!("{j}={addr}")
                })
                .collect::<Vec<_>>()
                .join(",");
            let dir = root.join(format!("n{id}"));
            let log = root.join(format!("n{id}.server.log"));
            let extra = vec![
                "--node-id".to_owned(),
                id.to_string(),
                "--peers".to_owned(),
                peers,
            ];
            let server = Server::new(
                rill,
                &dir,
                &log,
                client_ports[&id],
                extra,
                &format!("node {id}"),
            );
            nodes.insert(id, server);
            data.insert(id, dir);
        }
        let mut cluster = Self {
            nodes,
            links,
            client_ports,
            data,
        };
        for server in cluster.nodes.values_mut() {
            server.start_again()?;
        }
        Ok(cluster)
    }

    /// The client URL naming every node.
    pub(crate) fn url(&self) -> String {
        let addrs: Vec<String> = self
            .client_ports
            .values()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("rill://{}", addrs.join(","))
    }

    /// Node `id`'s data directory.
    pub(crate) fn data(&self, id: u64) -> &Path {
        &self.data[&id]
    }

    /// The node ids.
    pub(crate) fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// Injects `fault` (a kill leaves the node down until [`Cluster::heal`]).
    pub(crate) fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::Kill { node } => self.node(node).kill9(),
            Fault::Pause { node } => self.node(node).pause(),
            Fault::Isolate { node } => self.links_of(node, LinkMode::Cut),
            Fault::Blackhole { node } => self.links_of(node, LinkMode::Blackhole),
            Fault::Sever { a, b } => {
                self.links[&(a, b)].set(LinkMode::Cut);
                self.links[&(b, a)].set(LinkMode::Cut);
            }
            Fault::OneWay { from, to } => self.links[&(from, to)].set(LinkMode::Blackhole),
        }
    }

    /// Heals everything: every link passes, every paused node goes on, every node that
    /// is down starts again. Returns the slowest restart.
    pub(crate) fn heal(&mut self) -> Result<Duration, SoakError> {
        for link in self.links.values() {
            link.set(LinkMode::Pass);
        }
        let mut slowest = Duration::ZERO;
        for server in self.nodes.values_mut() {
            if server.is_paused() {
                server.resume();
            }
            if !server.is_running() {
                slowest = slowest.max(server.start_again()?);
            }
        }
        Ok(slowest)
    }

    /// SIGTERM to every node; returns each one's exit code (`None`: killed, or a signal).
    pub(crate) fn terminate(&mut self) -> BTreeMap<u64, Option<i32>> {
        self.nodes
            .iter_mut()
            .map(|(&id, server)| (id, server.terminate()))
            .collect()
    }

    fn node(&mut self, id: u64) -> &mut Server {
        self.nodes
            .get_mut(&id)
            .expect("the schedule names nodes of the cluster")
    }

    fn links_of(&self, node: u64, mode: LinkMode) {
        for (&(from, to), link) in &self.links {
            if from == node || to == node {
                link.set(mode);
            }
        }
    }
}
