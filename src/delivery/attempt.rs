//! One attempt at one claimed event, whatever its entrance: the upstream
//! call while the claim renews, the outcome classified, what comes next
//! decided by [`policy`](super::policy), and the claim ended by it.
//!
//! Every entrance — a sender's delivery, the hybrid `respond_within`, an
//! async worker, an operator's redelivery or replay — builds an
//! [`Attempt`] and runs it with [`Engine::attempt`] (a live request) or
//! [`Engine::attempt_stored`] (a stored one); nothing else calls the
//! upstream for a claimed event, and nothing else renews a claim. The
//! entrances differ only in what they build: what they claimed, the
//! admission traffic control gave, their place, when the event was first
//! seen, and their [`Kind`]. The attempt owns its envelope: the claim, the
//! outbound request of a stored event, its span, its place under
//! `max_in_flight`, and one count in `hookgate_attempts_total{entrance}`.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, StatusCode};
use http_body_util::Full;
use rand::Rng;

use super::places::Place;
use super::policy::{self, Entrance, Rules};
use super::Engine;
use crate::claim::{Claim, Recording};
use crate::headers::new_request_id;
use crate::replay::RecordedResponse;
use crate::route::Route;
use crate::store::{
    AttemptKind, Failure, FailureClass, Lease, Next, PastAttempt, RecordState, StoreKey,
    StoredRequest,
};
use crate::telemetry::SpanFacts;
use crate::traffic::Admission;
use crate::upstream::{resend, UpstreamError, UpstreamResponse};

/// Which entrance made an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The sender's own request, waiting for the answer.
    Sync,
    /// `respond_within`: the sender waits a while, then the call runs on.
    Hybrid,
    /// An async worker's lease.
    Worker,
    /// An operator's redelivery (same key).
    Redeliver,
    /// An operator's replay (new key).
    Replay,
    /// An event fetched from the sender's API by reconciliation (docs/guide/reconciliation.md,
    /// "Reconciliation"), delivered as the sender's own would be.
    Reconcile,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sync => "sync",
            Kind::Hybrid => "hybrid",
            Kind::Worker => "worker",
            Kind::Redeliver => "redeliver",
            Kind::Replay => "replay",
            Kind::Reconcile => "reconcile",
        }
    }

    /// The entrance as a record's history names it.
    fn recorded(self) -> AttemptKind {
        match self {
            // The sender's event, as its API lists it: recorded as the
            // sender's, which every release reads (a rolling upgrade
            // mixes them).
            Kind::Sync | Kind::Reconcile => AttemptKind::Sender,
            Kind::Hybrid => AttemptKind::Hybrid,
            Kind::Worker => AttemptKind::Worker,
            Kind::Redeliver | Kind::Replay => AttemptKind::Operator,
        }
    }

    /// Whether a sender waits on this attempt: then a recording the store
    /// does not take at once finishes in a task of its own, and the sender
    /// gets the upstream's answer now.
    fn sender_waits(self) -> bool {
        matches!(self, Kind::Sync | Kind::Hybrid)
    }
}

/// What an entrance hands over for one attempt.
pub struct Attempt {
    pub route: Arc<Route>,
    /// The key the entrance claimed, and the lease the store granted: the
    /// attempt holds the claim from here to its settlement.
    pub claimed: (StoreKey, Lease),
    /// Leave for this call from traffic control (pause, breaker, rate),
    /// told how the call went.
    pub admission: Admission,
    /// Its place under the route's `max_in_flight`, held to the call's end.
    pub place: Place,
    pub kind: Kind,
    /// Unix ms the event was first seen: the queue's `max_age` counts from
    /// it.
    pub first_seen_ms: u64,
    /// The record was a dead letter (an operator's redelivery of one): a
    /// failure leaves it dead again, never spends a sender's attempts.
    pub was_dead: bool,
}

impl Attempt {
    /// An attempt of `kind` on what was `claimed`, of an event first seen
    /// at `first_seen_ms`: with no leave from traffic control and no place
    /// under `max_in_flight` (set those fields where the entrance has them).
    pub fn new(
        route: Arc<Route>,
        claimed: (StoreKey, Lease),
        kind: Kind,
        first_seen_ms: u64,
    ) -> Self {
        Attempt {
            route,
            claimed,
            admission: Admission::default(),
            place: Place::Free,
            kind,
            first_seen_ms,
            was_dead: false,
        }
    }
}

/// Whose span an attempt on a stored request is traced in.
pub enum Traced {
    /// A span of its own, `webhook delivery attempt` (a worker's, an
    /// operator's).
    Own,
    /// The span of the request a sender waits on (the hybrid's): the
    /// headers that carry it upstream.
    Within(Vec<(HeaderName, HeaderValue)>),
}

/// What settling a failed attempt needs to know of it.
struct Failed {
    class: FailureClass,
    elapsed: Duration,
    kind: Kind,
    first_seen_ms: u64,
    was_dead: bool,
}

/// What a failed attempt leaves on its record, owned: its recording may
/// finish in a task of its own while a sender has its answer.
struct FailureRecord {
    class: FailureClass,
    status: Option<u16>,
    request: StoredRequest,
    attempt: PastAttempt,
    route: Arc<Route>,
    next: Next,
}

impl FailureRecord {
    fn failure(&self) -> Failure<'_> {
        Failure {
            class: self.class,
            status: self.status,
            request: &self.request,
            attempt: &self.attempt,
            route: &self.route.name,
            retention: self.route.failures.dead_letter_retention,
            next: self.next,
        }
    }
}

/// What one attempt did.
pub struct Attempted {
    pub result: Result<UpstreamResponse, UpstreamError>,
    pub elapsed: Duration,
    pub settled: Settled,
}

/// How an attempt left its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The upstream's final answer, recorded.
    Completed(StatusCode),
    Failed,
    Dead,
    /// An accepted event's next attempt is queued, this far ahead.
    Retrying(Duration),
    /// An operator's redelivery of a queued event: due now, for its
    /// workers.
    Queued,
    /// The store did not answer while the sender waited: recording goes
    /// on in a task of its own.
    Recording,
    /// Not recorded: the lease was lost, or the store never answered before
    /// it ran out (the next delivery is forwarded again).
    Unrecorded,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Completed(_) => "completed",
            Settled::Failed => "failed",
            Settled::Dead => "dead",
            Settled::Retrying(_) => "retrying",
            Settled::Queued => "queued",
            Settled::Recording => "recording",
            Settled::Unrecorded => "unrecorded",
        }
    }
}

impl Engine {
    /// Run `attempt`: call the upstream with `request` while renewing the
    /// claim, then settle the claim by what the upstream is known to have
    /// done — final → recorded; otherwise failed, queued again or dead, by
    /// the record's duty (see [`policy`]). `stored` is the request a
    /// failed record keeps, built only on failure.
    pub(crate) async fn attempt(
        &self,
        attempt: Attempt,
        request: Request<Full<Bytes>>,
        stored: impl FnOnce() -> StoredRequest,
    ) -> Attempted {
        let Attempt {
            route,
            claimed: (key, lease),
            admission,
            place,
            kind,
            first_seen_ms,
            was_dead,
        } = attempt;
        let mut claim = self.claim_for(&route, key, lease);
        let call = async {
            // Waiting for a place is part of holding the claim: its lease
            // is renewed, so no other entrance takes the event meanwhile.
            let place = place.take().await;
            (self.call(&route, request).await, place)
        };
        // The place is held until the attempt is settled: the next call
        // starts only once the breaker has counted this one.
        let ((result, elapsed), _place) = claim.renewing(call).await;
        let class = policy::class_of(&result);
        admission.report(class.is_none());
        let settled = match (&result, class) {
            (Ok(answer), None) => {
                let recorded = RecordedResponse::record(
                    answer.status,
                    &answer.headers,
                    &answer.body,
                    answer.body_read,
                    route.claim.max_cached_body_bytes,
                );
                complete(claim, recorded, route.claim.retention, kind).await
            }
            (_, class) => {
                let class = class.unwrap_or(FailureClass::Unknown);
                let failed = Failed {
                    class,
                    elapsed,
                    kind,
                    first_seen_ms,
                    was_dead,
                };
                // Boxed: the failure path is the cold one, and its state
                // (the stored request, the recording's retries) would
                // otherwise grow every request's future.
                Box::pin(self.settle_failure(&route, claim, &result, failed, stored)).await
            }
        };
        self.count(&route, kind, settled);
        Attempted {
            result,
            elapsed,
            settled,
        }
    }

    /// Count a settled attempt, once, where it settles: in
    /// `hookgate_attempts_total` by its entrance, and in the family its
    /// entrance always had — the async attempts of accepted events (worker
    /// and hybrid, whether or not a sender waited) or the operator's
    /// redeliveries and replays.
    pub(super) fn count(&self, route: &Route, kind: Kind, settled: Settled) {
        let metrics = &self.parts.metrics;
        let (name, destination) = (route.route_name(), route.destination_name());
        route.series.attempt(kind.as_str(), settled.as_str());
        match kind {
            Kind::Worker | Kind::Hybrid => {
                let labels = [name, destination, settled.as_str()];
                metrics.delivery_attempts.with_label_values(&labels).inc();
            }
            Kind::Redeliver | Kind::Replay => {
                let labels = [name, destination, kind.as_str(), settled.as_str()];
                metrics.redeliveries.with_label_values(&labels).inc();
            }
            Kind::Sync | Kind::Reconcile => {}
        }
    }

    /// [`Engine::attempt`] on a stored request — a worker's, the hybrid's,
    /// an operator's: the outbound request is built here, under `key` (the
    /// event's own, or a replay's), with a request id of its own, in the
    /// span `traced` says.
    pub(crate) async fn attempt_stored(
        &self,
        attempt: Attempt,
        key: &str,
        request: StoredRequest,
        traced: Traced,
    ) -> Attempted {
        let route = Arc::clone(&attempt.route);
        let mut outbound = resend(&route, request.clone(), Some(key), &new_request_id());
        let (span, headers) = match traced {
            Traced::Own => {
                let span = (self.parts.telemetry)
                    .delivery("webhook delivery attempt", &Default::default());
                let headers = span.headers();
                (Some(span), headers)
            }
            Traced::Within(headers) => (None, headers),
        };
        for (name, value) in headers {
            outbound.headers_mut().insert(name, value);
        }
        let attempted = self.attempt(attempt, outbound, || request).await;
        if let Some(span) = span {
            span.finish(SpanFacts {
                route: &route.name,
                outcome: attempted.settled.as_str(),
                status: (attempted.result.as_ref().ok()).map(|answer| answer.status.as_u16()),
                key: Some(key),
                store: None,
                upstream: Some(attempted.elapsed),
            });
        }
        attempted
    }

    /// Settle a failed attempt: what comes next by the policy, both futures
    /// handed to the store, which applies the record's.
    async fn settle_failure(
        &self,
        route: &Arc<Route>,
        claim: Claim,
        result: &Result<UpstreamResponse, UpstreamError>,
        failed: Failed,
        stored: impl FnOnce() -> StoredRequest,
    ) -> Settled {
        let Failed {
            class,
            elapsed,
            kind,
            first_seen_ms,
            was_dead,
        } = failed;
        let status = result.as_ref().ok().map(|answer| answer.status.as_u16());
        if let Err(error) = result {
            tracing::warn!(route = %route.name, key = %claim.key().id(), %error, "upstream call failed");
        }
        let now_ms = self.parts.clock.now_ms();
        let tried = past_attempt(result, kind, class, elapsed, now_ms);
        let attempt_no = claim.attempt();
        let entrance = match kind {
            Kind::Redeliver | Kind::Replay => Entrance::Operator { was_dead },
            _ => Entrance::Delivery,
        };
        let random = rand::thread_rng().gen::<u64>();
        let rules = Rules::of(route);
        let next = policy::next(
            &rules,
            entrance,
            attempt_no,
            class,
            first_seen_ms,
            now_ms,
            random,
        );
        let failed = FailureRecord {
            class,
            status,
            request: stored(),
            attempt: tried,
            route: Arc::clone(route),
            next,
        };
        let key = claim.key().id().to_owned();
        let state = match claim.try_fail(&failed.failure()).await {
            Recording::Done(state) => state,
            Recording::Again(claim) if kind.sender_waits() => {
                tokio::spawn(async move { claim.fail(&failed.failure()).await });
                return Settled::Recording;
            }
            Recording::Again(claim) => claim.fail(&failed.failure()).await,
        };
        let settled = match state {
            Some(RecordState::Queued) => Settled::Retrying(next.queued.unwrap_or_default()),
            Some(RecordState::Dead) => Settled::Dead,
            Some(_) => Settled::Failed,
            None => Settled::Unrecorded,
        };
        if settled == Settled::Dead {
            route.series.dead_letters.inc();
            tracing::warn!(route = %route.name, key, attempts = attempt_no,
                class = class.as_str(), "event parked as a dead letter");
            (self.parts.notices).dead_letter(
                route,
                &key,
                attempt_no,
                &failed.attempt,
                &failed.request,
            );
        }
        settled
    }

    /// One upstream call, timed and counted by how it ended — the answer's
    /// status class, or a timeout, an unreachable upstream, a connection
    /// broken mid-call.
    pub(crate) async fn call(
        &self,
        route: &Route,
        request: Request<Full<Bytes>>,
    ) -> (Result<UpstreamResponse, UpstreamError>, Duration) {
        let called = Instant::now();
        let result = route
            .upstream
            .send(request, route.call.upstream_timeout)
            .await;
        let elapsed = called.elapsed();
        let class = match &result {
            Ok(answer) => match answer.status.as_u16() {
                200..=299 => "2xx",
                300..=399 => "3xx",
                400..=499 => "4xx",
                _ => "5xx",
            },
            Err(error) => error.label(),
        };
        route.series.upstream_attempt(class, elapsed);
        (result, elapsed)
    }
}

/// Record the final answer: once here; when the store does not take it and
/// a sender waits, the rest of the tries run in a task of their own (for as
/// long as the lease protects the event), so the sender has its answer now.
async fn complete(
    claim: Claim,
    recorded: RecordedResponse,
    retention: Duration,
    kind: Kind,
) -> Settled {
    let status = recorded.status;
    match claim.try_complete(&recorded, retention).await {
        Recording::Done(true) => Settled::Completed(status),
        Recording::Done(false) => Settled::Unrecorded,
        Recording::Again(claim) if kind.sender_waits() => {
            tokio::spawn(async move { claim.complete(&recorded, retention).await });
            Settled::Recording
        }
        // Boxed, like the failure path: the store did not answer, the cold
        // path.
        Recording::Again(claim) => match Box::pin(claim.complete(&recorded, retention)).await {
            true => Settled::Completed(status),
            false => Settled::Unrecorded,
        },
    }
}

/// The attempt that ended `elapsed` after it started, as its record keeps
/// it.
fn past_attempt(
    result: &Result<UpstreamResponse, UpstreamError>,
    kind: Kind,
    class: FailureClass,
    elapsed: Duration,
    now_ms: u64,
) -> PastAttempt {
    let took = elapsed.as_millis() as u64;
    let status = result.as_ref().ok().map(|answer| answer.status.as_u16());
    PastAttempt::new(
        now_ms.saturating_sub(took),
        kind.recorded(),
        class,
        status,
        took,
        result.as_ref().err().map(ToString::to_string),
        result.as_ref().map_or(&[][..], |answer| &answer.body),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;

    use super::{Kind, Settled};
    use crate::metrics::{ATTEMPT_KINDS, SETTLEMENTS};

    /// Every entrance and settlement has its slot in a route's cached
    /// `hookgate_attempts_total` series (metrics/route.rs).
    #[test]
    fn every_label_of_an_attempt_is_known_to_the_route_series() {
        let kinds = [
            Kind::Sync,
            Kind::Hybrid,
            Kind::Worker,
            Kind::Redeliver,
            Kind::Replay,
            Kind::Reconcile,
        ];
        let settled = [
            Settled::Completed(StatusCode::OK),
            Settled::Failed,
            Settled::Dead,
            Settled::Retrying(Duration::ZERO),
            Settled::Queued,
            Settled::Recording,
            Settled::Unrecorded,
        ];
        assert_eq!(kinds.map(Kind::as_str), ATTEMPT_KINDS);
        assert_eq!(settled.map(Settled::as_str), SETTLEMENTS);
    }
}
