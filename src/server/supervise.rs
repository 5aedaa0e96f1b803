//! One connection's supervision: what it is doing ([`Activity`]: a request
//! running, or idle since when, and whether its last answer has left), and
//! the loop that closes it when it idles too long or the listener shuts
//! down — or, for a plain HTTP/1 connection, parks it (`park.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::server::conn::auto;
use tokio::sync::watch;

use super::Limits;

/// How long an HTTP/1 connection idles, its answer flushed, before it is
/// parked.
const PARK_AFTER: Duration = Duration::from_millis(100);

/// How long an idle-closed connection gets to say goodbye (h2 GOAWAY) before
/// it is dropped.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How a supervised connection state ended.
pub(super) enum Supervised<E> {
    /// The connection is over (closed by either side, or failed).
    Ended(Result<(), E>),
    /// It was idle with its last answer flushed and has been closed at the
    /// HTTP level only, asked to by `parkable`: the socket is open, to be
    /// taken back from the connection state.
    Parked,
}

impl<E> Supervised<E> {
    /// How a connection supervised without parking ended.
    pub(super) fn into_result(self) -> Result<(), E> {
        match self {
            Supervised::Ended(result) => result,
            Supervised::Parked => Ok(()),
        }
    }
}

/// Run one connection state until it ends, closing it when it idles too
/// long (no request running for `header_read_timeout` before its first
/// request, or for `idle_timeout` after one) or when the listener shuts
/// down. A connection that sends nothing, stops in the middle of the
/// protocol sniff, idles after a TLS handshake, or keeps an h2 session
/// alive with pings alone thus frees its slot in bounded time.
///
/// With `park`, a connection that has been idle for `PARK_AFTER` with its
/// last answer flushed is closed gracefully instead, and `Parked`
/// returned, so its state can be dropped while the socket waits for its
/// next request. (Parking at once after every answer cost a busy
/// keep-alive sender 5% of its throughput in rebuilt state; a sender whose
/// next request comes within `PARK_AFTER` never parks.)
pub(super) async fn supervise<Conn, E>(
    mut connection: Pin<&mut Conn>,
    activity: &Activity,
    limits: Limits,
    park: bool,
    stopping: &mut watch::Receiver<bool>,
) -> Supervised<E>
where
    Conn: Future<Output = Result<(), E>> + GracefulClose,
{
    let mut closing = false;
    let mut give_up = None;
    let mut park_at = Instant::now() + PARK_AFTER;
    loop {
        let idle_until = activity.idle_until(limits);
        tokio::select! {
            result = connection.as_mut() => {
                return if activity.parking() && result.is_ok() {
                    Supervised::Parked
                } else {
                    Supervised::Ended(result)
                };
            }
            () = sleep_until(Some(park_at)), if park && !closing => {
                let now = Instant::now();
                match activity.parkable() {
                    Some(since) if since + PARK_AFTER <= now => {
                        activity.begin_parking();
                        connection.as_mut().close_gracefully();
                        closing = true;
                    }
                    Some(since) => park_at = since + PARK_AFTER,
                    None => park_at = now + PARK_AFTER,
                }
            }
            () = sleep_until(Some(idle_until)), if !closing => {
                if activity.idle_until(limits) <= Instant::now() {
                    connection.as_mut().close_gracefully();
                    closing = true;
                    give_up = Some(Instant::now() + IDLE_CLOSE_GRACE);
                }
            }
            _ = stopping.changed(), if !closing => {
                connection.as_mut().close_gracefully();
                closing = true;
            }
            () = sleep_until(give_up), if give_up.is_some() => return Supervised::Ended(Ok(())),
        }
    }
}

/// Sleep until `deadline`, or forever when there is none.
pub(super) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// A connection closed gracefully (hyper-util's own trait is sealed).
pub(super) trait GracefulClose {
    fn close_gracefully(self: Pin<&mut Self>);
}

impl<I, S, B> GracefulClose for http1::Connection<I, S>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn close_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, E, B> GracefulClose for http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn close_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, E, B> GracefulClose for auto::Connection<'_, I, S, E>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn close_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Where a connection state is between requests.
const FRESH: u8 = 0;
/// A request is running.
const BUSY: u8 = 1;
/// The last request's answer is handed to the connection, maybe not sent.
const ANSWERED: u8 = 2;
/// The last answer has been written and flushed to the socket.
const FLUSHED: u8 = 3;

/// Whether a connection is serving a request, since when it has not, and
/// how far its last answer has got.
pub(super) struct Activity {
    running: AtomicUsize,
    served: AtomicBool,
    idle_since: std::sync::Mutex<Instant>,
    answer: AtomicU8,
    parking: AtomicBool,
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            running: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: std::sync::Mutex::new(Instant::now()),
            answer: AtomicU8::new(FRESH),
            parking: AtomicBool::new(false),
        }
    }

    /// A request starts; it ends when the guard drops.
    pub(super) fn begin(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.served.store(true, Ordering::Relaxed);
        self.answer.store(BUSY, Ordering::Relaxed);
        Running(Arc::clone(self))
    }

    /// When the connection will have idled too long. While a request runs
    /// that is never now: the time returned is when to look again.
    pub(super) fn idle_until(&self, limits: Limits) -> Instant {
        if self.running.load(Ordering::SeqCst) > 0 {
            return Instant::now() + limits.idle_timeout;
        }
        let since = self.idle_since();
        let allowed = if self.served.load(Ordering::Relaxed) {
            limits.idle_timeout
        } else {
            limits.header_read_timeout
        };
        since + allowed
    }

    /// The socket has flushed everything written to it: the last answer, if
    /// one was handed over, has left.
    pub(super) fn flushed(&self) {
        let _ =
            self.answer
                .compare_exchange(ANSWERED, FLUSHED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A new connection state starts on the socket; nothing answered in it.
    pub(super) fn resume(&self) {
        self.answer.store(FRESH, Ordering::Relaxed);
        self.parking.store(false, Ordering::Relaxed);
    }

    /// Since when the connection has been idle, if no request runs and the
    /// last answer has been flushed: an HTTP/1 connection state is then
    /// idle, waiting for the next request.
    fn parkable(&self) -> Option<Instant> {
        let idle = self.running.load(Ordering::SeqCst) == 0
            && self.answer.load(Ordering::Relaxed) == FLUSHED;
        idle.then(|| self.idle_since())
    }

    /// When the last request ended (or the connection opened).
    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn begin_parking(&self) {
        self.parking.store(true, Ordering::Relaxed);
    }

    /// The connection is being closed at the HTTP level to park: its
    /// socket must stay open.
    pub(super) fn parking(&self) -> bool {
        self.parking.load(Ordering::Relaxed)
    }
}

/// One running request of a connection.
pub(super) struct Running(Arc<Activity>);

impl Drop for Running {
    fn drop(&mut self) {
        *self
            .0
            .idle_since
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Instant::now();
        self.0.answer.store(ANSWERED, Ordering::Relaxed);
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}
