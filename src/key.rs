//! Idempotency key extraction (docs/reference/configuration.md "Key sources").
//!
//! A route lists sources in order; the first one present wins. A source is a
//! header, a JSON pointer, a form field, the body's hash, or several of
//! those joined (`"json:/eventCode + json:/pspReference"`: present only when
//! every part is). The body is parsed as JSON (or as a form) at most once,
//! and only when such a source is reached.
//!
//! A key is 1–255 bytes of visible ASCII as the sender sent it; anything
//! else that is not empty — spaces, non-ASCII, over 255 bytes — is kept as
//! `sha256:<hex>` of its bytes (a hookgate extension: a stricter reading would refuse it),
//! so a sender with such ids is still deduplicated, and the key says it was
//! hashed.

use http::{HeaderMap, HeaderName};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// Where a route finds its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `header:NAME`
    Header(HeaderName),
    /// `json:/POINTER` (RFC 6901)
    JsonPointer(String),
    /// `form:NAME`: a field of an `application/x-www-form-urlencoded` body.
    Form(String),
    /// `body-sha256`: hex SHA-256 of the raw body.
    BodySha256,
    /// `A + B + …`: every part present, joined by `:` (a `:` or `%` inside a
    /// part is percent-encoded, so different parts never join alike).
    All(Vec<KeySource>),
}

/// Prefix of a key stored as the hash of what the sender sent.
pub const HASHED_PREFIX: &str = "sha256:";

impl KeySource {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.contains(" + ") {
            let parts = text
                .split(" + ")
                .map(|part| Self::parse_one(part.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(KeySource::All(parts));
        }
        Self::parse_one(text)
    }

    fn parse_one(text: &str) -> Result<Self, String> {
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
        if let Some(name) = text.strip_prefix("form:") {
            if name.is_empty() {
                return Err("form: needs a field name, e.g. \"form:MessageSid\"".into());
            }
            return Ok(KeySource::Form(name.to_owned()));
        }
        Err(format!(
            "{text:?} is not a key source (use \"header:NAME\", \"json:/pointer\", \"form:NAME\", \
             \"body-sha256\", or several joined with \" + \")"
        ))
    }
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Header(name) => write!(f, "header:{name}"),
            KeySource::JsonPointer(pointer) => write!(f, "json:{pointer}"),
            KeySource::Form(name) => write!(f, "form:{name}"),
            KeySource::BodySha256 => f.write_str("body-sha256"),
            KeySource::All(parts) => {
                let parts: Vec<String> = parts.iter().map(ToString::to_string).collect();
                f.write_str(&parts.join(" + "))
            }
        }
    }
}

/// A verified delivery with no key (docs/guide/what-a-sender-sees.md, "What a sender sees", keyless requests).
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
    #[error("the idempotency key is empty, or a JSON value that is not a string or an integer")]
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
    let mut delivery = Delivery {
        headers,
        body,
        body_sha256,
        header_allowed: &header_allowed,
        json: None,
    };
    for source in sources {
        if let Some(key) = delivery.find(source)? {
            return normalize(key);
        }
    }
    Err(KeyError::Missing)
}

/// The raw value `source` finds in a stored request (every header
/// counts), for an operator's search (`q=json:/data/object/customer=cus_1`).
pub fn value_of(
    source: &KeySource,
    headers: &HeaderMap,
    body: &[u8],
    body_sha256: &str,
) -> Option<Vec<u8>> {
    let mut delivery = Delivery {
        headers,
        body,
        body_sha256,
        header_allowed: &|_| true,
        json: None,
    };
    delivery.find(source).ok().flatten()
}

/// One delivery, as the key sources read it.
struct Delivery<'a> {
    headers: &'a HeaderMap,
    body: &'a [u8],
    body_sha256: &'a str,
    header_allowed: &'a dyn Fn(&HeaderName) -> bool,
    /// Parsed lazily, at most once; `None` inside means "not JSON".
    json: Option<Option<Value>>,
}

impl Delivery<'_> {
    /// The raw value of `source`, when present.
    fn find(&mut self, source: &KeySource) -> Result<Option<Vec<u8>>, KeyError> {
        Ok(match source {
            KeySource::Header(name) if !(self.header_allowed)(name) => None,
            KeySource::Header(name) => self
                .headers
                .get(name)
                .map(|value| value.as_bytes().to_vec()),
            KeySource::JsonPointer(pointer) => {
                let body = self.body;
                let document = self
                    .json
                    .get_or_insert_with(|| serde_json::from_slice(body).ok());
                match document.as_ref().and_then(|doc| doc.pointer(pointer)) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone().into_bytes()),
                    Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                        Some(n.to_string().into_bytes())
                    }
                    Some(_) => return Err(KeyError::Invalid),
                }
            }
            KeySource::Form(name) => form_urlencoded::parse(self.body)
                .find(|(field, _)| field == name.as_str())
                .map(|(_, value)| value.into_owned().into_bytes()),
            KeySource::BodySha256 => Some(self.body_sha256.as_bytes().to_vec()),
            KeySource::All(parts) => {
                let mut joined = Vec::new();
                for (i, part) in parts.iter().enumerate() {
                    let Some(value) = self.find(part)? else {
                        return Ok(None);
                    };
                    if i > 0 {
                        joined.push(b':');
                    }
                    for byte in value {
                        match byte {
                            b'%' => joined.extend_from_slice(b"%25"),
                            b':' => joined.extend_from_slice(b"%3A"),
                            other => joined.push(other),
                        }
                    }
                }
                Some(joined)
            }
        })
    }
}

/// The key for `raw`: as sent when it is 1–255 bytes of visible ASCII,
/// else `sha256:<hex>` of it; an empty value is no key.
fn normalize(raw: Vec<u8>) -> Result<String, KeyError> {
    if raw.is_empty() {
        return Err(KeyError::Invalid);
    }
    if plain(&raw) {
        Ok(String::from_utf8(raw).expect("visible ASCII is UTF-8"))
    } else {
        Ok(hashed(&raw))
    }
}

/// Whether `key` is 1–255 bytes of visible ASCII (docs/reference/configuration.md).
fn plain(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_BYTES && key.iter().all(|b| (0x21..=0x7e).contains(b))
}

fn hashed(raw: &[u8]) -> String {
    format!(
        "{HASHED_PREFIX}{}",
        crate::headers::lower_hex(&Sha256::digest(raw))
    )
}

/// `key` when it is 1–255 bytes of visible ASCII (docs/reference/configuration.md).
pub fn validate(key: String) -> Result<String, KeyError> {
    if plain(key.as_bytes()) {
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
            run(&["json:/id"], &none, r#"{"id":1.5}"#),
            Err(KeyError::Invalid)
        );
        assert_eq!(
            run(&["json:/id"], &none, r#"{"id":{"x":1}}"#),
            Err(KeyError::Invalid)
        );
        let max = format!(r#"{{"id":"{}"}}"#, "k".repeat(255));
        assert_eq!(run(&["json:/id"], &none, &max).unwrap().len(), 255);
    }

    #[test]
    fn keys_outside_visible_ascii_are_kept_hashed() {
        let none = HeaderMap::new();
        let hashed = |raw: &str| format!("sha256:{}", hex::encode(Sha256::digest(raw)));
        for id in ["a b", "caf\u{e9}", &"k".repeat(256)] {
            let body = serde_json::json!({ "id": id }).to_string();
            assert_eq!(
                run(&["json:/id"], &none, &body).unwrap(),
                hashed(id),
                "{id:?}"
            );
        }
        let mut headers = HeaderMap::new();
        headers.insert("x-id", http::HeaderValue::from_bytes(b"\xffraw").unwrap());
        let key = run(&["header:x-id"], &headers, "").unwrap();
        assert_eq!(
            key,
            format!("sha256:{}", hex::encode(Sha256::digest(b"\xffraw")))
        );
        assert_ne!(
            run(&["json:/id"], &none, r#"{"id":"a b"}"#),
            run(&["json:/id"], &none, r#"{"id":"a  b"}"#),
            "different ids stay different"
        );
    }

    #[test]
    fn composite_and_form_keys() {
        let none = HeaderMap::new();
        let adyen = r#"{"eventCode":"AUTHORISATION","pspReference":"8835:13"}"#;
        assert_eq!(
            run(&["json:/eventCode + json:/pspReference"], &none, adyen).unwrap(),
            "AUTHORISATION:8835%3A13",
            "every part, joined; a ':' inside a part is encoded"
        );
        assert_eq!(
            run(
                &["json:/eventCode + json:/missing", "body-sha256"],
                &none,
                adyen
            )
            .unwrap(),
            "ab12",
            "a composite with a part absent is absent"
        );
        let form = "MessageSid=SM123&Body=hello+there&AccountSid=AC%3A9";
        assert_eq!(run(&["form:MessageSid"], &none, form).unwrap(), "SM123");
        assert_eq!(
            run(&["form:AccountSid + form:MessageSid"], &none, form).unwrap(),
            "AC%3A9:SM123"
        );
        assert_eq!(run(&["form:Nope"], &none, form), Err(KeyError::Missing));
        let source = KeySource::parse("json:/eventCode + json:/pspReference").unwrap();
        assert_eq!(source.to_string(), "json:/eventCode + json:/pspReference");
        assert!(KeySource::parse("form:").is_err());
        assert!(KeySource::parse("json:/a + nonsense").is_err());
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
