//! A described sender's public key fetched from where the sender publishes
//! it (`key_url`): a URL the delivery names in a header (PayPal's
//! `PAYPAL-CERT-URL`), or one the description gives, with the JWT's key id
//! or a header's value in it (`{kid}`, `{header:NAME}`). Either way the
//! URL must be `https` on a host the description pins; one that is not is
//! refused before anything is fetched, as a forgery — a delivery cannot
//! make the gateway fetch from where it likes. The fetch itself, its
//! bounds and its cache are `verify::fetched`'s, shared with AWS SNS.

use http::{HeaderMap, HeaderName};
use serde::Deserialize;

use super::{refuse, Refusal};
use crate::verify::{single_header, HostPattern, VerifyError};

/// `key_url` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeyUrl {
    /// The delivery header that names the key's URL;
    pub header: Option<String>,
    /// or the URL, with `{kid}` (the JWT's key id) or `{header:NAME}` in it.
    pub url: Option<String>,
    /// The hosts the key may come from (`*` is one DNS label; `:port`, else
    /// 443 only).
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// A piece of a `key_url` template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Kid,
    Header(HeaderName),
}

/// Where the key's URL is read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Header(HeaderName),
    Template(Vec<Part>),
}

/// A `key_url`, checked.
#[derive(Debug, Clone)]
pub struct KeyUrl {
    source: Source,
    pub hosts: Vec<HostPattern>,
    /// The hosts as written, for the catalogue.
    written: Vec<String>,
}

/// Longest value put into a URL template; a key id is a few dozen bytes.
const MAX_PART_BYTES: usize = 128;

impl KeyUrl {
    pub fn from_raw(raw: &RawKeyUrl, jwt: bool) -> Result<KeyUrl, Refusal> {
        let source = match (&raw.header, &raw.url) {
            (Some(name), None) => {
                Source::Header(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    refuse("key_url.header", format!("{name:?} is not a header name"))
                })?)
            }
            (None, Some(url)) => Source::Template(Self::template(url, jwt)?),
            _ => {
                let why =
                    "one of: header = \"NAME\" (the delivery names the URL), url = \"https://…\"";
                return Err(refuse("key_url", why));
            }
        };
        if raw.hosts.is_empty() {
            let why = "the hosts the key may come from: hosts = [\"api.example.com\"]";
            return Err(refuse("key_url.hosts", why));
        }
        let hosts = (raw.hosts.iter())
            .map(|host| HostPattern::parse(host))
            .collect::<Result<_, _>>()
            .map_err(|why| refuse("key_url.hosts", why))?;
        Ok(KeyUrl {
            source,
            hosts,
            written: raw.hosts.clone(),
        })
    }

    fn template(url: &str, jwt: bool) -> Result<Vec<Part>, Refusal> {
        let field = "key_url.url";
        if !url.starts_with("https://") {
            return Err(refuse(field, format!("{url:?} is not an https:// URL")));
        }
        let mut parts = Vec::new();
        let mut rest = url;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = (rest[open..].find('}'))
                .ok_or_else(|| refuse(field, format!("{url:?}: a `{{` is never closed")))?;
            let inner = &rest[open + 1..open + close];
            parts.push(match (inner, inner.strip_prefix("header:")) {
                ("kid", _) if jwt => Part::Kid,
                (_, Some(name)) => {
                    Part::Header(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                        refuse(field, format!("{url:?}: {name:?} is not a header name"))
                    })?)
                }
                _ => {
                    let kid = if jwt { "{kid}, " } else { "" };
                    let why = format!("{url:?}: {{{inner}}} is not {kid}{{header:NAME}}");
                    return Err(refuse(field, why));
                }
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        // The host is the description's own, never a delivery's.
        let host_end = url["https://".len()..]
            .find('/')
            .map(|at| at + "https://".len());
        let first_placeholder = url.find('{');
        if first_placeholder.is_some_and(|at| host_end.is_none_or(|end| at < end)) {
            return Err(refuse(field, format!("{url:?}: a placeholder in the host")));
        }
        Ok(parts)
    }

    /// The key's URL for a delivery with `headers` (and, for a JWT, key id
    /// `kid`). A value put into a template must be URL-safe as it is.
    pub fn resolve(&self, headers: &HeaderMap, kid: Option<&str>) -> Result<String, VerifyError> {
        let invalid = VerifyError::SignatureInvalid;
        let parts = match &self.source {
            Source::Header(name) => return Ok(single_header(headers, name)?.to_owned()),
            Source::Template(parts) => parts,
        };
        let safe = |value: &str| {
            !value.is_empty()
                && value.len() <= MAX_PART_BYTES
                && (value.bytes()).all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        };
        let mut url = String::new();
        for part in parts {
            let value = match part {
                Part::Literal(text) => {
                    url.push_str(text);
                    continue;
                }
                Part::Kid => kid.ok_or(invalid)?,
                Part::Header(name) => single_header(headers, name)?,
            };
            if !safe(value) {
                return Err(invalid);
            }
            url.push_str(value);
        }
        Ok(url)
    }

    /// How the catalogue says where the key comes from.
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = (self.written.iter())
            .map(|host| format!("`{host}`"))
            .collect();
        let from = match &self.source {
            Source::Header(name) => format!("the URL in `{name}`"),
            Source::Template(parts) => {
                let url: String = (parts.iter())
                    .map(|part| match part {
                        Part::Literal(text) => text.clone(),
                        Part::Kid => "{kid}".to_owned(),
                        Part::Header(name) => format!("{{header:{name}}}"),
                    })
                    .collect();
                format!("`{url}`")
            }
        };
        format!("key fetched from {from}, only on {}", hosts.join(", "))
    }
}
