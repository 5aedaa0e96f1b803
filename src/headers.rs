//! Header names hookgate reads or writes, in one place, the hop-by-hop
//! rules of RFC 9110 §7.6.1 shared by the request and response paths, and
//! the one way headers are stored (recorded responses, kept requests), and
//! the encodings of what goes into them (hex, a URL's percent-encoding).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Added to every replayed response (docs/guide/what-a-sender-sees.md, "What a sender sees").
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// On the answer to a delivery of a dead letter (hookgate extension).
pub const HOOKGATE_EVENT_STATE: HeaderName = HeaderName::from_static("hookgate-event-state");
/// On a stored request of a route with destinations: the destinations the
/// event passed, comma-separated (`fanout`); hookgate's own, never a
/// sender's, never sent upstream.
pub const DESTINATIONS: HeaderName = HeaderName::from_static("hookgate-destinations");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// nginx's single-address variant of `X-Forwarded-For`.
pub const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// Correlates a delivery across hookgate's log, the upstream and the sender.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Headers that describe one connection, not the message: never forwarded.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Whether hookgate sets or removes `name` itself on the forwarded request
/// (framing, hop-by-hop, forwarding, correlation): no route may name it
/// as its `idempotency_header`.
pub fn managed(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
        || [
            header::HOST,
            header::CONTENT_LENGTH,
            X_FORWARDED_FOR,
            X_FORWARDED_PROTO,
            X_FORWARDED_HOST,
            X_REQUEST_ID,
            header::FORWARDED,
            X_REAL_IP,
        ]
        .contains(name)
}

/// Remove hop-by-hop headers, including every header the `Connection`
/// header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none of them: one pass over the names a message
    // has is cheaper than a hashed lookup for each of the nine, three
    // times a delivery (request, answer, recording).
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// A fresh `X-Request-Id`: 128 random bits, hex.
pub fn new_request_id() -> HeaderValue {
    HeaderValue::from_str(&lower_hex(&rand::random::<[u8; 16]>()))
        .expect("hex is a valid header value")
}

/// `bytes` in lowercase hex: `hex::encode`'s output, written through a
/// buffer instead of its char-by-char iterator (which took 1.3% of a
/// replay's CPU for the body hash and the request id).
pub fn lower_hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut out).expect("the buffer is twice the input");
    String::from_utf8(out).expect("hex is ASCII")
}

/// Headers as `name: value\r\n` lines: compact, byte-exact (a header value
/// holds no CR or LF), and readable in `redis-cli`, `sqlite3` or `psql`.
pub fn encode_lines(headers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::with_capacity(headers.len() * 32);
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The headers [`encode_lines`] wrote.
pub fn decode_lines(lines: &[u8]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for line in lines.split(|&b| b == b'\n').filter(|line| !line.is_empty()) {
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
    Ok(map)
}

/// Percent-encode everything but RFC 3986's unreserved characters: a
/// path segment or query value of any text.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// How the idempotency key is written in the injected header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderFormat {
    /// The bare key: what legacy consumers read (the default).
    Raw,
    /// A structured-field string (RFC 8941, `"…"`, `\` and `"` escaped),
    /// as draft-ietf-httpapi-idempotency-key-header asks.
    SfString,
}

impl HeaderFormat {
    /// `key` as this format writes it.
    pub fn write(self, key: &str) -> std::borrow::Cow<'_, str> {
        match self {
            HeaderFormat::Raw => std::borrow::Cow::Borrowed(key),
            HeaderFormat::SfString => {
                let mut quoted = String::with_capacity(key.len() + 2);
                quoted.push('"');
                for c in key.chars() {
                    if c == '"' || c == '\\' {
                        quoted.push('\\');
                    }
                    quoted.push(c);
                }
                quoted.push('"');
                std::borrow::Cow::Owned(quoted)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_hex_is_hex_encode() {
        for bytes in [&b""[..], b"\x00\x7f\x80\xff", &[0xab; 32]] {
            assert_eq!(lower_hex(bytes), hex::encode(bytes));
        }
    }

    #[test]
    fn removes_hop_by_hop_and_connection_named_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "connection",
            HeaderValue::from_static("close, X-Secret-Hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("stripe-signature", HeaderValue::from_static("t=1,v1=ab"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["stripe-signature"]);
    }

    #[test]
    fn removes_a_hop_by_hop_header_without_a_connection_header() {
        for hop in HOP_BY_HOP.iter().skip(1) {
            let mut headers = HeaderMap::new();
            headers.insert("x-event-id", HeaderValue::from_static("evt_1"));
            headers.insert(hop, HeaderValue::from_static("x"));
            strip_hop_by_hop(&mut headers);
            let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
            assert_eq!(left, ["x-event-id"], "{hop} was kept");
        }
        let mut plain = HeaderMap::new();
        plain.insert("x-event-id", HeaderValue::from_static("evt_1"));
        plain.insert("content-type", HeaderValue::from_static("application/json"));
        let before = plain.clone();
        strip_hop_by_hop(&mut plain);
        assert_eq!(plain, before);
    }
}
