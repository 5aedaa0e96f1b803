//! The admin listener (`[admin] listen`), never on the public port: its
//! endpoints are the table in [`api`] (docs/reference/admin-api.md is generated from
//! it), the console is `/ui` ([`crate::console`]).
//!
//! - `/metrics`, `/healthz` and `/readyz` need no token. `/readyz` is 503
//!   for a store of the process's own (the embedded file) that takes no
//!   write, never for a shared store's outage: every replica would leave
//!   the load balancer at once. Its JSON body says how the store is and
//!   lists store settings that would silently lose claims;
//!   `hookgate_store_up` carries it to the alerts.
//! - `/admin/…` is behind `Authorization: Bearer <admin.token>`, or a
//!   console session (with its CSRF token on changes); 404 when no token
//!   is configured. `admin.read_token` reads: a row only the operator may
//!   call is 403 `read_only` to it ([`crate::access`]).
//! - Who asks is settled before what they ask exists, so a caller without
//!   a token learns nothing of the paths. Every change asked is audited
//!   with its answer ([`audit`]) and logged with the caller's address,
//!   `via` (`token` or `console`) and `role` (`operator` or `reader`).
//!   Reads and changes go through the operator's door (`ops::Operator`).

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

mod api;
mod audit;
mod bulk;
mod destinations;
mod history;
mod keys;
mod query;
mod reconcile;
mod routes;
mod views;

use self::api::{Answer, Call, Found, Who};
use self::audit::{Audit, Entry};
use self::history::History;
use self::query::query_param;
use self::views::{record_json, text};
use crate::access::Tokens;
use crate::console::{Caller, Console};
use crate::delivery::Parts;
use crate::error::{json_response, AdminError};
use crate::ops::bulk::Bulks;
use crate::ops::{EventsQuery, Operator};
use crate::reconcile::Reconciler;
use crate::reload::Reloader;
use crate::server::{accept_loop, ConnectionGauges, Limits};
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
            ConnectionGauges::unexported(),
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
        if path == "/ui" || path.starts_with("/ui/") {
            return self.console.handle(request, &self.tokens, peer).await;
        }
        let answer = match api::find(request.method(), &path) {
            Ok((endpoint, params)) if endpoint.who == Who::Anyone => {
                let call = Call::new(&request, peer, ("none", "anonymous"), params);
                (endpoint.handler)(self, call).await
            }
            found if path.starts_with("/admin/") => self.admin(&request, &path, peer, found).await,
            found => Err(found.err().unwrap_or(AdminError::NotFound)),
        };
        answer.unwrap_or_else(|error| error.to_response())
    }

    /// `GET /metrics`.
    async fn metrics(&self) -> Answer {
        self.ops.refresh_gauges().await;
        let mut response = text(StatusCode::OK, self.parts.metrics.render());
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        Ok(response)
    }

    /// `GET /readyz`.
    async fn readyz(&self) -> Answer {
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
        Ok(json_response(status, &body))
    }

    /// An `/admin/…` request: its caller, then what it `found` in the
    /// table, if that caller may ask it; audited when it changes anything.
    async fn admin(
        &self,
        request: &Request<Incoming>,
        path: &str,
        peer: SocketAddr,
        found: Result<Found<'_>, AdminError>,
    ) -> Answer {
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
            .authorised(request, path, peer, presented, &mut audited, found)
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
        found: Result<Found<'_>, AdminError>,
    ) -> Answer {
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
        let (endpoint, params) = found?;
        if let Who::Holder(needed) = endpoint.who {
            if !role.covers(needed) {
                tracing::warn!(target: "hookgate::admin", %peer, via, role = role.as_str(), method = %request.method(), path,
                    "admin request refused: the read token changes nothing");
                return Err(AdminError::ReadOnly);
            }
        }
        let call = Call::new(request, peer, (via, role.as_str()), params);
        (endpoint.handler)(self, call).await
    }

    /// A request with neither a valid token nor a console session.
    fn refused(&self, peer: SocketAddr, path: &str) -> AdminError {
        tracing::warn!(target: "hookgate::admin", %peer, path, "admin request with a missing or wrong token");
        AdminError::Unauthorized
    }

    /// `POST /admin/reload`: the config file read again, as SIGHUP does.
    async fn reload(&self, call: Call<'_>) -> Answer {
        let (peer, via, role) = (call.peer, call.via, call.role);
        tracing::info!(target: "hookgate::admin", %peer, via, role, "admin action: reload");
        let reloader = Arc::clone(&self.reloader);
        let reloaded = tokio::task::spawn_blocking(move || reloader.reload())
            .await
            .map_err(|_| AdminError::ConfigInvalid("the reload did not finish".into()))?;
        match reloaded {
            Ok(needs_restart) => Ok(json_response(
                StatusCode::OK,
                &json!({ "reloaded": true, "needs_restart": needs_restart }),
            )),
            Err(problems) => Err(AdminError::ConfigInvalid(problems)),
        }
    }

    /// `GET /admin/api`: the endpoints, as docs/reference/admin-api.md lists them.
    async fn api(&self) -> Answer {
        Ok(json_response(StatusCode::OK, &api::json()))
    }

    /// `GET /admin/audit`.
    async fn audit(&self) -> Answer {
        Ok(json_response(StatusCode::OK, &self.audit.json()))
    }

    /// `GET /admin/history`.
    async fn history(&self) -> Answer {
        let totals = history::totals(&self.parts);
        Ok(json_response(StatusCode::OK, &self.history.json(&totals)))
    }

    /// `GET /admin/events`: one page of records, newest first.
    async fn events(&self, call: Call<'_>) -> Answer {
        let request = call.request;
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

/// Records a page of `GET /admin/events` holds unless `limit` says.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;

/// The credentials of an `Authorization: Bearer …` value; the scheme's
/// name is case-insensitive (RFC 9110 §11.1).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(rest)
}
