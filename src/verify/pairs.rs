//! The `name=value` family of signature headers: a timestamp and one or
//! more signatures in one header, the HMAC-SHA256 (hex) of
//! `"{timestamp}{joiner}{body}"`. Stripe (`t=…,v1=…`, `.`), Calendly (the
//! same shape under its own header) and Paddle (`ts=…;h1=…`, `:`) sign this
//! way; each names its [`PairFormat`].
//!
//! Any listed signature may match (senders list several during a secret
//! roll); other names are ignored. The timestamp must be within
//! `tolerance` of now, checked after the signature so only an authentic but
//! stale delivery is reported as `timestamp_out_of_tolerance`.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::{single_header, Timestamped, Verifier, Verify, VerifyError, VerifySpec};
use crate::secret::Secret;

/// More signatures than this in one header is not a real sender's.
const MAX_SIGNATURES: usize = 8;

/// Where and how one sender writes its pairs.
#[derive(Debug)]
pub struct PairFormat {
    pub header: HeaderName,
    /// Between pairs: `,` or `;`.
    pub separator: char,
    /// The timestamp's name (`t`, `ts`).
    pub timestamp: &'static str,
    /// The signatures' name (`v1`, `h1`).
    pub signature: &'static str,
    /// Between the timestamp and the body in the signed content.
    pub joiner: &'static [u8],
}

impl PairFormat {
    /// The header value a sender of this format would send for `body` at
    /// `timestamp` (Unix seconds), signed with `secret`: how hookgate signs
    /// an event it fetched from the sender's API itself (docs/guide/reconciliation.md,
    /// "Reconciliation"), so an upstream that verifies the sender accepts it.
    pub fn sign(&self, secret: &Secret, timestamp: u64, body: &[u8]) -> String {
        let timestamp = timestamp.to_string();
        let parts: [&[u8]; 3] = [timestamp.as_bytes(), self.joiner, body];
        let tag = super::shared::Algorithm::Sha256.tag(secret.expose(), &parts);
        format!(
            "{}={timestamp}{}{}={}",
            self.timestamp,
            self.separator,
            self.signature,
            hex::encode(tag)
        )
    }
}

#[derive(Debug)]
pub struct PairVerifier {
    pub format: &'static PairFormat,
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
}

impl PairVerifier {
    pub fn build(format: &'static PairFormat, spec: VerifySpec) -> Verifier {
        Verifier::new(PairVerifier {
            format,
            secrets: spec.secrets,
            tolerance: spec.tolerance,
        })
    }
}

impl Verify for PairVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        let format = self.format;
        let value = single_header(headers, &format.header)?;
        let mut timestamp = None;
        let mut signatures = Vec::new();
        for item in value.split(format.separator) {
            let (name, value) = item
                .trim()
                .split_once('=')
                .ok_or(VerifyError::SignatureInvalid)?;
            if name == format.timestamp {
                if timestamp.replace(value).is_some() {
                    return Err(VerifyError::SignatureInvalid);
                }
            } else if name == format.signature {
                if let Ok(signature) = hex::decode(value) {
                    signatures.push(signature);
                }
            }
        }
        let timestamp = timestamp.ok_or(VerifyError::SignatureInvalid)?;
        if signatures.is_empty() || signatures.len() > MAX_SIGNATURES {
            return Err(VerifyError::SignatureInvalid);
        }
        let parts: [&[u8]; 3] = [timestamp.as_bytes(), format.joiner, body];
        Timestamped {
            secrets: &self.secrets,
            parts: &parts,
            candidates: &signatures,
            timestamp,
            tolerance: self.tolerance,
        }
        .check(now)
    }
}

/// A verifier of `format` with `secrets` and the default 5-minute
/// tolerance, and a header map holding one signature header: for the
/// schemes' tests.
#[cfg(test)]
pub(crate) mod testing {
    use http::{HeaderMap, HeaderValue};

    use super::*;

    pub fn verifier(format: &'static PairFormat, secrets: &[&str]) -> PairVerifier {
        PairVerifier {
            format,
            secrets: secrets.iter().map(|s| Secret::new(*s)).collect(),
            tolerance: Duration::from_secs(300),
        }
    }

    pub fn header(format: &PairFormat, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(format.header.clone(), HeaderValue::from_str(value).unwrap());
        headers
    }
}
