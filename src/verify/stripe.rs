//! `scheme = "stripe"`: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>][,v0=…]`.
//!
//! The signed content is `"{t}.{body}"`, HMAC-SHA256, hex. The endpoint
//! secret (`whsec_…`) is used as raw bytes — it is *not* base64-decoded.
//! Only `v1` entries count (any may match; Stripe lists several during a
//! secret roll); `v0` and unknown schemes are ignored. `t` must be within
//! `tolerance` of now, checked after the signature so only an authentic but
//! stale delivery is reported as `timestamp_out_of_tolerance`.

use std::time::Duration;

use http::HeaderName;

use super::pairs::{PairFormat, PairVerifier};
use super::{Profile, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "stripe",
    default_key: &["json:/id"],
    // Stripe retries for up to 3 days in live mode.
    retry_horizon: Some(Duration::from_secs(72 * HOUR)),
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

/// `Stripe-Signature: t=…,v1=…`, signed `"{t}.{body}"`.
pub static FORMAT: PairFormat = PairFormat {
    header: HeaderName::from_static("stripe-signature"),
    separator: ',',
    timestamp: "t",
    signature: "v1",
    joiner: b".",
};

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;
    use crate::secret::Secret;
    use crate::verify::pairs::testing;
    use crate::verify::{at, Verify, VerifyError};

    // Inputs from stripe-node's webhook tests (secret "whsec_test_secret",
    // this payload, t=1492774577). Stripe's SDKs sign at test time instead of
    // publishing a fixed signature; this one was computed independently with
    // Python's `hmac` over "{t}.{payload}", the secret as raw bytes.
    const SECRET: &str = "whsec_test_secret";
    const PAYLOAD: &[u8] = b"{\n  \"id\": \"evt_test_webhook\",\n  \"object\": \"event\"\n}";
    const T: u64 = 1_492_774_577;
    const V1: &str = "c2f890decbc5ede7c5060bb9a6d31e0626a4342bacb9aeae2adb1bcea72f9812";

    fn verifier(secrets: &[&str]) -> PairVerifier {
        testing::verifier(&FORMAT, secrets)
    }

    fn header(value: &str) -> HeaderMap {
        testing::header(&FORMAT, value)
    }

    #[test]
    fn signs_what_it_verifies() {
        let secret = Secret::new(SECRET);
        assert_eq!(FORMAT.sign(&secret, T, PAYLOAD), format!("t={T},v1={V1}"));
        let signed = header(&FORMAT.sign(&secret, T, PAYLOAD));
        assert_eq!(verifier(&[SECRET]).verify(&signed, PAYLOAD, at(T)), Ok(()));
    }

    #[test]
    fn accepts_the_vector_and_any_of_several_v1() {
        let v = verifier(&["whsec_old", SECRET]);
        let ok = header(&format!("t={T},v1={V1}"));
        assert_eq!(v.verify(&ok, PAYLOAD, at(T)), Ok(()));
        let rolled = header(&format!(
            "t={T},v1={},v1={V1},v0=6ffbb59b2300aae63f2720",
            "ab".repeat(32)
        ));
        assert_eq!(v.verify(&rolled, PAYLOAD, at(T + 10)), Ok(()));
    }

    #[test]
    fn tolerance_edges() {
        let v = verifier(&[SECRET]);
        let ok = header(&format!("t={T},v1={V1}"));
        assert_eq!(v.verify(&ok, PAYLOAD, at(T + 299)), Ok(()));
        assert_eq!(
            v.verify(&ok, PAYLOAD, at(T + 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
        assert_eq!(
            v.verify(&ok, PAYLOAD, at(T - 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn rejects_forgeries_and_malformed_headers() {
        let v = verifier(&[SECRET]);
        let bad = Err(VerifyError::SignatureInvalid);
        let now = at(T);
        let ok = header(&format!("t={T},v1={V1}"));
        assert_eq!(v.verify(&ok, b"{}", now), bad, "tampered body");
        assert_eq!(
            verifier(&["whsec_other"]).verify(&ok, PAYLOAD, now),
            bad,
            "wrong secret"
        );
        let only_v0 = header(&format!("t={T},v0={V1}"));
        assert_eq!(v.verify(&only_v0, PAYLOAD, now), bad, "v0 does not count");
        let other_t = header(&format!("t={},v1={V1}", T + 1));
        assert_eq!(v.verify(&other_t, PAYLOAD, at(T + 1)), bad, "t is signed");
        for malformed in [
            "",
            "t=",
            &format!("v1={V1}"),
            &format!("t={T}"),
            "garbage",
            &format!("t={T},t={T},v1={V1}"),
            &format!("t={T},v1=zz"),
        ] {
            assert_eq!(
                v.verify(&header(malformed), PAYLOAD, now),
                bad,
                "{malformed:?}"
            );
        }
        // A stale timestamp with a bad signature is a bad signature.
        let forged = header(&format!("t={},v1={}", T - 10_000, "00".repeat(32)));
        assert_eq!(v.verify(&forged, PAYLOAD, now), bad);
        assert_eq!(v.verify(&HeaderMap::new(), PAYLOAD, now), bad);
    }

    #[test]
    fn the_whsec_secret_is_not_base64_decoded() {
        // The same secret, decoded, must not verify.
        let decoded = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            "dGVzdF9zZWNyZXQ=",
        )
        .unwrap();
        let v = PairVerifier {
            format: &FORMAT,
            secrets: vec![Secret::new(decoded)],
            tolerance: Duration::from_secs(300),
        };
        let ok = header(&format!("t={T},v1={V1}"));
        assert_eq!(
            v.verify(&ok, PAYLOAD, at(T)),
            Err(VerifyError::SignatureInvalid)
        );
    }
}
