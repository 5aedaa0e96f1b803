//! Senders that sign a JWT instead of the body (Vonage, MessageBird,
//! Plaid): the token's own signature — an HMAC under the route's secret, or
//! a private key whose public key the route lists — covers its claims, and
//! a claim carries the SHA-256 (or -512) of the body, so the body is bound
//! to what was signed. Checked in order: the header's `alg` is the
//! description's own (never `none`, never another the key could be misread
//! as), the signature, then the claims — the body's digest, the URL's when
//! the sender signs it, `iss` when the description names one, `exp` and
//! `nbf`, and the issued-at claim within `tolerance`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::{refuse, Refusal, Signer};
use crate::verify::{Algorithm, Encoding, VerifyError};

/// A `[schemes.jwt]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    /// The claim that holds the digest of the body.
    pub body_digest: String,
    /// `sha256` (the default) or `sha512`.
    pub digest: Option<String>,
    /// How the digests are written: `hex` (the default), `base64`,
    /// `base64url`.
    pub encoding: Option<String>,
    /// The claim that holds the digest of the URL posted to, when the
    /// sender signs it.
    pub url_digest: Option<String>,
    /// What `iss` must be, when the sender sets it.
    pub issuer: Option<String>,
}

/// A JWT description, checked.
#[derive(Debug, Clone)]
pub struct Jwt {
    /// The JOSE `alg` the signer is (`HS256`, `RS256`, `ES256`, …).
    pub alg: &'static str,
    pub body_digest: String,
    pub sha512: bool,
    pub encoding: Encoding,
    pub url_digest: Option<String>,
    pub issuer: Option<String>,
}

/// Longest token read; a sender's are a few hundred bytes.
const MAX_TOKEN_BYTES: usize = 4096;

impl Jwt {
    pub fn from_raw(raw: &RawJwt, signer: Signer) -> Result<Jwt, Refusal> {
        let alg = match signer {
            Signer::Hmac(Algorithm::Sha256) => "HS256",
            Signer::Hmac(Algorithm::Sha512) => "HS512",
            Signer::RsaPkcs1Sha256 => "RS256",
            Signer::RsaPssSha256 => "PS256",
            Signer::EcdsaP256 => "ES256",
            Signer::Ed25519 => "EdDSA",
            Signer::Hmac(Algorithm::Sha1) | Signer::Token => {
                let why = "a JWT is signed with hmac-sha256, hmac-sha512, rsa-pkcs1-sha256, \
                           rsa-pss-sha256, ecdsa-p256 or ed25519";
                return Err(refuse("algorithm", why));
            }
        };
        let sha512 = match raw.digest.as_deref() {
            None | Some("sha256") => false,
            Some("sha512") => true,
            Some(other) => {
                let why = format!("{other:?} is not \"sha256\" or \"sha512\"");
                return Err(refuse("jwt.digest", why));
            }
        };
        let encoding = match raw.encoding.as_deref() {
            None | Some("hex") => Encoding::Hex,
            Some("base64") => Encoding::Base64,
            Some("base64url") => Encoding::Base64Url,
            Some(other) => {
                let why = format!("{other:?} is not \"hex\", \"base64\" or \"base64url\"");
                return Err(refuse("jwt.encoding", why));
            }
        };
        for (field, claim) in [
            ("jwt.body_digest", Some(&raw.body_digest)),
            ("jwt.url_digest", raw.url_digest.as_ref()),
        ] {
            if claim.is_some_and(String::is_empty) {
                return Err(refuse(field, "the name of a claim"));
            }
        }
        Ok(Jwt {
            alg,
            body_digest: raw.body_digest.clone(),
            sha512,
            encoding,
            url_digest: raw.url_digest.clone(),
            issuer: raw.issuer.clone(),
        })
    }

    /// What is checked, for the catalogue.
    pub fn describe(&self) -> String {
        let digest = if self.sha512 { "SHA-512" } else { "SHA-256" };
        let url = (self.url_digest.as_ref())
            .map(|claim| format!(", `{claim}` that of `{{url}}`"))
            .unwrap_or_default();
        let issuer = (self.issuer.as_ref())
            .map(|issuer| format!(", `iss` {issuer:?}"))
            .unwrap_or_default();
        format!(
            "a JWT ({}) whose `{}` is the {digest} of `{{body}}`{url}{issuer}",
            self.alg, self.body_digest
        )
    }

    fn digest(&self, bytes: &[u8]) -> String {
        let digest = match self.sha512 {
            true => Sha512::digest(bytes).to_vec(),
            false => Sha256::digest(bytes).to_vec(),
        };
        self.encoding.encode(&digest)
    }

    /// `token` split: what its signature covers, the signature, and the
    /// claims — none of it trusted yet. Its `alg` must be this one.
    pub fn read<'a>(&self, token: &'a str) -> Result<Read<'a>, VerifyError> {
        let invalid = VerifyError::SignatureInvalid;
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid);
        }
        let mut parts = token.split('.');
        let (Some(header_text), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid);
        };
        let json = |text: &str| -> Option<Map<String, Value>> {
            let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
            match serde_json::from_slice(&bytes).ok()? {
                Value::Object(map) => Some(map),
                _ => None,
            }
        };
        let header = json(header_text).ok_or(invalid)?;
        if header.get("alg").and_then(Value::as_str) != Some(self.alg) {
            return Err(invalid);
        }
        let kid = header.get("kid").and_then(Value::as_str).map(str::to_owned);
        Ok(Read {
            kid,
            signed: &token.as_bytes()[..header_text.len() + 1 + payload.len()],
            signature: URL_SAFE_NO_PAD.decode(signature).map_err(|_| invalid)?,
            claims: json(payload).ok_or(invalid)?,
        })
    }

    /// The claims of a token whose signature verified: the body's digest
    /// (absent only for an empty body), the URL's, the issuer, `exp` and
    /// `nbf` (with `tolerance` of leeway).
    pub fn check(
        &self,
        read: &Read<'_>,
        body: &[u8],
        url: Option<&str>,
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<(), VerifyError> {
        let invalid = VerifyError::SignatureInvalid;
        let claims = &read.claims;
        let matches = |claim: &str, bytes: &[u8]| {
            let given = claims.get(claim).and_then(Value::as_str).unwrap_or("");
            bool::from(given.as_bytes().ct_eq(self.digest(bytes).as_bytes()))
        };
        let bound = matches(&self.body_digest, body)
            || body.is_empty() && !claims.contains_key(&self.body_digest);
        if !bound {
            return Err(invalid);
        }
        if let (Some(claim), Some(url)) = (&self.url_digest, url) {
            if !matches(claim, url.as_bytes()) {
                return Err(invalid);
            }
        }
        if let Some(issuer) = &self.issuer {
            if claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str()) {
                return Err(invalid);
            }
        }
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let leeway = tolerance.as_secs();
        let seconds = |name: &str| claims.get(name).map(|value| value.as_u64().ok_or(invalid));
        if let Some(exp) = seconds("exp").transpose()? {
            if now > exp.saturating_add(leeway) {
                return Err(VerifyError::TimestampOutOfTolerance);
            }
        }
        if let Some(nbf) = seconds("nbf").transpose()? {
            if now.saturating_add(leeway) < nbf {
                return Err(VerifyError::TimestampOutOfTolerance);
            }
        }
        Ok(())
    }
}

/// A token as read, before its signature is checked.
pub struct Read<'a> {
    /// The header's key id, when it names one.
    pub kid: Option<String>,
    /// `header.payload`, what the signature covers.
    pub signed: &'a [u8],
    pub signature: Vec<u8>,
    pub claims: Map<String, Value>,
}

impl Read<'_> {
    /// The issued-at claim `name`, as the decimal seconds a timestamp is
    /// checked in.
    pub fn stamp(&self, name: &str) -> Option<String> {
        self.claims
            .get(name)?
            .as_u64()
            .map(|seconds| seconds.to_string())
    }
}
