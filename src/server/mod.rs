//! Listeners: accept, bound, serve, drain.
//!
//! Each layer is here for a reason:
//! - a semaphore caps open connections (`max_connections`): past it, new
//!   connections wait in the kernel's accept queue instead of costing memory;
//! - TLS (when configured) is accepted in the connection's own task, under
//!   the header read timeout, so a slow or bogus handshake never holds up
//!   `accept`; failures are counted and logged at debug only (a port scanner
//!   must not flood the log). The certificate is read per connection from a
//!   swappable config, so a reload serves the new one to new connections;
//! - HTTP/1.1 and h2 on one port, with a header read timeout (slowloris)
//!   and bounded header sizes: a plain connection's first bytes tell h2c's
//!   preface from HTTP/1.1, and the connection is then served by hyper's
//!   own HTTP/1 or HTTP/2 connection alone, those bytes read first; TLS
//!   connections use hyper-util's auto builder (ALPN or the preface after
//!   the handshake);
//! - a plain HTTP/1 connection idle between requests is parked (`park.rs`):
//!   hyper's state for it is dropped and only the socket and its task
//!   wait, about 4 KiB resident instead of 19;
//! - every connection is supervised (`supervise.rs`): one that has no request running for
//!   `header_read_timeout` before its first request, or for `idle_timeout`
//!   after one, is closed — whether it never sent a byte, stopped in the
//!   middle of the protocol sniff, idles after its TLS handshake, or keeps
//!   an h2 session alive with pings alone — so idle sockets cannot hold the
//!   `max_connections` slots real senders need;
//! - every public request runs as its own task, so a sender that hangs up
//!   cannot cancel a delivery halfway between claim and record;
//! - shutdown stops accepting, lets in-flight requests finish within
//!   `shutdown_grace`, then releases the claims of those that did not.
//!
//! The admin listener shares the accept loop with its own, smaller limits.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus::{IntCounter, IntGauge};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::config::ServerSettings;
use crate::error::GatewayError;

use self::park::{serve_http1, Socket};
use self::supervise::{supervise, Activity};

mod park;
mod supervise;

/// Largest request head (request line + headers) accepted.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Concurrent HTTP/2 streams per connection.
const MAX_H2_STREAMS: u32 = 256;
/// HTTP/2 keep-alive ping interval and the time to wait for its answer.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);
/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The first read of a plain connection (hyper's first read is as large).
const FIRST_READ: usize = 8 * 1024;
/// Back-off after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    /// Also the deadline of a TLS handshake, and of a connection's first
    /// request.
    pub header_read_timeout: Duration,
    /// How long a connection may sit with no request running once it has
    /// served one (h2 pings and keep-alive do not count).
    pub idle_timeout: Duration,
}

/// TLS on a listener: the current certificate (swapped by a reload) and the
/// counter of failed handshakes.
#[derive(Clone)]
pub struct Tls {
    pub config: Arc<ArcSwap<rustls::ServerConfig>>,
    pub handshake_failures: IntCounter,
}

/// What a listener counts of its connections: those open, and of them the
/// plain HTTP/1 ones parked between requests (`park.rs`).
#[derive(Clone)]
pub struct ConnectionGauges {
    pub open: IntGauge,
    pub parked: IntGauge,
}

impl ConnectionGauges {
    /// Gauges no registry exports (the admin listener's).
    pub fn unexported() -> Self {
        let gauge = || IntGauge::new("connections", "unexported").expect("a valid name");
        Self {
            open: gauge(),
            parked: gauge(),
        }
    }
}

/// A gauge raised while this lives.
pub(crate) struct Raised(IntGauge);

impl Raised {
    pub(crate) fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Facts about the connection a request came in on.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    /// The peer's address as `X-Forwarded-For` names it (an IPv4 address
    /// mapped into IPv6 as plain IPv4), written once per connection
    /// rather than once per request.
    pub peer_text: HeaderValue,
    /// `http` or `https`.
    pub proto: &'static str,
}

impl ConnectionInfo {
    pub fn new(peer: SocketAddr, proto: &'static str) -> Self {
        let text = peer.ip().to_canonical().to_string();
        Self {
            peer,
            peer_text: HeaderValue::try_from(text).expect("an IP address is a valid header value"),
            proto,
        }
    }
}

/// What the server hands each request to, and drains at shutdown: the
/// ingress (`ingress::Gateway`). The server knows connections, not
/// deliveries.
pub trait Handler: Send + Sync + 'static {
    /// Answer one request. It runs on the connection's task, and is dropped
    /// if the client hangs up: work that must finish regardless is the
    /// handler's to spawn.
    fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        connection: ConnectionInfo,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send;

    /// Readiness turns false: shutdown has begun.
    fn begin_draining(&self);

    /// Let running deliveries finish within `grace` once `connections` (the
    /// listener's open connections) have closed; then release what is left.
    fn drain(
        &self,
        grace: Duration,
        connections: impl Future<Output = ()> + Send,
    ) -> impl Future<Output = ()> + Send;
}

/// Serve webhook deliveries on `listener` until `shutdown` resolves, then
/// drain.
pub async fn serve<G: Handler>(
    listener: TcpListener,
    gateway: Arc<G>,
    settings: &ServerSettings,
    tls: Option<Tls>,
    gauges: ConnectionGauges,
    shutdown: impl Future<Output = ()>,
) {
    let limits = Limits {
        max_connections: settings.max_connections,
        header_read_timeout: settings.header_read_timeout,
        idle_timeout: settings.idle_timeout,
    };
    // `drain_delay`: readiness turns false first, and the listener keeps
    // accepting while load balancers take the instance out of rotation.
    let delay = settings.drain_delay;
    let announcing = Arc::clone(&gateway);
    let shutdown = async move {
        shutdown.await;
        if !delay.is_zero() {
            announcing.begin_draining();
            tracing::info!(
                drain_delay_ms = delay.as_millis() as u64,
                "shutting down: /readyz answers 503, still accepting for drain_delay"
            );
            tokio::time::sleep(delay).await;
        }
    };
    let serving = Arc::clone(&gateway);
    let open = accept_loop(
        listener,
        limits,
        tls,
        gauges,
        shutdown,
        move |peer, proto| {
            let gateway = Arc::clone(&serving);
            let info = ConnectionInfo::new(peer, proto);
            move |request: Request<Incoming>| {
                let (gateway, info) = (Arc::clone(&gateway), info.clone());
                async move {
                    // On the connection's task: the handler spawns what must
                    // outlive a hang-up itself. Boxed, as the lifecycle's future
                    // is large; a panic answers 500, as a failed task would.
                    let handled = AssertUnwindSafe(Box::pin(gateway.handle(request, info)));
                    handled.catch_unwind().await.unwrap_or_else(|_| {
                        tracing::error!("request handler panicked");
                        GatewayError::Internal.to_response()
                    })
                }
            }
        },
    )
    .await;
    gateway.drain(settings.shutdown_grace, open.close()).await;
}

/// The connections a listener has open, for shutdown.
pub struct OpenConnections {
    /// One permit per connection slot; all back means all closed.
    slots: Arc<Semaphore>,
    max: u32,
    shutdown: watch::Sender<bool>,
}

impl OpenConnections {
    /// Ask every connection to finish the requests it is running and close;
    /// resolves once all have.
    pub async fn close(self) {
        let _ = self.shutdown.send(true);
        let _ = self.slots.acquire_many(self.max).await;
    }
}

/// Accept connections until `shutdown`, serving each with the handler that
/// `per_connection` makes for its peer and protocol (`http` or `https`).
pub async fn accept_loop<C, H, F>(
    listener: TcpListener,
    limits: Limits,
    tls: Option<Tls>,
    gauges: ConnectionGauges,
    shutdown: impl Future<Output = ()>,
    per_connection: C,
) -> OpenConnections
where
    C: Fn(SocketAddr, &'static str) -> H,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let max = u32::try_from(limits.max_connections).unwrap_or(u32::MAX >> 3);
    let slots = Arc::new(Semaphore::new(max as usize));
    let (stop, stopping) = watch::channel(false);
    let builder = Arc::new(http_builder(limits));
    let plain = Arc::new(Plain::new(limits, gauges.parked));
    tokio::pin!(shutdown);

    loop {
        let Some((permit, stream, peer)) = accept(&listener, &slots, &mut shutdown).await else {
            break;
        };
        let _ = stream.set_nodelay(true);
        let open = Raised::new(&gauges.open);
        let handler = per_connection(peer, if tls.is_some() { "https" } else { "http" });
        let activity = Arc::new(Activity::new());
        let counted = Arc::clone(&activity);
        let service = service_fn(move |request| {
            let running = counted.begin();
            let response = handler(request);
            async move {
                let response = response.await;
                drop(running);
                Ok::<_, Infallible>(response)
            }
        });
        let (builder, plain, tls, mut stopping) = (
            Arc::clone(&builder),
            Arc::clone(&plain),
            tls.clone(),
            stopping.clone(),
        );
        tokio::spawn(async move {
            // Each kind boxed: the task then holds only the state of the
            // one it is (a parked plain connection no room for a TLS
            // session, a handshake or an h2 connection).
            let served: Result<(), Box<dyn std::error::Error + Send + Sync>> = match tls {
                None => {
                    Box::pin(async move {
                                    let mut stream = stream;
                        let sniffed = tokio::select! {
                            sniffed = tokio::time::timeout(limits.header_read_timeout, sniff(&mut stream)) => sniffed,
                            _ = stopping.changed() => return Ok(()),
                        };
                        match sniffed {
                            Ok(Ok((Protocol::Http1, first))) => {
                                let activity = &activity;
                                serve_http1(stream, first, service, &plain, activity, limits, stopping)
                                    .await
                                    .map_err(Into::into)
                            }
                            Ok(Ok((Protocol::Http2, first))) => {
                                let io = TokioIo::new(Socket::new(stream, first, &activity));
                                let mut connection =
                                    Box::pin(plain.http2.serve_connection(io, service));
                                let connection = connection.as_mut();
                                supervise(connection, &activity, limits, false, &mut stopping)
                                    .await
                                    .into_result()
                                    .map_err(Into::into)
                            }
                            // Closed, or silent past the header read timeout.
                            Ok(Err(_)) | Err(_) => Ok(()),
                        }
                    })
                    .await
                }
                Some(tls) => {
                    Box::pin(async move {
                        let Some(stream) = handshake(&tls, stream, limits, peer).await else {
                            return Ok(());
                        };
                        let io = TokioIo::new(stream);
                        let mut connection = Box::pin(builder.serve_connection(io, service));
                        let connection = connection.as_mut();
                        supervise(connection, &activity, limits, false, &mut stopping)
                            .await
                            .into_result()
                    })
                    .await
                }
            };
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(open);
            drop(permit);
        });
    }
    OpenConnections {
        slots,
        max,
        shutdown: stop,
    }
}

/// The next connection, once a slot is free; `None` once `shutdown`
/// resolves. A failed accept (out of descriptors) is logged and tried
/// again after a pause.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<(OwnedSemaphorePermit, TcpStream, SocketAddr)> {
    let permit = tokio::select! {
        permit = Arc::clone(slots).acquire_owned() => permit.ok()?,
        () = shutdown.as_mut() => return None,
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => return Some((permit, stream, peer)),
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            () = shutdown.as_mut() => return None,
        }
    }
}

/// The TLS handshake, within the header read timeout; a failed or slow
/// one counted and dropped.
async fn handshake(
    tls: &Tls,
    stream: TcpStream,
    limits: Limits,
    peer: SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let acceptor = TlsAcceptor::from(tls.config.load_full());
    match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            tls.handshake_failures.inc();
            tracing::debug!(%peer, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            tls.handshake_failures.inc();
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// The HTTP/1 settings, on hyper's builder and hyper-util's alike (the two
/// share the methods, not a trait).
macro_rules! http1_settings {
    ($builder:expr, $limits:expr) => {
        $builder
            .timer(TokioTimer::new())
            .header_read_timeout($limits.header_read_timeout)
            .max_buf_size(MAX_HEADER_BYTES)
    };
}

/// The HTTP/2 settings, on hyper's builder and hyper-util's alike.
macro_rules! http2_settings {
    ($builder:expr) => {
        $builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_H2_STREAMS)
            .max_header_list_size(MAX_HEADER_BYTES as u32)
            // Ping idle HTTP/2 connections so dead peers free their slot.
            .keep_alive_interval(H2_KEEP_ALIVE)
            .keep_alive_timeout(H2_KEEP_ALIVE)
    };
}

fn http_builder(limits: Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    http1_settings!(builder.http1(), limits);
    http2_settings!(builder.http2());
    builder
}

/// The two protocols of a plain-text port.
enum Protocol {
    Http1,
    Http2,
}

/// hyper's own connection builders, for plain-text connections whose
/// protocol [`sniff`] told.
struct Plain {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    /// Connections parked now.
    parked: IntGauge,
}

impl Plain {
    fn new(limits: Limits, parked: IntGauge) -> Self {
        let mut http1 = http1::Builder::new();
        http1_settings!(http1, limits);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2_settings!(http2);
        Self {
            http1,
            http2,
            parked,
        }
    }
}

/// Which protocol a plain connection speaks, from its first bytes: h2c's
/// preface, or anything else (HTTP/1, whose parser then judges it). The
/// bytes are read, not peeked — one read instead of a peek and hyper's
/// read of the same bytes — and handed to the connection with the verdict,
/// to be read first. A client that has sent only part of the preface is
/// read again.
async fn sniff(stream: &mut TcpStream) -> std::io::Result<(Protocol, Bytes)> {
    // hyper's own first read is of this size.
    let mut first = BytesMut::with_capacity(FIRST_READ);
    loop {
        if stream.read_buf(&mut first).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let n = first.len().min(H2_PREFACE.len());
        if first[..n] != H2_PREFACE[..n] {
            return Ok((Protocol::Http1, first.freeze()));
        }
        if n == H2_PREFACE.len() {
            return Ok((Protocol::Http2, first.freeze()));
        }
    }
}
