//! Recorded upstream responses: what is kept of a final answer, how it is
//! stored, and how it is replayed to later deliveries of the same event.
//!
//! A recording holds the status, the end-to-end headers minus `Set-Cookie`
//! (a session cookie must never be handed to a second caller) and the body
//! when it fits `max_cached_body_bytes` (otherwise status and headers only).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::headers::{strip_hop_by_hop, IDEMPOTENT_REPLAYED};

#[derive(Debug, Clone, PartialEq)]
pub struct RecordedResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl RecordedResponse {
    /// Keep what may be replayed of an upstream answer.
    pub fn record(status: StatusCode, headers: &HeaderMap, body: &Bytes, max_body: usize) -> Self {
        let mut kept = headers.clone();
        strip_hop_by_hop(&mut kept);
        kept.remove(header::SET_COOKIE);
        // Framing is recomputed for whatever body is replayed.
        kept.remove(header::CONTENT_LENGTH);
        let body = if body.len() <= max_body {
            body.clone()
        } else {
            Bytes::new()
        };
        Self {
            status,
            headers: kept,
            body,
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

    /// Headers as `name: value\r\n` lines: compact, byte-exact, and readable
    /// in `redis-cli` or `sqlite3`.
    pub fn encode_headers(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.headers.len() * 32);
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    pub fn decode(status: u16, headers: &[u8], body: Bytes) -> Result<Self, String> {
        let status = StatusCode::from_u16(status).map_err(|_| format!("bad status {status}"))?;
        let mut map = HeaderMap::new();
        for line in headers
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
        {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line
                .iter()
                .position(|&b| b == b':')
                .ok_or("header line without ':'")?;
            let name = HeaderName::from_bytes(&line[..colon]).map_err(|e| e.to_string())?;
            let value = line[colon + 1..]
                .strip_prefix(b" ")
                .unwrap_or(&line[colon + 1..]);
            let value = HeaderValue::from_bytes(value).map_err(|e| e.to_string())?;
            map.append(name, value);
        }
        Ok(Self {
            status,
            headers: map,
            body,
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
        let recorded = RecordedResponse::record(StatusCode::CREATED, &headers, &body, 1024);
        assert!(recorded.headers.get("set-cookie").is_none());
        assert!(recorded.headers.get("content-length").is_none());

        let decoded =
            RecordedResponse::decode(201, &recorded.encode_headers(), recorded.body.clone())
                .unwrap();
        assert_eq!(decoded, recorded);

        let replay = decoded.replay();
        assert_eq!(replay.status(), StatusCode::CREATED);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        let multi: Vec<_> = replay.headers().get_all("x-multi").iter().collect();
        assert_eq!(multi, ["one", "two: three"]);
    }

    #[test]
    fn drops_bodies_over_the_limit() {
        let body = Bytes::from(vec![b'x'; 100]);
        let recorded = RecordedResponse::record(StatusCode::OK, &HeaderMap::new(), &body, 99);
        assert!(recorded.body.is_empty());
        assert_eq!(recorded.status, StatusCode::OK);
    }
}
