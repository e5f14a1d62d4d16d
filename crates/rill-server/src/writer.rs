//! A connection's single writer, and the write timeout that closes a connection whose
//! client does not read.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rill_proto::EncodedFrame;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::{Instant, Sleep};

use crate::budget::Grant;

/// Capacity of the write buffer. Larger writes (most fetch payloads) bypass it.
const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// A response ready for the socket, with what its request held: the in-flight permit and
/// the budget for the response's bytes. Both are given back once it is written.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) frame: EncodedFrame,
    #[expect(
        dead_code,
        reason = "held, not read: given back when the frame is written"
    )]
    pub(crate) permit: Option<OwnedSemaphorePermit>,
    #[expect(
        dead_code,
        reason = "held, not read: given back when the frame is written"
    )]
    pub(crate) grant: Option<Grant>,
}

/// The error of a write that made no progress for the write timeout.
#[derive(Debug, thiserror::Error)]
#[error("the client read nothing for {0:?}")]
pub(crate) struct WriteStalled(Duration);

/// Whether `e` is a write timeout rather than a failed socket.
pub(crate) fn is_write_timeout(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<WriteStalled>())
}

/// The single writer: writes responses as they come, flushing only when none is waiting,
/// so a burst of pipelined responses leaves in few system calls. Fails if the socket
/// takes no byte for `timeout` while there is something to write.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    half: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    timeout: Duration,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, Deadline::new(half, timeout));
    while let Some(next) = rx.recv().await {
        write_frame(&mut out, next).await?;
        while let Ok(next) = rx.try_recv() {
            write_frame(&mut out, next).await?;
        }
        out.flush().await?;
    }
    out.shutdown().await
}

/// Writes the two parts of a frame without joining them; `BufWriter` passes a payload at
/// least as large as its buffer straight to the socket.
async fn write_frame<W: AsyncWrite + Unpin>(
    out: &mut BufWriter<Deadline<W>>,
    outgoing: Outgoing,
) -> io::Result<()> {
    out.write_all(&outgoing.frame.head).await?;
    if !outgoing.frame.payload.is_empty() {
        out.write_all(&outgoing.frame.payload).await?;
    }
    // The permit and the grant drop here: the response has left the queue (at most
    // the write buffer's 64 KiB of it is still in this process).
    Ok(())
}

/// A writer whose write, flush or shutdown fails with [`WriteStalled`] once it has
/// waited `timeout` without the inner writer taking a byte. Any progress restarts the
/// clock; an idle writer (nothing to write) never times out.
#[derive(Debug)]
struct Deadline<W> {
    inner: W,
    timeout: Duration,
    /// Armed when an operation first returns `Pending`, disarmed by any progress.
    sleep: Pin<Box<Sleep>>,
    armed: bool,
}

impl<W> Deadline<W> {
    fn new(inner: W, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            armed: false,
        }
    }

    fn track<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.armed = false;
            return polled;
        }
        if !self.armed {
            self.armed = true;
            self.sleep.as_mut().reset(Instant::now() + self.timeout);
        }
        ready!(self.sleep.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            WriteStalled(self.timeout),
        )))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Deadline<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.track(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.track(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.track(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.track(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_times_out_and_progress_restarts_the_clock() {
        // A pipe whose reader takes 10 bytes when told to.
        let (client, mut server) = tokio::io::duplex(16);
        let mut out = Deadline::new(client, Duration::from_secs(30));
        out.write_all(&[1; 16]).await.unwrap();
        // Idle for longer than the timeout: nothing was waiting, so nothing expires.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let reader = tokio::spawn(async move {
            let mut buf = [0; 10];
            tokio::time::sleep(Duration::from_secs(20)).await;
            tokio::io::AsyncReadExt::read_exact(&mut server, &mut buf)
                .await
                .unwrap();
            server
        });
        // Blocked for 20 s, then 10 bytes go through, then 30 s of nothing.
        let started = Instant::now();
        let e = out.write_all(&[2; 64]).await.unwrap_err();
        assert!(is_write_timeout(&e), "{e}");
        assert_eq!(started.elapsed(), Duration::from_secs(50));
        let _server = reader.await.unwrap();
        assert!(!is_write_timeout(&io::Error::from(io::ErrorKind::TimedOut)));
    }
}
