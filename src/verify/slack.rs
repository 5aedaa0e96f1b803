//! `scheme = "slack"`: `X-Slack-Signature: v0=<hex>` over
//! `"v0:{X-Slack-Request-Timestamp}:{body}"`, HMAC-SHA256 with the app's
//! signing secret; the timestamp must be within `tolerance` both ways.
//! Zoom signs the same way under its own header names ([`V0Verifier`]).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::{single_header, Profile, Timestamped, Verifier, Verify, VerifyError, DAY, HOUR};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "slack",
    default_key: &["json:/event_id"],
    // The Events API retries 3 times within about an hour.
    retry_horizon: Some(Duration::from_secs(HOUR)),
    default_retention: Duration::from_secs(DAY),
    replay_guard: false,
    timestamped: true,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    on_missing_key: OnMissingKey::Forward,
    described: None,
    build: |spec| {
        Ok(Verifier::new(V0Verifier {
            headers: &SLACK,
            secrets: spec.secrets,
            tolerance: spec.tolerance,
        }))
    },
};

/// Where a `v0` sender puts its signature and its timestamp.
#[derive(Debug)]
pub struct V0Headers {
    pub signature: HeaderName,
    pub timestamp: HeaderName,
}

static SLACK: V0Headers = V0Headers {
    signature: HeaderName::from_static("x-slack-signature"),
    timestamp: HeaderName::from_static("x-slack-request-timestamp"),
};

/// `v0=<hex>`, the HMAC-SHA256 of `"v0:{timestamp}:{body}"`.
#[derive(Debug)]
pub struct V0Verifier {
    pub headers: &'static V0Headers,
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
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
    use crate::verify::at;

    // Slack's documented example ("Verifying requests from Slack", api.slack.com).
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: u64 = 1_531_420_618;
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn verifier() -> V0Verifier {
        V0Verifier {
            headers: &SLACK,
            secrets: vec![Secret::new(SECRET)],
            tolerance: Duration::from_secs(300),
        }
    }

    fn headers(ts: &str, sig: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "X-Slack-Request-Timestamp",
            HeaderValue::from_str(ts).unwrap(),
        );
        headers.insert("X-Slack-Signature", HeaderValue::from_str(sig).unwrap());
        headers
    }

    #[test]
    fn accepts_the_documented_example() {
        assert_eq!(
            verifier().verify(&headers(&TS.to_string(), SIG), BODY.as_bytes(), at(TS)),
            Ok(())
        );
    }

    #[test]
    fn tolerance_both_ways() {
        let h = headers(&TS.to_string(), SIG);
        let v = verifier();
        assert_eq!(v.verify(&h, BODY.as_bytes(), at(TS + 299)), Ok(()));
        assert_eq!(v.verify(&h, BODY.as_bytes(), at(TS - 299)), Ok(()));
        assert_eq!(
            v.verify(&h, BODY.as_bytes(), at(TS + 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
        assert_eq!(
            v.verify(&h, BODY.as_bytes(), at(TS - 301)),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn rejects_forgeries() {
        let v = verifier();
        let bad = Err(VerifyError::SignatureInvalid);
        let ts = TS.to_string();
        assert_eq!(v.verify(&headers(&ts, SIG), b"token=other", at(TS)), bad);
        assert_eq!(
            v.verify(
                &headers(&(TS + 1).to_string(), SIG),
                BODY.as_bytes(),
                at(TS)
            ),
            bad,
            "timestamp is signed"
        );
        assert_eq!(
            v.verify(&headers(&ts, &SIG[3..]), BODY.as_bytes(), at(TS)),
            bad,
            "no v0= prefix"
        );
        assert_eq!(
            v.verify(&headers(&ts, "v0=xyz"), BODY.as_bytes(), at(TS)),
            bad
        );
        let mut missing = headers(&ts, SIG);
        missing.remove("x-slack-request-timestamp");
        assert_eq!(v.verify(&missing, BODY.as_bytes(), at(TS)), bad);
    }
}
