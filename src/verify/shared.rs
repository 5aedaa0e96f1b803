//! What the schemes share: the HMAC digests and the constant-time
//! comparison of a signature against every secret, a single signature
//! header read and decoded, and the timestamp tolerance of the schemes
//! that sign one.

use std::time::{Duration, SystemTime};

use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName};
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::{Encoding, VerifyError};
use crate::secret::Secret;

/// Longest signature header accepted; real ones are well under 1 KiB, and a
/// cap keeps a hostile header from costing decode time.
const MAX_SIGNATURE_HEADER_BYTES: usize = 4096;

/// The HMAC digest a scheme signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Only where a sender still signs with it (Twilio, Intercom).
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    pub(crate) fn tag(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn compute<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac = <M as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Algorithm::Sha1 => compute::<Hmac<Sha1>>(key, parts),
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

/// Whether any of `presented` is one of `secrets` whole — a token scheme's
/// check (GitLab's, a described `algorithm = "token"`). Every pair is
/// compared, all the way: timing tells nothing about which secret matched,
/// or how much of one.
pub(crate) fn token_verdict(
    presented: &[impl AsRef<[u8]>],
    secrets: &[Secret],
) -> Result<(), VerifyError> {
    let mut matched = subtle::Choice::from(0);
    for token in presented {
        for secret in secrets {
            matched |= token.as_ref().ct_eq(secret.expose());
        }
    }
    bool::from(matched)
        .then_some(())
        .ok_or(VerifyError::SignatureInvalid)
}

/// [`signature_matches`] as a verdict.
pub(crate) fn hmac_verdict(
    algorithm: Algorithm,
    secrets: &[Secret],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> Result<(), VerifyError> {
    if signature_matches(algorithm, secrets, parts, candidates) {
        Ok(())
    } else {
        Err(VerifyError::SignatureInvalid)
    }
}

/// The decoded bytes of a single signature header.
pub(crate) fn encoded_header(
    headers: &HeaderMap,
    name: &HeaderName,
    encoding: Encoding,
) -> Result<Vec<u8>, VerifyError> {
    encoding
        .decode(single_header(headers, name)?)
        .ok_or(VerifyError::SignatureInvalid)
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

/// [`check_timestamp`] for senders that sign milliseconds (HubSpot,
/// Linear).
pub(crate) fn check_timestamp_ms(
    millis: u64,
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if now.abs_diff(millis) > tolerance.as_millis() as u64 {
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
