//! How the admin API shows what the operator's door answers: records,
//! stored requests (credentials and signatures redacted), bounded body
//! previews, pauses, the outcome of a redelivery. Nothing here decides.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::json_response;
use crate::ops::redeliver::Sent;
use crate::store::{Record, StoredRequest};
use crate::traffic::Pause;

/// The admin view of a pause.
pub(super) fn pause_json(pause: &Pause) -> serde_json::Value {
    json!({ "since": pause.since_ms, "by": pause.by, "reason": pause.reason })
}

/// The admin view of a record. Times are Unix milliseconds. `history` is
/// the last failed attempts, oldest first (empty in listings).
pub(super) fn record_json(route: &str, key: &str, record: &Record) -> serde_json::Value {
    // A destination's delivery is named `route/destination`.
    let (route, destination) = crate::metrics::delivery_labels(route);
    json!({
        "route": route,
        "destination": (!destination.is_empty()).then_some(destination),
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
        "next_attempt_at": record.next_attempt_ms,
        "history": record.history,
        "replay_of": record.replay_of,
        "entity": record.order.as_ref().map(|order| &order.entity),
        "response_status": record.response.as_ref().map(|r| r.status.as_u16()),
        "response_body": record.response.as_ref().map(|r| r.body_kept.as_str()),
    })
}

/// Header values shown as `[redacted]`: credentials and signatures (a
/// signature with its body is a delivery anyone could send again).
pub(super) fn sensitive(name: &str) -> bool {
    matches!(
        name,
        "authorization" | "cookie" | "set-cookie" | "proxy-authorization"
    ) || name.contains("signature")
        || name.contains("secret")
        || name.contains("api-key")
        || name.contains("hmac")
        || name.contains("token")
}

/// The stored request: method, query, headers (signatures redacted, the
/// route's own `signature` header too), body size and hash, and the body
/// itself (base64) when asked for.
pub(super) fn request_json(
    request: &StoredRequest,
    with_body: bool,
    signature: Option<&http::HeaderName>,
) -> serde_json::Value {
    use base64::Engine;
    let mut shown = json!({
        "method": request.method.as_str(),
        "query": request.query,
        "headers": headers_json(&request.headers, signature),
        "body_sha256": hex::encode(Sha256::digest(&request.body)),
    });
    add_preview(&mut shown, &request.body);
    if with_body {
        shown["body_base64"] =
            json!(base64::engine::general_purpose::STANDARD.encode(&request.body));
    }
    shown
}

/// Headers as `[name, value]` pairs, credentials and signatures (and
/// `signature`, a route's own) redacted.
pub(super) fn headers_json(
    headers: &http::HeaderMap,
    signature: Option<&http::HeaderName>,
) -> Vec<serde_json::Value> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = if sensitive(name.as_str()) || Some(name) == signature {
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
pub(super) fn add_preview(shown: &mut serde_json::Value, body: &[u8]) {
    let preview = &body[..body.len().min(PREVIEW_BYTES)];
    shown["body_bytes"] = json!(body.len());
    shown["body_preview_bytes"] = json!(preview.len());
    shown["body_preview"] = json!(String::from_utf8_lossy(preview));
}

/// What a redelivery or replay did.
pub(super) fn sent_json(
    route: &str,
    sent: &Sent,
    replay_of: Option<&str>,
) -> Response<Full<Bytes>> {
    let (route, destination) = crate::metrics::delivery_labels(route);
    json_response(
        StatusCode::OK,
        &json!({
            "route": route,
            "destination": (!destination.is_empty()).then_some(destination),
            "key": sent.key,
            "replay_of": replay_of,
            "attempt": sent.attempt,
            "state": sent.settled.as_str(),
            "upstream_status": sent.upstream_status.map(|s| s.as_u16()),
            "upstream_error": sent.upstream_error,
        }),
    )
}

pub(super) fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
