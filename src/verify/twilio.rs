//! `scheme = "twilio"`: `X-Twilio-Signature: <base64>`, the HMAC-SHA1 of the
//! full URL Twilio requested followed by every POST parameter, sorted by
//! name, as `name` + `value` with no separators, keyed by the account's
//! Auth Token (twilio.com/docs/usage/webhooks/webhooks-security). The URL
//! is the route's `public_url` — exactly as configured at Twilio — plus the
//! request's query.
//!
//! A JSON body (Event Streams and other `application/json` webhooks) is
//! signed differently: the URL carries `bodySHA256`, the hex SHA-256 of the
//! body, and the signature covers the URL alone; hookgate checks both.
//! Parameters are sorted, and repeated values deduplicated, the way Twilio's
//! SDKs do. List the primary and the secondary Auth Token while rotating.
//! Twilio's HMAC-SHA256 "Webhook Rules" signing is not this scheme.
//!
//! Key: the `I-Twilio-Idempotency-Token` header, the same on every retry of
//! one webhook. It is not signed, so `replay_guard = "body"` is on. Twilio
//! retries only on connection failures and what a URL's `#rc=` override
//! asks for (at most five times, seconds apart).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{
    encoded_header, hmac_verdict, Algorithm, Encoding, Profile, RequestLine, Verifier, Verify,
    VerifyError, DAY, HOUR,
};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "twilio",
    default_key: &["header:I-Twilio-Idempotency-Token"],
    retry_horizon: Some(Duration::from_secs(HOUR)),
    default_retention: Duration::from_secs(DAY),
    replay_guard: true,
    timestamped: false,
    signed_headers: &[],
    signs_url: true,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(TwilioVerifier {
            secrets: spec.secrets,
            public_url: spec
                .public_url
                .ok_or("scheme \"twilio\" needs `public_url`")?,
        }))
    },
};

const SIGNATURE: HeaderName = HeaderName::from_static("x-twilio-signature");

#[derive(Debug)]
struct TwilioVerifier {
    secrets: Vec<Secret>,
    public_url: String,
}

/// The content Twilio signs: the URL, then the sorted form parameters —
/// or, when the URL carries `bodySHA256`, the URL alone once the body
/// matches that hash.
fn signed_content(url: &str, query: Option<&str>, body: &[u8]) -> Result<String, VerifyError> {
    let body_hash = query.and_then(|query| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "bodySHA256")
            .map(|(_, value)| value.into_owned())
    });
    if let Some(expected) = body_hash {
        let actual = hex::encode(Sha256::digest(body));
        return match bool::from(actual.as_bytes().ct_eq(expected.as_bytes())) {
            true => Ok(url.to_owned()),
            false => Err(VerifyError::SignatureInvalid),
        };
    }
    let mut params: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    params.sort();
    params.dedup();
    let mut content = url.to_owned();
    for (name, value) in params {
        content.push_str(&name);
        content.push_str(&value);
    }
    Ok(content)
}

impl Verify for TwilioVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        self.verify_line(RequestLine::POST, headers, body, now)
    }

    fn verify_line(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        _: SystemTime,
    ) -> Result<(), VerifyError> {
        let signature = encoded_header(headers, &SIGNATURE, Encoding::Base64)?;
        let content = signed_content(&line.url(&self.public_url), line.query, body)?;
        hmac_verdict(
            Algorithm::Sha1,
            &self.secrets,
            &[content.as_bytes()],
            &[signature],
        )
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderValue, Method};

    use super::*;

    // The example of Twilio's webhook security docs, also the vector of
    // its SDKs' tests: Auth Token 12345, this URL and these parameters.
    const TOKEN: &str = "12345";
    const BASE: &str = "https://mycompany.com/myapp.php";
    const QUERY: &str = "foo=1&bar=2";
    const FORM: &str =
        "CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
    const SIG: &str = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";

    fn verifier(url: &str) -> TwilioVerifier {
        TwilioVerifier {
            secrets: vec![Secret::new("secondary-token-0123"), Secret::new(TOKEN)],
            public_url: url.to_owned(),
        }
    }

    fn signed(sig: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-twilio-signature", HeaderValue::from_str(sig).unwrap());
        headers
    }

    fn line(query: Option<&str>) -> RequestLine<'_> {
        RequestLine {
            method: &Method::POST,
            query,
        }
    }

    #[test]
    fn accepts_the_documented_example_in_any_parameter_order() {
        let now = crate::clock::wall();
        let v = verifier(BASE);
        assert_eq!(
            v.verify_line(line(Some(QUERY)), &signed(SIG), FORM.as_bytes(), now),
            Ok(())
        );
        let shuffled = "To=%2B18005551212&Digits=1234&From=%2B12349013030&CallSid=CA1234567890ABCDE&Caller=%2B12349013030";
        assert_eq!(
            v.verify_line(line(Some(QUERY)), &signed(SIG), shuffled.as_bytes(), now),
            Ok(())
        );
    }

    #[test]
    fn the_url_and_every_parameter_are_signed() {
        let now = crate::clock::wall();
        let bad = Err(VerifyError::SignatureInvalid);
        let v = verifier(BASE);
        assert_eq!(
            v.verify_line(line(None), &signed(SIG), FORM.as_bytes(), now),
            bad
        );
        assert_eq!(
            verifier("https://mycompany.com/other.php").verify_line(
                line(Some(QUERY)),
                &signed(SIG),
                FORM.as_bytes(),
                now
            ),
            bad
        );
        let changed = FORM.replace("Digits=1234", "Digits=1235");
        assert_eq!(
            v.verify_line(line(Some(QUERY)), &signed(SIG), changed.as_bytes(), now),
            bad
        );
        let added = format!("{FORM}&Extra=1");
        assert_eq!(
            v.verify_line(line(Some(QUERY)), &signed(SIG), added.as_bytes(), now),
            bad
        );
    }

    // A JSON body: the URL carries bodySHA256. Computed independently with
    // Python's `hashlib` and `hmac` (SHA-1 over the URL, base64).
    #[test]
    fn json_bodies_are_bound_by_their_hash() {
        let now = crate::clock::wall();
        let v = verifier("https://hooks.example.com/twilio/status");
        let body = br#"{"data":{"sid":"SM0123"}}"#;
        let query = "bodySHA256=14f17d30e2712cf5561086fe7e090eaa3dc2ee449d344c5829dff07208374082";
        let sig = signed("7hMb8RqsLj2mSUSI2z8qIp/Lt0U=");
        assert_eq!(v.verify_line(line(Some(query)), &sig, body, now), Ok(()));
        assert_eq!(
            v.verify_line(
                line(Some(query)),
                &sig,
                br#"{"data":{"sid":"SM9999"}}"#,
                now
            ),
            Err(VerifyError::SignatureInvalid),
            "the body must match bodySHA256"
        );
    }
}
