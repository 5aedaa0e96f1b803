//! TLS with real certificates generated per test: HTTPS senders (h1 and h2
//! via ALPN), clients that must fail, plain HTTP on the TLS port, and
//! HTTPS upstreams behind a private CA.

use http::{StatusCode, Version};

use crate::support::*;

fn tls_config(upstream: &str, pki: &Pki, extra: &str) -> String {
    let (cert, key) = pki.leaf("gateway");
    config_text(upstream, &Backend::Memory, extra, "").replace(
        "shutdown_grace",
        &format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}\nshutdown_grace",
            cert.display(),
            key.display()
        ),
    )
}

#[tokio::test]
async fn https_senders_are_served_over_h1_and_h2() {
    let pki = Pki::new("gateway");
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&tls_config(&upstream.url("/"), &pki, "")).await;
    let url = format!("https://localhost:{}/hook", gateway.addr.port());

    let (first, version) = pki
        .sender(Version::HTTP_11)
        .send(signed(&url, &event("evt_tls")))
        .await
        .unwrap();
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(version, Version::HTTP_11);
    assert_eq!(upstream.seen()[0].headers["x-forwarded-proto"], "https");

    let (again, version) = pki
        .sender(Version::HTTP_2)
        .send(signed(&url, &event("evt_tls")))
        .await
        .unwrap();
    assert!(again.replayed());
    assert_eq!(version, Version::HTTP_2, "ALPN negotiated h2");
    assert_eq!(upstream.count("evt_tls"), 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn untrusted_clients_and_plain_http_fail_without_harm() {
    let pki = Pki::new("gateway");
    let stranger = Pki::new("stranger");
    let upstream = Upstream::start().await;
    let text = tls_config(&upstream.url("/"), &pki, "")
        .replace("[store]", "[admin]\nlisten = \"127.0.0.1:0\"\n\n[store]");
    let gateway = TestGateway::start(&text).await;
    let url = format!("https://localhost:{}/hook", gateway.addr.port());

    let refused = stranger
        .sender(Version::HTTP_11)
        .send(signed(&url, &event("evt_x")))
        .await;
    assert!(
        refused.is_err(),
        "a client that does not trust the CA must fail"
    );
    for _ in 0..3 {
        let plain = Sender::new()
            .try_send(signed(&gateway.url("/hook"), &event("evt_x")))
            .await;
        assert!(
            plain.is_err(),
            "plain HTTP to the TLS port gets no HTTP answer"
        );
    }
    let (ok, _) = pki
        .sender(Version::HTTP_11)
        .send(signed(&url, &event("evt_after")))
        .await
        .unwrap();
    assert_eq!(ok.status, StatusCode::OK, "the gateway is still healthy");
    assert_eq!(upstream.total(), 1);

    let body = scrape(&gateway.admin_url("/metrics")).await;
    let failures = sample(&body, "hookgate_tls_handshake_failures_total", &[]).unwrap();
    assert!(failures >= 4.0, "{failures}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn https_upstreams_need_a_trusted_certificate() {
    let private = Pki::new("internal");
    let upstream = Upstream::tls(private.server_config("upstream")).await;
    let https = format!("https://localhost:{}/legacy", upstream.addr.port());

    let ca = format!("upstream_ca = \"{}\"", private.ca_path().display());
    let trusted = TestGateway::start(&config_text(&https, &Backend::Memory, &ca, "")).await;
    let answer = Sender::new()
        .deliver(&trusted.url("/hook"), &event("evt_https"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(upstream.count("evt_https"), 1);

    let untrusted = TestGateway::start(&config_text(&https, &Backend::Memory, "", "")).await;
    let answer = Sender::new()
        .deliver(&untrusted.url("/hook"), &event("evt_mitm"))
        .await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert_eq!(answer.code(), "upstream_unreachable");
    assert_eq!(
        upstream.count("evt_mitm"),
        0,
        "nothing reached an unverified upstream"
    );
    trusted.shutdown().await;
    untrusted.shutdown().await;
}
