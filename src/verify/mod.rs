//! Signature verification: the first thing that looks at a delivery, before
//! its key is read or the store is touched (SPEC §3).
//!
//! Every scheme verifies the raw body bytes exactly as received, compares in
//! constant time (`Mac::verify_slice`), and accepts a list of secrets so a
//! rotation never drops a delivery. Malformed input — missing, duplicated or
//! oversized headers, bad hex or base64 — is a clean [`VerifyError`], never a
//! panic. One file per scheme; this module holds what they share.

mod hmac;

use std::time::{Duration, SystemTime};

use ::hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName};
use sha2::{Sha256, Sha512};

use crate::config::Secret;

pub use self::hmac::{Encoding, HmacVerifier};

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

    /// The sender's event id, when the sender has a convention for it.
    pub fn default_key(self) -> Option<&'static str> {
        match self {
            Scheme::Stripe => Some("json:/id"),
            Scheme::Github => Some("header:X-GitHub-Delivery"),
            Scheme::Shopify => Some("header:X-Shopify-Webhook-Id"),
            Scheme::StandardWebhooks => Some("header:webhook-id"),
            Scheme::Slack => Some("json:/event_id"),
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

/// A route's configured verifier.
#[derive(Debug)]
pub enum Verifier {
    /// `scheme = "none"`, written out explicitly.
    None,
    Hmac(HmacVerifier),
}

impl Verifier {
    /// Verify `body` as received, with `now` injected so tolerance windows
    /// are testable at their edges.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let _ = now;
        match self {
            Verifier::None => Ok(()),
            Verifier::Hmac(verifier) => verifier.verify(headers, body),
        }
    }
}

/// The HMAC digest a scheme signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha256,
    Sha512,
}

/// Whether any secret's HMAC over the concatenation of `parts` equals
/// `expected`, compared in constant time.
pub(crate) fn any_secret_matches(
    algorithm: Algorithm,
    secrets: &[Secret],
    parts: &[&[u8]],
    expected: &[u8],
) -> bool {
    fn check<M: Mac + ::hmac::digest::KeyInit>(
        key: &[u8],
        parts: &[&[u8]],
        expected: &[u8],
    ) -> bool {
        let mut mac = <M as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
        for part in parts {
            mac.update(part);
        }
        mac.verify_slice(expected).is_ok()
    }
    // Check every secret even after a match, so timing does not reveal which
    // one matched.
    secrets.iter().fold(false, |matched, secret| {
        let ok = match algorithm {
            Algorithm::Sha256 => check::<Hmac<Sha256>>(secret.expose(), parts, expected),
            Algorithm::Sha512 => check::<Hmac<Sha512>>(secret.expose(), parts, expected),
        };
        matched | ok
    })
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
