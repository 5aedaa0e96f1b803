//! The catalogue of senders (`hookgate check --senders`, and the table in
//! docs/senders.md, which a test keeps equal to it): one row per profile
//! this binary ships — its scheme name, what is verified, the default key,
//! how long the sender retries, the default retention, and what shows the
//! profile right — and the check every vector gets ([`check_vector`]).

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

use super::described::Piece;
use super::{
    Algorithm, Catalogue, Encoding, Profile, RawVector, RequestLine, VerifySpec, PROFILES, SENDERS,
};
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
            (Some(described), _) => {
                let digest = match described.algorithm {
                    Algorithm::Sha1 => "HMAC-SHA1",
                    Algorithm::Sha256 => "HMAC-SHA256",
                    Algorithm::Sha512 => "HMAC-SHA512",
                };
                let encoding = match described.encoding {
                    Encoding::Hex => "hex",
                    Encoding::Base64 => "base64",
                };
                let signed: String = (described.signed.iter())
                    .map(|piece| match piece {
                        Piece::Body => "{body}".to_owned(),
                        Piece::Url => "{url}".to_owned(),
                        Piece::Header(name) => format!("{{{name}}}"),
                        Piece::Literal(text) => text.clone(),
                    })
                    .collect();
                let stamp = match &described.timestamp {
                    Some((name, _)) => format!("; `{name}` within `tolerance`"),
                    None => String::new(),
                };
                let handshake = (described.challenge.as_ref())
                    .map(|challenge| format!("; handshake: {}", challenge.describe()))
                    .unwrap_or_default();
                format!(
                    "`{}: {}<{encoding}>`, {digest} of `{signed}`{stamp}{handshake}",
                    described.header, described.prefix
                )
            }
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
            Some(kind) => format!("{kind} vector, `senders.toml`"),
            None if ["hmac", "none"].contains(&profile.name) => "—".to_owned(),
            None => format!("tests in {file}"),
        };
        let _ = writeln!(
            table,
            "| {} | {verified} | {key} | {} | {} | {evidence} |",
            profile.name,
            profile.retry_horizon.map_or("unknown".to_owned(), spoken),
            spoken(profile.default_retention),
        );
    }
    table
}

/// Whether `vector` verifies under `profile` — and neither the same
/// delivery with a byte added to its body nor one under another secret
/// does: the check every shipped vector gets, and a config's too.
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
            min_secret_bytes: 1,
            handshake_token: None,
        };
        let verifier = profile.verifier(spec, false)?;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(vector.at.unwrap_or(0));
        (verifier.verify(RequestLine::POST, &headers, body, now)).map_err(|error| error.to_string())
    };
    verify(&vector.secret, vector.body.as_bytes())
        .map_err(|error| format!("does not verify: {error}"))?;
    let changed = [vector.body.as_bytes(), b" "].concat();
    if verify(&vector.secret, &changed).is_ok() {
        return Err("verifies with a byte added to its body".into());
    }
    let other = format!("{}x", vector.secret);
    if verify(&other, vector.body.as_bytes()).is_ok() {
        return Err("verifies under another secret".into());
    }
    Ok(())
}

/// `3d`, `4h`, `90m`, `0` (no retries).
fn spoken(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0 => "no retries".to_owned(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s => format!("{}m", s / 60),
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
        let docs = include_str!("../../docs/senders.md");
        let table = catalogue();
        assert!(
            docs.contains(&table),
            "docs/senders.md is stale: paste `hookgate check --senders` into it:\n{table}"
        );
        assert!(PROFILES.len() >= 60, "{} senders", PROFILES.len());
    }
}
