//! Senders described as data (docs/guide/senders.md, "Senders described as data"): a
//! scheme given by its headers, digest, encoding, signed-content template
//! and timestamp rule instead of code. The senders hookgate ships this way
//! are `senders.toml`, compiled into the binary; a config's `[[schemes]]`
//! table describes one in the same format, and both become the same
//! [`Profile`].
//!
//! A description is checked whole when it is read — an unknown algorithm, a
//! template placeholder that is not `{body}`, `{header:NAME}` or `{url}`, a
//! header name that is not one — and each error names its field, so a
//! config can say where it is. A description that builds on a scheme of
//! code (`builds_on = "standard-webhooks"`) takes that scheme's
//! verification and gives it its own name, key and retention.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use http::HeaderName;
use serde::Deserialize;

mod jwt;
mod keys;
mod verifier;

pub use self::jwt::{Jwt, RawJwt};
pub use self::verifier::DescribedVerifier;
use super::challenge::{Challenge, RawHandshake};
use super::{Algorithm, Encoding, Profile, DAY};
use crate::clock::parse_duration;
use crate::key::OnMissingKey;

/// One `[[schemes]]` entry as written (`senders.toml` and a config's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScheme {
    pub name: String,
    /// A scheme of code whose verification this one takes.
    pub builds_on: Option<String>,
    pub algorithm: Option<String>,
    pub signature: Option<RawSignature>,
    pub signed: Option<String>,
    pub timestamp: Option<RawTimestamp>,
    /// The signature is a JWT, whose claims bind the body.
    pub jwt: Option<RawJwt>,
    /// The challenge the sender sends to prove the endpoint.
    pub handshake: Option<RawHandshake>,
    /// The default key's sources (first present wins).
    pub key: Option<Vec<String>>,
    pub retention: Option<String>,
    /// How long the sender may deliver one event again.
    pub retry_horizon: Option<String>,
    pub replay_guard: Option<bool>,
    pub retries_change_body: Option<bool>,
    /// `false`: the sender never retries a failed delivery on its own.
    pub retries_itself: Option<bool>,
    /// `reject` (the default) or `forward`: what a verified delivery
    /// without a key gets, for senders whose keyless requests are never
    /// retried (Slack's commands).
    pub on_missing_key: Option<String>,
    /// Where the convention is documented.
    pub docs: Option<String>,
    /// What shows the profile right: `official` (a vector the sender
    /// publishes), `sdk` (the sender's SDK signs it in tests/it/sdk.rs) or
    /// `computed` (a vector computed independently for its documented
    /// method).
    pub evidence: Option<String>,
    #[serde(default)]
    pub vectors: Vec<RawVector>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignature {
    pub header: String,
    pub encoding: Option<String>,
    pub prefix: Option<String>,
    /// The header is `name=value` pairs (`t=…,v1=…`), and the signatures
    /// are the values of the pairs with this name.
    pub pair: Option<String>,
    /// The header is a list, and every item is a signature (but a
    /// timestamp with `first = true`).
    pub list: Option<bool>,
    /// What separates pairs or items: any of these characters (`","`).
    pub separator: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimestamp {
    /// In a header of its own;
    pub header: Option<String>,
    /// or the pair of this name in the signature header;
    pub pair: Option<String>,
    /// or the first item of the signature header's list;
    pub first: Option<bool>,
    /// or this claim of the JWT (`iat`).
    pub claim: Option<String>,
    /// `s` (default) or `ms`.
    pub unit: Option<String>,
    pub tolerance: Option<String>,
}

/// A signed delivery that must verify: the evidence a shipped profile
/// carries, and what its test checks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVector {
    pub secret: String,
    pub body: String,
    pub headers: HashMap<String, String>,
    /// The URL it was posted to (`{url}`).
    pub url: Option<String>,
    /// When it is verified (Unix seconds), for a timestamped one.
    pub at: Option<u64>,
}

/// What a description's signature covers, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Body,
    Header(HeaderName),
    Url,
    /// The signed timestamp, wherever the description reads it.
    Timestamp,
    Literal(String),
}

/// What signs: an HMAC under the route's secrets, a private key whose
/// public key the route lists, or nothing — the sender sends the route's
/// secret itself (a token, basic auth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    Hmac(Algorithm),
    Ed25519,
    EcdsaP256,
    RsaPkcs1Sha256,
    RsaPssSha256,
    /// The header is the secret, compared whole in constant time: it
    /// proves who sent the request, not what its body was.
    Token,
}

impl Signer {
    /// Whether the route lists public keys rather than secrets.
    pub fn is_asymmetric(self) -> bool {
        !matches!(self, Signer::Hmac(_) | Signer::Token)
    }

    /// The `algorithm` names, in the order an error lists them.
    const NAMES: [(&'static str, Signer); 8] = [
        ("hmac-sha256", Signer::Hmac(Algorithm::Sha256)),
        ("hmac-sha512", Signer::Hmac(Algorithm::Sha512)),
        ("hmac-sha1", Signer::Hmac(Algorithm::Sha1)),
        ("ed25519", Signer::Ed25519),
        ("ecdsa-p256", Signer::EcdsaP256),
        ("rsa-pkcs1-sha256", Signer::RsaPkcs1Sha256),
        ("rsa-pss-sha256", Signer::RsaPssSha256),
        ("token", Signer::Token),
    ];

    /// How the catalogue names it.
    fn title(self) -> &'static str {
        match self {
            Signer::Hmac(Algorithm::Sha1) => "HMAC-SHA1",
            Signer::Hmac(Algorithm::Sha256) => "HMAC-SHA256",
            Signer::Hmac(Algorithm::Sha512) => "HMAC-SHA512",
            Signer::Ed25519 => "Ed25519",
            Signer::EcdsaP256 => "ECDSA P-256 (SHA-256)",
            Signer::RsaPkcs1Sha256 => "RSA PKCS#1 v1.5 (SHA-256)",
            Signer::RsaPssSha256 => "RSA-PSS (SHA-256)",
            Signer::Token => "the route's secret",
        }
    }
}

/// How the signature header is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// One signature.
    Whole,
    /// `name=value` pairs; the signatures are the pairs named `name`.
    Pairs { name: String, separator: String },
    /// A list of signatures (after the timestamp, when it is first).
    List { separator: String },
}

/// Where the signed timestamp is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    Header(HeaderName),
    Pair(String),
    First,
    /// A claim of the JWT.
    Claim(String),
}

/// The signed timestamp's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Millis,
}

/// A scheme described as data, checked.
#[derive(Debug, Clone)]
pub struct Described {
    pub signer: Signer,
    pub header: HeaderName,
    pub encoding: Encoding,
    /// Before each encoded signature.
    pub prefix: String,
    pub layout: Layout,
    pub signed: Vec<Piece>,
    pub timestamp: Option<(Stamp, Unit)>,
    /// The description's own `tolerance`, when it gives one.
    pub tolerance: Option<Duration>,
    /// The sender's handshake, answered by the gateway.
    pub challenge: Option<Challenge>,
    /// The signature is a JWT, checked as [`Jwt`] says.
    pub jwt: Option<Jwt>,
}

/// A description's error: the field (under the entry) and what is wrong.
pub type Refusal = (String, String);

pub(super) fn refuse(field: &str, message: impl Into<String>) -> Refusal {
    (field.to_owned(), message.into())
}

fn header_name(field: &str, text: &str) -> Result<HeaderName, Refusal> {
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| refuse(field, format!("{text:?} is not a header name")))
}

fn duration(field: &str, text: &str) -> Result<Duration, Refusal> {
    parse_duration(text).map_err(|message| refuse(field, message))
}

/// `{body}`, `{header:NAME}`, `{url}`, `{timestamp}` and literal text
/// between them.
pub fn parse_template(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let Some(open) = rest.find('{') else {
            pieces.push(Piece::Literal(rest.to_owned()));
            break;
        };
        if open > 0 {
            pieces.push(Piece::Literal(rest[..open].to_owned()));
        }
        let close =
            (rest[open..].find('}')).ok_or_else(|| format!("{text:?}: a `{{` is never closed"))?;
        let inner = &rest[open + 1..open + close];
        pieces.push(match inner {
            "body" => Piece::Body,
            "url" => Piece::Url,
            "timestamp" => Piece::Timestamp,
            _ => match inner.strip_prefix("header:") {
                Some(name) => Piece::Header(
                    HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("{text:?}: {name:?} is not a header name"))?,
                ),
                None => {
                    return Err(format!(
                        "{text:?}: {{{inner}}} is not {{body}}, {{header:NAME}}, {{url}} or {{timestamp}}"
                    ))
                }
            },
        });
        rest = &rest[open + close + 1..];
    }
    if !pieces.contains(&Piece::Body) {
        return Err(format!("{text:?} does not sign {{body}}"));
    }
    Ok(pieces)
}

impl Described {
    /// The verification part of `raw`, checked.
    pub fn from_raw(raw: &RawScheme) -> Result<Described, Refusal> {
        let signer = match raw.algorithm.as_deref() {
            Some(name) => (Signer::NAMES.iter())
                .find(|(known, _)| *known == name)
                .map(|(_, signer)| *signer)
                .ok_or_else(|| {
                    let names: Vec<String> = Signer::NAMES
                        .iter()
                        .map(|(n, _)| format!("{n:?}"))
                        .collect();
                    let why = format!("{name:?} is not one of {}", names.join(", "));
                    refuse("algorithm", why)
                })?,
            None => return Err(refuse("algorithm", "missing (e.g. \"hmac-sha256\")")),
        };
        let signature = (raw.signature.as_ref())
            .ok_or_else(|| refuse("signature", "missing: { header = \"X-Signature\" }"))?;
        let encoding = match signature.encoding.as_deref() {
            None | Some("hex") => Encoding::Hex,
            Some("base64") => Encoding::Base64,
            Some("base64url") => Encoding::Base64Url,
            Some("plain") if signer == Signer::Token => Encoding::Plain,
            Some(other) => {
                return Err(refuse(
                    "signature.encoding",
                    format!("{other:?} is not \"hex\", \"base64\", \"base64url\" or, for a token, \"plain\""),
                ))
            }
        };
        let separator = signature.separator.clone().unwrap_or_else(|| ",".into());
        if separator.is_empty() || separator.contains('=') {
            let why = "the characters between pairs or items: not empty, no `=`";
            return Err(refuse("signature.separator", why));
        }
        let layout = match (&signature.pair, signature.list) {
            (Some(_), Some(true)) => {
                return Err(refuse(
                    "signature.list",
                    "a header is pairs or a list, not both",
                ))
            }
            (Some(name), _) if name.is_empty() || name.contains(separator.as_str()) => {
                return Err(refuse(
                    "signature.pair",
                    "the name of the signature's pair (\"v1\")",
                ))
            }
            (Some(name), _) => Layout::Pairs {
                name: name.clone(),
                separator,
            },
            (None, Some(true)) => Layout::List { separator },
            (None, _) => Layout::Whole,
        };
        let timestamp = raw
            .timestamp
            .as_ref()
            .map(|stamp| Self::stamp(stamp, &layout))
            .transpose()?;
        let jwt = match &raw.jwt {
            Some(jwt) => Some(Self::jwt(raw, jwt, signer, &layout)?),
            None => None,
        };
        if signer == Signer::Token && (raw.signed.is_some() || raw.timestamp.is_some()) {
            let field = if raw.signed.is_some() {
                "signed"
            } else {
                "timestamp"
            };
            return Err(refuse(field, "a token signs nothing: leave it out"));
        }
        let signed = match &jwt {
            // The body (and the URL) are bound by the claims' digests.
            Some(jwt) if jwt.url_digest.is_some() => vec![Piece::Body, Piece::Url],
            Some(_) => vec![Piece::Body],
            None => parse_template(raw.signed.as_deref().unwrap_or("{body}"))
                .map_err(|message| refuse("signed", message))?,
        };
        if signed.contains(&Piece::Timestamp) && timestamp.is_none() {
            return Err(refuse(
                "signed",
                "{timestamp} needs a `timestamp` to read it from",
            ));
        }
        let tolerance = (raw.timestamp.as_ref())
            .and_then(|stamp| stamp.tolerance.as_deref())
            .map(|text| duration("timestamp.tolerance", text))
            .transpose()?;
        // A timestamp the signature does not cover guards nothing: a
        // captured body, re-sent with a fresh time, would verify.
        let covered = |stamp: &Stamp| match stamp {
            Stamp::Header(name) => (signed.iter())
                .any(|piece| *piece == Piece::Timestamp || *piece == Piece::Header(name.clone())),
            Stamp::Claim(_) => true,
            _ => signed.contains(&Piece::Timestamp),
        };
        if let Some((stamp, _)) = timestamp.as_ref().filter(|(stamp, _)| !covered(stamp)) {
            let read = match stamp {
                Stamp::Header(name) => format!("{{timestamp}} or {{header:{name}}}"),
                _ => "{timestamp}".to_owned(),
            };
            return Err(refuse(
                "timestamp",
                format!(
                    "the signed content does not include the timestamp, so it guards nothing                      (a captured body re-sent with a fresh time would verify): add {read} to                      `signed`, or leave `timestamp` out"
                ),
            ));
        }
        let challenge = raw
            .handshake
            .as_ref()
            .map(Challenge::from_raw)
            .transpose()?;
        if challenge.as_ref().is_some_and(Challenge::signs) && !matches!(signer, Signer::Hmac(_))
            || challenge.is_some() && jwt.is_some()
        {
            return Err(refuse(
                "handshake.answer",
                "crc-sha256 answers with an HMAC under the route's secret: a public-key scheme has no secret to answer with",
            ));
        }
        Ok(Described {
            challenge,
            signer,
            header: header_name("signature.header", &signature.header)?,
            encoding,
            prefix: signature.prefix.clone().unwrap_or_default(),
            layout,
            signed,
            timestamp,
            tolerance,
            jwt,
        })
    }

    /// A `[schemes.jwt]`: the whole header is the token (after `prefix`),
    /// and only a claim can carry its time.
    fn jwt(raw: &RawScheme, jwt: &RawJwt, signer: Signer, layout: &Layout) -> Result<Jwt, Refusal> {
        let signature = raw.signature.as_ref();
        if raw.signed.is_some() {
            let why = "a JWT signs its claims; the body is bound by `jwt.body_digest`";
            return Err(refuse("signed", why));
        }
        if *layout != Layout::Whole || signature.is_some_and(|s| s.encoding.is_some()) {
            let why = "the header is the token, after any `prefix` (\"Bearer \")";
            return Err(refuse("signature", why));
        }
        if (raw.timestamp.as_ref()).is_some_and(|stamp| stamp.claim.is_none()) {
            return Err(refuse(
                "timestamp",
                "a JWT's time is a claim: { claim = \"iat\" }",
            ));
        }
        Jwt::from_raw(jwt, signer)
    }

    /// Where and in what unit `raw` says the timestamp is.
    fn stamp(raw: &RawTimestamp, layout: &Layout) -> Result<(Stamp, Unit), Refusal> {
        let unit = match raw.unit.as_deref() {
            None | Some("s") => Unit::Seconds,
            Some("ms") => Unit::Millis,
            Some(other) => {
                let why = format!("{other:?} is not \"s\" or \"ms\"");
                return Err(refuse("timestamp.unit", why));
            }
        };
        if let Some(claim) = &raw.claim {
            if raw.header.is_some() || raw.pair.is_some() || raw.first.is_some() || claim.is_empty()
            {
                return Err(refuse("timestamp.claim", "the name of a JWT claim, alone"));
            }
            return Ok((Stamp::Claim(claim.clone()), unit));
        }
        let stamp = match (&raw.header, &raw.pair, raw.first.unwrap_or(false)) {
            (Some(header), None, false) => Stamp::Header(header_name("timestamp.header", header)?),
            (None, Some(pair), false) if matches!(layout, Layout::Pairs { .. }) => {
                Stamp::Pair(pair.clone())
            }
            (None, None, true) if matches!(layout, Layout::List { .. }) => Stamp::First,
            (None, Some(_), false) => {
                return Err(refuse(
                    "timestamp.pair",
                    "needs a signature header of pairs",
                ))
            }
            (None, None, true) => {
                return Err(refuse(
                    "timestamp.first",
                    "needs a signature header that is a list",
                ))
            }
            _ => {
                let why = "one of: header = \"NAME\", pair = \"t\", first = true";
                return Err(refuse("timestamp", why));
            }
        };
        Ok((stamp, unit))
    }

    /// What is verified, in a line of the catalogue: `Mux-Signature:
    /// t=<timestamp>,v1=<hex>`, HMAC-SHA256 of `{timestamp}.{body}`; ….
    pub fn describe(&self) -> String {
        let signer = self.signer.title();
        let encoding = match self.encoding {
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
            Encoding::Base64Url => "base64url",
            Encoding::Plain => "secret",
        };
        let one = format!("{}<{encoding}>", self.prefix);
        let stamp = |default: &str| match &self.timestamp {
            Some((Stamp::Pair(name), _)) => format!("{name}=<timestamp>"),
            _ => default.to_owned(),
        };
        let header = match &self.layout {
            Layout::Whole => one,
            Layout::Pairs { name, separator } => {
                let sep = separator.chars().next().unwrap_or(',');
                match &self.timestamp {
                    Some((Stamp::Pair(_), _)) => format!("{}{sep}{name}={one}", stamp("")),
                    _ => format!("{name}={one}"),
                }
            }
            Layout::List { separator } => {
                let sep = separator.chars().next().unwrap_or(',');
                match &self.timestamp {
                    Some((Stamp::First, _)) => format!("<timestamp>{sep}{one}[{sep}…]"),
                    _ => format!("{one}[{sep}…]"),
                }
            }
        };
        let signed: String = (self.signed.iter())
            .map(|piece| match piece {
                Piece::Body => "{body}".to_owned(),
                Piece::Url => "{url}".to_owned(),
                Piece::Timestamp => "{timestamp}".to_owned(),
                Piece::Header(name) => format!("{{{name}}}"),
                Piece::Literal(text) => text.clone(),
            })
            .collect();
        let stamp = match &self.timestamp {
            Some((Stamp::Header(name), _)) => format!("; `{name}` within `tolerance`"),
            Some((Stamp::Claim(name), _)) => format!("; `{name}` within `tolerance`"),
            Some(_) => "; the timestamp within `tolerance`".to_owned(),
            None => String::new(),
        };
        let handshake = (self.challenge.as_ref())
            .map(|challenge| format!("; handshake: {}", challenge.describe()))
            .unwrap_or_default();
        if let Some(jwt) = &self.jwt {
            let header = format!("{}<JWT>", self.prefix);
            let what = jwt.describe();
            return format!(
                "`{}: {header}`, {what}, signed with {signer}{stamp}",
                self.header
            );
        }
        if self.signer == Signer::Token {
            return format!("`{}: {header}`, {signer} compared whole", self.header);
        }
        format!(
            "`{}: {header}`, {signer} of `{signed}`{stamp}{handshake}",
            self.header
        )
    }

    /// The headers the signature covers.
    fn signed_headers(&self) -> impl Iterator<Item = &HeaderName> {
        self.signed.iter().filter_map(|piece| match piece {
            Piece::Header(name) => Some(name),
            _ => None,
        })
    }
}

/// The [`Profile`] of `raw`: described, or built on `base` (a scheme of
/// code, looked up by its name). Leaked, as every profile lives for the
/// process: a config's schemes are kept once per distinct description (see
/// [`intern`]).
pub fn profile(
    raw: &RawScheme,
    base: impl Fn(&str) -> Option<&'static Profile>,
) -> Result<Profile, Refusal> {
    let leak = |text: &str| -> &'static str { Box::leak(text.to_owned().into_boxed_str()) };
    let default_key: &'static [&'static str] = match &raw.key {
        Some(sources) => Box::leak(sources.iter().map(|s| leak(s)).collect()),
        None => &[],
    };
    let retention = (raw.retention.as_deref())
        .map(|text| duration("retention", text))
        .transpose()?;
    let retry_horizon = (raw.retry_horizon.as_deref())
        .map(|text| duration("retry_horizon", text))
        .transpose()?;
    let on_missing_key = match raw.on_missing_key.as_deref() {
        None | Some("reject") => None,
        Some("forward") => Some(OnMissingKey::Forward),
        Some(other) => {
            let why = format!("{other:?} is not \"reject\" or \"forward\"");
            return Err(refuse("on_missing_key", why));
        }
    };
    if let Some(name) = &raw.builds_on {
        let base = base(name)
            .filter(|base| base.described.is_none())
            .ok_or_else(|| refuse("builds_on", format!("{name:?} is not a scheme of code")))?;
        for (field, given) in [
            ("algorithm", raw.algorithm.is_some()),
            ("signature", raw.signature.is_some()),
            ("signed", raw.signed.is_some()),
            ("timestamp", raw.timestamp.is_some()),
            ("handshake", raw.handshake.is_some()),
        ] {
            if given {
                return Err(refuse(field, format!("comes from builds_on = {name:?}")));
            }
        }
        return Ok(Profile {
            name: leak(&raw.name),
            default_key: if raw.key.is_some() {
                default_key
            } else {
                base.default_key
            },
            retry_horizon: retry_horizon.or(base.retry_horizon),
            default_retention: retention.unwrap_or(base.default_retention),
            replay_guard: raw.replay_guard.unwrap_or(base.replay_guard),
            retries_change_body: raw.retries_change_body.unwrap_or(base.retries_change_body),
            retries_itself: raw.retries_itself.unwrap_or(base.retries_itself),
            on_missing_key: on_missing_key.unwrap_or(base.on_missing_key),
            ..base.clone()
        });
    }
    let described: &'static Described = Box::leak(Box::new(Described::from_raw(raw)?));
    let signed_headers: Vec<&'static str> = (described.signed_headers())
        .map(|name| leak(name.as_str()))
        .collect();
    // Without a signed time or id, a captured body can be sent again under
    // a fresh key from an unsigned header.
    let unsigned_key = default_key.iter().any(|source| {
        (source.to_ascii_lowercase().strip_prefix("header:"))
            .is_some_and(|name| !signed_headers.contains(&name.trim()))
    });
    Ok(Profile {
        name: leak(&raw.name),
        default_key,
        retry_horizon,
        default_retention: retention.unwrap_or(Duration::from_secs(7 * DAY)),
        replay_guard: (raw.replay_guard).unwrap_or(described.timestamp.is_none() && unsigned_key),
        timestamped: described.timestamp.is_some(),
        on_missing_key: on_missing_key.unwrap_or(OnMissingKey::Reject),
        signed_headers: Box::leak(signed_headers.into_boxed_slice()),
        signs_url: described.signed.contains(&Piece::Url),
        retries_change_body: raw.retries_change_body.unwrap_or(false),
        retries_itself: raw.retries_itself.unwrap_or(true),
        fetches_key: false,
        described: Some(described),
        build: |_| Err("a described scheme is built from its description".into()),
    })
}

/// The profile of a config's `raw` scheme, made once per distinct
/// description for the life of the process: a reload of the same config
/// finds the one it made before instead of leaking another.
pub fn intern(
    raw: &RawScheme,
    base: impl Fn(&str) -> Option<&'static Profile>,
) -> Result<&'static Profile, Refusal> {
    static MADE: LazyLock<Mutex<HashMap<String, &'static Profile>>> = LazyLock::new(Mutex::default);
    let mut written = raw.clone();
    written.vectors.clear();
    let identity = format!("{written:?}");
    if let Some(made) = MADE.lock().expect("poisoned").get(&identity) {
        return Ok(made);
    }
    let made: &'static Profile = Box::leak(Box::new(profile(raw, base)?));
    MADE.lock().expect("poisoned").insert(identity, made);
    Ok(made)
}

#[cfg(test)]
mod tests;
