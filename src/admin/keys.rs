//! One event, by its route and key (`/admin/routes/{route}/keys/{key}`,
//! docs/guide/dead-letters.md, "Failed events and dead letters"): show its record, forget
//! it, release its claim, send it again under its key or as a new event.
//! The key is percent-encoded in the path; `?destination=` names which
//! delivery of a route with several destinations an action is on.

use std::sync::Arc;

use http::StatusCode;
use serde_json::json;

use super::api::{Answer, Call};
use super::query::{percent_decode, query_flag};
use super::views::{add_preview, headers_json, record_json, request_json, sent_json};
use super::Admin;
use crate::error::{json_response, AdminError};
use crate::route::Route;

impl Admin {
    /// `GET`: the record, with its request's body when `?body=true`, and
    /// its state at each destination of a route that fans out.
    pub(super) async fn show(&self, call: Call<'_>) -> Answer {
        let (route, key) = self.keyed(&call, false).await?;
        let event = self.ops.event(&route, &key).await?;
        let record = &event.record;
        let mut shown = record_json(&route.name, &key, record);
        shown["replays"] = json!(event.replays);
        if route.fans_out() {
            shown["destinations"] = self.destination_states(&route, &key).await;
        }
        shown["response"] = record
            .response
            .as_ref()
            .map_or(serde_json::Value::Null, |response| {
                let mut shown = json!({
                    "status": response.status.as_u16(),
                    "headers": headers_json(&response.headers, None),
                    "body_kept": response.body_kept.as_str(),
                });
                add_preview(&mut shown, &response.body);
                shown
            });
        let with_body = query_flag(call.request, "body");
        shown["request"] = record
            .request
            .as_ref()
            .map_or(serde_json::Value::Null, |stored| {
                request_json(stored, with_body, route.verify.verifier.signature_header())
            });
        Ok(json_response(StatusCode::OK, &shown))
    }

    /// `DELETE`: the next delivery of the key is processed again;
    /// `?force=true` while a delivery holds it or it waits in the queue.
    pub(super) async fn forget(&self, call: Call<'_>) -> Answer {
        let (route, key) = self.keyed(&call, true).await?;
        let force = query_flag(call.request, "force");
        if force {
            tracing::warn!(target: "hookgate::admin", peer = %call.peer, route = %route.name, key,
                "forced delete: a delivery still in flight, or a queued event, no longer holds its key");
        }
        self.ops.forget(&route, &key, force).await?;
        Ok(json_response(
            StatusCode::OK,
            &json!({"deleted": true, "route": route.route_name(), "destination": route.as_destination(), "key": key}),
        ))
    }

    /// `POST …/release`: a stuck in-flight claim let go.
    pub(super) async fn release(&self, call: Call<'_>) -> Answer {
        let (route, key) = self.keyed(&call, true).await?;
        self.ops.release(&route, &key).await?;
        Ok(json_response(
            StatusCode::OK,
            &json!({"released": true, "route": route.route_name(), "destination": route.as_destination(), "key": key}),
        ))
    }

    /// `POST …/redeliver`: the stored request sent again under its key.
    pub(super) async fn redeliver(&self, call: Call<'_>) -> Answer {
        let (route, key) = self.keyed(&call, true).await?;
        let force = query_flag(call.request, "force");
        let sent = (self.ops)
            .redeliver(Arc::clone(&route), key.clone(), force)
            .await?;
        tracing::info!(target: "hookgate::admin", peer = %call.peer, route = %route.name, key, attempt = sent.attempt,
            result = sent.settled.as_str(), "redelivered");
        Ok(sent_json(&route.name, &sent, None))
    }

    /// `POST …/replay`: the stored request sent as a new event.
    pub(super) async fn replay(&self, call: Call<'_>) -> Answer {
        let (route, key) = self.keyed(&call, true).await?;
        let sent = (self.ops).replay(Arc::clone(&route), key.clone()).await?;
        tracing::info!(target: "hookgate::admin", peer = %call.peer, route = %route.name, key, replay = sent.key,
            result = sent.settled.as_str(), "replayed");
        Ok(sent_json(&route.name, &sent, Some(&key)))
    }

    /// The delivery and the decoded key a call names; an action (`acts`)
    /// is on the delivery [`Admin::acted_on`] picks.
    async fn keyed(&self, call: &Call<'_>, acts: bool) -> Result<(Arc<Route>, String), AdminError> {
        let route = self.target(call.request, call.param("route"))?;
        let key = percent_decode(call.param("key")).ok_or(AdminError::KeyEncoding)?;
        let route = match acts {
            true => self.acted_on(route, &key).await?,
            false => route,
        };
        let (method, force) = (call.request.method(), query_flag(call.request, "force"));
        tracing::info!(target: "hookgate::admin", peer = %call.peer, via = call.via, role = call.role, %method,
            route = %route.name, key, path = call.request.uri().path(), force, "admin action");
        Ok((route, key))
    }
}
