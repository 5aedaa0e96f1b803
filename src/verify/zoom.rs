//! `scheme = "zoom"`: `x-zm-signature: v0=<hex>`, the HMAC-SHA256 of
//! `"v0:{x-zm-request-timestamp}:{body}"` with the app's Secret Token
//! (developers.zoom.us/docs/api/webhooks, "Verify webhook events"); the
//! timestamp must be within `tolerance`.
//!
//! Handshake: Zoom validates the endpoint when it is saved and every 72
//! hours with a signed `endpoint.url_validation` event; the answer is 200
//! with `plainToken` and `encryptedToken`, the hex HMAC-SHA256 of the
//! plain token with the Secret Token. hookgate answers it itself (with the
//! first listed secret), so validation does not depend on the upstream and
//! nothing is claimed or forwarded.
//!
//! Key: Zoom's events carry no event id, and an event's retries resend the
//! same body, so the key is the body's SHA-256 (`body-sha256`): the same
//! for every attempt, different for every event. Zoom retries three times
//! — 5, 20 and 60 minutes after the previous attempt — when it gets no 2xx
//! within 3 seconds (developers.zoom.us/blog/webhook-delays).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, StatusCode};
use serde::Deserialize;

use super::{
    single_header, Algorithm, Handshake, Profile, Reply, Timestamped, Verifier, Verify,
    VerifyError, DAY, HOUR,
};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "zoom",
    default_key: &["body-sha256"],
    retry_horizon: Some(Duration::from_secs(2 * HOUR)),
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
        Ok(Verifier::new(ZoomVerifier(V0Verifier {
            headers: &HEADERS,
            secrets: spec.secrets,
            tolerance: spec.tolerance,
        })))
    },
};

/// Slack's `v0` signature under Zoom's header names.
static HEADERS: V0Headers = V0Headers {
    signature: HeaderName::from_static("x-zm-signature"),
    timestamp: HeaderName::from_static("x-zm-request-timestamp"),
};

#[derive(Debug)]
struct ZoomVerifier(V0Verifier);

#[derive(Deserialize)]
struct Validation {
    event: String,
    payload: ValidationPayload,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ValidationPayload {
    plain_token: String,
}

impl Verify for ZoomVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        self.0.verify(headers, body, now)
    }

    fn handshake(&self, _: &HeaderMap, body: &[u8]) -> Option<Handshake> {
        let validation: Validation = serde_json::from_slice(body).ok()?;
        if validation.event != "endpoint.url_validation" {
            return None;
        }
        let token = validation.payload.plain_token;
        let secret = self.0.secrets.first()?;
        let encrypted = Algorithm::Sha256.tag(secret.expose(), &[token.as_bytes()]);
        Some(Handshake {
            status: StatusCode::OK,
            body: Reply::Json(serde_json::json!({
                "plainToken": token,
                "encryptedToken": hex::encode(encrypted),
            })),
        })
    }
}

/// Where Zoom puts its `v0` signature and its timestamp (Slack signs the
/// same way, described as data in `senders.toml`).
#[derive(Debug)]
struct V0Headers {
    signature: HeaderName,
    timestamp: HeaderName,
}

/// `v0=<hex>`, the HMAC-SHA256 of `"v0:{timestamp}:{body}"`.
#[derive(Debug)]
struct V0Verifier {
    headers: &'static V0Headers,
    secrets: Vec<Secret>,
    tolerance: Duration,
}

impl Verify for V0Verifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        let timestamp = single_header(headers, &self.headers.timestamp)?;
        let signature = single_header(headers, &self.headers.signature)?
            .strip_prefix("v0=")
            .and_then(|hex_text| hex::decode(hex_text).ok())
            .ok_or(VerifyError::SignatureInvalid)?;
        let parts: [&[u8]; 4] = [b"v0:", timestamp.as_bytes(), b":", body];
        Timestamped {
            secrets: &self.secrets,
            parts: &parts,
            candidates: &[signature],
            timestamp,
            tolerance: self.tolerance,
        }
        .check(now)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::secret::Secret;
    use crate::verify::at;

    // Zoom documents the method, not a vector: computed independently with
    // Python's `hmac` over "v0:{ts}:{body}" (SHA-256, hex), and for the
    // validation answer over the plain token.
    const SECRET: &str = "zm_secret_token_0123456789";
    const TS: u64 = 1_764_504_000;
    const BODY: &str = r#"{"event":"meeting.started","event_ts":1764504000123,"payload":{"account_id":"AAAAAAAAAAAAAAAAAAAAAA","object":{"id":"85746065432","uuid":"4444AAAiAAAAAiAiAiiAii==","topic":"Standup"}}}"#;
    const SIG: &str = "v0=533844609c412a05ea0cb183d0cf262b6266458c0994f007c2368526b7228232";
    const VALIDATION: &str = r#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1764504000456,"event":"endpoint.url_validation"}"#;
    const VALIDATION_SIG: &str =
        "v0=a0fc605ae09fb3578015477c0c2c3c531991de328d4f12db9f99a263ab04a1ac";
    const ENCRYPTED: &str = "ae4d128164db567b125edd02bccc69a6b8a2953fe70711fb147d2678fefd46c7";

    fn verifier() -> ZoomVerifier {
        ZoomVerifier(V0Verifier {
            headers: &HEADERS,
            secrets: vec![Secret::new(SECRET)],
            tolerance: Duration::from_secs(300),
        })
    }

    fn headers(ts: &str, sig: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-zm-request-timestamp", HeaderValue::from_str(ts).unwrap());
        headers.insert("x-zm-signature", HeaderValue::from_str(sig).unwrap());
        headers
    }

    #[test]
    fn accepts_the_vector_and_is_no_handshake() {
        let v = verifier();
        let ts = TS.to_string();
        assert_eq!(
            v.verify(&headers(&ts, SIG), BODY.as_bytes(), at(TS)),
            Ok(())
        );
        assert_eq!(v.handshake(&HeaderMap::new(), BODY.as_bytes()), None);
    }

    #[test]
    fn answers_the_url_validation() {
        let v = verifier();
        let h = headers(&TS.to_string(), VALIDATION_SIG);
        assert_eq!(v.verify(&h, VALIDATION.as_bytes(), at(TS)), Ok(()));
        let answer = v
            .handshake(&HeaderMap::new(), VALIDATION.as_bytes())
            .expect("a handshake");
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.body,
            Reply::Json(serde_json::json!({
                "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
                "encryptedToken": ENCRYPTED,
            }))
        );
    }

    #[test]
    fn refuses_forgeries_and_stale_requests() {
        let v = verifier();
        let ts = TS.to_string();
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(v.verify(&headers(&ts, SIG), b"{}", at(TS)), bad);
        assert_eq!(
            v.verify(
                &headers(&(TS + 1).to_string(), SIG),
                BODY.as_bytes(),
                at(TS)
            ),
            bad,
            "the timestamp is signed"
        );
        assert_eq!(
            v.verify(&headers(&ts, &SIG[3..]), BODY.as_bytes(), at(TS)),
            bad
        );
        assert_eq!(
            v.verify(&headers(&ts, SIG), BODY.as_bytes(), at(TS + 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }
}
