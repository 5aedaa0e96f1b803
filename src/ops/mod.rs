//! The operator's one door: every action an operator takes — look at an
//! event, list events, forget, release, redeliver, replay, redrive, pause,
//! resume, the routes' view, readiness — is one method of the
//! [`Operator`] here, returning one [`OpsError`]; the [`Engine`] it holds
//! only runs deliveries. The admin API (`admin`) and through it
//! the console and the CLI only parse what was asked and render what these
//! answer; the rules live here.
//!
//! Actions that send run as tasks of the gateway ([`redeliver`], and
//! [`bulk`] for every match of a filter): a caller that hangs up does not
//! stop them.

pub mod bulk;
pub mod filter;
pub mod redeliver;
mod upkeep;

use std::sync::Arc;

use self::filter::Filter;
use crate::delivery::{Engine, Parts};
pub use crate::error::OpsError;
use crate::order::{OnBlocked, BLOCKED_COUNTED};
use crate::route::Route;
use crate::store::{
    Blocked, Cursor, Deleted, ForceRelease, Listed, Record, RecordState, Refused, StoreError,
};
use crate::traffic::Pause;

/// The operator's door: every operator verb, over the engine that runs
/// deliveries. Cheap to clone (it holds the engine's handle), so an
/// action can run as a task of the gateway.
#[derive(Clone)]
pub struct Operator {
    /// Runs what an operator sends again.
    engine: Arc<Engine>,
    /// What an operator looks at and changes: the store, the routes, the
    /// pauses, the metrics.
    parts: Parts,
}

impl Operator {
    pub fn new(engine: Arc<Engine>, parts: Parts) -> Self {
        Operator { engine, parts }
    }
}

impl From<StoreError> for OpsError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unreadable(why) => OpsError::RecordUnreadable(why),
            error => OpsError::StoreUnavailable(error.to_string()),
        }
    }
}

/// One event as an operator sees it: its record and its replays' keys.
pub struct Event {
    pub record: Record,
    pub replays: Vec<String>,
}

/// Which events to list.
pub struct EventsQuery {
    /// One route's events; every route's when `None`.
    pub route: Option<Arc<Route>>,
    pub state: Option<RecordState>,
    /// Time window, last status and error class.
    pub filter: Filter,
    pub limit: usize,
    pub cursor: Option<Cursor>,
}

/// Records a filtered listing examines for one page at most: a page of
/// few matches among many records ends early, with a cursor to go on.
const SCAN_BUDGET: usize = 5_000;
/// Records a filtered listing reads from the store at a time.
const SCAN_PAGE: usize = 500;

/// One page of events, each under the route it belongs to.
pub struct EventsPage {
    pub events: Vec<(String, Listed)>,
    pub next: Option<Cursor>,
}

/// A route as an operator sees it (`GET /admin/routes`).
pub struct RouteView {
    pub route: Arc<Route>,
    pub paused: Option<Pause>,
    /// Queued events of its scope (async routes; `None` when the store did
    /// not answer).
    pub queued: Option<u64>,
    pub dead_letters: Option<u64>,
    /// Entities held by a dead event (ordered routes that wait; docs/guide/ordering.md,
    /// "Ordered delivery"), at most `BLOCKED_COUNTED`.
    pub blocked: Option<u64>,
    /// Operations the store refuses on its scope.
    pub refused: Vec<Refused>,
}

/// How this instance is, for `/readyz`.
pub struct Readiness {
    pub store: Result<(), StoreError>,
    /// The store is this process's own (memory, embedded): its failure is
    /// this instance's.
    pub store_local: bool,
    pub draining: bool,
    /// Each async route's `queued` and `delivering` counts.
    pub delivery: serde_json::Map<String, serde_json::Value>,
    /// Operations the store answers but refuses (a missing grant, a full
    /// Redis): said here, though readiness stays true.
    pub refused: Vec<Refused>,
}

impl Readiness {
    /// Ready: shutdown has not begun, and an own store (the embedded
    /// file) answers. The config is loaded and the listeners are up, or
    /// nobody could ask. A shared store's outage is not this instance's: it
    /// would take every replica out of the load balancer at once — whose
    /// own answer then reaches the senders, without `Retry-After` — and
    /// `on_error = "forward"` could never serve. It shows in the body and
    /// in `hookgate_store_up`, which the alerts watch.
    pub fn ready(&self) -> bool {
        !self.draining && (self.store.is_ok() || !self.store_local)
    }
}

impl Operator {
    /// The record of `key` on `route`, with its replays.
    pub async fn event(&self, route: &Route, key: &str) -> Result<Event, OpsError> {
        let store = &self.parts.store;
        let record = store
            .records()
            .get(&store.key(&route.keying.scope, key))
            .await?
            .ok_or(OpsError::KeyNotFound)?;
        let replays = self.replays_of(route, key).await?;
        Ok(Event { record, replays })
    }

    /// One page of events, newest first by last change. Each scope is
    /// listed once, under the first route that uses it unless a record
    /// names its own; a route of a shared scope shows its own events only.
    /// A filter reads on from the store until the page is full, the window
    /// is passed, or [`SCAN_BUDGET`] records were examined (the page may
    /// then hold fewer than `limit`, and its cursor goes on).
    pub async fn events(&self, query: EventsQuery) -> Result<EventsPage, OpsError> {
        if !query.filter.narrows() {
            return self.events_page(&query).await;
        }
        let mut query = query;
        if let (None, Some(until)) = (&query.cursor, query.filter.until_ms) {
            query.cursor = Some(Cursor::at_or_before(until));
        }
        let (limit, filter) = (query.limit, query.filter.clone());
        query.limit = SCAN_PAGE;
        let mut kept = Vec::new();
        let mut scanned = 0;
        loop {
            let page = self.events_page(&query).await?;
            for (route, listed) in page.events {
                scanned += 1;
                if filter.ends_before(listed.record.updated_ms) {
                    return Ok(EventsPage {
                        events: kept,
                        next: None,
                    });
                }
                let cursor = listed.cursor();
                if filter.keeps(&listed.record) && self.holds(&filter, &listed).await? {
                    kept.push((route, listed));
                }
                if kept.len() == limit || scanned >= SCAN_BUDGET {
                    return Ok(EventsPage {
                        events: kept,
                        next: Some(cursor),
                    });
                }
                query.cursor = Some(cursor);
            }
            if page.next.is_none() {
                return Ok(EventsPage {
                    events: kept,
                    next: None,
                });
            }
            query.cursor = page.next;
        }
    }

    /// Whether the listed record's stored request holds the filter's
    /// content matches (read from the store: listings leave requests out).
    /// A record no configured key opens matches nothing (the store counts
    /// and logs it): one lost key does not fail a whole search.
    async fn holds(&self, filter: &Filter, listed: &Listed) -> Result<bool, OpsError> {
        if filter.content.is_empty() {
            return Ok(true);
        }
        let store = &self.parts.store;
        match store
            .records()
            .get(&store.key(&listed.scope, &listed.id))
            .await
        {
            Ok(record) => Ok(record.is_some_and(|record| filter.holds(&record))),
            Err(StoreError::Unreadable(_)) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// One page of the store's listing for `query`, without its filter.
    async fn events_page(&self, query: &EventsQuery) -> Result<EventsPage, OpsError> {
        let routes: Vec<Arc<Route>> = match &query.route {
            // A route with destinations lists its events and each
            // destination's delivery of them.
            Some(route) => std::iter::once(Arc::clone(route))
                .chain((route.destinations.iter()).filter_map(|d| self.parts.routes.named(&d.name)))
                .collect(),
            None => self.parts.routes.all(),
        };
        let mut scopes: Vec<(&str, &str)> = Vec::new();
        for route in &routes {
            if !scopes.iter().any(|(scope, _)| *scope == route.keying.scope) {
                scopes.push((&route.keying.scope, &route.name));
            }
        }
        let names: Vec<&str> = scopes.iter().map(|(scope, _)| *scope).collect();
        let page = (self.parts.store)
            .listing()
            .list(&names, query.state, query.limit, query.cursor.as_ref())
            .await?;
        let only = (routes.len() == 1).then(|| routes[0].name.as_str());
        let events = page
            .records
            .into_iter()
            .filter(|listed| {
                only.is_none_or(|only| listed.record.route.as_deref().is_none_or(|r| r == only))
            })
            .map(|listed| {
                let route = match listed.record.route.as_deref() {
                    Some(route) => route.to_owned(),
                    None => (scopes.iter())
                        .find(|(scope, _)| *scope == listed.scope)
                        .map_or("", |(_, name)| name)
                        .to_owned(),
                };
                (route, listed)
            })
            .collect();
        Ok(EventsPage {
            events,
            next: page.next,
        })
    }

    /// Whether event `key` of `route`, a route with destinations, is held
    /// by the route's own record and was never handed out: accepted
    /// before the route had destinations and not delivered (queued,
    /// failed, dead). Its redelivery hands it out.
    pub async fn never_handed_out(&self, route: &Route, key: &str) -> bool {
        let store = &self.parts.store;
        match store
            .records()
            .get(&store.key(&route.keying.scope, key))
            .await
        {
            Ok(Some(record)) => record.state != RecordState::Completed,
            _ => false,
        }
    }

    /// Forget `key`, so its next delivery is processed again — unless a
    /// delivery still holds it, or it is queued for its workers, and
    /// `force` is not set.
    pub async fn forget(&self, route: &Route, key: &str, force: bool) -> Result<(), OpsError> {
        let store = &self.parts.store;
        match store
            .records()
            .delete(&store.key(&route.keying.scope, key), force)
            .await?
        {
            Deleted::Deleted => Ok(()),
            Deleted::InFlight => Err(OpsError::InFlight),
            Deleted::NotFound => Err(OpsError::KeyNotFound),
        }
    }

    /// Release a stuck claim of `key`, whoever holds it (an accepted event
    /// goes back to its queue, due now).
    pub async fn release(&self, route: &Route, key: &str) -> Result<(), OpsError> {
        let store = &self.parts.store;
        match store
            .records()
            .force_release(&store.key(&route.keying.scope, key))
            .await?
        {
            ForceRelease::Released => Ok(()),
            ForceRelease::NotInFlight => Err(OpsError::NotInFlight),
            ForceRelease::NotFound => Err(OpsError::KeyNotFound),
        }
    }

    /// Pause `route` (`Some`) or resume it for the whole fleet; whether
    /// that changed anything (pausing a paused route does not). Counted in
    /// `hookgate_route_control_changes_total`.
    pub async fn pause_or_resume(
        &self,
        route: &Route,
        pause: Option<Pause>,
    ) -> Result<bool, OpsError> {
        let changed = pause.is_some() != self.parts.pauses.of(&route.name).is_some();
        if changed {
            let parts = &self.parts;
            parts
                .pauses
                .set(&parts.store, &route.name, pause.as_ref())
                .await?;
            parts.show_pauses();
            if pause.is_none() {
                // The backlog goes now rather than at the next poll.
                parts.places.wake();
            }
            let action = if pause.is_some() { "pause" } else { "resume" };
            (self.parts.metrics.route_control_changes)
                .with_label_values(&[route.route_name(), route.destination_name(), action])
                .inc();
        }
        Ok(changed)
    }

    /// Every route with its pause and its scope's queued and dead counts.
    pub async fn route_views(&self) -> Vec<RouteView> {
        let mut views = Vec::new();
        for route in self.parts.routes.all() {
            let store = &self.parts.store;
            let queued = match route.delivery.is_async() {
                true => store
                    .listing()
                    .count(&route.keying.scope, RecordState::Queued)
                    .await
                    .ok(),
                false => None,
            };
            let dead_letters = store
                .listing()
                .count(&route.keying.scope, RecordState::Dead)
                .await
                .ok();
            let blocked = self.blocked_count(&route).await;
            views.push(RouteView {
                paused: self.parts.pauses.of(&route.name),
                refused: store.refused_in(&route.keying.scope),
                route,
                queued,
                dead_letters,
                blocked,
            });
        }
        views
    }

    /// The entities of `route` that a dead event holds, at most `limit`
    /// (none for a route that does not wait behind its dead events).
    pub async fn blocked(&self, route: &Route, limit: usize) -> Result<Vec<Blocked>, OpsError> {
        match route.order().map(|order| order.on_blocked) {
            Some(OnBlocked::Wait) => Ok(self
                .parts
                .store
                .listing()
                .blocked(&route.keying.scope, limit)
                .await?),
            _ => Ok(Vec::new()),
        }
    }

    /// `key`'s record in `scope` (a destination's, say), if it has one.
    pub async fn record_in(&self, scope: &str, key: &str) -> Result<Option<Record>, StoreError> {
        let store = &self.parts.store;
        store.records().get(&store.key(scope, key)).await
    }

    /// How many entities of `route` a dead event holds, at most
    /// `BLOCKED_COUNTED`: for ordered routes that wait (`None` otherwise,
    /// or when the store did not answer).
    pub async fn blocked_count(&self, route: &Route) -> Option<u64> {
        match route.order().map(|order| order.on_blocked) {
            Some(OnBlocked::Wait) => (self
                .parts
                .store
                .listing()
                .blocked(&route.keying.scope, BLOCKED_COUNTED)
                .await)
                .ok()
                .map(|blocked| blocked.len() as u64),
            _ => None,
        }
    }

    /// Whether this instance is ready, and why not.
    pub async fn readiness(&self) -> Readiness {
        let store = self.parts.store.ping().await;
        (self.parts.metrics.store_up).set(i64::from(store.is_ok()));
        Readiness {
            store,
            store_local: self.parts.store.is_local(),
            draining: self.engine.is_draining(),
            delivery: self.delivery_status().await,
            refused: self.parts.store.refused(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readiness(store_ok: bool, store_local: bool, draining: bool) -> Readiness {
        Readiness {
            store: if store_ok {
                Ok(())
            } else {
                Err(StoreError::Backend("gone".into()))
            },
            store_local,
            draining,
            delivery: serde_json::Map::new(),
            refused: Vec::new(),
        }
    }

    /// Readiness is local: a shared store's outage never makes an instance
    /// unready; its own store's (the embedded file) and draining do.
    #[test]
    fn readiness_is_local() {
        for (store_ok, store_local, draining, ready) in [
            (true, false, false, true),
            (false, false, false, true),
            (true, true, false, true),
            (false, true, false, false),
            (true, false, true, false),
            (false, false, true, false),
        ] {
            assert_eq!(
                readiness(store_ok, store_local, draining).ready(),
                ready,
                "store ok {store_ok}, local {store_local}, draining {draining}"
            );
        }
    }
}
