//! The life of one webhook delivery, on one screen (docs/guide/what-a-sender-sees.md, "What a
//! sender sees"): [`Gateway::handle`] runs the stages in order — route
//! (and admit the sender's address), read body, verify, extract key,
//! traffic control, claim, forward (renewing the claim), record or release
//! — and every stage either moves on or ends the request with a
//! [`GatewayError`]. The claim's life, from the store's answer to its end,
//! is one [`Claim`](crate::claim::Claim); the call and its settling are the
//! engine's one [`Attempt`]. The order is the security model: nothing
//! touches the store before the signature checks out, and nothing reaches
//! the upstream before the claim.
//!
//! The stages that only read (route to traffic control, and a duplicate
//! answered from the replay cache) run on the connection's own task; the
//! rest, from the claim on, in a task of its own ([`Gateway::deliver`]), so
//! that a sender hanging up cannot cancel a claimed delivery half way.
//!
//! [`request`] reads what the sender sent (body, client address, request
//! id); [`answer`] builds what hookgate answers itself; [`accept`] is an
//! async route's stage 5.

mod accept;
mod answer;
mod fetched;
mod filtered;
mod request;

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

pub use self::answer::Outcome;
use self::answer::{answer_sender, dead_letter, handshake_response, replay};
use self::request::{client_address, read_body, request_id};
use crate::config::{DeliveryMode, OnStoreError};
use crate::delivery::fanout::{self, Verdict};
use crate::delivery::places::Permit;
use crate::delivery::{policy, Attempt, Engine, Kind, Parts};
use crate::error::GatewayError;
use crate::headers::{lower_hex, X_REQUEST_ID};
use crate::key::{self, KeyError, OnMissingKey};
use crate::metrics::{RouteSeries, UNMATCHED};
use crate::route::{Route, Runtime};
use crate::server::{ConnectionInfo, Handler};
use crate::store::{ClaimOutcome, Lease, StoreError, StoreKey};
use crate::telemetry::{DeliverySpan, SpanFacts};
use crate::traffic::Admission;
use crate::upstream::{build_request, stored_request, Delivery};
use crate::verify::RequestLine;

/// The sender's entrance: every request of the public listener, through
/// the lifecycle's stages, onto the engine.
pub struct Gateway {
    engine: Arc<Engine>,
    /// The live routes, the store, the clock, metrics and telemetry.
    parts: Parts,
}

/// What one request's log line (and its trace span) reports, filled in as
/// the stages run.
struct RequestLog<'a> {
    route: &'a str,
    /// The route's metric series, once it is known.
    series: Option<&'a RouteSeries>,
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

/// A delivery whose signature checked out, owned, handed to the stages
/// that may write (their task outlives a sender hanging up).
struct Verified {
    route: Arc<Route>,
    parts: http::request::Parts,
    body: Bytes,
    key: Option<String>,
    body_sha256: String,
    verdict: Verdict,
    /// Traffic control's leave, when stage 4b took it.
    admission: Option<Admission>,
    request_id: HeaderValue,
    connection: ConnectionInfo,
    /// The sender's request, or an event reconciliation fetched.
    entrance: Kind,
}

/// What a delivery's task gives back: its answer, its store and upstream
/// times, and its span.
type Delivered = (
    Result<(Response<Full<Bytes>>, Outcome), GatewayError>,
    Option<Duration>,
    Option<Duration>,
    DeliverySpan,
);

/// What the claim stage decided.
enum Claimed {
    /// This delivery owns the key: forward it.
    New((StoreKey, Lease)),
    /// A duplicate of a completed event, answered from its record.
    Duplicate(Response<Full<Bytes>>),
    /// A delivery of a dead letter: answered, not forwarded.
    Dead(Response<Full<Bytes>>),
    /// The store is down and `on_error = "forward"`: forward unrecorded.
    Unprotected,
}

impl Gateway {
    pub fn new(engine: Arc<Engine>, parts: Parts) -> Self {
        Self { engine, parts }
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
            series: None,
            key: None,
            upstream: None,
            store: None,
            trace: self
                .parts
                .telemetry
                .delivery("webhook delivery", request.headers()),
        };
        let runtime = self.parts.routes.load();
        let (mut response, outcome) = match self
            .process(&runtime, request, connection, &request_id, &mut log)
            .await
        {
            Ok(done) => done,
            Err(error) => (error.to_response(), Outcome::of_error(&error)),
        };
        let elapsed = started.elapsed();
        match log.series {
            Some(series) => series.request_done(outcome.as_str(), elapsed),
            None => (self.parts.metrics).request_done(log.route, outcome.as_str(), elapsed),
        }
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
        runtime: &'a Arc<Runtime>,
        request: Request<Incoming>,
        connection: ConnectionInfo,
        request_id: &HeaderValue,
        log: &mut RequestLog<'a>,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        // 1. Route by exact path, then method.
        let route = runtime
            .routes
            .resolve(request.uri().path(), request.method())?;
        (log.route, log.series) = (&route.name, Some(&route.series));
        let _in_flight = InFlight::enter(&route.series);

        // 1b. Admit the sender by address, before reading anything (docs/guide/traffic-control.md, "Traffic control").
        if let Some(allowed) = &route.traffic.allow_from {
            let client = client_address(
                connection.peer.ip(),
                request.headers(),
                &runtime.trusted_proxies,
            );
            if !allowed.iter().any(|range| range.contains(client)) {
                return Err(GatewayError::SourceNotAllowed);
            }
        }

        // 1c. A sender's unsigned handshake (Meta's `hub.challenge`, X's
        //     CRC): answered here, with nothing read, claimed or forwarded.
        let (parts, body) = request.into_parts();
        let line = RequestLine {
            method: &parts.method,
            query: parts.uri.query(),
        };
        if let Some(answer) = route.verify.verifier.challenge(line, &parts.headers) {
            return Ok((handshake_response(answer?), Outcome::Handshake));
        }

        // 2. Read the body, bounded in size and time.
        let body = read_body(body, &parts.headers, runtime.limits).await?;

        // 3. Verify the signature on the raw bytes, before anything else
        //    (a key the sender publishes, AWS SNS's certificate, is fetched
        //    here from an allowed host). A verified handshake (Discord's
        //    PING, Zoom's URL validation, an SNS subscription) is answered
        //    here: nothing to claim, nothing to forward.
        let now = self.parts.clock.system_time();
        let checked = route
            .verify
            .verifier
            .check(line, &parts.headers, &body, now);
        if let Some(handshake) = checked.await? {
            return Ok((handshake_response(handshake), Outcome::Handshake));
        }

        // 4. Extract the idempotency key from what the signature covered. A
        //    keyless delivery is refused, or forwarded unclaimed where the
        //    sender never retries those (`on_missing_key`).
        let body_sha256 = lower_hex(&Sha256::digest(&body));
        let allowed = |name: &_| {
            route
                .verify
                .verifier
                .key_header_allowed(route.verify.scheme, &parts.headers, name)
        };
        let key = match key::extract(
            &route.keying.key,
            &parts.headers,
            &body,
            &body_sha256,
            allowed,
        ) {
            Ok(key) => Some(key),
            Err(KeyError::Missing) if route.keying.on_missing_key == OnMissingKey::Forward => None,
            Err(error) => return Err(error.into()),
        };
        log.key = key.clone();

        // 4a. The route's filter, or its destinations' filters, on the
        //     verified body (an event none takes is recorded in stage 5).
        let verdict = fanout::judge(route, &parts.headers, &body, &body_sha256);

        // 4b. Traffic control (docs/guide/traffic-control.md, "Traffic control"), for a sync
        //     route's forward: a paused route, an open circuit breaker or a
        //     spent rate limit refuse before anything is claimed; the
        //     senders' retries carry the event. 4c. A duplicate of an event
        //     this instance has seen completed is answered from the replay
        //     cache, here on the connection's own task: it writes nothing.
        let mut admission = None;
        if let (DeliveryMode::Sync, Some(key), Verdict::Forward) = (&route.delivery, &key, &verdict)
        {
            admission = Some(self.engine.admit(route)?);
            let store = &self.parts.store;
            if let Some(record) = store.replayed(&store.key(&route.keying.scope, key)) {
                return Ok((replay(route, &record, &body_sha256)?, Outcome::Replayed));
            }
        }

        // From here on the delivery may write to the store and call the
        // upstream: it runs in a task of its own, so that a sender hanging
        // up cannot cancel it half way (a claim taken and never settled).
        let event = Verified {
            route: Arc::clone(route),
            parts,
            body,
            key,
            body_sha256,
            verdict,
            admission,
            request_id: request_id.clone(),
            connection,
            entrance: Kind::Sync,
        };
        let trace = std::mem::replace(&mut log.trace, DeliverySpan::none());
        let (done, store, upstream, trace) = self.deliver_apart(runtime, event, trace).await?;
        (log.store, log.upstream, log.trace) = (store, upstream, trace);
        done
    }

    /// [`Gateway::deliver`] in a task of its own, so that whoever waits on
    /// it (a sender, a reconciliation pass) cannot cancel it half way:
    /// its answer, and what its log line and span report.
    async fn deliver_apart(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        event: Verified,
        trace: DeliverySpan,
    ) -> Result<Delivered, GatewayError> {
        let gateway = Arc::clone(self);
        let runtime = Arc::clone(runtime);
        // Boxed: the stages' future is large, and tokio would copy it into
        // the task (measured: replays +6-15% req/s; BENCHMARKS.md).
        let task = tokio::spawn(Box::pin(async move {
            let route = Arc::clone(&event.route);
            let mut log = RequestLog {
                route: &route.name,
                series: Some(&route.series),
                key: None,
                upstream: None,
                store: None,
                trace,
            };
            let done = gateway.deliver(&runtime, event, &mut log).await;
            (done, log.store, log.upstream, log.trace)
        }));
        task.await.map_err(|error| {
            tracing::error!(%error, "request task failed");
            GatewayError::Internal
        })
    }

    /// Stages 4a to 7, in the delivery's own task: record a filtered event,
    /// or store an async route's event, or claim, forward and settle.
    async fn deliver(
        &self,
        runtime: &Runtime,
        event: Verified,
        log: &mut RequestLog<'_>,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        let (route, key, body_sha256) = (&event.route, event.key, event.body_sha256);
        let connection = event.connection;

        // 4a. An event no filter takes is answered and recorded, never
        //     forwarded.
        let destinations = match (event.verdict, &key) {
            (Verdict::Filtered, Some(key)) => {
                return self.filtered(runtime, route, key, &body_sha256).await
            }
            // Nothing to hand each destination under.
            (Verdict::Destinations(_), None) => return Err(KeyError::Missing.into()),
            (Verdict::Destinations(names), Some(_)) => Some(names),
            _ => None,
        };

        // What is forwarded, built once: stored by an async route, sent by
        // a sync one.
        let delivery = Delivery {
            route,
            parts: &event.parts,
            body: event.body,
            key: key.as_deref(),
            request_id: &event.request_id,
            peer: &connection.peer_text,
            peer_trusted: (runtime.trusted_proxies.iter())
                .any(|range| range.contains(connection.peer.ip())),
            proto: connection.proto,
        };

        // 5. An async route answers once the event and its request are
        //    stored (docs/guide/async-delivery.md, "Asynchronous delivery"); its workers deliver it.
        if let (DeliveryMode::Async(settings), Some(key)) = (&route.delivery, &key) {
            let mut request = stored_request(&delivery);
            if let Some(names) = &destinations {
                fanout::mark(&mut request, names);
            }
            let accepting = Instant::now();
            let accepted = self
                .accept(route, settings, key, &body_sha256, request, log)
                .await;
            log.store.get_or_insert(accepting.elapsed());
            return accepted;
        }

        // 4b. Traffic control, unless stage 4c took it already.
        let admission = match event.admission {
            Some(admission) => admission,
            None => self.engine.admit(route)?,
        };

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
            let (result, elapsed) = self.engine.call(route, upstream_request).await;
            admission.report(policy::class_of(&result).is_none());
            log.upstream = Some(elapsed);
            let forwarded = match key {
                Some(_) => Outcome::Forwarded,
                None => Outcome::ForwardedUnkeyed,
            };
            return answer_sender(result, forwarded);
        };
        // A sync route's senders are bounded by the server's connection
        // limits, not by max_in_flight: no place is taken.
        let first_seen_ms = self.parts.clock.now_ms();
        let attempt = Attempt {
            admission,
            ..Attempt::new(Arc::clone(route), claim, event.entrance, first_seen_ms)
        };
        let attempted = self
            .engine
            .attempt(attempt, upstream_request, || stored_request(&delivery))
            .await;
        log.upstream = Some(attempted.elapsed);
        answer_sender(attempted.result, Outcome::Forwarded)
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
            .claim
            .replay_guard
            .then(|| self.parts.store.guard_key(&route.keying.scope, body_sha256));
        (self.parts.store.key(&route.keying.scope, key), guard_key)
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
            .parts
            .store
            .records()
            .claim(
                route
                    .claim_delivery(&store_key, body_sha256)
                    .guarded(guard_key.as_ref()),
            )
            .await;
        match outcome {
            Ok(ClaimOutcome::New(lease)) => Ok(Claimed::New((store_key, lease))),
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
            // A record that is there but does not open is never forwarded
            // around, whatever `on_error` says: the event was seen.
            Err(StoreError::Unreadable(_)) => Err(GatewayError::RecordUnreadable),
            Err(error) if runtime.on_store_error == OnStoreError::Forward => {
                tracing::warn!(route = %route.name, key, %error, "store unavailable; forwarding without deduplication");
                Ok(Claimed::Unprotected)
            }
            Err(error) => {
                tracing::warn!(route = %route.name, key, %error, "store unavailable; rejecting");
                Err(GatewayError::StoreUnavailable)
            }
        }
    }
}

impl Handler for Gateway {
    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        connection: ConnectionInfo,
    ) -> Response<Full<Bytes>> {
        Gateway::handle(&self, request, connection).await
    }

    fn begin_draining(&self) {
        self.engine.begin_draining();
    }

    async fn drain(
        &self,
        grace: Duration,
        connections: impl std::future::Future<Output = ()> + Send,
    ) {
        self.engine.drain(grace, connections).await;
    }
}

/// `hookgate_in_flight_requests{route}` for as long as it lives.
struct InFlight<'a>(Option<&'a prometheus::IntGauge>);

impl<'a> InFlight<'a> {
    fn enter(series: &'a RouteSeries) -> Self {
        let gauge = series.in_flight();
        gauge.inspect(|gauge| gauge.inc());
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.inspect(|gauge| gauge.dec());
    }
}
