//! Stage 5 of an async route (docs/guide/async-delivery.md, "Asynchronous delivery"): the event
//! and its request stored in one write before the sender hears
//! `accept_status`, a duplicate answered from what is stored, and the
//! hybrid's call (`respond_within`), forwarded at once from a task of its
//! own and settled like a worker's attempt.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;

use super::answer::{accepted, answer_sender, check_body, dead_letter, Outcome};
use super::{Gateway, Hybrid, RequestLog};
use crate::config::{AsyncDelivery, RouteConfig};
use crate::delivery::places::Place;
use crate::delivery::{policy, Attempt, Kind, Traced};
use crate::error::GatewayError;
use crate::route::Route;
use crate::store::{ClaimMode, ClaimOutcome, OrderSpot, StoreError, StoreKey, StoredRequest};
use crate::traffic::bounds::{Bounds, QUEUE_FULL_RETRY_AFTER};

impl Gateway {
    /// Whether a new event of `route` fits its queue — its own, each of
    /// its destinations', the store's (docs/guide/async-delivery.md, "Asynchronous delivery") —
    /// as last measured; if not, 503 `queue_full` with `Retry-After`, so
    /// the sender keeps it. A duplicate of an event already accepted is
    /// answered as before, so only a new one is looked up, and only when
    /// a queue is full.
    async fn has_room(&self, route: &Route, store_key: &StoreKey) -> Result<(), GatewayError> {
        let store_bytes = self.parts.routes.load().max_queued_bytes;
        let bounds = |route: &RouteConfig| {
            let queue = route.delivery.queue();
            Bounds {
                events: queue.max_queued,
                bytes: queue.max_queued_bytes,
            }
        };
        let full = (std::iter::once(&**route).chain(route.destinations.iter().map(|d| &**d)))
            .find_map(|queue| {
                (self.parts.queues).full(&queue.keying.scope, bounds(queue), store_bytes)
            });
        let Some(full) = full else {
            return Ok(());
        };
        if let Ok(Some(_)) = self.parts.store.records().get(store_key).await {
            return Ok(());
        }
        tracing::debug!(route = %route.name, bound = full.as_str(), "the queue is full: a new event waits with its sender");
        Err(GatewayError::QueueFull {
            retry_after: QUEUE_FULL_RETRY_AFTER,
        })
    }

    /// Stage 5 of an async route: store the event with its request in one
    /// write, then answer `accept_status` (never before: a 2xx promises the
    /// event cannot be lost). A duplicate of a queued, delivering or
    /// completed event gets the same answer, replayed; of a dead one, the
    /// dead-letter answer. With `respond_within`, the event is also claimed
    /// and forwarded at once: see [`Gateway::respond_within`].
    pub(super) async fn accept(
        &self,
        route: &Arc<Route>,
        settings: &AsyncDelivery,
        key: &str,
        body_sha256: &str,
        request: StoredRequest,
        log: &mut RequestLog<'_>,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        let (store_key, guard_key) = self.store_keys(route, key, body_sha256);
        self.has_room(route, &store_key).await?;
        // The hybrid forwards at once only when the route may call now
        // (one of its max_in_flight calls free, not paused, breaker closed,
        // a token to spend); otherwise the event just queues for the
        // workers.
        let hybrid = settings.respond_within.and_then(|_| {
            let permit = self
                .parts
                .places
                .gate(&route.name, settings.max_in_flight)
                .try_enter()?;
            Some((self.engine.admit(route).ok()?, permit))
        });
        // A route with destinations hands the event out at once, from a
        // task holding the event's claim, unless it is paused or ordered;
        // its workers do when this gateway cannot (paused, or gone), and
        // an ordered route's one entity's events at a time, in order.
        let hand_out = route.fans_out()
            && route.hand_out_order().is_none()
            && !self.parts.pauses.is_paused(&route.name);
        let mode = match hybrid.is_some() || hand_out {
            true => ClaimMode::AcceptClaimed,
            false => ClaimMode::Accept,
        };
        // An ordered route's event takes its place in its entity's order.
        let place = route.order_place(&request.headers, &request.body, body_sha256);
        let outcome = self
            .parts
            .store
            .records()
            .claim(
                (route.claim_acceptance(&store_key, body_sha256, &request, mode))
                    .guarded(guard_key.as_ref())
                    .ordered(place.as_ref().map(OrderSpot::at)),
            )
            .await;
        match outcome {
            Ok(ClaimOutcome::Queued) => {
                self.parts.places.wake();
                Ok((accepted(settings, key, false), Outcome::Accepted))
            }
            Ok(ClaimOutcome::New(lease)) if hand_out => {
                let event = (key.to_owned(), request, body_sha256.to_owned());
                let (engine, route) = (Arc::clone(&self.engine), Arc::clone(route));
                let claimed = (store_key, lease);
                tokio::spawn(async move { engine.hand_out(route, claimed, event).await });
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
                if let Ok(Some(record)) = self.parts.store.records().get(&store_key).await {
                    check_body(route, &record, body_sha256)?;
                }
                Ok((accepted(settings, key, true), Outcome::Replayed))
            }
            Ok(ClaimOutcome::Dead(record)) => Ok((
                dead_letter(route, &record, body_sha256)?,
                Outcome::DeadLetter,
            )),
            Err(StoreError::Unreadable(_)) => Err(GatewayError::RecordUnreadable),
            Err(error) => {
                // Never accepted without the store: an async route does not
                // forward unprotected, whatever `on_error` says.
                tracing::warn!(route = %route.name, key, %error, "store unavailable; rejecting");
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
        &self,
        route: &Arc<Route>,
        settings: &AsyncDelivery,
        claimed: Hybrid,
        key: &str,
        request: StoredRequest,
        log: &mut RequestLog<'_>,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        let (answered, answer) = tokio::sync::oneshot::channel();
        let engine = Arc::clone(&self.engine);
        let task_route = Arc::clone(route);
        let task_key = key.to_owned();
        let accepted_ms = self.parts.clock.now_ms();
        let trace = log.trace.headers();
        let Hybrid {
            key: store_key,
            lease,
            admission,
            permit,
        } = claimed;
        tokio::spawn(async move {
            let attempt = Attempt {
                admission,
                // One of the route's max_in_flight calls, until it ends.
                place: Place::Taken(permit),
                ..Attempt::new(task_route, (store_key, lease), Kind::Hybrid, accepted_ms)
            };
            let traced = Traced::Within(trace);
            let attempted = (engine.attempt_stored(attempt, &task_key, request, traced)).await;
            let _ = answered.send((attempted.result, attempted.elapsed));
        });
        let within = settings.respond_within.unwrap_or_default();
        match tokio::time::timeout(within, answer).await {
            Ok(Ok((Ok(answer), elapsed))) if policy::is_final(answer.status) => {
                log.upstream = Some(elapsed);
                answer_sender(Ok(answer), Outcome::Forwarded)
            }
            _ => Ok((accepted(settings, key, false), Outcome::Accepted)),
        }
    }
}
