//! Stand-ins for the senders' APIs reconciliation reads, serving the
//! documented shapes (`tests/it/reconcile.rs` proves them against the
//! senders' own descriptions): Stripe's `GET /v1/events`, and GitHub's
//! hook deliveries with their redelivery, which sends the delivery again,
//! signed, to the gateway as GitHub does.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};
use sha2::Sha256;

use super::{Plan, Seen, Sender, Upstream};

pub const STRIPE_KEY: &str = "rk_test_reconcile_0123456789";
pub const GITHUB_TOKEN: &str = "ghp_reconcile0123456789";
/// The route's secret on both senders' routes.
pub const WEBHOOK_SECRET: &str = "whsec_reconcile_0123456789";

fn hex_hmac(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    for part in parts {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// `Stripe-Signature` for `body` at `t`, as Stripe signs a webhook.
pub fn stripe_signature(body: &[u8], t: u64) -> String {
    let t = t.to_string();
    format!(
        "t={t},v1={}",
        hex_hmac(WEBHOOK_SECRET, &[t.as_bytes(), b".", body])
    )
}

/// Whether `header` is a valid `Stripe-Signature` of `body` under the
/// route's secret (what a consumer that verifies Stripe checks).
pub fn stripe_verifies(header: &str, body: &[u8]) -> bool {
    let mut t = None;
    let mut signatures = Vec::new();
    for pair in header.split(',') {
        match pair.split_once('=') {
            Some(("t", value)) => t = Some(value.to_owned()),
            Some(("v1", value)) => signatures.push(value.to_owned()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let expected = hex_hmac(WEBHOOK_SECRET, &[t.as_bytes(), b".", body]);
    signatures.contains(&expected)
}

pub fn now_unix() -> u64 {
    hookgate::clock::wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A Stripe event object as `/v1/events` lists it.
pub fn stripe_event(id: &str, created: u64, kind: &str) -> Value {
    json!({
        "id": id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "data": { "object": { "id": format!("ch_{id}"), "object": "charge", "amount": 4200 } },
        "livemode": false,
        "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null },
        "type": kind,
    })
}

fn json_plan(status: StatusCode, body: &Value) -> Plan {
    Plan {
        status,
        delay: Duration::ZERO,
        headers: vec![("content-type", "application/json".into())],
        body: body.to_string(),
    }
}

fn query(seen: &Seen) -> Vec<(String, String)> {
    let query = seen.uri.split_once('?').map_or("", |(_, query)| query);
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| {
            let name = name.replace("%5B", "[").replace("%5D", "]");
            (name, value.to_owned())
        })
        .collect()
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// Stripe's API: the account's events, newest first, paged by
/// `starting_after`; 401 to any key but [`STRIPE_KEY`]; a 429 with
/// `Retry-After: 1` at the `limit_at`-th call (once).
pub struct StripeApi {
    pub server: Upstream,
    pub events: Arc<Mutex<Vec<Value>>>,
}

impl StripeApi {
    pub async fn start(limit_at: Option<usize>) -> StripeApi {
        let events: Arc<Mutex<Vec<Value>>> = Arc::default();
        let listed = Arc::clone(&events);
        let calls = AtomicUsize::new(0);
        let server = Upstream::with(move |seen| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if seen.headers.get("authorization").and_then(|v| v.to_str().ok())
                != Some(&format!("Bearer {STRIPE_KEY}"))
            {
                let error = json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}});
                return json_plan(StatusCode::UNAUTHORIZED, &error);
            }
            if limit_at == Some(call) {
                let error = json!({"error": {"type": "invalid_request_error", "message": "Too many requests"}});
                let mut plan = json_plan(StatusCode::TOO_MANY_REQUESTS, &error);
                plan.headers.push(("retry-after", "1".into()));
                return plan;
            }
            if seen.method != "GET" || !seen.uri.starts_with("/v1/events?") {
                return json_plan(StatusCode::NOT_FOUND, &json!({"error": {"type": "invalid_request_error"}}));
            }
            let params = query(seen);
            let number = |name| param(&params, name).and_then(|v| v.parse::<u64>().ok());
            let limit = number("limit").unwrap_or(10).min(100) as usize;
            let (gte, lte) = (number("created[gte]"), number("created[lte]"));
            // Sorted in place (a no-op pass once sorted), and only the
            // page cloned: the stand-in's own cost stays small.
            let mut all = listed.lock().unwrap();
            all.sort_by_cached_key(|event| {
                let created = event["created"].as_u64().unwrap();
                (std::cmp::Reverse(created), std::cmp::Reverse(event["id"].as_str().unwrap().to_owned()))
            });
            let in_window: Vec<&Value> = (all.iter())
                .filter(|event| {
                    let created = event["created"].as_u64().unwrap();
                    gte.is_none_or(|gte| created >= gte) && lte.is_none_or(|lte| created <= lte)
                })
                .collect();
            let start = match param(&params, "starting_after") {
                Some(after) => in_window
                    .iter()
                    .position(|event| event["id"] == after)
                    .map_or(in_window.len(), |at| at + 1),
                None => 0,
            };
            let page: Vec<Value> = in_window.iter().skip(start).take(limit).map(|e| (*e).clone()).collect();
            let has_more = start + page.len() < in_window.len();
            let body = json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": page});
            json_plan(StatusCode::OK, &body)
        })
        .await;
        StripeApi { server, events }
    }

    pub fn base(&self) -> String {
        self.server.url("")
    }

    /// The listing calls it answered (429s and 401s included).
    pub fn calls(&self) -> usize {
        self.server.seen().len()
    }
}

/// A GitHub hook delivery as `GET …/hooks/{id}/deliveries` lists it.
pub fn github_delivery(
    id: u64,
    guid: &str,
    delivered_at: u64,
    status_code: u16,
    redelivery: bool,
) -> Value {
    json!({
        "id": id,
        "guid": guid,
        "delivered_at": hookgate::clock::rfc3339(delivered_at * 1000),
        "redelivery": redelivery,
        "duration": 0.27,
        "status": if (200..300).contains(&status_code) { "OK" } else { "Invalid HTTP Response: 502" },
        "status_code": status_code,
        "event": "issues",
        "action": "opened",
        "installation_id": null,
        "repository_id": 1296269,
        "throttled_at": null,
    })
}

/// The body GitHub sends for delivery `guid`.
pub fn github_body(guid: &str) -> String {
    format!(
        r#"{{"action":"opened","issue":{{"number":1,"title":"{guid}"}},"repository":{{"id":1296269}}}}"#
    )
}

/// `guid`'s delivery to `url`, signed as GitHub signs it.
pub fn github_request(url: &str, guid: &str) -> Request<Full<Bytes>> {
    let body = github_body(guid);
    let signature = format!("sha256={}", hex_hmac(WEBHOOK_SECRET, &[body.as_bytes()]));
    Request::post(url)
        .header("content-type", "application/json")
        .header("x-github-event", "issues")
        .header("x-github-delivery", guid)
        .header("x-hub-signature-256", signature)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// GitHub's hook deliveries (`repos/octo/hello/hooks/1`), newest first, 100
/// a page with `Link` cursors; a redelivery asked is sent to `target` and
/// listed with the gateway's answer. 401 to any token but [`GITHUB_TOKEN`].
pub struct GithubApi {
    pub server: Upstream,
    pub deliveries: Arc<Mutex<Vec<Value>>>,
    /// The delivery ids redelivery was asked for, in order.
    pub asked: Arc<Mutex<Vec<u64>>>,
    /// While set, a redelivery asked is accepted and queued, not sent
    /// (GitHub queues them too): [`GithubApi::release`] sends them.
    pub hold: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<String>>>,
    target: String,
}

/// Send `guid` again to `target` as GitHub redelivers it, and list the
/// redelivery with the gateway's answer.
fn redeliver(listed: Arc<Mutex<Vec<Value>>>, target: String, guid: String) {
    tokio::spawn(async move {
        let answer = Sender::new().send(github_request(&target, &guid)).await;
        let mut all = listed.lock().unwrap();
        let next_id = all
            .iter()
            .filter_map(|d| d["id"].as_u64())
            .max()
            .unwrap_or(0)
            + 1;
        let item = github_delivery(next_id, &guid, now_unix(), answer.status.as_u16(), true);
        all.insert(0, item);
    });
}

pub const GITHUB_HOOK: &str = "repos/octo/hello/hooks/1";

impl GithubApi {
    pub async fn start(target: String) -> GithubApi {
        let deliveries: Arc<Mutex<Vec<Value>>> = Arc::default();
        let asked: Arc<Mutex<Vec<u64>>> = Arc::default();
        let base: Arc<OnceLock<String>> = Arc::default();
        let (listed, asks, base_of) = (
            Arc::clone(&deliveries),
            Arc::clone(&asked),
            Arc::clone(&base),
        );
        let hold: Arc<AtomicBool> = Arc::default();
        let held: Arc<Mutex<Vec<String>>> = Arc::default();
        let (holding, holds, to) = (Arc::clone(&hold), Arc::clone(&held), target.clone());
        let server = Upstream::with(move |seen| {
            if seen.headers.get("authorization").and_then(|v| v.to_str().ok())
                != Some(&format!("Bearer {GITHUB_TOKEN}"))
            {
                let error = json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"});
                return json_plan(StatusCode::UNAUTHORIZED, &error);
            }
            let list_path = format!("/{GITHUB_HOOK}/deliveries");
            let path = seen.uri.split('?').next().unwrap_or_default();
            if seen.method == "GET" && path == list_path {
                let params = query(seen);
                let per_page = param(&params, "per_page").and_then(|v| v.parse().ok()).unwrap_or(30usize);
                let cursor: usize = param(&params, "cursor").and_then(|v| v.parse().ok()).unwrap_or(0);
                let all = listed.lock().unwrap().clone();
                let page: Vec<Value> = all.iter().skip(cursor).take(per_page).cloned().collect();
                let mut plan = json_plan(StatusCode::OK, &Value::Array(page));
                if cursor + per_page < all.len() {
                    let next = format!(
                        "<{}{list_path}?per_page={per_page}&cursor={}>; rel=\"next\"",
                        base_of.get().unwrap(),
                        cursor + per_page
                    );
                    plan.headers.push(("link", next));
                }
                return plan;
            }
            let id = path
                .strip_prefix(&format!("{list_path}/"))
                .and_then(|rest| rest.strip_suffix("/attempts"))
                .and_then(|id| id.parse::<u64>().ok());
            let found = id.and_then(|id| {
                let all = listed.lock().unwrap();
                all.iter().find(|d| d["id"] == id).map(|d| d["guid"].as_str().unwrap().to_owned())
            });
            match (seen.method.as_str(), id, found) {
                ("POST", Some(id), Some(guid)) => {
                    asks.lock().unwrap().push(id);
                    if holding.load(Ordering::SeqCst) {
                        holds.lock().unwrap().push(guid);
                    } else {
                        redeliver(Arc::clone(&listed), to.clone(), guid);
                    }
                    json_plan(StatusCode::ACCEPTED, &json!({}))
                }
                _ => json_plan(StatusCode::NOT_FOUND, &json!({"message": "Not Found"})),
            }
        })
        .await;
        base.set(server.url("")).unwrap();
        GithubApi {
            server,
            deliveries,
            asked,
            hold,
            held,
            target,
        }
    }

    /// Send the redeliveries held meanwhile, and stop holding.
    pub fn release(&self) {
        self.hold.store(false, Ordering::SeqCst);
        for guid in self.held.lock().unwrap().drain(..) {
            redeliver(Arc::clone(&self.deliveries), self.target.clone(), guid);
        }
    }

    pub fn base(&self) -> String {
        self.server.url("")
    }

    pub fn asked(&self) -> Vec<u64> {
        self.asked.lock().unwrap().clone()
    }
}
