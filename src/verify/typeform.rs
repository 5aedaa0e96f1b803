//! `scheme = "typeform"`: `Typeform-Signature: sha256=<base64>`, an
//! HMAC-SHA256 of the raw body with the secret set on the webhook
//! (typeform.com/developers/webhooks/secure-your-webhooks).
//!
//! Key: the body's `event_id`, the same on every retry. Typeform retries a
//! failed delivery with backoff for up to about ten hours (every few
//! minutes for 408/423/429/503; five times over about three and a half
//! hours for other errors) and disables a webhook that answers 404 or 410.

use std::time::Duration;

use http::HeaderName;

use super::{Algorithm, Encoding, HmacOptions, HmacVerifier, Profile, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "typeform",
    default_key: &["json:/event_id"],
    retry_horizon: Some(Duration::from_secs(12 * HOUR)),
    default_retention: Duration::from_secs(3 * DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    on_missing_key: OnMissingKey::Reject,
    build: |spec| HmacVerifier::from_spec(options(), spec),
};

fn options() -> HmacOptions {
    HmacOptions {
        header: HeaderName::from_static("typeform-signature"),
        algorithm: Algorithm::Sha256,
        encoding: Encoding::Base64,
        prefix: "sha256=".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::generic::testing::check_vector;

    // Typeform publishes no fixed vector; computed independently with
    // Python's `hmac` (SHA-256, base64) over the raw body.
    #[test]
    fn accepts_the_vector_and_refuses_forgeries() {
        let b64 = "0UOF5Ewclb6CjhN6X+pVyZfSYVXuKt1BK3OPMUvjRGU=";
        check_vector(
            options(),
            "tf_secret_0123456789abcdef",
            br#"{"event_id":"01HV8Z3W9K2M4N6P8Q0R2S4T6V","event_type":"form_response","form_response":{"form_id":"lT4Z3j","token":"a3a12ec67a1365927098a606107fac15","submitted_at":"2026-11-30T12:00:00Z"}}"#,
            &format!("sha256={b64}"),
            &[b64, &format!("sha1={b64}")],
        );
    }
}
