//! The senders' own SDKs as the oracle: `tests/sdk/senders.py` (PyPI) and
//! `tests/sdk/senders.mjs` (npm) make a request the way each sender does —
//! signed live by the SDK (Twilio, HubSpot, Adyen, Paddle, Slack, Svix), or
//! signed by the documented method and accepted by the SDK's verifier first
//! (Stripe, Shopify, Square, SendGrid, Discord, Telnyx's Ed25519, LINE,
//! EasyPost, Vonage's and LiveKit's JWTs, Mux's
//! `t=…,v1=…`, …) — and the real gateway, on Redis, must accept exactly
//! that: forwarded once under the sender's event id however many copies
//! race in, refused once tampered with.
//!
//! The SDKs live in `target/sdk-venv` and `tests/sdk/node_modules`
//! (`tests/sdk/setup.sh`, which `.ci/run` runs). Without them the tests skip, except under `CI=true`, where they
//! fail.

use std::path::PathBuf;
use std::process::Command;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;

use crate::support::*;

/// One request a sender's SDK produced, and the route settings it needs.
struct SdkRequest {
    secret: String,
    public_url: Option<String>,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: String,
}

pub(crate) fn sdk_python() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("HOOKGATE_SDK_PYTHON")
        .map_or_else(|| root.join("target/sdk-venv/bin/python"), PathBuf::from);
    if python.exists() && root.join("tests/sdk/node_modules/@linear/sdk").exists() {
        return Some(python);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "the senders' SDKs are not installed ({}), and CI=true forbids skipping: run tests/sdk/setup.sh",
        python.display()
    );
    eprintln!("skipping: the senders' SDKs are not installed; run tests/sdk/setup.sh");
    None
}

/// What `tests/sdk/senders.py SCHEME` printed (`tests/sdk/senders.mjs
/// SCHEME`, `linear.mjs` and `github.mjs` for the senders whose SDKs are on
/// npm).
fn sdk_request(python: &PathBuf, scheme: &str) -> SdkRequest {
    let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk");
    let output = match scheme {
        "linear" | "github" => Command::new("node")
            .arg(sdk.join(format!("{scheme}.mjs")))
            .output(),
        "mux" | "shopify" | "webflow" | "polar" | "line" | "livekit" | "vonage" | "workos"
        | "easypost" => Command::new("node")
            .arg(sdk.join("senders.mjs"))
            .arg(scheme)
            .output(),
        _ => Command::new(python)
            .arg(sdk.join("senders.py"))
            .arg(scheme)
            .output(),
    }
    .unwrap();
    assert!(
        output.status.success(),
        "{scheme}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let text = |name: &str| json[name].as_str().map(str::to_owned);
    SdkRequest {
        secret: text("secret").unwrap(),
        public_url: text("public_url"),
        query: text("query"),
        headers: json["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(name, value)| (name.clone(), value.as_str().unwrap().to_owned()))
            .collect(),
        body: text("body").unwrap(),
    }
}

impl SdkRequest {
    fn to(&self, url: &str, body: &str) -> Request<Full<Bytes>> {
        let url = match &self.query {
            Some(query) => format!("{url}?{query}"),
            None => url.to_owned(),
        };
        let mut request = Request::post(url);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// A gateway on a real Redis with one route of `scheme` for `request`
/// (plus `extra` route settings), and the upstream behind it.
async fn gateway_for(
    redis: &RedisServer,
    scheme: &str,
    request: &SdkRequest,
    extra: &str,
) -> (TestGateway, Upstream) {
    let upstream = Upstream::start().await;
    let public_url = request
        .public_url
        .as_ref()
        .map(|url| format!("public_url = \"{url}\""))
        .unwrap_or_default();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n\
         [[routes]]\nname = \"{scheme}\"\npath = \"/webhooks\"\nupstream = \"{}\"\n{public_url}\n{extra}\n\
         [routes.verify]\nscheme = \"{scheme}\"\nsecrets = [\"{}\"]\n",
        redis.url(),
        upstream.url("/"),
        request.secret,
    );
    (TestGateway::start(&text).await, upstream)
}

/// The SDK's request, sent 8 times at once, is forwarded exactly once under
/// `key`, and a later retry is answered from the record; a tampered copy
/// is refused.
async fn accepted_once(scheme: &str, key: impl Fn(&SdkRequest) -> String) {
    accepted_once_with(scheme, "", key).await;
}

/// [`accepted_once`] on a route with `extra` settings.
async fn accepted_once_with(scheme: &str, extra: &str, key: impl Fn(&SdkRequest) -> String) {
    let Some(python) = sdk_python() else {
        return;
    };
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let request = sdk_request(&python, scheme);
    let (gateway, upstream) = gateway_for(&redis, scheme, &request, extra).await;
    let url = gateway.url("/webhooks");
    let client = Sender::new();

    // One letter's case flipped: still well-formed, no longer what was
    // signed. Adyen signs eight fields of the item, not the whole body, so
    // there the amount changes.
    let mut tampered = request.body.clone();
    if scheme == "adyen" {
        tampered = tampered.replace("\"value\":1130", "\"value\":9130");
    } else {
        let at = tampered.find(|c: char| c.is_ascii_alphabetic()).unwrap();
        tampered[at..=at].make_ascii_uppercase();
        if tampered == request.body {
            tampered[at..=at].make_ascii_lowercase();
        }
    }
    assert_ne!(tampered, request.body);
    let refused = client.send(request.to(&url, &tampered)).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (StatusCode::UNAUTHORIZED, "signature_invalid"),
        "{scheme}: a tampered body"
    );

    let copies: Vec<_> = (0..8)
        .map(|_| {
            let (client, copy) = (client.clone(), request.to(&url, &request.body));
            tokio::spawn(async move { client.send(copy).await })
        })
        .collect();
    // Each copy is forwarded, or answered 409 `in_flight` while the first
    // is with the upstream (the sender retries those).
    for copy in copies {
        let answer = copy.await.unwrap();
        assert!(
            answer.status == StatusCode::OK || answer.code() == "in_flight",
            "{scheme}: {answer:?}"
        );
    }
    let retry = client.send(request.to(&url, &request.body)).await;
    assert!(retry.replayed(), "{scheme}: {retry:?}");
    assert_eq!(upstream.total(), 1, "{scheme}: one forward for 8 copies");
    assert_eq!(
        upstream.count(&key(&request)),
        1,
        "{scheme}: keyed by the sender's event id"
    );
    gateway.shutdown().await;
}

/// The hex SHA-256 of the request's body: the key `body-sha256` reads.
fn body_hash(request: &SdkRequest) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&request.body))
}

fn header(request: &SdkRequest, name: &str) -> String {
    request
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .unwrap()
}

/// Twilio's SDK signs the URL — `public_url` plus the query Twilio appends
/// — and the sorted form parameters (one of them non-ASCII).
#[tokio::test]
async fn twilio_signed_by_its_sdk() {
    accepted_once("twilio", |r| header(r, "I-Twilio-Idempotency-Token")).await;
}

/// Svix's SDK signs for Svix itself and for the senders that deliver
/// through it (Clerk, Resend), each under its own scheme name.
#[tokio::test]
async fn svix_clerk_and_resend_signed_by_the_svix_sdk() {
    for scheme in ["svix", "clerk", "resend"] {
        accepted_once(scheme, |r| header(r, "svix-id")).await;
    }
}

/// GitHub's own signing code (@octokit/webhooks-methods) signs.
#[tokio::test]
async fn github_signed_by_its_sdk() {
    accepted_once("github", |r| header(r, "X-GitHub-Delivery")).await;
}

#[tokio::test]
async fn gocardless_accepted_by_its_sdk() {
    accepted_once("gocardless", |r| {
        r.json()["meta"]["webhook_id"].as_str().unwrap().to_owned()
    })
    .await;
}

#[tokio::test]
async fn openai_accepted_by_its_sdk() {
    accepted_once("openai", |r| header(r, "webhook-id")).await;
}

#[tokio::test]
async fn slack_signed_by_its_sdk() {
    accepted_once("slack", |r| {
        r.json()["event_id"].as_str().unwrap().to_owned()
    })
    .await;
}

#[tokio::test]
async fn stripe_accepted_by_its_sdk() {
    accepted_once("stripe", |r| r.json()["id"].as_str().unwrap().to_owned()).await;
}

#[tokio::test]
async fn box_accepted_by_its_sdk() {
    accepted_once("box", |r| header(r, "Box-Delivery-Id")).await;
}

#[tokio::test]
async fn replicate_and_lithic_accepted_by_their_sdks() {
    for scheme in ["replicate", "lithic"] {
        accepted_once(scheme, |r| header(r, "webhook-id")).await;
    }
}

#[tokio::test]
async fn pusher_accepted_by_its_sdk() {
    // Pusher sends no event id: the verified body's hash is the key.
    accepted_once("pusher", body_hash).await;
}

#[tokio::test]
async fn coinbase_commerce_accepted_by_its_sdk() {
    accepted_once("coinbase-commerce", |r| {
        r.json()["event"]["id"].as_str().unwrap().to_owned()
    })
    .await;
}

/// Telnyx signs with Ed25519: the route lists the account's public key,
/// and Telnyx's SDK accepts the request first.
#[tokio::test]
async fn telnyx_accepted_by_its_sdk() {
    accepted_once("telnyx", |r| {
        r.json()["data"]["id"].as_str().unwrap().to_owned()
    })
    .await;
}

/// A header of pairs (`t=…,v1=…`), accepted by Mux's SDK from npm.
#[tokio::test]
async fn mux_accepted_by_its_sdk() {
    accepted_once("mux", |r| r.json()["id"].as_str().unwrap().to_owned()).await;
}

#[tokio::test]
async fn shopify_and_webflow_accepted_by_their_sdks() {
    accepted_once("shopify", |r| header(r, "X-Shopify-Webhook-Id")).await;
    // Webflow sends no event id; a retry resends the body, so its hash
    // serves (the route says so: the profile has no default key).
    accepted_once_with("webflow", "key = [\"body-sha256\"]", body_hash).await;
}

/// LINE's and EasyPost's SDKs accept a body HMAC; WorkOS's a header of
/// pairs with the time in milliseconds.
#[tokio::test]
async fn line_easypost_and_workos_accepted_by_their_sdks() {
    accepted_once("line", |r| {
        r.json()["events"][0]["webhookEventId"]
            .as_str()
            .unwrap()
            .to_owned()
    })
    .await;
    accepted_once("easypost", |r| r.json()["id"].as_str().unwrap().to_owned()).await;
    accepted_once("workos", |r| r.json()["id"].as_str().unwrap().to_owned()).await;
}

/// Signed JWTs whose claim carries the body's SHA-256: LiveKit's made by
/// its own server SDK, Vonage's accepted by its JWT library.
#[tokio::test]
async fn livekit_and_vonage_jwts_accepted_by_their_sdks() {
    accepted_once("livekit", |r| r.json()["id"].as_str().unwrap().to_owned()).await;
    accepted_once("vonage", |r| {
        let json = r.json();
        let (uuid, status) = (&json["message_uuid"], &json["status"]);
        format!("{}:{}", uuid.as_str().unwrap(), status.as_str().unwrap())
    })
    .await;
}

/// Polar's Standard Webhooks are keyed by its secret's own bytes, as its
/// SDK verifies them: the secret its dashboard shows is the route's.
#[tokio::test]
async fn polar_accepted_by_its_sdk() {
    accepted_once("polar", |r| header(r, "webhook-id")).await;
}

#[tokio::test]
async fn razorpay_accepted_by_its_sdk() {
    accepted_once("razorpay", |r| header(r, "X-Razorpay-Event-Id")).await;
}

#[tokio::test]
async fn square_accepted_by_its_sdk() {
    accepted_once("square", |r| {
        r.json()["event_id"].as_str().unwrap().to_owned()
    })
    .await;
}

/// HubSpot's SDK signs method + URI + body + timestamp; the URI's `%3A` is
/// signed decoded.
#[tokio::test]
async fn hubspot_signed_by_its_sdk() {
    accepted_once("hubspot", |r| {
        let event = &r.json()[0];
        format!(
            "{}:{}:{}",
            event["eventId"], event["subscriptionId"], event["occurredAt"]
        )
    })
    .await;
}

/// Adyen's library signs the notification item; the key joins `eventCode`
/// and `pspReference`.
#[tokio::test]
async fn adyen_signed_by_its_library() {
    accepted_once("adyen", |r| {
        let item = &r.json()["notificationItems"][0]["NotificationRequestItem"];
        format!(
            "{}:{}",
            item["eventCode"].as_str().unwrap(),
            item["pspReference"].as_str().unwrap()
        )
    })
    .await;
}

/// Linear's SDK (npm) accepts the request; its signed `webhookTimestamp`
/// is recent.
#[tokio::test]
async fn linear_accepted_by_its_sdk() {
    accepted_once("linear", |r| header(r, "Linear-Delivery")).await;
}

#[tokio::test]
async fn paddle_signed_by_its_sdk() {
    accepted_once("paddle", |r| {
        r.json()["event_id"].as_str().unwrap().to_owned()
    })
    .await;
}

/// Mailgun's signature block, accepted by Mailgun's SDK; the key is the
/// event's id, not the per-request token.
#[tokio::test]
async fn mailgun_accepted_by_its_sdk() {
    accepted_once("mailgun", |r| {
        r.json()["event-data"]["id"].as_str().unwrap().to_owned()
    })
    .await;
}

#[tokio::test]
async fn sendgrid_accepted_by_its_sdk() {
    accepted_once("sendgrid", |r| {
        r.json()[0]["sg_event_id"].as_str().unwrap().to_owned()
    })
    .await;
}

#[tokio::test]
async fn discord_accepted_by_its_sdk() {
    accepted_once("discord", |r| r.json()["id"].as_str().unwrap().to_owned()).await;
}

/// Discord's PING, verified with the application's public key, is answered
/// `{"type":1}` by the gateway: nothing forwarded, nothing stored.
#[tokio::test]
async fn discord_ping_is_answered_by_the_gateway() {
    let Some(python) = sdk_python() else {
        return;
    };
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let request = sdk_request(&python, "discord-ping");
    let (gateway, upstream) = gateway_for(&redis, "discord", &request, "").await;
    let answer = Sender::new()
        .send(request.to(&gateway.url("/webhooks"), &request.body))
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), serde_json::json!({ "type": 1 }));
    assert_eq!(upstream.total(), 0);
    let store = &gateway.store;
    assert!(store
        .records()
        .get(&store.key("discord", "1"))
        .await
        .unwrap()
        .is_none());
    gateway.shutdown().await;
}

/// A form body keyed by its fields: `form:` sources joined into one key,
/// end to end with Twilio's SDK-signed status callback.
#[tokio::test]
async fn twilio_form_fields_make_a_composite_key() {
    let Some(python) = sdk_python() else {
        return;
    };
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let request = sdk_request(&python, "twilio");
    let (gateway, upstream) = gateway_for(
        &redis,
        "twilio",
        &request,
        "key = [\"form:MessageSid + form:MessageStatus\"]",
    )
    .await;
    let client = Sender::new();
    let url = gateway.url("/webhooks");
    assert_eq!(
        client.send(request.to(&url, &request.body)).await.status,
        StatusCode::OK
    );
    let again = client.send(request.to(&url, &request.body)).await;
    assert!(again.replayed());
    let sid = form_urlencoded::parse(request.body.as_bytes())
        .find(|(name, _)| name == "MessageSid")
        .map(|(_, value)| value.into_owned())
        .unwrap();
    assert_eq!(upstream.count(&format!("{sid}:delivered")), 1);
    gateway.shutdown().await;
}
