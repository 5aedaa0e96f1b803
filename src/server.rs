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
//! - hyper-util's auto builder speaks HTTP/1.1 and h2 (ALPN, or h2c in
//!   plain text) on one port, with a header read timeout (slowloris) and
//!   bounded header sizes;
//! - every public request runs as its own task, so a sender that hangs up
//!   cannot cancel a delivery halfway between claim and record;
//! - shutdown stops accepting, lets in-flight requests finish within
//!   `shutdown_grace`, then releases the claims of those that did not.
//!
//! The admin listener shares the accept loop with its own, smaller limits.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use prometheus::IntCounter;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::config::ServerSettings;
use crate::error::GatewayError;
use crate::pipeline::{ConnectionInfo, Gateway};

/// Largest request head (request line + headers) accepted.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Concurrent HTTP/2 streams per connection.
const MAX_H2_STREAMS: u32 = 256;
/// HTTP/2 keep-alive ping interval and the time to wait for its answer.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);
/// Back-off after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    /// Also the deadline of a TLS handshake.
    pub header_read_timeout: Duration,
}

/// TLS on a listener: the current certificate (swapped by a reload) and the
/// counter of failed handshakes.
#[derive(Clone)]
pub struct Tls {
    pub config: Arc<ArcSwap<rustls::ServerConfig>>,
    pub handshake_failures: IntCounter,
}

/// Serve webhook deliveries on `listener` until `shutdown` resolves, then
/// drain.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    settings: &ServerSettings,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
) {
    let limits = Limits {
        max_connections: settings.max_connections,
        header_read_timeout: settings.header_read_timeout,
    };
    let serving = Arc::clone(&gateway);
    let graceful = accept_loop(listener, limits, tls, shutdown, move |peer, proto| {
        let gateway = Arc::clone(&serving);
        let info = ConnectionInfo { peer, proto };
        move |request: Request<Incoming>| {
            let gateway = Arc::clone(&gateway);
            async move {
                let task = tokio::spawn(async move { gateway.handle(request, info).await });
                task.await.unwrap_or_else(|error| {
                    tracing::error!(%error, "request task failed");
                    GatewayError::Internal.to_response()
                })
            }
        }
    })
    .await;
    gateway
        .drain(settings.shutdown_grace, graceful.shutdown())
        .await;
}

/// Accept connections until `shutdown`, serving each with the handler that
/// `per_connection` makes for its peer and protocol (`http` or `https`).
/// Returns the watcher of the connections still open.
pub async fn accept_loop<C, H, F>(
    listener: TcpListener,
    limits: Limits,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
    per_connection: C,
) -> GracefulShutdown
where
    C: Fn(SocketAddr, &'static str) -> H,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(http_builder(limits));
    tokio::pin!(shutdown);

    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let handler = per_connection(peer, if tls.is_some() { "https" } else { "http" });
        let service = service_fn(move |request| {
            let response = handler(request);
            async move { Ok::<_, Infallible>(response.await) }
        });
        let (watcher, builder, tls) = (graceful.watcher(), Arc::clone(&builder), tls.clone());
        tokio::spawn(async move {
            let served = match tls {
                None => {
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection.into_owned()).await
                }
                Some(tls) => {
                    let acceptor = TlsAcceptor::from(tls.config.load_full());
                    let handshake =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            let connection =
                                builder.serve_connection(TokioIo::new(stream), service);
                            watcher.watch(connection.into_owned()).await
                        }
                        Ok(Err(error)) => {
                            tls.handshake_failures.inc();
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => {
                            tls.handshake_failures.inc();
                            tracing::debug!(%peer, "TLS handshake timed out");
                            Ok(())
                        }
                    }
                }
            };
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    graceful
}

fn http_builder(limits: Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_H2_STREAMS)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        // Ping idle HTTP/2 connections so dead peers free their slot.
        .keep_alive_interval(H2_KEEP_ALIVE)
        .keep_alive_timeout(H2_KEEP_ALIVE);
    builder
}
