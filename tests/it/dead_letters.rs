//! Failed events, dead letters, redelivery, replay and redrive (docs/guide/dead-letters.md, "Failed events and dead letters"),
//! through a running gateway: what the sender gets, what the upstream sees,
//! what the store and the admin API show, and the `hookgate events` CLI.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;

use crate::support::*;

async fn gateway_for(upstream: &Upstream, backend: &Backend, route_extra: &str) -> TestGateway {
    let text = config_text(&upstream.url("/hook"), backend, route_extra, "");
    TestGateway::start(&with_admin(&text, true)).await
}

async fn admin(gateway: &TestGateway, method: Method, path: &str) -> Answer {
    request(method, &gateway.admin_url(path), Some(ADMIN_TOKEN)).await
}

#[tokio::test]
async fn the_nth_refused_attempt_parks_the_event_and_later_deliveries_are_not_forwarded() {
    let (upstream, _) = Upstream::flaky().await;
    let gateway = gateway_for(&upstream, &Backend::Memory, "max_attempts = 3").await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    let body = event("evt_dead");

    for attempt in 1..=3 {
        let answer = sender.deliver(&url, &body).await;
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "attempt {attempt}"
        );
        let record = gateway.record("hook", "evt_dead").await.unwrap();
        assert_eq!(record.attempts, attempt);
        let expected = if attempt < 3 { "failed" } else { "dead" };
        assert_eq!(record.state.as_str(), expected);
    }
    let record = gateway.record("hook", "evt_dead").await.unwrap();
    let error = record.last_error.unwrap();
    assert_eq!((error.class.as_str(), error.status), ("refused", Some(503)));
    let kept = record.request.expect("a failed event keeps its request");
    assert_eq!(kept.body, body.as_bytes(), "byte for byte");
    assert_eq!(kept.headers["x-signature"], sign(body.as_bytes()));

    // Every later delivery, however many at once, is answered and not
    // forwarded.
    let deliveries: Vec<_> = (0..20)
        .map(|_| {
            let (sender, url, body) = (sender.clone(), url.clone(), body.clone());
            tokio::spawn(async move { sender.deliver(&url, &body).await })
        })
        .collect();
    for delivery in deliveries {
        let answer = delivery.await.unwrap();
        assert_eq!(answer.status, StatusCode::ACCEPTED);
        assert_eq!(answer.headers["hookgate-event-state"], "dead");
        assert_eq!(answer.json()["event"]["state"], "dead");
        assert_eq!(answer.json()["event"]["attempts"], 3);
    }
    assert_eq!(upstream.count("evt_dead"), 3);

    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let labels = [("route", "hook")];
    assert_eq!(
        sample(&metrics, "hookgate_dead_letters_total", &labels),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "hookgate_dead_letters", &labels),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "hookgate_requests_total",
            &[("route", "hook"), ("outcome", "dead_letter")]
        ),
        Some(20.0)
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn unlimited_attempts_keep_forwarding_and_a_custom_status_answers_dead_letters() {
    let (upstream, _) = Upstream::flaky().await;
    let gateway = gateway_for(&upstream, &Backend::Memory, "").await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    for _ in 0..5 {
        let answer = sender.deliver(&url, &event("evt_unlimited")).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        upstream.count("evt_unlimited"),
        5,
        "max_attempts = 0 never parks"
    );
    let record = gateway.record("hook", "evt_unlimited").await.unwrap();
    assert_eq!(record.state.as_str(), "failed");
    gateway.shutdown().await;

    let gateway = gateway_for(
        &upstream,
        &Backend::Memory,
        "max_attempts = 1\ndead_letter_status = 200",
    )
    .await;
    let url = gateway.url("/hook");
    assert_eq!(sender.deliver(&url, &event("evt_200")).await.status, 503);
    assert_eq!(sender.deliver(&url, &event("evt_200")).await.status, 200);
    assert_eq!(upstream.count("evt_200"), 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn redelivery_keeps_the_key_and_the_body_and_a_replay_gets_a_new_key() {
    let (upstream, healthy) = Upstream::flaky().await;
    let gateway = gateway_for(&upstream, &Backend::Memory, "max_attempts = 2").await;
    let (sender, url) = (Sender::new(), gateway.url("/hook?shop=42"));
    let body = event("evt_again");
    for _ in 0..2 {
        sender.deliver(&url, &body).await;
    }
    let path = "/admin/routes/hook/keys/evt_again";
    assert_eq!(
        admin(&gateway, Method::GET, path).await.json()["state"],
        "dead"
    );

    // Still down: the redelivery fails and the event stays parked.
    let failed = admin(&gateway, Method::POST, &format!("{path}/redeliver")).await;
    assert_eq!(failed.status, StatusCode::OK);
    assert_eq!(failed.json()["state"], "dead");
    assert_eq!(failed.json()["upstream_status"], 503);

    healthy.store(true, Ordering::SeqCst);
    let done = admin(&gateway, Method::POST, &format!("{path}/redeliver")).await;
    assert_eq!(done.status, StatusCode::OK, "{:?}", done.json());
    assert_eq!(done.json()["state"], "completed");
    assert_eq!(done.json()["attempt"], 4);
    assert_eq!(done.json()["upstream_status"], 200);
    let seen = upstream.seen();
    let last = seen.last().unwrap();
    assert_eq!(last.key(), "evt_again", "a redelivery keeps the key");
    assert_eq!(last.body, body.as_bytes(), "and the body, byte for byte");
    assert_eq!(last.headers["x-signature"], sign(body.as_bytes()));
    assert!(last.uri.ends_with("/hook?shop=42"), "{}", last.uri);
    assert_eq!(upstream.count("evt_again"), 4);

    // The sender's next retry is answered from the recording.
    let retry = sender.deliver(&url, &body).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert!(retry.replayed());
    assert_eq!(upstream.count("evt_again"), 4);

    // A completed event goes again only when forced.
    let refused = admin(&gateway, Method::POST, &format!("{path}/redeliver")).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.code(), "completed");
    let forced = admin(
        &gateway,
        Method::POST,
        &format!("{path}/redeliver?force=true"),
    )
    .await;
    assert_eq!(forced.json()["state"], "completed");
    assert_eq!(upstream.count("evt_again"), 5);

    // Replays: a new key each time, linked both ways.
    for n in 1..=2 {
        let replay = admin(&gateway, Method::POST, &format!("{path}/replay")).await;
        assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.json());
        let key = format!("evt_again.replay-{n}");
        assert_eq!(replay.json()["key"], key.as_str());
        assert_eq!(replay.json()["replay_of"], "evt_again");
        assert_eq!(replay.json()["state"], "completed");
        assert_eq!(upstream.count(&key), 1);
        let seen = upstream.seen();
        assert_eq!(seen.last().unwrap().body, body.as_bytes());
    }
    let shown = admin(&gateway, Method::GET, path).await.json();
    assert_eq!(
        shown["replays"],
        serde_json::json!(["evt_again.replay-1", "evt_again.replay-2"])
    );
    let replay = admin(
        &gateway,
        Method::GET,
        "/admin/routes/hook/keys/evt_again.replay-2?body=true",
    )
    .await
    .json();
    assert_eq!(replay["replay_of"], "evt_again");
    assert_eq!(replay["request"]["body_bytes"], body.len());
    let signature = replay["request"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0] == "x-signature")
        .unwrap()
        .clone();
    assert_eq!(signature[1], "[redacted]", "signatures are not shown");

    // A record that keeps no request cannot be sent again.
    sender
        .deliver(&gateway.url("/hook"), &event("evt_fine"))
        .await;
    let nothing = admin(
        &gateway,
        Method::POST,
        "/admin/routes/hook/keys/evt_fine/replay",
    )
    .await;
    assert_eq!(nothing.code(), "request_not_stored");
    let missing = admin(
        &gateway,
        Method::POST,
        "/admin/routes/hook/keys/nope/redeliver",
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    gateway.shutdown().await;
}

/// The upstream was down; 200 events were parked. Once it is back, one
/// redrive delivers each of them exactly once more.
async fn redrive_delivers_each_dead_letter_once(backend: Backend) {
    let (upstream, healthy) = Upstream::flaky().await;
    // The subject is the redrive, not the store's deadline: 25 claims at
    // once on a loaded CI machine can outlast the tests' 300 ms, and a
    // sender answered 503 `store_unavailable` has nothing parked.
    let text = config_text(
        &upstream.url("/hook"),
        &backend,
        "max_attempts = 1",
        "timeout = \"5s\"",
    );
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let url = gateway.url("/hook");
    let ids: Vec<String> = (0..200).map(|i| format!("evt_rd_{i}")).collect();
    for chunk in ids.chunks(25) {
        let sends: Vec<_> = chunk
            .iter()
            .map(|id| {
                let (url, body) = (url.clone(), event(id));
                tokio::spawn(async move { Sender::new().deliver(&url, &body).await })
            })
            .collect();
        for send in sends {
            assert_eq!(send.await.unwrap().status, StatusCode::SERVICE_UNAVAILABLE);
        }
    }
    // A sender is answered before its failure is recorded when the store
    // is slow to take it (the recording goes on in a task of its own).
    let parked = eventually(Duration::from_secs(10), || async {
        let dead = admin(
            &gateway,
            Method::GET,
            "/admin/events?route=hook&state=dead&limit=500",
        )
        .await;
        dead.json()["events"].as_array().map(Vec::len) == Some(200)
    });
    assert!(parked.await, "all 200 parked");

    healthy.store(true, Ordering::SeqCst);
    let redrive = admin(
        &gateway,
        Method::POST,
        "/admin/routes/hook/dead-letters/redeliver?rate=2000",
    )
    .await;
    assert_eq!(redrive.status, StatusCode::OK, "{:?}", redrive.json());
    assert_eq!(redrive.json()["dead_letters"], 200);
    assert_eq!(redrive.json()["completed"], 200);
    for id in &ids {
        assert_eq!(
            upstream.count(id),
            2,
            "{id}: one failed attempt, one redelivery"
        );
    }
    let ok: usize = upstream
        .seen()
        .iter()
        .filter(|seen| seen.status == StatusCode::OK)
        .count();
    assert_eq!(ok, 200, "each delivered once");
    let dead = admin(&gateway, Method::GET, "/admin/events?state=dead").await;
    assert!(dead.json()["events"].as_array().unwrap().is_empty());
    // A second redrive finds nothing to do.
    let again = admin(
        &gateway,
        Method::POST,
        "/admin/routes/hook/dead-letters/redeliver",
    )
    .await;
    assert_eq!(again.json()["dead_letters"], 0);
    gateway.shutdown().await;
}

// On a cluster, a route's 200 dead letters are over 3 masters (64
// shards): the listing and the redrive walk every shard.
crate::on_backends!(redrive_delivers_each_dead_letter_once);

#[tokio::test]
async fn listing_pages_with_a_cursor_and_refuses_bad_queries() {
    let (upstream, _) = Upstream::flaky().await;
    let gateway = gateway_for(&upstream, &Backend::Memory, "max_attempts = 1").await;
    let url = gateway.url("/hook");
    for i in 0..7 {
        Sender::new()
            .deliver(&url, &event(&format!("evt_page_{i}")))
            .await;
        // Each dies a moment after the last: newest first is one order.
        gateway.clock.advance(Duration::from_millis(3));
    }
    let mut seen = Vec::new();
    let mut path = "/admin/events?state=dead&limit=3".to_owned();
    loop {
        let page = admin(&gateway, Method::GET, &path).await.json();
        for event in page["events"].as_array().unwrap() {
            assert_eq!(event["route"], "hook");
            assert_eq!(event["last_error"]["class"], "refused");
            seen.push(event["key"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/admin/events?state=dead&limit=3&cursor={cursor}"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..7).rev().map(|i| format!("evt_page_{i}")).collect();
    assert_eq!(seen, expected, "newest first, each once");

    for bad in ["state=gone", "limit=0", "limit=100000", "cursor=%%%"] {
        let answer = admin(&gateway, Method::GET, &format!("/admin/events?{bad}")).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(answer.code(), "bad_request");
    }
    let unknown = admin(&gateway, Method::GET, "/admin/events?route=nope").await;
    assert_eq!(unknown.code(), "route_not_found");
    let unauthorized = get(
        &gateway.admin_url("/admin/events"),
        Some("wrong-token-0123456789"),
    )
    .await;
    assert_eq!(unauthorized.status, StatusCode::UNAUTHORIZED);
    gateway.shutdown().await;
}

/// `hookgate events` against a running gateway: every subcommand, both
/// output formats, a bad token, an unknown key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_cli_finds_inspects_and_sends_again() {
    let (upstream, healthy) = Upstream::flaky().await;
    let gateway = gateway_for(&upstream, &Backend::Memory, "max_attempts = 1").await;
    let url = gateway.url("/hook");
    Sender::new().deliver(&url, &event("evt_cli")).await;
    Sender::new().deliver(&url, &event("evt_cli2")).await;
    let admin_url = gateway.admin_url("");
    let run = |args: &[&str], token: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .arg("events")
            .arg("--admin")
            .arg(&admin_url)
            .args(args)
            .env("HOOKGATE_ADMIN_TOKEN", token)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let cli = |args: &'static [&'static str]| {
        let run = &run;
        async move { tokio::task::block_in_place(|| run(args, ADMIN_TOKEN)) }
    };

    let (code, table, _) = cli(&["list", "--state", "dead"]).await;
    assert_eq!(code, Some(0));
    assert!(table.starts_with("ROUTE"), "{table}");
    assert!(
        table.contains("evt_cli ") && table.contains("refused 503"),
        "{table}"
    );
    let (code, json, _) = cli(&["--json", "list", "--route", "hook"]).await;
    assert_eq!(code, Some(0));
    let page: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    // Every page as one JSON document, and options after the subcommand
    // (--admin too), as kubectl and gh take them.
    let direct = tokio::task::block_in_place(|| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args([
                "events", "list", "--limit", "1", "--all", "--json", "--admin",
            ])
            .arg(&admin_url)
            .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .unwrap()
    });
    assert_eq!(direct.status.code(), Some(0), "{direct:?}");
    let every: serde_json::Value = serde_json::from_slice(&direct.stdout).expect("one document");
    assert_eq!(every.as_array().map(Vec::len), Some(2), "{every}");

    let (code, shown, _) = cli(&["show", "hook", "evt_cli", "--body"]).await;
    assert_eq!(code, Some(0));
    assert!(shown.contains("state:        dead"), "{shown}");
    assert!(shown.contains("\"id\":\"evt_cli\""), "the body: {shown}");
    let (_, shown, _) = cli(&["show", "hook", "evt_cli", "--json"]).await;
    let record: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(record["attempts"], 1);

    healthy.store(true, Ordering::SeqCst);
    let (code, out, _) = cli(&["redeliver", "hook", "evt_cli"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("completed, upstream answered 200"), "{out}");
    let (code, out, _) = cli(&["--json", "replay", "hook", "evt_cli"]).await;
    assert_eq!(code, Some(0));
    let replay: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(replay["key"], "evt_cli.replay-1");
    let (code, out, _) = cli(&["redrive", "hook", "--rate", "100"]).await;
    assert_eq!(code, Some(0));
    assert!(
        out.contains("redrove 1 dead letters of hook: 1 completed"),
        "{out}"
    );
    assert_eq!(upstream.count("evt_cli2"), 2);
    let (code, out, _) = cli(&["forget", "hook", "evt_cli"]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(gateway.record("hook", "evt_cli").await.is_none());

    let (code, _, err) = cli(&["show", "hook", "evt_never"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("key_not_found"), "{err}");
    let (code, _, err) = cli(&["redeliver", "hook", "evt_cli2"]).await;
    assert_eq!(code, Some(1), "completed needs --force");
    assert!(err.contains("(completed, HTTP 409)"), "{err}");
    let (code, _, err) = tokio::task::block_in_place(|| run(&["list"], "wrong-token-0123456789"));
    assert_eq!(code, Some(1));
    assert!(err.contains("unauthorized"), "{err}");
    let (code, _, _) = cli(&["list", "--bogus"]).await;
    assert_eq!(code, Some(2), "usage");
    gateway.shutdown().await;
}

/// A bad `state` is refused with every state it could have been, `queued`
/// included (it works; the message used to leave it out).
#[tokio::test]
async fn a_bad_state_filter_names_every_state() {
    let upstream = Upstream::start().await;
    let gateway = gateway_for(&upstream, &Backend::Memory, "").await;
    let refused = admin(&gateway, Method::GET, "/admin/events?state=stuck").await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    for state in ["processing", "queued", "failed", "dead", "completed"] {
        assert!(message.contains(state), "{state} missing from {message:?}");
    }
    let queued = admin(&gateway, Method::GET, "/admin/events?state=queued").await;
    assert_eq!(queued.status, StatusCode::OK, "{:?}", queued.json());
}

/// The header a `scheme = "hmac"` route names for its signature is shown
/// `[redacted]` like every signature, whatever its name.
#[tokio::test]
async fn a_routes_own_signature_header_is_redacted() {
    let (upstream, _) = Upstream::flaky().await;
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, "", "")
        .replace("header = \"X-Signature\"", "header = \"X-Hook-Digest\"");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let body = event("evt_digest");
    let request = Request::post(gateway.url("/hook"))
        .header("content-type", "application/json")
        .header("x-hook-digest", sign(body.as_bytes()))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let refused = Sender::new().send(request).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    let shown = admin(&gateway, Method::GET, "/admin/routes/hook/keys/evt_digest").await;
    let headers = shown.json()["request"]["headers"].clone();
    let digest = headers
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "x-hook-digest")
        .unwrap_or_else(|| panic!("{headers}"))
        .clone();
    assert_eq!(digest[1], "[redacted]", "{headers}");
    let digest = sign(event("evt_digest").as_bytes());
    assert!(!String::from_utf8_lossy(&shown.body).contains(&digest));
}

/// The exit codes automation reads (docs/guide/dead-letters.md, "Failed events and dead
/// letters"): an action whose events all go dead again exits 3, not 0; a
/// bad `--state` is usage (2); a reader that closes the pipe early ends the
/// listing quietly (0, no panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_exits_3_when_an_action_leaves_events_undelivered() {
    let (upstream, healthy) = Upstream::flaky().await;
    let gateway = gateway_for(&upstream, &Backend::Memory, "max_attempts = 1").await;
    for id in ["evt_x1", "evt_x2", "evt_x3"] {
        let answer = Sender::new()
            .deliver(&gateway.url("/hook"), &event(id))
            .await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    let dead = eventually(Duration::from_secs(10), || async {
        let listed = admin(&gateway, Method::GET, "/admin/events?route=hook&state=dead").await;
        listed.json()["events"].as_array().map(Vec::len) == Some(3)
    });
    assert!(dead.await);

    let code = |args: &[&str]| events_cli(&gateway, args).status.code();
    assert_eq!(
        code(&["redeliver", "hook", "evt_x1"]),
        Some(3),
        "dead again"
    );
    assert_eq!(code(&["redrive", "hook"]), Some(3), "every one dead again");
    let bulk = [
        "redeliver",
        "--route",
        "hook",
        "--state",
        "dead",
        "--rate",
        "100/s",
    ];
    assert_eq!(code(&bulk), Some(3), "a bulk action too");
    assert_eq!(code(&["list", "--state", "nosuch"]), Some(2));
    assert_eq!(code(&["redeliver", "--state", "nosuch"]), Some(2));

    // `hookgate events list | head -0`: the reader is gone before a line.
    let mut listing = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["events", "list", "--route", "hook"])
        .args(["--admin", &gateway.admin_url("")])
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(listing.stdout.take());
    let output = listing.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    healthy.store(true, Ordering::SeqCst);
    assert_eq!(code(&["redrive", "hook"]), Some(0), "all delivered");
    // Refused, redriven and redelivered in bulk while still refused, then
    // delivered.
    assert_eq!(upstream.count("evt_x2"), 4);
    gateway.shutdown().await;
}
