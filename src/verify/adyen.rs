//! `scheme = "adyen"`: Adyen's standard webhooks carry their HMAC in the
//! body (docs.adyen.com/development-resources/webhooks/verify-hmac-signatures):
//! each `notificationItems[].NotificationRequestItem` has
//! `additionalData.hmacSignature`, the base64 HMAC-SHA256 of
//! `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
//! (absent fields empty) keyed by the hex-decoded HMAC key from the Customer
//! Area. `secrets` holds that hex key as Adyen shows it. Every item of a
//! batch must verify — one forged item refuses the whole request. The HMAC
//! covers those eight fields only: the rest of the body (`live`,
//! `eventDate`, `paymentMethod`, other `additionalData`) is not signed by
//! Adyen, and the key is built from signed fields alone.
//!
//! Key: the first item's `eventCode` + `pspReference`, Adyen's own
//! deduplication advice (a payment's capture, refund and chargeback are
//! separate events with separate keys). Adyen retries three times at once,
//! then from a queue for up to 30 days
//! (docs.adyen.com/development-resources/webhooks/troubleshoot). The
//! upstream must still answer what Adyen expects (`[accepted]`).

use std::time::{Duration, SystemTime};

use base64::Engine;
use http::HeaderMap;
use serde_json::Value;

use super::{signature_matches, Algorithm, Profile, Verifier, Verify, VerifyError, DAY};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "adyen",
    default_key: &[
        "json:/notificationItems/0/NotificationRequestItem/eventCode + json:/notificationItems/0/NotificationRequestItem/pspReference",
    ],
    retry_horizon: Some(Duration::from_secs(30 * DAY)),
    default_retention: Duration::from_secs(35 * DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        let keys = spec
            .secrets
            .iter()
            .map(|secret| {
                hex::decode(secret.expose())
                    .map(Secret::new)
                    .map_err(|_| "an Adyen HMAC key is hex, as the Customer Area shows it".to_owned())
            })
            .collect::<Result<_, _>>()?;
        Ok(Verifier::new(AdyenVerifier { keys }))
    },
};

/// More items than this in one request is not Adyen's.
const MAX_ITEMS: usize = 100;

/// The fields of an item's signing string, in order.
const SIGNED: [&[&str]; 8] = [
    &["pspReference"],
    &["originalReference"],
    &["merchantAccountCode"],
    &["merchantReference"],
    &["amount", "value"],
    &["amount", "currency"],
    &["eventCode"],
    &["success"],
];

#[derive(Debug)]
struct AdyenVerifier {
    /// The decoded HMAC keys.
    keys: Vec<Secret>,
}

/// A field as Adyen writes it into the signing string.
fn field(item: &Value, path: &[&str]) -> String {
    match path.iter().try_fold(item, |value, name| value.get(name)) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        Some(Value::Bool(flag)) => flag.to_string(),
        _ => String::new(),
    }
}

impl AdyenVerifier {
    fn item_verifies(&self, item: &Value) -> bool {
        let Some(signature) = item
            .pointer("/additionalData/hmacSignature")
            .and_then(Value::as_str)
            .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
        else {
            return false;
        };
        let content = SIGNED
            .iter()
            .map(|path| field(item, path))
            .collect::<Vec<_>>()
            .join(":");
        signature_matches(
            Algorithm::Sha256,
            &self.keys,
            &[content.as_bytes()],
            &[signature],
        )
    }
}

impl Verify for AdyenVerifier {
    fn verify(&self, _: &HeaderMap, body: &[u8], _: SystemTime) -> Result<(), VerifyError> {
        let body: Value =
            serde_json::from_slice(body).map_err(|_| VerifyError::SignatureInvalid)?;
        let items = body
            .get("notificationItems")
            .and_then(Value::as_array)
            .filter(|items| (1..=MAX_ITEMS).contains(&items.len()))
            .ok_or(VerifyError::SignatureInvalid)?;
        let all = items.iter().all(|wrapper| {
            wrapper
                .get("NotificationRequestItem")
                .is_some_and(|item| self.item_verifies(item))
        });
        if all {
            Ok(())
        } else {
            Err(VerifyError::SignatureInvalid)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Adyen's published example (the HMAC verification page, and the test
    // vector of Adyen's own API libraries).
    const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    const BODY: &str = r#"{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="},"amount":{"value":1130,"currency":"EUR"},"pspReference":"7914073381342284","eventCode":"AUTHORISATION","eventDate":"2019-05-06T17:15:34.121+02:00","merchantAccountCode":"TestMerchant","operations":["CANCEL","CAPTURE","REFUND"],"merchantReference":"TestPayment-1407325143704","paymentMethod":"visa","success":"true"}}]}"#;

    fn verifier() -> Verifier {
        (PROFILE.build)(crate::verify::VerifySpec {
            secrets: vec![Secret::new(KEY)],
            tolerance: crate::verify::DEFAULT_TOLERANCE,
            hmac: None,
            public_url: None,
            min_secret_bytes: crate::verify::MIN_SECRET_BYTES,
            handshake_token: None,
            fetch: None,
            topics: vec![],
            params: Default::default(),
        })
        .unwrap()
    }

    fn verify(body: &str) -> Result<(), VerifyError> {
        verifier().verify(
            crate::verify::RequestLine::POST,
            &HeaderMap::new(),
            body.as_bytes(),
            crate::clock::wall(),
        )
    }

    #[test]
    fn accepts_the_published_example() {
        assert_eq!(verify(BODY), Ok(()));
    }

    #[test]
    fn every_signed_field_and_every_item_counts() {
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(verify(&BODY.replace("1130", "1131")), bad, "amount");
        assert_eq!(
            verify(&BODY.replace("\"true\"", "\"false\"")),
            bad,
            "success"
        );
        assert_eq!(
            verify(&BODY.replace("TestMerchant", "Other")),
            bad,
            "merchant"
        );
        let item = &BODY[BODY.find("{\"NotificationRequestItem\"").unwrap()..BODY.len() - 2];
        let forged = item.replace("7914073381342284", "9999999999999999");
        let batch = BODY.replace(item, &format!("{item},{forged}"));
        assert_eq!(verify(&batch), bad, "a forged second item");
        let twice = BODY.replace(item, &format!("{item},{item}"));
        assert_eq!(verify(&twice), Ok(()), "two authentic items");
        assert_eq!(verify(r#"{"notificationItems":[]}"#), bad);
        assert_eq!(verify("[accepted]"), bad);
    }

    #[test]
    fn the_key_must_be_hex() {
        let built = (PROFILE.build)(crate::verify::VerifySpec {
            secrets: vec![Secret::new("not-hex-at-all-0123456789")],
            tolerance: crate::verify::DEFAULT_TOLERANCE,
            hmac: None,
            public_url: None,
            min_secret_bytes: crate::verify::MIN_SECRET_BYTES,
            handshake_token: None,
            fetch: None,
            topics: vec![],
            params: Default::default(),
        });
        assert!(built.is_err());
    }
}
