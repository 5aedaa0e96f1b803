//! Asynchronous delivery (SPEC §7): the workers that every gateway instance
//! runs for its `delivery = "async"` routes.
//!
//! A worker pass leases the events that are due — accepted and waiting, due
//! again after a failed attempt, or held by a worker whose lease lapsed (it
//! crashed) — with a fencing token each, exactly as a delivery claims a key,
//! and forwards each with the route's idempotency header, the event's own
//! key on every attempt. The outcome is settled as any attempt's is
//! (`Gateway::settle`): a final answer is recorded; otherwise the next
//! attempt is queued after an exponential backoff with full jitter, until
//! `max_attempts` or `max_age` parks the event as a dead letter.
//!
//! `max_in_flight` bounds the route's concurrent upstream calls in this
//! instance (a fleet of N calls at most N × `max_in_flight`). Traffic
//! control (SPEC §9) decides how many may start in a pass: none while the
//! route is paused or its circuit breaker open, one while the breaker
//! probes, no more than the rate limit's tokens. Workers wake
//! when an event is accepted here or a delivery ends, and poll every
//! quarter second for the rest (events accepted by other instances, retries coming due). At
//! shutdown they stop leasing; running deliveries are claims like any
//! other, so the drain waits for them and releases the unfinished ones back
//! to the queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::{AsyncDelivery, DeliveryMode};
use crate::headers::new_request_id;
use crate::pipeline::{succeeded, Gateway, Settled};
use crate::route::Route;
use crate::store::{Clock, Due, Failure, FailureClass};
use crate::telemetry::SpanFacts;
use crate::traffic::Admission;
use crate::upstream::resend;

/// How often workers look for due events they were not woken for.
const POLL: Duration = Duration::from_millis(250);

/// The workers' shared state in a gateway: their wake-up call and each
/// route's bound on concurrent upstream calls.
#[derive(Default)]
pub struct Workers {
    wake: Notify,
    permits: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
}

impl Workers {
    /// An event was accepted: look for due events now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The semaphore bounding `route`'s calls (a new one when its
    /// `max_in_flight` changed in a reload).
    fn permits(&self, route: &str, max_in_flight: usize) -> Arc<Semaphore> {
        let mut permits = self
            .permits
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let entry = permits
            .entry(route.to_owned())
            .or_insert_with(|| (max_in_flight, Arc::new(Semaphore::new(max_in_flight))));
        if entry.0 != max_in_flight {
            *entry = (max_in_flight, Arc::new(Semaphore::new(max_in_flight)));
        }
        Arc::clone(&entry.1)
    }

    /// Deliveries running now in this instance, per route.
    pub fn delivering(&self) -> Vec<(String, usize)> {
        let permits = self
            .permits
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        permits
            .iter()
            .map(|(route, (max, semaphore))| (route.clone(), max - semaphore.available_permits()))
            .collect()
    }
}

/// Run the workers until `stop` resolves.
pub async fn run(gateway: Arc<Gateway>, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let busy = pass(&gateway).await;
        if busy {
            // More may be due: go on at once, but let requests through.
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            () = &mut stop => return,
            () = gateway.workers().wake.notified() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// One pass over the async routes; `true` when some route leased as many
/// events as it had room for (more may be waiting).
async fn pass(gateway: &Arc<Gateway>) -> bool {
    let mut busy = false;
    for route in gateway.routes() {
        let DeliveryMode::Async(settings) = &route.delivery else {
            continue;
        };
        // A paused route holds its queue (and every route holds until this
        // instance has read the pauses once: a restart never delivers
        // from a paused route).
        let pauses = gateway.pauses();
        if !pauses.known() || pauses.is_paused(&route.name) {
            continue;
        }
        let permits = gateway
            .workers()
            .permits(&route.name, settings.max_in_flight);
        let room = permits.available_permits();
        if room == 0 {
            continue;
        }
        // The breaker and the rate limit decide how many calls may start.
        let admissions = route.controls.admit_many(room);
        if admissions.is_empty() {
            continue;
        }
        let leasing = admissions.len();
        let due = match gateway
            .store()
            .lease_due(&route.scope, leasing, route.processing_ttl)
            .await
        {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(route = %route.name, %error, "could not lease due events");
                continue;
            }
        };
        busy |= leasing == room && due.len() == room;
        // Admissions left over (fewer events were due) are given back.
        for (event, admission) in due.into_iter().zip(admissions) {
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                break; // cannot happen: this loop alone takes permits
            };
            // Routes sharing a scope: the event goes to the route that
            // accepted it, while it is configured and async.
            let owner = event
                .record
                .route
                .as_deref()
                .and_then(|name| gateway.route(name))
                .filter(|owner| matches!(owner.delivery, DeliveryMode::Async(_)))
                .unwrap_or_else(|| Arc::clone(&route));
            tokio::spawn(deliver(
                Arc::clone(gateway),
                owner,
                event,
                (permit, admission),
            ));
        }
    }
    busy
}

/// One attempt at one leased event.
async fn deliver(
    gateway: Arc<Gateway>,
    route: Arc<Route>,
    due: Due,
    (_permit, admission): (OwnedSemaphorePermit, Admission),
) {
    let key = gateway.store().key(&route.scope, &due.id);
    let first_seen_ms = due.record.first_seen_ms;
    let mut claim = gateway.claim_for(&route, key, due.lease);
    let Some(request) = due.record.request else {
        tracing::error!(route = %route.name, key = %due.id, "an async event without its request; leaving it to its lease");
        return;
    };
    if let DeliveryMode::Async(settings) = &route.delivery {
        if let Some(why) = spent(&route, settings, claim.attempt(), first_seen_ms) {
            // Never called again: a poison event whose attempts keep dying
            // with their gateway would otherwise be retried forever.
            tracing::warn!(route = %route.name, key = %due.id, why, "event parked as a dead letter before another attempt");
            route.dead_letters.inc();
            let failure = Failure {
                class: FailureClass::Unknown,
                status: None,
                request: &request,
                route: &route.name,
                dead: true,
                hold: false,
                retention: route.dead_letter_retention,
                retry_in: None,
            };
            claim.fail(&failure).await;
            gateway
                .metrics()
                .delivery_attempts
                .with_label_values(&[&route.name, Settled::Dead.as_str()])
                .inc();
            return;
        }
    }
    let request_id = new_request_id();
    let trace = (gateway.telemetry()).delivery("webhook delivery attempt", &HeaderMap::new());
    let mut upstream_request = resend(&route, request.clone(), Some(&due.id), &request_id);
    trace.inject(upstream_request.headers_mut());
    let (result, elapsed) = claim.renewing(gateway.call(&route, upstream_request)).await;
    admission.settle(succeeded(&result));
    let settled = gateway
        .settle(&route, claim, &result, || request, Some(first_seen_ms))
        .await;
    trace.finish(SpanFacts {
        route: &route.name,
        outcome: settled.as_str(),
        status: result.as_ref().ok().map(|answer| answer.status.as_u16()),
        key: Some(&due.id),
        store: None,
        upstream: Some(elapsed),
    });
    gateway
        .metrics()
        .delivery_attempts
        .with_label_values(&[&route.name, settled.as_str()])
        .inc();
    // A permit comes free with this task's end: look for more at once
    // rather than at the next poll.
    gateway.workers().wake();
    if let Settled::Retrying(after) = settled {
        tracing::info!(route = %route.name, key = %due.id, retry_in_ms = after.as_millis() as u64, "delivery failed; retrying later");
    }
}

/// Why a leased event must not be attempted again, if it must not: its
/// earlier attempts all ended without a settlement (their gateways died
/// mid-call), so this lease is past `max_attempts`; or it has waited past
/// `max_age` (workers were down, say).
fn spent(
    route: &Route,
    settings: &AsyncDelivery,
    attempt: u32,
    first_seen_ms: u64,
) -> Option<&'static str> {
    if route.max_attempts > 0 && attempt > route.max_attempts {
        Some("leased more often than max_attempts")
    } else if past_max_age(settings, first_seen_ms) {
        Some("older than max_age")
    } else {
        None
    }
}

/// Whether an event accepted at `first_seen_ms` has waited `max_age`.
pub fn past_max_age(settings: &AsyncDelivery, first_seen_ms: u64) -> bool {
    let age = Clock::system().now_ms().saturating_sub(first_seen_ms);
    Duration::from_millis(age) >= settings.max_age
}

/// The wait before attempt `attempt + 1`: exponential from
/// `backoff_initial`, capped at `backoff_max`, with full jitter (a random
/// wait below the ceiling, so a burst of failures does not retry in step).
pub fn backoff(settings: &AsyncDelivery, attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    let ceiling = settings
        .backoff_initial
        .saturating_mul(1 << doublings)
        .min(settings.backoff_max);
    let millis = ceiling.as_millis().max(1) as u64;
    Duration::from_millis(rand::random::<u64>() % millis + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn backoff_doubles_up_to_its_cap_with_full_jitter() {
        let settings = AsyncDelivery {
            accept_status: StatusCode::ACCEPTED,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(10),
            max_age: Duration::from_secs(3600),
            max_in_flight: 1,
            respond_within: None,
        };
        for (attempt, ceiling) in [
            (1, 1_000),
            (2, 2_000),
            (3, 4_000),
            (4, 8_000),
            (5, 10_000),
            (40, 10_000),
        ] {
            let waits: Vec<u128> = (0..200)
                .map(|_| backoff(&settings, attempt).as_millis())
                .collect();
            assert!(
                waits.iter().all(|w| *w >= 1 && *w <= ceiling),
                "{attempt}: {waits:?}"
            );
            let spread = waits.iter().max().unwrap() - waits.iter().min().unwrap();
            assert!(spread > ceiling / 2, "jittered across the range: {attempt}");
        }
    }
}
