//! A described sender whose public key is fetched (`key_url`,
//! docs/guide/senders.md, "Keys fetched from the sender"), through a real
//! gateway against a local HTTPS key server with its own CA: deliveries
//! signed with ECDSA P-256 under a key that server publishes — as a
//! certificate at a URL the delivery names (PayPal's way), or as a JWK at
//! a URL built from the JWT's key id.
//!
//! Eight concurrent copies reach the upstream once and the key is fetched
//! once; a changed body, a URL on a host the description does not pin
//! (the same server by address, never fetched), a plain-http URL, a key id
//! that is not URL-safe, and a key server that is down (503, fetched once)
//! reach nothing.

use std::sync::Arc;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use sha2::{Digest, Sha256};

use crate::support::*;

/// The sender's key pair, and its self-signed certificate.
struct SenderKey {
    pair: EcdsaKeyPair,
    cert: String,
}

impl SenderKey {
    fn new() -> SenderKey {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["sender.example".to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap().pem();
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
            &SystemRandom::new(),
        )
        .unwrap();
        SenderKey { pair, cert }
    }

    fn sign(&self, message: &[u8]) -> Vec<u8> {
        let signature = self.pair.sign(&SystemRandom::new(), message).unwrap();
        signature.as_ref().to_vec()
    }

    /// The public key as a JWK.
    fn jwk(&self, kid: &str) -> String {
        let point = self.pair.public_key().as_ref();
        serde_json::json!({
            "kty": "EC", "crv": "P-256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        })
        .to_string()
    }
}

/// The sender's key server: `/cert.pem` and `/keys/k1` are `key`'s,
/// `/other.pem` another key's, `/down.pem` fails.
async fn key_server(pki: &Pki, key: &SenderKey) -> Upstream {
    let (cert, jwk, other) = (key.cert.clone(), key.jwk("k1"), SenderKey::new().cert);
    Upstream::tls_with(pki.server_config("keys"), move |seen| {
        let (status, body) = match seen.uri.as_str() {
            "/cert.pem" => (StatusCode::OK, cert.clone()),
            "/keys/k1" => (StatusCode::OK, jwk.clone()),
            "/other.pem" => (StatusCode::OK, other.clone()),
            _ => (StatusCode::SERVICE_UNAVAILABLE, String::new()),
        };
        Plan {
            status,
            delay: std::time::Duration::ZERO,
            headers: vec![("cache-control", "max-age=600".into())],
            body,
        }
    })
    .await
}

fn config(upstream: &Upstream, keys: &Upstream, pki: &Pki, dir: &std::path::Path) -> String {
    let port = keys.addr.port();
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
backend = "embedded"
path = "{db}"

[[schemes]]
name = "acme-cert"
algorithm = "ecdsa-p256"
signature = {{ header = "X-Acme-Signature", encoding = "base64" }}
signed = "{{header:X-Acme-Time}}.{{body}}"
timestamp = {{ header = "X-Acme-Time" }}
key_url = {{ header = "X-Acme-Cert-Url", hosts = ["localhost:{port}"] }}
key = ["json:/id"]

[[schemes]]
name = "acme-jwt"
algorithm = "ecdsa-p256"
signature = {{ header = "X-Acme-Token" }}
timestamp = {{ claim = "iat" }}
jwt = {{ body_digest = "body_sha256" }}
key_url = {{ url = "https://localhost:{port}/keys/{{kid}}", hosts = ["localhost:{port}"] }}
key = ["json:/id"]

[[routes]]
name = "cert"
path = "/cert"
upstream = "{upstream}"
[routes.verify]
scheme = "acme-cert"
cert_ca = "{ca}"

[[routes]]
name = "jwt"
path = "/jwt"
upstream = "{upstream}"
[routes.verify]
scheme = "acme-jwt"
cert_ca = "{ca}"
"#,
        db = dir.join("hookgate.db").display(),
        upstream = upstream.url("/hook"),
        ca = pki.ca_path().display(),
    );
    with_admin(&text, true)
}

fn now() -> u64 {
    let wall = hookgate::clock::wall();
    wall.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A delivery of `body` signed by `key`, naming `cert_url`.
fn signed(url: &str, key: &SenderKey, cert_url: &str, body: &str) -> Request<Full<Bytes>> {
    let time = now().to_string();
    let signature = key.sign(format!("{time}.{body}").as_bytes());
    Request::post(url)
        .header("x-acme-time", &time)
        .header("x-acme-cert-url", cert_url)
        .header("x-acme-signature", STANDARD.encode(signature))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// A sender's key, its key server, an upstream and a gateway with a route
/// on each description.
struct World {
    _dir: tempfile::TempDir,
    _pki: Pki,
    key: SenderKey,
    keys: Upstream,
    upstream: Upstream,
    gateway: TestGateway,
}

impl World {
    async fn start() -> World {
        let (dir, pki, key) = (
            tempfile::tempdir().unwrap(),
            Pki::new("keys"),
            SenderKey::new(),
        );
        let keys = key_server(&pki, &key).await;
        let upstream = Upstream::start().await;
        let gateway = TestGateway::start(&config(&upstream, &keys, &pki, dir.path())).await;
        World {
            _dir: dir,
            _pki: pki,
            key,
            keys,
            upstream,
            gateway,
        }
    }
}

/// How many times the key server was asked for `path`.
fn fetched(keys: &Upstream, path: &str) -> usize {
    keys.seen().iter().filter(|seen| seen.uri == path).count()
}

#[tokio::test]
async fn a_key_named_by_the_delivery_is_fetched_once_and_only_from_a_pinned_host() {
    // Every field bound: the directories live as long as the test.
    let World {
        _dir,
        _pki,
        key,
        keys,
        upstream,
        gateway,
    } = World::start().await;
    let url = Arc::new(gateway.url("/cert"));
    let port = keys.addr.port();
    let cert_url = format!("https://localhost:{port}/cert.pem");

    let body = r#"{"id":"evt_1","amount":4200}"#;
    let copies = (0..8).map(|_| {
        let request = signed(&url, &key, &cert_url, body);
        tokio::spawn(async move { Sender::new().send(request).await })
    });
    for answer in futures_util::future::join_all(copies).await {
        let answer = answer.unwrap();
        // A copy that came while the first was forwarded is told to retry.
        if answer.status != StatusCode::CONFLICT {
            assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        }
    }
    let retry = Sender::new()
        .send(signed(&url, &key, &cert_url, body))
        .await;
    assert!(retry.replayed(), "{:?}", retry.body);
    assert_eq!(upstream.total(), 1, "forwarded once");
    assert_eq!(fetched(&keys, "/cert.pem"), 1, "fetched once, then kept");

    // Signed, then changed.
    let mut changed = signed(&url, &key, &cert_url, r#"{"id":"evt_2","amount":4200}"#);
    *changed.body_mut() = Full::new(Bytes::from(r#"{"id":"evt_2","amount":1}"#));
    let answer = Sender::new().send(changed).await;
    assert_eq!(answer.code(), "signature_invalid");

    // The key server by address, a plain-http URL, another host: never
    // fetched, whatever the signature.
    let before = keys.seen().len();
    for elsewhere in [
        format!("https://127.0.0.1:{port}/cert.pem"),
        format!("http://localhost:{port}/cert.pem"),
        format!("https://localhost:{}/cert.pem", port + 1),
        format!("https://user@localhost:{port}/cert.pem"),
    ] {
        let body = r#"{"id":"evt_3"}"#;
        let answer = Sender::new()
            .send(signed(&url, &key, &elsewhere, body))
            .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{elsewhere}");
        assert_eq!(answer.code(), "signature_invalid", "{elsewhere}");
    }
    assert_eq!(keys.seen().len(), before, "nothing fetched from elsewhere");

    // A key on the pinned host that did not sign it.
    let other = format!("https://localhost:{port}/other.pem");
    let answer = Sender::new()
        .send(signed(&url, &key, &other, r#"{"id":"evt_4"}"#))
        .await;
    assert_eq!(answer.code(), "signature_invalid");

    // A key server that is down: 503, so the sender retries; one fetch.
    let down = format!("https://localhost:{port}/down.pem");
    for _ in 0..3 {
        let answer = Sender::new()
            .send(signed(&url, &key, &down, r#"{"id":"evt_5"}"#))
            .await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.code(), "sender_unreachable");
    }
    assert_eq!(
        fetched(&keys, "/down.pem"),
        1,
        "a failed fetch is not repeated at once"
    );
    assert_eq!(upstream.total(), 1, "nothing refused reached the upstream");
    for id in ["evt_2", "evt_3", "evt_4", "evt_5"] {
        assert!(
            gateway.record("cert", id).await.is_none(),
            "{id} left a record"
        );
    }
    gateway.shutdown().await;
}

/// A JWT signed by `key` under key id `kid`, binding `body`.
fn token(key: &SenderKey, kid: &str, body: &str) -> String {
    let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": kid});
    let claims = serde_json::json!({
        "iat": now(),
        "body_sha256": hex::encode(Sha256::digest(body.as_bytes())),
    });
    let signing = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = URL_SAFE_NO_PAD.encode(key.sign(signing.as_bytes()));
    format!("{signing}.{signature}")
}

#[tokio::test]
async fn a_jwts_key_is_fetched_by_its_key_id_and_a_hostile_id_fetches_nothing() {
    // Every field bound: the directories live as long as the test.
    let World {
        _dir,
        _pki,
        key,
        keys,
        upstream,
        gateway,
    } = World::start().await;
    let url = gateway.url("/jwt");
    let post = |token: String, body: &str| {
        Request::post(&url)
            .header("x-acme-token", token)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    };

    let body = r#"{"id":"evt_1"}"#;
    let first = Sender::new()
        .send(post(token(&key, "k1", body), body))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let again = Sender::new()
        .send(post(token(&key, "k1", body), body))
        .await;
    assert!(again.replayed());
    assert_eq!(fetched(&keys, "/keys/k1"), 1);

    let other = r#"{"id":"evt_2"}"#;
    let answer = Sender::new()
        .send(post(token(&key, "k1", body), other))
        .await;
    assert_eq!(
        answer.code(),
        "signature_invalid",
        "the claim binds the body"
    );

    let before = keys.seen().len();
    for kid in ["../k1", "k1?x=1", "k1/../../admin", ""] {
        let answer = Sender::new()
            .send(post(token(&key, kid, other), other))
            .await;
        assert_eq!(answer.code(), "signature_invalid", "{kid:?}");
    }
    assert_eq!(
        keys.seen().len(),
        before,
        "a hostile key id fetches nothing"
    );
    assert_eq!(upstream.total(), 1);
    gateway.shutdown().await;
}
