// The npm SDKs' side of tests/sdk/senders.py: `node senders.mjs SCHEME`
// prints one request, signed by the sender's documented method and accepted
// by the sender's own SDK before it is printed.
import { createHmac, randomUUID } from "node:crypto";

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

const senders = { mux, shopify, webflow, polar };
console.log(JSON.stringify(await senders[process.argv[2]]()));
