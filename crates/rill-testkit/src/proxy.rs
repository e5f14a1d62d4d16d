//! A fault proxy for one directed link between two nodes (docs/REPLICATION.md §12): it
//! listens on loopback and forwards each connection to its target, and a test can
//! switch it, at any moment, to pass traffic, to cut the link (close every connection
//! and refuse new ones), or to black-hole it (connections stay open and no byte moves,
//! as on a link that delivers nothing; what waits goes on if the link passes again).

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the link does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// Bytes pass both ways.
    Pass,
    /// Every connection is closed, and new ones are closed at once.
    Cut,
    /// Connections stay open and no byte moves.
    Blackhole,
}

/// A running proxy; dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<LinkMode>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// A proxy on a free loopback port that forwards to `target`.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, watching) = watch::channel(LinkMode::Pass);
        let task = tokio::spawn(accept(listener, target, watching));
        Ok(Self { addr, mode, task })
    }

    /// Where clients of the link connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the link.
    pub fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    /// What the link does now.
    pub fn mode(&self) -> LinkMode {
        *self.mode.borrow()
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, mode: watch::Receiver<LinkMode>) {
    // The connections belong to the accept loop: aborting it closes them.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if *mode.borrow() == LinkMode::Cut {
                    drop(client);
                    continue;
                }
                connections.spawn(relay(client, target, mode.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Relays one connection until either side closes or the link is cut.
async fn relay(client: TcpStream, target: SocketAddr, mut mode: watch::Receiver<LinkMode>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, mode.clone());
    let down = pump(sr, cw, mode.clone());
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = mode.wait_for(|m| *m == LinkMode::Cut) => {}
    }
}

/// Copies bytes from `from` to `to` while the link passes; while it is black-holed the
/// bytes read wait (as TCP holds them on a link that delivers nothing), and they go on
/// if the link passes again.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<LinkMode>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let now = *mode
            .wait_for(|m| *m != LinkMode::Blackhole)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the proxy stopped"))?;
        if now == LinkMode::Cut {
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
    }
}
