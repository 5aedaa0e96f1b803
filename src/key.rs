//! Idempotency key extraction (SPEC §2 "Key sources").
//!
//! A route lists sources in order; the first one present wins. The key must be
//! 1–255 bytes of visible ASCII. The body is parsed as JSON at most once, and
//! only when a `json:` source is reached.

use http::{HeaderMap, HeaderName};
use serde_json::Value;

/// Longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// Where a route finds its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `header:NAME`
    Header(HeaderName),
    /// `json:/POINTER` (RFC 6901)
    JsonPointer(String),
    /// `body-sha256`: hex SHA-256 of the raw body.
    BodySha256,
}

impl KeySource {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "body-sha256" {
            return Ok(KeySource::BodySha256);
        }
        if let Some(name) = text.strip_prefix("header:") {
            return HeaderName::from_bytes(name.as_bytes())
                .map(KeySource::Header)
                .map_err(|_| format!("{name:?} is not a valid header name"));
        }
        if let Some(pointer) = text.strip_prefix("json:") {
            if !pointer.starts_with('/') {
                return Err(format!(
                    "{pointer:?} is not a JSON pointer (it must start with '/')"
                ));
            }
            return Ok(KeySource::JsonPointer(pointer.to_owned()));
        }
        Err(format!(
            "{text:?} is not a key source (use \"header:NAME\", \"json:/pointer\" or \"body-sha256\")"
        ))
    }
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Header(name) => write!(f, "header:{name}"),
            KeySource::JsonPointer(pointer) => write!(f, "json:{pointer}"),
            KeySource::BodySha256 => f.write_str("body-sha256"),
        }
    }
}

/// A verified delivery with no key (SPEC §4, keyless requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissingKey {
    /// 400 `key_missing`.
    Reject,
    /// Forward once, unclaimed: senders that never retry such requests
    /// (Slack's `url_verification`, slash commands, interactivity).
    Forward,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("no idempotency key source is present in the delivery")]
    Missing,
    #[error("idempotency key must be 1-255 bytes of visible ASCII")]
    Invalid,
}

/// Find the key for one delivery. `body_sha256` is the hex digest the
/// pipeline computed anyway (for the payload-mismatch check);
/// `header_allowed` says which headers may carry it (a signed id header
/// only when it is the one the signature covered) — the others count as
/// absent.
pub fn extract(
    sources: &[KeySource],
    headers: &HeaderMap,
    body: &[u8],
    body_sha256: &str,
    header_allowed: impl Fn(&HeaderName) -> bool,
) -> Result<String, KeyError> {
    // Parsed lazily, at most once; `None` inside means "not JSON".
    let mut json: Option<Option<Value>> = None;
    for source in sources {
        let found = match source {
            KeySource::Header(name) if !header_allowed(name) => None,
            KeySource::Header(name) => match headers.get(name) {
                Some(value) => Some(value.to_str().map_err(|_| KeyError::Invalid)?.to_owned()),
                None => None,
            },
            KeySource::JsonPointer(pointer) => {
                let document = json.get_or_insert_with(|| serde_json::from_slice(body).ok());
                match document.as_ref().and_then(|doc| doc.pointer(pointer)) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
                    Some(_) => return Err(KeyError::Invalid),
                }
            }
            KeySource::BodySha256 => Some(body_sha256.to_owned()),
        };
        if let Some(key) = found {
            return validate(key);
        }
    }
    Err(KeyError::Missing)
}

/// `key` when it is 1–255 bytes of visible ASCII (SPEC §2).
pub fn validate(key: String) -> Result<String, KeyError> {
    let visible = key.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if visible && !key.is_empty() && key.len() <= MAX_KEY_BYTES {
        Ok(key)
    } else {
        Err(KeyError::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn sources(list: &[&str]) -> Vec<KeySource> {
        list.iter().map(|s| KeySource::parse(s).unwrap()).collect()
    }

    fn run(list: &[&str], headers: &HeaderMap, body: &str) -> Result<String, KeyError> {
        extract(&sources(list), headers, body.as_bytes(), "ab12", |_| true)
    }

    #[test]
    fn first_present_source_wins() {
        let mut headers = HeaderMap::new();
        headers.insert("x-id", HeaderValue::from_static("hdr-1"));
        let body = r#"{"id":"evt_1","data":{"n":42,"a/b":"slash","t~x":"tilde"}}"#;
        let none = HeaderMap::new();
        assert_eq!(
            run(&["header:X-Id", "json:/id"], &headers, body).unwrap(),
            "hdr-1"
        );
        assert_eq!(
            run(&["header:X-Id", "json:/id"], &none, body).unwrap(),
            "evt_1"
        );
        assert_eq!(run(&["json:/data/n"], &none, body).unwrap(), "42");
        assert_eq!(run(&["json:/data/a~1b"], &none, body).unwrap(), "slash");
        assert_eq!(run(&["json:/data/t~0x"], &none, body).unwrap(), "tilde");
        assert_eq!(
            run(&["json:/nope", "body-sha256"], &none, body).unwrap(),
            "ab12"
        );
    }

    #[test]
    fn missing_and_invalid_keys() {
        let none = HeaderMap::new();
        assert_eq!(
            run(&["json:/id"], &none, "not json"),
            Err(KeyError::Missing)
        );
        assert_eq!(
            run(&["json:/id"], &none, r#"{"id":null}"#),
            Err(KeyError::Missing)
        );
        assert_eq!(run(&["header:x-id"], &none, "{}"), Err(KeyError::Missing));
        assert_eq!(
            run(&["json:/id"], &none, r#"{"id":""}"#),
            Err(KeyError::Invalid)
        );
        assert_eq!(
            run(&["json:/id"], &none, r#"{"id":"a b"}"#),
            Err(KeyError::Invalid)
        );
        assert_eq!(
            run(&["json:/id"], &none, r#"{"id":1.5}"#),
            Err(KeyError::Invalid)
        );
        assert_eq!(
            run(&["json:/id"], &none, r#"{"id":{"x":1}}"#),
            Err(KeyError::Invalid)
        );
        let long = format!(r#"{{"id":"{}"}}"#, "k".repeat(256));
        assert_eq!(run(&["json:/id"], &none, &long), Err(KeyError::Invalid));
        let max = format!(r#"{{"id":"{}"}}"#, "k".repeat(255));
        assert_eq!(run(&["json:/id"], &none, &max).unwrap().len(), 255);
    }

    #[test]
    fn parses_sources() {
        assert!(KeySource::parse("json:id").is_err());
        assert!(KeySource::parse("header:bad header").is_err());
        assert!(KeySource::parse("query:id").is_err());
        assert_eq!(
            KeySource::parse("header:X-Id").unwrap().to_string(),
            "header:x-id"
        );
    }

    #[test]
    fn a_header_that_is_not_allowed_counts_as_absent() {
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", HeaderValue::from_static("forged"));
        headers.insert("svix-id", HeaderValue::from_static("msg_1"));
        let list = sources(&["header:webhook-id", "header:svix-id"]);
        let only_svix = |name: &HeaderName| name == "svix-id";
        assert_eq!(
            extract(&list, &headers, b"", "ab12", only_svix).as_deref(),
            Ok("msg_1")
        );
        let neither = |_: &HeaderName| false;
        assert_eq!(
            extract(&list, &headers, b"", "ab12", neither),
            Err(KeyError::Missing)
        );
    }
}
