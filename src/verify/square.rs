//! `scheme = "square"`: `x-square-hmacsha256-signature: <base64>`, the
//! HMAC-SHA256 of the notification URL followed by the raw body, with the
//! subscription's signature key (developer.squareup.com/docs/webhooks/step3validate).
//! The URL is the one configured at Square, byte for byte: the route's
//! `public_url` (plus the request's query, if Square sent one).
//!
//! Key: the body's `event_id`, Square's idempotency value for the event.
//! Square retries a delivery without a timely 2xx for up to 72 hours
//! (developer.squareup.com/docs/webhooks/troubleshooting).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::{
    encoded_header, hmac_verdict, Algorithm, Encoding, Profile, RequestLine, Verifier, Verify,
    VerifyError, DAY,
};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "square",
    default_key: &["json:/event_id"],
    retry_horizon: Some(Duration::from_secs(3 * DAY)),
    default_retention: Duration::from_secs(7 * DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: true,
    retries_change_body: false,
    on_missing_key: OnMissingKey::Reject,
    described: None,
    build: |spec| {
        Ok(Verifier::new(SquareVerifier {
            secrets: spec.secrets,
            public_url: spec
                .public_url
                .ok_or("scheme \"square\" needs `public_url`")?,
        }))
    },
};

const SIGNATURE: HeaderName = HeaderName::from_static("x-square-hmacsha256-signature");

#[derive(Debug)]
struct SquareVerifier {
    secrets: Vec<Secret>,
    public_url: String,
}

impl Verify for SquareVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        self.verify_line(RequestLine::POST, headers, body, now)
    }

    fn verify_line(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        _: SystemTime,
    ) -> Result<(), VerifyError> {
        let signature = encoded_header(headers, &SIGNATURE, Encoding::Base64)?;
        let url = line.url(&self.public_url);
        hmac_verdict(
            Algorithm::Sha256,
            &self.secrets,
            &[url.as_bytes(), body],
            &[signature],
        )
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    // The vector of Square's own Python SDK tests
    // (square-python-sdk, tests/integration/test_webhooks_helper.py).
    const KEY: &str = "Ibxx_5AKakO-3qeNVR61Dw";
    const URL: &str = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9";
    const BODY: &str = r#"{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}"#;
    const SIG: &str = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=";

    fn verifier(url: &str) -> SquareVerifier {
        SquareVerifier {
            secrets: vec![Secret::new(KEY)],
            public_url: url.to_owned(),
        }
    }

    fn signed(sig: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-square-hmacsha256-signature",
            HeaderValue::from_str(sig).unwrap(),
        );
        headers
    }

    #[test]
    fn accepts_the_sdk_vector() {
        let now = crate::clock::wall();
        assert_eq!(
            verifier(URL).verify(&signed(SIG), BODY.as_bytes(), now),
            Ok(())
        );
    }

    #[test]
    fn the_url_is_signed() {
        let now = crate::clock::wall();
        let bad = Err(VerifyError::SignatureInvalid);
        let other = "https://webhook.site/79a4f3a-dcfa-49ee-bac5-9d0edad886b9";
        assert_eq!(
            verifier(other).verify(&signed(SIG), BODY.as_bytes(), now),
            bad
        );
        let with_query = RequestLine {
            method: &http::Method::POST,
            query: Some("x=1"),
        };
        assert_eq!(
            verifier(URL).verify_line(with_query, &signed(SIG), BODY.as_bytes(), now),
            bad,
            "a query Square did not sign"
        );
    }

    #[test]
    fn refuses_forgeries() {
        let now = crate::clock::wall();
        let v = verifier(URL);
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(v.verify(&signed(SIG), b"{}", now), bad);
        assert_eq!(
            v.verify(
                &signed("1z2n3DEJJiUPKcPzQo1ftvbxGdw="),
                BODY.as_bytes(),
                now
            ),
            bad
        );
        assert_eq!(v.verify(&signed("***"), BODY.as_bytes(), now), bad);
    }
}
