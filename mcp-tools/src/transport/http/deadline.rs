//! A connection whose writes must make progress: a client that stops reading what it is sent
//! (a large answer, a stream) has its connection closed once a write has waited for it longer
//! than the write timeout, so it holds a connection for a bounded time, not forever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner`, with its writes bounded by `timeout` of no progress.
pub(crate) struct WriteDeadline<T> {
    inner: T,
    timeout: Duration,
    /// Armed when a write first waits, disarmed by any progress: a healthy client that reads
    /// slowly never meets it, one that reads nothing does.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub(crate) fn new(inner: T, timeout: Duration) -> Self {
        WriteDeadline {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// What a write that made `progress` answers: progress disarms the deadline, waiting arms
    /// it, and a wait past it fails the write.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        progress: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match progress {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let stalled = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match stalled.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client read nothing for the write timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let progress = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, progress)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let progress = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, progress)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let progress = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, progress)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let progress = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, progress)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A pipe whose reader reads nothing: the writer fails once the buffer is full and the
    /// timeout has passed, and a reader that drains it keeps the writer going past the timeout.
    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_after_the_timeout_and_a_read_one_never_does() {
        let (writer, _reader) = tokio::io::duplex(64);
        let mut writer = WriteDeadline::new(writer, Duration::from_secs(5));
        let chunk = [7u8; 32];
        let stalled = async {
            loop {
                writer.write_all(&chunk).await?;
            }
            #[allow(unreachable_code)]
            Ok::<(), io::Error>(())
        };
        let started = tokio::time::Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(60), stalled)
            .await
            .expect("the stalled write failed before a minute")
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        let (writer, mut reader) = tokio::io::duplex(64);
        let mut writer = WriteDeadline::new(writer, Duration::from_secs(5));
        let drain = tokio::spawn(async move {
            let mut sink = Vec::new();
            let mut buf = [0u8; 16];
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match tokio::io::AsyncReadExt::read(&mut reader, &mut buf).await {
                    Ok(0) | Err(_) => break sink.len(),
                    Ok(n) => sink.extend_from_slice(&buf[..n]),
                }
            }
        });
        let writes = async {
            for _ in 0..20 {
                writer.write_all(&chunk).await.unwrap();
            }
            drop(writer);
        };
        tokio::time::timeout(Duration::from_secs(120), writes)
            .await
            .expect("a reader that drains keeps the writer going");
        let drained = tokio::time::timeout(Duration::from_secs(60), drain)
            .await
            .expect("the reader ends with the writer");
        assert_eq!(drained.unwrap(), 20 * chunk.len());
    }
}
