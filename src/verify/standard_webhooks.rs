//! `scheme = "standard-webhooks"`: Svix and every sender that follows the
//! Standard Webhooks specification.
//!
//! Headers `webhook-id`, `webhook-timestamp`, `webhook-signature` (or the
//! `svix-` aliases, used when the `webhook-` set is absent). The signed
//! content is `"{id}.{timestamp}.{body}"`, HMAC-SHA256; the secret is
//! `whsec_` + base64 and the decoded bytes are the key. The signature header
//! is a space-separated list of `v1,<base64>` entries: any may match, other
//! versions (`v1a`, `v2`) are skipped. Timestamp tolerance applies both ways.

use std::time::{Duration, SystemTime};

use base64::Engine;
use http::{HeaderMap, HeaderName};

use super::{single_header, Profile, Timestamped, Verifier, Verify, VerifyError, DAY, HOUR};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "standard-webhooks",
    default_key: &["header:webhook-id", "header:svix-id"],
    // Svix's schedule spans about 28 hours.
    retry_horizon: Some(Duration::from_secs(28 * HOUR)),
    default_retention: Duration::from_secs(3 * DAY),
    replay_guard: false,
    timestamped: true,
    signed_headers: &["webhook-id", "svix-id"],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(StandardWebhooksVerifier {
            secrets: spec
                .secrets
                .iter()
                .map(|secret| decode_secret(secret, spec.min_secret_bytes))
                .collect::<Result<_, _>>()?,
            tolerance: spec.tolerance,
        }))
    },
};

/// `(id, timestamp, signature)` header names, in order of preference.
static HEADER_SETS: [[HeaderName; 3]; 2] = [
    [
        HeaderName::from_static("webhook-id"),
        HeaderName::from_static("webhook-timestamp"),
        HeaderName::from_static("webhook-signature"),
    ],
    [
        HeaderName::from_static("svix-id"),
        HeaderName::from_static("svix-timestamp"),
        HeaderName::from_static("svix-signature"),
    ],
];
const MAX_SIGNATURES: usize = 8;

#[derive(Debug)]
pub struct StandardWebhooksVerifier {
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
}

/// `whsec_<base64>` (the prefix is optional, as in the reference libraries)
/// into the key bytes.
pub fn decode_secret(secret: &Secret, min_bytes: usize) -> Result<Secret, String> {
    let text = std::str::from_utf8(secret.expose()).unwrap_or_default();
    let encoded = text.strip_prefix("whsec_").unwrap_or(text);
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| {
            "a standard-webhooks secret must be \"whsec_\" followed by base64".to_owned()
        })?;
    if key.len() < min_bytes {
        return Err(format!(
            "this standard-webhooks secret decodes to {} bytes of key; at least {min_bytes} are required (use the whsec_ secret your sender generated, or lower min_secret_bytes)",
            key.len()
        ));
    }
    Ok(Secret::new(key))
}

/// The `webhook-signature` of `body` under message `id` at `timestamp`
/// (Unix seconds), signed with the decoded `key`: how hookgate signs what
/// it sends as Standard Webhooks itself (a `[[notify]]` webhook).
pub fn sign(key: &Secret, id: &str, timestamp: u64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    let parts: [&[u8]; 5] = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
    let tag = super::shared::Algorithm::Sha256.tag(key.expose(), &parts);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag)
    )
}

/// The header set a delivery is verified with: `webhook-*` when it carries a
/// `webhook-signature`, else `svix-*`.
fn header_set(headers: &HeaderMap) -> Option<&'static [HeaderName; 3]> {
    HEADER_SETS.iter().find(|set| headers.contains_key(&set[2]))
}

impl Verify for StandardWebhooksVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        let [id, timestamp, signature] =
            header_set(headers).ok_or(VerifyError::SignatureInvalid)?;
        let id = single_header(headers, id)?;
        let timestamp = single_header(headers, timestamp)?;
        let signatures: Vec<Vec<u8>> = single_header(headers, signature)?
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .collect();
        if signatures.is_empty() || signatures.len() > MAX_SIGNATURES {
            return Err(VerifyError::SignatureInvalid);
        }
        let parts: [&[u8]; 5] = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
        Timestamped {
            secrets: &self.secrets,
            parts: &parts,
            candidates: &signatures,
            timestamp,
            tolerance: self.tolerance,
        }
        .check(now)
    }

    /// The id is signed: only the id of the set that was verified may
    /// become the key, never an unsigned sibling (`webhook-id` added beside
    /// a verified `svix-*` set).
    fn signed_id(&self, headers: &HeaderMap) -> Option<&'static HeaderName> {
        header_set(headers).map(|[id, _, _]| id)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::verify::at;
    use crate::verify::MIN_SECRET_BYTES;

    // The shared vector of the Standard Webhooks reference libraries (and
    // Svix's docs, "Verifying payloads manually").
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: u64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn verifier(secrets: &[&str]) -> StandardWebhooksVerifier {
        StandardWebhooksVerifier {
            secrets: secrets
                .iter()
                .map(|s| decode_secret(&Secret::new(*s), MIN_SECRET_BYTES).unwrap())
                .collect(),
            tolerance: Duration::from_secs(300),
        }
    }

    fn headers(prefix: &str, id: &str, ts: &str, sig: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let name =
            |suffix: &str| HeaderName::from_bytes(format!("{prefix}-{suffix}").as_bytes()).unwrap();
        headers.insert(name("id"), HeaderValue::from_str(id).unwrap());
        headers.insert(name("timestamp"), HeaderValue::from_str(ts).unwrap());
        headers.insert(name("signature"), HeaderValue::from_str(sig).unwrap());
        headers
    }

    #[test]
    fn signs_the_shared_vector() {
        let key = decode_secret(&Secret::new(SECRET), MIN_SECRET_BYTES).unwrap();
        assert_eq!(sign(&key, ID, TS, BODY), SIG);
    }

    #[test]
    fn accepts_the_shared_vector_under_both_header_names() {
        let v = verifier(&["whsec_b3RoZXItc2VjcmV0LTAxMjM0NTY3OA==", SECRET]);
        let ts = TS.to_string();
        assert_eq!(
            v.verify(&headers("webhook", ID, &ts, SIG), BODY, at(TS)),
            Ok(())
        );
        assert_eq!(
            v.verify(&headers("svix", ID, &ts, SIG), BODY, at(TS)),
            Ok(())
        );
        let listed = format!("v1a,AAAA v2,BBBB v1,{} {SIG}", "A".repeat(44));
        assert_eq!(
            v.verify(&headers("webhook", ID, &ts, &listed), BODY, at(TS)),
            Ok(())
        );
    }

    #[test]
    fn tolerance_both_ways() {
        let v = verifier(&[SECRET]);
        let h = headers("webhook", ID, &TS.to_string(), SIG);
        assert_eq!(v.verify(&h, BODY, at(TS + 299)), Ok(()));
        assert_eq!(v.verify(&h, BODY, at(TS - 299)), Ok(()));
        assert_eq!(
            v.verify(&h, BODY, at(TS + 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
        assert_eq!(
            v.verify(&h, BODY, at(TS - 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn rejects_forgeries() {
        let v = verifier(&[SECRET]);
        let bad = Err(VerifyError::SignatureInvalid);
        let ts = TS.to_string();
        assert_eq!(
            v.verify(&headers("webhook", ID, &ts, SIG), b"{}", at(TS)),
            bad,
            "tampered body"
        );
        assert_eq!(
            v.verify(&headers("webhook", "msg_other", &ts, SIG), BODY, at(TS)),
            bad,
            "id is signed"
        );
        assert_eq!(
            v.verify(
                &headers(
                    "webhook",
                    ID,
                    &ts,
                    "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
                ),
                BODY,
                at(TS)
            ),
            bad,
            "v2 is skipped"
        );
        assert_eq!(
            v.verify(
                &headers(
                    "webhook",
                    ID,
                    &ts,
                    "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
                ),
                BODY,
                at(TS)
            ),
            bad,
            "no version"
        );
        assert_eq!(
            v.verify(&headers("webhook", ID, &ts, "v1,!!!"), BODY, at(TS)),
            bad,
            "bad base64"
        );
        assert_eq!(
            verifier(&["whsec_b3RoZXItc2VjcmV0LTAxMjM0NTY3OA=="]).verify(
                &headers("webhook", ID, &ts, SIG),
                BODY,
                at(TS)
            ),
            bad
        );
        let mut missing_id = headers("webhook", ID, &ts, SIG);
        missing_id.remove("webhook-id");
        assert_eq!(v.verify(&missing_id, BODY, at(TS)), bad);
        assert!(decode_secret(&Secret::new("whsec_not base64!"), MIN_SECRET_BYTES).is_err());
        for weak in ["whsec_", "whsec_dGVzdA==", ""] {
            let error = decode_secret(&Secret::new(weak), MIN_SECRET_BYTES).unwrap_err();
            assert!(error.contains("at least 16"), "{weak}: {error}");
        }
    }
}
