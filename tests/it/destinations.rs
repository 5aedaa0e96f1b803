//! Several destinations: one verified event, each consumer once — with its
//! own filter, failures, dead letters and redrive, on every store and
//! across a fleet.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::*;

/// invoice.paid and charge.succeeded go to billing, customer.created to
/// the CRM, payout.paid to nobody.
const TYPES: [&str; 4] = [
    "invoice.paid",
    "charge.succeeded",
    "customer.created",
    "payout.paid",
];

fn body(i: usize) -> String {
    format!(
        r#"{{"id":"evt_{i}","type":"{}","amount":4200}}"#,
        TYPES[i % 4]
    )
}

/// Which destinations event `i` passes.
fn passes(i: usize) -> (bool, bool) {
    (i % 4 < 2, i % 4 == 2)
}

/// An async route `hook` with the destinations billing and crm (each
/// `dest_extra` added), on `backend`, with an admin listener.
fn two_destinations(
    billing: &str,
    crm: &str,
    backend: &Backend,
    route_extra: &str,
    dest_extra: &str,
) -> String {
    let route_extra = format!(
        "delivery = \"async\"\nretry_backoff = {{ initial = \"50ms\", max = \"200ms\" }}\n{route_extra}"
    );
    let text = config_text("http://removed", backend, &route_extra, "")
        .replace("upstream = \"http://removed\"\n", "");
    with_admin(
        &format!(
            r#"{text}
[[routes.destinations]]
name = "billing"
upstream = "{billing}"
filter = {{ "json:/type" = ["invoice.*", "charge.succeeded"] }}
{dest_extra}
[[routes.destinations]]
name = "crm"
upstream = "{crm}"
filter = {{ "json:/type" = "customer.*" }}
{dest_extra}
"#
        ),
        true,
    )
}

/// Each destination got exactly the events its filter takes, once each,
/// under the event's key; events no filter takes were answered
/// `{"filtered":true}` and never forwarded; duplicates were answered as
/// duplicates.
async fn each_destination_once(
    answers: &HashMap<usize, Vec<Answer>>,
    billing: &Upstream,
    crm: &Upstream,
) {
    let want = |pick: fn((bool, bool)) -> bool| -> Vec<String> {
        (0..answers.len())
            .filter(|i| pick(passes(*i)))
            .map(|i| format!("evt_{i}"))
            .collect()
    };
    let within = Duration::from_secs(30);
    assert!(billing.all_reached(&want(|p| p.0), within).await);
    assert!(crm.all_reached(&want(|p| p.1), within).await);
    for (i, answers) in answers {
        let key = format!("evt_{i}");
        // At most one delivery is answered as the first; none is when the
        // first one's acceptance reached the store after its deadline (a
        // loaded machine): that sender was told 503, and its retry found
        // the event accepted. What is delivered is checked below.
        let first = answers.iter().filter(|a| !a.replayed()).count();
        assert!(first <= 1, "{key}: one first answer at most: {answers:?}");
        assert!(
            answers.iter().all(|a| a.status == StatusCode::ACCEPTED),
            "{key}: {answers:?}"
        );
        let (to_billing, to_crm) = passes(*i);
        assert_eq!(
            billing.count(&key),
            usize::from(to_billing),
            "{key} at billing"
        );
        assert_eq!(crm.count(&key), usize::from(to_crm), "{key} at the crm");
        if !to_billing && !to_crm {
            for answer in answers {
                assert_eq!(answer.json(), serde_json::json!({ "filtered": true }));
            }
        }
    }
    for seen in billing.seen().iter().chain(crm.seen().iter()) {
        let id: serde_json::Value = serde_json::from_slice(&seen.body).unwrap();
        assert_eq!(
            seen.key(),
            id["id"],
            "the event's own key as Idempotency-Key"
        );
        assert!(
            !seen.headers.contains_key("hookgate-destinations"),
            "hookgate's list stays in the store"
        );
    }
}

async fn fans_out_once(backend: Backend) {
    let (billing, crm) = (Upstream::start().await, Upstream::start().await);
    let text = two_destinations(&billing.url("/b"), &crm.url("/c"), &backend, "", "");
    let gateway = TestGateway::start(&text).await;
    let answers = deliver_concurrently(&[gateway.url("/hook")], 50, 3, body).await;
    each_destination_once(&answers, &billing, &crm).await;

    // Every view shows the event with its per-destination states.
    let shown = get(
        &gateway.admin_url("/admin/routes/hook/keys/evt_0"),
        Some(ADMIN_TOKEN),
    )
    .await
    .json();
    assert_eq!(shown["destinations"]["billing"]["state"], "completed");
    assert_eq!(shown["destinations"]["crm"], serde_json::Value::Null);
    let one = get(
        &gateway.admin_url("/admin/routes/hook/keys/evt_2?destination=crm"),
        Some(ADMIN_TOKEN),
    )
    .await
    .json();
    assert_eq!(
        (one["route"].as_str(), one["destination"].as_str()),
        (Some("hook"), Some("crm"))
    );
    assert_eq!(one["state"], "completed");
    assert_eq!(one["response"]["status"], 200);

    // A delivery is counted a moment after its record completes.
    let counted = eventually(Duration::from_secs(10), || async {
        let metrics = scrape(&gateway.admin_url("/metrics")).await;
        (completed(&metrics, "billing"), completed(&metrics, "crm")) == (Some(26.0), Some(12.0))
    });
    assert!(counted.await, "every completion counted");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(completed(&metrics, "billing"), Some(26.0));
    assert_eq!(completed(&metrics, "crm"), Some(12.0));
    let labels = [("route", "hook"), ("outcome", "filtered")];
    assert_eq!(
        sample(&metrics, "hookgate_requests_total", &labels),
        Some(12.0)
    );
    gateway.shutdown().await;
}

/// `hookgate_delivery_attempts_total` of route hook's `destination` that
/// completed, in the scraped `metrics`.
fn completed(metrics: &str, destination: &str) -> Option<f64> {
    let labels = [
        ("route", "hook"),
        ("destination", destination),
        ("result", "completed"),
    ];
    sample(metrics, "hookgate_delivery_attempts_total", &labels)
}

crate::on_backends!(fans_out_once);

/// Billing is down for a while: the CRM gets its events on time, billing
/// catches up once back, and nothing is delivered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_down_holds_up_no_other() {
    let ((billing, healthy), crm) = (Upstream::flaky().await, Upstream::start().await);
    let text = two_destinations(&billing.url("/b"), &crm.url("/c"), &Backend::Memory, "", "");
    let gateway = TestGateway::start(&text).await;
    let answers = deliver_concurrently(&[gateway.url("/hook")], 20, 1, body).await;
    assert_eq!(answers.len(), 20);
    let to_crm: Vec<String> = (0..20)
        .filter(|i| passes(*i).1)
        .map(|i| format!("evt_{i}"))
        .collect();
    assert!(crm.all_reached(&to_crm, Duration::from_secs(10)).await);
    // Billing was tried and refused every one of its events meanwhile.
    let refused = eventually(Duration::from_secs(10), || async {
        (0..20)
            .filter(|i| passes(*i).0)
            .all(|i| billing.count(&format!("evt_{i}")) >= 1)
    })
    .await;
    assert!(refused);
    assert!(billing
        .seen()
        .iter()
        .all(|seen| seen.status == StatusCode::SERVICE_UNAVAILABLE));

    healthy.store(true, Ordering::SeqCst);
    let completed = eventually(Duration::from_secs(20), || async {
        let mut done = true;
        for i in (0..20).filter(|i| passes(*i).0) {
            let record = gateway.record("hook/billing", &format!("evt_{i}")).await;
            done &= record.is_some_and(|r| r.state.as_str() == "completed");
        }
        done
    })
    .await;
    assert!(completed, "billing caught up");
    let delivered = billing
        .seen()
        .iter()
        .filter(|s| s.status == StatusCode::OK)
        .count();
    assert_eq!(delivered, 10, "each of billing's events answered 200 once");
    for key in &to_crm {
        assert_eq!(crm.count(key), 1, "{key}: the crm got it once");
    }
    gateway.shutdown().await;
}

/// A dead letter in billing is redriven alone: the CRM, which had the
/// event, never gets it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_of_one_destination_is_redriven_alone() {
    let ((billing, healthy), crm) = (Upstream::flaky().await, Upstream::start().await);
    // Both pass: a type each filter takes is not possible, so the crm takes
    // every event here.
    let text = two_destinations(
        &billing.url("/b"),
        &crm.url("/c"),
        &Backend::Memory,
        "",
        "max_attempts = 2",
    )
    .replace("filter = { \"json:/type\" = \"customer.*\" }\n", "");
    let gateway = TestGateway::start(&text).await;
    let answer = Sender::new().deliver(&gateway.url("/hook"), &body(0)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let dead = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook/billing", "evt_0").await;
        record.is_some_and(|r| r.state.as_str() == "dead")
    })
    .await;
    assert!(dead, "billing parked it after 2 attempts");
    assert_eq!(crm.count("evt_0"), 1);

    // An action that concerns one delivery names its destination.
    let url = gateway.admin_url("/admin/routes/hook/keys/evt_0/redeliver");
    let refused = request(Method::POST, &url, Some(ADMIN_TOKEN)).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.json()["error"]["code"], "destination_required");
    let unknown = request(
        Method::POST,
        &format!("{url}?destination=erp"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.json()["error"]["code"], "destination_not_found");

    // The CLI shows the event at each destination, then redrives one.
    let shown = events_cli(&gateway, &["show", "hook", "evt_0"]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.contains("to billing: dead, 2 attempt(s), last error refused 503"),
        "{shown}"
    );
    assert!(shown.contains("to crm: completed"), "{shown}");
    healthy.store(true, Ordering::SeqCst);
    let redrive = events_cli(&gateway, &["redrive", "hook", "--destination", "billing"]);
    let said = String::from_utf8_lossy(&redrive.stdout).into_owned();
    assert!(
        redrive.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&redrive.stderr)
    );
    assert!(
        said.contains("redrove 1 dead letters of hook: 1 completed"),
        "{said}"
    );
    let completed = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook/billing", "evt_0").await;
        record.is_some_and(|r| r.state.as_str() == "completed")
    })
    .await;
    assert!(completed);
    assert_eq!(billing.count("evt_0"), 3, "two refused, one redriven");
    assert_eq!(crm.count("evt_0"), 1, "the crm never got it again");
    gateway.shutdown().await;
}

/// Two gateways on one store, each event delivered three times at once
/// through both: each destination gets each of its events once.
async fn a_fleet_fans_out_once(backend: Backend) {
    let (billing, crm) = (Upstream::start().await, Upstream::start().await);
    let text = two_destinations(&billing.url("/b"), &crm.url("/c"), &backend, "", "");
    let a = TestGateway::start(&text).await;
    let b = TestGateway::start(&text).await;
    let answers = deliver_concurrently(&[a.url("/hook"), b.url("/hook")], 50, 3, body).await;
    each_destination_once(&answers, &billing, &crm).await;
    a.shutdown().await;
    b.shutdown().await;
}

crate::on_backends!(a_fleet_fans_out_once: [redis, postgres]);

/// A reload that adds a destination applies to the events after it, never
/// to those accepted before; one that removes a destination retires it: it
/// takes no new event and delivers what it was handed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_destination_takes_only_later_events() {
    let (billing, (crm, crm_up), erp) = (
        Upstream::start().await,
        Upstream::flaky().await,
        Upstream::start().await,
    );
    let text = two_destinations(&billing.url("/b"), &crm.url("/c"), &Backend::Memory, "", "");
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");
    let sender = Sender::new();
    // evt_0 goes to billing; evt_2 to the crm, which refuses it for now.
    for i in [0, 2] {
        assert_eq!(
            sender.deliver(&url, &body(i)).await.status,
            StatusCode::ACCEPTED
        );
    }
    assert!(
        billing
            .all_reached(&["evt_0".to_owned()], Duration::from_secs(10))
            .await
    );
    assert!(
        crm.all_reached(&["evt_2".to_owned()], Duration::from_secs(10))
            .await
    );

    // Add erp (every event), remove the crm.
    let crm_table = format!(
        "[[routes.destinations]]\nname = \"crm\"\nupstream = \"{}\"\nfilter = {{ \"json:/type\" = \"customer.*\" }}\n",
        crm.url("/c")
    );
    assert!(text.contains(&crm_table), "{text}");
    let reloaded = format!(
        "{}\n[[routes.destinations]]\nname = \"erp\"\nupstream = \"{}\"\n",
        text.replace(&crm_table, ""),
        erp.url("/e")
    );
    assert!(gateway.reloader.apply(&parse_config(&reloaded)).is_empty());
    for i in [4, 6] {
        assert_eq!(
            sender.deliver(&url, &body(i)).await.status,
            StatusCode::ACCEPTED
        );
    }
    let later = ["evt_4".to_owned(), "evt_6".to_owned()];
    assert!(erp.all_reached(&later, Duration::from_secs(10)).await);
    assert!(
        billing
            .all_reached(&later[..1], Duration::from_secs(10))
            .await
    );
    // A duplicate of an event accepted before the reload stays a duplicate.
    assert!(sender.deliver(&url, &body(0)).await.replayed());
    assert_eq!(erp.count("evt_0"), 0, "never replayed into an older event");
    assert_eq!((billing.count("evt_0"), billing.count("evt_4")), (1, 1));

    // The retired crm delivers what it was handed, and nothing new.
    crm_up.store(true, Ordering::SeqCst);
    let delivered = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook/crm", "evt_2").await;
        record.is_some_and(|r| r.state.as_str() == "completed")
    })
    .await;
    assert!(delivered, "the removed destination's event was delivered");
    assert_eq!(
        crm.count("evt_6"),
        0,
        "a removed destination takes no new event"
    );
    gateway.shutdown().await;
}

/// In the console, an event of a route with destinations shows its state at
/// each; the dead one opens as its own delivery and is redelivered alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_each_destination_and_redelivers_one() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let ((billing, healthy), crm) = (Upstream::flaky().await, Upstream::start().await);
    let text = two_destinations(
        &billing.url("/b"),
        &crm.url("/c"),
        &Backend::Memory,
        "",
        "max_attempts = 1",
    )
    .replace("filter = { \"json:/type\" = \"customer.*\" }\n", "");
    let gateway = TestGateway::start(&text).await;
    let answer = Sender::new().deliver(&gateway.url("/hook"), &body(0)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let dead = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook/billing", "evt_0").await;
        record.is_some_and(|r| r.state.as_str() == "dead")
    })
    .await;
    assert!(dead);
    assert!(
        crm.all_reached(&["evt_0".to_owned()], Duration::from_secs(10))
            .await
    );
    healthy.store(true, Ordering::SeqCst);

    browser.open_console(&gateway.admin_url("/ui")).await;
    browser
        .wait_for(
            "the event's deliveries listed",
            "return [...document.querySelectorAll('#events-body tr.event')].map(r => r.children[2].textContent).includes('hook/billing')",
        )
        .await;
    // The event on its route: each destination's state, and no action of
    // its own (each delivery is acted on where it is).
    browser
        .run("[...document.querySelectorAll('#events-body tr.event')].find(r => r.children[2].textContent === 'hook').click()")
        .await;
    browser
        .wait_for(
            "the destinations",
            "return document.querySelector('#event tr[data-destination=billing] [data-state=dead]') && document.querySelector('#event tr[data-destination=crm] [data-state=completed]')",
        )
        .await;
    let actions = browser
        .run("return document.querySelectorAll('#event button[data-action]').length")
        .await;
    assert_eq!(actions, 0);
    browser.screenshot("destinations").await;
    browser.click("#event tr[data-destination=billing]").await;
    browser
        .wait_for(
            "billing's delivery",
            "return document.querySelector('#event-state [data-state=dead]') && document.querySelector('button[data-action=redeliver]')",
        )
        .await;
    browser.click("button[data-action=redeliver]").await;
    browser.confirm().await;
    browser
        .wait_for(
            "completed",
            "return document.querySelector('#event-state [data-state=completed]')",
        )
        .await;
    assert_eq!(billing.count("evt_0"), 2, "refused once, redelivered once");
    assert_eq!(crm.count("evt_0"), 1, "the crm never again");
    gateway.shutdown().await;
}

/// A pause of one destination (the real CLI's `routes pause --destination`)
/// holds that destination alone; a pause of the route holds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_destination_holds_alone() {
    let (billing, crm) = (Upstream::start().await, Upstream::start().await);
    let text = two_destinations(&billing.url("/b"), &crm.url("/c"), &Backend::Memory, "", "")
        .replace("filter = { \"json:/type\" = \"customer.*\" }\n", "");
    let gateway = TestGateway::start(&text).await;
    let routes = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .arg("routes")
            .args(args)
            .args(["--admin", &gateway.admin_url("")])
            .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let said = routes(&[
        "pause",
        "hook",
        "--destination",
        "billing",
        "--reason",
        "deploy",
    ]);
    assert!(said.contains("paused"), "{said}");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let labels = [("route", "hook"), ("destination", "billing")];
    assert_eq!(
        sample(&metrics, "hookgate_route_paused", &labels),
        Some(1.0)
    );

    let sender = Sender::new();
    let url = gateway.url("/hook");
    assert_eq!(
        sender.deliver(&url, &body(0)).await.status,
        StatusCode::ACCEPTED
    );
    assert!(
        crm.all_reached(&["evt_0".to_owned()], Duration::from_secs(10))
            .await
    );
    gateway.worker_passes(3).await;
    assert_eq!(billing.count("evt_0"), 0, "billing is paused");

    // The route's pause holds every destination.
    routes(&["resume", "hook", "--destination", "billing"]);
    assert!(
        billing
            .all_reached(&["evt_0".to_owned()], Duration::from_secs(10))
            .await
    );
    routes(&["pause", "hook"]);
    assert_eq!(
        sender.deliver(&url, &body(4)).await.status,
        StatusCode::ACCEPTED
    );
    gateway.worker_passes(3).await;
    assert_eq!((billing.count("evt_4"), crm.count("evt_4")), (0, 0));
    routes(&["resume", "hook"]);
    let both = ["evt_4".to_owned()];
    assert!(billing.all_reached(&both, Duration::from_secs(10)).await);
    assert!(crm.all_reached(&both, Duration::from_secs(10)).await);
    assert_eq!((billing.count("evt_0"), crm.count("evt_0")), (1, 1));
    gateway.shutdown().await;
}

/// A route with one destination: an action on an event can only mean that
/// destination's delivery, so it needs no `?destination=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_destination_needs_no_name() {
    let (billing, healthy) = Upstream::flaky().await;
    let text = two_destinations(
        &billing.url("/b"),
        "http://127.0.0.1:1/c",
        &Backend::Memory,
        "",
        "max_attempts = 1",
    );
    let crm_table = "[[routes.destinations]]\nname = \"crm\"\nupstream = \"http://127.0.0.1:1/c\"\nfilter = { \"json:/type\" = \"customer.*\" }\nmax_attempts = 1\n";
    assert!(text.contains(crm_table), "{text}");
    let gateway = TestGateway::start(&text.replace(crm_table, "")).await;
    let answer = Sender::new().deliver(&gateway.url("/hook"), &body(0)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let dead = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook/billing", "evt_0").await;
        record.is_some_and(|r| r.state.as_str() == "dead")
    })
    .await;
    assert!(dead);
    healthy.store(true, Ordering::SeqCst);
    let url = gateway.admin_url("/admin/routes/hook/keys/evt_0/redeliver");
    let sent = request(Method::POST, &url, Some(ADMIN_TOKEN)).await;
    assert_eq!(sent.status, StatusCode::OK, "{:?}", sent.json());
    let sent = sent.json();
    assert_eq!(sent["state"], "completed");
    assert_eq!(
        (sent["route"].as_str(), sent["destination"].as_str()),
        (Some("hook"), Some("billing"))
    );
    assert_eq!(billing.count("evt_0"), 2, "refused once, redelivered once");
    gateway.shutdown().await;
}
