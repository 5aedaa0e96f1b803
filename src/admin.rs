//! The admin listener (`[admin] listen`), never on the public port.
//!
//! - `GET /metrics` — Prometheus text format.
//! - `GET /healthz` — 200 while the process serves.
//! - `GET /readyz` — 200 when the config is loaded, the store answers its
//!   readiness probe (with the permissions deliveries use) within its
//!   timeout and shutdown has not begun; else 503. The JSON body
//!   says why and lists store settings that would silently lose claims.
//! - `/ui` — the operator console ([`crate::console`]).
//! - Behind `Authorization: Bearer <admin.token>`, or a console session
//!   (with its CSRF token on changes); 404 when no token is configured.
//!   README, "Failed events and dead letters":
//!   - `GET /admin/events?route=&state=&limit=&cursor=` pages through
//!     records, newest first;
//!   - `/admin/routes/{route}/keys/{key}`: `GET` shows the record (its
//!     request with `?body=true`), `DELETE` forgets it (the next delivery is
//!     processed again), `POST …/release` force-releases a stuck in-flight
//!     claim, `POST …/redeliver` sends the stored request again under the
//!     same key, `POST …/replay` as a new event under a new key;
//!   - `POST /admin/routes/{route}/dead-letters/redeliver?rate=` redrives
//!     every dead letter of the route;
//!   - `GET /admin/routes` lists the routes with their traffic controls;
//!     `POST /admin/routes/{route}/pause?by=&reason=` and `…/resume` pause
//!     and resume a route for the whole fleet (README, "Traffic control"). Redeliveries,
//!     replays and redrives of a paused route are refused (409
//!     `route_paused`): a paused upstream is not called.
//!
//!   - `POST /admin/reload` reloads the config file as SIGHUP does, and
//!     says whether it was applied (422 `config_invalid` with the problems
//!     when not): what `hookgate reload` sends.
//!
//!   Every admin action is logged with the caller's address and `via`
//!   (`token` or `console`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use sha2::{Digest, Sha256};

use crate::config::DeliveryMode;
use crate::console::{Caller, Console};
use crate::delivery::Engine;
use crate::error::{json_response, AdminError};
use crate::redeliver::Sent;
use crate::reload::Reloader;
use crate::route::Route;
use crate::secret::Secret;
use crate::server::{accept_loop, Limits};
use crate::store::{
    Clock, Cursor, Deleted, ForceRelease, Record, RecordState, StoreError, StoredRequest,
};
use crate::traffic::Pause;

/// Admin connections are few (a scraper, a probe, an operator).
const LIMITS: Limits = Limits {
    max_connections: 64,
    header_read_timeout: Duration::from_secs(10),
    idle_timeout: Duration::from_secs(60),
};

pub struct Admin {
    gateway: Arc<Engine>,
    reloader: Arc<Reloader>,
    token: Option<Secret>,
    /// Store settings that would lose claims, found at start-up.
    risks: Vec<String>,
    /// The operator console's sessions (`/ui`).
    console: Console,
}

impl Admin {
    pub fn new(
        gateway: Arc<Engine>,
        reloader: Arc<Reloader>,
        token: Option<Secret>,
        risks: Vec<String>,
    ) -> Self {
        Self {
            gateway,
            reloader,
            token,
            risks,
            console: Console::default(),
        }
    }

    /// Serve until `shutdown` resolves.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let open = accept_loop(listener, LIMITS, None, shutdown, move |peer, _| {
            let admin = Arc::clone(&self);
            move |request: Request<Incoming>| {
                let admin = Arc::clone(&admin);
                async move { admin.handle(request, peer).await }
            }
        })
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(1), open.close()).await;
    }

    async fn handle(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        match (request.method(), path.as_str()) {
            (&Method::GET, "/metrics") => {
                self.gateway.refresh_gauges().await;
                let mut response = text(StatusCode::OK, self.gateway.metrics().render());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into()),
            (&Method::GET, "/readyz") => self.readyz().await,
            (_, path) if path == "/ui" || path.starts_with("/ui/") => {
                self.console
                    .handle(request, self.token.as_ref(), peer)
                    .await
            }
            (_, path) if path.starts_with("/admin/") => self
                .admin(&request, path, peer)
                .await
                .unwrap_or_else(|error| error.to_response()),
            _ => AdminError::NotFound.to_response(),
        }
    }

    async fn readyz(&self) -> Response<Full<Bytes>> {
        let store = self.gateway.store().ping().await;
        (self.gateway.metrics().store_up).set(i64::from(store.is_ok()));
        let draining = self.gateway.is_draining();
        let ready = store.is_ok() && !draining;
        let mut body = json!({
            "status": if ready { "ready" } else { "not_ready" },
            "config": "loaded",
            "store": match &store {
                Ok(()) => "ok".to_owned(),
                Err(error) => error.to_string(),
            },
            "draining": draining,
            "warnings": self.risks,
        });
        let delivery = self.gateway.delivery_status().await;
        if !delivery.is_empty() {
            body["async"] = json!({
                "workers": if draining { "stopping" } else { "running" },
                "routes": delivery,
            });
        }
        let status = if ready {
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
        let Some(token) = &self.token else {
            return Err(AdminError::Off);
        };
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        // The bearer token, or a console session (with its CSRF token on
        // anything but a read).
        let via = match presented {
            Some(presented) if bool::from(presented.ct_eq(token.expose())) => "token",
            Some(_) => return Err(self.refused(peer, path)),
            None => match self.console.caller(request.method(), request.headers()) {
                Caller::Console => "console",
                Caller::CsrfMissing => {
                    tracing::warn!(target: "hookgate::admin", %peer, path, "console request without its CSRF token");
                    return Err(AdminError::Csrf);
                }
                Caller::Nobody => return Err(self.refused(peer, path)),
            },
        };

        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = request.method().clone();
        if segments == ["admin", "events"] {
            if method != Method::GET {
                return Err(AdminError::MethodNotAllowed);
            }
            return self.events(request).await;
        }
        if segments == ["admin", "reload"] {
            if method != Method::POST {
                return Err(AdminError::MethodNotAllowed);
            }
            tracing::info!(target: "hookgate::admin", %peer, via, "admin action: reload");
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
        let route = self
            .gateway
            .route(route_name)
            .ok_or(AdminError::UnknownRoute)?;
        let (raw_key, action) = match target {
            Target::Key(raw_key, action) => (raw_key, action),
            Target::Pause(pause) => {
                if method != Method::POST {
                    return Err(AdminError::MethodNotAllowed);
                }
                return self.pause(request, &route, pause, peer, via).await;
            }
            Target::Redrive => {
                if method != Method::POST {
                    return Err(AdminError::MethodNotAllowed);
                }
                let rate = match query_param(request, "rate") {
                    None => DEFAULT_REDRIVE_RATE,
                    Some(rate) => rate
                        .parse::<u32>()
                        .ok()
                        .filter(|rate| (1..=10_000).contains(rate))
                        .ok_or_else(|| {
                            AdminError::BadQuery("rate must be 1-10000 a second".into())
                        })?,
                };
                tracing::info!(target: "hookgate::admin", %peer, via, route = %route.name, rate, "admin action: redrive dead letters");
                let done = self.gateway.redrive(Arc::clone(&route), rate).await?;
                return Ok(json_response(
                    StatusCode::OK,
                    &json!({
                        "route": route.name,
                        "dead_letters": done.dead_letters,
                        "completed": done.completed,
                        "failed": done.failed,
                        "dead": done.dead,
                        "skipped": done.skipped,
                    }),
                ));
            }
        };
        let key = percent_decode(raw_key).ok_or(AdminError::KeyEncoding)?;
        let store = self.gateway.store();
        let store_key = store.key(&route.scope, &key);
        let force = query_flag(request, "force");
        tracing::info!(target: "hookgate::admin", %peer, via, %method, route = %route.name, key, action, force, "admin action");

        let unavailable = |error: StoreError| AdminError::StoreUnavailable(error.to_string());
        match (method, action) {
            (Method::GET, None) => {
                let record = store
                    .get(&store_key)
                    .await
                    .map_err(unavailable)?
                    .ok_or(AdminError::KeyNotFound)?;
                let mut shown = record_json(&route.name, &key, &record);
                shown["replays"] = json!(self.gateway.replays_of(&route, &key).await?);
                shown["response"] =
                    record
                        .response
                        .as_ref()
                        .map_or(serde_json::Value::Null, |response| {
                            let mut shown = json!({
                                "status": response.status.as_u16(),
                                "headers": headers_json(&response.headers),
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
                        request_json(stored, with_body)
                    });
                Ok(json_response(StatusCode::OK, &shown))
            }
            (Method::DELETE, None) => {
                if force {
                    tracing::warn!(target: "hookgate::admin", %peer, route = %route.name, key,
                        "forced delete: a delivery still in flight no longer holds its key");
                }
                match store.delete(&store_key, force).await.map_err(unavailable)? {
                    Deleted::Deleted => Ok(json_response(
                        StatusCode::OK,
                        &json!({"deleted": true, "route": route.name, "key": key}),
                    )),
                    Deleted::InFlight => Err(AdminError::InFlight),
                    Deleted::NotFound => Err(AdminError::KeyNotFound),
                }
            }
            (Method::POST, Some("release")) => {
                match store.force_release(&store_key).await.map_err(unavailable)? {
                    ForceRelease::Released => Ok(json_response(
                        StatusCode::OK,
                        &json!({"released": true, "route": route.name, "key": key}),
                    )),
                    ForceRelease::NotInFlight => Err(AdminError::NotInFlight),
                    ForceRelease::NotFound => Err(AdminError::KeyNotFound),
                }
            }
            (Method::POST, Some("redeliver")) => {
                let sent = (self.gateway)
                    .redeliver(Arc::clone(&route), key.clone(), force)
                    .await?;
                tracing::info!(target: "hookgate::admin", %peer, route = %route.name, key, attempt = sent.attempt,
                    result = sent.settled.as_str(), "redelivered");
                Ok(sent_json(&route.name, &sent, None))
            }
            (Method::POST, Some("replay")) => {
                let sent = (self.gateway)
                    .replay(Arc::clone(&route), key.clone())
                    .await?;
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

    /// `POST /admin/routes/{route}/pause` (`pause`) or `…/resume`, with the
    /// caller's `?by=` and `?reason=`: written to the store for the whole
    /// fleet, logged and counted. Pausing a paused route (or resuming a
    /// running one) changes nothing and says so.
    async fn pause(
        &self,
        request: &Request<Incoming>,
        route: &Route,
        pause: bool,
        peer: SocketAddr,
        via: &str,
    ) -> Result<Response<Full<Bytes>>, AdminError> {
        let by = query_param(request, "by")
            .filter(|by| !by.is_empty())
            .unwrap_or_else(|| format!("admin api ({peer})"));
        let reason = query_param(request, "reason").filter(|reason| !reason.is_empty());
        if by.len() > 200 || reason.as_ref().is_some_and(|reason| reason.len() > 1000) {
            return Err(AdminError::BadQuery(
                "by is at most 200 bytes, reason at most 1000".into(),
            ));
        }
        let pauses = self.gateway.pauses();
        let current = pauses.of(&route.name);
        let action = if pause { "pause" } else { "resume" };
        let changed = pause != current.is_some();
        if changed {
            let new = pause.then(|| Pause {
                since_ms: Clock::system().now_ms(),
                by: by.clone(),
                reason: reason.clone(),
            });
            self.gateway
                .set_pause(&route.name, new.as_ref())
                .await
                .map_err(|error| AdminError::StoreUnavailable(error.to_string()))?;
            self.gateway
                .metrics()
                .route_control_changes
                .with_label_values(&[&route.name, action])
                .inc();
        }
        tracing::warn!(target: "hookgate::admin", %peer, via, route = %route.name, action, by, reason, changed,
            "admin action: route {}", if pause { "paused" } else { "resumed" });
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "route": route.name,
                "changed": changed,
                "paused": pauses.of(&route.name).map(|pause| pause_json(&pause)),
            }),
        ))
    }

    /// `GET /admin/routes`: every route with its traffic controls.
    async fn routes(&self) -> Vec<serde_json::Value> {
        let mut shown = Vec::new();
        for route in self.gateway.routes() {
            let store = self.gateway.store();
            let (delivery, queued) = match &route.delivery {
                DeliveryMode::Sync => ("sync", None),
                DeliveryMode::Async(_) => (
                    "async",
                    store.count(&route.scope, RecordState::Queued).await.ok(),
                ),
            };
            let dead = store.count(&route.scope, RecordState::Dead).await.ok();
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
            shown.push(json!({
                "name": route.name,
                "path": route.path,
                "delivery": delivery,
                "paused": self.gateway.pauses().of(&route.name).map(|pause| pause_json(&pause)),
                "circuit_breaker": breaker,
                "upstream_rate": rate,
                "queued": queued,
                "dead_letters": dead,
                "outcomes": self.gateway.metrics().outcomes(&route.name),
            }));
        }
        shown
    }

    /// `GET /admin/events`: one page of records, newest first.
    async fn events(
        &self,
        request: &Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, AdminError> {
        let state = match query_param(request, "state") {
            None => None,
            Some(state) => Some(RecordState::parse(&state).ok_or_else(|| {
                AdminError::BadQuery("state must be processing, failed, dead or completed".into())
            })?),
        };
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
        let routes: Vec<Arc<Route>> = match query_param(request, "route") {
            Some(name) => vec![self.gateway.route(&name).ok_or(AdminError::UnknownRoute)?],
            None => self.gateway.routes(),
        };
        // Each scope once, listed under the first route that uses it unless
        // a record names its own.
        let mut scopes: Vec<(&str, &str)> = Vec::new();
        for route in &routes {
            if !scopes.iter().any(|(scope, _)| *scope == route.scope) {
                scopes.push((&route.scope, &route.name));
            }
        }
        let names: Vec<&str> = scopes.iter().map(|(scope, _)| *scope).collect();
        let page = self
            .gateway
            .store()
            .list(&names, state, limit, cursor.as_ref())
            .await
            .map_err(|error| AdminError::StoreUnavailable(error.to_string()))?;
        let only = (routes.len() == 1).then(|| routes[0].name.as_str());
        let events: Vec<serde_json::Value> = page
            .records
            .iter()
            .filter(|listed| {
                // A route of a shared scope shows its own failures only.
                only.is_none_or(|only| listed.record.route.as_deref().is_none_or(|r| r == only))
            })
            .map(|listed| {
                let route = listed.record.route.as_deref().unwrap_or_else(|| {
                    scopes
                        .iter()
                        .find(|(scope, _)| *scope == listed.scope)
                        .map_or("", |(_, name)| name)
                });
                record_json(route, &listed.id, &listed.record)
            })
            .collect();
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "events": events,
                "next_cursor": page.next.map(|cursor| cursor.encode()),
            }),
        ))
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
/// Redeliveries a second of a redrive unless `rate` says.
const DEFAULT_REDRIVE_RATE: u32 = 20;

/// The admin view of a pause.
fn pause_json(pause: &Pause) -> serde_json::Value {
    json!({ "since": pause.since_ms, "by": pause.by, "reason": pause.reason })
}

/// The admin view of a record. Times are Unix milliseconds.
fn record_json(route: &str, key: &str, record: &Record) -> serde_json::Value {
    json!({
        "route": route,
        "key": key,
        "state": record.state.as_str(),
        "attempts": record.attempts,
        "body_sha256": record.body_sha256,
        "first_seen": record.first_seen_ms,
        "updated": record.updated_ms,
        "completed_at": record.completed_at_ms,
        "lease_expires_at": record.lease_expires_at_ms,
        "last_error": record.last_error.map(|error| json!({
            "class": error.class.as_str(),
            "status": error.status,
            "at": error.at_ms,
        })),
        "replay_of": record.replay_of,
        "response_status": record.response.as_ref().map(|r| r.status.as_u16()),
        "response_body": record.response.as_ref().map(|r| r.body_kept.as_str()),
    })
}

/// Header values shown as `[redacted]`: credentials and signatures (a
/// signature with its body is a delivery anyone could send again).
fn sensitive(name: &str) -> bool {
    matches!(
        name,
        "authorization" | "cookie" | "set-cookie" | "proxy-authorization"
    ) || name.contains("signature")
        || name.contains("secret")
        || name.contains("api-key")
        || name.contains("hmac")
        || name.contains("token")
}

/// The stored request: method, query, headers (signatures redacted), body
/// size and hash, and the body itself (base64) when asked for.
fn request_json(request: &StoredRequest, with_body: bool) -> serde_json::Value {
    use base64::Engine;
    let mut shown = json!({
        "method": request.method.as_str(),
        "query": request.query,
        "headers": headers_json(&request.headers),
        "body_sha256": hex::encode(Sha256::digest(&request.body)),
    });
    add_preview(&mut shown, &request.body);
    if with_body {
        shown["body_base64"] =
            json!(base64::engine::general_purpose::STANDARD.encode(&request.body));
    }
    shown
}

/// Headers as `[name, value]` pairs, credentials and signatures redacted.
fn headers_json(headers: &http::HeaderMap) -> Vec<serde_json::Value> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = if sensitive(name.as_str()) {
                "[redacted]".into()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            json!([name.as_str(), value])
        })
        .collect()
}

/// The start of a body kept for the console: never more than this.
const PREVIEW_BYTES: usize = 2048;

/// `body_bytes`, and the body's first [`PREVIEW_BYTES`] as text
/// (`body_preview`, invalid UTF-8 replaced; `body_preview_bytes` of it).
fn add_preview(shown: &mut serde_json::Value, body: &[u8]) {
    let preview = &body[..body.len().min(PREVIEW_BYTES)];
    shown["body_bytes"] = json!(body.len());
    shown["body_preview_bytes"] = json!(preview.len());
    shown["body_preview"] = json!(String::from_utf8_lossy(preview));
}

/// What a redelivery or replay did.
fn sent_json(route: &str, sent: &Sent, replay_of: Option<&str>) -> Response<Full<Bytes>> {
    json_response(
        StatusCode::OK,
        &json!({
            "route": route,
            "key": sent.key,
            "replay_of": replay_of,
            "attempt": sent.attempt,
            "state": sent.settled.as_str(),
            "upstream_status": sent.upstream_status.map(|s| s.as_u16()),
            "upstream_error": sent.upstream_error,
        }),
    )
}

/// The value of query parameter `name`, percent-decoded (as sent when it
/// does not decode, so that it fails validation instead of vanishing).
fn query_param(request: &Request<Incoming>, name: &str) -> Option<String> {
    request
        .uri()
        .query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| {
            let value = value.replace('+', " ");
            percent_decode(&value).unwrap_or(value)
        })
}

/// Whether the query string sets `name=true`.
fn query_flag(request: &Request<Incoming>, name: &str) -> bool {
    request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair.split_once('=') == Some((name, "true")))
}

/// Decode `%XX` escapes; `None` for a broken escape or non-UTF-8 result.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("evt_1").as_deref(), Some("evt_1"));
        assert_eq!(percent_decode("a%2Fb%25c").as_deref(), Some("a/b%c"));
        assert_eq!(percent_decode("bad%2"), None);
        assert_eq!(percent_decode("bad%zz"), None);
    }
}
