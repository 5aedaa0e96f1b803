//! `scheme = "woocommerce"`: `X-WC-Webhook-Signature: <base64>`, an
//! HMAC-SHA256 of the raw body with the webhook's secret
//! (woocommerce.github.io/woocommerce-rest-api-docs, "Webhooks").
//!
//! Handshake: when a webhook is saved active, WooCommerce posts an
//! unsigned `webhook_id=<n>` form body and wants a 200, or it reports the
//! delivery URL broken. hookgate answers that exact body itself with an
//! empty 200 — it is unsigned, so nothing of it is claimed or forwarded.
//!
//! Key: WooCommerce sends no event id. The default joins the topic header
//! with the resource's `id` and `date_modified_gmt` — the same for a
//! repeated hook firing on an unchanged resource, different for every
//! change — then falls back to `X-WC-Webhook-Delivery-ID` (deletions carry
//! only the `id`). The headers are unsigned, so `replay_guard = "body"` is
//! on. WooCommerce does not retry a failed delivery: it counts failures
//! and disables the webhook after five in a row.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, StatusCode};

use super::{
    Algorithm, Encoding, Handshake, HmacOptions, HmacVerifier, Profile, Reply, Verifier, Verify,
    VerifyError, DAY,
};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "woocommerce",
    default_key: &[
        "header:X-WC-Webhook-Topic + json:/id + json:/date_modified_gmt",
        "header:X-WC-Webhook-Delivery-ID",
    ],
    retry_horizon: Some(Duration::ZERO),
    default_retention: Duration::from_secs(7 * DAY),
    replay_guard: true,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(WooVerifier(HmacVerifier {
            options: options(),
            secrets: spec.secrets,
        })))
    },
};

const SIGNATURE: HeaderName = HeaderName::from_static("x-wc-webhook-signature");

fn options() -> HmacOptions {
    HmacOptions {
        header: SIGNATURE,
        algorithm: Algorithm::Sha256,
        encoding: Encoding::Base64,
        prefix: String::new(),
    }
}

#[derive(Debug)]
struct WooVerifier(HmacVerifier);

/// WooCommerce's activation ping: `webhook_id=` and the webhook's number.
fn is_ping(body: &[u8]) -> bool {
    body.strip_prefix(b"webhook_id=")
        .is_some_and(|id| (1..=20).contains(&id.len()) && id.iter().all(u8::is_ascii_digit))
}

impl Verify for WooVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<(), VerifyError> {
        if !headers.contains_key(SIGNATURE) && is_ping(body) {
            // Unsigned by WooCommerce; `handshake` answers it, so it is
            // never claimed or forwarded.
            return Ok(());
        }
        self.0.verify(headers, body)
    }

    fn handshake(&self, _: &HeaderMap, body: &[u8]) -> Option<Handshake> {
        is_ping(body).then_some(Handshake {
            status: StatusCode::OK,
            body: Reply::Empty,
        })
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::secret::Secret;

    // WooCommerce publishes no fixed vector; computed independently with
    // Python's `hmac` (SHA-256, base64) over the raw body.
    const SECRET: &str = "wc_secret_0123456789abcdef";
    const BODY: &[u8] = br#"{"id":537,"status":"processing","total":"29.00","date_modified_gmt":"2026-11-30T12:00:00"}"#;
    const SIGNATURE: &str = "E8jG3erPefvWdcfNv9eYfB6LzIMtezRyRfpu7V8PAxU=";

    fn verifier() -> WooVerifier {
        WooVerifier(HmacVerifier {
            options: options(),
            secrets: vec![Secret::new(SECRET)],
        })
    }

    fn signed(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-wc-webhook-signature",
            HeaderValue::from_str(value).unwrap(),
        );
        headers
    }

    #[test]
    fn accepts_the_vector_and_refuses_forgeries() {
        let v = verifier();
        let now = crate::clock::wall();
        assert_eq!(v.verify(&signed(SIGNATURE), BODY, now), Ok(()));
        assert_eq!(
            v.handshake(&HeaderMap::new(), BODY),
            None,
            "a delivery is no ping"
        );
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(v.verify(&signed(SIGNATURE), b"{}", now), bad);
        assert_eq!(v.verify(&HeaderMap::new(), BODY, now), bad, "unsigned");
    }

    #[test]
    fn only_the_exact_ping_passes_unsigned_and_is_answered() {
        let v = verifier();
        let now = crate::clock::wall();
        assert_eq!(v.verify(&HeaderMap::new(), b"webhook_id=42", now), Ok(()));
        assert_eq!(
            v.handshake(&HeaderMap::new(), b"webhook_id=42"),
            Some(Handshake {
                status: StatusCode::OK,
                body: Reply::Empty
            })
        );
        for body in [
            &b"webhook_id="[..],
            b"webhook_id=42&x=1",
            b"webhook_id=4a",
            b"{\"webhook_id\":42}",
        ] {
            assert_eq!(
                v.verify(&HeaderMap::new(), body, now),
                Err(VerifyError::SignatureInvalid),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            v.verify(&signed("AAAA"), b"webhook_id=42", now),
            Err(VerifyError::SignatureInvalid),
            "a signed ping must carry a valid signature"
        );
    }
}
