//! The public keys of the described schemes that sign with a private key:
//! read from the text an operator pastes or points `${file:…}` at — the
//! raw key in hex or base64, its SubjectPublicKeyInfo (DER or PEM), an RSA
//! `RSA PUBLIC KEY` PEM, an X.509 certificate, a JWK or a JWK Set — and
//! turned into the form ring verifies with. A key of another kind than the
//! scheme's is refused when the route is read, not when a delivery comes.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::signature::{
    VerificationAlgorithm, ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_FIXED, ED25519,
    RSA_PKCS1_2048_8192_SHA256, RSA_PSS_2048_8192_SHA256,
};
use serde_json::Value;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::SubjectPublicKeyInfo;

use super::Signer;

/// The ring algorithm(s) of a signer that verifies with a public key:
/// ECDSA signatures come DER-encoded or as the fixed 64 bytes of `r || s`.
pub fn algorithms(signer: Signer) -> &'static [&'static dyn VerificationAlgorithm] {
    static EDDSA: [&dyn VerificationAlgorithm; 1] = [&ED25519];
    static ECDSA: [&dyn VerificationAlgorithm; 2] =
        [&ECDSA_P256_SHA256_ASN1, &ECDSA_P256_SHA256_FIXED];
    static PKCS1: [&dyn VerificationAlgorithm; 1] = [&RSA_PKCS1_2048_8192_SHA256];
    static PSS: [&dyn VerificationAlgorithm; 1] = [&RSA_PSS_2048_8192_SHA256];
    match signer {
        Signer::Ed25519 => &EDDSA,
        Signer::EcdsaP256 => &ECDSA,
        Signer::RsaPkcs1Sha256 => &PKCS1,
        Signer::RsaPssSha256 => &PSS,
        Signer::Hmac(_) | Signer::Token => &[],
    }
}

/// What a key of `signer`'s kind is: its name in errors, the length of a
/// raw key (none for RSA), its SubjectPublicKeyInfo algorithm and its JWK
/// `kty` (and `crv`).
struct Kind {
    name: &'static str,
    raw_len: Option<usize>,
    oid: &'static str,
    kty: &'static str,
    crv: Option<&'static str>,
}

fn kind(signer: Signer) -> Kind {
    match signer {
        Signer::Ed25519 => Kind {
            name: "an Ed25519",
            raw_len: Some(32),
            oid: "1.3.101.112",
            kty: "OKP",
            crv: Some("Ed25519"),
        },
        Signer::EcdsaP256 => Kind {
            name: "a P-256",
            raw_len: Some(65),
            oid: "1.2.840.10045.2.1",
            kty: "EC",
            crv: Some("P-256"),
        },
        Signer::RsaPkcs1Sha256 | Signer::RsaPssSha256 => Kind {
            name: "an RSA",
            raw_len: None,
            oid: "1.2.840.113549.1.1.1",
            kty: "RSA",
            crv: None,
        },
        Signer::Hmac(_) | Signer::Token => unreachable!("a shared secret has no public key"),
    }
}

/// The public keys in `text` (a JWK Set may hold several), as ring takes
/// them: the raw key, or for RSA the DER `RSAPublicKey`.
pub fn public_keys(signer: Signer, text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let kind = kind(signer);
    let invalid = || {
        format!(
            "{} public key, as the sender shows it: hex or base64 of the key, or of its \
             SubjectPublicKeyInfo; PEM (a public key or a certificate); a JWK or JWK Set",
            kind.name
        )
    };
    let text = std::str::from_utf8(text).map_err(|_| invalid())?.trim();
    if text.starts_with('{') {
        let keys = from_jwk(&kind, text).ok_or_else(invalid)?;
        return (!keys.is_empty()).then_some(keys).ok_or_else(invalid);
    }
    let body: String = (text.lines())
        .filter(|line| !line.starts_with("-----"))
        .map(str::trim)
        .collect();
    let bytes = (body.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex::decode(&body).ok())
        .flatten()
        .or_else(|| STANDARD.decode(&body).ok())
        .or_else(|| URL_SAFE_NO_PAD.decode(body.trim_end_matches('=')).ok())
        .ok_or_else(invalid)?;
    if kind.raw_len == Some(bytes.len()) {
        return Ok(vec![bytes]);
    }
    let key = if text.starts_with("-----BEGIN CERTIFICATE-----") {
        match X509Certificate::from_der(&bytes) {
            Ok((_, cert)) => from_info(&kind, cert.public_key()),
            Err(_) => None,
        }
    } else if text.starts_with("-----BEGIN RSA PUBLIC KEY-----") {
        // PKCS#1 already: what ring takes, once it is known to parse.
        (kind.kty == "RSA" && rsa_parts(&bytes).is_some()).then(|| bytes.clone())
    } else {
        match SubjectPublicKeyInfo::from_der(&bytes) {
            Ok((&[], info)) => from_info(&kind, &info),
            _ => None,
        }
    };
    key.map(|key| vec![key]).ok_or_else(invalid)
}

/// The key of a SubjectPublicKeyInfo, when it is of `kind`.
fn from_info(kind: &Kind, info: &SubjectPublicKeyInfo<'_>) -> Option<Vec<u8>> {
    if info.algorithm.algorithm.to_id_string() != kind.oid {
        return None;
    }
    let key = info.subject_public_key.data.to_vec();
    match kind.raw_len {
        Some(len) => (key.len() == len).then_some(key),
        None => rsa_parts(&key).is_some().then_some(key),
    }
}

/// The keys of `kind` in a JWK or a JWK Set (`{"keys": [...]}`); keys of
/// other kinds in a set are passed over (a set may mix them). `None`: not
/// a JWK.
fn from_jwk(kind: &Kind, text: &str) -> Option<Vec<Vec<u8>>> {
    let value: Value = serde_json::from_str(text).ok()?;
    let keys = match value.get("keys") {
        Some(Value::Array(keys)) => keys.clone(),
        Some(_) => return None,
        None => vec![value],
    };
    let field = |key: &Value, name: &str| -> Option<Vec<u8>> {
        let text = key.get(name)?.as_str()?;
        URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
    };
    let mut found = Vec::new();
    for key in &keys {
        if key.get("kty").and_then(Value::as_str) != Some(kind.kty)
            || kind.crv.is_some() && key.get("crv").and_then(Value::as_str) != kind.crv
        {
            continue;
        }
        let raw = match kind.kty {
            "RSA" => rsa_der(&field(key, "n")?, &field(key, "e")?),
            "EC" => [&[4][..], &field(key, "x")?, &field(key, "y")?].concat(),
            _ => field(key, "x")?,
        };
        if kind.raw_len.is_none_or(|len| raw.len() == len) {
            found.push(raw);
        }
    }
    Some(found)
}

/// DER `RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent
/// INTEGER }` of a JWK's `n` and `e` (big-endian, unsigned).
fn rsa_der(n: &[u8], e: &[u8]) -> Vec<u8> {
    fn length(len: usize) -> Vec<u8> {
        match len {
            0..=0x7f => vec![len as u8],
            _ => {
                let bytes: Vec<u8> = (len.to_be_bytes().into_iter())
                    .skip_while(|b| *b == 0)
                    .collect();
                [vec![0x80 | bytes.len() as u8], bytes].concat()
            }
        }
    }
    fn integer(value: &[u8]) -> Vec<u8> {
        let value: Vec<u8> = value.iter().copied().skip_while(|b| *b == 0).collect();
        // A leading 1 bit would read as negative: pad with a zero byte.
        let pad = value.first().is_none_or(|b| b & 0x80 != 0);
        let content = [if pad { &[0u8][..] } else { &[] }, &value].concat();
        [vec![0x02], length(content.len()), content].concat()
    }
    let content = [integer(n), integer(e)].concat();
    [vec![0x30], length(content.len()), content].concat()
}

/// The modulus and exponent of a DER `RSAPublicKey`, when it is one.
fn rsa_parts(der: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    use x509_parser::der_parser::ber::BerObjectContent;
    let (rest, object) = x509_parser::der_parser::parse_der(der).ok()?;
    let BerObjectContent::Sequence(items) = object.content else {
        return None;
    };
    match (rest.is_empty(), items.as_slice()) {
        (true, [n, e]) => Some((n.as_slice().ok()?.to_vec(), e.as_slice().ok()?.to_vec())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwk_of_an_rsa_key_is_its_pkcs1_der() {
        // The DER of a small RSAPublicKey, by hand: n = 0x00c3 (sign padded),
        // e = 65537.
        assert_eq!(
            rsa_der(&[0xc3], &[1, 0, 1]),
            [0x30, 0x09, 0x02, 0x02, 0x00, 0xc3, 0x02, 0x03, 1, 0, 1]
        );
        let der = rsa_der(&[0x5a; 256], &[1, 0, 1]);
        assert_eq!(&der[..4], [0x30, 0x82, 0x01, 0x09]);
        let (n, e) = rsa_parts(&der).unwrap();
        assert_eq!((n.len(), e), (256, vec![1, 0, 1]));
    }

    #[test]
    fn a_key_of_another_kind_is_refused() {
        let ed25519 =
            r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;
        assert_eq!(
            public_keys(Signer::Ed25519, ed25519.as_bytes()).unwrap()[0].len(),
            32
        );
        for signer in [Signer::EcdsaP256, Signer::RsaPkcs1Sha256] {
            let error = public_keys(signer, ed25519.as_bytes()).unwrap_err();
            assert!(error.contains("JWK"), "{error}");
        }
        assert!(public_keys(Signer::RsaPssSha256, b"not a key").is_err());
        assert!(public_keys(Signer::RsaPssSha256, b"{\"keys\": 3}").is_err());
    }
}
