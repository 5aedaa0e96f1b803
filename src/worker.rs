//! Asynchronous delivery: the workers that every gateway instance runs.
//!
//! Workers lease from the queue of every configured scope, whatever its
//! routes' modes are now: the queue owes each accepted event its delivery
//! even after a reload turned its route sync (a scope no route names any
//! more is not leased; its events wait, counted, until one does — see
//! docs/operations.md). A sync route's scope is leased by its defaults
//! (`max_in_flight = 16`, the default backoff).
//!
//! A worker pass leases the events that are due — accepted and waiting, due
//! again after a failed attempt, or held by a worker whose lease lapsed (it
//! crashed) — with a fencing token each, exactly as a delivery claims a key,
//! and forwards each with the route's idempotency header, the event's own
//! key on every attempt. The outcome is settled as any attempt's is
//! (`Gateway::attempt`): a final answer is recorded; otherwise the next
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use tokio::sync::Notify;

use crate::delivery::policy::{self, Rules};
use crate::delivery::{Attempt, Kind, Settled};
use crate::headers::new_request_id;
use crate::pipeline::Gateway;
use crate::route::Route;
use crate::store::{Clock, Due, Failure, FailureClass, Next, SyncNext};
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
    gates: Mutex<HashMap<String, Arc<Gate>>>,
}

/// A route's bound on its concurrent upstream calls in this instance
/// (`max_in_flight`), shared by its workers and its hybrid calls. A count
/// against a limit rather than a semaphore, so a reload that changes the
/// limit applies to the calls already running: lowering it admits no new
/// call until enough of them end.
#[derive(Debug, Default)]
pub struct Gate {
    limit: AtomicUsize,
    running: AtomicUsize,
}

/// One call's place under a route's [`Gate`], given back on drop.
pub struct Permit(Arc<Gate>);

impl Gate {
    /// A place for one more call, if the limit has room.
    pub fn try_enter(self: &Arc<Self>) -> Option<Permit> {
        let limit = self.limit.load(Ordering::Relaxed);
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < limit).then_some(running + 1)
            })
            .ok()?;
        Some(Permit(Arc::clone(self)))
    }

    /// How many more calls may start now.
    pub fn room(&self) -> usize {
        let limit = self.limit.load(Ordering::Relaxed);
        limit.saturating_sub(self.running.load(Ordering::Acquire))
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Workers {
    /// An event was accepted: look for due events now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The gate bounding `route`'s calls, its limit set to `max_in_flight`
    /// (the config of now: a reload changes it in place).
    pub fn gate(&self, route: &str, max_in_flight: usize) -> Arc<Gate> {
        let mut gates = self
            .gates
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let gate = gates.entry(route.to_owned()).or_default();
        gate.limit.store(max_in_flight, Ordering::Relaxed);
        Arc::clone(gate)
    }

    /// Deliveries running now in this instance, per route.
    pub fn delivering(&self) -> Vec<(String, usize)> {
        let gates = self
            .gates
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        gates
            .iter()
            .map(|(route, gate)| (route.clone(), gate.running()))
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

/// The route whose workers lease each scope's queue: its async route
/// (the first by name), else its first route. Every configured scope is
/// leased, whatever its routes' modes now: an event accepted before a
/// reload turned its route sync is still owed its delivery.
fn leasing_routes(routes: &[Arc<Route>]) -> Vec<Arc<Route>> {
    let mut by_scope: Vec<Arc<Route>> = Vec::new();
    for route in routes {
        match by_scope.iter_mut().find(|other| other.scope == route.scope) {
            Some(other) => {
                if !other.delivery.is_async() && route.delivery.is_async() {
                    *other = Arc::clone(route);
                }
            }
            None => by_scope.push(Arc::clone(route)),
        }
    }
    by_scope
}

/// One pass over every scope's queue; `true` when some scope leased as
/// many events as it had room for (more may be waiting).
async fn pass(gateway: &Arc<Gateway>) -> bool {
    let mut busy = false;
    let routes = gateway.routes();
    for route in leasing_routes(&routes) {
        let queue = route.delivery.queue();
        // A paused route holds its queue (and every route holds until this
        // instance has read the pauses once: a restart never delivers
        // from a paused route).
        let pauses = gateway.pauses();
        if !pauses.known() || pauses.is_paused(&route.name) {
            continue;
        }
        let gate = gateway.workers().gate(&route.name, queue.max_in_flight);
        let room = gate.room();
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
            let Some(permit) = gate.try_enter() else {
                break; // cannot happen: this loop alone enters while room lasts
            };
            // Routes sharing a scope: the event goes to the route that
            // accepted it, while it is configured.
            let owner = event
                .record
                .route
                .as_deref()
                .and_then(|name| gateway.route(name))
                .filter(|owner| owner.scope == route.scope)
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
    (_permit, admission): (Permit, Admission),
) {
    let key = gateway.store().key(&route.scope, &due.id);
    let first_seen_ms = due.record.first_seen_ms;
    let claim = gateway.claim_for(&route, key, due.lease);
    let Some(request) = due.record.request else {
        tracing::error!(route = %route.name, key = %due.id, "an async event without its request; leaving it to its lease");
        return;
    };
    let now_ms = Clock::system().now_ms();
    if let Some(why) = policy::spent(&Rules::of(&route), claim.attempt(), first_seen_ms, now_ms) {
        // Never called again: a poison event whose attempts keep dying
        // with their gateway would otherwise be retried forever.
        tracing::warn!(route = %route.name, key = %due.id, why, "event parked as a dead letter before another attempt");
        let failure = Failure {
            class: FailureClass::Unknown,
            status: None,
            request: &request,
            route: &route.name,
            retention: route.dead_letter_retention,
            next: Next {
                sync: SyncNext::Dead,
                queued: None,
            },
        };
        if claim.fail(&failure).await.is_some() {
            route.dead_letters.inc();
        }
        gateway
            .metrics()
            .delivery_attempts
            .with_label_values(&[&route.name, Settled::Dead.as_str()])
            .inc();
        return;
    }
    let request_id = new_request_id();
    let trace = (gateway.telemetry()).delivery("webhook delivery attempt", &HeaderMap::new());
    let mut upstream_request = resend(&route, request.clone(), Some(&due.id), &request_id);
    trace.inject(upstream_request.headers_mut());
    let attempt = Attempt {
        route: Arc::clone(&route),
        claim,
        admission,
        kind: Kind::Worker,
        first_seen_ms,
        was_dead: false,
    };
    let attempted = gateway.attempt(attempt, upstream_request, || request).await;
    let settled = attempted.settled;
    trace.finish(SpanFacts {
        route: &route.name,
        outcome: settled.as_str(),
        status: (attempted.result.as_ref().ok()).map(|answer| answer.status.as_u16()),
        key: Some(&due.id),
        store: None,
        upstream: Some(attempted.elapsed),
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
