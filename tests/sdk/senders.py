"""Signed requests made by the senders' own SDKs, for tests/it/sdk.rs.

`python senders.py SCHEME` prints one JSON object: the route settings the
request needs (`secret`, `public_url`) and the request itself (`query`,
`headers`, `body`), signed now. Where the sender's SDK signs (Twilio,
HubSpot, Adyen, Paddle, Slack, and Svix for Svix, Clerk and Resend), it
signs; where it only verifies (Stripe, Square, SendGrid, Discord, Mailgun,
Razorpay, GoCardless, OpenAI, Box, Replicate, Lithic, Pusher, Coinbase
Commerce, Telnyx), the request is signed here with the
documented method and the SDK must accept it before it is printed. Either way the SDK, not hookgate,
is the oracle: the gateway is then expected to accept exactly this.
"""

import base64
import datetime
import hashlib
import hmac
import json
import sys
import time
import uuid
from urllib.parse import urlencode

PUBLIC_URL = "https://hooks.example.com/webhooks"


def twilio():
    from twilio.request_validator import RequestValidator

    token = "tw_auth_token_" + uuid.uuid4().hex
    query = "region=eu&x=a%2Fb"
    params = {
        "MessageSid": "SM" + uuid.uuid4().hex,
        "MessageStatus": "delivered",
        "To": "+15005550006",
        "Body": "Ünïcode & spaces = fine",
    }
    url = f"{PUBLIC_URL}?{query}"
    validator = RequestValidator(token)
    signature = validator.compute_signature(url, params)
    assert validator.validate(url, params, signature)
    return {
        "secret": token,
        "public_url": PUBLIC_URL,
        "query": query,
        "headers": {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": signature,
            "I-Twilio-Idempotency-Token": str(uuid.uuid4()),
        },
        "body": urlencode(params),
    }


def square():
    from square.utils.webhooks_helper import verify_signature

    key = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    body = json.dumps(
        {
            "merchant_id": "MLEFBHHSJGVHD",
            "type": "payment.updated",
            "event_id": str(uuid.uuid4()),
            "created_at": "2026-11-30T12:00:00Z",
            "data": {"type": "payment", "id": "KkAkhdMsgzn59SM8A89WgKwekxLZY"},
        },
        separators=(",", ":"),
    )
    mac = hmac.new(key.encode(), (PUBLIC_URL + body).encode(), hashlib.sha256)
    signature = base64.b64encode(mac.digest()).decode()
    assert verify_signature(
        request_body=body,
        signature_header=signature,
        signature_key=key,
        notification_url=PUBLIC_URL,
    )
    return {
        "secret": key,
        "public_url": PUBLIC_URL,
        "headers": {
            "Content-Type": "application/json",
            "x-square-hmacsha256-signature": signature,
        },
        "body": body,
    }


def hubspot():
    from hubspot.utils.signature import Signature

    secret = "hs_" + uuid.uuid4().hex
    query = "portal=62515&next=a%3Ab"
    # HubSpot signs the URI with %3A and friends decoded.
    uri = f"{PUBLIC_URL}?portal=62515&next=a:b"
    timestamp = str(int(time.time() * 1000))
    body = json.dumps(
        [
            {
                "eventId": uuid.uuid4().int % 10**10,
                "subscriptionId": 2171234,
                "portalId": 62515,
                "occurredAt": int(time.time() * 1000),
                "subscriptionType": "contact.creation",
                "attemptNumber": 0,
                "objectId": 123,
            }
        ],
        separators=(",", ":"),
    )
    signature = Signature.get_signature(secret, body, "v3", uri, "POST", timestamp)
    assert Signature.is_valid(signature, secret, body, uri, "POST", "v3", timestamp)
    return {
        "secret": secret,
        "public_url": PUBLIC_URL,
        "query": query,
        "headers": {
            "Content-Type": "application/json",
            "X-HubSpot-Signature-v3": signature,
            "X-HubSpot-Request-Timestamp": timestamp,
        },
        "body": body,
    }


def adyen():
    from Adyen.util import generate_notification_sig, is_valid_hmac_notification

    key = uuid.uuid4().hex.upper() + uuid.uuid4().hex.upper()
    item = {
        "additionalData": {},
        "amount": {"value": 1130, "currency": "EUR"},
        "pspReference": str(uuid.uuid4().int % 10**16),
        "eventCode": "AUTHORISATION",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "order:42",
        "success": "true",
    }
    item["additionalData"]["hmacSignature"] = generate_notification_sig(item, key).decode()
    notification = {"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}
    assert is_valid_hmac_notification(notification, key)
    return {
        "secret": key,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(notification, separators=(",", ":")),
    }


def sendgrid():
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from sendgrid.helpers.eventwebhook import EventWebhook

    private = ec.generate_private_key(ec.SECP256R1())
    public = base64.b64encode(
        private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    ).decode()
    timestamp = str(int(time.time()))
    payload = (
        json.dumps(
            [{"email": "a@example.com", "event": "delivered", "sg_event_id": uuid.uuid4().hex}],
            separators=(",", ":"),
        )
        + "\r\n"
    )
    signature = base64.b64encode(
        private.sign((timestamp + payload).encode(), ec.ECDSA(hashes.SHA256()))
    ).decode()
    webhook = EventWebhook(public)
    assert webhook.verify_signature(payload, signature, timestamp)
    return {
        "secret": public,
        "headers": {
            "Content-Type": "application/json",
            "X-Twilio-Email-Event-Webhook-Signature": signature,
            "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        },
        "body": payload,
    }


def discord(body):
    from discord_interactions import verify_key
    from nacl.signing import SigningKey

    key = SigningKey.generate()
    public = key.verify_key.encode().hex()
    timestamp = str(int(time.time()))
    signature = key.sign((timestamp + body).encode()).signature.hex()
    assert verify_key(body.encode(), signature, timestamp, public)
    return {
        "secret": public,
        "headers": {
            "Content-Type": "application/json",
            "X-Signature-Ed25519": signature,
            "X-Signature-Timestamp": timestamp,
        },
        "body": body,
    }


def paddle():
    from paddle_billing.Notifications import Secret, Verifier
    from paddle_billing.Notifications.PaddleSignature import PaddleSignature

    secret = "pdl_ntfset_" + uuid.uuid4().hex
    timestamp = str(int(time.time()))
    body = json.dumps(
        {"event_id": "evt_" + uuid.uuid4().hex, "event_type": "transaction.completed"},
        separators=(",", ":"),
    )
    h1 = PaddleSignature.calculate_hmac(secret, f"{timestamp}:{body}".encode()).hexdigest()
    header = f"ts={timestamp};h1={h1}"

    class Request:
        def __init__(self, headers, raw):
            self.headers, self.body = headers, raw

    assert Verifier().verify(Request({"Paddle-Signature": header}, body.encode()), Secret(secret))
    return {
        "secret": secret,
        "headers": {"Content-Type": "application/json", "Paddle-Signature": header},
        "body": body,
    }


def mailgun():
    from mailgun.security import SecurityGuard

    key = "key-" + uuid.uuid4().hex
    timestamp = str(int(time.time()))
    token = uuid.uuid4().hex + uuid.uuid4().hex[:18]
    signature = hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()
    assert SecurityGuard.verify_webhook(key, token, timestamp, signature)
    body = json.dumps(
        {
            "signature": {"timestamp": timestamp, "token": token, "signature": signature},
            "event-data": {"id": uuid.uuid4().hex[:22], "event": "delivered"},
        },
        separators=(",", ":"),
    )
    return {"secret": key, "headers": {"Content-Type": "application/json"}, "body": body}


def svix_signed(kind):
    """The Svix SDK signs (Svix's own, and the senders that deliver through
    Svix: Clerk, Resend), with its `svix-*` headers."""

    def sign():
        from svix.webhooks import Webhook

        secret = "whsec_" + base64.b64encode(uuid.uuid4().bytes + uuid.uuid4().bytes).decode()
        msg_id = "msg_" + uuid.uuid4().hex
        now = datetime.datetime.now(tz=datetime.timezone.utc)
        body = json.dumps(
            {"type": kind, "data": {"id": "obj_" + uuid.uuid4().hex}}, separators=(",", ":")
        )
        signature = Webhook(secret).sign(msg_id, now, body)
        headers = {
            "Content-Type": "application/json",
            "svix-id": msg_id,
            "svix-timestamp": str(int(now.timestamp())),
            "svix-signature": signature,
        }
        Webhook(secret).verify(body, headers)
        return {"secret": secret, "headers": headers, "body": body}

    return sign


def razorpay():
    import razorpay as sdk

    secret = "rzp_whsec_" + uuid.uuid4().hex
    body = json.dumps(
        {
            "entity": "event",
            "event": "payment.captured",
            "payload": {"payment": {"entity": {"id": "pay_" + uuid.uuid4().hex[:14]}}},
        },
        separators=(",", ":"),
    )
    signature = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    client = sdk.Client(auth=("rzp_test_key", "rzp_test_secret"))
    assert client.utility.verify_webhook_signature(body, signature, secret)
    return {
        "secret": secret,
        "headers": {
            "Content-Type": "application/json",
            "X-Razorpay-Signature": signature,
            "X-Razorpay-Event-Id": "evt_" + uuid.uuid4().hex[:14],
        },
        "body": body,
    }


def gocardless():
    from gocardless_pro import webhooks

    secret = "gc_whsec_" + uuid.uuid4().hex
    body = json.dumps(
        {
            "events": [{"id": "EV" + uuid.uuid4().hex[:12].upper(), "action": "confirmed",
                        "resource_type": "payments", "links": {}}],
            "meta": {"webhook_id": "WB" + uuid.uuid4().hex[:12].upper()},
        },
        separators=(",", ":"),
    )
    signature = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    assert webhooks.parse(body, secret, signature)
    headers = {"Content-Type": "application/json", "Webhook-Signature": signature}
    return {"secret": secret, "headers": headers, "body": body}


def openai():
    from openai import OpenAI

    raw = uuid.uuid4().bytes + uuid.uuid4().bytes
    secret = "whsec_" + base64.b64encode(raw).decode()
    msg_id, now = "wh_" + uuid.uuid4().hex, str(int(time.time()))
    body = json.dumps(
        {"id": "evt_" + uuid.uuid4().hex, "type": "response.completed", "data": {"id": "resp_1"}},
        separators=(",", ":"),
    )
    signed = f"{msg_id}.{now}.{body}".encode()
    signature = base64.b64encode(hmac.new(raw, signed, hashlib.sha256).digest()).decode()
    headers = {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": now,
        "webhook-signature": "v1," + signature,
    }
    OpenAI(api_key="sk-test").webhooks.verify_signature(body, headers, secret=secret)
    return {"secret": secret, "headers": headers, "body": body}


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def stripe():
    import stripe as sdk

    secret = "whsec_" + uuid.uuid4().hex
    body = compact({"id": "evt_" + uuid.uuid4().hex[:24], "object": "event", "type": "charge.succeeded"})
    t = str(int(time.time()))
    v1 = hmac.new(secret.encode(), f"{t}.{body}".encode(), hashlib.sha256).hexdigest()
    header = f"t={t},v1={v1}"
    sdk.Webhook.construct_event(body, header, secret)
    return {"secret": secret, "headers": {"Content-Type": "application/json", "Stripe-Signature": header}, "body": body}


def slack():
    from slack_sdk.signature import SignatureVerifier

    secret = uuid.uuid4().hex
    body = compact({"type": "event_callback", "event_id": "Ev" + uuid.uuid4().hex[:10].upper(),
                    "event": {"type": "app_mention", "text": "hello"}})
    t = str(int(time.time()))
    verifier = SignatureVerifier(secret)
    signature = verifier.generate_signature(timestamp=t, body=body)
    headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": t,
               "X-Slack-Signature": signature}
    assert verifier.is_valid(body=body, timestamp=t, signature=signature)
    return {"secret": secret, "headers": headers, "body": body}


def box():
    from box_sdk_gen.managers.webhooks import WebhooksManager

    secret = uuid.uuid4().hex
    body = compact({"type": "webhook_event", "id": str(uuid.uuid4()), "trigger": "FILE.UPLOADED",
                    "source": {"id": "1", "type": "file"}})
    at = datetime.datetime.now(tz=datetime.timezone.utc).replace(microsecond=0).isoformat()
    signed = body.encode() + at.encode()
    signature = base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()
    headers = {"Content-Type": "application/json", "Box-Delivery-Id": str(uuid.uuid4()),
               "Box-Delivery-Timestamp": at, "Box-Signature-Primary": signature,
               "Box-Signature-Version": "1", "Box-Signature-Algorithm": "HmacSHA256"}
    lowered = {name.lower(): value for name, value in headers.items()}
    assert WebhooksManager.validate_message(body, lowered, secret)
    return {"secret": secret, "headers": headers, "body": body}


def standard(kind, accept):
    """A Standard Webhooks sender whose SDK verifies (`accept` raises if
    not): signed here by the standard's method."""

    def sign():
        raw = uuid.uuid4().bytes + uuid.uuid4().bytes
        secret = "whsec_" + base64.b64encode(raw).decode()
        msg_id, now = "msg_" + uuid.uuid4().hex, str(int(time.time()))
        body = compact({"type": kind, "data": {"id": uuid.uuid4().hex}})
        signed = f"{msg_id}.{now}.{body}".encode()
        signature = base64.b64encode(hmac.new(raw, signed, hashlib.sha256).digest()).decode()
        headers = {"Content-Type": "application/json", "webhook-id": msg_id,
                   "webhook-timestamp": now, "webhook-signature": "v1," + signature}
        accept(body, headers, secret)
        return {"secret": secret, "headers": headers, "body": body}

    return sign


def replicate_accepts(body, headers, secret):
    from replicate.webhook import Webhooks, WebhookSigningSecret

    Webhooks.validate(headers=headers, body=body, secret=WebhookSigningSecret(key=secret))


def lithic_accepts(body, headers, secret):
    import lithic as sdk

    sdk.Lithic(api_key="test").webhooks.verify_signature(body, headers, secret=secret)


def pusher():
    import pusher as sdk

    secret, key = uuid.uuid4().hex, "app-key-1"
    body = compact({"time_ms": int(time.time() * 1000),
                    "events": [{"name": "channel_occupied", "channel": "orders-" + uuid.uuid4().hex}]})
    signature = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    client = sdk.Pusher(app_id="1", key=key, secret=secret)
    assert client.validate_webhook(key, signature, body) is not None
    headers = {"Content-Type": "application/json", "X-Pusher-Key": key, "X-Pusher-Signature": signature}
    return {"secret": secret, "headers": headers, "body": body}


def coinbase_commerce():
    from coinbase_commerce.webhook import Webhook

    secret = uuid.uuid4().hex
    body = compact({"id": 1, "scheduled_for": "2026-12-03T12:00:00Z",
                    "event": {"id": str(uuid.uuid4()), "type": "charge:confirmed", "data": {"code": "66BEOV2A"}}})
    signature = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    Webhook.construct_event(body, signature, secret)
    headers = {"Content-Type": "application/json", "X-CC-Webhook-Signature": signature}
    return {"secret": secret, "headers": headers, "body": body}


def telnyx():
    import telnyx as sdk
    from nacl.signing import SigningKey

    key = SigningKey.generate()
    public = base64.b64encode(bytes(key.verify_key)).decode()
    body = compact({"data": {"event_type": "message.received", "id": str(uuid.uuid4()),
                             "payload": {"direction": "inbound"}}})
    t = str(int(time.time()))
    signature = base64.b64encode(key.sign(f"{t}|{body}".encode()).signature).decode()
    headers = {"Content-Type": "application/json", "telnyx-timestamp": t,
               "telnyx-signature-ed25519": signature}
    sdk.Telnyx(api_key="KEY_test").webhooks.unwrap(body, headers=headers, key=public)
    return {"secret": public, "headers": headers, "body": body}


SENDERS = {
    "stripe": stripe,
    "slack": slack,
    "box": box,
    "replicate": standard("prediction.completed", replicate_accepts),
    "lithic": standard("card.created", lithic_accepts),
    "pusher": pusher,
    "coinbase-commerce": coinbase_commerce,
    "telnyx": telnyx,
    "gocardless": gocardless,
    "openai": openai,
    "svix": svix_signed("invoice.paid"),
    "clerk": svix_signed("user.created"),
    "resend": svix_signed("email.delivered"),
    "razorpay": razorpay,
    "paddle": paddle,
    "mailgun": mailgun,
    "twilio": twilio,
    "square": square,
    "hubspot": hubspot,
    "adyen": adyen,
    "sendgrid": sendgrid,
    "discord": lambda: discord(
        json.dumps(
            {"id": str(uuid.uuid4().int % 10**18), "type": 2, "token": "t", "version": 1},
            separators=(",", ":"),
        )
    ),
    "discord-ping": lambda: discord('{"id":"1","type":1,"token":"t","version":1}'),
}

if __name__ == "__main__":
    print(json.dumps(SENDERS[sys.argv[1]]()))
