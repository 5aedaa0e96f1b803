//! Descriptions read, refused with their field, and verified: templates,
//! layouts of the signature header, public keys, and arbitrary headers.

use std::time::SystemTime;

use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use super::*;
use crate::secret::Secret;
use crate::verify::catalogue::unrelated_key;
use crate::verify::tests::{header_value, spec_of};
use crate::verify::{Profile, RequestLine, Verifier, VerifyError, VerifySpec, PROFILES};

#[test]
fn templates_take_the_body_headers_the_url_and_text() {
    let pieces = parse_template("v0:{header:X-Ts}:{body}{url}").unwrap();
    assert_eq!(
        pieces,
        [
            Piece::Literal("v0:".into()),
            Piece::Header(HeaderName::from_static("x-ts")),
            Piece::Literal(":".into()),
            Piece::Body,
            Piece::Url,
        ]
    );
    for (bad, says) in [
        ("{bdy}", "is not {body}"),
        ("{body", "never closed"),
        ("{header:bad name}.{body}", "not a header name"),
        ("{header:X-Ts}", "does not sign {body}"),
    ] {
        let error = parse_template(bad).unwrap_err();
        assert!(error.contains(says), "{bad}: {error}");
    }
}

fn raw(text: &str) -> RawScheme {
    toml::from_str(&format!("name = \"acme\"\n{text}")).unwrap()
}

#[test]
fn an_error_names_its_field() {
    let signature = "signature = { header = \"X-Sig\" }";
    for (text, field) in [
        ("algorithm = \"md5\"", "algorithm"),
        (signature, "algorithm"),
        ("algorithm = \"hmac-sha256\"", "signature"),
        (
            &format!("algorithm = \"hmac-sha256\"\n{signature}\nsigned = \"{{nope}}\""),
            "signed",
        ),
        (
            "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\", encoding = \"b32\" }",
            "signature.encoding",
        ),
        (
            &format!("algorithm = \"hmac-sha256\"\n{signature}\ntimestamp = {{ header = \"T\", unit = \"h\" }}"),
            "timestamp.unit",
        ),
        (
            &format!("algorithm = \"hmac-sha256\"\n{signature}\nretention = \"3 days\""),
            "retention",
        ),
        (
            &format!("algorithm = \"hmac-sha256\"\n{signature}\nsigned = \"{{timestamp}}.{{body}}\""),
            "signed",
        ),
        (
            &format!("algorithm = \"hmac-sha256\"\n{signature}\ntimestamp = {{ pair = \"t\" }}"),
            "timestamp.pair",
        ),
        (
            "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\", pair = \"v1\" }\ntimestamp = { first = true }",
            "timestamp.first",
        ),
        (
            "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\", pair = \"v1\" }\ntimestamp = { header = \"T\", pair = \"t\" }",
            "timestamp",
        ),
        (
            "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\", pair = \"v1\", list = true }",
            "signature.list",
        ),
        (
            "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\", pair = \"v1\", separator = \"=\" }",
            "signature.separator",
        ),
        (
            // The signature does not cover the timestamp: it guards nothing.
            &format!("algorithm = \"hmac-sha256\"\n{signature}\ntimestamp = {{ header = \"X-Acme-Timestamp\" }}"),
            "timestamp",
        ),
        (
            "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\", pair = \"v1\" }\ntimestamp = { pair = \"t\" }",
            "timestamp",
        ),
        (
            "algorithm = \"ed25519\"\nsignature = { header = \"X-Sig\" }\nhandshake = { challenge = \"query:crc\", answer = \"crc-sha256\" }",
            "handshake.answer",
        ),
        ("builds_on = \"acme-pay\"", "builds_on"),
        ("builds_on = \"standard-webhooks\"\nalgorithm = \"hmac-sha1\"", "algorithm"),
    ] {
        let refused = profile(&raw(text), Profile::named).err();
        assert_eq!(refused.map(|(f, _)| f), Some(field.to_owned()), "{text}");
    }
}

/// A verifier of `description` (a `[[schemes]]` entry) under `key`.
fn verifier_of(description: &str, key: &str) -> Result<Verifier, String> {
    let made = profile(&raw(description), Profile::named).map_err(|(f, e)| format!("{f}: {e}"))?;
    made.verifier(spec_of(&Secret::new(key)), false)
}

fn sign(secret: &str, text: &str) -> String {
    hex::encode(crate::verify::Algorithm::Sha256.tag(secret.as_bytes(), &[text.as_bytes()]))
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

#[test]
fn a_header_of_pairs_yields_its_signatures_and_its_timestamp() {
    let description = "algorithm = \"hmac-sha256\"\n\
        signature = { header = \"X-Sig\", pair = \"v1\", separator = \", \" }\n\
        signed = \"{timestamp}.{body}\"\ntimestamp = { pair = \"t\" }";
    let secret = "acme-secret-0123456789";
    let pairs = verifier_of(description, secret).unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_733_230_000);
    let good = sign(secret, "1733230000.{}");
    let check = |value: &str| {
        let headers = headers(&[("x-sig", value)]);
        pairs.verify(RequestLine::POST, &headers, b"{}", now)
    };
    assert_eq!(check(&format!("t=1733230000,v1={good}")), Ok(()));
    assert_eq!(
        check(&format!("v1={good}, t=1733230000")),
        Ok(()),
        "in any order"
    );
    assert_eq!(
        check(&format!("t=1733230000,v0=00,v1=zz,v1={good}")),
        Ok(()),
        "any v1"
    );
    for (value, error) in [
        (format!("v1={good}"), VerifyError::SignatureInvalid),
        (
            format!("t=1733230001,v1={good}"),
            VerifyError::SignatureInvalid,
        ),
        // Two times: the signature is not bound to one of them.
        (
            format!("t=1733230000,v1={good} t=1733230001,v1={good}"),
            VerifyError::SignatureInvalid,
        ),
        (
            format!("t=1733230000,{}", ["v1=00"; 9].join(",")),
            VerifyError::SignatureInvalid,
        ),
    ] {
        assert_eq!(check(&value), Err(error), "{value}");
    }
    let late = SystemTime::UNIX_EPOCH + Duration::from_secs(1_733_230_000 + 301);
    let headers = headers(&[("x-sig", &format!("t=1733230000,v1={good}"))]);
    assert_eq!(
        pairs.verify(RequestLine::POST, &headers, b"{}", late),
        Err(VerifyError::TimestampOutOfTolerance)
    );
}

#[test]
fn a_list_takes_its_first_item_as_the_timestamp() {
    let description = "algorithm = \"hmac-sha256\"\n\
        signature = { header = \"X-Sig\", list = true }\n\
        signed = \"{timestamp}.{body}\"\ntimestamp = { first = true, unit = \"ms\" }";
    let secret = "acme-secret-0123456789";
    let list = verifier_of(description, secret).unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_733_230_000);
    let good = sign(secret, "1733230000000.{}");
    for (value, ok) in [
        (format!("1733230000000,{good}"), true),
        (format!("1733230000000,abcd,{good}"), true),
        (format!("{good},1733230000000"), false),
        ("1733230000000".to_owned(), false),
    ] {
        let headers = headers(&[("x-sig", &value)]);
        let verdict = list.verify(RequestLine::POST, &headers, b"{}", now);
        assert_eq!(verdict.is_ok(), ok, "{value}: {verdict:?}");
    }
}

#[test]
fn public_keys_are_read_in_every_form_a_sender_shows() {
    // P-256 (SEC1 point, SubjectPublicKeyInfo as PEM and as base64 DER):
    // the signatures made by Python's `cryptography`, DER and fixed-size.
    let pem = "-----BEGIN PUBLIC KEY-----\n\
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEvtBRXHgwBGQ0XPrzBgBUJN501ohu\n\
        kaFXoZYCH5qxIE474+zrt1g3eFDK5zXfy/OW2/9BgUOQ6a+1Kc/WaE7mqg==\n\
        -----END PUBLIC KEY-----\n";
    let der = "MEUCIFyGMtyJsQndac7jpHOBXnHPfj6xQwg5PZotMJXXgdUSAiEAickZHKXVj1cPPmal+NWJa3+qCN0hfyOwz/Z6poYFKCY=";
    let fixed =
        "XIYy3ImxCd1pzuOkc4Fecc9+PrFDCDk9mi0wldeB1RKJyRkcpdWPVw8+ZqX41Ylrf6oI3SF/I7DP9nqmhgUoJg==";
    let point = "04bed0515c78300464345cfaf306005424de74d6886e91a157a196021f9ab1204e3be3ecebb758377850cae735dfcbf396dbff41814390e9afb529cfd6684ee6aa";
    let description = "algorithm = \"ecdsa-p256\"\n\
        signature = { header = \"X-Sig\", encoding = \"base64\" }\n\
        signed = \"{header:X-Ts}.{body}\"\ntimestamp = { header = \"X-Ts\" }";
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_733_230_000);
    let one_line: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    for key in [pem, one_line.as_str(), point] {
        let verifier = verifier_of(description, key).unwrap();
        for signature in [der, fixed] {
            let headers = headers(&[("x-sig", signature), ("x-ts", "1733230000")]);
            let verdict = verifier.verify(RequestLine::POST, &headers, br#"{"id":"evt_1"}"#, now);
            assert_eq!(verdict, Ok(()), "{key}");
            let verdict = verifier.verify(RequestLine::POST, &headers, br#"{"id":"evt_2"}"#, now);
            assert_eq!(verdict, Err(VerifyError::SignatureInvalid));
        }
    }
    let unrelated = verifier_of(description, unrelated_key(Signer::EcdsaP256)).unwrap();
    let headers = headers(&[("x-sig", der), ("x-ts", "1733230000")]);
    let verdict = unrelated.verify(RequestLine::POST, &headers, br#"{"id":"evt_1"}"#, now);
    assert_eq!(verdict, Err(VerifyError::SignatureInvalid));

    let ed25519 = "algorithm = \"ed25519\"\nsignature = { header = \"X-Sig\" }";
    for (key, ok) in [
        (unrelated_key(Signer::Ed25519), true),
        ("GX9rI+FshTLGq8g4+s1ep4m+DHaykgM0A5v6iz02jWE=", true),
        // The same key's SubjectPublicKeyInfo.
        (
            "MCowBQYDK2VwAyEAGX9rI+FshTLGq8g4+s1ep4m+DHaykgM0A5v6iz02jWE=",
            true,
        ),
        ("not a key", false),
        ("00ff", false),
        // A P-256 key where an Ed25519 one belongs.
        (unrelated_key(Signer::EcdsaP256), false),
    ] {
        assert_eq!(verifier_of(ed25519, key).is_ok(), ok, "{key}");
    }
}

/// Every described sender's headers: its signature's, its template's
/// and its timestamp's.
fn described() -> Vec<(Verifier, Vec<HeaderName>)> {
    PROFILES
        .iter()
        .filter_map(|profile| {
            let described = profile.described?;
            let mut names = vec![described.header.clone()];
            names.extend(described.signed_headers().cloned());
            names.extend(
                described
                    .timestamp
                    .iter()
                    .filter_map(|(stamp, _)| match stamp {
                        Stamp::Header(name) => Some(name.clone()),
                        _ => None,
                    }),
            );
            let spec = VerifySpec {
                secrets: vec![Secret::new(match described.secret_encoding {
                    Some(encoding) => encoding.encode(b"a key no vector is under"),
                    None => unrelated_key(described.signer).to_owned(),
                })],
                tolerance: super::super::DEFAULT_TOLERANCE,
                hmac: None,
                public_url: Some("https://hooks.example.com/in".into()),
                min_secret_bytes: 1,
                handshake_token: None,
                fetch: None,
                topics: vec![],
                params: Default::default(),
            };
            Some((profile.verifier(spec, false).unwrap(), names))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_headers_never_pass_a_described_sender(
        values in proptest::collection::vec(prop_oneof!["[ -~]{0,90}", header_value()], 4),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_733_230_000);
        for (verifier, names) in described() {
            let mut headers = HeaderMap::new();
            for (name, value) in names.iter().zip(&values) {
                headers.append(name, HeaderValue::from_str(value).unwrap());
            }
            prop_assert!(verifier.verify(RequestLine::POST, &headers, &body, now).is_err());
        }
    }
}

/// Keys and tokens made by Python's `cryptography` for these tests (a
/// 2048-bit RSA key in each form a sender shows it, its signatures of
/// `1733230000.{"id":"evt_1"}`, and JWTs over `{"id":"evt_1"}`).
fn material(name: &str) -> String {
    let all: serde_json::Value = serde_json::from_str(include_str!("test_keys.json")).unwrap();
    all[name].as_str().unwrap().to_owned()
}

#[test]
fn rsa_keys_verify_in_every_form_and_padding() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_733_230_000);
    for (algorithm, signature, other) in [
        ("rsa-pkcs1-sha256", "pkcs1sig", "psssig"),
        ("rsa-pss-sha256", "psssig", "pkcs1sig"),
    ] {
        let description = format!(
            "algorithm = \"{algorithm}\"\nsignature = {{ header = \"X-Sig\", encoding = \"base64\" }}\n\
             signed = \"{{timestamp}}.{{body}}\"\ntimestamp = {{ header = \"X-Ts\" }}"
        );
        for form in ["spki", "pkcs1", "jwk", "cert"] {
            let verifier = verifier_of(&description, &material(form)).unwrap();
            for (name, body, ok) in [
                (signature, &br#"{"id":"evt_1"}"#[..], true),
                (signature, br#"{"id":"evt_2"}"#, false),
                (other, br#"{"id":"evt_1"}"#, false),
            ] {
                let headers = headers(&[("x-sig", &material(name)), ("x-ts", "1733230000")]);
                let verdict = verifier.verify(RequestLine::POST, &headers, body, now);
                assert_eq!(
                    verdict.is_ok(),
                    ok,
                    "{algorithm} {form} {name}: {verdict:?}"
                );
            }
        }
        let unrelated = verifier_of(&description, unrelated_key(Signer::RsaPssSha256)).unwrap();
        let headers = headers(&[("x-sig", &material(signature)), ("x-ts", "1733230000")]);
        let verdict = unrelated.verify(RequestLine::POST, &headers, br#"{"id":"evt_1"}"#, now);
        assert_eq!(verdict, Err(VerifyError::SignatureInvalid));
        // An EC key where an RSA one belongs, named when the route is read.
        let error = verifier_of(&description, unrelated_key(Signer::EcdsaP256)).unwrap_err();
        assert!(error.contains("an RSA public key"), "{error}");
    }
}

#[test]
fn a_jwt_binds_the_body_by_its_digest_claim_and_names_its_alg() {
    let hs256 = "algorithm = \"hmac-sha256\"\n\
        signature = { header = \"Authorization\", prefix = \"Bearer \" }\n\
        timestamp = { claim = \"iat\" }\n\
        jwt = { body_digest = \"payload_hash\", issuer = \"Acme\" }";
    let verifier = verifier_of(hs256, "acme-jwt-secret-0123456789").unwrap();
    let at = |seconds: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
    let body = br#"{"id":"evt_1"}"#;
    let check = |token: &str, body: &[u8], now| {
        let bearer = format!("Bearer {token}");
        verifier.verify(
            RequestLine::POST,
            &headers(&[("authorization", &bearer)]),
            body,
            now,
        )
    };
    let invalid = Err(VerifyError::SignatureInvalid);
    let stale = Err(VerifyError::TimestampOutOfTolerance);
    assert_eq!(check(&material("hs256"), body, at(1_733_230_000)), Ok(()));
    assert_eq!(
        check(&material("hs256"), br#"{"id":"evt_2"}"#, at(1_733_230_000)),
        invalid
    );
    assert_eq!(check(&material("hs256"), body, at(1_733_231_000)), stale);
    assert_eq!(
        check(&material("hs256_none"), body, at(1_733_230_000)),
        invalid
    );
    assert_eq!(
        check(&material("hs256_late"), body, at(1_733_230_000)),
        stale
    );
    assert_eq!(
        check(&material("hs256_other_iss"), body, at(1_733_230_000)),
        invalid
    );
    // Another alg than the description's, even one the key would verify.
    assert_eq!(check(&material("rs256"), body, at(1_733_230_000)), invalid);
    assert_eq!(check("a.b", body, at(1_733_230_000)), invalid);

    for (algorithm, token, key) in [
        ("rsa-pkcs1-sha256", "rs256", "jwk"),
        ("ecdsa-p256", "es256", "ec_jwk"),
    ] {
        let description = format!(
            "algorithm = \"{algorithm}\"\nsignature = {{ header = \"X-Token\" }}\n\
             jwt = {{ body_digest = \"payload_hash\" }}"
        );
        let verifier = verifier_of(&description, &material(key)).unwrap();
        let headers = headers(&[("x-token", &material(token))]);
        let now = at(1_733_230_000);
        assert_eq!(
            verifier.verify(RequestLine::POST, &headers, body, now),
            Ok(())
        );
        let changed = verifier.verify(RequestLine::POST, &headers, b"{}", now);
        assert_eq!(changed, invalid, "{algorithm}");
    }
    for (text, field) in [
        ("algorithm = \"hmac-sha1\"\nsignature = { header = \"X\" }\njwt = { body_digest = \"h\" }", "algorithm"),
        ("algorithm = \"hmac-sha256\"\nsignature = { header = \"X\" }\nsigned = \"{body}\"\njwt = { body_digest = \"h\" }", "signed"),
        ("algorithm = \"hmac-sha256\"\nsignature = { header = \"X\" }\ntimestamp = { header = \"T\" }\njwt = { body_digest = \"h\" }", "timestamp"),
        ("algorithm = \"hmac-sha256\"\nsignature = { header = \"X\" }\njwt = { body_digest = \"h\", digest = \"md5\" }", "jwt.digest"),
    ] {
        let (at, _) = Described::from_raw(&raw(text)).unwrap_err();
        assert_eq!(at, field, "{text}");
    }
}

#[test]
fn a_token_is_the_secret_compared_whole() {
    let basic = "algorithm = \"token\"\n\
        signature = { header = \"Authorization\", prefix = \"Basic \", encoding = \"base64\" }";
    let verifier = verifier_of(basic, "acme:0123456789abcdef").unwrap();
    for (value, ok) in [
        ("Basic YWNtZTowMTIzNDU2Nzg5YWJjZGVm", true),
        ("Basic YWNtZTowMTIzNDU2Nzg5YWJjZGVn", false),
        ("Bearer YWNtZTowMTIzNDU2Nzg5YWJjZGVm", false),
        ("Basic", false),
    ] {
        let headers = headers(&[("authorization", value)]);
        let verdict = verifier.verify(RequestLine::POST, &headers, b"{}", SystemTime::UNIX_EPOCH);
        assert_eq!(verdict.is_ok(), ok, "{value}");
    }
    let plain = "algorithm = \"token\"\nsignature = { header = \"X-Token\", encoding = \"plain\" }";
    let verifier = verifier_of(plain, "tok-0123456789abcdef").unwrap();
    let headers = headers(&[("x-token", "tok-0123456789abcdef")]);
    assert!(verifier
        .verify(RequestLine::POST, &headers, b"any", SystemTime::UNIX_EPOCH)
        .is_ok());
    let signed = format!("{plain}\nsigned = \"{{body}}\"");
    assert_eq!(Described::from_raw(&raw(&signed)).unwrap_err().0, "signed");
    let hmac_plain =
        "algorithm = \"hmac-sha256\"\nsignature = { header = \"X\", encoding = \"plain\" }";
    assert_eq!(
        Described::from_raw(&raw(hmac_plain)).unwrap_err().0,
        "signature.encoding"
    );
}

#[test]
fn a_template_signs_the_bodys_crc32_a_routes_param_and_an_rfc3339_time() {
    let description = "algorithm = \"hmac-sha256\"\n\
        signature = { header = \"X-Sig\" }\n\
        signed = \"{header:X-Id}|{timestamp}|{param:hook_id}|{crc32:body}\"\n\
        timestamp = { header = \"X-Time\", unit = \"rfc3339\" }";
    let secret = "acme-secret-0123456789";
    let made = profile(&raw(description), Profile::named).unwrap();
    let mut spec = spec_of(&Secret::new(secret));
    spec.params = [("hook_id".to_owned(), "WH-1".to_owned())].into();
    let verifier = made.verifier(spec, false).unwrap();
    let body = br#"{"id":"evt_1"}"#;
    let crc = crc32fast::hash(body);
    let signed = format!("tx-1|2024-12-03T12:46:40Z|WH-1|{crc}");
    let headers = headers(&[
        ("x-sig", &sign(secret, &signed)),
        ("x-id", "tx-1"),
        ("x-time", "2024-12-03T12:46:40Z"),
    ]);
    let at = |seconds| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
    let verdict = verifier.verify(RequestLine::POST, &headers, body, at(1_733_230_000));
    assert_eq!(verdict, Ok(()));
    let late = verifier.verify(RequestLine::POST, &headers, body, at(1_733_231_000));
    assert_eq!(late, Err(VerifyError::TimestampOutOfTolerance));
    let other = verifier.verify(RequestLine::POST, &headers, b"{}", at(1_733_230_000));
    assert_eq!(other, Err(VerifyError::SignatureInvalid));
    // Another route's id: its signature does not verify here.
    let elsewhere = made.verifier(spec_of(&Secret::new(secret)), false).unwrap();
    let verdict = elsewhere.verify(RequestLine::POST, &headers, body, at(1_733_230_000));
    assert_eq!(verdict, Err(VerifyError::SignatureInvalid));
    assert_eq!(
        made.described.unwrap().params().collect::<Vec<_>>(),
        ["hook_id"]
    );
}

#[test]
fn a_key_url_is_pinned_to_https_hosts_the_description_names() {
    let base = "algorithm = \"ecdsa-p256\"\nsignature = { header = \"X-Sig\" }";
    for (key_url, field) in [
        ("{ header = \"X-Url\" }", "key_url.hosts"),
        (
            "{ header = \"X-Url\", url = \"https://k.example/a\", hosts = [\"k.example\"] }",
            "key_url",
        ),
        (
            "{ url = \"http://k.example/a\", hosts = [\"k.example\"] }",
            "key_url.url",
        ),
        (
            "{ url = \"https://{header:X-Host}/a\", hosts = [\"k.example\"] }",
            "key_url.url",
        ),
        (
            "{ url = \"https://k.example/{kid}\", hosts = [\"k.example\"] }",
            "key_url.url",
        ),
        ("{ header = \"X-Url\", hosts = [\"*\"] }", "key_url.hosts"),
    ] {
        let text = format!("{base}\nkey_url = {key_url}");
        let (at, why) = Described::from_raw(&raw(&text)).unwrap_err();
        assert_eq!(at, field, "{key_url}: {why}");
    }
    let hmac = "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\" }\n\
        key_url = { header = \"X-Url\", hosts = [\"k.example\"] }";
    assert_eq!(Described::from_raw(&raw(hmac)).unwrap_err().0, "key_url");
    let jwt = "algorithm = \"ecdsa-p256\"\nsignature = { header = \"X-Sig\" }\n\
        jwt = { body_digest = \"h\" }\n\
        key_url = { url = \"https://k.example/keys/{kid}\", hosts = [\"k.example\"] }";
    let described = Described::from_raw(&raw(jwt)).unwrap();
    let line = described.describe();
    assert!(
        line.contains("key fetched from `https://k.example/keys/{kid}`, only on `k.example`"),
        "{line}"
    );
}

#[test]
fn a_secret_shown_encoded_is_decoded_to_its_key() {
    let description = "algorithm = \"hmac-sha256\"\nsignature = { header = \"X-Sig\" }\n\
        secret_encoding = \"base64\"";
    let key = b"acme-key-bytes-0123456789";
    let shown = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key);
    let verifier = verifier_of(description, &shown).unwrap();
    let tag = crate::verify::Algorithm::Sha256.tag(key, &[b"{}"]);
    let headers = headers(&[("x-sig", &hex::encode(tag))]);
    let verdict = verifier.verify(RequestLine::POST, &headers, b"{}", SystemTime::UNIX_EPOCH);
    assert_eq!(verdict, Ok(()));
    // The encoded text itself is not the key.
    let plain = verifier_of(
        &description.replace("secret_encoding = \"base64\"", ""),
        &shown,
    );
    let verdict = plain
        .unwrap()
        .verify(RequestLine::POST, &headers, b"{}", SystemTime::UNIX_EPOCH);
    assert_eq!(verdict, Err(VerifyError::SignatureInvalid));
    let error = verifier_of(description, "not base64 at all!").unwrap_err();
    assert!(error.contains("does not decode"), "{error}");
    let ed25519 =
        "algorithm = \"ed25519\"\nsignature = { header = \"X-Sig\" }\nsecret_encoding = \"hex\"";
    assert_eq!(
        Described::from_raw(&raw(ed25519)).unwrap_err().0,
        "secret_encoding"
    );
}
