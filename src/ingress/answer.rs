//! What hookgate answers a sender itself: a recorded response replayed, an
//! acceptance, a dead letter's answer, a handshake, and what the delivery
//! that made the call gets back; and how each request ended ([`Outcome`]).

use bytes::Bytes;
use http::header::HeaderValue;
use http::Response;
use http_body_util::Full;

use crate::config::{AsyncDelivery, OnMismatch, RouteConfig};
use crate::delivery::policy;
use crate::error::{json_response, GatewayError};
use crate::headers::{HOOKGATE_EVENT_STATE, IDEMPOTENT_REPLAYED};
use crate::store::Record;
use crate::upstream::{BodyRead, UpstreamError, UpstreamResponse};
use crate::verify::{Handshake, Reply};

/// How a request ended, for logs (and the `outcome` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Forwarded,
    /// A keyless delivery forwarded unclaimed (`on_missing_key = "forward"`).
    ForwardedUnkeyed,
    /// A sender's handshake, answered by the gateway (a hookgate extension; docs/guide/senders.md, "Supported senders").
    Handshake,
    Replayed,
    /// A delivery of an event parked as a dead letter, answered
    /// `dead_letter_status` and not forwarded.
    DeadLetter,
    /// An async route stored the event; its workers deliver it.
    Accepted,
    /// The upstream answered with a non-final status (5xx, 408, 429, 3xx).
    UpstreamError,
    /// The route's filter did not take it: answered, never forwarded.
    Filtered,
    Rejected(&'static str),
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::ForwardedUnkeyed => "forwarded_unkeyed",
            Outcome::Handshake => "handshake",
            Outcome::Replayed => "replayed",
            Outcome::DeadLetter => "dead_letter",
            Outcome::Accepted => "accepted",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Filtered => "filtered",
            Outcome::Rejected(code) => code,
        }
    }

    pub(super) fn of_error(error: &GatewayError) -> Self {
        match error {
            GatewayError::UpstreamUnreachable => Outcome::UpstreamError,
            other => Outcome::Rejected(other.code()),
        }
    }
}

/// A later delivery must carry the body the key was claimed with (or
/// `on_mismatch = "replay"`).
pub(super) fn check_body(
    route: &RouteConfig,
    record: &Record,
    body_sha256: &str,
) -> Result<(), GatewayError> {
    // An event reconciliation fetched is the sender's API's rendering of
    // it, not the webhook's bytes: either matches the other.
    let fetched = |sha: &str| sha.starts_with(super::fetched::FETCHED);
    let differs =
        record.body_sha256 != body_sha256 && !fetched(&record.body_sha256) && !fetched(body_sha256);
    if differs && route.keying.on_mismatch == OnMismatch::Reject {
        return Err(GatewayError::PayloadMismatch);
    }
    Ok(())
}

/// Answer a duplicate of a completed event.
pub(super) fn replay(
    route: &RouteConfig,
    record: &Record,
    body_sha256: &str,
) -> Result<Response<Full<Bytes>>, GatewayError> {
    check_body(route, record, body_sha256)?;
    let recorded = record.response.as_ref().ok_or(GatewayError::Internal)?;
    Ok(recorded.replay())
}

/// The gateway's own answer to a sender's handshake.
pub(super) fn handshake_response(handshake: Handshake) -> Response<Full<Bytes>> {
    match handshake.body {
        Reply::Json(body) => json_response(handshake.status, &body),
        Reply::Empty => {
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = handshake.status;
            response
        }
        Reply::Text(challenge) => {
            let mut response = Response::new(Full::new(Bytes::from(challenge)));
            *response.status_mut() = handshake.status;
            let headers = response.headers_mut();
            let plain = HeaderValue::from_static("text/plain; charset=utf-8");
            headers.insert(http::header::CONTENT_TYPE, plain);
            let nosniff = HeaderValue::from_static("nosniff");
            headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, nosniff);
            response
        }
    }
}

/// The answer of an async route: `accept_status` and a small JSON body;
/// `Idempotent-Replayed: true` for a duplicate.
pub(super) fn accepted(
    settings: &AsyncDelivery,
    key: &str,
    replayed: bool,
) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "accepted": true, "key": key });
    let mut response = json_response(settings.accept_status, &body);
    if replayed {
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// Answer a delivery of a dead letter: `dead_letter_status` (202 by
/// default, which stops the sender's retries) and a JSON body saying the
/// event is parked; nothing is forwarded.
pub(super) fn dead_letter(
    route: &RouteConfig,
    record: &Record,
    body_sha256: &str,
) -> Result<Response<Full<Bytes>>, GatewayError> {
    check_body(route, record, body_sha256)?;
    let body = serde_json::json!({
        "event": {
            "state": "dead",
            "attempts": record.attempts,
            "message": "the upstream failed this event max_attempts times; it is parked as a \
                        dead letter for an operator to redeliver, and not forwarded again",
        }
    });
    let mut response = json_response(route.failures.dead_letter_status, &body);
    response
        .headers_mut()
        .insert(HOOKGATE_EVENT_STATE, HeaderValue::from_static("dead"));
    Ok(response)
}

/// What the delivery that caused the upstream call gets back: the upstream's
/// own answer (its outcome `forwarded` when final), or the error that says
/// what happened to the call.
pub(super) fn answer_sender(
    result: Result<UpstreamResponse, UpstreamError>,
    forwarded: Outcome,
) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
    let answer = result.map_err(|error| match error {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout,
        UpstreamError::NotDelivered(_) | UpstreamError::Broken(_) => {
            GatewayError::UpstreamUnreachable
        }
    })?;
    let outcome = if !policy::is_final(answer.status) {
        Outcome::UpstreamError
    } else if answer.body_read == BodyRead::BrokeOff {
        // Recorded (the upstream did the work), but this sender would get a
        // truncated body: say so instead.
        return Err(GatewayError::UpstreamBodyIncomplete);
    } else {
        forwarded
    };
    let mut response = Response::new(Full::new(answer.body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    Ok((response, outcome))
}
