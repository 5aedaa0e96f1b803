//! Traffic control (SPEC §9) through a running gateway: senders admitted by
//! address, before anything of their request is read.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;

use crate::support::*;

/// A signed delivery of `id` with `X-Forwarded-For: chain`.
fn forwarded(url: &str, id: &str, chain: &str) -> Request<Full<Bytes>> {
    let mut request = signed(url, &event(id));
    request
        .headers_mut()
        .insert("x-forwarded-for", chain.parse().unwrap());
    request
}

#[tokio::test]
async fn allow_from_refuses_other_addresses_before_reading_the_body() {
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"10.0.0.0/8\", \"2001:db8::/32\"]",
        "",
    );
    let gateway = TestGateway::start(&with_admin(&text, false)).await;
    let url = gateway.url("/hook");
    let refused = Sender::new().deliver(&url, &event("evt_outside")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "source_not_allowed");
    // A body over max_body_bytes is refused for its address, not its size:
    // nothing of it was read.
    let huge = Request::post(&url)
        .body(Full::new(Bytes::from(vec![b'x'; 64 * 1024])))
        .unwrap();
    assert_eq!(Sender::new().send(huge).await.code(), "source_not_allowed");
    assert_eq!(upstream.total(), 0);
    assert!(
        gateway.record("hook", "evt_outside").await.is_none(),
        "the store untouched"
    );
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(
        sample(
            &metrics,
            "hookgate_requests_total",
            &[("route", "hook"), ("outcome", "source_not_allowed")]
        ),
        Some(2.0)
    );
    gateway.shutdown().await;

    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"127.0.0.1\"]",
        "",
    );
    let gateway = TestGateway::start(&text).await;
    let admitted = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_inside"))
        .await;
    assert_eq!(admitted.status, StatusCode::OK);
    assert_eq!(upstream.count("evt_inside"), 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_client_is_judged() {
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"203.0.113.0/24\"]",
        "",
    )
    .replacen(
        "[server]\n",
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\n",
        1,
    );
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");
    let sender = Sender::new();
    let admitted = sender.send(forwarded(&url, "evt_p1", "203.0.113.7")).await;
    assert_eq!(admitted.status, StatusCode::OK);
    let outsider = sender.send(forwarded(&url, "evt_p2", "198.51.100.1")).await;
    assert_eq!(outsider.code(), "source_not_allowed");
    // A client-written left part proves nothing: the last untrusted hop is
    // the one judged.
    let forged = sender
        .send(forwarded(&url, "evt_p3", "203.0.113.7, 198.51.100.1"))
        .await;
    assert_eq!(forged.code(), "source_not_allowed");
    assert_eq!(upstream.total(), 1);
    gateway.shutdown().await;
}
