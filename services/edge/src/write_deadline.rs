//! A deadline on writing to a client: hyper's HTTP/1 server has one for
//! reading a request's header, none for writing a response, so a client
//! that pipelines requests and never reads (a tiny receive window) would
//! hold its connection, and its permit of `connections.max_connections`,
//! forever. [`WriteDeadline`] wraps the connection's socket: from the first
//! write the socket cannot take, what the server has to send must all be
//! written within `connections.write_timeout_ms`, else the write fails,
//! hyper ends the connection and the socket is reset (no lingering with
//! unsent data). Counted as `seckill_edge_connections_write_timeouts_total`.
//!
//! The deadline is not moved by partial progress: a client that reads a
//! byte now and then is as slow as one that reads nothing. It is lifted
//! when hyper's flush completes, which is when everything hyper had to
//! write has been written.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// A client's socket whose writes must complete within a deadline.
pub struct WriteDeadline {
    stream: TcpStream,
    limit: Duration,
    /// Armed by the first write the socket could not take; lifted by a
    /// completed flush.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    /// `stream`, whose writes must complete within `limit`.
    pub fn new(stream: TcpStream, limit: Duration) -> Self {
        Self { stream, limit, deadline: None }
    }

    /// A write could not go on: arms the deadline if it is not, and fails
    /// the write once it has passed (waking this task when it passes).
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match deadline.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                metrics::counter!("seckill_edge_connections_write_timeouts_total").increment(1);
                // Reset rather than close: the kernel would otherwise keep
                // trying to deliver what the client will not read.
                if let Err(error) = self.stream.set_zero_linger() {
                    tracing::debug!(%error, "setting SO_LINGER on a timed-out connection");
                }
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client did not read its response in time",
                )))
            }
        }
    }

    fn on_write<T>(&mut self, cx: &mut Context<'_>, written: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match written {
            Poll::Pending => self.blocked(cx),
            done => done,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.on_write(cx, written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.on_write(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.stream).poll_flush(cx);
        match flushed {
            Poll::Ready(Ok(())) => {
                self.deadline = None;
                Poll::Ready(Ok(()))
            }
            other => self.on_write(cx, other),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
