//! The operator console (`/ui` on the admin listener): its security at the
//! HTTP level, and an operator's session in a real headless Chromium
//! driven through chromedriver (WebDriver), with screenshots in
//! `target/console/`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::json;

use crate::support::*;

/// A gateway with the admin listener, its token and its read token, in
/// front of an upstream that answers 503 until the switch is set; events
/// die after one attempt.
pub(crate) async fn gateway() -> (TestGateway, Upstream, Arc<AtomicBool>) {
    let (upstream, healthy) = Upstream::flaky().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "max_attempts = 1",
        "",
    );
    let gateway = TestGateway::start(&with_read_token(&text)).await;
    (gateway, upstream, healthy)
}

/// `method path` on the admin listener as a console session: its `cookie`,
/// and `csrf` as `X-CSRF-Token` when given.
pub(crate) async fn as_session(
    gateway: &TestGateway,
    method: Method,
    path: &str,
    cookie: &str,
    csrf: Option<&str>,
) -> Answer {
    let mut headers = vec![("cookie", cookie)];
    headers.extend(csrf.map(|csrf| ("x-csrf-token", csrf)));
    send(method, &gateway.admin_url(path), &headers, "").await
}

/// Log in with `token`; the session cookie (`name=value`) when accepted.
pub(crate) async fn login(gateway: &TestGateway, token: &str) -> (Answer, Option<String>) {
    let body = format!("token={token}");
    let answer = send(
        Method::POST,
        &gateway.admin_url("/ui/login"),
        &[("content-type", "application/x-www-form-urlencoded")],
        &body,
    )
    .await;
    let cookie = answer
        .headers
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(str::to_owned);
    (answer, cookie)
}

/// The CSRF token in the console page that `cookie` gets.
pub(crate) async fn csrf_of(gateway: &TestGateway, cookie: &str) -> String {
    let page = as_session(gateway, Method::GET, "/ui", cookie, None).await;
    let page = String::from_utf8_lossy(&page.body).into_owned();
    let start = page
        .find(r#"name="csrf-token" content=""#)
        .expect("the console page")
        + 27;
    page[start..start + 64].to_owned()
}

#[tokio::test]
async fn the_console_is_unreachable_without_the_token_and_on_the_public_port() {
    let (gateway, _upstream, _) = gateway().await;

    // The public port knows no /ui.
    for path in ["/ui", "/ui/console.js", "/ui/login"] {
        let answer = send(Method::GET, &gateway.url(path), &[], "").await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert!(!String::from_utf8_lossy(&answer.body).contains("console"));
    }
    // Without a session: the login form, nothing else.
    let page = send(Method::GET, &gateway.admin_url("/ui"), &[], "").await;
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains(r#"action="/ui/login""#), "{html}");
    assert!(!html.contains("csrf-token"), "{html}");
    let (refused, cookie) = login(&gateway, "not-the-token").await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(cookie.is_none(), "no session for a wrong token");
    // A made-up session is nobody.
    let forged = "hookgate_console=".to_owned() + &"ab".repeat(32);
    for cookie in [forged.as_str(), "hookgate_console="] {
        let answer = as_session(&gateway, Method::GET, "/admin/events", cookie, None).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{cookie}");
        let page = as_session(&gateway, Method::GET, "/ui", cookie, None).await;
        assert!(!String::from_utf8_lossy(&page.body).contains("csrf-token"));
    }
    gateway.shutdown().await;

    // No admin token configured: no console either.
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, "", "");
    let gateway = TestGateway::start(&with_admin(&text, false)).await;
    let answer = send(Method::GET, &gateway.admin_url("/ui"), &[], "").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_session_is_a_strict_httponly_cookie_and_every_page_has_a_strict_csp() {
    let (gateway, _upstream, _) = gateway().await;
    let (answer, cookie) = login(&gateway, ADMIN_TOKEN).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.headers["location"], "/ui");
    let set = answer.headers["set-cookie"].to_str().unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = cookie.unwrap();

    for path in ["/ui", "/ui/console.js", "/ui/console.css"] {
        let answer = as_session(&gateway, Method::GET, path, &cookie, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        let csp = answer.headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(answer.headers["x-content-type-options"], "nosniff");
    }
    // The cookie stands in for the bearer token on reads.
    let events = as_session(&gateway, Method::GET, "/admin/events", &cookie, None).await;
    assert_eq!(events.status, StatusCode::OK);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_console_action_without_its_csrf_token_is_refused() {
    let (gateway, upstream, healthy) = gateway().await;
    healthy.store(true, Ordering::SeqCst);
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_kept"))
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let (_, cookie) = login(&gateway, ADMIN_TOKEN).await;
    let cookie = cookie.unwrap();
    let csrf = csrf_of(&gateway, &cookie).await;
    let path = "/admin/routes/hook/keys/evt_kept";

    for csrf in [None, Some("0000")] {
        let answer = as_session(&gateway, Method::DELETE, path, &cookie, csrf).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN);
        assert_eq!(answer.code(), "csrf_token_invalid");
    }
    let redeliver = format!("{path}/redeliver?force=true");
    let redeliver = as_session(&gateway, Method::POST, &redeliver, &cookie, None).await;
    assert_eq!(redeliver.status, StatusCode::FORBIDDEN);
    let logout = send(
        Method::POST,
        &gateway.admin_url("/ui/logout"),
        &[("cookie", &cookie)],
        "csrf=0000",
    )
    .await;
    assert_eq!(logout.status, StatusCode::FORBIDDEN);
    assert!(
        gateway.record("hook", "evt_kept").await.is_some(),
        "nothing was forgotten"
    );
    assert_eq!(upstream.count("evt_kept"), 1, "nothing was sent again");

    // With it, the action goes through the admin API.
    let answer = as_session(&gateway, Method::DELETE, path, &cookie, Some(&csrf)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert!(gateway.record("hook", "evt_kept").await.is_none());
    // Logging out ends the session.
    let body = format!("csrf={csrf}");
    let logout = send(
        Method::POST,
        &gateway.admin_url("/ui/logout"),
        &[("cookie", &cookie)],
        &body,
    )
    .await;
    assert_eq!(logout.status, StatusCode::SEE_OTHER);
    let events = as_session(&gateway, Method::GET, "/admin/events", &cookie, None).await;
    assert_eq!(events.status, StatusCode::UNAUTHORIZED);
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_event_record_shows_bounded_previews_and_masks_signatures() {
    let (gateway, _upstream, _) = gateway().await;
    let padding = "x".repeat(3000);
    let body = format!(r#"{{"id":"evt_big","pad":"{padding}"}}"#);
    let answer = Sender::new().deliver(&gateway.url("/hook"), &body).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    let record = request(
        Method::GET,
        &gateway.admin_url("/admin/routes/hook/keys/evt_big"),
        Some(ADMIN_TOKEN),
    )
    .await
    .json();
    let kept = &record["request"];
    assert_eq!(kept["body_bytes"], body.len());
    assert_eq!(kept["body_preview_bytes"], 2048);
    assert_eq!(kept["body_preview"].as_str().unwrap().len(), 2048);
    let signature = kept["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "x-signature")
        .expect("the signature header is listed");
    assert_eq!(signature[1], "[redacted]");
    assert!(!record.to_string().contains(&sign(body.as_bytes())));
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_record_shows_its_recorded_response_and_routes_count_their_outcomes() {
    let (gateway, _upstream, healthy) = gateway().await;
    healthy.store(true, Ordering::SeqCst);
    let (sender, url, body) = (Sender::new(), gateway.url("/hook"), event("evt_ok"));
    assert_eq!(sender.deliver(&url, &body).await.status, StatusCode::OK);
    assert!(sender.deliver(&url, &body).await.replayed());

    let admin = |path: &str| {
        let url = gateway.admin_url(path);
        async move { request(Method::GET, &url, Some(ADMIN_TOKEN)).await.json() }
    };
    let record = admin("/admin/routes/hook/keys/evt_ok").await;
    let response = &record["response"];
    assert_eq!(response["status"], 200);
    assert_eq!(
        response["body_preview"],
        r#"{"processed":"evt_ok","call":1}"#
    );
    assert_eq!(response["body_bytes"], 31);
    let headers = response["headers"].as_array().unwrap();
    assert!(headers
        .iter()
        .any(|pair| pair[0] == "x-upstream" && pair[1] == "legacy"));
    assert!(
        !response.to_string().contains("session=secret"),
        "{response}"
    );

    let routes = admin("/admin/routes").await;
    let outcomes = &routes["routes"][0]["outcomes"];
    assert_eq!(
        (
            outcomes["forwarded"].as_u64(),
            outcomes["replayed"].as_u64()
        ),
        (Some(1), Some(1))
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_operator_finds_a_dead_letter_in_chromium_and_redelivers_it() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let (gateway, upstream, healthy) = gateway().await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    // A dead letter (the upstream refuses it), and, once the upstream is
    // healthy, ordinary traffic with one hostile key.
    let answer = sender.deliver(&url, &event("evt_dead")).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        gateway
            .record("hook", "evt_dead")
            .await
            .unwrap()
            .state
            .as_str(),
        "dead"
    );
    // Five more, for a bulk redelivery.
    for i in 0..5 {
        let answer = sender.deliver(&url, &event(&format!("evt_bulk_{i}"))).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    healthy.store(true, Ordering::SeqCst);
    // Visible ASCII only (no spaces), so it is kept as the key itself.
    let hostile =
        "<img/src=x/onerror=document.title='pwned'><script>document.title='pwned'</script>";
    let body = json!({ "id": hostile, "type": "order.paid" }).to_string();
    assert_eq!(sender.deliver(&url, &body).await.status, StatusCode::OK);
    for i in 0..5 {
        let body = event(&format!("evt_{i}"));
        assert_eq!(sender.deliver(&url, &body).await.status, StatusCode::OK);
        assert!(sender.deliver(&url, &body).await.replayed());
    }

    // Replays keep arriving while the operator looks.
    let traffic = {
        let (sender, url, body) = (sender.clone(), url.clone(), event("evt_0"));
        tokio::spawn(async move {
            let mut every = pace(Duration::from_millis(50));
            loop {
                every.tick().await;
                sender.deliver(&url, &body).await;
            }
        })
    };

    // Log in with the token.
    browser.goto(&gateway.admin_url("/ui")).await;
    browser.screenshot("login").await;
    browser.type_into("#token", ADMIN_TOKEN).await;
    browser.click("#login").await;
    browser
        .wait_for(
            "the routes",
            "return document.querySelector('#routes-body tr[data-route=hook]')",
        )
        .await;
    // The last hour's outcomes and the 24-hour chart, both kept in the
    // gateway, with the zone the times are in.
    browser
        .wait_for(
            "the last hour",
            "return document.querySelector('#routes-body [data-outcome=replayed]')",
        )
        .await;
    browser
        .wait_for(
            "the chart",
            "return document.querySelectorAll('[data-chart=hook] rect').length > 0",
        )
        .await;
    let zone = browser
        .run("return document.querySelector('#history-zone').textContent")
        .await;
    assert!(zone.as_str().unwrap().contains("times in"), "{zone}");

    // The events just sent, the hostile key shown as text, never as markup.
    browser
        .wait_for(
            "the dead letter",
            "return document.querySelector('#events-body tr[data-key=evt_dead]')",
        )
        .await;
    let shown = browser
        .run("return [...document.querySelectorAll('#events-body tr')].map(r => r.children[3].textContent)")
        .await;
    assert!(
        shown.as_array().unwrap().iter().any(|key| key == hostile),
        "{shown}"
    );
    let injected = browser
        .run("return document.querySelectorAll('main img, main script').length")
        .await;
    assert_eq!(injected, 0);
    assert_ne!(browser.run("return document.title").await, "pwned");
    browser.screenshot("events").await;

    // Only the dead letters.
    browser.run("const s = document.querySelector('#filter-state'); s.value = 'dead'; s.dispatchEvent(new Event('change'));").await;
    browser
        .wait_for("the dead filter", "const rows = document.querySelectorAll('#events-body tr'); return rows.length === 6 && [...rows].every(r => r.querySelector('[data-state=dead]'))")
        .await;

    // Its record, then a redelivery: confirmed, and the state changes.
    browser.click("#events-body tr[data-key=evt_dead]").await;
    browser
        .wait_for(
            "the record",
            "return document.querySelector('#event-state [data-state=dead]')",
        )
        .await;
    let masked = browser
        .run("return document.querySelector('#event').textContent")
        .await;
    assert!(masked.as_str().unwrap().contains("[redacted]"), "{masked}");
    // Its failed attempt, with the upstream's status; a time with its zone.
    let history = browser
        .run("return document.querySelector('#event-history tbody').textContent")
        .await;
    assert!(
        history.as_str().unwrap().contains("refused 503"),
        "{history}"
    );
    let buttons = browser
        .run("return [...document.querySelectorAll('#event button[data-action]')].map(b => b.dataset.action).join(' ')")
        .await;
    assert_eq!(
        buttons, "redeliver replay forget",
        "what a dead letter can be asked"
    );
    browser.screenshot("dead-letter").await;
    browser.click("button[data-action=redeliver]").await;
    browser.confirm().await;
    browser
        .wait_for(
            "completed",
            "return document.querySelector('#event-state [data-state=completed]')",
        )
        .await;
    browser.screenshot("redelivered").await;
    assert_eq!(
        gateway
            .record("hook", "evt_dead")
            .await
            .unwrap()
            .state
            .as_str(),
        "completed"
    );
    assert_eq!(
        upstream.count("evt_dead"),
        2,
        "the refused attempt and the redelivery"
    );

    // The incident's window and status: the other five dead letters, then
    // all of them redelivered in one action, confirmed with the dry run's
    // count, its progress followed to the end.
    browser.type_into("#filter-since", "1h").await;
    browser.type_into("#filter-status", "503").await;
    browser.click("#search").await;
    browser
        .wait_for("the window", "const rows = document.querySelectorAll('#events-body tr.event'); return rows.length === 5 && [...rows].every(r => r.dataset.key.startsWith('evt_bulk_'))")
        .await;
    browser.screenshot("filtered").await;
    browser.click("button[data-bulk=redeliver]").await;
    let asked = browser.confirm().await;
    assert!(asked.contains("Redeliver 5 events matching"), "{asked}");
    assert!(asked.contains("status=503"), "{asked}");
    browser
        .wait_for(
            "the bulk action's end",
            "return document.querySelector('#bulk-text').dataset.state === 'finished'",
        )
        .await;
    let progress = browser
        .run("return [document.querySelector('#bulk-meter').value, document.querySelector('#bulk-text').textContent]")
        .await;
    assert_eq!(progress[0], 5, "{progress}");
    assert!(
        progress[1].as_str().unwrap().contains("5 delivered"),
        "{progress}"
    );
    browser.screenshot("bulk-redelivered").await;
    for i in 0..5 {
        assert_eq!(upstream.count(&format!("evt_bulk_{i}")), 2, "evt_bulk_{i}");
    }
    browser
        .run("for (const id of ['filter-since', 'filter-status']) document.getElementById(id).value = '';")
        .await;

    // The audit, on its own page: who did what, when.
    browser.click("#nav-audit").await;
    browser
        .wait_for(
            "the audit",
            "return document.querySelector('#audit-body tr[data-audit^=\"POST /admin/events/redeliver\"]')",
        )
        .await;
    let audit = browser
        .run("return document.querySelector('#audit-body').textContent")
        .await;
    let audit = audit.as_str().unwrap();
    assert!(
        audit.contains("console")
            && audit.contains("operator")
            && audit.contains("/admin/routes/hook/keys/evt_dead/redeliver"),
        "{audit}"
    );
    browser.screenshot("audit").await;
    browser.click("#nav-overview").await;

    // Search by key finds it on its route.
    browser.run("const s = document.querySelector('#filter-state'); s.value = ''; s.dispatchEvent(new Event('change'));").await;
    browser.type_into("#filter-key", "evt_3").await;
    browser.click("#search").await;
    browser
        .wait_for(
            "the search",
            "return document.querySelector('#event-key')?.textContent === 'evt_3'",
        )
        .await;
    browser.screenshot("event").await;

    // Log out, and in again with the read token: everything is shown,
    // no action button is.
    browser.click("#logout").await;
    browser
        .wait_for("the login form", "return document.querySelector('#token')")
        .await;
    browser.type_into("#token", READ_TOKEN).await;
    browser.click("#login").await;
    browser
        .wait_for(
            "the routes, read only",
            "return document.querySelector('#routes-body tr[data-route=hook]')",
        )
        .await;
    assert_eq!(
        browser
            .run("return document.querySelector('#who').textContent")
            .await,
        "operator console (read only)"
    );
    browser.type_into("#filter-key", "evt_dead").await;
    browser.click("#search").await;
    browser
        .wait_for(
            "the record, read only",
            "return document.querySelector('#event-key')?.textContent === 'evt_dead'",
        )
        .await;
    let buttons = browser
        .run("return [...document.querySelectorAll('main button[data-action], main button[data-redrive], main button[data-bulk], main input[data-select]')].filter(b => b.offsetParent !== null).length")
        .await;
    assert_eq!(buttons, 0, "a read-only session is shown no action");
    browser.screenshot("read-only").await;
    traffic.abort();
    gateway.shutdown().await;
}
