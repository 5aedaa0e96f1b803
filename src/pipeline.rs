//! The life of one webhook delivery, SPEC §4, on one screen.
//!
//! [`Gateway::handle`] runs the stages in order — route, read body, verify,
//! extract key, claim, forward (renewing the lease), record or release — and
//! every stage either moves on or ends the request with a [`GatewayError`].
//! The order is the security model: nothing touches the store before the
//! signature checks out, and nothing reaches the upstream before the claim.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

use crate::config::{Config, OnMismatch, OnStoreError, RouteConfig};
use crate::error::GatewayError;
use crate::headers::X_REQUEST_ID;
use crate::key;
use crate::lease::{renewing, LeaseStatus, Leases};
use crate::metrics::{Metrics, UNMATCHED};
use crate::replay::RecordedResponse;
use crate::route::{Route, RouteTable};
use crate::store::{ClaimOutcome, ClaimRequest, Lease, Record, Store};
use crate::upstream::{build_request, Delivery, UpstreamError, UpstreamResponse};

/// Attempts at recording a final response before giving up on it.
const COMPLETE_ATTEMPTS: u32 = 3;

/// Facts about the connection a request came in on.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    /// `http` or `https`.
    pub proto: &'static str,
}

/// How a request ended, for logs (and the `outcome` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Forwarded,
    Replayed,
    /// The upstream answered with a non-final status (5xx, 408, 429, 3xx).
    UpstreamError,
    Rejected(&'static str),
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Replayed => "replayed",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Rejected(code) => code,
        }
    }

    fn of_error(error: &GatewayError) -> Self {
        match error {
            GatewayError::UpstreamUnreachable => Outcome::UpstreamError,
            other => Outcome::Rejected(other.code()),
        }
    }
}

/// Everything a request needs, shared by all connections.
pub struct Gateway {
    /// What a reload may change. Each request loads it once and keeps that
    /// snapshot to the end, so in-flight requests finish on the config they
    /// started with.
    runtime: ArcSwap<Runtime>,
    store: Store,
    leases: Arc<Leases>,
    metrics: Metrics,
    /// Fixed for the life of the process: changing it would orphan every
    /// stored key.
    key_prefix: String,
    /// Set once shutdown begins, so readiness turns false while draining.
    draining: AtomicBool,
}

/// The reloadable part of the config.
pub struct Runtime {
    pub routes: RouteTable,
    on_store_error: OnStoreError,
    max_body_bytes: usize,
    body_read_timeout: Duration,
}

impl Runtime {
    fn new(config: &Config) -> Self {
        Self {
            routes: RouteTable::new(&config.routes),
            on_store_error: config.store.on_error,
            max_body_bytes: config.server.max_body_bytes,
            body_read_timeout: config.server.body_read_timeout,
        }
    }
}

/// What one request's log line reports, filled in as the stages run.
struct RequestLog<'a> {
    route: &'a str,
    key: Option<String>,
    upstream: Option<Duration>,
}

impl Gateway {
    pub fn new(config: &Config, store: Store, metrics: Metrics) -> Self {
        Self {
            runtime: ArcSwap::from_pointee(Runtime::new(config)),
            store,
            leases: Arc::default(),
            metrics,
            key_prefix: config.store.key_prefix.clone(),
            draining: AtomicBool::new(false),
        }
    }

    /// Swap in the routes, secrets and request limits of `config`; requests
    /// already running keep the old ones.
    pub fn reload(&self, config: &Config) {
        self.runtime.store(Arc::new(Runtime::new(config)));
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn leases(&self) -> &Arc<Leases> {
        &self.leases
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The current route named `name`.
    pub fn route(&self, name: &str) -> Option<Arc<Route>> {
        self.runtime.load().routes.named(name).cloned()
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The store key of `key` on `route`: `{key_prefix}{scope}:{key}`. On a
    /// Redis Cluster, a route with a replay guard claims two keys in one
    /// script, so its keys share the hash tag `{scope}` (one slot per such
    /// route).
    pub fn store_key(&self, route: &RouteConfig, key: &str) -> String {
        if route.replay_guard && self.store.is_cluster() {
            format!("{}{{{}}}:{}", self.key_prefix, route.scope, key)
        } else {
            format!("{}{}:{}", self.key_prefix, route.scope, key)
        }
    }

    /// Handle one request; count it, log it, tag it with its request id.
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        connection: ConnectionInfo,
    ) -> Response<Full<Bytes>> {
        let started = Instant::now();
        let request_id = request_id(request.headers());
        let mut log = RequestLog {
            route: UNMATCHED,
            key: None,
            upstream: None,
        };
        let runtime = self.runtime.load_full();
        let (mut response, outcome) = match self
            .process(&runtime, request, connection, &request_id, &mut log)
            .await
        {
            Ok(done) => done,
            Err(error) => (error.to_response(), Outcome::of_error(&error)),
        };
        let elapsed = started.elapsed();
        self.metrics
            .request_done(log.route, outcome.as_str(), elapsed);
        tracing::info!(
            request_id = request_id.to_str().unwrap_or_default(),
            route = log.route,
            outcome = outcome.as_str(),
            status = response.status().as_u16(),
            key = log.key.as_deref(),
            upstream_ms = log.upstream.map(|d| d.as_secs_f64() * 1e3),
            elapsed_ms = elapsed.as_secs_f64() * 1e3,
            "request"
        );
        response.headers_mut().insert(X_REQUEST_ID, request_id);
        response
    }

    async fn process<'a>(
        &self,
        runtime: &'a Runtime,
        request: Request<Incoming>,
        connection: ConnectionInfo,
        request_id: &HeaderValue,
        log: &mut RequestLog<'a>,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        // 1. Route by exact path, then method.
        let route = runtime
            .routes
            .resolve(request.uri().path(), request.method())?;
        log.route = &route.name;
        let _in_flight = InFlight::enter(&self.metrics, &route.name);

        // 2. Read the body, bounded in size and time.
        let (parts, body) = request.into_parts();
        let body = read_body(body, &parts.headers, runtime).await?;

        // 3. Verify the signature on the raw bytes, before anything else.
        route
            .verifier
            .verify(&parts.headers, &body, SystemTime::now())?;

        // 4. Extract the idempotency key and scope it.
        let body_sha256 = hex::encode(Sha256::digest(&body));
        let key = key::extract(&route.key, &parts.headers, &body, &body_sha256)?;
        log.key = Some(key.clone());
        let store_key = self.store_key(route, &key);
        let guard_key = route
            .replay_guard
            .then(|| self.store_key(route, &format!("body-sha256:{body_sha256}")));

        // 5. Claim it.
        let claim = self
            .store
            .claim(ClaimRequest {
                key: &store_key,
                body_sha256: &body_sha256,
                lease: route.processing_ttl,
                retention: route.retention,
                guard_key: guard_key.as_deref(),
            })
            .await;
        let lease = match claim {
            Ok(ClaimOutcome::New(lease)) => Some(lease),
            Ok(ClaimOutcome::Completed(record)) => {
                return replay(route, &record, &body_sha256).map(|r| (r, Outcome::Replayed));
            }
            Ok(ClaimOutcome::InFlight { retry_after }) => {
                return Err(GatewayError::InFlight { retry_after });
            }
            Err(error) if runtime.on_store_error == OnStoreError::Forward => {
                tracing::warn!(route = %route.name, %error, "store unavailable; forwarding without deduplication");
                None
            }
            Err(error) => {
                tracing::warn!(route = %route.name, %error, "store unavailable; rejecting");
                return Err(GatewayError::StoreUnavailable);
            }
        };

        // 6. Forward, renewing the lease while the upstream works.
        let upstream_request = build_request(Delivery {
            route,
            parts: &parts,
            body,
            key: &key,
            request_id,
            peer: connection.peer.ip(),
            proto: connection.proto,
        });
        let called = Instant::now();
        let call = async {
            let result = route
                .upstream
                .send(upstream_request, route.upstream_timeout)
                .await;
            if let Ok(answer) = &result {
                self.metrics
                    .upstream_answered(&route.name, answer.status, called.elapsed());
            }
            result
        };
        let Some(lease) = lease else {
            let result = call.await;
            log.upstream = Some(called.elapsed());
            return finish_unclaimed(result);
        };
        let _held = self.leases.hold(&store_key, &lease);
        let lost = || {
            self.metrics
                .leases_lost
                .with_label_values(&[&route.name])
                .inc()
        };
        let (result, status) = renewing(
            &self.store,
            &store_key,
            &lease,
            route.processing_ttl,
            call,
            lost,
        )
        .await;
        log.upstream = Some(called.elapsed());

        // 7. Record a final answer; release the claim for anything else.
        match result {
            Ok(answer) if is_final(answer.status) => {
                let recorded = RecordedResponse::record(
                    answer.status,
                    &answer.headers,
                    &answer.body,
                    route.max_cached_body_bytes,
                );
                self.complete(route, &store_key, &lease, &recorded, status)
                    .await;
                Ok((pass_through(answer), Outcome::Forwarded))
            }
            Ok(answer) => {
                self.release(&store_key, &lease).await;
                Ok((pass_through(answer), Outcome::UpstreamError))
            }
            Err(error) => {
                tracing::warn!(route = %route.name, %error, "upstream call failed");
                self.release(&store_key, &lease).await;
                Err(upstream_error(error))
            }
        }
    }

    /// Record the final response. A few quick retries: losing the recording
    /// means the next retry is forwarded again once the lease runs out.
    async fn complete(
        &self,
        route: &RouteConfig,
        store_key: &str,
        lease: &Lease,
        recorded: &RecordedResponse,
        status: LeaseStatus,
    ) {
        for attempt in 1..=COMPLETE_ATTEMPTS {
            match self
                .store
                .complete(store_key, lease, recorded, route.retention)
                .await
            {
                Ok(true) => return,
                Ok(false) if attempt > 1 && self.recorded_already(store_key, recorded).await => {
                    // An earlier attempt timed out here but was applied.
                    return;
                }
                Ok(false) => {
                    tracing::warn!(route = %route.name, ?status, "lease was lost before the response could be recorded");
                    if status == LeaseStatus::Held {
                        // Taken over between the last renewal and now.
                        self.metrics
                            .leases_lost
                            .with_label_values(&[&route.name])
                            .inc();
                    }
                    return;
                }
                Err(error) if attempt < COMPLETE_ATTEMPTS => {
                    tracing::warn!(route = %route.name, %error, attempt, "recording the response failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                }
                Err(error) => {
                    tracing::error!(route = %route.name, %error, "could not record the response; a retry after processing_ttl will be forwarded again");
                }
            }
        }
    }

    /// Whether the record already holds `recorded` (a completion whose
    /// answer was lost to a timeout).
    async fn recorded_already(&self, store_key: &str, recorded: &RecordedResponse) -> bool {
        matches!(
            self.store.get(store_key).await,
            Ok(Some(record)) if record.response.as_ref() == Some(recorded)
        )
    }

    /// Let the sender's next retry claim the key again. If this fails the
    /// lease simply runs out after `processing_ttl`.
    async fn release(&self, store_key: &str, lease: &Lease) {
        if let Err(error) = self.store.release(store_key, lease).await {
            tracing::warn!(%error, "could not release claim; it expires with its lease");
        }
    }
}

/// Read the whole body, bounded in size (checked while streaming; a
/// declared Content-Length over the limit fails at once) and in time.
async fn read_body(
    body: Incoming,
    headers: &HeaderMap,
    limits: &Runtime,
) -> Result<Bytes, GatewayError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limits.max_body_bytes as u64) {
        return Err(GatewayError::BodyTooLarge);
    }
    let read = Limited::new(body, limits.max_body_bytes).collect();
    match tokio::time::timeout(limits.body_read_timeout, read).await {
        Err(_) => Err(GatewayError::BodyTimeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
            Err(GatewayError::BodyTooLarge)
        }
        Ok(Err(_)) => Err(GatewayError::BodyUnreadable),
    }
}

/// The sender's `X-Request-Id` when it is a sane token, else a fresh one.
fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers
        .get(X_REQUEST_ID)
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b))
        })
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&hex::encode(rand::random::<[u8; 16]>()))
                .expect("hex is a valid header value")
        })
}

/// `hookgate_in_flight_requests{route}` for as long as it lives.
struct InFlight(prometheus::IntGauge);

impl InFlight {
    fn enter(metrics: &Metrics, route: &str) -> Self {
        let gauge = metrics.in_flight.with_label_values(&[route]);
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// SPEC §4 step 7: 2xx and 4xx (but 408 and 429) are the upstream's final
/// word. Everything else — 5xx, 408, 429, and 3xx, which a webhook sender
/// treats as a failed delivery — lets the sender's retry through.
fn is_final(status: StatusCode) -> bool {
    status.is_success()
        || (status.is_client_error()
            && status != StatusCode::REQUEST_TIMEOUT
            && status != StatusCode::TOO_MANY_REQUESTS)
}

/// Answer a duplicate of a completed event.
fn replay(
    route: &RouteConfig,
    record: &Record,
    body_sha256: &str,
) -> Result<Response<Full<Bytes>>, GatewayError> {
    if record.body_sha256 != body_sha256 && route.on_mismatch == OnMismatch::Reject {
        return Err(GatewayError::PayloadMismatch);
    }
    let recorded = record.response.as_ref().ok_or(GatewayError::Internal)?;
    Ok(recorded.replay())
}

/// The upstream's answer, returned to the delivery that caused it.
fn pass_through(answer: UpstreamResponse) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(answer.body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    response
}

fn upstream_error(error: UpstreamError) -> GatewayError {
    match error {
        UpstreamError::Unreachable(_) => GatewayError::UpstreamUnreachable,
        UpstreamError::Timeout => GatewayError::UpstreamTimeout,
    }
}

/// `on_error = "forward"`: the store was down, so nothing is recorded.
fn finish_unclaimed(
    result: Result<UpstreamResponse, UpstreamError>,
) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
    let answer = result.map_err(upstream_error)?;
    let outcome = if is_final(answer.status) {
        Outcome::Forwarded
    } else {
        Outcome::UpstreamError
    };
    Ok((pass_through(answer), outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_statuses_follow_the_spec() {
        for code in [200, 201, 204, 400, 401, 404, 409, 410, 422] {
            assert!(is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [301, 302, 408, 429, 500, 502, 503, 504] {
            assert!(!is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }
}
