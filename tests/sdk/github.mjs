// GitHub's own webhook signing (@octokit/webhooks-methods) signs the
// request, and verifies it, before it is printed, as tests/sdk/senders.py
// does for the PyPI SDKs: `node github.mjs` prints one signed request.
import { randomUUID } from "node:crypto";
import { sign, verify } from "@octokit/webhooks-methods";

const secret = `gh_wh_${randomUUID().replaceAll("-", "")}`;
const body = JSON.stringify({
  action: "opened",
  number: 1347,
  repository: { full_name: "octocat/Hello-World" },
});
const signature = await sign(secret, body);
if (!(await verify(secret, body, signature))) {
  throw new Error("GitHub's SDK refused its own signature");
}
console.log(
  JSON.stringify({
    secret,
    headers: {
      "Content-Type": "application/json",
      "X-Hub-Signature-256": signature,
      "X-GitHub-Delivery": randomUUID(),
      "X-GitHub-Event": "pull_request",
    },
    body,
  }),
);
