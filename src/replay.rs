//! Recorded upstream responses: what is kept of a final answer, how it is
//! stored, and how it is replayed to later deliveries of the same event.
//!
//! A recording holds the status, the end-to-end headers minus `Set-Cookie`
//! (a session cookie must never be handed to a second caller) and the body
//! when it fits `max_cached_body_bytes`. Otherwise — the body was too large,
//! or it broke off after a final status — the recording says so
//! ([`BodyKept`]), and keeps no header that describes the missing body
//! (`Content-Encoding`, `ETag`, digests): a replay is then the status and
//! headers with an empty body, never a body that contradicts its headers.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::headers::{decode_lines, encode_lines, strip_hop_by_hop, IDEMPOTENT_REPLAYED};

#[derive(Debug, Clone, PartialEq)]
pub struct RecordedResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub body_kept: BodyKept,
}

/// Whether a recording holds the upstream's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKept {
    Whole,
    /// Over `max_cached_body_bytes` (or the 16 MiB read cap): not kept.
    Dropped,
    /// The body broke off after a final status (`body_incomplete`).
    Incomplete,
}

impl BodyKept {
    pub fn as_str(self) -> &'static str {
        match self {
            BodyKept::Whole => "whole",
            BodyKept::Dropped => "dropped",
            BodyKept::Incomplete => "incomplete",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [BodyKept::Whole, BodyKept::Dropped, BodyKept::Incomplete]
            .into_iter()
            .find(|kept| kept.as_str() == text)
    }
}

/// How much of an upstream body arrived (what a recording can keep of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRead {
    Whole,
    /// Over the 16 MiB read cap: the upstream finished, hookgate did not
    /// keep the body.
    TooLarge,
    /// The connection broke, or `upstream_timeout` ran out, after the status
    /// arrived.
    BrokeOff,
}

/// Headers that describe a body's bytes: meaningless once the body is gone.
const BODY_DESCRIBING: [HeaderName; 5] = [
    header::CONTENT_ENCODING,
    header::ETAG,
    HeaderName::from_static("content-md5"),
    HeaderName::from_static("digest"),
    HeaderName::from_static("content-digest"),
];

impl RecordedResponse {
    /// Keep what may be replayed of an upstream answer; `read` says how much
    /// of its body arrived.
    pub fn record(
        status: StatusCode,
        headers: &HeaderMap,
        body: &Bytes,
        read: BodyRead,
        max_body: usize,
    ) -> Self {
        let mut kept = headers.clone();
        strip_hop_by_hop(&mut kept);
        kept.remove(header::SET_COOKIE);
        // Framing is recomputed for whatever body is replayed.
        kept.remove(header::CONTENT_LENGTH);
        let body_kept = match read {
            BodyRead::BrokeOff => BodyKept::Incomplete,
            BodyRead::TooLarge => BodyKept::Dropped,
            BodyRead::Whole if body.len() > max_body => BodyKept::Dropped,
            BodyRead::Whole => BodyKept::Whole,
        };
        let body = if body_kept == BodyKept::Whole {
            body.clone()
        } else {
            for name in &BODY_DESCRIBING {
                kept.remove(name);
            }
            Bytes::new()
        };
        Self {
            status,
            headers: kept,
            body,
            body_kept,
        }
    }

    /// The response a duplicate delivery gets.
    pub fn replay(&self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(self.body.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        response
    }

    /// The headers as stored ([`encode_lines`]).
    pub fn encode_headers(&self) -> Vec<u8> {
        encode_lines(&self.headers)
    }

    pub fn decode(
        status: u16,
        headers: &[u8],
        body: Bytes,
        body_kept: BodyKept,
    ) -> Result<Self, String> {
        let status = StatusCode::from_u16(status).map_err(|_| format!("bad status {status}"))?;
        let map = decode_lines(headers)?;
        Ok(Self {
            status,
            headers: map,
            body,
            body_kept,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_without_cookies_or_framing_and_round_trips() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("set-cookie", HeaderValue::from_static("session=abc"));
        headers.insert("content-length", HeaderValue::from_static("11"));
        headers.append("x-multi", HeaderValue::from_static("one"));
        headers.append("x-multi", HeaderValue::from_static("two: three"));
        let body = Bytes::from_static(b"{\"ok\":true}");
        let recorded =
            RecordedResponse::record(StatusCode::CREATED, &headers, &body, BodyRead::Whole, 1024);
        assert!(recorded.headers.get("set-cookie").is_none());
        assert!(recorded.headers.get("content-length").is_none());

        let decoded = RecordedResponse::decode(
            201,
            &recorded.encode_headers(),
            recorded.body.clone(),
            BodyKept::Whole,
        )
        .unwrap();
        assert_eq!(decoded, recorded);

        let replay = decoded.replay();
        assert_eq!(replay.status(), StatusCode::CREATED);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        let multi: Vec<_> = replay.headers().get_all("x-multi").iter().collect();
        assert_eq!(multi, ["one", "two: three"]);
    }

    #[test]
    fn a_missing_body_takes_the_headers_that_describe_it() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("content-encoding", HeaderValue::from_static("gzip"));
        headers.insert("etag", HeaderValue::from_static("\"v1\""));
        headers.insert("content-length", HeaderValue::from_static("100"));
        let body = Bytes::from(vec![b'x'; 100]);
        for (read, max, kept) in [
            (BodyRead::Whole, 99, BodyKept::Dropped),
            (BodyRead::TooLarge, 1 << 20, BodyKept::Dropped),
            (BodyRead::BrokeOff, 1 << 20, BodyKept::Incomplete),
        ] {
            let recorded = RecordedResponse::record(StatusCode::OK, &headers, &body, read, max);
            assert_eq!(recorded.body_kept, kept);
            assert!(recorded.body.is_empty());
            assert_eq!(recorded.status, StatusCode::OK);
            let replay = recorded.replay();
            for gone in ["content-encoding", "etag", "content-length"] {
                assert!(replay.headers().get(gone).is_none(), "{gone}");
            }
            assert_eq!(replay.headers()["content-type"], "application/json");
        }
        let whole = RecordedResponse::record(StatusCode::OK, &headers, &body, BodyRead::Whole, 100);
        assert_eq!(whole.body_kept, BodyKept::Whole);
        assert_eq!(whole.headers["content-encoding"], "gzip");
    }
}
