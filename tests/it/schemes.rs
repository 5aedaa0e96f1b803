//! Every signature scheme end to end: a correctly signed delivery is
//! forwarded, a forged or stale one is refused with the right code and leaves
//! no trace in Redis, and GitHub's unsigned delivery id cannot be used to
//! replay a captured body.

use std::time::UNIX_EPOCH;

use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{Request, StatusCode};
use http_body_util::Full;
use sha2::Sha256;

use crate::support::*;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const SVIX_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn mac(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

fn mac_sha1(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(key).unwrap();
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

/// A Mailgun body: `body` with the signature block of `ts` and a token
/// made from `id` put in front.
fn mailgun_signed(body: &str, id: &str, ts: u64) -> String {
    let token = format!("{id}-token-{ts}");
    let sig = hex::encode(mac(
        b"mg-signing-key-0123456789",
        format!("{ts}{token}").as_bytes(),
    ));
    body.replacen(
        '{',
        &format!(r#"{{"signature":{{"timestamp":"{ts}","token":"{token}","signature":"{sig}"}},"#),
        1,
    )
}

fn now() -> u64 {
    hookgate::clock::wall()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A sender of one scheme: how it signs `body` at time `ts`.
#[derive(Clone, Copy, Debug)]
enum Sender_ {
    Stripe,
    Github,
    Shopify,
    StandardWebhooks,
    Svix,
    Slack,
    Gitlab,
    Paddle,
    Calendly,
    Linear,
    Intercom,
    Pagerduty,
    Mailgun,
    Zoom,
    Typeform,
    Woocommerce,
}

impl Sender_ {
    fn verify_toml(self) -> &'static str {
        match self {
            Sender_::Stripe => "scheme = \"stripe\"\nsecrets = [\"whsec_stripe_0123456789\"]",
            Sender_::Github => "scheme = \"github\"\nsecrets = [\"gh-secret-0123456789\"]",
            Sender_::Shopify => "scheme = \"shopify\"\nsecrets = [\"shop-secret-0123456789\"]",
            Sender_::StandardWebhooks | Sender_::Svix => {
                "scheme = \"standard-webhooks\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]"
            }
            Sender_::Slack => "scheme = \"slack\"\nsecrets = [\"slack-secret-0123456789\"]",
            Sender_::Gitlab => "scheme = \"gitlab\"\nsecrets = [\"gitlab-token-0123456789\"]",
            Sender_::Paddle => "scheme = \"paddle\"\nsecrets = [\"pdl_ntfset_0123456789\"]",
            Sender_::Calendly => "scheme = \"calendly\"\nsecrets = [\"calendly-key-0123456789\"]",
            Sender_::Linear => "scheme = \"linear\"\nsecrets = [\"lin_wh_0123456789abcdef\"]",
            Sender_::Intercom => "scheme = \"intercom\"\nsecrets = [\"icm-secret-0123456789\"]",
            Sender_::Pagerduty => "scheme = \"pagerduty\"\nsecrets = [\"pd-secret-0123456789\"]",
            Sender_::Mailgun => "scheme = \"mailgun\"\nsecrets = [\"mg-signing-key-0123456789\"]",
            Sender_::Zoom => "scheme = \"zoom\"\nsecrets = [\"zm-secret-token-0123456789\"]",
            Sender_::Typeform => "scheme = \"typeform\"\nsecrets = [\"tf-secret-0123456789\"]",
            Sender_::Woocommerce => {
                "scheme = \"woocommerce\"\nsecrets = [\"wc-secret-0123456789\"]"
            }
        }
    }

    /// A signed delivery of event `id` (the key rides where the scheme puts it).
    fn request(self, url: &str, id: &str, body: &str, ts: u64) -> Request<Full<Bytes>> {
        let builder = Request::post(url).header("content-type", "application/json");
        let builder = match self {
            Sender_::Stripe => {
                let sig = hex::encode(mac(
                    b"whsec_stripe_0123456789",
                    format!("{ts}.{body}").as_bytes(),
                ));
                builder.header("stripe-signature", format!("t={ts},v1={sig}"))
            }
            Sender_::Github => builder.header("x-github-delivery", id).header(
                "x-hub-signature-256",
                format!(
                    "sha256={}",
                    hex::encode(mac(b"gh-secret-0123456789", body.as_bytes()))
                ),
            ),
            Sender_::Shopify => builder.header("x-shopify-webhook-id", id).header(
                "x-shopify-hmac-sha256",
                B64.encode(mac(b"shop-secret-0123456789", body.as_bytes())),
            ),
            Sender_::StandardWebhooks | Sender_::Svix => {
                let key = B64.decode(&SVIX_SECRET[6..]).unwrap();
                let sig = B64.encode(mac(&key, format!("{id}.{ts}.{body}").as_bytes()));
                let prefix = if matches!(self, Sender_::Svix) {
                    "svix"
                } else {
                    "webhook"
                };
                builder
                    .header(format!("{prefix}-id"), id)
                    .header(format!("{prefix}-timestamp"), ts.to_string())
                    .header(format!("{prefix}-signature"), format!("v1,{sig}"))
            }
            Sender_::Slack => {
                let sig = hex::encode(mac(
                    b"slack-secret-0123456789",
                    format!("v0:{ts}:{body}").as_bytes(),
                ));
                builder
                    .header("x-slack-request-timestamp", ts.to_string())
                    .header("x-slack-signature", format!("v0={sig}"))
            }
            Sender_::Paddle => {
                let sig = hex::encode(mac(
                    b"pdl_ntfset_0123456789",
                    format!("{ts}:{body}").as_bytes(),
                ));
                builder.header("paddle-signature", format!("ts={ts};h1={sig}"))
            }
            Sender_::Calendly => {
                let sig = hex::encode(mac(
                    b"calendly-key-0123456789",
                    format!("{ts}.{body}").as_bytes(),
                ));
                builder.header("calendly-webhook-signature", format!("t={ts},v1={sig}"))
            }
            // The timestamp rides in the signed body, in milliseconds.
            Sender_::Linear => {
                let stamped = body.replacen('{', &format!("{{\"webhookTimestamp\":{ts}000,"), 1);
                let signature = hex::encode(mac(b"lin_wh_0123456789abcdef", stamped.as_bytes()));
                return builder
                    .header("linear-delivery", id)
                    .header("linear-signature", signature)
                    .body(Full::new(Bytes::from(stamped)))
                    .unwrap();
            }
            Sender_::Gitlab => builder
                .header("x-gitlab-token", "gitlab-token-0123456789")
                .header("idempotency-key", id)
                .header("x-gitlab-event-uuid", format!("other-{id}")),
            Sender_::Intercom => builder.header(
                "x-hub-signature",
                format!(
                    "sha1={}",
                    hex::encode(mac_sha1(b"icm-secret-0123456789", body.as_bytes()))
                ),
            ),
            Sender_::Pagerduty => builder.header(
                "x-pagerduty-signature",
                format!(
                    "v1=0000,v1={}",
                    hex::encode(mac(b"pd-secret-0123456789", body.as_bytes()))
                ),
            ),
            // The signature rides in the body.
            Sender_::Mailgun => {
                let signed = mailgun_signed(body, id, ts);
                return builder.body(Full::new(Bytes::from(signed))).unwrap();
            }
            Sender_::Zoom => {
                let sig = hex::encode(mac(
                    b"zm-secret-token-0123456789",
                    format!("v0:{ts}:{body}").as_bytes(),
                ));
                builder
                    .header("x-zm-request-timestamp", ts.to_string())
                    .header("x-zm-signature", format!("v0={sig}"))
            }
            Sender_::Typeform => builder.header(
                "typeform-signature",
                format!(
                    "sha256={}",
                    B64.encode(mac(b"tf-secret-0123456789", body.as_bytes()))
                ),
            ),
            Sender_::Woocommerce => builder
                .header("x-wc-webhook-topic", "order.updated")
                .header("x-wc-webhook-delivery-id", format!("delivery-{ts}"))
                .header(
                    "x-wc-webhook-signature",
                    B64.encode(mac(b"wc-secret-0123456789", body.as_bytes())),
                ),
        };
        builder
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    }

    fn body(self, id: &str) -> String {
        match self {
            Sender_::Slack => format!(r#"{{"event_id":"{id}","type":"event_callback"}}"#),
            Sender_::Paddle => {
                format!(
                    r#"{{"event_id":"{id}","type":"order.paid","event_type":"transaction.completed"}}"#
                )
            }
            Sender_::Calendly => format!(
                r#"{{"event":"invitee.created","type":"order.paid","payload":{{"uri":"https://api.calendly.com/invitees/{id}"}}}}"#
            ),
            Sender_::Pagerduty => {
                format!(
                    r#"{{"event":{{"id":"{id}","event_type":"incident.triggered"}},"type":"x"}}"#
                )
            }
            Sender_::Mailgun => format!(r#"{{"event-data":{{"id":"{id}","type":"delivered"}}}}"#),
            Sender_::Zoom => format!(
                r#"{{"event":"meeting.started","type":"x","payload":{{"object":{{"id":"{id}"}}}}}}"#
            ),
            Sender_::Typeform => format!(r#"{{"event_id":"{id}","type":"form_response"}}"#),
            Sender_::Woocommerce => {
                format!(r#"{{"id":"{id}","type":"x","date_modified_gmt":"2026-11-30T12:00:00"}}"#)
            }
            _ => format!(r#"{{"id":"{id}","type":"order.paid"}}"#),
        }
    }

    /// The key the upstream gets for event `id`.
    fn key(self, id: &str) -> String {
        match self {
            Sender_::Calendly => {
                format!("invitee.created:https%3A//api.calendly.com/invitees/{id}")
            }
            Sender_::Zoom => {
                use sha2::Digest;
                hex::encode(Sha256::digest(self.body(id).as_bytes()))
            }
            Sender_::Woocommerce => format!("order.updated:{id}:2026-11-30T12%3A00%3A00"),
            _ => id.to_owned(),
        }
    }

    fn timestamped(self) -> bool {
        !matches!(
            self,
            Sender_::Github
                | Sender_::Shopify
                | Sender_::Gitlab
                | Sender_::Intercom
                | Sender_::Pagerduty
                | Sender_::Typeform
                | Sender_::Woocommerce
        )
    }

    /// A delivery that must be refused: signed over another body — or, for
    /// GitLab, whose token covers no body, carrying another token.
    fn forged(self, url: &str, id: &str, body: &str) -> Request<Full<Bytes>> {
        let mut forged = self.request(url, id, body, now());
        match self {
            Sender_::Gitlab => {
                forged
                    .headers_mut()
                    .insert("x-gitlab-token", "gitlab-token-012345678X".parse().unwrap());
            }
            // Mailgun signs its token, not the event: a block with another
            // token is the forgery.
            Sender_::Mailgun => {
                let signed = mailgun_signed(body, id, now()).replace("-token-", "-tokem-");
                *forged.body_mut() = Full::new(Bytes::from(signed));
            }
            _ => *forged.body_mut() = Full::new(Bytes::from(body.replace("\"type\"", "\"kind\""))),
        }
        forged
    }
}

async fn scheme_end_to_end(sender: Sender_) {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n\
         [[routes]]\nname = \"r\"\npath = \"/in\"\nupstream = \"{}\"\n[routes.verify]\n{}\n",
        redis.url(),
        upstream.url("/"),
        sender.verify_toml()
    );
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/in");
    let client = Sender::new();
    let id = format!("evt_{sender:?}").to_lowercase();
    let body = sender.body(&id);

    let answer = client.send(sender.forged(&url, &id, &body)).await;
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (StatusCode::UNAUTHORIZED, "signature_invalid"),
        "{sender:?}"
    );
    // No signature at all.
    let bare = Request::post(&url)
        .body(Full::new(Bytes::from(body.clone())))
        .unwrap();
    assert_eq!(client.send(bare).await.code(), "signature_invalid");
    if sender.timestamped() {
        let stale = client
            .send(sender.request(&url, &id, &body, now() - 600))
            .await;
        assert_eq!(
            (stale.status, stale.code().as_str()),
            (StatusCode::UNAUTHORIZED, "timestamp_out_of_tolerance"),
            "{sender:?}"
        );
        let future = client
            .send(sender.request(&url, &id, &body, now() + 600))
            .await;
        assert_eq!(future.code(), "timestamp_out_of_tolerance");
    }
    assert!(
        keys_at(&redis.url(), "*").await.1.is_empty(),
        "{sender:?}: a refused delivery writes nothing"
    );
    assert_eq!(upstream.total(), 0);

    let first = client.send(sender.request(&url, &id, &body, now())).await;
    assert_eq!(first.status, StatusCode::OK, "{sender:?}: {first:?}");
    let again = client.send(sender.request(&url, &id, &body, now())).await;
    assert!(again.replayed(), "{sender:?}");
    assert_eq!(
        upstream.count(&sender.key(&id)),
        1,
        "{sender:?}: the default key is the sender's event id"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn stripe_end_to_end() {
    scheme_end_to_end(Sender_::Stripe).await;
}

/// GitLab's `Idempotency-Key` is the key (not its per-event UUID), and the
/// token is refused when it differs by one character.
#[tokio::test]
async fn gitlab_end_to_end() {
    scheme_end_to_end(Sender_::Gitlab).await;
}

#[tokio::test]
async fn paddle_end_to_end() {
    scheme_end_to_end(Sender_::Paddle).await;
}

/// Calendly sends no id: the key joins the event and its resource.
#[tokio::test]
async fn calendly_end_to_end() {
    scheme_end_to_end(Sender_::Calendly).await;
}

#[tokio::test]
async fn linear_end_to_end() {
    scheme_end_to_end(Sender_::Linear).await;
}

/// Intercom signs with SHA-1 under `X-Hub-Signature`; the key is the
/// notification id.
#[tokio::test]
async fn intercom_end_to_end() {
    scheme_end_to_end(Sender_::Intercom).await;
}

/// PagerDuty lists several `v1=` signatures; one matching is enough.
#[tokio::test]
async fn pagerduty_end_to_end() {
    scheme_end_to_end(Sender_::Pagerduty).await;
}

/// Mailgun's signature block is in the body; a stale block is refused.
#[tokio::test]
async fn mailgun_end_to_end() {
    scheme_end_to_end(Sender_::Mailgun).await;
}

/// Zoom's events carry no id: the key is the body's hash.
#[tokio::test]
async fn zoom_end_to_end() {
    scheme_end_to_end(Sender_::Zoom).await;
}

#[tokio::test]
async fn typeform_end_to_end() {
    scheme_end_to_end(Sender_::Typeform).await;
}

/// WooCommerce sends no event id: the key joins the topic, the resource
/// and its modification time — not the per-delivery id.
#[tokio::test]
async fn woocommerce_end_to_end() {
    scheme_end_to_end(Sender_::Woocommerce).await;
}

#[tokio::test]
async fn github_end_to_end() {
    scheme_end_to_end(Sender_::Github).await;
}

#[tokio::test]
async fn shopify_end_to_end() {
    scheme_end_to_end(Sender_::Shopify).await;
}

#[tokio::test]
async fn standard_webhooks_end_to_end() {
    scheme_end_to_end(Sender_::StandardWebhooks).await;
}

#[tokio::test]
async fn svix_headers_end_to_end() {
    scheme_end_to_end(Sender_::Svix).await;
}

#[tokio::test]
async fn slack_end_to_end() {
    scheme_end_to_end(Sender_::Slack).await;
}

/// A captured GitHub delivery re-sent with a forged `X-GitHub-Delivery` is a
/// duplicate of the first (the replay guard is on by default for GitHub and
/// Shopify), and off it would have been forwarded again.
#[tokio::test]
async fn the_replay_guard_stops_a_signed_body_under_a_new_delivery_id() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let route = |prefix: &str, guard: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}:\"\n\
             [[routes]]\nname = \"gh\"\npath = \"/gh\"\nupstream = \"{}\"\n{guard}\n[routes.verify]\n{}\n",
            redis.url(),
            upstream.url("/"),
            Sender_::Github.verify_toml()
        )
    };
    let guarded = TestGateway::start(&route("guarded", "")).await;
    let client = Sender::new();
    let body = Sender_::Github.body("push-1");
    let url = guarded.url("/gh");
    assert_eq!(
        client
            .send(Sender_::Github.request(&url, "delivery-1", &body, 0))
            .await
            .status,
        StatusCode::OK
    );
    let forged = client
        .send(Sender_::Github.request(&url, "delivery-forged", &body, 0))
        .await;
    assert!(forged.replayed(), "{forged:?}");
    assert_eq!(upstream.total(), 1);
    let other = Sender_::Github.body("push-2");
    assert_eq!(
        client
            .send(Sender_::Github.request(&url, "delivery-2", &other, 0))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(upstream.total(), 2, "a different body is a different event");

    let unguarded = TestGateway::start(&route("open", "replay_guard = \"off\"")).await;
    let url = unguarded.url("/gh");
    client
        .send(Sender_::Github.request(&url, "delivery-1", &body, 0))
        .await;
    client
        .send(Sender_::Github.request(&url, "delivery-forged", &body, 0))
        .await;
    assert_eq!(
        upstream.total(),
        4,
        "without the guard the forged id is forwarded"
    );
    guarded.shutdown().await;
    unguarded.shutdown().await;
}

/// One route of `sender`'s scheme on the memory store, plus `extra` lines.
fn scheme_route(sender: Sender_, upstream: &Upstream, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n\
         [[routes]]\nname = \"r\"\npath = \"/r\"\nupstream = \"{}\"\n{extra}\n[routes.verify]\n{}\n",
        upstream.url("/"),
        sender.verify_toml()
    )
}

/// A verified `svix-*` set with an unsigned `webhook-id` added beside it:
/// the key is the signed `svix-id`, so re-keying a captured delivery that way
/// gives a duplicate, not a new event.
#[tokio::test]
async fn an_unsigned_webhook_id_beside_a_verified_svix_set_is_not_the_key() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&scheme_route(Sender_::Svix, &upstream, "")).await;
    let client = Sender::new();
    let body = Sender_::Svix.body("msg_real");
    for (i, forged) in ["forged-1", "forged-2"].into_iter().enumerate() {
        let mut request = Sender_::Svix.request(&gateway.url("/r"), "msg_real", &body, now());
        request
            .headers_mut()
            .insert("webhook-id", forged.parse().unwrap());
        let answer = client.send(request).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.replayed(), i == 1);
    }
    let counts = upstream.counts();
    assert_eq!(counts.get("msg_real"), Some(&1), "{counts:?}");
    assert_eq!(upstream.total(), 1);
    gateway.shutdown().await;
}

/// Slack's `url_verification` handshake (the body from Slack's Events API
/// docs) carries no `event_id`: a `slack` route forwards it unclaimed, every
/// time, with no idempotency header; `on_missing_key = "reject"` refuses it.
#[tokio::test]
async fn slacks_url_verification_handshake_is_forwarded_unclaimed() {
    const HANDSHAKE: &str = r#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&scheme_route(Sender_::Slack, &upstream, "")).await;
    let client = Sender::new();
    for _ in 0..2 {
        let request = Sender_::Slack.request(&gateway.url("/r"), "", HANDSHAKE, now());
        let answer = client.send(request).await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        assert!(!answer.replayed());
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2, "forwarded each time, never claimed");
    assert!(seen
        .iter()
        .all(|s| s.headers.get("idempotency-key").is_none()));
    assert_eq!(seen[0].body, HANDSHAKE);
    gateway.shutdown().await;

    let strict = scheme_route(Sender_::Slack, &upstream, "on_missing_key = \"reject\"");
    let gateway = TestGateway::start(&strict).await;
    let request = Sender_::Slack.request(&gateway.url("/r"), "", HANDSHAKE, now());
    assert_eq!(client.send(request).await.code(), "key_missing");
    assert_eq!(upstream.total(), 2);
    gateway.shutdown().await;
}

/// Zoom's `endpoint.url_validation` and WooCommerce's activation ping are
/// answered by the gateway as each sender requires: nothing is claimed,
/// nothing reaches the upstream, and the outcome is counted as `handshake`.
/// A validation request with a bad signature is refused like any forgery.
#[tokio::test]
async fn handshakes_are_answered_by_the_gateway() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n\
         [[routes]]\nname = \"zoom\"\npath = \"/zoom\"\nupstream = \"{up}\"\n[routes.verify]\n{}\n\
         [[routes]]\nname = \"woo\"\npath = \"/woo\"\nupstream = \"{up}\"\n[routes.verify]\n{}\n",
        redis.url(),
        Sender_::Zoom.verify_toml(),
        Sender_::Woocommerce.verify_toml(),
        up = upstream.url("/"),
    );
    let gateway = TestGateway::start(&with_admin(&text, false)).await;
    let client = Sender::new();

    let validation = r#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1764504000456,"event":"endpoint.url_validation"}"#;
    let answer = client
        .send(Sender_::Zoom.request(&gateway.url("/zoom"), "v", validation, now()))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let expected = hex::encode(mac(
        b"zm-secret-token-0123456789",
        b"qgg8vlvZRS6UYooatFL8Aw",
    ));
    assert_eq!(
        answer.json(),
        serde_json::json!({"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": expected})
    );
    // Signed for one token, sent with another.
    let mut forged = Sender_::Zoom.request(&gateway.url("/zoom"), "v", validation, now());
    *forged.body_mut() = Full::new(Bytes::from(validation.replace("qgg8", "xgg8")));
    let forged = client.send(forged).await;
    assert_eq!(forged.code(), "signature_invalid");

    // WooCommerce's ping is unsigned; only its exact shape is answered.
    let ping = |body: &'static str| {
        Request::post(gateway.url("/woo"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    let answer = client.send(ping("webhook_id=42")).await;
    assert_eq!((answer.status, answer.body.len()), (StatusCode::OK, 0));
    let not_a_ping = client.send(ping("webhook_id=42&id=7")).await;
    assert_eq!(not_a_ping.code(), "signature_invalid");

    assert_eq!(upstream.total(), 0, "a handshake is never forwarded");
    assert!(keys_at(&redis.url(), "*").await.1.is_empty(), "nor claimed");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    for route in ["zoom", "woo"] {
        assert_eq!(
            sample(
                &metrics,
                "hookgate_requests_total",
                &[("route", route), ("outcome", "handshake")]
            ),
            Some(1.0),
            "{route}"
        );
    }
    gateway.shutdown().await;
}

/// GitHub never retries a failed delivery: its sync route's failed event
/// is on `/metrics` as stuck work, by how long it has gone without a
/// delivery, beside the route's `page_after` (15 minutes by default) for
/// `HookgateFailedEventStuck`; a redelivery that succeeds clears it. A
/// sender that retries on its own (Stripe) gets no such gauge unless its
/// route sets `page_after`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_github_event_is_stuck_work_on_metrics() {
    let (upstream, healthy) = Upstream::flaky().await;
    let route = |name: &str, sender: Sender_, extra: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\npath = \"/{name}\"\nupstream = \"{}\"\n{extra}\n[routes.verify]\n{}\n",
            upstream.url("/"),
            sender.verify_toml()
        )
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n{}{}{}",
        route("gh", Sender_::Github, ""),
        route("gh_fast", Sender_::Github, "page_after = \"1s\""),
        route("stripe", Sender_::Stripe, ""),
    );
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let client = Sender::new();
    let body = Sender_::Github.body("push-1");
    for name in ["gh", "gh_fast"] {
        let url = gateway.url(&format!("/{name}"));
        let failed = client
            .send(Sender_::Github.request(&url, "delivery-1", &body, 0))
            .await;
        assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE, "{name}");
    }
    let labels = |name| [("route", name), ("destination", "")];
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let page_after = |name| sample(&metrics, "hookgate_route_page_after_seconds", &labels(name));
    assert_eq!(page_after("gh"), Some(900.0), "GitHub's default: {metrics}");
    assert_eq!(page_after("gh_fast"), Some(1.0));
    assert_eq!(page_after("stripe"), None, "Stripe retries on its own");
    let stuck = eventually(std::time::Duration::from_secs(10), || async {
        let metrics = scrape(&gateway.admin_url("/metrics")).await;
        sample(
            &metrics,
            "hookgate_oldest_failed_seconds",
            &labels("gh_fast"),
        )
        .unwrap_or(0.0)
            > 1.0
    });
    assert!(stuck.await, "the failed event ages past its page_after");

    // Redelivered from GitHub's console once the upstream is back: the
    // record leaves `failed`, and the gauge falls to 0.
    healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    let url = gateway.url("/gh_fast");
    let delivered = client
        .send(Sender_::Github.request(&url, "delivery-1", &body, 0))
        .await;
    assert_eq!(delivered.status, StatusCode::OK);
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(
        sample(
            &metrics,
            "hookgate_oldest_failed_seconds",
            &labels("gh_fast")
        ),
        Some(0.0),
        "{metrics}"
    );
    gateway.shutdown().await;
}
