// The npm SDKs' side of tests/sdk/senders.py: `node senders.mjs SCHEME`
// prints one request, signed by the sender's documented method and accepted
// by the sender's own SDK before it is printed.
import { createHash, createHmac, randomUUID } from "node:crypto";

const hmac = (key, text, encoding) => createHmac("sha256", key).update(text).digest(encoding);

async function mux() {
  const { default: Mux } = await import("@mux/mux-node");
  const secret = randomUUID().replaceAll("-", "");
  const body = JSON.stringify({ type: "video.asset.ready", id: randomUUID(), object: { type: "asset", id: randomUUID() } });
  const t = Math.floor(Date.now() / 1000);
  const headers = { "Content-Type": "application/json", "Mux-Signature": `t=${t},v1=${hmac(secret, `${t}.${body}`, "hex")}` };
  const mux = new Mux({ tokenId: "id", tokenSecret: "secret", webhookSecret: secret });
  await mux.webhooks.verifySignature(body, headers, secret);
  return { secret, headers, body };
}

async function shopify() {
  await import("@shopify/shopify-api/adapters/web-api");
  const { shopifyApi, ApiVersion } = await import("@shopify/shopify-api");
  const secret = `shpss_${randomUUID().replaceAll("-", "")}`;
  const body = JSON.stringify({ id: Date.now(), email: "buyer@example.com", total_price: "42.00" });
  const headers = {
    "Content-Type": "application/json",
    "X-Shopify-Hmac-Sha256": hmac(secret, body, "base64"),
    "X-Shopify-Topic": "orders/create",
    "X-Shopify-Shop-Domain": "shop.myshopify.com",
    "X-Shopify-Api-Version": ApiVersion.October25 ?? "2025-10",
    "X-Shopify-Webhook-Id": randomUUID(),
  };
  const shopify = shopifyApi({
    apiKey: "key", apiSecretKey: secret, scopes: [], hostName: "hooks.example.com",
    apiVersion: headers["X-Shopify-Api-Version"], isEmbeddedApp: false, logger: { level: 0 },
  });
  const rawRequest = new Request("https://hooks.example.com/webhooks", { method: "POST", headers, body });
  const verdict = await shopify.webhooks.validate({ rawBody: body, rawRequest });
  if (!verdict.valid) throw new Error(`Shopify's SDK refused the request: ${JSON.stringify(verdict)}`);
  return { secret, headers, body };
}

async function webflow() {
  const { WebflowClient } = await import("webflow-api");
  const secret = randomUUID().replaceAll("-", "");
  const body = JSON.stringify({ triggerType: "form_submission", payload: { id: randomUUID() } });
  const t = String(Date.now());
  const headers = { "Content-Type": "application/json", "x-webflow-timestamp": t, "x-webflow-signature": hmac(secret, `${t}:${body}`, "hex") };
  const client = new WebflowClient({ accessToken: "token" });
  if (!(await client.webhooks.verifySignature({ headers, body, secret }))) {
    throw new Error("Webflow's SDK refused the request");
  }
  return { secret, headers, body };
}

// Polar delivers Standard Webhooks keyed by its secret's own bytes (its
// SDK base64-encodes the secret for the standard library).
async function polar() {
  const { validateEvent, WebhookVerificationError } = await import("@polar-sh/sdk/webhooks");
  const secret = `polar_whs_${randomUUID().replaceAll("-", "")}`;
  const body = JSON.stringify({ type: "order.created", timestamp: new Date().toISOString(), data: { id: randomUUID() } });
  const id = `msg_${randomUUID()}`;
  const t = String(Math.floor(Date.now() / 1000));
  const headers = {
    "Content-Type": "application/json",
    "webhook-id": id,
    "webhook-timestamp": t,
    "webhook-signature": `v1,${hmac(secret, `${id}.${t}.${body}`, "base64")}`,
  };
  try {
    validateEvent(body, headers, secret);
  } catch (error) {
    // A body that is not one of Polar's event types still verified first.
    if (error instanceof WebhookVerificationError) throw error;
  }
  return { secret, headers, body };
}

// LINE signs the body with the channel secret; its SDK's validateSignature.
async function line() {
  const { validateSignature } = await import("@line/bot-sdk");
  const secret = randomUUID().replaceAll("-", "");
  const body = JSON.stringify({ destination: "U0123456789abcdef", events: [{ type: "message", webhookEventId: randomUUID(), deliveryContext: { isRedelivery: false } }] });
  const headers = { "Content-Type": "application/json", "x-line-signature": hmac(secret, body, "base64") };
  if (!validateSignature(body, secret, headers["x-line-signature"])) throw new Error("LINE's SDK refused the request");
  return { secret, headers, body };
}

// LiveKit's server SDK makes the token as LiveKit does (AccessToken with
// the body's SHA-256) and its WebhookReceiver accepts it.
async function livekit() {
  const { WebhookReceiver, AccessToken } = await import("livekit-server-sdk");
  const key = `API${randomUUID().slice(0, 8)}`;
  const secret = randomUUID().replaceAll("-", "") + randomUUID().replaceAll("-", "");
  const body = JSON.stringify({ event: "room_finished", id: `EV_${randomUUID()}`, room: { name: "demo" }, createdAt: String(Math.floor(Date.now() / 1000)) });
  const token = new AccessToken(key, secret);
  token.sha256 = createHash("sha256").update(body).digest("base64");
  const headers = { "Content-Type": "application/webhook+json", Authorization: await token.toJwt() };
  await new WebhookReceiver(key, secret).receive(body, headers.Authorization);
  return { secret, headers, body };
}

// Vonage's signed webhooks: a JWT made by the documented method, whose
// signature Vonage's @vonage/jwt accepts.
async function vonage() {
  const { verifySignature } = await import("@vonage/jwt");
  const secret = randomUUID().replaceAll("-", "");
  const body = JSON.stringify({ message_uuid: randomUUID(), status: "delivered", timestamp: new Date().toISOString() });
  const header = Buffer.from(JSON.stringify({ alg: "HS256", typ: "JWT" })).toString("base64url");
  const claims = Buffer.from(JSON.stringify({
    iat: Math.floor(Date.now() / 1000), jti: randomUUID(), iss: "Vonage",
    payload_hash: createHash("sha256").update(body).digest("hex"),
  })).toString("base64url");
  const token = `${header}.${claims}.${hmac(secret, `${header}.${claims}`, "base64url")}`;
  if (!verifySignature(token, secret)) throw new Error("Vonage's SDK refused the token");
  return { secret, headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` }, body };
}

// WorkOS's SDK computes the signature over JSON.stringify of the payload:
// the body is exactly that.
async function workos() {
  const { WorkOS } = await import("@workos-inc/node");
  const secret = randomUUID().replaceAll("-", "");
  const payload = { id: `event_${randomUUID()}`, event: "dsync.user.created", data: { id: `directory_user_${randomUUID()}` } };
  const body = JSON.stringify(payload);
  const t = Date.now();
  const headers = { "Content-Type": "application/json", "WorkOS-Signature": `t=${t}, v1=${hmac(secret, `${t}.${body}`, "hex")}` };
  await new WorkOS("sk_test_hookgate").webhooks.constructEvent({ payload, sigHeader: headers["WorkOS-Signature"], secret });
  return { secret, headers, body };
}

async function easypost() {
  const { default: EasyPost } = await import("@easypost/api");
  const secret = randomUUID();
  const body = JSON.stringify({ id: `evt_${randomUUID().replaceAll("-", "")}`, object: "Event", description: "tracker.updated" });
  const headers = { "Content-Type": "application/json", "X-Hmac-Signature": `hmac-sha256-hex=${hmac(secret, body, "hex")}` };
  new EasyPost("EZTKhookgate").Utils.validateWebhook(Buffer.from(body), headers, secret);
  return { secret, headers, body };
}

const senders = { mux, shopify, webflow, polar, line, livekit, vonage, workos, easypost };
console.log(JSON.stringify(await senders[process.argv[2]]()));
