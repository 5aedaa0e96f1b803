//! `[[notify]]`: the on-call engineer hears of the event itself. Events of
//! an ordered async route die against a failing upstream; a Slack, a
//! webhook and a PagerDuty target on a local receiver each get every dead
//! letter (and blocked entity) once, grouped, retried when the receiver
//! fails, in shapes the vendors' own SDKs accept: slack_sdk's Block Kit
//! models, the standardwebhooks library's verification, and PagerDuty's
//! documented Events API v2 fields. Two gateways on one Redis say each
//! dead letter once between them.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use serde_json::Value;

use crate::sdk::sdk_python;
use crate::support::*;

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ROUTING_KEY: &str = "R0123456789abcdef0123456789abcde";

/// An ordered async route to `upstream` that gives up after two attempts,
/// and the three targets on `receiver`.
fn config(upstream: &Upstream, receiver: &Upstream, backend: &Backend) -> String {
    let route = "delivery = \"async\"\nmax_attempts = 2\n\
                 retry_backoff = { initial = \"50ms\", max = \"100ms\" }\n\
                 order_by = \"json:/customer\"";
    let text = config_text(&upstream.url("/"), backend, route, "");
    format!(
        "{text}
[[notify]]
name = \"oncall-slack\"
kind = \"slack\"
url = \"{slack}\"
console_url = \"https://hookgate-admin.example/ui\"
group_within = \"5s\"
rate = \"100/s\"

[[notify]]
name = \"oncall-webhook\"
kind = \"webhook\"
url = \"{webhook}\"
secret = \"{WHSEC}\"
group_within = \"5s\"
rate = \"100/s\"

[[notify]]
name = \"oncall-pagerduty\"
kind = \"pagerduty\"
url = \"{pagerduty}\"
routing_key = \"{ROUTING_KEY}\"
on = [\"dead_letter\"]
group_within = \"5s\"
rate = \"100/s\"
",
        slack = receiver.url("/slack"),
        webhook = receiver.url("/webhook"),
        pagerduty = receiver.url("/pagerduty"),
    )
}

/// A body of event `id` for `customer`, signed.
fn body(id: &str, customer: &str) -> String {
    format!(r#"{{"id":"{id}","customer":"{customer}","type":"invoice.paid"}}"#)
}

/// An upstream that refuses every event (503).
async fn refusing() -> Upstream {
    Upstream::with(|seen| Plan {
        status: StatusCode::SERVICE_UNAVAILABLE,
        ..ok_plan(seen)
    })
    .await
}

/// The receiver: the Slack target's first message is refused (500), so it
/// is delivered on a retry; everything else is taken.
async fn receiver() -> Upstream {
    let refused = Arc::new(AtomicBool::new(false));
    Upstream::with(move |seen| Plan {
        status: if seen.uri.starts_with("/slack") && !refused.swap(true, Ordering::SeqCst) {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        },
        ..ok_plan(seen)
    })
    .await
}

/// What the messages `receiver` took (2xx) on `path` said: (kind, key)
/// of each notice.
fn heard(receiver: &Upstream, path: &str) -> Vec<(String, String)> {
    let mut notices = Vec::new();
    for seen in receiver.seen() {
        if !seen.uri.starts_with(path) || !seen.status.is_success() {
            continue;
        }
        let message: Value = serde_json::from_slice(&seen.body).unwrap();
        match path {
            "/slack" => {
                for block in message["blocks"].as_array().unwrap() {
                    let Some(text) = block["text"]["text"].as_str() else {
                        continue;
                    };
                    let Some(kind) = text.strip_prefix('*').and_then(|t| t.split('*').next())
                    else {
                        continue;
                    };
                    let key = text.split("key `").nth(1).and_then(|k| k.split('`').next());
                    notices.push((kind.to_owned(), key.unwrap_or_default().to_owned()));
                }
            }
            _ => {
                let list = match path {
                    "/webhook" => &message["data"]["notices"],
                    _ => &message["payload"]["custom_details"]["notices"],
                };
                for notice in list.as_array().unwrap() {
                    let kind = notice["kind"].as_str().unwrap().to_owned();
                    notices.push((kind, notice["key"].as_str().unwrap_or_default().to_owned()));
                }
            }
        }
    }
    notices.sort();
    notices
}

fn each_once(ids: &[String], kinds: &[&str]) -> Vec<(String, String)> {
    let mut expected: Vec<(String, String)> = (ids.iter())
        .flat_map(|id| kinds.iter().map(|kind| ((*kind).to_owned(), id.clone())))
        .collect();
    expected.sort();
    expected
}

/// `python tests/sdk/notifications.py kind` on `message`.
fn sdk_accepts(python: &std::path::Path, kind: &str, message: &Value) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/notifications.py");
    let mut child = Command::new(python)
        .args([script, kind])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child.stdin.take().unwrap())
        .write_all(message.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{kind}: the SDK refused it: {}\n{message}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_hears_each_dead_letter_once_in_its_vendors_shape() {
    let Some(python) = sdk_python() else {
        return;
    };
    let upstream = refusing().await;
    let receiver = receiver().await;
    let gateway = TestGateway::start(&config(&upstream, &receiver, &Backend::Memory)).await;
    let sender = Sender::new();
    let ids: Vec<String> = (0..5).map(|i| format!("evt_notify_{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let accepted = sender
            .send(signed(
                &gateway.url("/hook"),
                &body(id, &format!("cus_{i}")),
            ))
            .await;
        assert_eq!(
            accepted.status,
            StatusCode::ACCEPTED,
            "{:?}",
            accepted.json()
        );
    }
    let slack = each_once(&ids, &["dead_letter", "entity_blocked"]);
    let pagerduty = each_once(&ids, &["dead_letter"]);
    let all_heard = eventually(Duration::from_secs(30), || {
        ready(
            heard(&receiver, "/slack") == slack
                && heard(&receiver, "/webhook") == slack
                && heard(&receiver, "/pagerduty") == pagerduty,
        )
    });
    assert!(
        all_heard.await,
        "slack {:?}\nwebhook {:?}\npagerduty {:?}",
        heard(&receiver, "/slack"),
        heard(&receiver, "/webhook"),
        heard(&receiver, "/pagerduty")
    );
    // Ten notices close together are grouped: fewer messages than notices.
    let messages = |path: &str| {
        (receiver.seen().iter())
            .filter(|seen| seen.uri.starts_with(path) && seen.status.is_success())
            .count()
    };
    assert!(
        messages("/webhook") < slack.len(),
        "{}",
        messages("/webhook")
    );

    let seen = receiver.seen();
    // Slack refused the first message; the same message came again.
    let slack_calls: Vec<_> = seen
        .iter()
        .filter(|s| s.uri.starts_with("/slack"))
        .collect();
    assert_eq!(slack_calls[0].status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        slack_calls[1..]
            .iter()
            .any(|s| s.body == slack_calls[0].body),
        "the refused message was retried"
    );
    for message in &seen {
        let body = String::from_utf8(message.body.to_vec()).unwrap();
        let json: Value = serde_json::from_str(&body).unwrap();
        if message.uri.starts_with("/slack") {
            sdk_accepts(&python, "slack", &serde_json::json!({ "body": body }));
            let text = json.to_string();
            assert!(
                text.contains("https://hookgate-admin.example/ui#event/hook/evt_notify_"),
                "a link opens the event: {text}"
            );
        } else if message.uri.starts_with("/webhook") {
            let headers: HashMap<String, String> = (message.headers.iter())
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
                .collect();
            let check = serde_json::json!({ "body": body, "headers": headers, "secret": WHSEC });
            sdk_accepts(&python, "webhook", &check);
            let first = &json["data"]["notices"][0];
            assert_eq!(first["route"], "hook");
            assert_eq!(first["attempts"], 2);
            assert!(
                first["error"].as_str().unwrap().starts_with("503"),
                "{first}"
            );
        } else {
            pagerduty_shape(&json);
        }
    }
    // A notification is no route's event: none of it reached the upstream.
    assert!(upstream.seen().iter().all(|s| !s.uri.contains("notify")));
    gateway.shutdown().await;
}

/// PagerDuty's Events API v2 (developer.pagerduty.com, "Send an Alert
/// Event"): its required fields and their bounds.
fn pagerduty_shape(event: &Value) {
    assert_eq!(event["routing_key"], ROUTING_KEY);
    assert_eq!(event["event_action"], "trigger");
    let dedup = event["dedup_key"].as_str().unwrap();
    assert!(!dedup.is_empty() && dedup.len() <= 255);
    let payload = &event["payload"];
    let summary = payload["summary"].as_str().unwrap();
    assert!(!summary.is_empty() && summary.chars().count() <= 1024);
    assert!(!payload["source"].as_str().unwrap().is_empty());
    let severity = payload["severity"].as_str().unwrap();
    assert!(["critical", "error", "warning", "info"].contains(&severity));
    assert!(payload["timestamp"].as_str().unwrap().ends_with('Z'));
    for link in event["links"].as_array().unwrap() {
        assert!(link["href"].as_str().unwrap().starts_with("http"));
    }
}

/// Two gateways on one Redis, the senders' deliveries split between them:
/// each dead letter is said once between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_says_each_dead_letter_once() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = refusing().await;
    let receiver = Upstream::start().await;
    let text = config(&upstream, &receiver, &Backend::Redis(redis.url()));
    let a = TestGateway::start(&text).await;
    let b = TestGateway::start(&text).await;
    let sender = Sender::new();
    let ids: Vec<String> = (0..20).map(|i| format!("evt_fleet_notify_{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let gateway = if i % 2 == 0 { &a } else { &b };
        let body = body(id, &format!("cus_{i}"));
        for _ in 0..2 {
            let accepted = sender.send(signed(&gateway.url("/hook"), &body)).await;
            assert!(accepted.status.is_success(), "{:?}", accepted.json());
        }
    }
    let expected = each_once(&ids, &["dead_letter"]);
    let once = eventually(Duration::from_secs(30), || {
        ready(heard(&receiver, "/pagerduty") == expected)
    });
    assert!(once.await, "{:?}", heard(&receiver, "/pagerduty"));
    a.shutdown().await;
    b.shutdown().await;
}

/// A breaker that opens and a queue that nears its bound are each said
/// once while they stay so: a breaker by each gateway whose breaker it is,
/// the queue by the first of two gateways to claim its mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_and_a_filling_queue_are_said_once() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = refusing().await;
    let receiver = Upstream::start().await;
    let route = "delivery = \"async\"\nmax_queued = 10\n\
                 retry_backoff = { initial = \"50ms\", max = \"100ms\" }\n\
                 circuit_breaker = { failures = 2, window = \"30s\", open_for = \"60s\" }";
    let text = format!(
        "{}
[[notify]]
name = \"oncall\"
kind = \"webhook\"
url = \"{}\"
secret = \"{WHSEC}\"
on = [\"breaker_open\", \"queue_near_bound\"]
group_within = \"200ms\"
",
        config_text(&upstream.url("/"), &Backend::Redis(redis.url()), route, ""),
        receiver.url("/webhook"),
    );
    let a = TestGateway::start(&text).await;
    let b = TestGateway::start(&text).await;
    let sender = Sender::new();
    // Two failures open a's breaker; then the queue fills to 9 of 10.
    for i in 0..9 {
        let id = format!("evt_fill_{i}");
        let accepted = sender.deliver(&a.url("/hook"), &event(&id)).await;
        assert_eq!(
            accepted.status,
            StatusCode::ACCEPTED,
            "{:?}",
            accepted.json()
        );
    }
    // Both gateways' workers call the upstream, so each breaker may open:
    // one notice each. The queue is the fleet's: one notice.
    let count = |kind: &str| {
        (heard(&receiver, "/webhook").iter())
            .filter(|(said, _)| said == kind)
            .count()
    };
    let said = eventually(Duration::from_secs(20), || {
        ready(count("breaker_open") >= 1 && count("queue_near_bound") == 1)
    });
    assert!(said.await, "{:?}", heard(&receiver, "/webhook"));
    // Both gateways look every second and measure the queue every 2 s,
    // while the breakers stay open and the queue full: nothing more.
    let before = heard(&receiver, "/webhook");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(heard(&receiver, "/webhook"), before);
    assert!(count("breaker_open") <= 2, "{before:?}");
    assert_eq!(count("queue_near_bound"), 1);
    a.shutdown().await;
    b.shutdown().await;
}
