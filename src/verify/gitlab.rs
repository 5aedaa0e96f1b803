//! `scheme = "gitlab"`: GitLab's webhook secret token
//! (docs.gitlab.com/user/project/integrations/webhooks/ — "Secret token"):
//! GitLab sends the token configured on the hook, as is, in
//! `X-Gitlab-Token`. It is a shared token, not an HMAC: it proves who sent
//! the request, not what the body was, so anything able to read one
//! delivery could send others with it. hookgate compares it in constant time
//! against every listed secret (rotation: list old and new).
//!
//! Key: `Idempotency-Key`, which GitLab sends since 17.4 and keeps across
//! resends of the same event (gitlab-org/gitlab!160952), then
//! `X-Gitlab-Event-UUID` for older instances. Neither header is covered by
//! anything verified, so `replay_guard = "body"` is on by default, as for
//! GitHub. GitLab does not retry a failed delivery on its own; the hook's
//! "Recent events" page resends one by hand, for two days.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::{single_header, token_verdict, Profile, Verifier, Verify, VerifyError, DAY};
use crate::key::OnMissingKey;
use crate::secret::Secret;

pub static PROFILE: Profile = Profile {
    name: "gitlab",
    default_key: &["header:Idempotency-Key", "header:X-Gitlab-Event-UUID"],
    retry_horizon: Some(Duration::from_secs(2 * DAY)),
    default_retention: Duration::from_secs(7 * DAY),
    replay_guard: true,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: false,
    described: None,
    build: |spec| {
        Ok(Verifier::new(TokenVerifier {
            secrets: spec.secrets,
        }))
    },
};

const TOKEN: HeaderName = HeaderName::from_static("x-gitlab-token");

#[derive(Debug)]
struct TokenVerifier {
    secrets: Vec<Secret>,
}

impl Verify for TokenVerifier {
    fn verify(&self, headers: &HeaderMap, _: &[u8], _: SystemTime) -> Result<(), VerifyError> {
        let presented = single_header(headers, &TOKEN)?.as_bytes();
        token_verdict(&[presented], &self.secrets)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::verify::at;

    fn verifier(secrets: &[&str]) -> TokenVerifier {
        TokenVerifier {
            secrets: secrets.iter().map(|s| Secret::new(*s)).collect(),
        }
    }

    fn token(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-gitlab-token", HeaderValue::from_bytes(value).unwrap());
        headers
    }

    // No vector is published: the token is sent verbatim (the docs' own
    // description), so this is the whole of the check.
    #[test]
    fn the_configured_token_passes_and_any_other_fails() {
        let v = verifier(&["old-token-0123456789", "new-token-0123456789"]);
        let now = at(0);
        assert_eq!(
            v.verify(&token(b"new-token-0123456789"), b"{}", now),
            Ok(())
        );
        assert_eq!(
            v.verify(&token(b"old-token-0123456789"), b"{}", now),
            Ok(()),
            "rotation"
        );
        let bad = Err(VerifyError::SignatureInvalid);
        assert_eq!(
            v.verify(&token(b"new-token-012345678"), b"{}", now),
            bad,
            "a prefix"
        );
        assert_eq!(
            v.verify(&token(b"new-token-01234567890"), b"{}", now),
            bad,
            "longer"
        );
        assert_eq!(v.verify(&token(b""), b"{}", now), bad);
        assert_eq!(v.verify(&HeaderMap::new(), b"{}", now), bad, "no token");
        let mut twice = token(b"new-token-0123456789");
        twice.append(
            "x-gitlab-token",
            HeaderValue::from_static("new-token-0123456789"),
        );
        assert_eq!(v.verify(&twice, b"{}", now), bad, "repeated header");
    }
}
