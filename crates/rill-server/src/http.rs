//! One connection of the HTTP port: on a TLS port the rustls acceptance of `tls.rs`
//! first (plain HTTP there is told to use `https://`), then `rill-http`'s application
//! serves the stream with hyper, under its bounds (docs/HTTP_API.md §1).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rill_http::HttpApp;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::tls::{Accepted, Tls};

/// How long the refusal of a plaintext client on a TLS port may take to write.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(5);

/// What a plaintext client on the TLS port is told before the close.
const TLS_REQUIRED: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 38\r\nConnection: close\r\n\r\nthis port requires TLS; use https://\r\n";

/// Serves one HTTP connection until it ends.
pub(crate) async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    app: HttpApp,
    tls: Option<Arc<Tls>>,
) {
    let Some(tls) = tls else {
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        app.serve_connection(socket, peer).await;
        return;
    };
    match crate::tls::accept(&tls, socket, peer).await {
        Accepted::Tls(stream, _) => app.serve_connection(*stream, peer).await,
        Accepted::Plaintext(mut socket) => {
            let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
                socket.write_all(TLS_REQUIRED).await?;
                socket.shutdown().await
            })
            .await;
        }
        Accepted::Gone => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_whole_response() {
        let text = std::str::from_utf8(TLS_REQUIRED).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        assert!(body.contains("https://"));
    }
}
