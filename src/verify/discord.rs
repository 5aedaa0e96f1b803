//! `scheme = "discord"`: Discord signs interactions and webhook events with
//! Ed25519 (discord.com/developers/docs/interactions/overview, "Setting Up
//! an Endpoint"; docs/events/webhook-events): `X-Signature-Ed25519` is the
//! hex signature of `X-Signature-Timestamp` followed by the raw body, and
//! `secrets` holds the application's hex public key from the Developer
//! Portal — hookgate holds nothing that can sign. The timestamp must be
//! within `tolerance`.
//!
//! Handshakes, answered by hookgate (nothing claimed or forwarded):
//! an interaction `PING` (`"type": 1`, no `event`) gets `{"type":1}`, and a
//! webhook-event `PING` (`"type": 0`) gets an empty 204, as Discord
//! requires before it enables the endpoint.
//!
//! Key: an interaction's `id`; webhook events carry no id, so for them the
//! body's SHA-256. Discord does not retry an interaction (it must be
//! answered within 3 seconds — keep the upstream fast, or the route sync),
//! and documents no retry of webhook events.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, StatusCode};
use ring::signature::ED25519;
use serde::Deserialize;

use super::asymmetric::TimestampedKeys;
use super::{single_header, Handshake, Profile, Reply, Verifier, Verify, VerifyError, DAY};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "discord",
    default_key: &["json:/id", "body-sha256"],
    retry_horizon: None,
    default_retention: Duration::from_secs(DAY),
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
        let keys = TimestampedKeys::from_spec(&ED25519, &spec, public_key)?;
        Ok(Verifier::new(DiscordVerifier(keys)))
    },
};

const SIGNATURE: HeaderName = HeaderName::from_static("x-signature-ed25519");
const TIMESTAMP: HeaderName = HeaderName::from_static("x-signature-timestamp");

/// An application's public key as the Developer Portal shows it.
fn public_key(hex_text: &[u8]) -> Result<Vec<u8>, String> {
    hex::decode(hex_text)
        .ok()
        .filter(|key| key.len() == 32)
        .ok_or_else(|| {
            "a Discord public key is 64 hex digits, as the Developer Portal shows it".to_owned()
        })
}

#[derive(Debug)]
struct DiscordVerifier(TimestampedKeys);

/// What a handshake is told apart by.
#[derive(Deserialize)]
struct Kind {
    #[serde(rename = "type")]
    kind: u8,
    event: Option<serde::de::IgnoredAny>,
}

impl Verify for DiscordVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        let timestamp = single_header(headers, &TIMESTAMP)?;
        let signature = hex::decode(single_header(headers, &SIGNATURE)?)
            .map_err(|_| VerifyError::SignatureInvalid)?;
        self.0.check(timestamp, &signature, body, now)
    }

    fn handshake(&self, _: &HeaderMap, body: &[u8]) -> Option<Handshake> {
        match serde_json::from_slice::<Kind>(body).ok()? {
            Kind {
                kind: 1,
                event: None,
            } => Some(Handshake {
                status: StatusCode::OK,
                body: Reply::Json(serde_json::json!({ "type": 1 })),
            }),
            Kind { kind: 0, .. } => Some(Handshake {
                status: StatusCode::NO_CONTENT,
                body: Reply::Empty,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::secret::Secret;
    use crate::verify::{at, RequestLine, VerifySpec, DEFAULT_TOLERANCE};

    // Discord publishes no vector: signed independently with Python's
    // `cryptography` (Ed25519, seed 00 01 … 1f) over timestamp + body.
    const PUBLIC_KEY: &str = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";
    const TS: u64 = 1_764_504_000;
    const COMMAND: &str = r#"{"id":"1317192856286318623","application_id":"1317192000000000000","type":2,"token":"aW50ZXJhY3Rpb24","version":1,"data":{"id":"1317192800000000000","name":"ping","type":1}}"#;
    const COMMAND_SIG: &str = "5a26e7a97502b83dc70c75de89e1eb07345495183117ac2fdccc1e86cea40fd0390dbde3953021128ede87e0e062f057b0a7ae335d12b16ecd6cb809f785e504";
    const PING: &str = r#"{"id":"1317192856286318624","application_id":"1317192000000000000","type":1,"token":"aW50ZXJhY3Rpb24","version":1}"#;
    const PING_SIG: &str = "72f1186bcd4347450ef7918fcf5365cbd5da0702357557f459197ed4920e548ba4aef3cbe7f24dab2ccf545c1e0c90a559383b92fdfbbbce966a2c54a2294704";
    const EVENT_PING: &str = r#"{"version":1,"application_id":"1317192000000000000","type":0}"#;
    const EVENT_PING_SIG: &str = "4bc7ad2e10105d9307c34dfc5bb42784ca2648e5ad276c9bf975e9e1b8c8a455aa8fb188db2ff2d0d52ed8e93bcbd46166f33082e36f18b33d454d20a2e19907";

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

    fn verify(ts: u64, sig: &str, body: &str, now: u64) -> Result<(), VerifyError> {
        let mut headers = HeaderMap::new();
        headers.insert(TIMESTAMP, HeaderValue::from_str(&ts.to_string()).unwrap());
        headers.insert(SIGNATURE, HeaderValue::from_str(sig).unwrap());
        verifier(&[PUBLIC_KEY]).unwrap().verify(
            RequestLine::POST,
            &headers,
            body.as_bytes(),
            at(now),
        )
    }

    #[test]
    fn accepts_the_vectors_and_answers_both_pings() {
        assert_eq!(verify(TS, COMMAND_SIG, COMMAND, TS), Ok(()));
        assert_eq!(verify(TS, PING_SIG, PING, TS), Ok(()));
        assert_eq!(verify(TS, EVENT_PING_SIG, EVENT_PING, TS), Ok(()));
        let v = verifier(&[PUBLIC_KEY]).unwrap();
        assert_eq!(v.handshake(&HeaderMap::new(), COMMAND.as_bytes()), None);
        assert_eq!(
            v.handshake(&HeaderMap::new(), PING.as_bytes()),
            Some(Handshake {
                status: StatusCode::OK,
                body: Reply::Json(serde_json::json!({ "type": 1 })),
            })
        );
        assert_eq!(
            v.handshake(&HeaderMap::new(), EVENT_PING.as_bytes()),
            Some(Handshake {
                status: StatusCode::NO_CONTENT,
                body: Reply::Empty,
            })
        );
        let event = r#"{"version":1,"application_id":"1","type":1,"event":{"type":"APPLICATION_AUTHORIZED"}}"#;
        assert_eq!(
            v.handshake(&HeaderMap::new(), event.as_bytes()),
            None,
            "an event, not a ping"
        );
    }

    #[test]
    fn refuses_forgeries_and_stale_requests() {
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(verify(TS, COMMAND_SIG, PING, TS), bad, "another body");
        assert_eq!(
            verify(TS + 1, COMMAND_SIG, COMMAND, TS),
            bad,
            "timestamp signed"
        );
        assert_eq!(verify(TS, &COMMAND_SIG[2..], COMMAND, TS), bad);
        assert_eq!(
            verify(TS, COMMAND_SIG, COMMAND, TS + 301),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn the_public_key_must_be_64_hex_digits() {
        assert!(verifier(&["0123456789abcdef0123"]).is_err());
        assert!(verifier(&[&PUBLIC_KEY.replace('0', "g")]).is_err());
    }
}
