//! Signature verification: the first thing that looks at a delivery, before
//! its key is read or the store is touched (docs/guide/senders.md, "Supported senders").
//!
//! Every scheme verifies the raw body bytes exactly as received, compares in
//! constant time (`Mac::verify_slice`), and accepts a list of secrets so a
//! rotation never drops a delivery. Malformed input — missing, duplicated or
//! oversized headers, bad hex or base64 — is a clean [`VerifyError`], never a
//! panic. Senders described as data are `senders.toml` (read by
//! `described.rs`, listed by `catalogue.rs`); each scheme of code is one
//! file. This module holds the scheme trait, the profiles and the verifier,
//! `shared.rs` the helpers they all use.

mod adyen;
mod asymmetric;
mod aws_sns;
mod catalogue;
mod challenge;
mod described;
mod discord;
mod fetched;
mod generic;
mod gitlab;
mod hubspot;
mod linear;
mod mailgun;
mod sendgrid;
mod shared;
mod standard_webhooks;
mod twilio;
mod woocommerce;
mod zoom;

use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderName, Method, StatusCode};

use crate::key::{KeySource, OnMissingKey};
use crate::secret::Secret;

pub use self::catalogue::catalogue;
pub use self::catalogue::check_vector;
pub use self::challenge::{Challenge, RawHandshake};
use self::described::DescribedVerifier;
pub use self::described::{intern, parse_template, Described, RawScheme, RawVector};
pub use self::fetched::{sns_hosts, FetchSpec, HostPattern};
pub use self::generic::{Encoding, HmacOptions, HmacVerifier};
#[cfg(test)]
pub(crate) use self::shared::at;
pub use self::shared::Algorithm;
pub(crate) use self::shared::{
    check_timestamp, check_timestamp_ms, encoded_header, hmac_verdict, signature_matches,
    single_header, token_verdict, Timestamped,
};
pub(crate) use self::standard_webhooks::{decode_secret, sign as sign_standard_webhooks};

/// The senders of code: those whose scheme is more than data (key pairs,
/// signatures in the body, public keys, handshakes with logic), and the
/// ones not moved to `senders.toml` yet. Adding one is a file with its
/// [`Profile`] and one line here.
static CODE: &[&Profile] = &[
    &gitlab::PROFILE,
    &linear::PROFILE,
    &twilio::PROFILE,
    &mailgun::PROFILE,
    &sendgrid::PROFILE,
    &discord::PROFILE,
    &zoom::PROFILE,
    &hubspot::PROFILE,
    &woocommerce::PROFILE,
    &adyen::PROFILE,
    &standard_webhooks::PROFILE,
    &aws_sns::PROFILE,
    &generic::PROFILE,
    &NONE,
];

/// The senders described as data, shipped in the binary: the same format
/// as a config's `[[schemes]]` (docs/guide/senders.md, "Senders described as data").
pub const SENDERS: &str = include_str!("senders.toml");

/// The catalogue `senders.toml` is read into.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalogue {
    #[serde(default)]
    pub schemes: Vec<RawScheme>,
}

/// Every sender hookgate knows, by the `scheme` name of `[routes.verify]`:
/// those of code, then those described in [`SENDERS`].
pub static PROFILES: LazyLock<Vec<&'static Profile>> = LazyLock::new(|| {
    let catalogue: Catalogue = toml::from_str(SENDERS).expect("senders.toml parses");
    let code = |name: &str| CODE.iter().copied().find(|profile| profile.name == name);
    let described = catalogue.schemes.iter().map(|raw| {
        let made = described::profile(raw, code)
            .unwrap_or_else(|(field, error)| panic!("senders.toml, {}.{field}: {error}", raw.name));
        &*Box::leak(Box::new(made))
    });
    CODE.iter().copied().chain(described).collect()
});

/// Why a delivery was refused. The first two are 401s; they differ in the
/// error code so an operator can tell forgery from clock trouble.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("signature missing, malformed or not matching any configured secret")]
    SignatureInvalid,
    #[error("signature timestamp is outside the accepted tolerance")]
    TimestampOutOfTolerance,
    /// A scheme whose key is fetched could not fetch it (or could not
    /// confirm a subscription): 503, so the sender retries.
    #[error("the sender's signing certificate could not be fetched; try again later")]
    SenderUnreachable,
    /// Verified, but from a source the route does not list (an SNS topic
    /// not in `topics`): 403.
    #[error("this route does not accept deliveries from this source")]
    SourceNotAllowed,
}

/// What hookgate knows about one sender's convention: everything a route
/// with `scheme = "<name>"` gets by default. Each scheme file owns one, or
/// `senders.toml` (or a config's `[[schemes]]`) describes it.
#[derive(Clone)]
pub struct Profile {
    /// The `scheme` name: the sender's name in lowercase.
    pub name: &'static str,
    /// Key sources of the sender's event id, first present wins; empty when
    /// the sender has no convention and the route must set `key`.
    pub default_key: &'static [&'static str],
    /// How long the sender may redeliver an event; `retention` must outlast
    /// it (`check` warns otherwise). Zero: the sender does not retry; none:
    /// unknown (or up to the operator).
    pub retry_horizon: Option<Duration>,
    /// Default `retention`: comfortably past the retry horizon.
    pub default_retention: Duration,
    /// The signature covers only the body (no timestamp, no id), so a signed
    /// body can be re-sent under a fresh key: `replay_guard = "body"` by
    /// default.
    pub replay_guard: bool,
    /// Whether deliveries carry a signed timestamp (`tolerance` applies).
    pub timestamped: bool,
    /// Default `on_missing_key`: `Forward` for senders whose signed requests
    /// without an event id are never retried (handshakes, commands).
    pub on_missing_key: OnMissingKey,
    /// Headers the signature covers besides the body (lowercase): a key
    /// read from one of them is as trustworthy as the body.
    pub signed_headers: &'static [&'static str],
    /// The signature covers the URL the sender posted to, so the route
    /// must say what that is (`public_url`).
    pub signs_url: bool,
    /// The sender's retries of one event may differ in the body (an
    /// attempt counter, a fresh signature block): a later body under the
    /// same key is a retry, so `on_mismatch = "replay"` by default.
    pub retries_change_body: bool,
    /// The sender retries a failed delivery on its own. GitHub does not
    /// (its `retry_horizon` is how long a person may redeliver by hand): a
    /// failed event of a sync route of such a sender is stuck work, paged
    /// after `page_after` (15 minutes by default).
    pub retries_itself: bool,
    /// The sender's key is fetched from a URL in the delivery (AWS SNS):
    /// the route lists `topics` instead of `secrets`, and may set
    /// `cert_hosts` and `cert_ca`.
    pub fetches_key: bool,
    /// A scheme described as data: verified by its description, not by
    /// `build`.
    pub described: Option<&'static Described>,
    /// The verifier of a route from its `[routes.verify]` (a scheme of
    /// code).
    pub build: fn(VerifySpec) -> Result<Verifier, String>,
}

impl Profile {
    pub fn named(name: &str) -> Option<&'static Profile> {
        PROFILES
            .iter()
            .copied()
            .find(|profile| profile.name == name)
    }

    /// The headers this scheme's sender would send for `body` at
    /// `timestamp` (Unix seconds), signed with `secret` ([`Described::sign`]).
    pub fn sign(
        &self,
        secret: &Secret,
        timestamp: u64,
        body: &[u8],
    ) -> Result<Vec<(HeaderName, String)>, String> {
        match self.described {
            Some(described) => described.sign(secret, timestamp, body),
            None => Err(format!("scheme {:?} is not described as data", self.name)),
        }
    }

    /// The handshake a scheme described as data answers, if any.
    pub fn challenge(&self) -> Option<&'static Challenge> {
        self.described?.challenge.as_ref()
    }

    /// A route's verifier from its `[routes.verify]`; `tolerance_given`:
    /// the route set `tolerance` (else a description's own applies).
    pub fn verifier(&self, spec: VerifySpec, tolerance_given: bool) -> Result<Verifier, String> {
        match self.described {
            Some(described) => DescribedVerifier::build(described, spec, tolerance_given),
            None => (self.build)(spec),
        }
    }

    /// Whether a key read from `source` is covered by this scheme's
    /// signature: the body always is (when anything is verified), a header
    /// only when the scheme signs it.
    pub fn signs(&self, source: &KeySource) -> bool {
        match source {
            KeySource::Header(name) => self.signed_headers.contains(&name.as_str()),
            KeySource::All(parts) => parts.iter().all(|part| self.signs(part)),
            _ => self.name != NONE.name,
        }
    }
}

impl fmt::Debug for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Profile {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// `scheme = "none"`, written out explicitly: nothing is verified.
static NONE: Profile = Profile {
    name: "none",
    default_key: &[],
    retry_horizon: None,
    default_retention: Duration::from_secs(7 * DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |_| Ok(Verifier::new(Unverified)),
};

#[derive(Debug)]
struct Unverified;

impl Verify for Unverified {
    fn verify(&self, _: &HeaderMap, _: &[u8], _: SystemTime) -> Result<(), VerifyError> {
        Ok(())
    }
}

/// Fewest bytes of key material a secret may have. A shorter one — or a
/// Standard Webhooks `whsec_` with next to nothing after it — makes an HMAC
/// anyone can brute-force; every sender's dashboard generates far longer.
pub const MIN_SECRET_BYTES: usize = 16;

/// Default `tolerance` of the timestamped schemes.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A route's `[routes.verify]`, validated: what a [`Profile`] builds its
/// verifier from.
#[derive(Debug, Clone)]
pub struct VerifySpec {
    /// As written (after `${VAR}`); any may match, so a rotation never drops
    /// a delivery. Schemes that encode their secrets decode them here.
    pub secrets: Vec<Secret>,
    /// Timestamped schemes: how far a signature's time may be from now.
    pub tolerance: Duration,
    /// `scheme = "hmac"` only: where and how the signature is written.
    pub hmac: Option<HmacOptions>,
    /// The route's `public_url`: for schemes that sign the URL, the one the
    /// sender posts to, as it signed it.
    pub public_url: Option<String>,
    /// Bytes of key material a secret needs at least (`min_secret_bytes`,
    /// [`MIN_SECRET_BYTES`] unless the route lowered it), after decoding.
    pub min_secret_bytes: usize,
    /// The token the sender's handshake must carry (`handshake_token`), for
    /// the schemes whose handshake has one.
    pub handshake_token: Option<Secret>,
    /// A scheme whose key is fetched: where from (`cert_hosts`, `cert_ca`);
    /// none: the scheme's own hosts.
    pub fetch: Option<FetchSpec>,
    /// AWS SNS: the topic ARNs the route accepts.
    pub topics: Vec<String>,
    /// What a described scheme's `{param:NAME}` stands for on this route
    /// (PayPal's webhook id): the route's `params`.
    pub params: std::collections::BTreeMap<String, String>,
}

/// The request line, for the schemes whose signature covers it: the method
/// and the query the sender appended to the route's `public_url`.
#[derive(Debug, Clone, Copy)]
pub struct RequestLine<'a> {
    pub method: &'a Method,
    pub query: Option<&'a str>,
}

impl RequestLine<'_> {
    /// A plain `POST` without a query: what most senders send.
    pub const POST: RequestLine<'static> = RequestLine {
        method: &Method::POST,
        query: None,
    };

    /// The URL the sender signed: `public_url`, plus this request's query.
    pub fn url(&self, public_url: &str) -> String {
        match self.query {
            Some(query) => format!("{public_url}?{query}"),
            None => public_url.to_owned(),
        }
    }
}

/// What the gateway answers itself to a verified handshake (Discord's PING,
/// Zoom's `endpoint.url_validation`): nothing is claimed or forwarded.
#[derive(Debug, Clone, PartialEq)]
pub struct Handshake {
    pub status: StatusCode,
    pub body: Reply,
}

/// The body of a handshake's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A bare status.
    Empty,
    Json(serde_json::Value),
    /// A challenge echoed back (`text/plain`, never sniffed).
    Text(String),
}

/// Checks one delivery's signature on the raw body. `now` is injected so
/// tolerance windows are testable at their edges.
pub trait Verify: fmt::Debug + Send + Sync {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError>;

    /// Verify with the request line: the schemes that sign the URL or the
    /// method override this; the others ignore the line.
    fn verify_line(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let _ = line;
        self.verify(headers, body, now)
    }

    /// For a verified delivery that is the sender's handshake, the answer
    /// the sender requires; the gateway sends it without claiming or
    /// forwarding anything.
    fn handshake(&self, headers: &HeaderMap, body: &[u8]) -> Option<Handshake> {
        let _ = (headers, body);
        None
    }

    /// For a scheme whose key is fetched (AWS SNS): the whole check —
    /// fetch the key, verify, and the handshake's answer if the delivery is
    /// one — as a future; `None` for a scheme that verifies in place.
    fn fetching<'a>(
        &'a self,
        line: RequestLine<'a>,
        headers: &'a HeaderMap,
        body: &'a [u8],
        now: SystemTime,
    ) -> Option<BoxFuture<'a, Result<Option<Handshake>, VerifyError>>> {
        let _ = (line, headers, body, now);
        None
    }

    /// For a request that is the sender's unsigned handshake (a GET
    /// challenge), answered before verification: the answer, or an error
    /// when its token is not the route's; `None` for any other request.
    fn challenge(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
    ) -> Option<Result<Handshake, VerifyError>> {
        let _ = (line, headers);
        None
    }

    /// For a scheme whose signature covers an id header: the one a verified
    /// delivery's signature covered (of those in [`Profile::signed_headers`]).
    fn signed_id(&self, headers: &HeaderMap) -> Option<&'static HeaderName> {
        let _ = headers;
        None
    }

    /// Whether a verified delivery's signature covered header `name`.
    fn covers(&self, headers: &HeaderMap, name: &HeaderName) -> bool {
        self.signed_id(headers) == Some(name)
    }

    /// The header that carries the signature, when the operator named it
    /// (`scheme = "hmac"`): shown `[redacted]` like every signature. The
    /// senders' own headers are recognised by name.
    fn signature_header(&self) -> Option<&HeaderName> {
        None
    }
}

/// A route's configured verifier.
#[derive(Debug)]
pub struct Verifier(Box<dyn Verify>);

impl Verifier {
    pub fn new(verify: impl Verify + 'static) -> Self {
        Self(Box::new(verify))
    }

    /// Verify `body` as received, with the request line it came on.
    pub fn verify(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        self.0.verify_line(line, headers, body, now)
    }

    /// Verify `body` and, when the delivery is the sender's handshake, the
    /// answer it requires: what the request path calls. A scheme whose key
    /// is fetched fetches it here.
    pub async fn check(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Option<Handshake>, VerifyError> {
        if let Some(fetching) = self.0.fetching(line, headers, body, now) {
            return fetching.await;
        }
        self.0.verify_line(line, headers, body, now)?;
        Ok(self.0.handshake(headers, body))
    }

    /// The answer to a verified handshake, if this delivery is one.
    pub fn handshake(&self, headers: &HeaderMap, body: &[u8]) -> Option<Handshake> {
        self.0.handshake(headers, body)
    }

    /// The answer to an unsigned handshake, before verification: see
    /// [`Verify::challenge`].
    pub fn challenge(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
    ) -> Option<Result<Handshake, VerifyError>> {
        self.0.challenge(line, headers)
    }

    /// The header the operator named for the signature, if any.
    pub fn signature_header(&self) -> Option<&HeaderName> {
        self.0.signature_header()
    }

    /// Whether the key may be read from header `name` of a verified
    /// delivery: an id header the scheme signs only when it is the one this
    /// delivery's signature covered (docs/guide/what-a-sender-sees.md, "What a sender sees": the key is bound to what was
    /// verified); any other header as configured.
    pub fn key_header_allowed(
        &self,
        scheme: &Profile,
        headers: &HeaderMap,
        name: &HeaderName,
    ) -> bool {
        !scheme.signed_headers.contains(&name.as_str()) || self.0.covers(headers, name)
    }
}

#[cfg(test)]
pub(crate) mod tests;
