//! How the admin API shows routes and controls them: `GET /admin/routes`,
//! every route with its traffic controls and counts, `POST
//! /admin/routes/{route}/pause` and `…/resume`, and `GET
//! /admin/routes/{route}/blocked`,
//! the entities of an ordered route that wait behind a dead event (docs/guide/ordering.md,
//! "Ordered delivery"), each with its dead event and how many of its
//! events wait. The way out is the dead event's own: redeliver it, or
//! forget it.

use http::StatusCode;
use serde_json::json;

use super::api::{Answer, Call};
use super::query::query_param;
use super::views::pause_json;
use super::Admin;
use crate::error::{json_response, AdminError};
use crate::ops::RouteView;
use crate::order::OnBlocked;
use crate::traffic::Pause;

/// Entities listed when the request names no `limit`, and the most it may.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1_000;

impl Admin {
    /// `GET /admin/routes`: every route with its traffic controls.
    pub(super) async fn routes(&self) -> Answer {
        let views = self.ops.route_views().await;
        let mut shown = Vec::with_capacity(views.len());
        for view in &views {
            let mut json = self.route_json(view);
            // Its reconciliation with the sender, as the fleet last
            // recorded it (docs/guide/reconciliation.md, "Reconciliation").
            json["reconcile"] = match &view.route.reconcile {
                Some(_) if view.route.destination_of.is_none() => {
                    (self.reconciler.status(&view.route.name).await)
                        .unwrap_or_else(|error| json!({ "error": error.to_string() }))
                }
                _ => serde_json::Value::Null,
            };
            shown.push(json);
        }
        Ok(json_response(StatusCode::OK, &json!({ "routes": shown })))
    }

    fn route_json(&self, view: &RouteView) -> serde_json::Value {
        let route = &view.route;
        let breaker = route.controls.breaker.as_ref().map(|breaker| {
            let settings = breaker.settings();
            json!({
                "state": breaker.state(),
                "failures": settings.failures,
                "window_ms": settings.window.as_millis() as u64,
                "open_for_ms": settings.open_for.as_millis() as u64,
            })
        });
        let rate = route.controls.rate.as_ref().map(|rate| {
            let settings = rate.settings();
            json!({ "per_second": settings.per_second, "burst": settings.burst })
        });
        json!({
            "name": route.name,
            "route": route.route_name(),
            "destination": route.as_destination(),
            "destinations": (route.destinations.iter())
                .map(|destination| destination.destination_name())
                .collect::<Vec<_>>(),
            "path": route.path,
            "delivery": if route.delivery.is_async() { "async" } else { "sync" },
            "paused": view.paused.as_ref().map(pause_json),
            "circuit_breaker": breaker,
            "upstream_rate": rate,
            "queued": view.queued,
            "dead_letters": view.dead_letters,
            "on_blocked": route.order().map(|order| order.on_blocked.as_str()),
            "blocked": view.blocked,
            "store_refusing": (view.refused.iter())
                .map(|refused| json!({
                    "op": refused.op,
                    "error": refused.error,
                    "since": refused.since_ms,
                }))
                .collect::<Vec<_>>(),
            "outcomes": self.parts.metrics.outcomes(&route.name),
        })
    }

    pub(super) async fn blocked(&self, call: Call<'_>) -> Answer {
        let request = call.request;
        let route = self.target(request, call.param("route"))?;
        let limit = match query_param(request, "limit") {
            None => DEFAULT_LIMIT,
            Some(text) => match text.parse::<usize>() {
                Ok(limit @ 1..=MAX_LIMIT) => limit,
                _ => {
                    return Err(AdminError::BadQuery(format!(
                        "limit must be 1 to {MAX_LIMIT}"
                    )))
                }
            },
        };
        let on_blocked = route.order().map(|order| order.on_blocked);
        // One more than asked: whether there are more.
        let blocked = self.ops.blocked(&route, limit + 1).await?;
        let (name, destination) = crate::metrics::delivery_labels(&route.name);
        let shown: Vec<_> = (blocked.iter().take(limit))
            .map(|held| {
                json!({
                    "entity": held.entity,
                    "dead_event": held.dead,
                    "since": held.since_ms,
                    "waiting": held.waiting,
                })
            })
            .collect();
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "route": name,
                "destination": (!destination.is_empty()).then_some(destination),
                "on_blocked": on_blocked.map(OnBlocked::as_str),
                "blocked": shown,
                "more": blocked.len() > limit,
            }),
        ))
    }
}

impl Admin {
    /// `POST /admin/routes/{route}/pause` (`pause`) or `…/resume`, with the
    /// caller's `?by=` and `?reason=`: written to the store for the whole
    /// fleet, logged and counted. Pausing a paused route (or resuming a
    /// running one) changes nothing and says so.
    pub(super) async fn pause(&self, call: Call<'_>, pause: bool) -> Answer {
        let (request, peer, via, role) = (call.request, call.peer, call.via, call.role);
        let route = self.target(request, call.param("route"))?;
        let route = &*route;
        let by = query_param(request, "by")
            .filter(|by| !by.is_empty())
            .unwrap_or_else(|| format!("admin api ({peer})"));
        let reason = query_param(request, "reason").filter(|reason| !reason.is_empty());
        if by.len() > 200 || reason.as_ref().is_some_and(|reason| reason.len() > 1000) {
            return Err(AdminError::BadQuery(
                "by is at most 200 bytes, reason at most 1000".into(),
            ));
        }
        let action = if pause { "pause" } else { "resume" };
        let new = pause.then(|| Pause {
            since_ms: self.parts.clock.now_ms(),
            by: by.clone(),
            reason: reason.clone(),
        });
        let changed = self.ops.pause_or_resume(route, new).await?;
        tracing::warn!(target: "hookgate::admin", %peer, via, role, route = %route.name, action, by, reason, changed,
            "admin action: route {}", if pause { "paused" } else { "resumed" });
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "route": route.route_name(),
                "destination": route.as_destination(),
                "changed": changed,
                "paused": self.parts.pauses.of(&route.name).map(|pause| pause_json(&pause)),
            }),
        ))
    }
}
