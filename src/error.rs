//! The responses hookgate writes itself: one error type for the request path
//! ([`GatewayError`]) and one for the admin API ([`AdminError`]), each mapped
//! to status, stable code and JSON body in exactly one place, and pinned by
//! the table tests below.
//!
//! `code()` is the stable string `crate::codes` lists (docs/reference/errors.md; also
//! the log field); the body is an RFC 9457 problem with the code in its
//! `error` member, `{"type","title","status","detail","error":{"code","message"}}`,
//! and never echoes secrets, signatures, keys or the request body.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::Full;

use crate::key::KeyError;
use crate::verify::VerifyError;

/// How long a sender should wait before retrying when the store is down.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(5);

/// How long a sender should wait before retrying a paused route. Senders
/// keep their own schedules (most back off far longer); this is the hint.
pub const PAUSED_RETRY_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    #[error("no route for this path")]
    RouteNotFound,
    #[error("method not allowed on this route")]
    MethodNotAllowed { allowed: Vec<Method> },
    #[error("this route does not accept deliveries from this address")]
    SourceNotAllowed,
    #[error("request body exceeds the configured limit")]
    BodyTooLarge,
    #[error("request body could not be read")]
    BodyUnreadable,
    #[error("request body was not received in time")]
    BodyTimeout,
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("this idempotency key was already used with a different payload")]
    PayloadMismatch,
    #[error("another delivery of this event is being processed")]
    InFlight { retry_after: Duration },
    #[error("the idempotency store is unavailable")]
    StoreUnavailable,
    /// The event's record is sealed under a key this gateway does not hold
    /// (docs/guide/stores.md, "Data at rest"): not forwarded again, and retried later.
    #[error("this event's stored record cannot be opened (its encryption key is not configured); try again later")]
    RecordUnreadable,
    #[error("this route is paused by an operator; deliveries are not forwarded until it resumes")]
    RoutePaused,
    /// An async route's queue (or the store's) holds as much undelivered
    /// as it may (docs/guide/async-delivery.md, "Asynchronous delivery"): the sender keeps the
    /// event and retries.
    #[error("this route holds as many undelivered events as it may; try again later")]
    QueueFull { retry_after: Duration },
    #[error(
        "the upstream has been failing; calls are held until the circuit breaker probes it again"
    )]
    CircuitOpen { retry_after: Duration },
    #[error("this route's upstream rate limit is reached")]
    RateLimited { retry_after: Duration },
    #[error("the upstream could not be reached")]
    UpstreamUnreachable,
    #[error("the upstream did not answer in time")]
    UpstreamTimeout,
    #[error("the upstream answered, but its response body broke off; the answer is recorded")]
    UpstreamBodyIncomplete,
    #[error("internal error")]
    Internal,
}

impl GatewayError {
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::RouteNotFound => StatusCode::NOT_FOUND,
            GatewayError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            GatewayError::SourceNotAllowed
            | GatewayError::Verify(VerifyError::SourceNotAllowed) => StatusCode::FORBIDDEN,
            GatewayError::Verify(VerifyError::SenderUnreachable) => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::BodyUnreadable => StatusCode::BAD_REQUEST,
            GatewayError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            GatewayError::Verify(_) => StatusCode::UNAUTHORIZED,
            GatewayError::Key(_) => StatusCode::BAD_REQUEST,
            GatewayError::PayloadMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            GatewayError::InFlight { .. } => StatusCode::CONFLICT,
            GatewayError::StoreUnavailable | GatewayError::RecordUnreadable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            GatewayError::RoutePaused
            | GatewayError::CircuitOpen { .. }
            | GatewayError::QueueFull { .. } => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::UpstreamUnreachable => StatusCode::BAD_GATEWAY,
            GatewayError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::UpstreamBodyIncomplete => StatusCode::BAD_GATEWAY,
            GatewayError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code (docs/guide/what-a-sender-sees.md, "What a sender sees").
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::RouteNotFound => "route_not_found",
            GatewayError::MethodNotAllowed { .. } => "method_not_allowed",
            GatewayError::SourceNotAllowed
            | GatewayError::Verify(VerifyError::SourceNotAllowed) => "source_not_allowed",
            GatewayError::Verify(VerifyError::SenderUnreachable) => "sender_unreachable",
            GatewayError::BodyTooLarge => "body_too_large",
            GatewayError::BodyUnreadable => "body_unreadable",
            GatewayError::BodyTimeout => "body_timeout",
            GatewayError::Verify(VerifyError::SignatureInvalid) => "signature_invalid",
            GatewayError::Verify(VerifyError::TimestampOutOfTolerance) => {
                "timestamp_out_of_tolerance"
            }
            GatewayError::Key(KeyError::Missing) => "key_missing",
            GatewayError::Key(KeyError::Invalid) => "key_invalid",
            GatewayError::PayloadMismatch => "payload_mismatch",
            GatewayError::InFlight { .. } => "in_flight",
            GatewayError::StoreUnavailable => "store_unavailable",
            GatewayError::RecordUnreadable => "record_unreadable",
            GatewayError::RoutePaused => "route_paused",
            GatewayError::QueueFull { .. } => "queue_full",
            GatewayError::CircuitOpen { .. } => "upstream_circuit_open",
            GatewayError::RateLimited { .. } => "rate_limited",
            GatewayError::UpstreamUnreachable => "upstream_unreachable",
            GatewayError::UpstreamTimeout => "upstream_timeout",
            GatewayError::UpstreamBodyIncomplete => "upstream_body_incomplete",
            GatewayError::Internal => "internal_error",
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            GatewayError::InFlight { retry_after }
            | GatewayError::QueueFull { retry_after }
            | GatewayError::CircuitOpen { retry_after }
            | GatewayError::RateLimited { retry_after } => Some(*retry_after),
            GatewayError::StoreUnavailable
            | GatewayError::RecordUnreadable
            | GatewayError::Verify(VerifyError::SenderUnreachable) => Some(STORE_RETRY_AFTER),
            GatewayError::RoutePaused => Some(PAUSED_RETRY_AFTER),
            _ => None,
        }
    }

    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let mut response = error_response(self.status(), self.code(), &self.to_string());
        let headers = response.headers_mut();
        if let Some(wait) = self.retry_after() {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let GatewayError::MethodNotAllowed { allowed } = self {
            allow(headers, allowed);
        }
        response
    }
}

/// Why an operator's action was not done (`ops`); the admin API answers it
/// as [`AdminError::Ops`], with the status and code below.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpsError {
    #[error("no record for this key")]
    KeyNotFound,
    #[error("the key holds no claim to release")]
    NotInFlight,
    #[error("the event completed; add ?force=true to deliver it again anyway")]
    Completed,
    #[error("the derived key would not be a valid key (1-255 visible ASCII bytes)")]
    KeyInvalid,
    #[error("a delivery of this key is still running, or it is queued for its workers; add ?force=true to forget it anyway")]
    InFlight,
    #[error(
        "this record keeps no request to send again (only failed, dead, queued and replayed events do)"
    )]
    RequestNotStored,
    #[error("the event was replayed {limit} times already")]
    TooManyReplays { limit: u32 },
    #[error("the route is paused; resume it before sending its events again")]
    RoutePaused,
    /// The route's circuit breaker is open or its upstream rate spent.
    #[error("traffic control holds the route's upstream calls now ({code}); try again later")]
    UpstreamHeld {
        code: &'static str,
        retry_after: Duration,
    },
    #[error("the store is unavailable: {0}")]
    StoreUnavailable(String),
    /// Sealed under a key that is not configured, or changed.
    #[error("the record cannot be opened (docs/guide/stores.md, \"Data at rest\"): {0}")]
    RecordUnreadable(String),
    #[error("the action's task ended before it answered")]
    Ended,
    #[error("the route has several destinations; name one with ?destination= (--destination)")]
    DestinationRequired,
}

impl OpsError {
    pub fn status(&self) -> StatusCode {
        match self {
            OpsError::KeyNotFound => StatusCode::NOT_FOUND,
            OpsError::KeyInvalid
            | OpsError::TooManyReplays { .. }
            | OpsError::DestinationRequired => StatusCode::BAD_REQUEST,
            OpsError::NotInFlight
            | OpsError::InFlight
            | OpsError::Completed
            | OpsError::RequestNotStored
            | OpsError::RoutePaused => StatusCode::CONFLICT,
            OpsError::UpstreamHeld { .. } | OpsError::StoreUnavailable(_) | OpsError::Ended => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            OpsError::RecordUnreadable(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable code; docs/reference/errors.md lists it.
    pub fn code(&self) -> &'static str {
        match self {
            OpsError::KeyNotFound => "key_not_found",
            OpsError::NotInFlight => "not_in_flight",
            OpsError::InFlight => "in_flight",
            OpsError::Completed => "completed",
            OpsError::RequestNotStored => "request_not_stored",
            OpsError::KeyInvalid => "key_invalid",
            OpsError::TooManyReplays { .. } => "bad_request",
            OpsError::RoutePaused => "route_paused",
            OpsError::UpstreamHeld { code, .. } => code,
            OpsError::StoreUnavailable(_) | OpsError::Ended => "store_unavailable",
            OpsError::RecordUnreadable(_) => "record_unreadable",
            OpsError::DestinationRequired => "destination_required",
        }
    }

    /// How long a caller should wait before trying again, when it should.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            OpsError::StoreUnavailable(_) | OpsError::Ended => Some(STORE_RETRY_AFTER),
            OpsError::UpstreamHeld { retry_after, .. } => {
                Some((*retry_after).max(Duration::from_secs(1)))
            }
            _ => None,
        }
    }
}

/// What the admin API (its own listener) answers when it cannot do what was
/// asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("no such admin endpoint")]
    NotFound,
    #[error("the admin API is off (no admin.token)")]
    Off,
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("a console request that changes something needs the session's X-CSRF-Token")]
    Csrf,
    #[error("the read token (admin.read_token) may read, not change anything")]
    ReadOnly,
    #[error("no route of that name")]
    UnknownRoute,
    #[error("the route has no destination of that name")]
    UnknownDestination,
    #[error("no bulk action of that id on this instance (a bulk action runs on the instance that took it, and stops if that instance stops)")]
    BulkNotFound,
    #[error("the key is not valid percent-encoding")]
    KeyEncoding,
    #[error("bad query parameter: {0}")]
    BadQuery(String),
    #[error("this method is not allowed on this admin path")]
    MethodNotAllowed { allowed: Vec<Method> },
    #[error("the config was not reloaded; the running one keeps serving:\n{0}")]
    ConfigInvalid(String),
    #[error("the route does not reconcile with its sender (no [routes.reconcile])")]
    NotReconciled,
    #[error("a reconciliation pass of this route is running (on this or another gateway); try again when it ends")]
    ReconcileRunning,
    /// What the operator's door refused (`ops`).
    #[error(transparent)]
    Ops(#[from] OpsError),
}

impl AdminError {
    pub fn status(&self) -> StatusCode {
        match self {
            AdminError::NotFound
            | AdminError::Off
            | AdminError::NotReconciled
            | AdminError::UnknownRoute
            | AdminError::UnknownDestination
            | AdminError::BulkNotFound => StatusCode::NOT_FOUND,
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::Csrf | AdminError::ReadOnly => StatusCode::FORBIDDEN,
            AdminError::KeyEncoding | AdminError::BadQuery(_) => StatusCode::BAD_REQUEST,
            AdminError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            AdminError::ConfigInvalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AdminError::ReconcileRunning => StatusCode::CONFLICT,
            AdminError::Ops(error) => error.status(),
        }
    }

    /// The stable code; docs/reference/errors.md lists it.
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::NotFound | AdminError::Off => "not_found",
            AdminError::Unauthorized => "unauthorized",
            AdminError::Csrf => "csrf_token_invalid",
            AdminError::ReadOnly => "read_only",
            AdminError::UnknownRoute => "route_not_found",
            AdminError::UnknownDestination => "destination_not_found",
            AdminError::BulkNotFound => "bulk_not_found",
            AdminError::KeyEncoding => "key_encoding_invalid",
            AdminError::BadQuery(_) => "bad_request",
            AdminError::MethodNotAllowed { .. } => "method_not_allowed",
            AdminError::ConfigInvalid(_) => "config_invalid",
            AdminError::NotReconciled => "not_reconciled",
            AdminError::ReconcileRunning => "reconcile_running",
            AdminError::Ops(error) => error.code(),
        }
    }

    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let mut response = error_response(self.status(), self.code(), &self.to_string());
        let headers = response.headers_mut();
        match self {
            AdminError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            AdminError::Ops(error) => {
                if let Some(after) = error.retry_after() {
                    headers.insert(header::RETRY_AFTER, HeaderValue::from(after.as_secs()));
                }
            }
            AdminError::MethodNotAllowed { allowed } => allow(headers, allowed),
            _ => {}
        }
        response
    }
}

/// A 405's `Allow`: the methods the path has.
fn allow(headers: &mut http::HeaderMap, allowed: &[Method]) {
    let list: Vec<&str> = allowed.iter().map(Method::as_str).collect();
    if let Ok(value) = HeaderValue::from_str(&list.join(", ")) {
        headers.insert(header::ALLOW, value);
    }
}

/// A JSON response: hookgate's one shape for every answer it writes itself.
pub fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An error as an RFC 9457 problem (`crate::codes`): `type` `about:blank`,
/// the status's reason phrase as `title`, the message as `detail`, and
/// the stable `error: {code, message}` scripts read.
fn error_response(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let problem = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": message,
        "error": { "code": code, "message": message },
    });
    let mut response = json_response(status, &problem);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the mapping docs/reference/errors.md documents: changing a status or code is a contract change.
    #[test]
    fn maps_every_error_to_its_status_and_code() {
        let in_flight = GatewayError::InFlight {
            retry_after: Duration::from_millis(1500),
        };
        let table: Vec<(GatewayError, u16, &str)> = vec![
            (GatewayError::RouteNotFound, 404, "route_not_found"),
            (
                GatewayError::MethodNotAllowed {
                    allowed: vec![Method::POST],
                },
                405,
                "method_not_allowed",
            ),
            (GatewayError::SourceNotAllowed, 403, "source_not_allowed"),
            (GatewayError::BodyTooLarge, 413, "body_too_large"),
            (GatewayError::BodyUnreadable, 400, "body_unreadable"),
            (GatewayError::BodyTimeout, 408, "body_timeout"),
            (
                VerifyError::SignatureInvalid.into(),
                401,
                "signature_invalid",
            ),
            (
                VerifyError::TimestampOutOfTolerance.into(),
                401,
                "timestamp_out_of_tolerance",
            ),
            (KeyError::Missing.into(), 400, "key_missing"),
            (KeyError::Invalid.into(), 400, "key_invalid"),
            (GatewayError::PayloadMismatch, 422, "payload_mismatch"),
            (in_flight.clone(), 409, "in_flight"),
            (GatewayError::StoreUnavailable, 503, "store_unavailable"),
            (GatewayError::RoutePaused, 503, "route_paused"),
            (
                GatewayError::QueueFull {
                    retry_after: Duration::from_secs(60),
                },
                503,
                "queue_full",
            ),
            (
                GatewayError::CircuitOpen {
                    retry_after: Duration::from_secs(3),
                },
                503,
                "upstream_circuit_open",
            ),
            (
                GatewayError::RateLimited {
                    retry_after: Duration::from_millis(20),
                },
                429,
                "rate_limited",
            ),
            (
                GatewayError::UpstreamUnreachable,
                502,
                "upstream_unreachable",
            ),
            (GatewayError::UpstreamTimeout, 504, "upstream_timeout"),
            (
                GatewayError::UpstreamBodyIncomplete,
                502,
                "upstream_body_incomplete",
            ),
            (GatewayError::RecordUnreadable, 503, "record_unreadable"),
            (GatewayError::Internal, 500, "internal_error"),
        ];
        for (error, status, code) in table {
            assert_eq!(error.status().as_u16(), status, "{code}");
            assert_eq!(error.code(), code);
            // Every outcome a request can end with has its series from the
            // start (502 upstream_unreachable is counted as upstream_error).
            if code != "upstream_unreachable" {
                assert!(crate::metrics::OUTCOMES.contains(&code), "{code}");
            }
            let response = error.to_response();
            assert_eq!(response.status().as_u16(), status);
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            // docs/reference/errors.md's table says what a sender gets.
            let listed = crate::codes::find(code).map(|row| row.sender);
            assert_eq!(listed, Some(status), "{code} in codes.rs");
        }
        assert_eq!(in_flight.to_response().headers()["retry-after"], "2");
        assert_eq!(
            GatewayError::StoreUnavailable.to_response().headers()["retry-after"],
            "5"
        );
        assert_eq!(
            GatewayError::RoutePaused.to_response().headers()["retry-after"],
            "30"
        );
        let limited = GatewayError::RateLimited {
            retry_after: Duration::from_millis(20),
        };
        assert_eq!(limited.to_response().headers()["retry-after"], "1");
        let not_allowed = GatewayError::MethodNotAllowed {
            allowed: vec![Method::POST, Method::PUT],
        };
        assert_eq!(not_allowed.to_response().headers()["allow"], "POST, PUT");
    }

    /// Pins the admin API's statuses and codes.
    #[test]
    fn maps_every_admin_error_to_its_status_and_code() {
        let table: Vec<(AdminError, u16, &str)> = vec![
            (AdminError::NotFound, 404, "not_found"),
            (AdminError::Off, 404, "not_found"),
            (AdminError::Unauthorized, 401, "unauthorized"),
            (AdminError::Csrf, 403, "csrf_token_invalid"),
            (AdminError::ReadOnly, 403, "read_only"),
            (AdminError::UnknownRoute, 404, "route_not_found"),
            (AdminError::UnknownDestination, 404, "destination_not_found"),
            (
                AdminError::Ops(OpsError::DestinationRequired),
                400,
                "destination_required",
            ),
            (AdminError::KeyEncoding, 400, "key_encoding_invalid"),
            (AdminError::Ops(OpsError::KeyNotFound), 404, "key_not_found"),
            (AdminError::Ops(OpsError::NotInFlight), 409, "not_in_flight"),
            (AdminError::Ops(OpsError::InFlight), 409, "in_flight"),
            (AdminError::Ops(OpsError::Completed), 409, "completed"),
            (
                AdminError::Ops(OpsError::RequestNotStored),
                409,
                "request_not_stored",
            ),
            (AdminError::Ops(OpsError::KeyInvalid), 400, "key_invalid"),
            (
                AdminError::Ops(OpsError::TooManyReplays { limit: 1000 }),
                400,
                "bad_request",
            ),
            (AdminError::Ops(OpsError::Ended), 503, "store_unavailable"),
            (
                AdminError::Ops(OpsError::RecordUnreadable("unknown key".into())),
                500,
                "record_unreadable",
            ),
            (AdminError::BadQuery("limit".into()), 400, "bad_request"),
            (
                AdminError::MethodNotAllowed {
                    allowed: vec![Method::GET],
                },
                405,
                "method_not_allowed",
            ),
            (AdminError::BulkNotFound, 404, "bulk_not_found"),
            (AdminError::Ops(OpsError::RoutePaused), 409, "route_paused"),
            (
                AdminError::Ops(OpsError::UpstreamHeld {
                    code: "upstream_circuit_open",
                    retry_after: Duration::from_secs(5),
                }),
                503,
                "upstream_circuit_open",
            ),
            (AdminError::ConfigInvalid("x".into()), 422, "config_invalid"),
            (AdminError::NotReconciled, 404, "not_reconciled"),
            (AdminError::ReconcileRunning, 409, "reconcile_running"),
            (
                AdminError::Ops(OpsError::StoreUnavailable("timed out".into())),
                503,
                "store_unavailable",
            ),
        ];
        for (error, status, code) in table {
            assert_eq!(error.code(), code);
            let response = error.to_response();
            assert_eq!(response.status().as_u16(), status, "{code}");
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            let listed = crate::codes::find(code).map(|row| row.admin);
            assert_eq!(listed, Some(status), "{code} in codes.rs");
        }
        let unauthorized = AdminError::Unauthorized.to_response();
        assert_eq!(unauthorized.headers()["www-authenticate"], "Bearer");
        let unavailable = AdminError::Ops(OpsError::StoreUnavailable(String::new())).to_response();
        assert_eq!(unavailable.headers()["retry-after"], "5");
    }
}
