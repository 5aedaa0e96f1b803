//! The admin API's bulk actions (docs/guide/dead-letters.md, "Bulk actions"):
//! `POST /admin/events/{redeliver,replay,forget}` over a listing's filters
//! (`dry_run=true` answers the count), `GET /admin/bulk` and
//! `GET`/`DELETE /admin/bulk/{id}`, and the redrive of a route's dead
//! letters, which is one such action the caller waits for.

use std::sync::Arc;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::api::{Answer, Call};
use super::query::{filter, query_flag, query_param};
use super::Admin;
use crate::clock::rfc3339;
use crate::config::MIN_RATE;
use crate::error::{json_response, AdminError};
use crate::ops::bulk::{Action, Bulk, Selection, Start};
use crate::store::RecordState;

/// Events a second of a bulk action (and a redrive) unless `rate` says.
const DEFAULT_RATE: f64 = 20.0;
/// The fastest `rate` taken, events a second.
const MAX_RATE: f64 = 10_000.0;

impl Admin {
    /// The route, state and filter a listing or a bulk action asks for.
    pub(super) fn selection(&self, request: &Request<Incoming>) -> Result<Selection, AdminError> {
        let state = match query_param(request, "state") {
            None => None,
            Some(state) => Some(RecordState::parse(&state).ok_or_else(|| {
                AdminError::BadQuery(format!("state must be {}", RecordState::names()))
            })?),
        };
        let route = match query_param(request, "route") {
            Some(name) => Some(self.target(request, &name)?),
            None if query_param(request, "destination").is_some() => {
                return Err(AdminError::BadQuery("destination needs a route".into()))
            }
            None => None,
        };
        Ok(Selection {
            route,
            state,
            filter: filter(request, self.parts.clock.now_ms())?,
        })
    }

    /// `POST /admin/events/{action}`: the count of a dry run, or a bulk
    /// action started (202 with its id).
    pub(super) async fn bulk_start(&self, call: Call<'_>, action: Action) -> Answer {
        let (request, by) = (call.request, call.by());
        let selection = self.selection(request)?;
        let rate = rate(request)?;
        if action == Action::Forget && !selection.narrows() {
            return Err(AdminError::BadQuery(
                "a bulk forget needs a route, a state or a filter".into(),
            ));
        }
        let described = describe(&selection);
        if query_flag(request, "dry_run") {
            let matches = self.ops.matches(&selection).await?;
            tracing::info!(target: "hookgate::admin", by, action = action.as_str(), selection = %described,
                matched = matches.len(), "admin action: bulk dry run");
            return Ok(json_response(
                StatusCode::OK,
                &json!({ "dry_run": true, "action": action.as_str(), "matched": matches.len() }),
            ));
        }
        let start = Start {
            action,
            by,
            selection: described,
            rate,
        };
        let bulk = self.ops.bulk(&self.bulks, selection, start).await?;
        Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({ "id": bulk.id, "action": action.as_str(), "matched": bulk.matched }),
        ))
    }

    /// `GET /admin/bulk`: the bulk actions this instance took.
    pub(super) async fn bulk_list(&self) -> Answer {
        let all: Vec<_> = self.bulks.list().iter().map(|b| bulk_json(b)).collect();
        Ok(json_response(StatusCode::OK, &json!({ "bulk": all })))
    }

    /// `GET /admin/bulk/{id}`.
    pub(super) async fn bulk_show(&self, call: Call<'_>) -> Answer {
        let bulk = self
            .bulks
            .get(call.param("id"))
            .ok_or(AdminError::BulkNotFound)?;
        Ok(json_response(StatusCode::OK, &bulk_json(&bulk)))
    }

    /// `DELETE /admin/bulk/{id}`: the action stops after the event it is on.
    pub(super) async fn bulk_cancel(&self, call: Call<'_>) -> Answer {
        let bulk = self
            .bulks
            .get(call.param("id"))
            .ok_or(AdminError::BulkNotFound)?;
        let stopped = bulk.cancel("operator");
        tracing::warn!(target: "hookgate::admin", by = call.by(), bulk = %bulk.id, stopped, "admin action: bulk action cancelled");
        Ok(json_response(StatusCode::OK, &bulk_json(&bulk)))
    }

    /// `POST /admin/routes/{route}/dead-letters/redeliver?rate=`: every
    /// dead letter of the route redelivered as one bulk action, answered
    /// with its tally when it ends (the action runs on if the caller hangs
    /// up); with `wait=false`, answered 202 with the action's id at once.
    pub(super) async fn redrive(&self, call: Call<'_>) -> Answer {
        let (request, by) = (call.request, call.by());
        let route = self.target(request, call.param("route"))?;
        let (peer, via, role) = (call.peer, call.via, call.role);
        tracing::info!(target: "hookgate::admin", %peer, via, role, route = %route.name, "admin action: redrive dead letters");
        let rate = rate(request)?;
        let selection = Selection {
            route: Some(Arc::clone(&route)),
            state: Some(RecordState::Dead),
            filter: Default::default(),
        };
        let start = Start {
            action: Action::Redeliver,
            by,
            selection: describe(&selection),
            rate,
        };
        let bulk = self.ops.bulk(&self.bulks, selection, start).await?;
        if query_param(request, "wait").as_deref() == Some("false") {
            // Started: the caller follows it (`GET /admin/bulk/{id}`).
            return Ok(json_response(
                StatusCode::ACCEPTED,
                &json!({
                    "route": route.route_name(),
                    "destination": route.as_destination(),
                    "bulk": bulk.id,
                    "dead_letters": bulk.matched,
                }),
            ));
        }
        let done = bulk.finished().await;
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "route": route.route_name(),
                "destination": route.as_destination(),
                "bulk": bulk.id,
                "dead_letters": bulk.matched,
                "completed": done.delivered,
                "failed": done.failed - done.dead,
                "dead": done.dead,
                "skipped": done.skipped + done.queued,
            }),
        ))
    }
}

/// `rate`: `N/s`, `N/m` or `N/h` as `upstream_rate` has it, or a plain
/// number a second.
fn rate(request: &Request<Incoming>) -> Result<f64, AdminError> {
    let Some(text) = query_param(request, "rate") else {
        return Ok(DEFAULT_RATE);
    };
    let per_second = text.trim().parse::<f64>().ok().filter(|r| r.is_finite());
    per_second
        .or_else(|| crate::config::parse_rate(&text))
        .filter(|rate| (MIN_RATE..=MAX_RATE).contains(rate))
        .ok_or_else(|| {
            AdminError::BadQuery(format!(
                "rate must be like \"50/s\", \"300/m\" or \"10/h\": at least 1/h, at most {MAX_RATE}/s"
            ))
        })
}

/// A selection as an operator wrote it, to read back.
fn describe(selection: &Selection) -> String {
    let mut parts = Vec::new();
    if let Some(route) = &selection.route {
        parts.push(format!("route={}", route.name));
    }
    if let Some(state) = selection.state {
        parts.push(format!("state={}", state.as_str()));
    }
    let filter = &selection.filter;
    if let Some(since) = filter.since_ms {
        parts.push(format!("since={}", rfc3339(since)));
    }
    if let Some(until) = filter.until_ms {
        parts.push(format!("until={}", rfc3339(until)));
    }
    if let Some(status) = filter.status {
        parts.push(format!("status={status}"));
    }
    if let Some(class) = filter.error {
        parts.push(format!("error={}", class.as_str()));
    }
    for each in &filter.content {
        parts.push(format!("q={}={}", each.source, each.value));
    }
    match parts.is_empty() {
        true => "every event".to_owned(),
        false => parts.join(" "),
    }
}

fn bulk_json(bulk: &Bulk) -> serde_json::Value {
    let progress = bulk.progress();
    json!({
        "id": bulk.id,
        "action": bulk.action.as_str(),
        "state": progress.state.as_str(),
        "selection": bulk.selection,
        "by": bulk.by,
        "rate": bulk.rate,
        "matched": bulk.matched,
        "done": progress.done(),
        "delivered": progress.delivered,
        "failed": progress.failed,
        "dead": progress.dead,
        "queued": progress.queued,
        "skipped": progress.skipped,
        "started_at": bulk.started_ms,
        "finished_at": progress.finished_ms,
        "cancelled_by": progress.cancelled_by,
        "last_error": progress.last_error,
        "waiting_on": progress.waiting_on,
    })
}
