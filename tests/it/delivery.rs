//! End-to-end deliveries through the gateway: what a sender and the legacy
//! upstream observe.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use rand::seq::SliceRandom;

use sha2::Digest;

use crate::support::*;

crate::on_backends!(every_event_reaches_the_upstream_exactly_once: [memory, embedded, redis]);
crate::on_backends!(a_replay_is_identical_to_the_first_answer: [memory, embedded, redis]);
crate::on_backends!(a_slow_upstream_keeps_its_lease: [memory, embedded, redis]);
crate::on_backends!(a_failed_upstream_call_is_retried_then_replayed: [memory, embedded, redis]);

/// 120 events × 4 concurrent deliveries each, in random order, senders
/// retrying on 409 until settled.
async fn every_event_reaches_the_upstream_exactly_once(backend: Backend) {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(5 + rand::random::<u64>() % 20),
        ..ok_plan(seen)
    })
    .await;
    let gateway =
        TestGateway::start(&config_text(&upstream.url("/legacy"), &backend, "", "")).await;
    let url = gateway.url("/hook");

    let mut deliveries: Vec<String> = (0..120)
        .flat_map(|i| std::iter::repeat_n(format!("evt_{i}"), 4))
        .collect();
    deliveries.shuffle(&mut rand::thread_rng());

    let sender = Sender::new();
    let mut tasks = Vec::new();
    for id in deliveries {
        let (sender, url) = (sender.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let answer = sender.deliver_until_settled(&url, &event(&id)).await;
            (id, answer)
        }));
    }
    let mut answers: HashMap<String, Vec<Answer>> = HashMap::new();
    for task in tasks {
        let (id, answer) = task.await.unwrap();
        answers.entry(id).or_default().push(answer);
    }

    let counts = upstream.counts();
    assert_eq!(
        counts.len(),
        120,
        "every event reached the upstream, and nothing else did: {counts:?}"
    );
    assert!(
        counts.values().all(|&n| n == 1),
        "some event was processed twice: {counts:?}"
    );
    for (id, answers) in &answers {
        assert_eq!(answers.len(), 4);
        for answer in answers {
            assert_eq!(answer.status, StatusCode::OK, "{id}: {answer:?}");
            assert_eq!(
                answer.body, answers[0].body,
                "{id}: every delivery gets the same body"
            );
        }
        assert_eq!(
            answers.iter().filter(|a| !a.replayed()).count(),
            1,
            "{id}: one forward, three replays"
        );
    }
    gateway.shutdown().await;
}

async fn a_replay_is_identical_to_the_first_answer(backend: Backend) {
    let upstream = Upstream::with(|seen| Plan {
        status: StatusCode::CREATED,
        ..ok_plan(seen)
    })
    .await;
    let gateway =
        TestGateway::start(&config_text(&upstream.url("/legacy"), &backend, "", "")).await;
    let sender = Sender::new();
    let body = event("evt_replay");

    let first = sender.deliver(&gateway.url("/hook"), &body).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    assert!(
        first.headers.get("set-cookie").is_some(),
        "the first caller gets the upstream's cookie"
    );

    for _ in 0..3 {
        let again = sender.deliver(&gateway.url("/hook"), &body).await;
        assert_eq!(again.status, first.status);
        assert_eq!(again.body, first.body);
        assert!(again.replayed(), "Idempotent-Replayed: true");
        assert!(
            again.headers.get("set-cookie").is_none(),
            "cookies are never replayed"
        );
        for name in ["content-type", "x-upstream", "date", "content-length"] {
            assert_eq!(again.headers.get(name), first.headers.get(name), "{name}");
        }
    }
    assert_eq!(upstream.count("evt_replay"), 1);
    gateway.shutdown().await;
}

/// The upstream takes four times `processing_ttl`: renewal keeps the claim,
/// so duplicates during the call get 409 and the upstream sees one call.
async fn a_slow_upstream_keeps_its_lease(backend: Backend) {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(1200),
        ..ok_plan(seen)
    })
    .await;
    let route = "processing_ttl = \"300ms\"\nretention = \"1h\"";
    let gateway =
        TestGateway::start(&config_text(&upstream.url("/slow"), &backend, route, "")).await;
    let sender = Sender::new();
    let body = event("evt_slow");

    let first = {
        let (sender, url, body) = (sender.clone(), gateway.url("/hook"), body.clone());
        tokio::spawn(async move { sender.deliver(&url, &body).await })
    };
    assert!(eventually(Duration::from_secs(2), || ready(upstream.total() == 1)).await);
    let mut conflicts = 0;
    // A duplicate every 100 ms while the first is in flight.
    let mut every = pace(Duration::from_millis(100));
    while !first.is_finished() {
        every.tick().await;
        if first.is_finished() {
            break;
        }
        let duplicate = sender.deliver(&gateway.url("/hook"), &body).await;
        if first.is_finished() && duplicate.status == StatusCode::OK {
            break; // raced with completion: a replay
        }
        assert_eq!(duplicate.status, StatusCode::CONFLICT, "{duplicate:?}");
        assert_eq!(duplicate.code(), "in_flight");
        assert!(duplicate.headers.get("retry-after").is_some());
        conflicts += 1;
    }
    assert!(
        conflicts >= 5,
        "duplicates kept arriving past several TTLs ({conflicts})"
    );
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    assert!(sender
        .deliver(&gateway.url("/hook"), &body)
        .await
        .replayed());
    assert_eq!(upstream.count("evt_slow"), 1);
    gateway.shutdown().await;
}

/// Upstream 500 then 200: the first delivery gets 500 (claim released, so
/// the retry is forwarded), the retry gets 200, the third is a replay.
async fn a_failed_upstream_call_is_retried_then_replayed(backend: Backend) {
    let upstream = Upstream::with(|seen| match seen.nth {
        1 => Plan {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: "database is down".into(),
            ..ok_plan(seen)
        },
        _ => ok_plan(seen),
    })
    .await;
    let text = config_text(&upstream.url("/flaky"), &backend, "", "");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let body = event("evt_flaky");

    let first = sender.deliver(&gateway.url("/hook"), &body).await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        first.body, "database is down",
        "the upstream's own error passes through"
    );
    let second = sender.deliver(&gateway.url("/hook"), &body).await;
    assert_eq!(second.status, StatusCode::OK);
    assert!(!second.replayed());
    let third = sender.deliver(&gateway.url("/hook"), &body).await;
    assert!(third.replayed());
    assert_eq!(third.body, second.body);
    assert_eq!(upstream.count("evt_flaky"), 2);

    let record = gateway.record("hook", "evt_flaky").await.unwrap();
    assert_eq!(record.attempts, 2, "the store counts both forwards");
    gateway.shutdown().await;
}

#[tokio::test]
async fn the_upstream_gets_a_faithful_request() {
    let upstream = Upstream::start().await;
    let route = "methods = [\"POST\", \"PUT\"]";
    let text = config_text(
        &upstream.url("/legacy?source=gw"),
        &Backend::Memory,
        route,
        "",
    );
    let gateway = TestGateway::start(&text).await;

    // Odd but legal bytes: the signature is over them, so they must survive.
    let body = "{\"id\":\"evt_faithful\",  \"note\":\"caf\u{e9} \\u00e9\"}\n";
    let request = Request::put(gateway.url("/hook?attempt=3"))
        .header("x-signature", sign(body.as_bytes()))
        .header("idempotency-key", "sender-chosen-value")
        .header("x-forwarded-for", "203.0.113.9")
        .header("connection", "x-hop")
        .header("x-hop", "drop me")
        .header("x-custom", "kept")
        .header("host", "hooks.example.com")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let answer = Sender::new().send(request).await;
    assert_eq!(answer.status, StatusCode::OK);

    let seen = &upstream.seen()[0];
    assert_eq!(seen.method, "PUT");
    assert_eq!(seen.uri, "/legacy?source=gw&attempt=3");
    assert_eq!(seen.body, body.as_bytes(), "body byte-identical");
    let header = |name: &str| {
        seen.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(
        header("idempotency-key").as_deref(),
        Some("evt_faithful"),
        "overwrites the sender's value"
    );
    assert_eq!(
        header("x-signature"),
        Some(sign(body.as_bytes())),
        "signature kept for backends that verify"
    );
    assert_eq!(
        header("x-forwarded-for").as_deref(),
        Some("127.0.0.1"),
        "a chain from an untrusted peer is not passed on"
    );
    assert_eq!(header("x-forwarded-proto").as_deref(), Some("http"));
    assert_eq!(
        header("x-forwarded-host").as_deref(),
        Some("hooks.example.com")
    );
    assert_eq!(header("x-custom").as_deref(), Some("kept"));
    assert_eq!(
        header("x-hop"),
        None,
        "headers named in Connection are hop-by-hop"
    );
    assert_eq!(header("host"), Some(upstream.addr.to_string()));
    gateway.shutdown().await;
}

#[tokio::test]
async fn h2c_senders_are_served() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&config_text(&upstream.url("/"), &Backend::Memory, "", "")).await;
    let sender = Sender::h2c();
    let first = sender
        .deliver(&gateway.url("/hook"), &event("evt_h2"))
        .await;
    let second = sender
        .deliver(&gateway.url("/hook"), &event("evt_h2"))
        .await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(second.replayed());
    assert_eq!(upstream.count("evt_h2"), 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn same_key_with_another_body_is_rejected_or_replayed() {
    let upstream = Upstream::start().await;
    let strict =
        TestGateway::start(&config_text(&upstream.url("/"), &Backend::Memory, "", "")).await;
    let sender = Sender::new();
    let original = event("evt_mismatch");
    let altered = original.replace("4200", "9999");
    assert_eq!(
        sender.deliver(&strict.url("/hook"), &original).await.status,
        StatusCode::OK
    );
    let answer = sender.deliver(&strict.url("/hook"), &altered).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer.code(), "payload_mismatch");

    let lenient_text = config_text(
        &upstream.url("/"),
        &Backend::Memory,
        "on_mismatch = \"replay\"",
        "",
    );
    let lenient = TestGateway::start(&lenient_text).await;
    assert_eq!(
        sender
            .deliver(&lenient.url("/hook"), &original)
            .await
            .status,
        StatusCode::OK
    );
    assert!(sender
        .deliver(&lenient.url("/hook"), &altered)
        .await
        .replayed());
    assert_eq!(
        upstream.count("evt_mismatch"),
        2,
        "once per gateway (separate stores)"
    );
    strict.shutdown().await;
    lenient.shutdown().await;
}

/// Every 4xx hookgate produces for bad input, from a real request, with the
/// the documented JSON error body — and nothing reaches the store or the upstream.
#[tokio::test]
async fn bad_input_gets_clear_errors_and_is_not_forwarded() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&config_text(&upstream.url("/"), &Backend::Memory, "", "")).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    let post = |uri: &str, signature: Option<String>, body: String| {
        let mut request = Request::post(uri);
        if let Some(signature) = signature {
            request = request.header("x-signature", signature);
        }
        request.body(Full::new(Bytes::from(body))).unwrap()
    };
    let expect = |answer: Answer, status: u16, code: &str| {
        assert_eq!(answer.status.as_u16(), status, "{code}: {answer:?}");
        assert_eq!(answer.code(), code);
        // An RFC 9457 problem, the stable code in its `error` member.
        assert_eq!(answer.headers["content-type"], "application/problem+json");
        let problem = answer.json();
        assert_eq!(problem["type"], "about:blank");
        assert_eq!(problem["status"], status);
        let reason = answer.status.canonical_reason().unwrap();
        assert_eq!(problem["title"], reason);
        assert_eq!(problem["detail"], problem["error"]["message"]);
        assert!(problem["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    };

    expect(
        sender.deliver(&gateway.url("/nope"), &event("e1")).await,
        404,
        "route_not_found",
    );
    let get = Request::get(&url).body(Full::new(Bytes::new())).unwrap();
    let answer = sender.send(get).await;
    assert_eq!(answer.headers["allow"], "POST");
    expect(answer, 405, "method_not_allowed");

    let big = format!(r#"{{"id":"e2","pad":"{}"}}"#, "x".repeat(5000));
    expect(
        sender
            .send(post(&url, Some(sign(big.as_bytes())), big.clone()))
            .await,
        413,
        "body_too_large",
    );
    // No Content-Length: the limit holds while streaming.
    let chunks = (0..10).map(|_| Bytes::from(vec![b'x'; 1000])).collect();
    let streamed = Request::post(&url)
        .header("x-signature", "sha256=00")
        .body(Chunked(chunks))
        .unwrap();
    assert_eq!(send_streamed(streamed).await, StatusCode::PAYLOAD_TOO_LARGE);

    let body = event("e3");
    expect(
        sender.send(post(&url, None, body.clone())).await,
        401,
        "signature_invalid",
    );
    expect(
        sender
            .send(post(&url, Some("sha256=beef".into()), body.clone()))
            .await,
        401,
        "signature_invalid",
    );
    let tampered = body.replace("4200", "1");
    expect(
        sender
            .send(post(&url, Some(sign(body.as_bytes())), tampered))
            .await,
        401,
        "signature_invalid",
    );
    let answer = sender
        .send(post(&url, Some(sign(body.as_bytes())), body.clone()))
        .await;
    assert!(!answer
        .body
        .windows(SECRET.len())
        .any(|w| w == SECRET.as_bytes()));

    let no_id = r#"{"type":"order.paid"}"#.to_owned();
    expect(sender.deliver(&url, &no_id).await, 400, "key_missing");
    let fractional = r#"{"id":1.5}"#.to_owned();
    expect(sender.deliver(&url, &fractional).await, 400, "key_invalid");
    // Ids outside visible ASCII (or over 255 bytes) are kept hashed: still
    // deduplicated, and the key says so.
    let spaced = r#"{"id":"has space"}"#.to_owned();
    assert_eq!(sender.deliver(&url, &spaced).await.status, StatusCode::OK);
    assert!(sender.deliver(&url, &spaced).await.replayed());
    let hashed = format!("sha256:{}", hex::encode(sha2::Sha256::digest(b"has space")));
    assert_eq!(
        upstream.count(&hashed),
        1,
        "the upstream got the hashed key once"
    );
    let long = format!(r#"{{"id":"{}"}}"#, "k".repeat(256));
    assert_eq!(sender.deliver(&url, &long).await.status, StatusCode::OK);

    assert_eq!(
        upstream.total(),
        3,
        "the valid delivery and the two hashed-key ones were forwarded, once each"
    );
    gateway.shutdown().await;
}

/// The key rotation case: a delivery signed with the previous secret passes.
#[tokio::test]
async fn any_configured_secret_verifies() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&config_text(&upstream.url("/"), &Backend::Memory, "", "")).await;
    let body = event("evt_rotated");
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"old-secret-0123456789").unwrap();
    mac.update(body.as_bytes());
    let request = Request::post(gateway.url("/hook"))
        .header(
            "x-signature",
            format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
        )
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    assert_eq!(Sender::new().send(request).await.status, StatusCode::OK);
    gateway.shutdown().await;
}

/// A body of several frames with no declared length (sent chunked).
struct Chunked(std::collections::VecDeque<Bytes>);

impl hyper::body::Body for Chunked {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(
            self.0
                .pop_front()
                .map(|chunk| Ok(hyper::body::Frame::data(chunk))),
        )
    }
}

async fn send_streamed(request: Request<Chunked>) -> StatusCode {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    match client.request(request).await {
        Ok(response) => response.status(),
        Err(error) => panic!("streamed request failed: {error}"),
    }
}

/// `idempotency_header_format = "sf-string"`: the upstream gets the key as
/// draft-ietf-httpapi-idempotency-key-header writes it — a quoted
/// structured-field string — on a sender's delivery and on a worker's
/// attempt alike; the default stays the bare key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_key_can_be_sent_as_the_draft_writes_it() {
    let upstream = Upstream::start().await;
    let quoted = "idempotency_header_format = \"sf-string\"";
    for (route, id, want) in [
        ("", "evt_raw", "evt_raw"),
        (quoted, "evt_sf", "\"evt_sf\""),
        (
            &*format!("{quoted}\ndelivery = \"async\""),
            "evt_sf_async",
            "\"evt_sf_async\"",
        ),
    ] {
        let text = config_text(&upstream.url("/hook"), &Backend::Memory, route, "");
        let gateway = TestGateway::start(&text).await;
        let answer = Sender::new()
            .deliver(&gateway.url("/hook"), &event(id))
            .await;
        assert!(answer.status.is_success(), "{answer:?}");
        assert!(
            upstream
                .all_reached(&[want.to_owned()], Duration::from_secs(10))
                .await,
            "{id}"
        );
        let seen = (upstream.seen().into_iter())
            .find(|seen| seen.headers["idempotency-key"] == want)
            .unwrap();
        assert!(String::from_utf8_lossy(&seen.body).contains(id));
        gateway.shutdown().await;
    }
}
