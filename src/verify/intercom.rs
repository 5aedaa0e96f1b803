//! `scheme = "intercom"`: `X-Hub-Signature: sha1=<hex>`, an HMAC-SHA1 of the
//! raw body with the app's client secret (developers.intercom.com, Webhooks
//! → "Signed notifications"). SHA-1 is Intercom's choice, not hookgate's; as
//! an HMAC it is still not forgeable without the secret.
//!
//! Key: the notification's `id` (`notif_…`), the same on every attempt. The
//! body also carries `delivery_attempts` and `first_sent_at`, which change
//! between attempts, so a later body under the same id is a retry:
//! `on_mismatch = "replay"` by default. Intercom retries a notification that
//! failed or timed out once more, after about a minute; `retention` keeps
//! a day.

use std::time::Duration;

use http::HeaderName;

use super::{Algorithm, Encoding, HmacOptions, HmacVerifier, Profile, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "intercom",
    default_key: &["json:/id"],
    retry_horizon: Some(Duration::from_secs(HOUR)),
    default_retention: Duration::from_secs(DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: true,
    on_missing_key: OnMissingKey::Reject,
    build: |spec| HmacVerifier::from_spec(options(), spec),
};

fn options() -> HmacOptions {
    HmacOptions {
        header: HeaderName::from_static("x-hub-signature"),
        algorithm: Algorithm::Sha1,
        encoding: Encoding::Hex,
        prefix: "sha1=".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::generic::testing::check_vector;

    // Intercom publishes no fixed vector; computed independently with
    // Python's `hmac` (SHA-1, hex) over the raw body, for the documented
    // method.
    #[test]
    fn accepts_the_vector_and_refuses_forgeries() {
        let hex = "840f34f67d47322b7f6fe0c46a638e11ed0bb136";
        check_vector(
            options(),
            "icm_client_secret_0123456789",
            br#"{"type":"notification_event","app_id":"ecahpwf5","data":{"type":"notification_event_data","item":{"type":"ping","message":"Hello"}},"id":"notif_3b6c1d5e-8f1a-4a7b-9c2d-1e2f3a4b5c6d","topic":"ping","delivery_attempts":1,"first_sent_at":1764504000}"#,
            &format!("sha1={hex}"),
            &[hex, &format!("sha256={hex}")],
        );
    }
}
