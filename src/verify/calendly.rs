//! `scheme = "calendly"`: `Calendly-Webhook-Signature: t=<unix>,v1=<hex>`
//! (developer.calendly.com/api-docs/overview/webhooks/webhook-signatures):
//! HMAC-SHA256 of `"{t}.{raw body}"` with the subscription's signing key —
//! Stripe's shape under Calendly's header. `t` must be within `tolerance`.
//!
//! Calendly sends no event id. The default key joins the event name and the
//! resource it is about (`json:/event + json:/payload/uri`: one
//! `invitee.created` per invitee, one `invitee.canceled`), the same on every
//! retry. Calendly retries a failing delivery for 24 hours
//! (…/webhooks/webhook-errors).

use std::time::Duration;

use http::HeaderName;

use super::pairs::{PairFormat, PairVerifier};
use super::{Profile, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "calendly",
    default_key: &["json:/event + json:/payload/uri"],
    retry_horizon: Some(Duration::from_secs(24 * HOUR)),
    default_retention: Duration::from_secs(3 * DAY),
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
    header: HeaderName::from_static("calendly-webhook-signature"),
    separator: ',',
    timestamp: "t",
    signature: "v1",
    joiner: b".",
};

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;
    use crate::key::{self, KeySource};
    use crate::verify::pairs::testing;
    use crate::verify::{at, Verify, VerifyError};

    // No fixed vector is published; computed independently with Python's
    // `hmac` over "{t}.{body}" for the documented method.
    const SECRET: &str = "calendly-signing-key-0123456789";
    const T: u64 = 1_712_917_129;
    const BODY: &[u8] = br#"{"created_at":"2024-04-12T10:18:49.000000Z","created_by":"https://api.calendly.com/users/AAAA","event":"invitee.created","payload":{"uri":"https://api.calendly.com/scheduled_events/BBBB/invitees/CCCC"}}"#;
    const V1: &str = "8691c26bc02b20c90c19883a72edb1daebcc4f3bb5692b254d7fe80b6ac9a746";

    #[test]
    fn accepts_the_vector_and_refuses_forgeries() {
        let v = testing::verifier(&FORMAT, &[SECRET]);
        let ok = testing::header(&FORMAT, &format!("t={T},v1={V1}"));
        assert_eq!(v.verify(&ok, BODY, at(T)), Ok(()));
        assert_eq!(
            v.verify(&ok, b"{}", at(T)),
            Err(VerifyError::SignatureInvalid)
        );
        let stripe_header =
            testing::header(&super::super::stripe::FORMAT, &format!("t={T},v1={V1}"));
        assert_eq!(
            v.verify(&stripe_header, BODY, at(T)),
            Err(VerifyError::SignatureInvalid)
        );
    }

    #[test]
    fn the_default_key_is_the_event_and_its_resource() {
        let sources: Vec<KeySource> = PROFILE
            .default_key
            .iter()
            .map(|text| KeySource::parse(text).unwrap())
            .collect();
        let key = key::extract(&sources, &HeaderMap::new(), BODY, "", |_| true).unwrap();
        assert_eq!(
            key,
            "invitee.created:https%3A//api.calendly.com/scheduled_events/BBBB/invitees/CCCC"
        );
    }
}
