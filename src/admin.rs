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

use crate::config::Secret;
use crate::pipeline::Gateway;
use crate::server::{accept_loop, Limits};
use crate::store::{Record, StoreError};

/// Admin connections are few (a scraper, a probe, an operator).
const LIMITS: Limits = Limits {
    max_connections: 64,
    header_read_timeout: Duration::from_secs(10),
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
        let graceful = accept_loop(listener, LIMITS, None, shutdown, move |peer, _| {
            let admin = Arc::clone(&self);
            move |request: Request<Incoming>| {
                let admin = Arc::clone(&admin);
                async move { admin.handle(request, peer).await }
            }
        })
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
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
            (_, path) if path.starts_with("/admin/") => self.admin(&request, path, peer).await,
            _ => error(StatusCode::NOT_FOUND, "not_found", "no such admin endpoint"),
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
    ) -> Response<Full<Bytes>> {
        let Some(token) = &self.token else {
            return error(
                StatusCode::NOT_FOUND,
                "not_found",
                "the admin API is off (no admin.token)",
            );
        };
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .unwrap_or_default();
        if !bool::from(presented.ct_eq(token.expose())) {
            tracing::warn!(target: "hookgate::admin", %peer, path, "admin request with a missing or wrong token");
            let mut response = error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid bearer token is required",
            );
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }

        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let (route_name, raw_key, action) = match segments.as_slice() {
            ["admin", "routes", route, "keys", key] => (*route, *key, None),
            ["admin", "routes", route, "keys", key, action] => (*route, *key, Some(*action)),
            _ => return error(StatusCode::NOT_FOUND, "not_found", "no such admin endpoint"),
        };
        let Some(route) = self.gateway.route(route_name) else {
            return error(
                StatusCode::NOT_FOUND,
                "route_not_found",
                "no route of that name",
            );
        };
        let Some(key) = percent_decode(raw_key) else {
            return error(
                StatusCode::BAD_REQUEST,
                "key_invalid",
                "the key is not valid percent-encoding",
            );
        };
        let store_key = self.gateway.store_key(&route, &key);
        let store = self.gateway.store();
        let method = request.method().clone();
        tracing::info!(target: "hookgate::admin", %peer, %method, route = %route.name, key, action, "admin action");

        match (method, action) {
            (Method::GET, None) => match store.get(&store_key).await {
                Ok(Some(record)) => {
                    json_response(StatusCode::OK, &record_json(&route.name, &key, &record))
                }
                Ok(None) => key_not_found(),
                Err(e) => store_unavailable(&e),
            },
            (Method::DELETE, None) => match store.delete(&store_key).await {
                Ok(true) => json_response(
                    StatusCode::OK,
                    &json!({"deleted": true, "route": route.name, "key": key}),
                ),
                Ok(false) => key_not_found(),
                Err(e) => store_unavailable(&e),
            },
            (Method::POST, Some("release")) => {
                self.force_release(&store_key, &route.name, &key).await
            }
            _ => error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "use GET, DELETE, or POST …/release",
            ),
        }
    }

    /// Release a claim whatever its holder: compare-and-set on the token it
    /// holds now, so a claim that completes meanwhile is left alone.
    async fn force_release(
        &self,
        store_key: &str,
        route: &str,
        key: &str,
    ) -> Response<Full<Bytes>> {
        let store = self.gateway.store();
        let record = match store.get(store_key).await {
            Ok(Some(record)) => record,
            Ok(None) => return key_not_found(),
            Err(e) => return store_unavailable(&e),
        };
        let Some(token) = record.token.clone() else {
            return error(
                StatusCode::CONFLICT,
                "not_in_flight",
                "the key holds no claim to release",
            );
        };
        let lease = crate::store::Lease {
            token,
            attempt: record.attempts,
        };
        match store.release(store_key, &lease).await {
            Ok(true) => json_response(
                StatusCode::OK,
                &json!({"released": true, "route": route, "key": key}),
            ),
            Ok(false) => error(
                StatusCode::CONFLICT,
                "not_in_flight",
                "the claim changed meanwhile",
            ),
            Err(e) => store_unavailable(&e),
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
        "lease_expires_at": record.lease_until_ms,
        "response_status": record.response.as_ref().map(|r| r.status.as_u16()),
    })
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

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = text(status, body.to_string());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn key_not_found() -> Response<Full<Bytes>> {
    error(
        StatusCode::NOT_FOUND,
        "key_not_found",
        "no record for this key",
    )
}

fn store_unavailable(failure: &StoreError) -> Response<Full<Bytes>> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        &failure.to_string(),
    )
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    json_response(
        status,
        &json!({"error": {"code": code, "message": message}}),
    )
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
