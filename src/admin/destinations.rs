//! `?destination=` (docs/guide/destinations.md, "Several destinations"): which delivery of a
//! route an admin request addresses, and an event's state at each of its
//! route's destinations.

use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use serde_json::json;

use super::query::query_param;
use super::Admin;
use crate::config::delivery_name;
use crate::error::{AdminError, OpsError};
use crate::route::Route;

impl Admin {
    /// The route named `route`, or its destination's delivery when the
    /// request says `?destination=`.
    pub(super) fn target(
        &self,
        request: &Request<Incoming>,
        route: &str,
    ) -> Result<Arc<Route>, AdminError> {
        let found = self
            .parts
            .routes
            .named(route)
            .ok_or(AdminError::UnknownRoute)?;
        match query_param(request, "destination") {
            None => Ok(found),
            Some(destination) => (self.parts.routes)
                .named(&delivery_name(route, &destination))
                .ok_or(AdminError::UnknownDestination),
        }
    }

    /// The delivery an action on event `key` of `route` acts on: each
    /// destination's delivery is its own, so an action names which, unless
    /// the route has only one — or the event was never handed out (it died
    /// or failed before the route had destinations): then the action is
    /// on the event itself, and sending it again hands it out.
    pub(super) async fn acted_on(
        &self,
        route: Arc<Route>,
        key: &str,
    ) -> Result<Arc<Route>, AdminError> {
        if route.fans_out() && self.ops.never_handed_out(&route, key).await {
            return Ok(route);
        }
        match route.destinations.as_slice() {
            [] => Ok(route),
            [only] => (self.parts.routes.named(&only.name)).ok_or(AdminError::UnknownDestination),
            _ => Err(OpsError::DestinationRequired.into()),
        }
    }

    /// `key`'s record at each destination of `route`, by name: its state,
    /// attempts, last error and the destination's answer; `null` where the
    /// event did not pass the destination's filter (or is not fanned out
    /// yet).
    pub(super) async fn destination_states(&self, route: &Route, key: &str) -> serde_json::Value {
        let mut states = serde_json::Map::new();
        for destination in &route.destinations {
            let record = self.ops.record_in(&destination.keying.scope, key).await;
            let shown = match record {
                Ok(Some(record)) => json!({
                    "state": record.state.as_str(),
                    "attempts": record.attempts,
                    "updated": record.updated_ms,
                    "next_attempt_at": record.next_attempt_ms,
                    "last_error": record.last_error.map(|error| json!({
                        "class": error.class.as_str(),
                        "status": error.status,
                        "at": error.at_ms,
                    })),
                    "response_status": record.response.as_ref().map(|r| r.status.as_u16()),
                }),
                Ok(None) => serde_json::Value::Null,
                Err(error) => json!({ "error": error.to_string() }),
            };
            states.insert(destination.destination_name().to_owned(), shown);
        }
        serde_json::Value::Object(states)
    }
}
