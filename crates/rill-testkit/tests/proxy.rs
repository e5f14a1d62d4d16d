//! The fault proxy against an echo server: it passes bytes, holds them while
//! black-holed and delivers them when the link passes again, and a cut closes every
//! connection and refuses new ones until the link passes.

use std::time::Duration;

use rill_testkit::proxy::{FaultProxy, LinkMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn echo(c: &mut TcpStream, bytes: &[u8], within: Duration) -> Option<Vec<u8>> {
    c.write_all(bytes).await.ok()?;
    let mut got = vec![0u8; bytes.len()];
    tokio::time::timeout(within, c.read_exact(&mut got))
        .await
        .ok()?
        .ok()?;
    Some(got)
}

#[tokio::test]
async fn a_link_passes_holds_while_black_holed_and_is_cut() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(
        echo(&mut c, b"one", Duration::from_secs(5))
            .await
            .as_deref(),
        Some(&b"one"[..])
    );

    proxy.set(LinkMode::Blackhole);
    c.write_all(b"two").await.unwrap();
    let mut got = [0u8; 3];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut got))
            .await
            .is_err(),
        "nothing moves while black-holed"
    );
    proxy.set(LinkMode::Pass);
    tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut got))
        .await
        .expect("what waited is delivered")
        .unwrap();
    assert_eq!(&got, b"two");

    proxy.set(LinkMode::Cut);
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest))
        .await
        .expect("the connection is closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(
        echo(&mut fresh, b"x", Duration::from_millis(500)).await,
        None,
        "refused while cut"
    );

    proxy.set(LinkMode::Pass);
    let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(
        echo(&mut again, b"three", Duration::from_secs(5))
            .await
            .as_deref(),
        Some(&b"three"[..])
    );
}
