//! Senders described as data (docs/guide/senders.md, "Senders described as data"): a
//! scheme given by its headers, signer, encoding, signed-content template
//! and timestamp rule instead of code. The signer is an HMAC, a key pair
//! (Ed25519, ECDSA P-256, RSA; `keys.rs`), a signed JWT whose claim binds
//! the body (`jwt.rs`) or a token; a key pair's public key may be fetched
//! from a host the description pins (`fetch.rs`). The senders hookgate
//! ships this way are `senders.toml`, compiled into the binary; a config's
//! `[[schemes]]` table describes one in the same format, and both become
//! the same [`Profile`] (`profile.rs`).
//!
//! A description is checked whole when it is read — an unknown algorithm, a
//! template placeholder that is not one (`template.rs`), a header name that
//! is not one, a key URL on no pinned host — and each error names its field, so a
//! config can say where it is. A description that builds on a scheme of
//! code (`builds_on = "standard-webhooks"`) takes that scheme's
//! verification and gives it its own name, key and retention.

use std::collections::HashMap;
use std::time::Duration;

use http::HeaderName;
use serde::Deserialize;

mod describe;
mod fetch;
mod jwt;
mod keys;
mod profile;
mod template;
mod verifier;

pub use self::fetch::{KeyUrl, RawKeyUrl};
pub use self::jwt::{Jwt, RawJwt};
pub use self::profile::{intern, profile};
pub use self::template::{parse_template, Piece};
pub use self::verifier::DescribedVerifier;
use super::challenge::{Challenge, RawHandshake};
use super::{Algorithm, Encoding};
use crate::clock::parse_duration;
use crate::secret::Secret;

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
    /// Where the sender publishes its public key, for a route that lists
    /// none.
    pub key_url: Option<RawKeyUrl>,
    /// How the sender shows an HMAC secret that is not its key's bytes:
    /// `base64` or `hex` (Airtable's `macSecretBase64`).
    pub secret_encoding: Option<String>,
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
    /// The route's `params` it was signed for (`{param:NAME}`).
    #[serde(default)]
    pub params: std::collections::BTreeMap<String, String>,
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
    /// An RFC 3339 time (`2024-12-03T12:46:40Z`).
    Rfc3339,
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
    /// Where the public key is fetched from when a route lists none.
    pub key_url: Option<KeyUrl>,
    /// The route's secrets are the key encoded so (`secret_encoding`).
    pub secret_encoding: Option<Encoding>,
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

impl Described {
    /// The verification part of `raw`, checked.
    pub fn from_raw(raw: &RawScheme) -> Result<Described, Refusal> {
        let signer = Self::signer(raw)?;
        let signature = (raw.signature.as_ref())
            .ok_or_else(|| refuse("signature", "missing: { header = \"X-Signature\" }"))?;
        let encoding = Self::encoding(signature, signer)?;
        let layout = Self::layout(signature)?;
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
        Self::covered(&signed, timestamp.as_ref())?;
        let tolerance = (raw.timestamp.as_ref())
            .and_then(|stamp| stamp.tolerance.as_deref())
            .map(|text| duration("timestamp.tolerance", text))
            .transpose()?;
        let challenge = raw
            .handshake
            .as_ref()
            .map(Challenge::from_raw)
            .transpose()?;
        let key_url = match &raw.key_url {
            Some(_) if !signer.is_asymmetric() => {
                let why = "only a sender that signs with a private key publishes a key to fetch";
                return Err(refuse("key_url", why));
            }
            Some(key_url) => Some(KeyUrl::from_raw(key_url, jwt.is_some())?),
            None => None,
        };
        let secret_encoding = match raw.secret_encoding.as_deref() {
            None => None,
            Some(_) if !matches!(signer, Signer::Hmac(_)) => {
                return Err(refuse(
                    "secret_encoding",
                    "only an HMAC's secret is decoded",
                ));
            }
            Some("base64") => Some(Encoding::Base64),
            Some("hex") => Some(Encoding::Hex),
            Some(other) => {
                let why = format!("{other:?} is not \"base64\" or \"hex\"");
                return Err(refuse("secret_encoding", why));
            }
        };
        if challenge.as_ref().is_some_and(Challenge::signs) && !matches!(signer, Signer::Hmac(_)) {
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
            key_url,
            secret_encoding,
        })
    }

    /// The key an HMAC signs with: `secret` as the route lists it, or
    /// decoded (`secret_encoding`).
    pub fn hmac_key(&self, secret: &Secret) -> Result<Secret, String> {
        let Some(encoding) = self.secret_encoding else {
            return Ok(secret.clone());
        };
        let text = std::str::from_utf8(secret.expose())
            .unwrap_or_default()
            .trim();
        match encoding.decode(text) {
            Some(key) if !key.is_empty() => Ok(Secret::new(key)),
            _ => Err(format!(
                "the sender shows this secret as {}: it does not decode",
                if encoding == Encoding::Hex {
                    "hex"
                } else {
                    "base64"
                }
            )),
        }
    }

    /// `algorithm`.
    fn signer(raw: &RawScheme) -> Result<Signer, Refusal> {
        Ok(match raw.algorithm.as_deref() {
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
        })
    }

    /// `signature.encoding`.
    fn encoding(signature: &RawSignature, signer: Signer) -> Result<Encoding, Refusal> {
        Ok(match signature.encoding.as_deref() {
            None | Some("hex") => Encoding::Hex,
            Some("base64") => Encoding::Base64,
            Some("base64url") => Encoding::Base64Url,
            Some("plain") if signer == Signer::Token => Encoding::Plain,
            Some(other) => {
                let why = format!(
                    "{other:?} is not \"hex\", \"base64\", \"base64url\" or, for a token, \"plain\""
                );
                return Err(refuse("signature.encoding", why));
            }
        })
    }

    /// How the signature header is laid out: `pair`, `list`, `separator`.
    fn layout(signature: &RawSignature) -> Result<Layout, Refusal> {
        let separator = signature.separator.clone().unwrap_or_else(|| ",".into());
        if separator.is_empty() || separator.contains('=') {
            let why = "the characters between pairs or items: not empty, no `=`";
            return Err(refuse("signature.separator", why));
        }
        Ok(match (&signature.pair, signature.list) {
            (Some(_), Some(true)) => {
                let why = "a header is pairs or a list, not both";
                return Err(refuse("signature.list", why));
            }
            (Some(name), _) if name.is_empty() || name.contains(separator.as_str()) => {
                let why = "the name of the signature's pair (\"v1\")";
                return Err(refuse("signature.pair", why));
            }
            (Some(name), _) => Layout::Pairs {
                name: name.clone(),
                separator,
            },
            (None, Some(true)) => Layout::List { separator },
            (None, _) => Layout::Whole,
        })
    }

    /// A timestamp the signature does not cover guards nothing: a captured
    /// body, re-sent with a fresh time, would verify.
    fn covered(signed: &[Piece], timestamp: Option<&(Stamp, Unit)>) -> Result<(), Refusal> {
        if signed.contains(&Piece::Timestamp) && timestamp.is_none() {
            let why = "{timestamp} needs a `timestamp` to read it from";
            return Err(refuse("signed", why));
        }
        let covered = |stamp: &Stamp| match stamp {
            Stamp::Header(name) => (signed.iter())
                .any(|piece| *piece == Piece::Timestamp || *piece == Piece::Header(name.clone())),
            Stamp::Claim(_) => true,
            _ => signed.contains(&Piece::Timestamp),
        };
        match timestamp {
            Some((stamp, _)) if !covered(stamp) => {
                let read = match stamp {
                    Stamp::Header(name) => format!("{{timestamp}} or {{header:{name}}}"),
                    _ => "{timestamp}".to_owned(),
                };
                let why = format!(
                    "the signed content does not include the timestamp, so it guards nothing \
                     (a captured body re-sent with a fresh time would verify): add {read} to \
                     `signed`, or leave `timestamp` out"
                );
                Err(refuse("timestamp", why))
            }
            _ => Ok(()),
        }
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
            Some("rfc3339") => Unit::Rfc3339,
            Some(other) => {
                let why = format!("{other:?} is not \"s\", \"ms\" or \"rfc3339\"");
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

    /// The names of the route's `params` the signed content takes.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.signed.iter().filter_map(|piece| match piece {
            Piece::Param(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The headers the signature covers.
    fn signed_headers(&self) -> impl Iterator<Item = &HeaderName> {
        self.signed.iter().filter_map(|piece| match piece {
            Piece::Header(name) => Some(name),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests;
