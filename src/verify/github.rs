//! `scheme = "github"`: `X-Hub-Signature-256: sha256=<hex>`, an HMAC-SHA256
//! of the body. The legacy SHA-1 `X-Hub-Signature` is not accepted.
//!
//! The signature covers the body only; the default key
//! (`X-GitHub-Delivery`) is unsigned, which is why `replay_guard = "body"` is
//! on by default for this scheme.

use std::time::Duration;

use http::HeaderName;

use super::{Algorithm, Encoding, HmacOptions, HmacVerifier, Profile, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "github",
    default_key: &["header:X-GitHub-Delivery"],
    // Manual redelivery from the dashboard is possible for 3 days.
    retry_horizon: Some(Duration::from_secs(72 * HOUR)),
    default_retention: Duration::from_secs(7 * DAY),
    replay_guard: true,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    on_missing_key: OnMissingKey::Reject,
    build: |spec| HmacVerifier::from_spec(options(), spec),
};

fn options() -> HmacOptions {
    HmacOptions {
        header: HeaderName::from_static("x-hub-signature-256"),
        algorithm: Algorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: "sha256=".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;
    use crate::secret::Secret;
    use crate::verify::VerifyError;

    fn verifier(secrets: Vec<Secret>) -> HmacVerifier {
        HmacVerifier {
            options: options(),
            secrets,
        }
    }

    // GitHub's documented example ("Validating webhook deliveries", docs.github.com):
    // secret "It's a Secret to Everybody", payload "Hello, World!".
    const SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn accepts_the_documented_vector() {
        let v = verifier(vec![
            Secret::new("wrong"),
            Secret::new("It's a Secret to Everybody"),
        ]);
        let ok = headers("X-Hub-Signature-256", SIGNATURE);
        assert_eq!(v.verify(&ok, b"Hello, World!"), Ok(()));
    }

    #[test]
    fn rejects_forgeries() {
        let v = verifier(vec![Secret::new("It's a Secret to Everybody")]);
        let bad = Err(VerifyError::SignatureInvalid);
        let ok = headers("x-hub-signature-256", SIGNATURE);
        assert_eq!(v.verify(&ok, b"Hello, World?"), bad, "tampered body");
        let bare = headers("x-hub-signature-256", &SIGNATURE[7..]);
        assert_eq!(
            v.verify(&bare, b"Hello, World!"),
            bad,
            "bare hex without sha256="
        );
        let sha1 = headers(
            "x-hub-signature",
            "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59",
        );
        assert_eq!(
            v.verify(&sha1, b"Hello, World!"),
            bad,
            "legacy SHA-1 header"
        );
        let wrong_secret = verifier(vec![Secret::new("It's a secret to everybody")]);
        assert_eq!(wrong_secret.verify(&ok, b"Hello, World!"), bad);
    }
}
