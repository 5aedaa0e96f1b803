//! Several destinations (docs/guide/destinations.md, "Several destinations"): one verified
//! event, each consumer once.
//!
//! A route with `[[routes.destinations]]` judges each event by every
//! destination's filter when it arrives ([`judge`]) and accepts it in one
//! write, as any async route does: the event's record in the route's scope,
//! its stored request naming the destinations it passed (the
//! `Hookgate-Destinations` header, `headers::DESTINATIONS`, written by
//! hookgate over anything a sender sent). The sender is answered after
//! that write.
//!
//! The accepting request then hands the event out at once, from a task
//! holding the event's claim (its acceptance was `ClaimMode::AcceptClaimed`);
//! while the route is paused, when that gateway dies first, or on an
//! ordered route, a worker leases the event like any other and, instead of
//! calling an upstream, hands it out ([`Engine::hand_out`]): one acceptance per
//! destination it passed, in the destination's own scope
//! (`scope/destination`) under the event's key, with the request as the
//! sender sent it; then it completes the event's record. An ordered
//! route's events take their place in their entity's order at acceptance
//! (by acceptance alone), so each entity's are handed out one at a time,
//! in that order; each destination's acceptance gives the event its place
//! in the destination's own order, with its `stale_by` value and
//! `reorder_window`. From there each destination is an ordinary async
//! delivery with its own record, lease, attempts, backoff, dead letter,
//! pause, breaker and rate — a dead consumer never holds up another.
//!
//! A hand-out interrupted anywhere (store error, crash, SIGTERM, SIGKILL)
//! leaves the event's record queued or under a lease that lapses; a worker
//! hands it out again, and the destinations already holding the key answer as for a
//! duplicate: no destination gets the event twice from a fan-out. The
//! destinations an event passed are decided once, at acceptance: a reload
//! that adds a destination or changes a filter applies to later events; a
//! destination removed before its event was fanned out is skipped (logged).
//! An event a route held before a reload gave it destinations is judged
//! when it is handed out: by a worker, or by an operator's redelivery,
//! replay or redrive (docs/operations/fleets.md, "When a route changes shape").

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, StatusCode};

use super::Engine;
use crate::config::RouteConfig;
use crate::headers::DESTINATIONS;
use crate::replay::{BodyKept, RecordedResponse};
use crate::route::Route;
use crate::store::{ClaimMode, Lease, OrderSpot, StoreKey, StoredRequest};

/// What a route's filters say of an event.
pub enum Verdict {
    /// Forward it (the route's filter takes it, or it has none).
    Forward,
    /// No filter takes it: answered and recorded, never forwarded.
    Filtered,
    /// The destinations it passed, comma-separated.
    Destinations(String),
}

/// Judge an event by the route's filter, or its destinations' filters, on
/// the verified body and headers.
pub fn judge(route: &RouteConfig, headers: &HeaderMap, body: &[u8], sha: &str) -> Verdict {
    if route.fans_out() {
        return passed(route, headers, body, sha).map_or(Verdict::Filtered, Verdict::Destinations);
    }
    match &route.filter {
        Some(filter) if !filter.passes(headers, body, sha) => Verdict::Filtered,
        _ => Verdict::Forward,
    }
}

/// The destinations of `route` whose filters take the event, by name,
/// comma-separated; `None` when none does (the event is filtered).
fn passed(route: &RouteConfig, headers: &HeaderMap, body: &[u8], sha: &str) -> Option<String> {
    let names: Vec<&str> = (route.destinations.iter())
        .filter(|destination| {
            (destination.filter.as_ref()).is_none_or(|filter| filter.passes(headers, body, sha))
        })
        .map(|destination| destination.destination_name())
        .collect();
    (!names.is_empty()).then(|| names.join(","))
}

/// Name the destinations in the request the route stores.
pub fn mark(request: &mut StoredRequest, names: &str) {
    // Names are [a-z0-9_-] and commas: always a valid value.
    if let Ok(value) = HeaderValue::from_str(names) {
        request.headers.insert(DESTINATIONS, value);
    }
}

impl Engine {
    /// Hand the `claimed` event of `route` — its key, stored request and
    /// body hash; claimed by the accepting request, an operator, or leased
    /// by a worker — to each destination it passed, then complete its
    /// record. On a store error the claim is released: the event is due
    /// again, and the next hand-out skips what this one did. Whether it
    /// was handed out.
    pub async fn hand_out(
        &self,
        route: Arc<Route>,
        (key, lease): (StoreKey, Lease),
        event: (String, StoredRequest, String),
    ) -> bool {
        let claim = self.claim_for(&route, key, lease);
        let (id, mut request, body_sha256) = event;
        // Judged at acceptance; an event accepted while the route had one
        // upstream (before a reload gave it destinations) is judged now.
        let names = match request.headers.remove(DESTINATIONS) {
            Some(value) => value.to_str().map(str::to_owned).unwrap_or_default(),
            None => {
                passed(&route, &request.headers, &request.body, &body_sha256).unwrap_or_default()
            }
        };
        let names: Vec<&str> = names.split(',').filter(|name| !name.is_empty()).collect();
        let store = &self.parts.store;
        let mut handed = Vec::with_capacity(names.len());
        for name in names {
            let Some(destination) = route.destination(name) else {
                tracing::warn!(route = %route.name, key = %id, destination = %name,
                "the destination was removed before the event was fanned out; skipped");
                continue;
            };
            let key = store.key(&destination.keying.scope, &id);
            // An ordered route's destination keeps the entity's order in its
            // own queue, from the place this hand-out gives the event there.
            let place = destination.order_place(&request.headers, &request.body, &body_sha256);
            let accept = destination
                .claim_acceptance(&key, &body_sha256, &request, ClaimMode::Accept)
                .ordered(place.as_ref().map(OrderSpot::at));
            // Queued (new, or a failed record due again), or already there from
            // an earlier fan-out: either way the destination has it.
            if let Err(error) = store.records().claim(accept).await {
                tracing::warn!(route = %route.name, key = %id, destination = %name, %error,
                "could not hand the event to its destination; fanning out again");
                let _ = claim.release().await;
                return false;
            }
            handed.push(name);
        }
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let body = serde_json::json!({ "destinations": handed }).to_string();
        let recorded = RecordedResponse {
            status: StatusCode::OK,
            headers,
            body: Bytes::from(body),
            body_kept: BodyKept::Whole,
        };
        claim.complete(&recorded, route.claim.retention).await;
        self.parts.places.wake();
        true
    }
}
