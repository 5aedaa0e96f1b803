//! The admin listener (`[admin] listen`), never on the public port.
//!
//! - `GET /metrics` — Prometheus text format.
//! - `GET /healthz` — 200 while the process serves.
//! - `GET /readyz` — 200 when the config is loaded, the listeners are up
//!   and shutdown has not begun, and — for a store of the process's own,
//!   the embedded file — the store takes a write; else 503. A shared
//!   store's outage does not make it unready (every replica would leave
//!   the load balancer at once): the JSON body says how the store is (its
//!   readiness probe, with the permissions deliveries use) and lists store
//!   settings that would silently lose claims; `hookgate_store_up` carries
//!   it to the alerts.
//! - `/ui` — the operator console ([`crate::console`]).
//! - Behind `Authorization: Bearer <admin.token>`, or a console session
//!   (with its CSRF token on changes); 404 when no token is configured.
//!   `admin.read_token` reads everything and changes nothing: any other
//!   method than `GET` and `HEAD` is 403 `read_only` ([`crate::access`]).
//!   README, "Failed events and dead letters":
//!   - `GET /admin/events?route=&state=&since=&until=&status=&error=&q=&limit=&cursor=`
//!     pages through records, newest first (`ops::filter`);
//!   - `/admin/routes/{route}/keys/{key}`: `GET` shows the record (its
//!     request with `?body=true`), `DELETE` forgets it (the next delivery is
//!     processed again), `POST …/release` force-releases a stuck in-flight
//!     claim, `POST …/redeliver` sends the stored request again under the
//!     same key, `POST …/replay` as a new event under a new key;
//!   - `POST /admin/events/{redeliver,replay,forget}` over the same filters
//!     starts a bulk action (`dry_run=true` counts), `GET /admin/bulk` and
//!     `GET`/`DELETE /admin/bulk/{id}` follow and cancel it ([`bulk`]);
//!   - `POST /admin/routes/{route}/dead-letters/redeliver?rate=` redrives
//!     every dead letter of the route (a bulk action it waits for);
//!   - `GET /admin/routes` lists the routes with their traffic controls
//!     ([`routes`]); `GET /admin/routes/{route}/blocked` the entities of an
//!     ordered route waiting behind a dead event;
//!     `POST /admin/routes/{route}/pause?by=&reason=` and `…/resume` pause
//!     and resume a route for the whole fleet (README, "Traffic control"). Redeliveries,
//!     replays and redrives of a paused route are refused (409
//!     `route_paused`): a paused upstream is not called.
//!
//!   - `GET`/`POST /admin/routes/{route}/reconcile`: reconciliation with
//!     the sender's API, its state or one pass now ([`reconcile`]);
//!   - `GET /admin/audit`: the operator actions asked of this instance
//!     ([`audit`]); `GET /admin/history`: each route's outcomes over the
//!     last 24 hours ([`history`]);
//!   - `POST /admin/reload` reloads the config file as SIGHUP does, and
//!     says whether it was applied (422 `config_invalid` with the problems
//!     when not): what `hookgate reload` sends.
//!
//!   Every admin action is logged with the caller's address, `via`
//!   (`token` or `console`) and `role` (`operator` or `reader`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::json;
use tokio::net::TcpListener;

mod audit;
mod bulk;
mod destinations;
mod history;
mod query;
mod reconcile;
mod routes;
mod views;

use self::audit::{Audit, Entry};
use self::history::History;
use self::query::{percent_decode, query_flag, query_param};

use self::views::{add_preview, headers_json, record_json, request_json, sent_json, text};
use crate::access::Tokens;
use crate::console::{Caller, Console};
use crate::delivery::Parts;
use crate::error::{json_response, AdminError};
use crate::ops::bulk::Bulks;
use crate::ops::{EventsQuery, Operator};
use crate::reconcile::Reconciler;
use crate::reload::Reloader;
use crate::server::{accept_loop, Limits};
use crate::shutdown::Shutdown;
use crate::store::Cursor;

/// Admin connections are few (a scraper, a probe, an operator).
const LIMITS: Limits = Limits {
    max_connections: 64,
    header_read_timeout: Duration::from_secs(10),
    idle_timeout: Duration::from_secs(60),
};

pub struct Admin {
    /// The components the read-only views show (routes, metrics, clock).
    parts: Parts,
    /// The operator's door: every verb an admin request asks for.
    ops: Operator,
    reloader: Arc<Reloader>,
    /// `/admin/routes/{route}/reconcile`.
    reconciler: Arc<Reconciler>,
    tokens: Tokens,
    /// Store settings that would lose claims, found at start-up.
    risks: Vec<String>,
    /// The operator console's sessions (`/ui`).
    console: Console,
    /// The bulk actions this instance took.
    bulks: Arc<Bulks>,
    /// The operator actions asked of this instance.
    audit: Audit,
    /// The routes' outcomes over the last 24 hours.
    history: Arc<History>,
}

impl Admin {
    pub fn new(
        ops: Operator,
        parts: Parts,
        reloader: Arc<Reloader>,
        reconciler: Arc<Reconciler>,
        tokens: Tokens,
        risks: Vec<String>,
    ) -> Self {
        Self {
            ops,
            parts,
            reloader,
            reconciler,
            tokens,
            risks,
            console: Console::default(),
            bulks: Arc::default(),
            audit: Audit::default(),
            history: Arc::default(),
        }
    }

    /// Serve until the gateway stops (after its drain: `/readyz` answers
    /// "draining" meanwhile).
    pub(crate) async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: Shutdown) {
        self.history.keep(self.parts.clone(), shutdown.clone());
        let open = accept_loop(
            listener,
            LIMITS,
            None,
            shutdown.stopped(),
            move |peer, _| {
                let admin = Arc::clone(&self);
                move |request: Request<Incoming>| {
                    let admin = Arc::clone(&admin);
                    async move { admin.handle(request, peer).await }
                }
            },
        )
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(1), open.close()).await;
    }

    async fn handle(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        match (request.method(), path.as_str()) {
            (&Method::GET, "/metrics") => {
                self.ops.refresh_gauges().await;
                let mut response = text(StatusCode::OK, self.parts.metrics.render());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into()),
            (&Method::GET, "/readyz") => self.readyz().await,
            (_, path) if path == "/ui" || path.starts_with("/ui/") => {
                self.console.handle(request, &self.tokens, peer).await
            }
            (_, path) if path.starts_with("/admin/") => self
                .admin(&request, path, peer)
                .await
                .unwrap_or_else(|error| error.to_response()),
            _ => AdminError::NotFound.to_response(),
        }
    }

    async fn readyz(&self) -> Response<Full<Bytes>> {
        let readiness = self.ops.readiness().await;
        let mut body = json!({
            "status": if readiness.ready() { "ready" } else { "not_ready" },
            "config": "loaded",
            "store": match &readiness.store {
                Ok(()) => "ok".to_owned(),
                Err(error) => error.to_string(),
            },
            "store_shared": !readiness.store_local,
            "draining": readiness.draining,
            "warnings": self.risks,
            // A store that answers but refuses: ready (readiness is
            // local), and said here.
            "store_refusing": (readiness.refused.iter())
                .map(|refused| json!({
                    "op": refused.op,
                    "scope": refused.source,
                    "error": refused.error,
                    "since": refused.since_ms,
                }))
                .collect::<Vec<_>>(),
        });
        if !readiness.delivery.is_empty() {
            body["async"] = json!({
                "workers": if readiness.draining { "stopping" } else { "running" },
                "routes": readiness.delivery,
            });
        }
        let status = if readiness.ready() {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        json_response(status, &body)
    }

    async fn admin(
        &self,
        request: &Request<Incoming>,
        path: &str,
        peer: SocketAddr,
    ) -> Result<Response<Full<Bytes>>, AdminError> {
        if !self.tokens.on() {
            return Err(AdminError::Off);
        }
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| bearer(value.as_bytes()));
        let change = !matches!(*request.method(), Method::GET | Method::HEAD);
        // A change: audited with its answer — a refused one too — or as
        // abandoned (status 0) when the caller hangs up before it.
        let mut audited = Audited {
            audit: &self.audit,
            entry: change.then(|| Entry {
                at_ms: self.parts.clock.now_ms(),
                peer: peer.to_string(),
                via: if presented.is_some() { "token" } else { "none" },
                role: "anonymous",
                method: request.method().to_string(),
                path: (request.uri().path_and_query()).map_or(path.to_owned(), ToString::to_string),
                status: 0,
            }),
        };
        let answer = self
            .authorised(request, path, peer, presented, &mut audited)
            .await;
        if let Some(entry) = audited.entry.as_mut() {
            entry.status = match &answer {
                Ok(response) => response.status(),
                Err(error) => error.status(),
            }
            .as_u16();
        }
        answer
    }

    /// Who asks — a bearer token, or a console session (with its CSRF
    /// token on anything but a read) — written on `audited`; then the
    /// request, if that caller may ask it.
    async fn authorised(
        &self,
        request: &Request<Incoming>,
        path: &str,
        peer: SocketAddr,
        presented: Option<&[u8]>,
        audited: &mut Audited<'_>,
    ) -> Result<Response<Full<Bytes>>, AdminError> {
        let (via, role) = match presented {
            Some(presented) => match self.tokens.role_of(presented) {
                Some(role) => ("token", role),
                None => return Err(self.refused(peer, path)),
            },
            None => match self.console.caller(request.method(), request.headers()) {
                Caller::Console(role) => ("console", role),
                Caller::CsrfMissing(role) => {
                    audited.by("console", role.as_str());
                    tracing::warn!(target: "hookgate::admin", %peer, path, "console request without its CSRF token");
                    return Err(AdminError::Csrf);
                }
                Caller::Nobody => return Err(self.refused(peer, path)),
            },
        };
        audited.by(via, role.as_str());
        if !role.may(request.method()) {
            tracing::warn!(target: "hookgate::admin", %peer, via, role = role.as_str(), method = %request.method(), path,
                "admin request refused: the read token changes nothing");
            return Err(AdminError::ReadOnly);
        }
        self.act(request, path, peer, (via, role.as_str())).await
    }

    /// An authorised admin request, by path.
    async fn act(
        &self,
        request: &Request<Incoming>,
        path: &str,
        peer: SocketAddr,
        (via, role): (&'static str, &'static str),
    ) -> Result<Response<Full<Bytes>>, AdminError> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = request.method().clone();
        if segments == ["admin", "events"] {
            if method != Method::GET {
                return Err(AdminError::MethodNotAllowed);
            }
            return self.events(request).await;
        }
        match (segments.as_slice(), &method) {
            (["admin", "audit"], &Method::GET) => {
                return Ok(json_response(StatusCode::OK, &self.audit.json()))
            }
            (["admin", "history"], &Method::GET) => {
                let totals = history::totals(&self.parts);
                return Ok(json_response(StatusCode::OK, &self.history.json(&totals)));
            }
            (["admin", "routes", route, "blocked"], &Method::GET) => {
                return self.blocked(request, route).await
            }
            (["admin", "routes", route, "reconcile"], _) => {
                return self.reconcile(request, route, peer, (via, role)).await
            }
            (["admin", "audit" | "history"] | ["admin", "routes", _, "blocked"], _) => {
                return Err(AdminError::MethodNotAllowed)
            }
            _ => {}
        }
        match segments.as_slice() {
            ["admin", "events", action] => {
                let by = bulk::caller(peer, via, role);
                return self.bulk_start(request, action, by).await;
            }
            ["admin", "bulk"] => return self.bulk_view(&method, None, via),
            ["admin", "bulk", id] => {
                return self.bulk_view(&method, Some(id), &bulk::caller(peer, via, role))
            }
            _ => {}
        }
        if segments == ["admin", "reload"] {
            if method != Method::POST {
                return Err(AdminError::MethodNotAllowed);
            }
            tracing::info!(target: "hookgate::admin", %peer, via, role, "admin action: reload");
            let reloader = Arc::clone(&self.reloader);
            let reloaded = tokio::task::spawn_blocking(move || reloader.reload())
                .await
                .map_err(|_| AdminError::ConfigInvalid("the reload did not finish".into()))?;
            return match reloaded {
                Ok(needs_restart) => Ok(json_response(
                    StatusCode::OK,
                    &json!({ "reloaded": true, "needs_restart": needs_restart }),
                )),
                Err(problems) => Err(AdminError::ConfigInvalid(problems)),
            };
        }
        if segments == ["admin", "routes"] {
            if method != Method::GET {
                return Err(AdminError::MethodNotAllowed);
            }
            return Ok(json_response(
                StatusCode::OK,
                &json!({ "routes": self.routes().await }),
            ));
        }
        let (route_name, target) = match segments.as_slice() {
            ["admin", "routes", route, "keys", key] => (*route, Target::Key(key, None)),
            ["admin", "routes", route, "keys", key, action] => {
                (*route, Target::Key(key, Some(*action)))
            }
            ["admin", "routes", route, "dead-letters", "redeliver"] => (*route, Target::Redrive),
            ["admin", "routes", route, "pause"] => (*route, Target::Pause(true)),
            ["admin", "routes", route, "resume"] => (*route, Target::Pause(false)),
            _ => return Err(AdminError::NotFound),
        };
        let route = self.target(request, route_name)?;
        let (raw_key, action) = match target {
            Target::Key(raw_key, action) => (raw_key, action),
            Target::Pause(pause) => {
                if method != Method::POST {
                    return Err(AdminError::MethodNotAllowed);
                }
                return self.pause(request, &route, pause, peer, (via, role)).await;
            }
            Target::Redrive => {
                if method != Method::POST {
                    return Err(AdminError::MethodNotAllowed);
                }
                tracing::info!(target: "hookgate::admin", %peer, via, role, route = %route.name, "admin action: redrive dead letters");
                return self
                    .redrive(request, route, bulk::caller(peer, via, role))
                    .await;
            }
        };
        let key = percent_decode(raw_key).ok_or(AdminError::KeyEncoding)?;
        let route = match method == Method::GET && action.is_none() {
            true => route,
            false => self.acted_on(route, &key).await?,
        };
        let force = query_flag(request, "force");
        tracing::info!(target: "hookgate::admin", %peer, via, role, %method, route = %route.name, key, action, force, "admin action");

        match (method, action) {
            (Method::GET, None) => {
                let event = self.ops.event(&route, &key).await?;
                let record = &event.record;
                let mut shown = record_json(&route.name, &key, record);
                shown["replays"] = json!(event.replays);
                if route.fans_out() {
                    shown["destinations"] = self.destination_states(&route, &key).await;
                }
                shown["response"] =
                    record
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
                let with_body = query_flag(request, "body");
                shown["request"] = record
                    .request
                    .as_ref()
                    .map_or(serde_json::Value::Null, |stored| {
                        request_json(stored, with_body, route.verifier.signature_header())
                    });
                Ok(json_response(StatusCode::OK, &shown))
            }
            (Method::DELETE, None) => {
                if force {
                    tracing::warn!(target: "hookgate::admin", %peer, route = %route.name, key,
                        "forced delete: a delivery still in flight, or a queued event, no longer holds its key");
                }
                self.ops.forget(&route, &key, force).await?;
                Ok(json_response(
                    StatusCode::OK,
                    &json!({"deleted": true, "route": route.route_name(), "destination": route.as_destination(), "key": key}),
                ))
            }
            (Method::POST, Some("release")) => {
                self.ops.release(&route, &key).await?;
                Ok(json_response(
                    StatusCode::OK,
                    &json!({"released": true, "route": route.route_name(), "destination": route.as_destination(), "key": key}),
                ))
            }
            (Method::POST, Some("redeliver")) => {
                let sent = (self.ops)
                    .redeliver(Arc::clone(&route), key.clone(), force)
                    .await?;
                tracing::info!(target: "hookgate::admin", %peer, route = %route.name, key, attempt = sent.attempt,
                    result = sent.settled.as_str(), "redelivered");
                Ok(sent_json(&route.name, &sent, None))
            }
            (Method::POST, Some("replay")) => {
                let sent = (self.ops).replay(Arc::clone(&route), key.clone()).await?;
                tracing::info!(target: "hookgate::admin", %peer, route = %route.name, key, replay = sent.key,
                    result = sent.settled.as_str(), "replayed");
                Ok(sent_json(&route.name, &sent, Some(&key)))
            }
            (_, None | Some("release" | "redeliver" | "replay")) => {
                Err(AdminError::MethodNotAllowed)
            }
            _ => Err(AdminError::NotFound),
        }
    }

    /// A request with neither a valid token nor a console session.
    fn refused(&self, peer: SocketAddr, path: &str) -> AdminError {
        tracing::warn!(target: "hookgate::admin", %peer, path, "admin request with a missing or wrong token");
        AdminError::Unauthorized
    }

    /// `GET /admin/events`: one page of records, newest first.
    async fn events(
        &self,
        request: &Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, AdminError> {
        // Before the listing is read: a walk goes on from here over what
        // changed while it ran (`since=as_of`).
        let as_of = self.parts.clock.now_ms();
        let selection = self.selection(request)?;
        let limit = match query_param(request, "limit") {
            None => DEFAULT_PAGE,
            Some(limit) => limit
                .parse::<usize>()
                .ok()
                .filter(|limit| (1..=MAX_PAGE).contains(limit))
                .ok_or_else(|| AdminError::BadQuery(format!("limit must be 1-{MAX_PAGE}")))?,
        };
        let cursor =
            match query_param(request, "cursor") {
                None => None,
                Some(text) => Some(Cursor::decode(&text).ok_or_else(|| {
                    AdminError::BadQuery("cursor is not one this API gave".into())
                })?),
            };
        let query = EventsQuery {
            route: selection.route,
            state: selection.state,
            filter: selection.filter,
            limit,
            cursor,
        };
        let page = self.ops.events(query).await?;
        let events: Vec<serde_json::Value> = (page.events.iter())
            .map(|(route, listed)| record_json(route, &listed.id, &listed.record))
            .collect();
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "events": events,
                "next_cursor": page.next.map(|cursor| cursor.encode()),
                "as_of": as_of,
            }),
        ))
    }
}

/// An audit entry written when dropped: with the answer's status, or 0
/// when the caller hung up first.
struct Audited<'a> {
    audit: &'a Audit,
    entry: Option<Entry>,
}

impl Audited<'_> {
    /// Who asked, once known (a read is not audited).
    fn by(&mut self, via: &'static str, role: &'static str) {
        if let Some(entry) = self.entry.as_mut() {
            (entry.via, entry.role) = (via, role);
        }
    }
}

impl Drop for Audited<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.audit.record(entry);
        }
    }
}

/// What an admin path under `/admin/routes/{route}/` names.
enum Target<'a> {
    Key(&'a str, Option<&'a str>),
    Redrive,
    /// Pause (`true`) or resume the route.
    Pause(bool),
}

/// Records a page of `GET /admin/events` holds unless `limit` says.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;

/// The credentials of an `Authorization: Bearer …` value; the scheme's
/// name is case-insensitive (RFC 9110 §11.1).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(rest)
}
