//! The life of one webhook delivery, SPEC §4, on one screen.
//!
//! [`Gateway::handle`] runs the stages in order — route (and admit the
//! sender's address), read body, verify, extract key, traffic control,
//! claim, forward (renewing the claim), record or release — and
//! every stage either moves on or ends the request with a [`GatewayError`].
//! The claim's life, from the store's answer to its end, is one
//! [`Claim`](crate::claim::Claim).
//! The order is the security model: nothing touches the store before the
//! signature checks out, and nothing reaches the upstream before the claim.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

use crate::cidr::Cidr;
use crate::claim::{Claim, Claims};
use crate::config::{
    AsyncDelivery, Config, DeliveryMode, Live, OnMismatch, OnStoreError, RequestLimits, RouteConfig,
};
use crate::delivery::{policy, Attempt, Kind};
use crate::error::{json_response, GatewayError};
use crate::headers::{
    new_request_id, HOOKGATE_EVENT_STATE, IDEMPOTENT_REPLAYED, X_FORWARDED_FOR, X_REQUEST_ID,
};
use crate::key::{self, KeyError, OnMissingKey};
use crate::metrics::{Metrics, UNMATCHED};
use crate::route::{Route, RouteTable, Upstreams};
use crate::store::{
    ClaimMode, ClaimOutcome, ClaimRequest, Clock, Lease, Record, RecordState, Store, StoreError,
    StoreKey, Stored, StoredRequest,
};
use crate::telemetry::{DeliverySpan, SpanFacts, Telemetry};
use crate::traffic::{Admission, Controls, Held, Pause, Pauses};
use crate::upstream::{
    build_request, resend, stored_request, BodyRead, Delivery, UpstreamError, UpstreamResponse,
};
use crate::verify::{Handshake, RequestLine};
use crate::worker::{Permit, Place, Workers};

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
    /// A keyless delivery forwarded unclaimed (`on_missing_key = "forward"`).
    ForwardedUnkeyed,
    /// A sender's handshake, answered by the gateway (SPEC §4 extension).
    Handshake,
    Replayed,
    /// A delivery of an event parked as a dead letter, answered
    /// `dead_letter_status` and not forwarded.
    DeadLetter,
    /// An async route stored the event; its workers deliver it.
    Accepted,
    /// The upstream answered with a non-final status (5xx, 408, 429, 3xx).
    UpstreamError,
    Rejected(&'static str),
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::ForwardedUnkeyed => "forwarded_unkeyed",
            Outcome::Handshake => "handshake",
            Outcome::Replayed => "replayed",
            Outcome::DeadLetter => "dead_letter",
            Outcome::Accepted => "accepted",
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
    /// The upstream clients, kept across reloads for their pooled
    /// connections.
    upstreams: Upstreams,
    /// Shared with every [`Claim`], which may outlive its request (a
    /// recording that waits for the store to come back).
    store: Arc<Store>,
    /// The claims this process holds, for shutdown.
    claims: Arc<Claims>,
    metrics: Metrics,
    /// Set once shutdown begins, so readiness turns false while draining.
    draining: AtomicBool,
    /// The async delivery workers' shared state.
    workers: Workers,
    /// Each route's breaker and bucket, kept across reloads.
    controls: Controls,
    /// The routes an operator paused, as last read from the store.
    pauses: Pauses,
    /// OpenTelemetry tracing, when `[telemetry]` is configured.
    telemetry: Telemetry,
}

/// The live part of the config, ready to serve.
pub struct Runtime {
    pub routes: RouteTable,
    on_store_error: OnStoreError,
    limits: RequestLimits,
    trusted_proxies: Vec<Cidr>,
}

impl Runtime {
    fn new(live: &Live, upstreams: &Upstreams, controls: &Controls, metrics: &Metrics) -> Self {
        Self {
            routes: RouteTable::new(&live.routes, upstreams, controls, metrics),
            on_store_error: live.on_store_error,
            limits: live.limits,
            trusted_proxies: live.trusted_proxies.clone(),
        }
    }
}

/// What one request's log line (and its trace span) reports, filled in as
/// the stages run.
struct RequestLog<'a> {
    route: &'a str,
    key: Option<String>,
    upstream: Option<Duration>,
    /// How long the claim (or acceptance) took in the store.
    store: Option<Duration>,
    trace: DeliverySpan,
}

/// What the hybrid's call holds: the claim the acceptance took, and leave
/// from traffic control and the route's `max_in_flight`.
struct Hybrid {
    key: StoreKey,
    lease: Lease,
    admission: Admission,
    permit: Permit,
}

/// What the claim stage decided.
enum Claimed {
    /// This delivery owns the key: forward it.
    New(Claim),
    /// A duplicate of a completed event, answered from its record.
    Duplicate(Response<Full<Bytes>>),
    /// A delivery of a dead letter: answered, not forwarded.
    Dead(Response<Full<Bytes>>),
    /// The store is down and `on_error = "forward"`: forward unrecorded.
    Unprotected,
}

impl Gateway {
    pub fn new(config: &Config, store: Store, metrics: Metrics) -> Self {
        let upstreams = Upstreams::default();
        let controls = Controls::default();
        let runtime = Runtime::new(&config.live, &upstreams, &controls, &metrics);
        Self {
            runtime: ArcSwap::from_pointee(runtime),
            upstreams,
            controls,
            pauses: Pauses::default(),
            telemetry: match &config.fixed.telemetry {
                None => Telemetry::off(),
                Some(settings) => Telemetry::start(settings).unwrap_or_else(|error| {
                    tracing::error!(%error, "tracing is off");
                    Telemetry::off()
                }),
            },
            store: Arc::new(store),
            claims: Arc::default(),
            metrics,
            draining: AtomicBool::new(false),
            workers: Workers::default(),
        }
    }

    /// Swap in the routes, secrets and request limits of `live`; requests
    /// already running keep the old ones.
    pub fn reload(&self, live: &Live) {
        let runtime = Runtime::new(live, &self.upstreams, &self.controls, &self.metrics);
        self.runtime.store(Arc::new(runtime));
        self.set_pause_gauges();
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    pub fn pauses(&self) -> &Pauses {
        &self.pauses
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Read the paused routes from the store (every [`PAUSE_POLL`], and at
    /// start-up before serving): a pause or resume made through another
    /// instance applies here. A resumed async route's backlog is delivered
    /// at once. A store that does not answer leaves the last known state.
    ///
    /// [`PAUSE_POLL`]: crate::traffic::PAUSE_POLL
    pub async fn refresh_pauses(&self) {
        match self.pauses.refresh(&self.store).await {
            Ok(resumed) => {
                if !resumed.is_empty() {
                    tracing::info!(routes = ?resumed, "routes resumed by another instance");
                    self.workers.wake();
                }
            }
            Err(error) => tracing::debug!(%error, "could not read the paused routes"),
        }
        self.set_pause_gauges();
    }

    /// Pause (`Some`) or resume `route` for the whole fleet: written to the
    /// store and applied here at once, gauge included; a resumed route's
    /// backlog is delivered now rather than at the next poll.
    pub async fn set_pause(&self, route: &str, pause: Option<&Pause>) -> Result<(), StoreError> {
        self.pauses.set(&self.store, route, pause).await?;
        self.set_pause_gauges();
        if pause.is_none() {
            self.workers.wake();
        }
        Ok(())
    }

    /// `hookgate_route_paused{route}` for every current route.
    fn set_pause_gauges(&self) {
        for route in self.routes() {
            let paused = self.pauses.is_paused(&route.name);
            self.metrics
                .route_paused
                .with_label_values(&[&route.name])
                .set(i64::from(paused));
        }
    }

    /// Leave for one upstream call of `route` (SPEC §9): refused while the
    /// route is paused, its breaker open or its rate spent.
    pub(crate) fn admit(&self, route: &Route) -> Result<Admission, GatewayError> {
        if self.pauses.is_paused(&route.name) {
            return Err(GatewayError::RoutePaused);
        }
        route.controls.admit().map_err(|held| match held {
            Held::CircuitOpen(retry_after) => GatewayError::CircuitOpen { retry_after },
            Held::RateLimited(retry_after) => GatewayError::RateLimited { retry_after },
        })
    }

    /// Set the gauges the store knows, when `/metrics` is scraped:
    /// `hookgate_dead_letters{route}`, and for async routes
    /// `hookgate_queue_depth{route,state="queued"}` (fleet-wide: every
    /// instance reports the same) and `hookgate_oldest_queued_seconds`;
    /// `state="delivering"` is this instance's running deliveries. Counted
    /// per route scope (routes sharing a scope show the same counts). A
    /// store that does not answer leaves the last values.
    pub async fn refresh_gauges(&self) {
        let metrics = &self.metrics;
        metrics
            .store_up
            .set(i64::from(self.store.ping().await.is_ok()));
        let cache_live = self
            .store
            .replay_cache()
            .is_some_and(|cache| cache.is_live());
        metrics.store.cache_live.set(i64::from(cache_live));
        for route in self.routes() {
            let name = route.name.as_str();
            if let Ok(count) = self.store.count(&route.scope, RecordState::Dead).await {
                metrics
                    .dead_letters
                    .with_label_values(&[name])
                    .set(count as i64);
            }
            if !matches!(route.delivery, DeliveryMode::Async(_)) {
                continue;
            }
            if let Ok(count) = self.store.count(&route.scope, RecordState::Queued).await {
                metrics
                    .queue_depth
                    .with_label_values(&[name, "queued"])
                    .set(count as i64);
            }
            if let Ok(oldest) = self.store.oldest(&route.scope, RecordState::Queued).await {
                let age = oldest.map_or(0, |at| Clock::system().now_ms().saturating_sub(at));
                metrics
                    .oldest_queued
                    .with_label_values(&[name])
                    .set(age as f64 / 1000.0);
            }
        }
        for (route, running) in self.workers.delivering() {
            metrics
                .queue_depth
                .with_label_values(&[&route, "delivering"])
                .set(running as i64);
        }
    }

    /// Each async route's queue, for `/readyz`: events queued (in the
    /// store, fleet-wide) and being delivered by this instance.
    pub async fn delivery_status(&self) -> serde_json::Map<String, serde_json::Value> {
        let delivering: std::collections::HashMap<String, usize> =
            self.workers.delivering().into_iter().collect();
        let mut status = serde_json::Map::new();
        for route in self.routes() {
            if !matches!(route.delivery, DeliveryMode::Async(_)) {
                continue;
            }
            let queued = self.store.count(&route.scope, RecordState::Queued).await;
            status.insert(
                route.name.clone(),
                serde_json::json!({
                    "queued": queued.ok(),
                    "delivering": delivering.get(&route.name).copied().unwrap_or(0),
                }),
            );
        }
        status
    }

    /// Drop listing-index entries whose records have expired, per route
    /// scope and state, by the longest lifetime a record of that state has
    /// among the scope's routes (`retention` for processing and completed,
    /// `dead_letter_retention` for failed and dead). Run every minute; a
    /// store that keeps no such index has nothing to do.
    pub async fn trim_indexes(&self) {
        let routes = self.routes();
        let mut scopes: Vec<&str> = routes.iter().map(|route| route.scope.as_str()).collect();
        scopes.sort_unstable();
        scopes.dedup();
        for scope in scopes {
            let of_scope = || routes.iter().filter(|route| route.scope == scope);
            let retention = of_scope().map(|route| route.retention).max();
            let parked = of_scope().map(|route| route.dead_letter_retention).max();
            for state in RecordState::ALL {
                let horizon = match state {
                    RecordState::Processing | RecordState::Completed => retention,
                    RecordState::Queued | RecordState::Failed | RecordState::Dead => parked,
                };
                let Some(horizon) = horizon else { continue };
                if let Err(error) = self.store.trim(scope, state, horizon).await {
                    tracing::debug!(scope, %error, "could not trim a listing index");
                }
            }
        }
    }

    /// Every current route, sorted by name.
    pub fn routes(&self) -> Vec<Arc<Route>> {
        self.runtime.load().routes.all()
    }

    /// The current route named `name`.
    pub fn route(&self, name: &str) -> Option<Arc<Route>> {
        self.runtime.load().routes.named(name).cloned()
    }

    /// Readiness turns false (shutdown has begun); requests are still
    /// served.
    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Shutdown: readiness turns false, running deliveries get `grace` to
    /// finish (`connections` resolves once every connection has closed);
    /// then the claims still held are released, so the senders' retries are
    /// forwarded at once instead of after `processing_ttl`.
    pub async fn drain(&self, grace: Duration, connections: impl Future<Output = ()>) {
        self.draining.store(true, Ordering::Relaxed);
        tracing::info!(
            in_flight = self.claims.count(),
            grace_ms = grace.as_millis() as u64,
            "shutting down: draining in-flight requests"
        );
        let finished = tokio::time::timeout(grace, async {
            connections.await;
            self.claims.wait_idle().await;
        })
        .await;
        if finished.is_err() {
            let released = self.claims.release_all(&self.store).await;
            tracing::warn!(
                released,
                "grace period over: released unfinished claims so the senders' retries are processed"
            );
        } else {
            tracing::info!("drained");
        }
    }

    /// Handle one request; count it, log it, tag it with its request id.
    pub async fn handle(
        self: &Arc<Self>,
        request: Request<Incoming>,
        connection: ConnectionInfo,
    ) -> Response<Full<Bytes>> {
        let started = Instant::now();
        let request_id = request_id(request.headers());
        let mut log = RequestLog {
            route: UNMATCHED,
            key: None,
            upstream: None,
            store: None,
            trace: self
                .telemetry
                .delivery("webhook delivery", request.headers()),
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
            store_ms = log.store.map(|d| d.as_secs_f64() * 1e3),
            upstream_ms = log.upstream.map(|d| d.as_secs_f64() * 1e3),
            elapsed_ms = elapsed.as_secs_f64() * 1e3,
            "request"
        );
        let trace = std::mem::replace(&mut log.trace, DeliverySpan::none());
        trace.finish(SpanFacts {
            route: log.route,
            outcome: outcome.as_str(),
            status: Some(response.status().as_u16()),
            key: log.key.as_deref(),
            store: log.store,
            upstream: log.upstream,
        });
        response.headers_mut().insert(X_REQUEST_ID, request_id);
        response
    }

    async fn process<'a>(
        self: &Arc<Self>,
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

        // 1b. Admit the sender by address, before reading anything (SPEC §9).
        if let Some(allowed) = &route.allow_from {
            let client = client_address(
                connection.peer.ip(),
                request.headers(),
                &runtime.trusted_proxies,
            );
            if !allowed.iter().any(|range| range.contains(client)) {
                return Err(GatewayError::SourceNotAllowed);
            }
        }

        // 2. Read the body, bounded in size and time.
        let (parts, body) = request.into_parts();
        let body = read_body(body, &parts.headers, runtime.limits).await?;

        // 3. Verify the signature on the raw bytes, before anything else.
        //    A verified handshake (Discord's PING, Zoom's URL validation) is
        //    answered here: nothing to claim, nothing to forward.
        let line = RequestLine {
            method: &parts.method,
            query: parts.uri.query(),
        };
        route
            .verifier
            .verify(line, &parts.headers, &body, SystemTime::now())?;
        if let Some(handshake) = route.verifier.handshake(&body) {
            return Ok((handshake_response(handshake), Outcome::Handshake));
        }

        // 4. Extract the idempotency key from what the signature covered. A
        //    keyless delivery is refused, or forwarded unclaimed where the
        //    sender never retries those (`on_missing_key`).
        let body_sha256 = hex::encode(Sha256::digest(&body));
        let allowed = |name: &_| {
            route
                .verifier
                .key_header_allowed(route.scheme, &parts.headers, name)
        };
        let key = match key::extract(&route.key, &parts.headers, &body, &body_sha256, allowed) {
            Ok(key) => Some(key),
            Err(KeyError::Missing) if route.on_missing_key == OnMissingKey::Forward => None,
            Err(error) => return Err(error.into()),
        };
        log.key = key.clone();

        // What is forwarded, built once: stored by an async route, sent by
        // a sync one.
        let delivery = Delivery {
            route,
            parts: &parts,
            body,
            key: key.as_deref(),
            request_id,
            peer: connection.peer.ip(),
            peer_trusted: (runtime.trusted_proxies.iter())
                .any(|range| range.contains(connection.peer.ip())),
            proto: connection.proto,
        };

        // 5. An async route answers once the event and its request are
        //    stored (SPEC §7); its workers deliver it.
        if let (DeliveryMode::Async(settings), Some(key)) = (&route.delivery, &key) {
            let request = stored_request(&delivery);
            let accepting = Instant::now();
            let accepted = self
                .accept(route, settings, key, &body_sha256, request, log)
                .await;
            log.store.get_or_insert(accepting.elapsed());
            return accepted;
        }

        // 4b. Traffic control (SPEC §9): a paused route, an open circuit
        //    breaker or a spent rate limit refuse before anything is
        //    claimed; the senders' retries carry the event.
        let admission = self.admit(route)?;

        // 5. Claim it: a duplicate ends here, answered from the record (and
        //    the admission, unused, is given back).
        let claiming = Instant::now();
        let claimed = match &key {
            Some(key) => Some(self.claim(runtime, route, key, &body_sha256).await),
            None => None,
        };
        log.store = claimed.as_ref().map(|_| claiming.elapsed());
        let claim = match claimed {
            Some(claimed) => match claimed? {
                Claimed::New(claim) => Some(claim),
                Claimed::Duplicate(recorded) => return Ok((recorded, Outcome::Replayed)),
                Claimed::Dead(answer) => return Ok((answer, Outcome::DeadLetter)),
                Claimed::Unprotected => None,
            },
            None => None,
        };

        // 6. Forward, renewing the claim while the upstream works; 7. settle
        //    the claim by what the upstream is known to have done.
        let mut upstream_request = build_request(&delivery);
        log.trace.inject(upstream_request.headers_mut());
        let Some(claim) = claim else {
            let (result, elapsed) = self.call(route, upstream_request).await;
            admission.settle(policy::class_of(&result).is_none());
            log.upstream = Some(elapsed);
            let forwarded = match key {
                Some(_) => Outcome::Forwarded,
                None => Outcome::ForwardedUnkeyed,
            };
            return settle_sender(result, forwarded);
        };
        let attempt = Attempt {
            route: Arc::clone(route),
            claim,
            admission,
            // A sync route's senders are bounded by the server's connection
            // limits, not by max_in_flight.
            place: Place::Free,
            kind: Kind::Sync,
            first_seen_ms: Clock::system().now_ms(),
            was_dead: false,
        };
        let attempted = self
            .attempt(attempt, upstream_request, || stored_request(&delivery))
            .await;
        log.upstream = Some(attempted.elapsed);
        settle_sender(attempted.result, Outcome::Forwarded)
    }

    /// Stage 5 of an async route: store the event with its request in one
    /// write, then answer `accept_status` (never before: a 2xx promises the
    /// event cannot be lost). A duplicate of a queued, delivering or
    /// completed event gets the same answer, replayed; of a dead one, the
    /// dead-letter answer. With `respond_within`, the event is also claimed
    /// and forwarded at once: see [`Gateway::respond_within`].
    async fn accept(
        self: &Arc<Self>,
        route: &Arc<Route>,
        settings: &AsyncDelivery,
        key: &str,
        body_sha256: &str,
        request: StoredRequest,
        log: &mut RequestLog<'_>,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        let (store_key, guard_key) = self.store_keys(route, key, body_sha256);
        // The hybrid forwards at once only when the route may call now
        // (one of its max_in_flight calls free, not paused, breaker closed,
        // a token to spend); otherwise the event just queues for the
        // workers.
        let hybrid = settings.respond_within.and_then(|_| {
            let permit = self
                .workers
                .gate(&route.name, settings.max_in_flight)
                .try_enter()?;
            Some((self.admit(route).ok()?, permit))
        });
        let mode = match hybrid {
            Some(_) => ClaimMode::AcceptClaimed,
            None => ClaimMode::Accept,
        };
        let outcome = self
            .store
            .claim(ClaimRequest {
                key: &store_key,
                body_sha256,
                processing_ttl: route.processing_ttl,
                // An accepted event outlives its attempts (max_age).
                retention: route.dead_letter_retention,
                guard_key: guard_key.as_ref(),
                mode,
                stored: Some(Stored {
                    request: &request,
                    route: &route.name,
                    replay_of: None,
                }),
            })
            .await;
        match outcome {
            Ok(ClaimOutcome::Queued) => {
                self.workers.wake();
                Ok((accepted(settings, key, false), Outcome::Accepted))
            }
            Ok(ClaimOutcome::New(lease)) => {
                let Some((admission, permit)) = hybrid else {
                    // Only an AcceptClaimed is answered New.
                    return Err(GatewayError::Internal);
                };
                let claimed = Hybrid {
                    key: store_key,
                    lease,
                    admission,
                    permit,
                };
                self.respond_within(route, settings, claimed, key, request, log)
                    .await
            }
            Ok(ClaimOutcome::Completed(record)) => {
                check_body(route, &record, body_sha256)?;
                Ok((accepted(settings, key, true), Outcome::Replayed))
            }
            Ok(ClaimOutcome::InFlight { .. }) => {
                // Queued or being delivered: the same event only if it is
                // the same body (one read, for duplicates alone).
                if let Ok(Some(record)) = self.store.get(&store_key).await {
                    check_body(route, &record, body_sha256)?;
                }
                Ok((accepted(settings, key, true), Outcome::Replayed))
            }
            Ok(ClaimOutcome::Dead(record)) => Ok((
                dead_letter(route, &record, body_sha256)?,
                Outcome::DeadLetter,
            )),
            Err(error) => {
                // Never accepted without the store: an async route does not
                // forward unprotected, whatever `on_error` says.
                tracing::warn!(route = %route.name, %error, "store unavailable; rejecting");
                Err(GatewayError::StoreUnavailable)
            }
        }
    }

    /// The hybrid: forward the accepted, claimed event now, in a task of its
    /// own. A final answer within `within` is returned as a sync route
    /// would; otherwise the sender gets `accept_status`, the call runs on,
    /// and its outcome is settled like a worker's attempt (a failure queues
    /// the next one; a crash leaves the event to the workers once the lease
    /// lapses). Exactly one call is made unless it fails.
    async fn respond_within(
        self: &Arc<Self>,
        route: &Arc<Route>,
        settings: &AsyncDelivery,
        claimed: Hybrid,
        key: &str,
        request: StoredRequest,
        log: &mut RequestLog<'_>,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        let (answered, answer) = tokio::sync::oneshot::channel();
        let gateway = Arc::clone(self);
        let task_route = Arc::clone(route);
        let task_key = key.to_owned();
        let accepted_ms = Clock::system().now_ms();
        let trace = log.trace.headers();
        let Hybrid {
            key: store_key,
            lease,
            admission,
            permit,
        } = claimed;
        tokio::spawn(async move {
            let route = task_route;
            let claim = gateway.claim_for(&route, store_key, lease);
            let request_id = new_request_id();
            let mut upstream_request =
                resend(&route, request.clone(), Some(&task_key), &request_id);
            for (name, value) in trace {
                upstream_request.headers_mut().insert(name, value);
            }
            let attempt = Attempt {
                route: Arc::clone(&route),
                claim,
                admission,
                // One of the route's max_in_flight calls, until it ends.
                place: Place::Taken(permit),
                kind: Kind::Hybrid,
                first_seen_ms: accepted_ms,
                was_dead: false,
            };
            let attempted = gateway.attempt(attempt, upstream_request, || request).await;
            let _ = answered.send((attempted.result, attempted.elapsed));
        });
        let within = settings.respond_within.unwrap_or_default();
        match tokio::time::timeout(within, answer).await {
            Ok(Ok((Ok(answer), elapsed))) if policy::is_final(answer.status) => {
                log.upstream = Some(elapsed);
                settle_sender(Ok(answer), Outcome::Forwarded)
            }
            _ => Ok((accepted(settings, key, false), Outcome::Accepted)),
        }
    }

    /// The store key of `key` on `route`, and the replay guard of the body
    /// when the route keeps one.
    fn store_keys(
        &self,
        route: &Route,
        key: &str,
        body_sha256: &str,
    ) -> (StoreKey, Option<StoreKey>) {
        let guard_key = route
            .replay_guard
            .then(|| self.store.guard_key(&route.scope, body_sha256));
        (self.store.key(&route.scope, key), guard_key)
    }

    /// Stage 5: claim `key` on `route`.
    async fn claim(
        &self,
        runtime: &Runtime,
        route: &Route,
        key: &str,
        body_sha256: &str,
    ) -> Result<Claimed, GatewayError> {
        let (store_key, guard_key) = self.store_keys(route, key, body_sha256);
        let outcome = self
            .store
            .claim(ClaimRequest {
                key: &store_key,
                body_sha256,
                processing_ttl: route.processing_ttl,
                retention: route.retention,
                guard_key: guard_key.as_ref(),
                mode: ClaimMode::Deliver,
                stored: None,
            })
            .await;
        match outcome {
            Ok(ClaimOutcome::New(lease)) => {
                Ok(Claimed::New(self.claim_for(route, store_key, lease)))
            }
            Ok(ClaimOutcome::Completed(record)) => {
                replay(route, &record, body_sha256).map(Claimed::Duplicate)
            }
            Ok(ClaimOutcome::Dead(record)) => {
                dead_letter(route, &record, body_sha256).map(Claimed::Dead)
            }
            Ok(ClaimOutcome::InFlight { retry_after }) => {
                Err(GatewayError::InFlight { retry_after })
            }
            // Only an acceptance answers this, and a delivery is no acceptance.
            Ok(ClaimOutcome::Queued) => Err(GatewayError::Internal),
            Err(error) if runtime.on_store_error == OnStoreError::Forward => {
                tracing::warn!(route = %route.name, %error, "store unavailable; forwarding without deduplication");
                Ok(Claimed::Unprotected)
            }
            Err(error) => {
                tracing::warn!(route = %route.name, %error, "store unavailable; rejecting");
                Err(GatewayError::StoreUnavailable)
            }
        }
    }

    /// The claim `lease` grants on `key`, registered for shutdown.
    pub(crate) fn claim_for(&self, route: &Route, key: StoreKey, lease: Lease) -> Claim {
        Claim::new(
            &self.store,
            &self.claims,
            key,
            lease,
            route.processing_ttl,
            route.leases_lost.clone(),
        )
    }
}

/// Read the whole body, bounded in size (checked while streaming; a
/// declared Content-Length over the limit fails at once) and in time.
async fn read_body(
    body: Incoming,
    headers: &HeaderMap,
    limits: RequestLimits,
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

/// The client's address: the peer's, or — when the peer is one of
/// `trusted_proxies` — the rightmost `X-Forwarded-For` entry that is not a
/// trusted proxy itself (entries left of it were written by the client and
/// prove nothing). An unreadable entry ends the walk at the last address
/// known good.
fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |address: IpAddr| trusted.iter().any(|range| range.contains(address));
    if !is_trusted(peer) {
        return peer;
    }
    let chain: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for entry in chain.iter().rev() {
        match entry.parse::<IpAddr>() {
            Ok(address) => {
                client = address;
                if !is_trusted(address) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    client
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
        .unwrap_or_else(new_request_id)
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

/// A later delivery must carry the body the key was claimed with (or
/// `on_mismatch = "replay"`).
fn check_body(route: &RouteConfig, record: &Record, body_sha256: &str) -> Result<(), GatewayError> {
    if record.body_sha256 != body_sha256 && route.on_mismatch == OnMismatch::Reject {
        return Err(GatewayError::PayloadMismatch);
    }
    Ok(())
}

/// Answer a duplicate of a completed event.
fn replay(
    route: &RouteConfig,
    record: &Record,
    body_sha256: &str,
) -> Result<Response<Full<Bytes>>, GatewayError> {
    check_body(route, record, body_sha256)?;
    let recorded = record.response.as_ref().ok_or(GatewayError::Internal)?;
    Ok(recorded.replay())
}

/// The answer of an async route: `accept_status` and a small JSON body;
/// `Idempotent-Replayed: true` for a duplicate.
/// The gateway's own answer to a sender's handshake.
fn handshake_response(handshake: Handshake) -> Response<Full<Bytes>> {
    match handshake.body {
        Some(body) => json_response(handshake.status, &body),
        None => {
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = handshake.status;
            response
        }
    }
}

fn accepted(settings: &AsyncDelivery, key: &str, replayed: bool) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "accepted": true, "key": key });
    let mut response = json_response(settings.accept_status, &body);
    if replayed {
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// Answer a delivery of a dead letter: `dead_letter_status` (202 by
/// default, which stops the sender's retries) and a JSON body saying the
/// event is parked; nothing is forwarded.
fn dead_letter(
    route: &RouteConfig,
    record: &Record,
    body_sha256: &str,
) -> Result<Response<Full<Bytes>>, GatewayError> {
    check_body(route, record, body_sha256)?;
    let body = serde_json::json!({
        "event": {
            "state": "dead",
            "attempts": record.attempts,
            "message": "the upstream failed this event max_attempts times; it is parked as a \
                        dead letter for an operator to redeliver, and not forwarded again",
        }
    });
    let mut response = json_response(route.dead_letter_status, &body);
    response
        .headers_mut()
        .insert(HOOKGATE_EVENT_STATE, HeaderValue::from_static("dead"));
    Ok(response)
}

/// What the delivery that caused the upstream call gets back: the upstream's
/// own answer (its outcome `forwarded` when final), or the error that says
/// what happened to the call.
fn settle_sender(
    result: Result<UpstreamResponse, UpstreamError>,
    forwarded: Outcome,
) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
    let answer = result.map_err(|error| match error {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout,
        UpstreamError::NotDelivered(_) | UpstreamError::Broken(_) => {
            GatewayError::UpstreamUnreachable
        }
    })?;
    let outcome = if !policy::is_final(answer.status) {
        Outcome::UpstreamError
    } else if answer.body_read == BodyRead::BrokeOff {
        // Recorded (the upstream did the work), but this sender would get a
        // truncated body: say so instead.
        return Err(GatewayError::UpstreamBodyIncomplete);
    } else {
        forwarded
    };
    let mut response = Response::new(Full::new(answer.body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    Ok((response, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_the_first_untrusted_hop_from_the_right() {
        let trusted: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let headers = |chain: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(X_FORWARDED_FOR, HeaderValue::from_str(chain).unwrap());
            headers
        };
        let client = |peer: IpAddr, chain: &str| client_address(peer, &headers(chain), &trusted);
        assert_eq!(
            client(peer, "203.0.113.9"),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client(peer, "198.51.100.1, 203.0.113.9, 10.0.0.7"),
            "203.0.113.9".parse::<IpAddr>().unwrap(),
            "a forged left part is ignored; trusted hops are skipped"
        );
        let stranger: IpAddr = "192.0.2.5".parse().unwrap();
        assert_eq!(
            client(stranger, "10.0.0.9"),
            stranger,
            "only trusted peers' headers count"
        );
        assert_eq!(client(peer, "garbage"), peer);
        assert_eq!(client_address(peer, &HeaderMap::new(), &trusted), peer);
    }
}
