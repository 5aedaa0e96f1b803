//! `scheme = "shopify"`: `X-Shopify-Hmac-Sha256: <base64>`, an HMAC-SHA256
//! of the body with the app's client secret.
//!
//! Like GitHub, the default key (`X-Shopify-Webhook-Id`) is not signed, so
//! `replay_guard = "body"` is on by default.

use std::time::Duration;

use http::HeaderName;

use super::{Algorithm, Encoding, HmacOptions, HmacVerifier, Profile, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "shopify",
    default_key: &["header:X-Shopify-Webhook-Id"],
    // Shopify retries 8 times over 4 hours.
    retry_horizon: Some(Duration::from_secs(4 * HOUR)),
    default_retention: Duration::from_secs(DAY),
    replay_guard: true,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    on_missing_key: OnMissingKey::Reject,
    build: |spec| HmacVerifier::from_spec(options(), spec),
};

fn options() -> HmacOptions {
    HmacOptions {
        header: HeaderName::from_static("x-shopify-hmac-sha256"),
        algorithm: Algorithm::Sha256,
        encoding: Encoding::Base64,
        prefix: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;
    use crate::secret::Secret;
    use crate::verify::VerifyError;

    fn verifier(secrets: Vec<Secret>) -> HmacVerifier {
        HmacVerifier {
            options: options(),
            secrets,
        }
    }

    // Shopify documents the algorithm (shopify.dev, "Verify a webhook":
    // base64 of HMAC-SHA256 of the raw body, keyed by the client secret) but
    // publishes no fixed vector; this one was computed independently with
    // Python's `hmac` module for secret "hush" and the body below.
    const BODY: &[u8] = br#"{"id":820982911946154508,"email":"jon@doe.ca"}"#;
    const SIGNATURE: &str = "fp5HwmAHEVGQQwJU1KRpk57Ts2YHF6/TLOCczCtB5bs=";

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "X-Shopify-Hmac-SHA256",
            HeaderValue::from_str(value).unwrap(),
        );
        headers
    }

    #[test]
    fn accepts_a_valid_signature() {
        let v = verifier(vec![Secret::new("previous"), Secret::new("hush")]);
        assert_eq!(v.verify(&headers(SIGNATURE), BODY), Ok(()));
    }

    #[test]
    fn rejects_forgeries() {
        let v = verifier(vec![Secret::new("hush")]);
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(v.verify(&headers(SIGNATURE), b"{}"), bad, "tampered body");
        let hex = "7e9e47c2600711519043025.."; // hex where base64 is expected
        assert_eq!(v.verify(&headers(hex), BODY), bad);
        let as_hex = hex::encode(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, SIGNATURE).unwrap(),
        );
        assert_eq!(
            v.verify(&headers(&as_hex), BODY),
            bad,
            "hex encoding of the right tag"
        );
        assert_eq!(v.verify(&HeaderMap::new(), BODY), bad, "missing header");
        assert_eq!(
            verifier(vec![Secret::new("hush!")]).verify(&headers(SIGNATURE), BODY),
            bad
        );
    }
}
