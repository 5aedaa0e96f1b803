// Linear's webhook client from its own SDK (@linear/sdk) accepts the
// request before it is printed, as tests/sdk/senders.py does for the PyPI
// SDKs: `node linear.mjs` prints one signed request as JSON.
import { createHmac, randomUUID } from "node:crypto";
import { LinearWebhookClient } from "@linear/sdk/webhooks";

const secret = `lin_wh_${randomUUID().replaceAll("-", "")}`;
const body = JSON.stringify({
  action: "create",
  type: "Issue",
  data: { id: randomUUID(), title: "Checkout fails" },
  webhookTimestamp: Date.now(),
});
const signature = createHmac("sha256", secret).update(body).digest("hex");
if (!new LinearWebhookClient(secret).verify(Buffer.from(body), signature)) {
  throw new Error("Linear's SDK refused the request");
}
console.log(
  JSON.stringify({
    secret,
    headers: {
      "Content-Type": "application/json",
      "Linear-Signature": signature,
      "Linear-Delivery": randomUUID(),
    },
    body,
  }),
);
