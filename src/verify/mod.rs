//! Signature verification: the first thing that looks at a delivery, before
//! its key is read or the store is touched (SPEC §3).
//!
//! Every scheme verifies the raw body bytes exactly as received, compares in
//! constant time (`Mac::verify_slice`), and accepts a list of secrets so a
//! rotation never drops a delivery. Malformed input — missing, duplicated or
//! oversized headers, bad hex or base64 — is a clean [`VerifyError`], never a
//! panic. One file per scheme; this module holds what they share.

mod github;
mod hmac;
mod shopify;
mod slack;
mod standard_webhooks;
mod stripe;

use std::time::{Duration, SystemTime};

use ::hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName};
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::config::Secret;

pub use self::hmac::{Encoding, HmacVerifier};
pub use self::slack::SlackVerifier;
pub use self::standard_webhooks::StandardWebhooksVerifier;
pub use self::stripe::StripeVerifier;

/// Longest signature header accepted; real ones are well under 1 KiB, and a
/// cap keeps a hostile header from costing decode time.
const MAX_SIGNATURE_HEADER_BYTES: usize = 4096;

/// Why a delivery was refused. Both are 401s; they differ in the error code so
/// an operator can tell forgery from clock trouble.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("signature missing, malformed or not matching any configured secret")]
    SignatureInvalid,
    #[error("signature timestamp is outside the accepted tolerance")]
    TimestampOutOfTolerance,
}

/// The sender conventions hookgate knows (the `scheme` in `[routes.verify]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    None,
    Hmac,
    Stripe,
    Github,
    Shopify,
    StandardWebhooks,
    Slack,
}

impl Scheme {
    pub const ALL: [Scheme; 7] = [
        Scheme::Stripe,
        Scheme::Github,
        Scheme::Shopify,
        Scheme::StandardWebhooks,
        Scheme::Slack,
        Scheme::Hmac,
        Scheme::None,
    ];

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|scheme| scheme.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheme::None => "none",
            Scheme::Hmac => "hmac",
            Scheme::Stripe => "stripe",
            Scheme::Github => "github",
            Scheme::Shopify => "shopify",
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Slack => "slack",
        }
    }

    /// The sender's event id, when the sender has a convention for it
    /// (key sources, first present wins).
    pub fn default_key(self) -> Option<&'static [&'static str]> {
        match self {
            Scheme::Stripe => Some(&["json:/id"]),
            Scheme::Github => Some(&["header:X-GitHub-Delivery"]),
            Scheme::Shopify => Some(&["header:X-Shopify-Webhook-Id"]),
            Scheme::StandardWebhooks => Some(&["header:webhook-id", "header:svix-id"]),
            Scheme::Slack => Some(&["json:/event_id"]),
            Scheme::Hmac | Scheme::None => None,
        }
    }

    /// How long the sender may redeliver an event; `retention` must outlast it.
    pub fn retry_horizon(self) -> Option<Duration> {
        const HOUR: u64 = 3600;
        match self {
            Scheme::Stripe | Scheme::Github => Some(Duration::from_secs(72 * HOUR)),
            Scheme::StandardWebhooks => Some(Duration::from_secs(28 * HOUR)),
            Scheme::Shopify => Some(Duration::from_secs(4 * HOUR)),
            Scheme::Slack => Some(Duration::from_secs(HOUR)),
            Scheme::Hmac | Scheme::None => None,
        }
    }

    /// Default `retention`: comfortably past the retry horizon.
    pub fn default_retention(self) -> Duration {
        match self {
            Scheme::StandardWebhooks => Duration::from_secs(3 * 86_400),
            Scheme::Shopify | Scheme::Slack => Duration::from_secs(86_400),
            _ => Duration::from_secs(7 * 86_400),
        }
    }

    /// Senders whose signature covers only the body (no timestamp, no id)
    /// are exposed to a signed body being re-sent under a fresh key.
    pub fn default_replay_guard(self) -> bool {
        matches!(self, Scheme::Github | Scheme::Shopify)
    }

    pub fn is_timestamped(self) -> bool {
        matches!(
            self,
            Scheme::Stripe | Scheme::StandardWebhooks | Scheme::Slack
        )
    }
}

/// Default `tolerance` of the timestamped schemes.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A route's configured verifier.
#[derive(Debug)]
pub enum Verifier {
    /// `scheme = "none"`, written out explicitly.
    None,
    /// `hmac`, and `github` / `shopify`, which are fixed instances of it.
    Hmac(HmacVerifier),
    Stripe(StripeVerifier),
    StandardWebhooks(StandardWebhooksVerifier),
    Slack(SlackVerifier),
}

impl Verifier {
    /// Build the verifier of `scheme` from its config: `secrets` as written,
    /// `hmac` the operator's header options (only for `scheme = "hmac"`).
    pub fn build(
        scheme: Scheme,
        secrets: &[String],
        tolerance: Option<Duration>,
        hmac: Option<HmacVerifier>,
    ) -> Result<Verifier, String> {
        let tolerance = tolerance.unwrap_or(DEFAULT_TOLERANCE);
        let raw = || {
            secrets
                .iter()
                .map(|s| Secret::new(s.as_bytes()))
                .collect::<Vec<_>>()
        };
        Ok(match scheme {
            Scheme::None => Verifier::None,
            Scheme::Hmac => Verifier::Hmac(hmac.ok_or("scheme \"hmac\" needs its header options")?),
            Scheme::Github => Verifier::Hmac(github::verifier(raw())),
            Scheme::Shopify => Verifier::Hmac(shopify::verifier(raw())),
            Scheme::Stripe => Verifier::Stripe(StripeVerifier {
                secrets: raw(),
                tolerance,
            }),
            Scheme::Slack => Verifier::Slack(SlackVerifier {
                secrets: raw(),
                tolerance,
            }),
            Scheme::StandardWebhooks => Verifier::StandardWebhooks(StandardWebhooksVerifier {
                secrets: secrets
                    .iter()
                    .map(|s| standard_webhooks::decode_secret(s))
                    .collect::<Result<_, _>>()?,
                tolerance,
            }),
        })
    }

    /// Verify `body` as received, with `now` injected so tolerance windows
    /// are testable at their edges.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        match self {
            Verifier::None => Ok(()),
            Verifier::Hmac(verifier) => verifier.verify(headers, body),
            Verifier::Stripe(verifier) => verifier.verify(headers, body, now),
            Verifier::StandardWebhooks(verifier) => verifier.verify(headers, body, now),
            Verifier::Slack(verifier) => verifier.verify(headers, body, now),
        }
    }
}

/// The HMAC digest a scheme signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha256,
    Sha512,
}

impl Algorithm {
    fn tag(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn compute<M: Mac + ::hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac = <M as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Algorithm::Sha256 => compute::<Hmac<Sha256>>(key, parts),
            Algorithm::Sha512 => compute::<Hmac<Sha512>>(key, parts),
        }
    }
}

/// Whether any secret's HMAC over the concatenation of `parts` equals any of
/// the `candidates` (a sender may list several signatures).
///
/// Each tag is computed once per secret and compared in constant time with
/// every candidate; all comparisons run even after a match, so timing tells
/// nothing about which secret or which signature matched.
pub(crate) fn signature_matches(
    algorithm: Algorithm,
    secrets: &[Secret],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> bool {
    let mut matched = subtle::Choice::from(0);
    for secret in secrets {
        let tag = algorithm.tag(secret.expose(), parts);
        for candidate in candidates {
            matched |= tag.as_slice().ct_eq(candidate.as_slice());
        }
    }
    matched.into()
}

/// How every timestamped scheme ends: the signature first, then the clock,
/// so only an authentic delivery is ever reported as stale.
pub(crate) struct Timestamped<'a> {
    pub secrets: &'a [Secret],
    pub parts: &'a [&'a [u8]],
    pub candidates: &'a [Vec<u8>],
    pub timestamp: &'a str,
    pub tolerance: Duration,
}

impl Timestamped<'_> {
    pub fn check(&self, now: SystemTime) -> Result<(), VerifyError> {
        if !signature_matches(Algorithm::Sha256, self.secrets, self.parts, self.candidates) {
            return Err(VerifyError::SignatureInvalid);
        }
        check_timestamp(self.timestamp, now, self.tolerance)
    }
}

/// A point in time `seconds` after the epoch, for pinning test clocks.
#[cfg(test)]
pub(crate) fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
}

/// Check a Unix-seconds timestamp against `now`, in both directions: a
/// signature from too far in the past is a replay, one from the future a
/// forgery or a broken clock.
pub(crate) fn check_timestamp(
    timestamp: &str,
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let seconds: i64 = timestamp
        .parse()
        .map_err(|_| VerifyError::SignatureInvalid)?;
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if now.abs_diff(seconds) > tolerance.as_secs() {
        Err(VerifyError::TimestampOutOfTolerance)
    } else {
        Ok(())
    }
}

/// The one value of a signature header: missing, repeated, non-ASCII or
/// oversized is a signature failure.
pub(crate) fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<&'a str, VerifyError> {
    let mut values = headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(VerifyError::SignatureInvalid);
    };
    if value.len() > MAX_SIGNATURE_HEADER_BYTES {
        return Err(VerifyError::SignatureInvalid);
    }
    value
        .to_str()
        .map(str::trim)
        .map_err(|_| VerifyError::SignatureInvalid)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use proptest::prelude::*;

    use super::*;

    /// One verifier per scheme, and the headers each reads.
    fn every_scheme() -> Vec<(Verifier, &'static [&'static str])> {
        let secrets = vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()];
        let hmac = HmacVerifier {
            header: HeaderName::from_static("x-signature"),
            algorithm: Algorithm::Sha512,
            encoding: Encoding::Base64,
            prefix: "sha512=".into(),
            secrets: vec![Secret::new("k")],
        };
        let build = |scheme| Verifier::build(scheme, &secrets, None, Some(hmac.clone())).unwrap();
        vec![
            (build(Scheme::Stripe), &["stripe-signature"][..]),
            (build(Scheme::Github), &["x-hub-signature-256"][..]),
            (build(Scheme::Shopify), &["x-shopify-hmac-sha256"][..]),
            (
                build(Scheme::Slack),
                &["x-slack-signature", "x-slack-request-timestamp"][..],
            ),
            (
                build(Scheme::StandardWebhooks),
                &[
                    "webhook-id",
                    "webhook-timestamp",
                    "webhook-signature",
                    "svix-signature",
                ][..],
            ),
            (build(Scheme::Hmac), &["x-signature"][..]),
        ]
    }

    /// Header values shaped like signatures: their separators, prefixes and
    /// alphabets in random order, plus plain noise.
    fn header_value() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("t=".to_owned()),
            Just("v1=".to_owned()),
            Just("v1,".to_owned()),
            Just("v0=".to_owned()),
            Just("sha256=".to_owned()),
            Just(",".to_owned()),
            Just(" ".to_owned()),
            Just("=".to_owned()),
            "[0-9]{1,20}",
            "[0-9a-f]{1,128}",
            "[A-Za-z0-9+/=]{1,90}",
            "[ -~]{0,40}",
        ];
        proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_headers_never_panic_or_pass(
            values in proptest::collection::vec(header_value(), 4),
            raw in proptest::collection::vec(any::<u8>(), 0..200),
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_614_265_330);
            for (verifier, names) in every_scheme() {
                let mut headers = HeaderMap::new();
                for (name, value) in names.iter().zip(&values) {
                    headers.append(*name, HeaderValue::from_str(value).unwrap());
                }
                if let Ok(value) = HeaderValue::from_bytes(&raw) {
                    headers.append(names[0], value);
                }
                prop_assert!(verifier.verify(&headers, &body, now).is_err());
            }
        }
    }

    #[test]
    fn timestamps_are_checked_both_ways_at_the_edges() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let five_minutes = Duration::from_secs(300);
        for (ts, ok) in [
            ("999701", true),  // 299 s old
            ("999700", true),  // exactly 300 s
            ("999699", false), // 301 s old
            ("1000299", true), // 299 s ahead
            ("1000301", false),
        ] {
            let result = check_timestamp(ts, now, five_minutes);
            assert_eq!(result.is_ok(), ok, "{ts}");
            if !ok {
                assert_eq!(result, Err(VerifyError::TimestampOutOfTolerance));
            }
        }
        assert_eq!(
            check_timestamp("12a", now, five_minutes),
            Err(VerifyError::SignatureInvalid)
        );
        assert_eq!(
            check_timestamp("", now, five_minutes),
            Err(VerifyError::SignatureInvalid)
        );
        assert_eq!(
            check_timestamp("99999999999999999999999", now, five_minutes),
            Err(VerifyError::SignatureInvalid)
        );
    }
}
