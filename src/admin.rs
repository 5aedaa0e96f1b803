//! The admin listener (`[admin] listen`), never on the public port.
//!
//! - `GET /metrics` — Prometheus text format.
//! - `GET /healthz` — 200 while the process serves.
//! - `GET /readyz` — 200 when the config is loaded, the store answers a ping
//!   within its timeout and shutdown has not begun; else 503. The JSON body
//!   says why and lists store settings that would silently lose claims.
//! - `/admin/routes/{route}/keys/{key}` behind `Authorization: Bearer
//!   <admin.token>` (404 when no token is configured): `GET` shows the
//!   record, `DELETE` forgets it (the next delivery is processed again),
//!   `POST …/release` force-releases a stuck in-flight claim. Every admin
//!   action is logged with the caller's address.

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

use crate::error::{json_response, AdminError};
use crate::pipeline::Gateway;
use crate::secret::Secret;
use crate::server::{accept_loop, Limits};
use crate::store::{Deleted, ForceRelease, Record, StoreError};

/// Admin connections are few (a scraper, a probe, an operator).
const LIMITS: Limits = Limits {
    max_connections: 64,
    header_read_timeout: Duration::from_secs(10),
    idle_timeout: Duration::from_secs(60),
};

pub struct Admin {
    gateway: Arc<Gateway>,
    token: Option<Secret>,
    /// Store settings that would lose claims, found at start-up.
    risks: Vec<String>,
}

impl Admin {
    pub fn new(gateway: Arc<Gateway>, token: Option<Secret>, risks: Vec<String>) -> Self {
        Self {
            gateway,
            token,
            risks,
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
                let mut response = text(StatusCode::OK, self.gateway.metrics().render());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into()),
            (&Method::GET, "/readyz") => self.readyz().await,
            (_, path) if path.starts_with("/admin/") => self
                .admin(&request, path, peer)
                .await
                .unwrap_or_else(|error| error.to_response()),
            _ => AdminError::NotFound.to_response(),
        }
    }

    async fn readyz(&self) -> Response<Full<Bytes>> {
        let store = self.gateway.store().ping().await;
        let draining = self.gateway.is_draining();
        let ready = store.is_ok() && !draining;
        let body = json!({
            "status": if ready { "ready" } else { "not_ready" },
            "config": "loaded",
            "store": match &store {
                Ok(()) => "ok".to_owned(),
                Err(error) => error.to_string(),
            },
            "draining": draining,
            "warnings": self.risks,
        });
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
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .unwrap_or_default();
        if !bool::from(presented.ct_eq(token.expose())) {
            tracing::warn!(target: "hookgate::admin", %peer, path, "admin request with a missing or wrong token");
            return Err(AdminError::Unauthorized);
        }

        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let (route_name, raw_key, action) = match segments.as_slice() {
            ["admin", "routes", route, "keys", key] => (*route, *key, None),
            ["admin", "routes", route, "keys", key, action] => (*route, *key, Some(*action)),
            _ => return Err(AdminError::NotFound),
        };
        let route = self
            .gateway
            .route(route_name)
            .ok_or(AdminError::UnknownRoute)?;
        let key = percent_decode(raw_key).ok_or(AdminError::KeyEncoding)?;
        let store = self.gateway.store();
        let store_key = store.key(&route.scope, &key);
        let method = request.method().clone();
        tracing::info!(target: "hookgate::admin", %peer, %method, route = %route.name, key, action, "admin action");

        let unavailable = |error: StoreError| AdminError::StoreUnavailable(error.to_string());
        match (method, action) {
            (Method::GET, None) => match store.get(&store_key).await.map_err(unavailable)? {
                Some(record) => Ok(json_response(
                    StatusCode::OK,
                    &record_json(&route.name, &key, &record),
                )),
                None => Err(AdminError::KeyNotFound),
            },
            (Method::DELETE, None) => {
                let force = query_flag(request, "force");
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
            _ => Err(AdminError::MethodNotAllowed),
        }
    }
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
        "completed_at": record.completed_at_ms,
        "lease_expires_at": record.lease_expires_at_ms,
        "response_status": record.response.as_ref().map(|r| r.status.as_u16()),
        "response_body": record.response.as_ref().map(|r| r.body_kept.as_str()),
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
