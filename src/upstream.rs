//! Forwarding to the legacy consumer: building the upstream request from a
//! verified delivery and calling it through one pooled HTTP client.
//!
//! The body is forwarded byte-identical (signature headers included, so a
//! backend that verifies still can); hop-by-hop headers go, `X-Forwarded-*`
//! and the idempotency header are set. The upstream always gets HTTP/1.1,
//! whatever the sender spoke.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Request, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::CertificateDer;

use crate::config::RouteConfig;
use crate::headers::{
    strip_hop_by_hop, X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO, X_REAL_IP, X_REQUEST_ID,
};
pub use crate::replay::BodyRead;
use crate::secret::Secret;
use crate::store::{FailureClass, StoredRequest};

/// Largest upstream response body read into memory. Beyond it the status and
/// headers are still returned (and recorded), the body is not.
const MAX_UPSTREAM_BODY_BYTES: usize = 16 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The upstream's answer: its status and headers, and as much of the body
/// as arrived.
#[derive(Debug)]
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Whether `body` is all of it.
    pub body_read: BodyRead,
}

/// A call that produced no status: what the upstream is known to have done
/// (docs/guide/what-a-sender-sees.md, "What a sender sees").
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Nothing left hookgate: connect refused, DNS, TLS. The upstream did
    /// not see the request.
    #[error("upstream unreachable: {0}")]
    NotDelivered(String),
    /// The request was sent and the connection broke before a status came:
    /// the upstream may have done the work.
    #[error("upstream connection broke after the request was sent: {0}")]
    Broken(String),
    /// No status within `upstream_timeout`: the upstream may still be working.
    #[error("upstream timed out")]
    Timeout,
}

impl UpstreamError {
    /// What the upstream is known to have done, as the failure class every
    /// entrance settles by: never received it, or may have acted on it.
    pub fn class(&self) -> FailureClass {
        match self {
            UpstreamError::NotDelivered(_) => FailureClass::NotDelivered,
            UpstreamError::Broken(_) | UpstreamError::Timeout => FailureClass::Unknown,
        }
    }

    /// How `hookgate_upstream_responses_total` counts it.
    pub fn label(&self) -> &'static str {
        match self {
            UpstreamError::Timeout => "timeout",
            UpstreamError::NotDelivered(_) => "unreachable",
            UpstreamError::Broken(_) => "broken",
        }
    }
}

/// A pooled HTTP/HTTPS client: keep-alive connections to each upstream are
/// reused across requests. Cloning shares the pool.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Upstream {
    /// A client for `http://` and `https://` upstreams, verifying
    /// certificates against the Mozilla roots plus `extra_roots` (there is no
    /// way to skip it). The roots were checked when the config loaded.
    pub fn new(extra_roots: &[CertificateDer<'static>]) -> Self {
        let tls = crate::tls::client_config(extra_roots).unwrap_or_else(|error| {
            tracing::error!(%error, "upstream_ca unusable; trusting the Mozilla roots only");
            crate::tls::client_config(&[]).expect("the Mozilla roots are usable")
        });
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector);
        Self { client }
    }

    /// Send `request` and read the answer within `timeout`. A status that
    /// arrived in time is returned even when its body then broke off or ran
    /// out of time: the upstream answered, so its status is its word.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let response = match tokio::time::timeout_at(deadline, self.client.request(request)).await {
            Err(_) => return Err(UpstreamError::Timeout),
            Ok(Err(err)) if err.is_connect() => {
                return Err(UpstreamError::NotDelivered(error_chain(&err)))
            }
            Ok(Err(err)) => return Err(UpstreamError::Broken(error_chain(&err))),
            Ok(Ok(response)) => response,
        };
        let (parts, body) = response.into_parts();
        let read = Limited::new(body, MAX_UPSTREAM_BODY_BYTES).collect();
        let (body, body_read) = match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(collected)) => (collected.to_bytes(), BodyRead::Whole),
            Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
                (Bytes::new(), BodyRead::TooLarge)
            }
            Ok(Err(_)) | Err(_) => (Bytes::new(), BodyRead::BrokeOff),
        };
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        headers.remove(header::CONTENT_LENGTH);
        Ok(UpstreamResponse {
            status: parts.status,
            headers,
            body,
            body_read,
        })
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// What the pipeline knows about the delivery being forwarded.
pub struct Delivery<'a> {
    pub route: &'a RouteConfig,
    pub parts: &'a Parts,
    pub body: Bytes,
    /// The bare idempotency key (without prefix or scope); `None` for a
    /// keyless delivery forwarded unclaimed.
    pub key: Option<&'a str>,
    pub request_id: &'a HeaderValue,
    /// The peer's address, as `X-Forwarded-For` names it.
    pub peer: &'a HeaderValue,
    /// Whether the peer is a `trusted_proxies` hop, whose `X-Forwarded-For`
    /// chain is kept.
    pub peer_trusted: bool,
    /// `http` or `https`, for `X-Forwarded-Proto`.
    pub proto: &'static str,
}

/// The request the upstream receives for `delivery`.
pub fn build_request(delivery: &Delivery<'_>) -> Request<Full<Bytes>> {
    resend(
        delivery.route,
        stored_request(delivery),
        delivery.key,
        delivery.request_id,
    )
}

/// The request as forwarded, minus what each attempt sets afresh (the
/// idempotency header and `X-Request-Id`): what is kept of a delivery whose
/// attempt failed, and what [`resend`] sends.
pub fn stored_request(delivery: &Delivery<'_>) -> StoredRequest {
    let Delivery {
        parts,
        peer,
        peer_trusted,
        proto,
        ..
    } = *delivery;
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    // hookgate's own word on the stored request, never a sender's.
    headers.remove(crate::headers::DESTINATIONS);
    let host = headers.remove(header::HOST).or_else(|| {
        parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST, host);
    }
    // A chain is only as good as who handed it over: from a trusted proxy
    // it is kept and extended, from anyone else it starts at the peer.
    let incoming = headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok());
    let forwarded_for = match incoming.filter(|_| peer_trusted) {
        Some(chain) => {
            let peer = peer.to_str().unwrap_or_default();
            HeaderValue::from_str(&format!("{chain}, {peer}")).ok()
        }
        None => Some(peer.clone()),
    };
    if let Some(value) = forwarded_for {
        headers.insert(X_FORWARDED_FOR, value);
    }
    // The other headers that say where a request came from prove nothing
    // from anyone but a trusted proxy either.
    if !peer_trusted {
        headers.remove(header::FORWARDED);
        headers.remove(X_REAL_IP);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(X_REQUEST_ID);
    StoredRequest {
        method: parts.method.clone(),
        query: parts.uri.query().map(str::to_owned),
        headers,
        body: delivery.body.clone(),
    }
}

/// The upstream request for `stored` under idempotency `key` (the same key
/// for a delivery or a redelivery, a new one for a replay): the route's
/// current upstream, the stored method, query, headers and body.
pub fn resend(
    route: &RouteConfig,
    stored: StoredRequest,
    key: Option<&str>,
    request_id: &HeaderValue,
) -> Request<Full<Bytes>> {
    let StoredRequest {
        method,
        query,
        mut headers,
        body,
    } = stored;
    headers.insert(X_REQUEST_ID, request_id.clone());
    // Accepted when the route had destinations, delivered now that it has
    // one upstream: the list is hookgate's, not the upstream's.
    headers.remove(crate::headers::DESTINATIONS);
    if let Some(name) = &route.keying.idempotency_header {
        let written = key.map(|key| route.keying.idempotency_header_format.write(key));
        match written.as_deref().map(HeaderValue::from_str) {
            // The key was validated as visible ASCII, so this cannot fail.
            Some(Ok(value)) => {
                headers.insert(name.clone(), value);
            }
            // Never pass a sender's own value through as if it were ours.
            _ => {
                headers.remove(name);
            }
        }
    }
    if let (Some(secret), Some(key)) = (&route.signs, key) {
        sign_standard_webhooks(&mut headers, secret, key, &body);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    if !headers.contains_key(header::HOST) {
        if let Some(host) = host_of(&route.call.upstream) {
            headers.insert(header::HOST, host);
        }
    }

    let mut request = Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = upstream_uri(&route.call.upstream, query.as_deref());
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    request
}

/// Sign `body` as Standard Webhooks (a `[[notify]]` webhook's attempt):
/// `webhook-id` the event's key, the same on every attempt, so the
/// receiver can drop a repeat; `webhook-timestamp` this attempt's time, so
/// a retry hours later still passes the receiver's tolerance;
/// `webhook-signature` `v1,` and the HMAC-SHA256 of `id.timestamp.body`.
fn sign_standard_webhooks(headers: &mut HeaderMap, secret: &Secret, key: &str, body: &[u8]) {
    let timestamp = crate::clock::unix_ms() / 1000;
    let signature = crate::verify::sign_standard_webhooks(secret, key, timestamp, body);
    for (name, value) in [
        ("webhook-id", key.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signature),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(header::HeaderName::from_static(name), value);
        }
    }
}

/// The route's upstream URL with the delivery's query string appended.
/// The `Host` the client would write for `upstream` — its host, and its
/// port unless it is the scheme's default — taken from the URI as it is:
/// the client formats one per request when the header is missing. `None`
/// for an authority with credentials in it (the client then writes it).
fn host_of(upstream: &Uri) -> Option<HeaderValue> {
    let authority = upstream.authority()?;
    let default_port = match upstream.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let host = match authority.port_u16() {
        Some(port) if port != default_port => authority.as_str(),
        _ => authority.host(),
    };
    if host.contains('@') {
        return None;
    }
    HeaderValue::from_str(host).ok()
}

fn upstream_uri(upstream: &Uri, query: Option<&str>) -> Uri {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return upstream.clone();
    };
    let separator = if upstream.query().is_some() { '&' } else { '?' };
    format!("{upstream}{separator}{query}")
        .parse()
        .unwrap_or_else(|_| upstream.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_clients_own() {
        let cases = [
            ("http://127.0.0.1:3000/hook", Some("127.0.0.1:3000")),
            ("http://app.internal/hook", Some("app.internal")),
            ("http://app.internal:80/hook", Some("app.internal")),
            ("https://app.internal:443/", Some("app.internal")),
            ("https://app.internal:80/", Some("app.internal:80")),
            ("http://[::1]:8080/hook", Some("[::1]:8080")),
            ("http://user:pw@app.internal:81/", None),
        ];
        for (uri, expected) in cases {
            let host = host_of(&uri.parse().unwrap());
            assert_eq!(
                host.as_ref().map(|v| v.to_str().unwrap()),
                expected,
                "{uri}"
            );
        }
    }

    #[test]
    fn appends_the_query_string() {
        let base: Uri = "http://127.0.0.1:3000/hook".parse().unwrap();
        assert_eq!(upstream_uri(&base, None), base);
        assert_eq!(
            upstream_uri(&base, Some("a=1")).to_string(),
            "http://127.0.0.1:3000/hook?a=1"
        );
        let with: Uri = "http://127.0.0.1:3000/hook?x=y".parse().unwrap();
        assert_eq!(
            upstream_uri(&with, Some("a=1")).to_string(),
            "http://127.0.0.1:3000/hook?x=y&a=1"
        );
    }
}
