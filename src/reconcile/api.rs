//! The sender's API as reconciliation calls it: one request at a time,
//! bounded in time and size, the credentials as a bearer token (marked
//! sensitive, never logged), and the sender's rate limits honoured — a 429
//! or GitHub's limits (`Retry-After`, `x-ratelimit-remaining: 0` until
//! `x-ratelimit-reset`, a secondary limit's 403) are waited out, up to
//! [`MAX_WAIT`]; a longer wait ends the pass, and the next one goes on.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, RETRY_AFTER, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;

use crate::replay::BodyRead;
use crate::secret::Secret;
use crate::upstream::Upstream;

/// One call, connect to last byte.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest rate-limit wait a pass sits out; beyond it the pass ends.
pub const MAX_WAIT: Duration = Duration::from_secs(120);
/// GitHub's advice for a secondary limit that names no time: a minute.
const SECONDARY_WAIT: Duration = Duration::from_secs(60);
/// Tries of one call that meets a 5xx, a broken connection or a limit.
const TRIES: u32 = 4;

/// Why a pass could not go on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("the sender refused the credentials ({0})")]
    Credentials(u16),
    #[error("rate limited by the sender for {}s more", .0.as_secs())]
    RateLimited(Duration),
    #[error("the sender's API answered {0}")]
    Status(u16),
    #[error("the sender's API is unreachable: {0}")]
    Unreachable(String),
    #[error("the sender's API answered what hookgate cannot read: {0}")]
    Malformed(String),
}

/// The API of one pass: its base, credentials, and the calls it made.
pub struct Api<'a> {
    pub client: &'a Upstream,
    pub base: &'a str,
    pub credentials: &'a Secret,
    /// Calls made so far (the measure of a pass's cost).
    pub calls: u32,
}

/// An answer with a 2xx status.
pub struct Answer {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Api<'_> {
    /// `GET url`, which must be under the API's base: a page's link to
    /// the next is followed only there, so the credentials never leave it.
    pub async fn get(&mut self, url: &str) -> Result<Answer, ApiError> {
        self.call(Method::GET, url).await
    }

    pub async fn post(&mut self, url: &str) -> Result<Answer, ApiError> {
        self.call(Method::POST, url).await
    }

    async fn call(&mut self, method: Method, url: &str) -> Result<Answer, ApiError> {
        let within = url
            .strip_prefix(self.base)
            .is_some_and(|rest| rest.starts_with('/'));
        if !within {
            return Err(ApiError::Malformed(format!(
                "a link outside {} was not followed",
                self.base
            )));
        }
        let mut bearer =
            HeaderValue::from_bytes(&[b"Bearer ".as_slice(), self.credentials.expose()].concat())
                .map_err(|_| ApiError::Credentials(0))?;
        bearer.set_sensitive(true);
        let mut tried = 0;
        loop {
            tried += 1;
            let request = Request::builder()
                .method(method.clone())
                .uri(url)
                .header(AUTHORIZATION, bearer.clone())
                // GitHub asks for both; Stripe ignores them.
                .header(ACCEPT, "application/vnd.github+json, application/json")
                .header("x-github-api-version", "2022-11-28")
                .header(USER_AGENT, concat!("hookgate/", env!("CARGO_PKG_VERSION")))
                .body(Full::new(Bytes::new()))
                .map_err(|error| ApiError::Malformed(error.to_string()))?;
            self.calls += 1;
            let answer = match self.client.send(request, CALL_TIMEOUT).await {
                Ok(answer) => answer,
                Err(error) if tried < TRIES => {
                    tracing::debug!(%error, "sender's API call failed; trying again");
                    tokio::time::sleep(Duration::from_secs(u64::from(tried))).await;
                    continue;
                }
                Err(error) => return Err(ApiError::Unreachable(error.to_string())),
            };
            let status = answer.status;
            if status.is_success() {
                if answer.body_read != BodyRead::Whole {
                    return Err(ApiError::Malformed(
                        "the answer broke off or was too large".into(),
                    ));
                }
                return Ok(Answer {
                    headers: answer.headers,
                    body: answer.body,
                });
            }
            if let Some(wait) = limited(status, &answer.headers, &answer.body, now_unix()) {
                if wait > MAX_WAIT || tried >= TRIES {
                    return Err(ApiError::RateLimited(wait));
                }
                tracing::info!(wait_s = wait.as_secs(), "sender's API rate limit; waiting");
                tokio::time::sleep(wait).await;
                continue;
            }
            match status.as_u16() {
                401 | 403 => return Err(ApiError::Credentials(status.as_u16())),
                500..=599 if tried < TRIES => {
                    tokio::time::sleep(Duration::from_secs(u64::from(tried))).await;
                }
                other => return Err(ApiError::Status(other)),
            }
        }
    }
}

fn now_unix() -> u64 {
    crate::clock::wall()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// How long a refused call asks to be left alone, if it is a rate limit:
/// `Retry-After` (seconds), else GitHub's `x-ratelimit-remaining: 0` until
/// `x-ratelimit-reset`, else a 429 or a 403 saying "rate limit" (GitHub's
/// secondary limit) for a minute.
pub fn limited(status: StatusCode, headers: &HeaderMap, body: &[u8], now: u64) -> Option<Duration> {
    if !matches!(status.as_u16(), 403 | 429) {
        return None;
    }
    let header = |name: &str| {
        (headers.get(name))
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    if let Some(seconds) = header(RETRY_AFTER.as_str()).and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(seconds.max(1)));
    }
    if header("x-ratelimit-remaining") == Some("0") {
        if let Some(reset) = header("x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok()) {
            return Some(Duration::from_secs(reset.saturating_sub(now).max(1)));
        }
    }
    let says_limit = String::from_utf8_lossy(&body[..body.len().min(4096)])
        .to_ascii_lowercase()
        .contains("rate limit");
    (status == StatusCode::TOO_MANY_REQUESTS || says_limit).then_some(SECONDARY_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn rate_limits_are_read_as_the_senders_write_them() {
        let none = HeaderMap::new();
        let status = |code| StatusCode::from_u16(code).unwrap();
        assert_eq!(
            limited(status(429), &headers(&[("retry-after", "7")]), b"", 0),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            limited(
                status(403),
                &headers(&[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1030")
                ]),
                b"",
                1000
            ),
            Some(Duration::from_secs(30))
        );
        let secondary = br#"{"message":"You have exceeded a secondary rate limit."}"#;
        assert_eq!(
            limited(status(403), &none, secondary, 0),
            Some(SECONDARY_WAIT)
        );
        assert_eq!(limited(status(429), &none, b"", 0), Some(SECONDARY_WAIT));
        // A plain 403 is the credentials, not a limit.
        assert_eq!(
            limited(status(403), &none, br#"{"message":"Bad credentials"}"#, 0),
            None
        );
        assert_eq!(
            limited(status(500), &headers(&[("retry-after", "7")]), b"", 0),
            None
        );
    }
}
