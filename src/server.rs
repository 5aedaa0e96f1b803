//! The public listener: accept, bound, serve, drain.
//!
//! Each layer is here for a reason:
//! - a semaphore caps open connections (`max_connections`): past it, new
//!   connections wait in the kernel's accept queue instead of costing memory;
//! - hyper-util's auto builder speaks HTTP/1.1 and h2c on one port, with a
//!   header read timeout (slowloris) and bounded header sizes;
//! - every request runs as its own task, so a sender that hangs up cannot
//!   cancel a delivery halfway between claim and record;
//! - shutdown stops accepting, lets in-flight requests finish within
//!   `shutdown_grace`, then releases the claims of those that did not.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

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

/// Serve `listener` until `shutdown` resolves, then drain.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    settings: &ServerSettings,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Arc::new(Semaphore::new(settings.max_connections));
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(http_builder(settings));
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
        let info = ConnectionInfo {
            peer,
            proto: "http",
        };
        let gateway = Arc::clone(&gateway);
        let service = service_fn(move |request| {
            let gateway = Arc::clone(&gateway);
            async move {
                let task = tokio::spawn(async move { gateway.handle(request, info).await });
                let response = task.await.unwrap_or_else(|error| {
                    tracing::error!(%error, "request task failed");
                    GatewayError::Internal.to_response()
                });
                Ok::<_, Infallible>(response)
            }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(permit);
        });
    }

    drop(listener);
    drain(graceful, &gateway, settings.shutdown_grace).await;
}

fn http_builder(settings: &ServerSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
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

/// Finish in-flight requests within `grace`; then release what is left.
async fn drain(graceful: GracefulShutdown, gateway: &Gateway, grace: Duration) {
    let in_flight = gateway.leases().count();
    tracing::info!(
        in_flight,
        grace_ms = grace.as_millis() as u64,
        "shutting down: draining in-flight requests"
    );
    let finished = tokio::time::timeout(grace, async {
        graceful.shutdown().await;
        gateway.leases().wait_idle().await;
    })
    .await;
    if finished.is_err() {
        let released = gateway.leases().release_all(gateway.store()).await;
        tracing::warn!(
            released,
            "grace period over: released unfinished claims so the senders' retries are processed"
        );
    } else {
        tracing::info!("drained");
    }
}
