//! `scheme = "hmac"`: a generic HMAC over the raw body for senders without a
//! named convention. The operator names the header, the digest, the encoding
//! and an optional literal prefix (`sha256=`).

use std::time::{Duration, SystemTime};

use base64::Engine;
use http::{HeaderMap, HeaderName};

use super::{
    hmac_verdict, single_header, Algorithm, Profile, Verifier, Verify, VerifyError, VerifySpec, DAY,
};
use crate::key::OnMissingKey;
use crate::secret::Secret;

/// A sender without a named convention: the operator chooses the key.
pub static PROFILE: Profile = Profile {
    name: "hmac",
    default_key: &[],
    retry_horizon: None,
    default_retention: Duration::from_secs(7 * DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |mut spec| {
        let options = spec
            .hmac
            .take()
            .ok_or("scheme \"hmac\" needs its header options")?;
        HmacVerifier::from_spec(options, spec)
    },
};

/// How the signature bytes are written in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
    /// URL-safe base64, padded or not (Sanity).
    Base64Url,
    /// The text as it is: a token sent whole (Telegram's).
    Plain,
}

impl Encoding {
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(bytes),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
            Encoding::Base64Url => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
            Encoding::Plain => String::from_utf8_lossy(bytes).into_owned(),
        }
    }

    pub fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Encoding::Hex => hex::decode(text).ok(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.decode(text).ok(),
            Encoding::Base64Url => (base64::engine::general_purpose::URL_SAFE_NO_PAD)
                .decode(text.trim_end_matches('='))
                .ok(),
            Encoding::Plain => Some(text.as_bytes().to_vec()),
        }
    }
}

/// Where and how a body-only HMAC is written: the operator's settings for
/// `scheme = "hmac"`, fixed ones for the senders that use this shape.
#[derive(Debug, Clone)]
pub struct HmacOptions {
    pub header: HeaderName,
    pub algorithm: Algorithm,
    pub encoding: Encoding,
    /// A literal prefix before the encoded signature (`sha256=`).
    pub prefix: String,
}

/// An HMAC over the raw body: `hmac`, and `github` / `shopify`, which are
/// fixed instances of it.
#[derive(Debug, Clone)]
pub struct HmacVerifier {
    pub options: HmacOptions,
    pub secrets: Vec<Secret>,
}

impl HmacVerifier {
    /// A verifier with `options` (the operator's for `hmac`, fixed ones for
    /// GitHub and Shopify), keyed by the route's secrets.
    pub(super) fn from_spec(options: HmacOptions, spec: VerifySpec) -> Result<Verifier, String> {
        Ok(Verifier::new(HmacVerifier {
            options,
            secrets: spec.secrets,
        }))
    }

    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        let options = &self.options;
        let value = single_header(headers, &options.header)?;
        let encoded = value
            .strip_prefix(options.prefix.as_str())
            .ok_or(VerifyError::SignatureInvalid)?;
        let signature = options
            .encoding
            .decode(encoded)
            .ok_or(VerifyError::SignatureInvalid)?;
        hmac_verdict(options.algorithm, &self.secrets, &[body], &[signature])
    }
}

impl Verify for HmacVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<(), VerifyError> {
        HmacVerifier::verify(self, headers, body)
    }

    fn signature_header(&self) -> Option<&HeaderName> {
        Some(&self.options.header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn verifier(encoding: Encoding, prefix: &str) -> HmacVerifier {
        HmacVerifier {
            options: HmacOptions {
                header: HeaderName::from_static("x-signature"),
                algorithm: Algorithm::Sha256,
                encoding,
                prefix: prefix.to_owned(),
            },
            secrets: vec![
                Secret::new("old"),
                Secret::new("It's a Secret to Everybody"),
            ],
        }
    }

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-signature", HeaderValue::from_str(value).unwrap());
        headers
    }

    // GitHub's documented test vector: secret "It's a Secret to Everybody",
    // payload "Hello, World!".
    const BODY: &[u8] = b"Hello, World!";
    const HEX: &str = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn accepts_a_known_vector_with_any_secret() {
        let v = verifier(Encoding::Hex, "sha256=");
        assert_eq!(v.verify(&headers(&format!("sha256={HEX}")), BODY), Ok(()));
    }

    #[test]
    fn accepts_base64_and_sha512() {
        let bytes = hex::decode(HEX).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        assert_eq!(
            verifier(Encoding::Base64, "").verify(&headers(&b64), BODY),
            Ok(())
        );

        let mut v = verifier(Encoding::Hex, "");
        v.options.algorithm = Algorithm::Sha512;
        assert!(v.verify(&headers(HEX), BODY).is_err());
    }

    #[test]
    fn rejects_tampering_and_malformed_headers() {
        let v = verifier(Encoding::Hex, "sha256=");
        let bad = VerifyError::SignatureInvalid;
        assert_eq!(
            v.verify(&headers(&format!("sha256={HEX}")), b"Hello, World?"),
            Err(bad)
        );
        assert_eq!(v.verify(&headers(HEX), BODY), Err(bad), "prefix missing");
        assert_eq!(v.verify(&headers("sha256=zz"), BODY), Err(bad), "bad hex");
        assert_eq!(v.verify(&headers("sha256="), BODY), Err(bad), "empty");
        assert_eq!(v.verify(&HeaderMap::new(), BODY), Err(bad), "missing");
        let huge = format!("sha256={}", "a".repeat(10_000));
        assert_eq!(v.verify(&headers(&huge), BODY), Err(bad), "oversized");

        let mut twice = headers(&format!("sha256={HEX}"));
        twice.append("x-signature", HeaderValue::from_static("sha256=00"));
        assert_eq!(v.verify(&twice, BODY), Err(bad), "duplicated header");
    }
}
