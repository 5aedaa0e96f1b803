//! The catalogue of senders (`hookgate check --senders`, and the table in
//! docs/reference/senders.md, which a test keeps equal to it): one row per profile
//! this binary ships — its scheme name, what is verified, the default key,
//! how long the sender retries, the default retention, and what shows the
//! profile right — and the check every vector gets ([`check_vector`]).

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::described::Signer;
use super::{Catalogue, Profile, RawVector, RequestLine, VerifySpec, PROFILES, SENDERS};
use crate::clock::humanize;
use crate::secret::Secret;

/// The catalogue as a Markdown table.
pub fn catalogue() -> String {
    let shipped: Catalogue = toml::from_str(SENDERS).expect("senders.toml parses");
    let mut table = String::from(
        "| sender (`scheme`) | verified | default key | retries for | default `retention` | evidence |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut profiles: Vec<&Profile> = PROFILES.iter().copied().collect();
    profiles.sort_by_key(|profile| profile.name);
    for profile in profiles {
        let raw = shipped.schemes.iter().find(|raw| raw.name == profile.name);
        let file = format!("`src/verify/{}.rs`", profile.name.replace('-', "_"));
        let verified = match (
            profile.described,
            raw.and_then(|raw| raw.builds_on.as_deref()),
        ) {
            (Some(described), _) => described.describe(),
            (None, Some(base)) => format!("as `{base}`"),
            (None, None) => match profile.name {
                "hmac" => "as configured: HMAC of the body".to_owned(),
                "none" => "nothing".to_owned(),
                _ => format!("code: {file}"),
            },
        };
        let key = match profile.default_key {
            [] => "set `key`".to_owned(),
            sources => (sources.iter())
                .map(|source| format!("`{source}`"))
                .collect::<Vec<_>>()
                .join(", then "),
        };
        let evidence = match raw.and_then(|raw| raw.evidence.as_deref()) {
            Some(kind) if profile.described.is_some_and(|d| d.signer == Signer::Token) => {
                format!("{kind} vector, `senders.toml` (a token binds no body)")
            }
            Some(kind) => format!("{kind} vector, `senders.toml`"),
            None if ["hmac", "none"].contains(&profile.name) => "—".to_owned(),
            None => format!("tests in {file}"),
        };
        let _ = writeln!(
            table,
            "| {} | {} | {key} | {} | {} | {evidence} |",
            profile.name,
            // A `|` in a cell, even in code, would end it.
            verified.replace('|', "\\|"),
            match profile.retry_horizon {
                None => "unknown".to_owned(),
                Some(Duration::ZERO) => "no retries".to_owned(),
                Some(horizon) => humanize(horizon),
            },
            humanize(profile.default_retention),
        );
    }
    table
}

/// Whether `vector` verifies under `profile` — and neither the same
/// delivery with a byte added to its body (unless the scheme is a token,
/// which binds no body) nor one under another secret does: the check every
/// shipped vector gets, and a config's too.
pub fn check_vector(profile: &Profile, vector: &RawVector) -> Result<(), String> {
    let mut headers = HeaderMap::new();
    for (name, value) in &vector.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a header name"))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| format!("the value of {name} is not a header value"))?;
        headers.append(name, value);
    }
    let verify = |secret: &str, body: &[u8]| -> Result<(), String> {
        let spec = VerifySpec {
            secrets: vec![Secret::new(secret)],
            tolerance: super::DEFAULT_TOLERANCE,
            hmac: None,
            public_url: vector.url.clone(),
            params: vector.params.clone(),
            min_secret_bytes: 1,
            handshake_token: None,
            fetch: None,
            topics: vec![],
        };
        let verifier = profile.verifier(spec, false)?;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(vector.at.unwrap_or(0));
        (verifier.verify(RequestLine::POST, &headers, body, now)).map_err(|error| error.to_string())
    };
    verify(&vector.secret, vector.body.as_bytes())
        .map_err(|error| format!("does not verify: {error}"))?;
    // A token binds no body: only the other secret can fail it.
    let token = profile.described.is_some_and(|d| d.signer == Signer::Token);
    let changed = [vector.body.as_bytes(), b" "].concat();
    if !token && verify(&vector.secret, &changed).is_ok() {
        return Err("verifies with a byte added to its body".into());
    }
    // Another key of the same kind: for a public key, a valid one.
    let other = match profile.described {
        Some(described) if described.signer.is_asymmetric() => {
            unrelated_key(described.signer).to_owned()
        }
        Some(described) if described.secret_encoding.is_some() => {
            let encoding = described.secret_encoding.expect("checked");
            encoding.encode(b"another key, not the vector's")
        }
        _ => format!("{}x", vector.secret),
    };
    if verify(&other, vector.body.as_bytes()).is_ok() {
        return Err("verifies under another secret".into());
    }
    Ok(())
}

/// A valid public key of `signer`'s kind that no vector is signed under
/// (Ed25519 of the seed 2a 2a … 2a; SendGrid's documented P-256 key; a
/// 2048-bit RSA key whose private half was thrown away); for an HMAC or a
/// token, a secret.
pub(crate) fn unrelated_key(signer: Signer) -> &'static str {
    match signer {
        Signer::Ed25519 => "197f6b23e16c8532c6abc838facd5ea789be0c76b2920334039bfa8b3d368d61",
        Signer::EcdsaP256 => "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==",
        Signer::RsaPkcs1Sha256 | Signer::RsaPssSha256 => "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA02h0+lEPWgf8JNgTJA96Ln7zVozvxuZ/TLPHijonOJleFt3uwUW0i2l0czPelag9E5Skd/jFaPs5eeRaZgAv4HvtV0HHrOeiw3xSQ+hK9YntDAGv/coQSR5cIcLjiQGrImb9nFL8TCVVe1QpBADbz5ctfeIEqtpEuobNY5e4b2WsnVUv6rly/2v94d7mRfJUt7EdxEHhpWNuePc/OFi/EJHIAnv3nB1ajf0fJF6ogZ+yUxeDq1CZZHTd3ytpe9+yZhgyzop3DWac3e1l+0YS+alsYm1+3+e5H/0BK0Dj8b1hF5aGdMPVwxlPxv1+AeYKxr1HMDqiZ+O8fLQVVyN3bQIDAQAB",
        Signer::Hmac(_) | Signer::Token => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::RawScheme;

    fn shipped() -> Vec<RawScheme> {
        toml::from_str::<Catalogue>(SENDERS).unwrap().schemes
    }

    #[test]
    fn every_shipped_description_has_its_evidence_and_its_vectors_verify() {
        for raw in shipped() {
            let name = &raw.name;
            let profile = Profile::named(name).unwrap_or_else(|| panic!("{name} is listed"));
            assert!(
                raw.docs
                    .as_deref()
                    .is_some_and(|d| d.starts_with("https://")),
                "{name}"
            );
            let evidence = raw.evidence.as_deref().unwrap_or_default();
            assert!(
                ["official", "sdk", "computed"].contains(&evidence),
                "{name}: {evidence:?}"
            );
            assert!(!raw.vectors.is_empty(), "{name} has no vector");
            for vector in &raw.vectors {
                check_vector(profile, vector).unwrap_or_else(|error| panic!("{name}: {error}"));
            }
        }
    }

    #[test]
    fn a_name_is_one_sender() {
        let mut names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a sender is listed twice");
    }

    #[test]
    fn the_docs_catalogue_is_the_compiled_one() {
        let docs = include_str!("../../docs/reference/senders.md");
        let table = catalogue();
        assert!(
            docs.contains(&table),
            "docs/reference/senders.md is stale: paste `hookgate check --senders` into it:\n{table}"
        );
    }

    /// The count the README and the guide give is the catalogue's.
    #[test]
    fn the_readme_counts_the_catalogue() {
        let named = (PROFILES.iter())
            .filter(|profile| !["hmac", "none"].contains(&profile.name))
            .count();
        assert!(named >= 120, "{named} named senders");
        let said = format!("{named} named senders");
        for (file, text) in [
            ("README.md", include_str!("../../README.md")),
            (
                "docs/guide/senders.md",
                include_str!("../../docs/guide/senders.md"),
            ),
        ] {
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(flat.contains(&said), "{file} should say {said:?}");
        }
    }
}
