//! Plain HTTP/1 keep-alive connections, parked between requests.
//!
//! hyper keeps a connection's whole state — its read and write buffers,
//! header-read timer and parser state, about 17 KiB — for as long as the
//! connection is open, so 10,000 idle keep-alive senders cost 190 MiB.
//! Here, once a response has been flushed and no request has run for
//! 100 ms (`supervise.rs`), the connection is closed at the HTTP level
//! only (its socket left open), its state dropped, and the task waits for
//! the socket to become readable holding nothing but the socket and its
//! service; the next byte starts a fresh connection state. Bytes hyper had
//! already read past its last request are handed to the next state first,
//! so a pipelining client loses nothing. The idle timeout and shutdown
//! apply to a parked socket as to a served one. HTTP/2 and TLS connections
//! stay in hyper's state.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::supervise::{sleep_until, supervise, Activity, Supervised};
use super::{Limits, Plain, Raised};

/// Serve a plain HTTP/1 connection until it closes, parking it whenever it
/// is idle between requests.
pub(super) async fn serve_http1<S, B>(
    mut stream: TcpStream,
    mut unread: Bytes,
    mut service: S,
    plain: &Plain,
    activity: &Arc<Activity>,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
) -> hyper::Result<()>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        activity.resume();
        let socket = Socket::new(stream, unread, activity);
        // Boxed, so that a parked task holds no room for it.
        let mut connection = Box::new(plain.http1.serve_connection(TokioIo::new(socket), service));
        match supervise(
            Pin::new(&mut *connection),
            activity,
            limits,
            true,
            &mut stopping,
        )
        .await
        {
            Supervised::Ended(result) => return result,
            Supervised::Parked => {}
        }
        let http1::Parts {
            io,
            read_buf,
            service: back,
            ..
        } = connection.into_parts();
        service = back;
        let socket = io.into_inner();
        stream = socket.stream;
        // What hyper had read and not used, then what it had been handed
        // back and not yet read again — copied, since hyper's `read_buf`
        // keeps its whole 8 KiB buffer alive even when it is empty.
        unread = [&read_buf[..], &socket.unread[..]].concat().into();
        drop(read_buf);
        if !unread.is_empty() {
            continue;
        }
        // Parked: the socket, the service and this task, nothing else.
        let _parked = Raised::new(&plain.parked);
        tokio::select! {
            readable = stream.readable() => {
                if readable.is_err() {
                    return Ok(());
                }
            }
            () = sleep_until(Some(activity.idle_until(limits))) => return Ok(()),
            _ = stopping.changed() => return Ok(()),
        }
    }
}

/// A plain connection's socket as hyper sees it: bytes read before (by the
/// protocol sniff, or by an earlier connection state) are given first, a
/// flush is reported to the connection's [`Activity`], and a shutdown
/// while parking leaves the socket open.
pub(super) struct Socket {
    stream: TcpStream,
    unread: Bytes,
    activity: Arc<Activity>,
}

impl Socket {
    pub(super) fn new(stream: TcpStream, unread: Bytes, activity: &Arc<Activity>) -> Self {
        Self {
            stream,
            unread,
            activity: Arc::clone(activity),
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread[..n]);
            self.unread.advance(n);
            if self.unread.is_empty() {
                // Let go of the buffer the bytes came in.
                self.unread = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.stream).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            self.activity.flushed();
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.activity.parking() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
