//! `scheme = "mailgun"`: the signature travels in the body
//! (documentation.mailgun.com, "Securing Webhooks"): `signature.timestamp`,
//! `signature.token` and `signature.signature`, the hex HMAC-SHA256 of
//! `timestamp + token` with the domain's HTTP webhook signing key. A JSON
//! body carries them under `signature`; a legacy form-encoded body as the
//! fields `timestamp`, `token` and `signature`. `timestamp` must be within
//! `tolerance`.
//!
//! What that proves, honestly: Mailgun signed *a* request at that time — the
//! event data itself is not covered. A captured signature block could be
//! replayed with other event data until `tolerance` runs out; keep
//! `tolerance` short (the default 5 minutes) and the endpoint on TLS.
//!
//! Key: the event's `event-data.id`, the same on every retry, then the
//! legacy form's `token`. The signature block may be new on each attempt,
//! so a later body under the same id is a retry: `on_mismatch = "replay"`
//! by default. Mailgun retries for 8 hours (5, 10, 15 minutes, 1, 2, 4
//! hours) unless the endpoint answers 406.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use serde::Deserialize;

use super::{Profile, Timestamped, Verifier, Verify, VerifyError, DAY, HOUR};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "mailgun",
    default_key: &["json:/event-data/id", "form:token"],
    retry_horizon: Some(Duration::from_secs(8 * HOUR)),
    default_retention: Duration::from_secs(2 * DAY),
    replay_guard: false,
    timestamped: true,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: true,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(MailgunVerifier {
            secrets: spec.secrets,
            tolerance: spec.tolerance,
        }))
    },
};

#[derive(Debug)]
struct MailgunVerifier {
    secrets: Vec<Secret>,
    tolerance: Duration,
}

/// The signature block, wherever the body carries it.
#[derive(Debug, Default, Deserialize)]
struct Block {
    timestamp: String,
    token: String,
    signature: String,
}

#[derive(Deserialize)]
struct JsonBody {
    signature: Block,
}

impl Block {
    fn from_body(body: &[u8]) -> Option<Block> {
        if body.first() == Some(&b'{') {
            return serde_json::from_slice::<JsonBody>(body)
                .ok()
                .map(|json| json.signature);
        }
        let mut block = Block::default();
        let mut seen = [false; 3];
        for (name, value) in form_urlencoded::parse(body) {
            let (slot, field) = match name.as_ref() {
                "timestamp" => (0, &mut block.timestamp),
                "token" => (1, &mut block.token),
                "signature" => (2, &mut block.signature),
                _ => continue,
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None; // a repeated field is not Mailgun's
            }
            *field = value.into_owned();
        }
        seen.iter().all(|s| *s).then_some(block)
    }
}

impl Verify for MailgunVerifier {
    fn verify(&self, _: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        let block = Block::from_body(body).ok_or(VerifyError::SignatureInvalid)?;
        let signature = hex::decode(&block.signature).map_err(|_| VerifyError::SignatureInvalid)?;
        let parts: [&[u8]; 2] = [block.timestamp.as_bytes(), block.token.as_bytes()];
        Timestamped {
            secrets: &self.secrets,
            parts: &parts,
            candidates: &[signature],
            timestamp: &block.timestamp,
            tolerance: self.tolerance,
        }
        .check(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::at;

    // Mailgun's docs show the method with a placeholder signature; this
    // vector is computed independently with Python's `hmac` over
    // `timestamp + token` (SHA-256, hex).
    const KEY: &str = "key-mg-signing-0123456789abcdef";
    const TS: u64 = 1_764_504_000;
    const TOKEN: &str = "e0b5477167110d68991efc6b9f89f0a11066af27834600e123";
    const SIGNATURE: &str = "2e2d9cce0550324a0400e51fbdaf0ca9aea6f183a051d44a7c5448827a624088";
    const BODY: &str = r#"{"signature":{"token":"e0b5477167110d68991efc6b9f89f0a11066af27834600e123","timestamp":"1764504000","signature":"2e2d9cce0550324a0400e51fbdaf0ca9aea6f183a051d44a7c5448827a624088"},"event-data":{"id":"CPgfbmQMTCKtHW6uIWtuVe","event":"delivered","timestamp":1764504000.123,"recipient":"alice@example.com"}}"#;

    fn verifier() -> MailgunVerifier {
        MailgunVerifier {
            secrets: vec![Secret::new(KEY)],
            tolerance: Duration::from_secs(300),
        }
    }

    #[test]
    fn accepts_the_vector_as_json_and_as_a_form() {
        let v = verifier();
        let headers = HeaderMap::new();
        assert_eq!(v.verify(&headers, BODY.as_bytes(), at(TS + 10)), Ok(()));
        let form = format!(
            "event=delivered&timestamp={TS}&token={TOKEN}&signature={SIGNATURE}&recipient=alice%40example.com"
        );
        assert_eq!(v.verify(&headers, form.as_bytes(), at(TS)), Ok(()));
    }

    #[test]
    fn refuses_forgeries_and_stale_blocks() {
        let v = verifier();
        let headers = HeaderMap::new();
        let bad = Err(VerifyError::SignatureInvalid);
        let other_token = BODY.replace("e0b5477167", "f0b5477167");
        assert_eq!(v.verify(&headers, other_token.as_bytes(), at(TS)), bad);
        let other_ts = BODY.replace("\"1764504000\"", "\"1764504001\"");
        assert_eq!(v.verify(&headers, other_ts.as_bytes(), at(TS)), bad);
        assert_eq!(v.verify(&headers, b"{\"event-data\":{}}", at(TS)), bad);
        assert_eq!(v.verify(&headers, b"token=x", at(TS)), bad);
        let repeated =
            format!("timestamp={TS}&token={TOKEN}&signature={SIGNATURE}&signature={SIGNATURE}");
        assert_eq!(v.verify(&headers, repeated.as_bytes(), at(TS)), bad);
        assert_eq!(
            v.verify(&headers, BODY.as_bytes(), at(TS + 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }
}
