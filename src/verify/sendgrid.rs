//! `scheme = "sendgrid"`: SendGrid's Signed Event Webhook
//! (twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features):
//! `X-Twilio-Email-Event-Webhook-Signature` is a base64 ECDSA P-256 /
//! SHA-256 signature (ASN.1 DER) of `X-Twilio-Email-Event-Webhook-Timestamp`
//! followed by the raw body, made with SendGrid's private key. `secrets`
//! holds the verification key the dashboard shows — base64 DER
//! SubjectPublicKeyInfo — so hookgate holds nothing that can sign. The
//! timestamp must be within `tolerance`.
//!
//! Key: SendGrid posts batches (a JSON array of events); the key is the
//! first event's `sg_event_id`, so a batch is deduplicated as a whole — a
//! retry resends the batch. SendGrid retries a non-2xx delivery for up to
//! 24 hours, then drops the events.

use std::time::{Duration, SystemTime};

use base64::Engine;
use http::{HeaderMap, HeaderName};
use ring::signature::ECDSA_P256_SHA256_ASN1;
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

use super::asymmetric::TimestampedKeys;
use super::{encoded_header, single_header, Encoding, Profile, Verifier, Verify, VerifyError, DAY};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "sendgrid",
    default_key: &["json:/0/sg_event_id"],
    retry_horizon: Some(Duration::from_secs(DAY)),
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
    build: |spec| {
        let keys = TimestampedKeys::from_spec(&ECDSA_P256_SHA256_ASN1, &spec, public_key)?;
        Ok(Verifier::new(SendGridVerifier(keys)))
    },
};

const SIGNATURE: HeaderName = HeaderName::from_static("x-twilio-email-event-webhook-signature");
const TIMESTAMP: HeaderName = HeaderName::from_static("x-twilio-email-event-webhook-timestamp");

/// `id-ecPublicKey` and the `prime256v1` curve.
const EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const P256: &str = "1.2.840.10045.3.1.7";

/// The uncompressed P-256 point of a base64 DER SubjectPublicKeyInfo.
fn public_key(text: &[u8]) -> Result<Vec<u8>, String> {
    let invalid = || {
        "a SendGrid verification key is the base64 P-256 public key the dashboard shows".to_owned()
    };
    let der = base64::engine::general_purpose::STANDARD
        .decode(text.trim_ascii())
        .map_err(|_| invalid())?;
    let (rest, info) = SubjectPublicKeyInfo::from_der(&der).map_err(|_| invalid())?;
    let curve = info
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|oid| oid.to_id_string());
    if !rest.is_empty()
        || info.algorithm.algorithm.to_id_string() != EC_PUBLIC_KEY
        || curve.as_deref() != Some(P256)
    {
        return Err(invalid());
    }
    Ok(info.subject_public_key.data.to_vec())
}

/// Holds uncompressed P-256 points.
#[derive(Debug)]
struct SendGridVerifier(TimestampedKeys);

impl Verify for SendGridVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        let timestamp = single_header(headers, &TIMESTAMP)?;
        let signature = encoded_header(headers, &SIGNATURE, Encoding::Base64)?;
        self.0.check(timestamp, &signature, body, now)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::secret::Secret;
    use crate::verify::{at, VerifySpec, DEFAULT_TOLERANCE};

    // The vector of SendGrid's own Python SDK tests
    // (sendgrid-python, test/unit/test_eventwebhook.py): the payload is the
    // event list serialised compactly with sorted keys, then "\r\n".
    const PUBLIC_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==";
    const SIG: &str = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";
    const TS: u64 = 1_600_112_502;
    const PAYLOAD: &str = "[{\"email\":\"hello@world.com\",\"event\":\"dropped\",\"reason\":\"Bounced Address\",\"sg_event_id\":\"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA\",\"sg_message_id\":\"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0\",\"smtp-id\":\"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>\",\"timestamp\":1600112492}]\r\n";
    /// Another P-256 key, from the same tests.
    const OTHER_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTxd43gyp8IOEto2LdIfjRQrIbsd4SXZkLW6jDutdhXSJCWHw8REntlo7aNDthvj+y7GjUuFDb/R1NGe1OPzpA==";

    fn verifier(keys: &[&str]) -> Result<Verifier, String> {
        (PROFILE.build)(VerifySpec {
            secrets: keys.iter().map(|key| Secret::new(*key)).collect(),
            tolerance: DEFAULT_TOLERANCE,
            hmac: None,
            public_url: None,
            min_secret_bytes: crate::verify::MIN_SECRET_BYTES,
            handshake_token: None,
            fetch: None,
            topics: vec![],
            params: Default::default(),
        })
    }

    fn headers(ts: &str, sig: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(TIMESTAMP, HeaderValue::from_str(ts).unwrap());
        headers.insert(super::SIGNATURE, HeaderValue::from_str(sig).unwrap());
        headers
    }

    fn verify(keys: &[&str], ts: &str, sig: &str, body: &str, now: u64) -> Result<(), VerifyError> {
        verifier(keys).unwrap().verify(
            crate::verify::RequestLine::POST,
            &headers(ts, sig),
            body.as_bytes(),
            at(now),
        )
    }

    #[test]
    fn accepts_the_sdk_vector_with_either_key_listed() {
        let ts = TS.to_string();
        assert_eq!(verify(&[PUBLIC_KEY], &ts, SIG, PAYLOAD, TS), Ok(()));
        assert_eq!(
            verify(&[OTHER_KEY, PUBLIC_KEY], &ts, SIG, PAYLOAD, TS),
            Ok(())
        );
    }

    #[test]
    fn refuses_what_the_sdk_refuses() {
        let ts = TS.to_string();
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(verify(&[OTHER_KEY], &ts, SIG, PAYLOAD, TS), bad, "bad key");
        assert_eq!(verify(&[PUBLIC_KEY], &ts, SIG, "payload", TS), bad);
        assert_eq!(
            verify(
                &[PUBLIC_KEY],
                &ts,
                "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH3j/0=",
                PAYLOAD,
                TS
            ),
            bad,
            "bad signature"
        );
        assert_eq!(verify(&[PUBLIC_KEY], "timestamp", SIG, PAYLOAD, TS), bad);
        assert_eq!(
            verify(&[PUBLIC_KEY], &ts, SIG, PAYLOAD, TS + 301),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn only_p256_public_keys_are_accepted_as_secrets() {
        assert!(verifier(&["not base64 at all!!"]).is_err());
        assert!(verifier(&["c2hvcnQgYnV0IGJhc2U2NCBlbmNvZGVk"]).is_err());
    }
}
