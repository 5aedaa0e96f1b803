//! Senders described as data (README, "Senders described as data"): a
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
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};
use serde::Deserialize;

use super::challenge::{Challenge, RawHandshake};
use super::{
    check_timestamp, check_timestamp_ms, hmac_verdict, single_header, Algorithm, Encoding,
    Handshake, Profile, RequestLine, Verifier, Verify, VerifyError, VerifySpec, DAY,
};
use crate::clock::parse_duration;
use crate::key::OnMissingKey;
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
    /// The challenge the sender sends to prove the endpoint.
    pub handshake: Option<RawHandshake>,
    /// The default key's sources (first present wins).
    pub key: Option<Vec<String>>,
    pub retention: Option<String>,
    /// How long the sender may deliver one event again.
    pub retry_horizon: Option<String>,
    pub replay_guard: Option<bool>,
    pub retries_change_body: Option<bool>,
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
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimestamp {
    pub header: String,
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
    Literal(String),
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
    pub algorithm: Algorithm,
    pub header: HeaderName,
    pub encoding: Encoding,
    pub prefix: String,
    pub signed: Vec<Piece>,
    pub timestamp: Option<(HeaderName, Unit)>,
    /// The description's own `tolerance`, when it gives one.
    pub tolerance: Option<Duration>,
    /// The sender's handshake, answered by the gateway.
    pub challenge: Option<Challenge>,
}

/// A description's error: the field (under the entry) and what is wrong.
pub type Refusal = (String, String);

fn refuse(field: &str, message: impl Into<String>) -> Refusal {
    (field.to_owned(), message.into())
}

fn header_name(field: &str, text: &str) -> Result<HeaderName, Refusal> {
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| refuse(field, format!("{text:?} is not a header name")))
}

fn duration(field: &str, text: &str) -> Result<Duration, Refusal> {
    parse_duration(text).map_err(|message| refuse(field, message))
}

/// `{body}`, `{header:NAME}`, `{url}` and literal text between them.
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
            _ => match inner.strip_prefix("header:") {
                Some(name) => Piece::Header(
                    HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("{text:?}: {name:?} is not a header name"))?,
                ),
                None => {
                    return Err(format!(
                        "{text:?}: {{{inner}}} is not {{body}}, {{header:NAME}} or {{url}}"
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
        let algorithm = match raw.algorithm.as_deref() {
            Some("hmac-sha256") => Algorithm::Sha256,
            Some("hmac-sha512") => Algorithm::Sha512,
            Some("hmac-sha1") => Algorithm::Sha1,
            Some(other) => {
                return Err(refuse(
                    "algorithm",
                    format!(
                        "{other:?} is not one of \"hmac-sha256\", \"hmac-sha512\", \"hmac-sha1\""
                    ),
                ))
            }
            None => return Err(refuse("algorithm", "missing (e.g. \"hmac-sha256\")")),
        };
        let signature = (raw.signature.as_ref())
            .ok_or_else(|| refuse("signature", "missing: { header = \"X-Signature\" }"))?;
        let encoding = match signature.encoding.as_deref() {
            None | Some("hex") => Encoding::Hex,
            Some("base64") => Encoding::Base64,
            Some(other) => {
                return Err(refuse(
                    "signature.encoding",
                    format!("{other:?} is not \"hex\" or \"base64\""),
                ))
            }
        };
        let signed = raw.signed.as_deref().unwrap_or("{body}");
        let signed = parse_template(signed).map_err(|message| refuse("signed", message))?;
        let timestamp = match &raw.timestamp {
            None => None,
            Some(stamp) => {
                let unit = match stamp.unit.as_deref() {
                    None | Some("s") => Unit::Seconds,
                    Some("ms") => Unit::Millis,
                    Some(other) => {
                        return Err(refuse(
                            "timestamp.unit",
                            format!("{other:?} is not \"s\" or \"ms\""),
                        ))
                    }
                };
                Some((header_name("timestamp.header", &stamp.header)?, unit))
            }
        };
        let tolerance = (raw.timestamp.as_ref())
            .and_then(|stamp| stamp.tolerance.as_deref())
            .map(|text| duration("timestamp.tolerance", text))
            .transpose()?;
        let challenge = raw
            .handshake
            .as_ref()
            .map(Challenge::from_raw)
            .transpose()?;
        Ok(Described {
            challenge,
            algorithm,
            header: header_name("signature.header", &signature.header)?,
            encoding,
            prefix: signature.prefix.clone().unwrap_or_default(),
            signed,
            timestamp,
            tolerance,
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

/// A route's verifier of a described scheme.
#[derive(Debug)]
pub struct DescribedVerifier {
    described: &'static Described,
    secrets: Vec<Secret>,
    tolerance: Duration,
    public_url: Option<String>,
    handshake_token: Option<Secret>,
}

impl DescribedVerifier {
    pub fn build(
        described: &'static Described,
        spec: VerifySpec,
        tolerance_given: bool,
    ) -> Verifier {
        let tolerance = match (tolerance_given, described.tolerance) {
            (false, Some(own)) => own,
            _ => spec.tolerance,
        };
        Verifier::new(DescribedVerifier {
            described,
            secrets: spec.secrets,
            tolerance,
            public_url: spec.public_url,
            handshake_token: spec.handshake_token,
        })
    }
}

impl Verify for DescribedVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        self.verify_line(RequestLine::POST, headers, body, now)
    }

    fn verify_line(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let d = self.described;
        let value = single_header(headers, &d.header)?;
        let encoded =
            (value.strip_prefix(d.prefix.as_str())).ok_or(VerifyError::SignatureInvalid)?;
        let signature = d
            .encoding
            .decode(encoded)
            .ok_or(VerifyError::SignatureInvalid)?;
        let url = (d.signed.contains(&Piece::Url))
            .then(|| line.url(self.public_url.as_deref().unwrap_or_default()));
        let mut parts: Vec<&[u8]> = Vec::with_capacity(d.signed.len());
        for piece in &d.signed {
            parts.push(match piece {
                Piece::Body => body,
                Piece::Header(name) => single_header(headers, name)?.as_bytes(),
                Piece::Url => url.as_deref().unwrap_or_default().as_bytes(),
                Piece::Literal(text) => text.as_bytes(),
            });
        }
        hmac_verdict(d.algorithm, &self.secrets, &parts, &[signature])?;
        match &d.timestamp {
            None => Ok(()),
            Some((name, Unit::Seconds)) => {
                check_timestamp(single_header(headers, name)?, now, self.tolerance)
            }
            Some((name, Unit::Millis)) => {
                let millis = (single_header(headers, name)?.parse())
                    .map_err(|_| VerifyError::SignatureInvalid)?;
                check_timestamp_ms(millis, now, self.tolerance)
            }
        }
    }

    fn challenge(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
    ) -> Option<Result<Handshake, VerifyError>> {
        let challenge = (self.described.challenge.as_ref()).filter(|c| c.before_verification)?;
        let token = self.handshake_token.as_ref();
        challenge.answer(line, headers, &[], &self.secrets, token)
    }

    fn handshake(&self, headers: &HeaderMap, body: &[u8]) -> Option<Handshake> {
        let challenge = (self.described.challenge.as_ref()).filter(|c| !c.before_verification)?;
        let answer = challenge.answer(RequestLine::POST, headers, body, &self.secrets, None);
        answer?.ok()
    }

    fn covers(&self, _: &HeaderMap, name: &HeaderName) -> bool {
        self.described.signed_headers().any(|signed| signed == name)
    }

    fn signature_header(&self) -> Option<&HeaderName> {
        Some(&self.described.header)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use proptest::prelude::*;

    use super::*;
    use crate::verify::PROFILES;

    #[test]
    fn templates_take_the_body_headers_the_url_and_text() {
        let pieces = parse_template("v0:{header:X-Ts}:{body}{url}").unwrap();
        assert_eq!(
            pieces,
            [
                Piece::Literal("v0:".into()),
                Piece::Header(HeaderName::from_static("x-ts")),
                Piece::Literal(":".into()),
                Piece::Body,
                Piece::Url,
            ]
        );
        for (bad, says) in [
            ("{bdy}", "is not {body}"),
            ("{body", "never closed"),
            ("{header:bad name}.{body}", "not a header name"),
            ("{header:X-Ts}", "does not sign {body}"),
        ] {
            let error = parse_template(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    fn raw(text: &str) -> RawScheme {
        toml::from_str(&format!("name = \"acme\"\n{text}")).unwrap()
    }

    #[test]
    fn an_error_names_its_field() {
        let signature = "signature = { header = \"X-Sig\" }";
        for (text, field) in [
            ("algorithm = \"md5\"", "algorithm"),
            (signature, "algorithm"),
            ("algorithm = \"hmac-sha256\"", "signature"),
            (
                &format!("algorithm = \"hmac-sha256\"\n{signature}\nsigned = \"{{nope}}\""),
                "signed",
            ),
            (
                "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\", encoding = \"b32\" }",
                "signature.encoding",
            ),
            (
                &format!("algorithm = \"hmac-sha256\"\n{signature}\ntimestamp = {{ header = \"T\", unit = \"h\" }}"),
                "timestamp.unit",
            ),
            (
                &format!("algorithm = \"hmac-sha256\"\n{signature}\nretention = \"3 days\""),
                "retention",
            ),
            ("builds_on = \"acme-pay\"", "builds_on"),
            ("builds_on = \"standard-webhooks\"\nalgorithm = \"hmac-sha1\"", "algorithm"),
        ] {
            let refused = profile(&raw(text), Profile::named).err();
            assert_eq!(refused.map(|(f, _)| f), Some(field.to_owned()), "{text}");
        }
    }

    /// Every described sender's headers: its signature's, its template's
    /// and its timestamp's.
    fn described() -> Vec<(Verifier, Vec<HeaderName>)> {
        PROFILES
            .iter()
            .filter_map(|profile| {
                let described = profile.described?;
                let mut names = vec![described.header.clone()];
                names.extend(described.signed_headers().cloned());
                names.extend(described.timestamp.iter().map(|(name, _)| name.clone()));
                let spec = VerifySpec {
                    secrets: vec![Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")],
                    tolerance: super::super::DEFAULT_TOLERANCE,
                    hmac: None,
                    public_url: Some("https://hooks.example.com/in".into()),
                    min_secret_bytes: 1,
                    handshake_token: None,
                };
                Some((profile.verifier(spec, false).unwrap(), names))
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_headers_never_pass_a_described_sender(
            values in proptest::collection::vec("[ -~]{0,90}", 4),
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_733_230_000);
            for (verifier, names) in described() {
                let mut headers = HeaderMap::new();
                for (name, value) in names.iter().zip(&values) {
                    headers.append(name, HeaderValue::from_str(value).unwrap());
                }
                prop_assert!(verifier.verify(RequestLine::POST, &headers, &body, now).is_err());
            }
        }
    }
}
