//! `scheme = "linear"`: `Linear-Signature: <hex>`, an HMAC-SHA256 of the raw
//! body with the webhook's signing secret (linear.app/developers/webhooks,
//! "Securing webhooks").
//!
//! The signed body carries `webhookTimestamp` (Unix milliseconds); once the
//! signature passes it must be within `tolerance` of now, as Linear's own
//! SDK requires (within a minute; hookgate's default is 5 minutes) — so a
//! captured delivery cannot be replayed later.
//!
//! Key: `Linear-Delivery`, the delivery's UUID. It is not covered by the
//! signature, so `replay_guard = "body"` is on by default (a captured body
//! re-sent under another delivery id is a duplicate). A retry is stamped
//! anew, so its body differs: `on_mismatch = "replay"` by default. Linear
//! retries a failed delivery three times — after a minute, an hour and six
//! hours.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};
use serde::Deserialize;

use super::{
    check_timestamp_ms, Algorithm, Encoding, HmacOptions, HmacVerifier, Profile, Verifier, Verify,
    VerifyError, DAY, HOUR,
};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "linear",
    default_key: &["header:Linear-Delivery"],
    retry_horizon: Some(Duration::from_secs(8 * HOUR)),
    default_retention: Duration::from_secs(3 * DAY),
    replay_guard: true,
    timestamped: true,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: true,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(LinearVerifier {
            hmac: HmacVerifier {
                options: options(),
                secrets: spec.secrets,
            },
            tolerance: spec.tolerance,
        }))
    },
};

#[derive(Debug)]
struct LinearVerifier {
    hmac: HmacVerifier,
    tolerance: Duration,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stamp {
    webhook_timestamp: u64,
}

impl Verify for LinearVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        self.hmac.verify(headers, body)?;
        let stamp: Stamp =
            serde_json::from_slice(body).map_err(|_| VerifyError::SignatureInvalid)?;
        check_timestamp_ms(stamp.webhook_timestamp, now, self.tolerance)
    }
}

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
    use crate::verify::{check_vector, RawVector};

    const BODY: &[u8] = br#"{"action":"create","type":"Issue","data":{"id":"2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9","title":"Checkout fails"},"url":"https://linear.app/acme/issue/ENG-1","webhookTimestamp":1712917129123}"#;

    // Linear publishes no fixed vector; computed independently with
    // Python's `hmac` over the raw body, hex, for the documented method.
    #[test]
    fn accepts_the_vector_and_refuses_forgeries() {
        let signature = "3b615b51d435c9f7b1400e8f965d2420ee9545529d077c21c95e144c0b3721ab";
        let vector = |signature: &str| RawVector {
            secret: "lin_wh_0123456789abcdef".into(),
            body: String::from_utf8(BODY.to_vec()).unwrap(),
            headers: [("Linear-Signature".to_owned(), signature.to_owned())].into(),
            url: None,
            at: Some(1_712_917_129),
            params: Default::default(),
        };
        assert_eq!(check_vector(&PROFILE, &vector(signature)), Ok(()));
        // A prefix Linear does not write.
        let prefixed = check_vector(&PROFILE, &vector(&format!("sha256={signature}")));
        assert!(prefixed.unwrap_err().contains("does not verify"));
    }

    #[test]
    fn the_signed_timestamp_must_be_recent() {
        let v = LinearVerifier {
            hmac: HmacVerifier {
                options: options(),
                secrets: vec![crate::secret::Secret::new("lin_wh_0123456789abcdef")],
            },
            tolerance: Duration::from_secs(300),
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            "linear-signature",
            "3b615b51d435c9f7b1400e8f965d2420ee9545529d077c21c95e144c0b3721ab"
                .parse()
                .unwrap(),
        );
        let sent = SystemTime::UNIX_EPOCH + Duration::from_millis(1_712_917_129_123);
        assert_eq!(v.verify(&headers, BODY, sent), Ok(()));
        assert_eq!(
            v.verify(&headers, BODY, sent + Duration::from_secs(301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }
}
