//! `scheme = "linear"`: `Linear-Signature: <hex>`, an HMAC-SHA256 of the raw
//! body with the webhook's signing secret (linear.app/developers/webhooks,
//! "Securing webhooks").
//!
//! Key: `Linear-Delivery`, the delivery's UUID. It is not covered by the
//! signature, so `replay_guard = "body"` is on by default (a captured body
//! re-sent under another delivery id is a duplicate). The body also carries
//! `webhookTimestamp` (ms), which Linear suggests checking against the clock;
//! hookgate does not (it reads no body before the signature passes, and
//! dedup covers replays within `retention`). Linear retries a failed
//! delivery three times — after a minute, an hour and six hours.

use std::time::Duration;

use http::HeaderName;

use super::{Algorithm, Encoding, HmacOptions, HmacVerifier, Profile, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "linear",
    default_key: &["header:Linear-Delivery"],
    retry_horizon: Some(Duration::from_secs(8 * HOUR)),
    default_retention: Duration::from_secs(3 * DAY),
    replay_guard: true,
    timestamped: false,
    signed_headers: &[],
    on_missing_key: OnMissingKey::Reject,
    build: |spec| HmacVerifier::from_spec(options(), spec),
};

fn options() -> HmacOptions {
    HmacOptions {
        header: HeaderName::from_static("linear-signature"),
        algorithm: Algorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;
    use crate::secret::Secret;
    use crate::verify::VerifyError;

    // Linear publishes no fixed vector; computed independently with
    // Python's `hmac` over the raw body, hex, for the documented method.
    const SECRET: &str = "lin_wh_0123456789abcdef";
    const BODY: &[u8] = br#"{"action":"create","type":"Issue","data":{"id":"2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9","title":"Checkout fails"},"url":"https://linear.app/acme/issue/ENG-1","webhookTimestamp":1712917129123}"#;
    const SIGNATURE: &str = "3b615b51d435c9f7b1400e8f965d2420ee9545529d077c21c95e144c0b3721ab";

    fn signed(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("linear-signature", HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn accepts_the_vector_and_refuses_forgeries() {
        let v = HmacVerifier {
            options: options(),
            secrets: vec![Secret::new("lin_wh_old_0123456789"), Secret::new(SECRET)],
        };
        assert_eq!(v.verify(&signed(SIGNATURE), BODY), Ok(()));
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(v.verify(&signed(SIGNATURE), b"{}"), bad, "tampered body");
        assert_eq!(
            v.verify(&signed(&format!("sha256={SIGNATURE}")), BODY),
            bad,
            "a prefix Linear does not write"
        );
        assert_eq!(v.verify(&HeaderMap::new(), BODY), bad);
    }
}
