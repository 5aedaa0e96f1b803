//! Asynchronous delivery: the workers that every gateway instance runs.
//!
//! Workers lease from the queue of every configured scope, whatever its
//! routes' modes are now: the queue owes each accepted event its delivery
//! even after a reload turned its route sync (a scope no route names any
//! more is not leased; its events wait, counted, until one does — see
//! docs/operations/README.md). A sync route's scope is leased by its defaults
//! (`max_in_flight = 16`, the default backoff).
//!
//! A worker pass leases the events that are due — accepted and waiting, due
//! again after a failed attempt, or held by a worker whose lease lapsed (it
//! crashed) — with a fencing token each, exactly as a delivery claims a key,
//! and forwards each with the route's idempotency header, the event's own
//! key on every attempt. The outcome is settled as any attempt's is
//! (`Engine::attempt`): a final answer is recorded; otherwise the next
//! attempt is queued after an exponential backoff with full jitter, until
//! `max_attempts` or `max_age` parks the event as a dead letter.
//!
//! `max_in_flight` bounds the route's concurrent upstream calls in this
//! instance (a fleet of N calls at most N × `max_in_flight`). Traffic
//! control (docs/guide/traffic-control.md, "Traffic control") decides how many may start in a pass: none while the
//! route is paused or its circuit breaker open, one while the breaker
//! probes, no more than the rate limit's tokens. Workers wake
//! when an event is accepted here or a delivery ends, and poll every
//! quarter second for the rest (events accepted by other instances, retries coming due). At
//! shutdown they stop leasing; running deliveries are claims like any
//! other, so the drain waits for them and releases the unfinished ones back
//! to the queue.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::delivery::places::{Gate, Place};
use crate::delivery::{Engine, Parts};
use crate::order::Rules as OrderRules;
use crate::route::Route;
use crate::store::{Due, Store, StoreError};
use crate::traffic::Admission;

/// How often workers look for due events they were not woken for.
const POLL: Duration = Duration::from_millis(250);

/// What the workers hold: the engine that runs each leased event's work,
/// and the store, routes, pauses and places a pass reads.
struct Workers {
    engine: Arc<Engine>,
    parts: Parts,
}

/// Run the workers until `stop` resolves.
pub async fn run(engine: Arc<Engine>, parts: Parts, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    let mut orders = Orders::default();
    let workers = Arc::new(Workers { engine, parts });
    let parts = &workers.parts;
    loop {
        let busy = pass(&workers, &mut orders).await;
        parts.metrics.worker_passes.inc();
        if busy {
            // More may be due: go on at once, but let requests through.
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            () = &mut stop => return,
            () = parts.places.woken() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Every configured scope's routes, async ones first: the first is the
/// fallback owner of an event whose own route is no longer configured.
/// Every scope is leased, whatever its routes' modes now: an event
/// accepted before a reload turned its route sync is still owed its
/// delivery.
fn scopes(routes: &[Arc<Route>]) -> Vec<Vec<Arc<Route>>> {
    let mut scopes: Vec<Vec<Arc<Route>>> = Vec::new();
    for route in routes {
        match scopes
            .iter_mut()
            .find(|scope| scope[0].keying.scope == route.keying.scope)
        {
            Some(scope) => scope.push(Arc::clone(route)),
            None => scopes.push(vec![Arc::clone(route)]),
        }
    }
    for scope in &mut scopes {
        scope.sort_by_key(|route| !route.delivery.is_async());
    }
    scopes
}

/// Leave for calls of one route of a scope: admissions from its breaker
/// and rate, and its gate.
struct Leave {
    route: Arc<Route>,
    gate: Arc<Gate>,
    admissions: Vec<Admission>,
}

/// One pass over every scope's queue; `true` when some scope leased as
/// many events as it had room for (more may be waiting).
///
/// Routes that share a scope share one queue, and each event is called by
/// the route that accepted it, under that route's own controls: a pause of
/// any of them holds the scope's queue, the fewest calls any of them may
/// start now (places under `max_in_flight`, breaker, rate) is how many
/// events are leased, and each event spends its owner's admission and
/// takes its owner's place — waiting for one, its lease renewed, when a
/// hybrid call took the last meanwhile.
async fn pass(workers: &Arc<Workers>, orders: &mut Orders) -> bool {
    let mut busy = false;
    let parts = &workers.parts;
    let pauses = &parts.pauses;
    for routes in scopes(&parts.routes.all()) {
        // Every route holds until this instance has read the pauses once:
        // a restart never delivers from a paused route.
        if !pauses.known() || routes.iter().any(|route| pauses.is_paused(&route.name)) {
            continue;
        }
        let mut leaves: Vec<Leave> = routes
            .iter()
            .map(|route| {
                let max_in_flight = route.delivery.queue().max_in_flight;
                let gate = parts.places.gate(&route.name, max_in_flight);
                // The breaker and the rate limit decide how many may start.
                let admissions = route.controls.admit_many(gate.room());
                Leave {
                    route: Arc::clone(route),
                    gate,
                    admissions,
                }
            })
            .collect();
        let room = (leaves.iter().map(|leave| leave.admissions.len()))
            .min()
            .unwrap_or(0);
        if room == 0 {
            continue;
        }
        let fallback = &routes[0];
        let due = match orders.lease(&parts.store, fallback, room).await {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(scope = %fallback.keying.scope, %error, "could not lease due events");
                continue;
            }
        };
        busy |= due.len() == room;
        for event in due {
            // The event goes to the route that accepted it, while it is
            // configured on this scope.
            let owner = event
                .record
                .route
                .as_deref()
                .and_then(|name| leaves.iter().position(|leave| leave.route.name == name));
            let leave = &mut leaves[owner.unwrap_or(0)];
            // At most `room` events, and every route has that many.
            let admission = leave.admissions.pop().unwrap_or_default();
            let place = match leave.gate.try_enter() {
                Some(permit) => Place::Taken(permit),
                None => Place::Wait(Arc::clone(&leave.gate)),
            };
            tokio::spawn(deliver(
                Arc::clone(workers),
                Arc::clone(&leave.route),
                event,
                (place, admission),
            ));
        }
        // Admissions not spent (fewer events were due) are given back.
    }
    busy
}

/// Which scopes hold ordered events, whatever their routes say now.
///
/// An event keeps the place its acceptance gave it in its entity's order
/// (docs/operations/fleets.md, "When a route changes shape"): after a reload or
/// a restart turned its route unordered (sync, or async without
/// `order_by`), the backlog still drains one event per entity at a time,
/// in order, while new events are leased unordered beside it. A scope is
/// leased in order while its route is ordered, once it was in this
/// process, and in the first pass of each scope (which finds a backlog
/// left by an earlier configuration); an unordered lease that still meets
/// an ordered event gives it back unsent and leases the scope in order
/// from then on.
#[derive(Default)]
struct Orders {
    /// Scopes leased at least once by this process.
    leased: HashSet<String>,
    /// Scopes known to hold ordered events.
    ordered: HashSet<String>,
}

impl Orders {
    /// Up to `room` due events of `route`'s scope: of each entity at most
    /// its next, on an ordered scope (docs/guide/ordering.md, "Ordered delivery"), the
    /// stale ones met on the way counted.
    async fn lease(
        &mut self,
        store: &Store,
        route: &Route,
        room: usize,
    ) -> Result<Vec<Due>, StoreError> {
        // A store that spreads scopes over shards never orders.
        let first = !self.leased.contains(&route.keying.scope) && store.shards() == 1;
        let rules = match route.queue_order() {
            Some(order) => {
                self.ordered.insert(route.keying.scope.clone());
                order.rules()
            }
            // A backlog left ordered: a dead event no longer holds its
            // entity once the route stopped ordering.
            None if first || self.ordered.contains(&route.keying.scope) => {
                OrderRules { skip_dead: true }
            }
            None => return self.lease_unordered(store, route, room).await,
        };
        let leased = (store.queue().lease_ordered(
            &route.keying.scope,
            room,
            route.claim.processing_ttl,
            rules,
        ))
        .await?;
        self.leased.insert(route.keying.scope.clone());
        for key in &leased.stale {
            tracing::info!(route = %route.name, key = %key, "stale: older than its entity's newest delivered event; not delivered");
            route.series.stale_events.inc();
        }
        if leased.due.iter().any(|due| due.record.order.is_some()) {
            self.ordered.insert(route.keying.scope.clone());
        }
        Ok(leased.due)
    }

    /// An unordered scope's lease; an ordered event met in it is given
    /// back unsent (its attempt counted), and the scope leased in order
    /// from the next pass on.
    async fn lease_unordered(
        &mut self,
        store: &Store,
        route: &Route,
        room: usize,
    ) -> Result<Vec<Due>, StoreError> {
        let due = (store
            .queue()
            .lease_due(&route.keying.scope, room, route.claim.processing_ttl))
        .await?;
        let (ordered, unordered): (Vec<Due>, Vec<Due>) =
            due.into_iter().partition(|due| due.record.order.is_some());
        if !ordered.is_empty() {
            tracing::info!(route = %route.name, events = ordered.len(), "ordered events left by an earlier configuration: their scope is leased in order from now on");
            self.ordered.insert(route.keying.scope.clone());
            for due in ordered {
                let _ = store
                    .records()
                    .release(&store.key(&route.keying.scope, &due.id), &due.lease)
                    .await;
            }
        }
        Ok(unordered)
    }
}

/// One leased event's work — its attempt, its hand-out to destinations,
/// or its parking once spent — then a look for more.
async fn deliver(workers: Arc<Workers>, route: Arc<Route>, due: Due, leave: (Place, Admission)) {
    workers.engine.deliver_due(route, due, leave).await;
    // A permit comes free with this task's end: look for more at once
    // rather than at the next poll.
    workers.parts.places.wake();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::metrics::Metrics;
    use crate::store::{ClaimMode, ClaimRequest, RecordState, Stored, StoredRequest};
    use http::HeaderMap;

    /// An async route whose upstream refuses connections (nothing listens on
    /// port 1): every attempt fails at once, not delivered.
    const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[store]
backend = "memory"
[[routes]]
name = "orders"
path = "/orders"
upstream = "http://127.0.0.1:1/orders"
key = ["header:X-Id"]
delivery = "async"
retry_backoff = { initial = "10s", max = "10s" }
max_attempts = 3
[routes.verify]
scheme = "none"
"#;

    async fn workers() -> Arc<Workers> {
        let config = Config::parse(CONFIG, std::path::Path::new("t.toml"), &|_| None).unwrap();
        let registry = prometheus::Registry::new();
        let metrics = Metrics::new(&registry);
        let clock = crate::clock::Clock::for_test();
        let store = Store::open(&config.fixed.store, "t:", metrics.store.clone(), &clock).unwrap();
        let parts = Parts::new(&config, store, metrics, clock);
        parts.pauses.refresh(&parts.store).await.unwrap();
        let engine = Arc::new(Engine::new(&parts));
        Arc::new(Workers { engine, parts })
    }

    async fn state(workers: &Workers) -> (RecordState, u32) {
        let store = &workers.parts.store;
        let record = store
            .records()
            .get(&store.key("orders", "e1"))
            .await
            .unwrap()
            .unwrap();
        (record.state, record.attempts)
    }

    /// Until the attempt spawned by a pass has settled the record.
    async fn settled(workers: &Workers, attempts: u32) {
        for _ in 0..1000 {
            if state(workers).await == (RecordState::Queued, attempts) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!(
            "attempt {attempts} never settled: {:?}",
            state(workers).await
        );
    }

    /// Time is the subject: a pass attempts what is due, nothing before its
    /// backoff, and the queue's `max_attempts` parks the event — ten
    /// seconds of backoff run in no time.
    #[tokio::test(start_paused = true)]
    async fn a_pass_attempts_what_is_due_and_backs_off_until_dead() {
        let workers = workers().await;
        let request = StoredRequest {
            method: http::Method::POST,
            query: None,
            headers: HeaderMap::new(),
            body: bytes::Bytes::from_static(b"{}"),
        };
        let store = &workers.parts.store;
        let key = store.key("orders", "e1");
        let accept = ClaimRequest {
            mode: ClaimMode::Accept,
            stored: Some(Stored {
                request: &request,
                route: "orders",
                replay_of: None,
            }),
            ..ClaimRequest::delivery(
                &key,
                "aa",
                Duration::from_secs(30),
                Duration::from_secs(600),
            )
        };
        store.records().claim(accept).await.unwrap();
        let mut orders = Orders::default();

        pass(&workers, &mut orders).await;
        settled(&workers, 1).await;
        pass(&workers, &mut orders).await;
        tokio::task::yield_now().await;
        assert_eq!(
            state(&workers).await,
            (RecordState::Queued, 1),
            "not before the backoff"
        );

        tokio::time::advance(Duration::from_secs(10)).await;
        pass(&workers, &mut orders).await;
        settled(&workers, 2).await;

        tokio::time::advance(Duration::from_secs(10)).await;
        pass(&workers, &mut orders).await;
        for _ in 0..1000 {
            if state(&workers).await.0 == RecordState::Dead {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(
            state(&workers).await,
            (RecordState::Dead, 3),
            "parked at max_attempts"
        );
    }
}
