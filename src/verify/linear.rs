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
    signs_url: false,
    retries_change_body: false,
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
    use super::*;
    use crate::verify::generic::testing::check_vector;

    // Linear publishes no fixed vector; computed independently with
    // Python's `hmac` over the raw body, hex, for the documented method.
    #[test]
    fn accepts_the_vector_and_refuses_forgeries() {
        let signature = "3b615b51d435c9f7b1400e8f965d2420ee9545529d077c21c95e144c0b3721ab";
        check_vector(
            options(),
            "lin_wh_0123456789abcdef",
            br#"{"action":"create","type":"Issue","data":{"id":"2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9","title":"Checkout fails"},"url":"https://linear.app/acme/issue/ENG-1","webhookTimestamp":1712917129123}"#,
            signature,
            &[&format!("sha256={signature}")], // a prefix Linear does not write
        );
    }
}
