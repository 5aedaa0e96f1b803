//! Redis's packed claim (`store.packed_claims`) needs `SET … NX GET`,
//! which Redis takes only from 7.0. On a server that refuses it the
//! gateway falls back to the hashed claim, says so in
//! `hookgate_store_packed_claims`, and goes on: every event is still
//! claimed and forwarded once — never a 503 for every new event, never an
//! unprotected forward.

use std::time::Duration;

use http::StatusCode;

use crate::support::*;

fn body(i: usize) -> String {
    event(&format!("evt_packed_{i}"))
}

/// 30 events, each delivered 4 times at once through a gateway on
/// `backend` with packed claims on: each forwarded once, every answer a
/// success; returns `hookgate_store_packed_claims` after.
async fn each_once_with_packed_claims(backend: Backend) -> Option<f64> {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(20),
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(&upstream.url("/"), &backend, "", "packed_claims = true");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let answers = deliver_concurrently(&[gateway.url("/hook")], 30, 4, body).await;
    for (i, answers) in &answers {
        for answer in answers {
            assert!(
                answer.status == StatusCode::OK || answer.status == StatusCode::CONFLICT,
                "evt_packed_{i}: {} {:?}",
                answer.status,
                answer.json()
            );
        }
    }
    for i in 0..30 {
        assert_eq!(
            upstream.count(&format!("evt_packed_{i}")),
            1,
            "evt_packed_{i}"
        );
    }
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    gateway.shutdown().await;
    sample(&metrics, "hookgate_store_packed_claims", &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_before_7_gets_the_hashed_claim_and_every_event_once() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let old = OldRedis::before(redis.port).await;
    // The stand-in refuses what Redis 6.2 refuses, and nothing else.
    let client = redis::Client::open(old.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let refused: redis::RedisResult<Option<String>> = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("NX")
        .arg("GET")
        .query_async(&mut connection)
        .await;
    assert_eq!(refused.unwrap_err().code(), Some("ERR"));
    let plain: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("NX")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(plain.as_deref(), Some("OK"));

    let packed = each_once_with_packed_claims(Backend::Redis(old.url())).await;
    assert_eq!(packed, Some(0.0), "fallen back, and said so");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_7_takes_the_packed_claim() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let packed = each_once_with_packed_claims(Backend::Redis(redis.url())).await;
    assert_eq!(packed, Some(1.0));
}
