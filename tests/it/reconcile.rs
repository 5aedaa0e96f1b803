//! Reconciliation with the sender (docs/guide/reconciliation.md, "Reconciliation"), end to end
//! against stand-ins of Stripe's and GitHub's APIs: what the gateway never
//! completed reaches the upstream exactly once — after an outage the
//! sender gave up on, racing the sender's own late retry, from two
//! gateways at once, across pages and a 429 — and bad credentials are a
//! status and a metric that touch nothing else.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, StatusCode};
use serde_json::Value;

use crate::support::*;

/// A gateway config with a Stripe route `payments` (and its
/// `[routes.reconcile]` when `api` is given) on `store`.
fn stripe_config(upstream: &str, store: &str, api: Option<(&str, &Path)>) -> String {
    stripe_config_at("127.0.0.1:0", upstream, store, api)
}

/// [`stripe_config`] with the admin listener on `admin`.
fn stripe_config_at(
    admin: &str,
    upstream: &str,
    store: &str,
    api: Option<(&str, &Path)>,
) -> String {
    let reconcile = match api {
        Some((base, key)) => format!(
            "[routes.reconcile]\nsender = \"stripe\"\ncredentials_file = \"{}\"\nevery = \"1h\"\nlookback = \"1d\"\napi_base = \"{base}\"\n",
            key.display()
        ),
        None => String::new(),
    };
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
shutdown_grace = "2s"

[admin]
listen = "{admin}"
token = "{ADMIN_TOKEN}"

[store]
{store}
timeout = "2s"

[[routes]]
name = "payments"
path = "/stripe"
upstream = "{upstream}"
upstream_timeout = "5s"

[routes.verify]
scheme = "stripe"
secrets = ["{WEBHOOK_SECRET}"]

{reconcile}"#
    )
}

fn key_file(dir: &Path, key: &str) -> std::path::PathBuf {
    let path = dir.join("api-key");
    std::fs::write(&path, format!("{key}\n")).unwrap();
    path
}

/// Stripe's own delivery of `event`: rendered at the endpoint's API
/// version, so its bytes differ from what `/v1/events` lists.
async fn stripe_delivers(url: &str, event: &Value) -> Answer {
    Sender::new().send(stripe_request(url, event)).await
}

/// `event` as Stripe sends it to `url`, signed now.
fn stripe_request(url: &str, event: &Value) -> Request<http_body_util::Full<bytes::Bytes>> {
    let mut webhook = event.clone();
    webhook["api_version"] = "2025-01-27.acacia".into();
    let body = webhook.to_string();
    Request::post(url)
        .header("content-type", "application/json")
        .header(
            "stripe-signature",
            stripe_signature(body.as_bytes(), now_unix()),
        )
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap()
}

/// `GET /admin/routes/{route}/reconcile` of the admin listener at `admin`.
async fn status(admin: &str, route: &str) -> Value {
    let url = format!("{admin}/admin/routes/{route}/reconcile");
    get(&url, Some(ADMIN_TOKEN)).await.json()
}

/// Wait until the route's status shows `field` (a pass recorded it).
async fn until_shown(admin: &str, route: &str, field: &str) {
    let shown = eventually(Duration::from_secs(10), || async {
        status(admin, route).await[field].is_string()
    });
    assert!(
        shown.await,
        "{route}: no {field} in {}",
        status(admin, route).await
    );
}

async fn run_now(admin: &str, route: &str, query: &str) -> Answer {
    let url = format!("{admin}/admin/routes/{route}/reconcile?{query}");
    request(Method::POST, &url, Some(ADMIN_TOKEN)).await
}

/// Events `evt_{prefix}_{i}`, created between an hour and two minutes ago.
fn events(prefix: &str, n: usize) -> Vec<Value> {
    let now = now_unix();
    (0..n)
        .map(|i| {
            stripe_event(
                &format!("evt_{prefix}_{i:03}"),
                now - 3600 + (i as u64 * 10) % 3400,
                "charge.succeeded",
            )
        })
        .collect()
}

/// Every request the upstream saw carried a `Stripe-Signature` that
/// verifies under the route's secret.
fn all_verify(upstream: &Upstream) {
    for seen in upstream.seen() {
        let header = seen.headers["stripe-signature"].to_str().unwrap();
        assert!(
            stripe_verifies(header, &seen.body),
            "{}: {header}",
            seen.key()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stripe_gave_up_on_are_delivered_once_across_pages_and_a_429() {
    let upstream = Upstream::start().await;
    // The second call of the pass is refused 429 (Retry-After: 1).
    let api = StripeApi::start(Some(2)).await;
    let all = events("outage", 250);
    api.events.lock().unwrap().extend(all.iter().cloned());
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "backend = \"embedded\"\npath = \"{}\"",
        dir.path().join("hookgate.db").display()
    );

    // Before the outage Stripe delivered the first 50; then the gateway was
    // down for longer than Stripe retries.
    let admin_port = free_port();
    let admin = format!("http://127.0.0.1:{admin_port}");
    let at = format!("127.0.0.1:{admin_port}");
    let text = stripe_config_at(&at, &upstream.url("/"), &store, None);
    let (config, port) = write_config(dir.path(), &text);
    let mut before = GatewayProcess::start(&config, port).await;
    for event in &all[..50] {
        let answer = stripe_delivers(&before.url("/stripe"), event).await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    assert!(before.stop("TERM").success());
    assert_eq!(upstream.total(), 50);

    let key = key_file(dir.path(), STRIPE_KEY);
    let text = stripe_config_at(&at, &upstream.url("/"), &store, Some((&api.base(), &key)));
    // The on-call hears of what the pass found.
    let oncall = Upstream::start().await;
    let text = format!(
        "{text}\n[[notify]]\nname = \"oncall\"\nkind = \"webhook\"\nurl = \"{}\"\n\
         secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\non = [\"reconcile_missing\"]\n",
        oncall.url("/oncall")
    );
    std::fs::write(
        &config,
        text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let gateway = GatewayProcess::start(&config, port).await;
    let ids: Vec<String> = all
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        upstream.all_reached(&ids, Duration::from_secs(30)).await,
        "{:?}",
        upstream.counts()
    );
    until_shown(&admin, "payments", "last_success_at").await;
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    all_verify(&upstream);
    let heard = eventually(Duration::from_secs(20), || ready(oncall.total() > 0));
    assert!(heard.await, "the on-call heard of the pass");
    let message: Value = serde_json::from_slice(&oncall.seen()[0].body).unwrap();
    let notice = &message["data"]["notices"][0];
    assert_eq!(notice["kind"], "reconcile_missing", "{message}");
    assert_eq!(notice["route"], "payments");
    let summary = notice["summary"].as_str().unwrap();
    assert!(summary.contains("found 200 event(s)"), "{summary}");
    // What reached the upstream is the event object as the API lists it.
    let seen = upstream
        .seen()
        .into_iter()
        .find(|s| s.key() == "evt_outage_100")
        .unwrap();
    let sent: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(sent, all[100]);

    let shown = status(&admin, "payments").await;
    assert_eq!(shown["sender"], "stripe");
    assert_eq!(
        (shown["seen"].as_u64(), shown["missing"].as_u64()),
        (Some(250), Some(200))
    );
    assert_eq!(
        (shown["delivered"].as_u64(), shown["errors"].as_u64()),
        (Some(200), Some(0))
    );
    assert!(shown["last_error"].is_null(), "{shown}");
    // Three pages of 100, and the one refused: nothing skipped. One store
    // read per event listed.
    assert_eq!(api.calls(), 4);
    assert_eq!(
        (shown["api_calls"].as_u64(), shown["store_reads"].as_u64()),
        (Some(4), Some(250))
    );
    let metrics = scrape(&format!("{admin}/metrics")).await;
    let route = [("route", "payments")];
    assert_eq!(
        sample(&metrics, "hookgate_reconcile_missing_total", &route),
        Some(200.0)
    );
    assert_eq!(
        sample(&metrics, "hookgate_reconcile_delivered_total", &route),
        Some(200.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "hookgate_reconcile_runs_total",
            &[("route", "payments"), ("result", "ok")]
        ),
        Some(1.0)
    );
    let reconciled = [
        ("route", "payments"),
        ("entrance", "reconcile"),
        ("result", "completed"),
    ];
    assert_eq!(
        sample(&metrics, "hookgate_attempts_total", &reconciled),
        Some(200.0)
    );
    assert!(
        sample(
            &metrics,
            "hookgate_reconcile_last_success_timestamp_seconds",
            &route
        )
        .unwrap()
            > 0.0
    );

    // Stripe's late retry of a reconciled event, in its own bytes, is a
    // duplicate: answered from the record, not forwarded.
    let late = stripe_delivers(&gateway.url("/stripe"), &all[120]).await;
    assert_eq!(late.status, StatusCode::OK, "{:?}", late.json());
    assert!(late.replayed());
    // Another pass now finds nothing missing and sends nothing again.
    let again = run_now(&admin, "payments", "since=1d").await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.json());
    assert_eq!(again.json()["missing"], 0);
    assert_eq!(upstream.total(), 250);
    drop(gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_pass_racing_stripes_late_retries_forwards_each_once() {
    // A consumer that takes 20 ms a call: the pass and Stripe's retries
    // overlap for a second.
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(20),
        ..ok_plan(seen)
    })
    .await;
    let api = StripeApi::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), STRIPE_KEY);
    let config = stripe_config(
        &upstream.url("/"),
        "backend = \"memory\"",
        Some((&api.base(), &key)),
    );
    let gateway = Arc::new(TestGateway::start(&config).await);
    // The first scheduled pass (nothing listed yet) ends first.
    until_shown(&gateway.admin_url(""), "payments", "last_run_at").await;
    let all = events("race", 60);
    api.events.lock().unwrap().extend(all.iter().cloned());

    // The pass walks newest first; Stripe retries oldest first, one every
    // 15 ms: they meet in the middle, each winning some events and
    // meeting the other's claim on some.
    let admin = gateway.admin_url("");
    let pass = tokio::spawn(async move { run_now(&admin, "payments", "since=1d").await });
    let mut racing = tokio::task::JoinSet::new();
    let mut every = pace(Duration::from_millis(15));
    for event in &all {
        every.tick().await;
        let (url, event) = (gateway.url("/stripe"), event.clone());
        // Stripe retries what the gateway answers 409 in flight.
        racing.spawn(async move {
            let request = || stripe_request(&url, &event);
            Sender::new().send_until_settled(request).await
        });
    }
    let pass = pass.await.unwrap();
    assert_eq!(pass.status, StatusCode::OK, "{:?}", pass.json());
    let mut replayed = 0;
    while let Some(answer) = racing.join_next().await {
        let answer = answer.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json());
        replayed += u64::from(answer.replayed());
    }
    for event in &all {
        assert_eq!(upstream.count(event["id"].as_str().unwrap()), 1);
    }
    assert_eq!(upstream.total(), 60);
    // Each event was forwarded by one of them: the pass delivered exactly
    // those Stripe's retry found done.
    let tally = pass.json();
    assert_eq!(tally["delivered"].as_u64(), Some(replayed), "{tally}");
    assert_eq!(tally["errors"].as_u64(), Some(0), "{tally}");
    Arc::into_inner(gateway).unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_reconcile_a_route_once_between_them() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let api = StripeApi::start(None).await;
    let all = events("fleet", 40);
    api.events.lock().unwrap().extend(all.iter().cloned());
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), STRIPE_KEY);
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"fleet{}:\"",
        redis.url(),
        rand::random::<u32>()
    );
    let config = stripe_config(&upstream.url("/"), &store, Some((&api.base(), &key)));
    let (a, b) = tokio::join!(TestGateway::start(&config), TestGateway::start(&config));
    let ids: Vec<String> = all
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(upstream.all_reached(&ids, Duration::from_secs(30)).await);

    // Operators on both asking for a pass at once: one runs, or each in
    // turn; never two at a time, never a second forward.
    let (admin_a, admin_b) = (a.admin_url(""), b.admin_url(""));
    let (one, two) = tokio::join!(
        run_now(&admin_a, "payments", "since=1d"),
        run_now(&admin_b, "payments", "since=1d")
    );
    for answer in [&one, &two] {
        assert!(
            answer.status == StatusCode::OK || answer.code() == "reconcile_running",
            "{:?}",
            answer.json()
        );
    }
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    // The scheduled pass ran on one gateway only; both show its result.
    let runs = |text: &str| {
        sample(
            text,
            "hookgate_reconcile_runs_total",
            &[("route", "payments"), ("result", "ok")],
        )
    };
    let (ma, mb) = (
        scrape(&a.admin_url("/metrics")).await,
        scrape(&b.admin_url("/metrics")).await,
    );
    let scheduled = runs(&ma).unwrap_or(0.0) + runs(&mb).unwrap_or(0.0);
    let asked = [&one, &two]
        .iter()
        .filter(|a| a.status == StatusCode::OK)
        .count() as f64;
    assert_eq!(scheduled, 1.0 + asked);
    assert_eq!(
        status(&a.admin_url(""), "payments").await["last_success_at"],
        status(&b.admin_url(""), "payments").await["last_success_at"]
    );
    // A third gateway joining within `every` runs no pass of its own, and
    // reports the fleet's last good one.
    let c = TestGateway::start(&config).await;
    let route = [("route", "payments")];
    let last = |text: &str| {
        sample(
            text,
            "hookgate_reconcile_last_success_timestamp_seconds",
            &route,
        )
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            last(&scrape(&c.admin_url("/metrics")).await).is_some_and(|at| at > 0.0)
        })
        .await
    );
    assert_eq!(runs(&scrape(&c.admin_url("/metrics")).await), None);
    for gateway in [a, b, c] {
        gateway.shutdown().await;
    }
}

/// A gateway whose Stripe route reconciles with a revoked key (5 events
/// listed), once its first pass failed.
async fn revoked() -> (Upstream, StripeApi, tempfile::TempDir, TestGateway) {
    let upstream = Upstream::start().await;
    let api = StripeApi::start(None).await;
    api.events.lock().unwrap().extend(events("creds", 5));
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "rk_test_revoked_0000000000");
    let config = stripe_config(
        &upstream.url("/"),
        "backend = \"memory\"",
        Some((&api.base(), &key)),
    );
    let gateway = TestGateway::start(&config).await;
    until_shown(&gateway.admin_url(""), "payments", "last_error").await;
    (upstream, api, dir, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_are_a_status_and_a_metric_and_senders_go_on() {
    let (upstream, _api, _dir, gateway) = revoked().await;
    let shown = status(&gateway.admin_url(""), "payments").await;
    assert_eq!(
        shown["last_error"],
        "the sender refused the credentials (401)"
    );
    assert!(shown["last_success_at"].is_null());
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert!(!metrics.contains("rk_test_revoked"), "the key never shows");
    let failed = [("route", "payments"), ("result", "error")];
    assert_eq!(
        sample(&metrics, "hookgate_reconcile_runs_total", &failed),
        Some(1.0)
    );
    let route = [("route", "payments")];
    assert_eq!(
        sample(
            &metrics,
            "hookgate_reconcile_last_success_timestamp_seconds",
            &route
        ),
        Some(0.0)
    );
    assert_eq!(upstream.total(), 0);
    // The route's senders are served as ever.
    let event = stripe_event("evt_live", now_unix(), "charge.succeeded");
    assert_eq!(
        stripe_delivers(&gateway.url("/stripe"), &event)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(upstream.count("evt_live"), 1);
    // The routes view carries it for the console.
    let routes = get(&gateway.admin_url("/admin/routes"), Some(ADMIN_TOKEN))
        .await
        .json();
    assert_eq!(
        routes["routes"][0]["reconcile"]["last_error"],
        shown["last_error"]
    );
    gateway.shutdown().await;
}

fn github_config(upstream: &str, api: &str, key: &Path) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"
token = "{ADMIN_TOKEN}"

[store]
backend = "memory"

[[routes]]
name = "repo"
path = "/github"
upstream = "{upstream}"
upstream_timeout = "5s"

[routes.verify]
scheme = "github"
secrets = ["{WEBHOOK_SECRET}"]

[routes.reconcile]
sender = "github"
credentials_file = "{}"
every = "1h"
api_base = "{api}"
hook = "{GITHUB_HOOK}"
"#,
        key.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_is_asked_once_for_each_failed_delivery_the_gateway_never_completed() {
    let upstream = Upstream::with(|seen| Plan {
        headers: vec![],
        ..ok_plan(seen)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), GITHUB_TOKEN);
    // The stand-in's redeliveries go to the gateway, which listens on a
    // port known only once it starts: a placeholder route until then.
    let port = free_port();
    let api = GithubApi::start(format!("http://127.0.0.1:{port}/github")).await;
    let config = github_config(&upstream.url("/"), &api.base(), &key);
    let gateway = TestGateway::start_on(&config, &format!("127.0.0.1:{port}")).await;
    // The first scheduled pass (nothing listed yet) ends first.
    until_shown(&gateway.admin_url(""), "repo", "last_run_at").await;
    // g-done reached the gateway, which completed it, though GitHub saw
    // its 10-second timeout; g-lost did not (GitHub saw a 502 and never
    // retries); g-retried failed once and GitHub's redelivery succeeded.
    // 150 more completed ones make two pages.
    let done = Sender::new()
        .send(github_request(&gateway.url("/github"), "g-done"))
        .await;
    assert_eq!(done.status, StatusCode::OK);
    let now = now_unix();
    {
        let mut deliveries = api.deliveries.lock().unwrap();
        deliveries.push(github_delivery(500, "g-retried", now - 600, 200, true));
        deliveries.push(github_delivery(400, "g-lost", now - 1200, 502, false));
        deliveries.push(github_delivery(300, "g-retried", now - 1800, 502, false));
        deliveries.push(github_delivery(200, "g-done", now - 2400, 504, false));
        for i in 0..150 {
            deliveries.push(github_delivery(
                10_000 + i,
                &format!("g-old-{i}"),
                now - 3000 - i,
                200,
                false,
            ));
        }
    }
    // GitHub queues the redelivery asked for: a pass meanwhile does not
    // ask for the same delivery again.
    api.hold.store(true, std::sync::atomic::Ordering::SeqCst);
    let admin = gateway.admin_url("");
    for _ in 0..2 {
        let pass = run_now(&admin, "repo", "since=1d").await;
        assert_eq!(pass.status, StatusCode::OK, "{:?}", pass.json());
        let (seen, missing) = (
            pass.json()["seen"].as_u64(),
            pass.json()["missing"].as_u64(),
        );
        assert_eq!((seen, missing), (Some(153), Some(1)));
    }
    assert_eq!(api.asked(), vec![400]);
    assert_eq!(upstream.count("g-lost"), 0);
    api.release();
    assert!(
        eventually(Duration::from_secs(20), || async {
            upstream.count("g-lost") == 1
        })
        .await,
        "asked: {:?}",
        api.asked()
    );
    assert_eq!(
        status(&admin, "repo").await["asked"],
        0,
        "the last pass asked nothing"
    );
    // A pass now: g-lost's newest delivery is the redelivery that
    // succeeded; nothing is asked again.
    let again = run_now(&gateway.admin_url(""), "repo", "since=1d").await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.json());
    assert_eq!(again.json()["asked"], 0);
    assert_eq!(api.asked(), vec![400]);
    assert_eq!(upstream.count("g-lost"), 1);
    assert_eq!(
        upstream.count("g-retried"),
        0,
        "settled at GitHub, not this gateway's to ask"
    );
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(
        sample(
            &metrics,
            "hookgate_reconcile_asked_total",
            &[("route", "repo")]
        ),
        Some(1.0)
    );
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_shows_the_status_and_a_dry_run_lists_what_is_missing() {
    let upstream = Upstream::start().await;
    let api = StripeApi::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), STRIPE_KEY);
    let config = stripe_config(
        &upstream.url("/"),
        "backend = \"memory\"",
        Some((&api.base(), &key)),
    );
    let gateway = TestGateway::start(&config).await;
    until_shown(&gateway.admin_url(""), "payments", "last_success_at").await;
    api.events.lock().unwrap().extend(events("dry", 3));
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .arg("reconcile")
            .args(args)
            .args(["--admin", &gateway.admin_url("")])
            .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .unwrap()
    };
    let dry = cli(&["payments", "--since", "1d", "--dry-run"]);
    let said = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert_eq!(dry.status.code(), Some(0), "{said}");
    assert!(
        said.starts_with("3 missing of 3 seen on payments"),
        "{said}"
    );
    assert!(
        said.contains("evt_dry_000") && said.contains("evt_dry_002"),
        "{said}"
    );
    assert_eq!(upstream.total(), 0, "a dry run delivers nothing");

    let shown = cli(&["status"]);
    let said = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert_eq!(shown.status.code(), Some(0));
    assert!(
        said.starts_with("payments (stripe, every 1h, lookback 1d)"),
        "{said}"
    );

    let ran = cli(&["payments", "--since", "1d", "--json"]);
    let done: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(ran.status.code(), Some(0));
    assert_eq!(
        (done["missing"].as_u64(), done["delivered"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(upstream.total(), 3);

    for (args, code) in [
        (&["status", "--dry-run"][..], 2),
        (&["payments", "--since", "soon"][..], 2),
        (&["nosuch"][..], 1),
        (&["payments", "--since", "90d"][..], 1),
    ] {
        assert_eq!(cli(args).status.code(), Some(code), "{args:?}");
    }
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_failing_reconciliation_on_its_route() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let (_upstream, _api, _dir, gateway) = revoked().await;
    browser.open_console(&gateway.admin_url("/ui")).await;
    let line = browser
        .wait_for(
            "the route's reconciliation",
            "return document.querySelector('#routes-body [data-reconcile=payments]')?.textContent",
        )
        .await;
    let line = line.as_str().unwrap().to_owned();
    assert!(
        line.starts_with("reconciles with stripe: no good pass yet"),
        "{line}"
    );
    assert!(
        line.contains("the sender refused the credentials (401)"),
        "{line}"
    );
    browser.screenshot("reconcile-failing").await;
    gateway.shutdown().await;
}

/// `tests/sdk/SCRIPT ARGS` with the SDKs' Python (`.py`) or node (`.mjs`):
/// its one JSON document.
async fn oracle(python: std::path::PathBuf, script: &str, args: Vec<String>) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sdk")
        .join(script);
    let program = match script.ends_with(".py") {
        true => python,
        false => "node".into(),
    };
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(program)
            .arg(path)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script}: {stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{script}: {error} {stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stripe_sdk_pages_through_the_stand_in_as_through_stripe() {
    let Some(python) = crate::sdk::sdk_python() else {
        return;
    };
    let api = StripeApi::start(None).await;
    let all = events("sdk", 250);
    api.events.lock().unwrap().extend(all.iter().cloned());
    let since = (now_unix() - 86_400).to_string();
    let args = vec![api.base(), STRIPE_KEY.to_owned(), since];
    let listed = oracle(python, "stripe_events.py", args).await;
    let listed = listed.as_array().unwrap();
    // Newest first, every one once, each read as an Event of a charge.
    let mut expected: Vec<&Value> = all.iter().collect();
    expected.sort_by_key(|event| {
        let created = event["created"].as_u64().unwrap();
        std::cmp::Reverse((created, event["id"].as_str().unwrap().to_owned()))
    });
    let ids = |events: Vec<&Value>| -> Vec<String> {
        (events.iter())
            .map(|event| event["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(listed.iter().collect()), ids(expected));
    for event in listed {
        assert_eq!(event["event"], true, "{event}");
        assert_eq!(event["object"], "charge", "{event}");
        assert_eq!(event["type"], "charge.succeeded", "{event}");
    }
    // Three pages, as the SDK asked for them.
    assert_eq!(api.calls(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn githubs_openapi_description_takes_the_stand_in_and_what_hookgate_reads() {
    if crate::sdk::sdk_python().is_none() {
        return;
    }
    let api = GithubApi::start("http://127.0.0.1:9/unused".to_owned()).await;
    let now = now_unix();
    {
        let mut deliveries = api.deliveries.lock().unwrap();
        for i in 0..150u64 {
            let status = [200, 502, 504][i as usize % 3];
            deliveries.push(github_delivery(
                1000 - i,
                &format!("g-{i}"),
                now - 60 * i,
                status,
                i % 5 == 0,
            ));
        }
    }
    let args = vec![api.base(), GITHUB_TOKEN.to_owned(), GITHUB_HOOK.to_owned()];
    let report = oracle(std::path::PathBuf::new(), "github_api.mjs", args).await;
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
    assert_eq!(
        (report["items"].as_u64(), report["pages"].as_u64()),
        (Some(150), Some(2))
    );
}

/// The cost of a pass, measured by hand for BENCHMARKS.md (`cargo test
/// --release --test it -- --ignored measure_a_pass --nocapture`): 10,000
/// events in the window, 9,000 completed by the sender, 1,000 missing, on
/// the embedded store. It checks the counts; the times it prints are never
/// pass/fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn measure_a_pass_of_ten_thousand_events() {
    let upstream = Upstream::start().await;
    let api = StripeApi::start(None).await;
    let now = now_unix();
    let all: Vec<Value> = (0..10_000)
        .map(|i| {
            stripe_event(
                &format!("evt_m_{i:05}"),
                now - 7200 + i / 2,
                "charge.succeeded",
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "backend = \"embedded\"\npath = \"{}\"",
        dir.path().join("m.db").display()
    );
    let key = key_file(dir.path(), STRIPE_KEY);
    let config = stripe_config(&upstream.url("/"), &store, Some((&api.base(), &key)));
    // `every` long, and the first scheduled pass over before the sender's
    // deliveries: the measured pass is the operator's.
    let gateway =
        Arc::new(TestGateway::start(&config.replace("every = \"1h\"", "every = \"1d\"")).await);
    until_shown(&gateway.admin_url(""), "payments", "last_run_at").await;
    api.events.lock().unwrap().extend(all.iter().cloned());
    let mut sending = tokio::task::JoinSet::new();
    for chunk in all.chunks(250).map(|chunk| chunk.to_vec()) {
        let url = gateway.url("/stripe");
        sending.spawn(async move {
            for event in chunk
                .iter()
                .filter(|e| !e["id"].as_str().unwrap().ends_with('0'))
            {
                assert_eq!(stripe_delivers(&url, event).await.status, StatusCode::OK);
            }
        });
    }
    while let Some(sent) = sending.join_next().await {
        sent.unwrap();
    }
    let started = tokio::time::Instant::now();
    let pass = run_now(&gateway.admin_url(""), "payments", "since=1d").await;
    let elapsed = started.elapsed();
    let tally = pass.json();
    assert_eq!(
        (tally["seen"].as_u64(), tally["missing"].as_u64()),
        (Some(10_000), Some(1_000)),
        "{tally}"
    );
    assert_eq!(tally["delivered"].as_u64(), Some(1_000));
    eprintln!(
        "a pass over 10,000 events, 1,000 missing: {elapsed:?}; {} API calls, {} store reads",
        tally["api_calls"], tally["store_reads"]
    );
    let started = tokio::time::Instant::now();
    let again = run_now(&gateway.admin_url(""), "payments", "since=1d").await;
    eprintln!(
        "again, nothing missing: {:?}; {} API calls, {} store reads",
        started.elapsed(),
        again.json()["api_calls"],
        again.json()["store_reads"]
    );
    Arc::into_inner(gateway).unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_changes_and_removes_a_routes_reconciliation() {
    let upstream = Upstream::start().await;
    let api = StripeApi::start(None).await;
    let now = now_unix();
    let all: Vec<Value> = (0..10)
        .map(|i| {
            let kind = ["charge.succeeded", "customer.created"][i % 2];
            stripe_event(&format!("evt_reload_{i}"), now - 600 + i as u64, kind)
        })
        .collect();
    api.events.lock().unwrap().extend(all.iter().cloned());
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), STRIPE_KEY);
    let plain = stripe_config(&upstream.url("/"), "backend = \"memory\"", None);
    let gateway = TestGateway::start(&plain).await;
    let admin = gateway.admin_url("");
    assert_eq!(
        run_now(&admin, "payments", "").await.code(),
        "not_reconciled"
    );

    // Added, for charges only: the next tick's pass takes them.
    let reconciling = stripe_config(
        &upstream.url("/"),
        "backend = \"memory\"",
        Some((&api.base(), &key)),
    );
    let charges = reconciling.replace(
        "lookback = \"1d\"",
        "lookback = \"1d\"\ntypes = [\"charge.*\"]",
    );
    assert!(gateway.reloader.apply(&parse_config(&charges)).is_empty());
    until_shown(&admin, "payments", "last_success_at").await;
    assert_eq!(upstream.total(), 5);
    let charged = |key: String| {
        all.iter()
            .any(|e| e["id"] == key && e["type"] == "charge.succeeded")
    };
    assert!(upstream.seen().into_iter().all(|seen| charged(seen.key())));

    // Changed to every type: the next pass (an operator's now; the
    // schedule's is an hour away) takes the rest, and nothing twice.
    assert!(gateway
        .reloader
        .apply(&parse_config(&reconciling))
        .is_empty());
    let pass = run_now(&admin, "payments", "since=1d").await;
    assert_eq!(pass.status, StatusCode::OK, "{:?}", pass.json());
    assert_eq!(pass.json()["delivered"], 5);
    for event in &all {
        assert_eq!(upstream.count(event["id"].as_str().unwrap()), 1);
    }

    // Removed: no status, no pass; the routes view says null.
    assert!(gateway.reloader.apply(&parse_config(&plain)).is_empty());
    assert_eq!(
        status(&admin, "payments").await["error"]["code"],
        "not_reconciled"
    );
    assert_eq!(
        run_now(&admin, "payments", "").await.code(),
        "not_reconciled"
    );
    let routes = get(&gateway.admin_url("/admin/routes"), Some(ADMIN_TOKEN))
        .await
        .json();
    assert!(routes["routes"][0]["reconcile"].is_null());
    gateway.shutdown().await;
}
