//! `scheme = "hubspot"`: HubSpot's v3 request signature
//! (developers.hubspot.com/docs/api/webhooks/validating-requests):
//! `X-HubSpot-Signature-v3` is the base64 HMAC-SHA256, keyed by the app's
//! client secret, of method + URI + raw body + `X-HubSpot-Request-Timestamp`
//! (Unix milliseconds). The URI is the full URL HubSpot requested — the
//! route's `public_url` plus the request's query — with the percent-encoded
//! characters HubSpot lists (`%3A` `%2F` `%3F` `%40` `%21` `%24` `%27` `%28`
//! `%29` `%2A` `%2C` `%3B`) decoded. The timestamp must be within
//! `tolerance` (HubSpot: reject anything older than 5 minutes).
//!
//! Key: HubSpot posts a batch of up to 100 events; a retry resends the
//! batch with `attemptNumber` raised. The key is the first event's
//! `eventId` + `subscriptionId` + `occurredAt` (HubSpot does not promise
//! `eventId` alone is unique), and since the attempt number changes the
//! body, a later body under the same key is a retry: `on_mismatch =
//! "replay"` by default. HubSpot retries up to 10 times over 24 hours.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::{
    check_timestamp_ms, encoded_header, hmac_verdict, single_header, Algorithm, Encoding, Profile,
    RequestLine, Verifier, Verify, VerifyError, DAY,
};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "hubspot",
    default_key: &["json:/0/eventId + json:/0/subscriptionId + json:/0/occurredAt"],
    retry_horizon: Some(Duration::from_secs(DAY)),
    default_retention: Duration::from_secs(3 * DAY),
    replay_guard: false,
    timestamped: true,
    signed_headers: &[],
    signs_url: true,
    retries_change_body: true,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(HubSpotVerifier {
            secrets: spec.secrets,
            public_url: spec
                .public_url
                .ok_or("scheme \"hubspot\" needs `public_url`")?,
            tolerance: spec.tolerance,
        }))
    },
};

const SIGNATURE: HeaderName = HeaderName::from_static("x-hubspot-signature-v3");
const TIMESTAMP: HeaderName = HeaderName::from_static("x-hubspot-request-timestamp");

/// The escapes HubSpot decodes in the URI before signing.
const DECODED: [(&str, &str); 12] = [
    ("%3A", ":"),
    ("%2F", "/"),
    ("%3F", "?"),
    ("%40", "@"),
    ("%21", "!"),
    ("%24", "$"),
    ("%27", "'"),
    ("%28", "("),
    ("%29", ")"),
    ("%2A", "*"),
    ("%2C", ","),
    ("%3B", ";"),
];

#[derive(Debug)]
struct HubSpotVerifier {
    secrets: Vec<Secret>,
    public_url: String,
    tolerance: Duration,
}

/// The URI as HubSpot signs it.
fn signed_uri(url: String) -> String {
    if !url.contains('%') {
        return url;
    }
    let mut uri = url;
    for (escape, plain) in DECODED {
        uri = uri
            .replace(escape, plain)
            .replace(&escape.to_lowercase(), plain);
    }
    uri
}

impl Verify for HubSpotVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        self.verify_line(RequestLine::POST, headers, body, now)
    }

    fn verify_line(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let timestamp = single_header(headers, &TIMESTAMP)?;
        let signature = encoded_header(headers, &SIGNATURE, Encoding::Base64)?;
        let uri = signed_uri(line.url(&self.public_url));
        let parts: [&[u8]; 4] = [
            line.method.as_str().as_bytes(),
            uri.as_bytes(),
            body,
            timestamp.as_bytes(),
        ];
        hmac_verdict(Algorithm::Sha256, &self.secrets, &parts, &[signature])?;
        // Milliseconds, unlike the other schemes' seconds.
        let millis = timestamp
            .parse()
            .map_err(|_| VerifyError::SignatureInvalid)?;
        check_timestamp_ms(millis, now, self.tolerance)
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderValue, Method};

    use super::*;

    // HubSpot documents the method, not a vector: computed independently
    // with Python's `hmac` over "POST" + URI + body + timestamp (SHA-256,
    // base64). tests/it/sdk.rs also signs live with HubSpot's own SDK.
    const SECRET: &str = "hs_client_secret_0123456789";
    const URL: &str = "https://hooks.example.com/hubspot";
    const BODY: &str = r#"[{"eventId":1682305541,"subscriptionId":2171234,"portalId":62515,"appId":1160452,"occurredAt":1764504000000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW"}]"#;
    const TS: &str = "1764504000123";
    const SIG: &str = "fK0jvPIsB537f1lqML2z5LV0umGhrxcNKFsWYXV+3zE=";
    /// The same body under `?next=a%3Ab%2Fc`, which HubSpot signs decoded.
    const ENCODED_SIG: &str = "54HU1OBDlVM0RPiln3zfeTgc2riMppxpEDzdetTk/M0=";

    fn verifier() -> HubSpotVerifier {
        HubSpotVerifier {
            secrets: vec![Secret::new(SECRET)],
            public_url: URL.to_owned(),
            tolerance: Duration::from_secs(300),
        }
    }

    fn headers(ts: &str, sig: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-hubspot-request-timestamp",
            HeaderValue::from_str(ts).unwrap(),
        );
        headers.insert(
            "x-hubspot-signature-v3",
            HeaderValue::from_str(sig).unwrap(),
        );
        headers
    }

    fn at_ms(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn post(query: Option<&str>) -> RequestLine<'_> {
        RequestLine {
            method: &Method::POST,
            query,
        }
    }

    #[test]
    fn accepts_the_vector_with_its_decoded_query() {
        let v = verifier();
        let now = at_ms(1_764_504_000_123);
        assert_eq!(
            v.verify_line(
                post(Some("portal=62515")),
                &headers(TS, SIG),
                BODY.as_bytes(),
                now
            ),
            Ok(())
        );
        assert_eq!(
            v.verify_line(
                post(Some("next=a%3Ab%2Fc")),
                &headers(TS, ENCODED_SIG),
                BODY.as_bytes(),
                now
            ),
            Ok(())
        );
    }

    #[test]
    fn method_uri_body_and_time_are_signed() {
        let v = verifier();
        let now = at_ms(1_764_504_000_123);
        let h = headers(TS, SIG);
        let bad = Err(VerifyError::SignatureInvalid);
        let query = Some("portal=62515");
        let put = RequestLine {
            method: &Method::PUT,
            query,
        };
        assert_eq!(v.verify_line(put, &h, BODY.as_bytes(), now), bad);
        assert_eq!(v.verify_line(post(None), &h, BODY.as_bytes(), now), bad);
        assert_eq!(v.verify_line(post(query), &h, b"[]", now), bad);
        assert_eq!(
            v.verify_line(
                post(query),
                &headers("1764504000124", SIG),
                BODY.as_bytes(),
                now
            ),
            bad
        );
        assert_eq!(
            v.verify_line(post(query), &h, BODY.as_bytes(), at_ms(1_764_504_300_124)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
        assert_eq!(
            v.verify_line(post(query), &h, BODY.as_bytes(), at_ms(1_764_504_300_123)),
            Ok(()),
            "exactly the tolerance"
        );
    }
}
