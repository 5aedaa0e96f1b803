//! `scheme = "paddle"`: Paddle Billing's `Paddle-Signature: ts=<unix>;h1=<hex>`
//! (developer.paddle.com/webhooks/signature-verification): HMAC-SHA256 of
//! `"{ts}:{raw body}"` with the notification destination's secret key
//! (`pdl_ntfset_…`, used as raw bytes); several `h1` may be listed while a
//! secret rotates. `ts` must be within `tolerance` (Paddle's SDKs allow 5 s;
//! hookgate's default is the same 5 minutes as its other schemes). Paddle
//! Classic's `p_signature` (public key, form body) is a different product
//! and not this scheme.
//!
//! Key: the event's `event_id` (`evt_…`), the same on every retry. Paddle
//! retries a live delivery up to 60 times over 3 days
//! (developer.paddle.com/webhooks/respond-to-webhooks), then it can be
//! replayed through its API.

use std::time::Duration;

use http::HeaderName;

use super::pairs::{PairFormat, PairVerifier};
use super::{Profile, DAY};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "paddle",
    default_key: &["json:/event_id"],
    retry_horizon: Some(Duration::from_secs(3 * DAY)),
    default_retention: Duration::from_secs(7 * DAY),
    replay_guard: false,
    timestamped: true,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| Ok(PairVerifier::build(&FORMAT, spec)),
};

pub static FORMAT: PairFormat = PairFormat {
    header: HeaderName::from_static("paddle-signature"),
    separator: ';',
    timestamp: "ts",
    signature: "h1",
    joiner: b":",
};

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;
    use crate::verify::pairs::testing;
    use crate::verify::{at, Verify, VerifyError};

    // Paddle publishes the method but no fixed signature (its SDKs sign at
    // test time). This vector was computed independently with Python's
    // `hmac` over "{ts}:{body}", the secret as raw bytes, for the header
    // shape the docs show (ts=1671552777;h1=…).
    const SECRET: &str = "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI";
    const TS: u64 = 1_671_552_777;
    const BODY: &[u8] = br#"{"event_id":"evt_01hv8wptq8987qeep44cyrewp9","event_type":"transaction.completed","occurred_at":"2024-04-12T10:18:49.621022Z","notification_id":"ntf_01hv8wptq8987qeep44cyrewp9","data":{"id":"txn_01hv8wptq8987qeep44cyrewp9"}}"#;
    const H1: &str = "dfa29891d104f94460dd92d14606a144855e836c95c2f03195d2f99f225f2c5b";

    fn verifier(secrets: &[&str]) -> PairVerifier {
        testing::verifier(&FORMAT, secrets)
    }

    fn header(value: &str) -> HeaderMap {
        testing::header(&FORMAT, value)
    }

    #[test]
    fn accepts_the_vector_and_a_rotation_list() {
        let v = verifier(&["pdl_ntfset_old_0123456789", SECRET]);
        assert_eq!(
            v.verify(&header(&format!("ts={TS};h1={H1}")), BODY, at(TS)),
            Ok(())
        );
        let rotating = header(&format!("ts={TS};h1={};h1={H1}", "ab".repeat(32)));
        assert_eq!(v.verify(&rotating, BODY, at(TS + 4)), Ok(()));
    }

    #[test]
    fn rejects_forgeries_stale_and_stripe_shaped_headers() {
        let v = verifier(&[SECRET]);
        let bad = Err(VerifyError::SignatureInvalid);
        let ok = header(&format!("ts={TS};h1={H1}"));
        assert_eq!(v.verify(&ok, b"{}", at(TS)), bad, "tampered body");
        assert_eq!(
            v.verify(&header(&format!("t={TS},v1={H1}")), BODY, at(TS)),
            bad,
            "Stripe's shape is not Paddle's"
        );
        assert_eq!(
            v.verify(&ok, BODY, at(TS + 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }
}
