//! `scheme = "pagerduty"`: PagerDuty v3 webhooks'
//! `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>…]`, the HMAC-SHA256 of the raw
//! body with each of the subscription's secrets, listed so a secret can
//! rotate without a gap (developer.pagerduty.com/docs/webhooks/Signatures).
//! Any listed `v1` may match; other versions are ignored.
//!
//! Key: the body's `event.id`; a v3 webhook carries exactly one event and
//! every attempt resends it unchanged (PagerDuty also repeats it in the
//! unsigned `X-Webhook-Id` header). PagerDuty retries timeouts, 429 and
//! 5xx up to four times over about twenty minutes (docs/webhooks/Behavior).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::{
    hmac_verdict, single_header, Algorithm, Profile, Verifier, Verify, VerifyError, DAY, HOUR,
};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "pagerduty",
    default_key: &["json:/event/id"],
    retry_horizon: Some(Duration::from_secs(HOUR)),
    default_retention: Duration::from_secs(DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(PagerDutyVerifier {
            secrets: spec.secrets,
        }))
    },
};

const SIGNATURE: HeaderName = HeaderName::from_static("x-pagerduty-signature");

/// More signatures than this is not PagerDuty's (it lists one per secret).
const MAX_SIGNATURES: usize = 8;

#[derive(Debug)]
struct PagerDutyVerifier {
    secrets: Vec<Secret>,
}

impl Verify for PagerDutyVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<(), VerifyError> {
        let candidates: Vec<Vec<u8>> = single_header(headers, &SIGNATURE)?
            .split(',')
            .filter_map(|item| item.trim().strip_prefix("v1="))
            .map(|hex_text| hex::decode(hex_text).map_err(|_| VerifyError::SignatureInvalid))
            .collect::<Result<_, _>>()?;
        if candidates.is_empty() || candidates.len() > MAX_SIGNATURES {
            return Err(VerifyError::SignatureInvalid);
        }
        hmac_verdict(Algorithm::Sha256, &self.secrets, &[body], &candidates)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    // PagerDuty's docs give the method and a header shape, not a vector;
    // computed independently with Python's `hmac` (SHA-256, hex).
    const SECRET: &str = "pd_secret_0123456789abcdef";
    const BODY: &[u8] = br#"{"event":{"id":"01DFRXM0ATBGSUSAXV4G9BFB5X","event_type":"incident.triggered","resource_type":"incident","occurred_at":"2026-11-30T12:00:00.000Z","data":{"id":"PGR0VU2","type":"incident"}}}"#;
    const SIGNATURE: &str = "a6240cc7fcd8762622c5394d57ac1872dbe54d9f0a8a13c837f6248304177bde";

    fn signed(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-pagerduty-signature",
            HeaderValue::from_str(value).unwrap(),
        );
        headers
    }

    fn verifier() -> PagerDutyVerifier {
        PagerDutyVerifier {
            secrets: vec![Secret::new(SECRET)],
        }
    }

    #[test]
    fn accepts_the_vector_alone_or_in_a_rotation_list() {
        let now = crate::clock::wall();
        let v = verifier();
        assert_eq!(
            v.verify(&signed(&format!("v1={SIGNATURE}")), BODY, now),
            Ok(())
        );
        let rotating = format!(
            "v1=f03de6f61df6e454f3620c4d6aca17ad072d3f8bbb2760eac3b2ad391b5e8073, v1={SIGNATURE}"
        );
        assert_eq!(v.verify(&signed(&rotating), BODY, now), Ok(()));
    }

    #[test]
    fn refuses_forgeries() {
        let now = crate::clock::wall();
        let v = verifier();
        let bad = Err(VerifyError::SignatureInvalid);
        let good = format!("v1={SIGNATURE}");
        assert_eq!(v.verify(&signed(&good), b"{}", now), bad, "tampered body");
        assert_eq!(v.verify(&signed(SIGNATURE), BODY, now), bad, "no v1=");
        assert_eq!(
            v.verify(&signed(&format!("v2={SIGNATURE}")), BODY, now),
            bad,
            "another version"
        );
        assert_eq!(v.verify(&signed("v1=zz"), BODY, now), bad, "not hex");
        let many = [good.as_str(); MAX_SIGNATURES + 1].join(",");
        assert_eq!(v.verify(&signed(&many), BODY, now), bad, "too many");
    }
}
