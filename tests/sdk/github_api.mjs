// GitHub's own OpenAPI description (npm @octokit/openapi) as the oracle for
// the stand-in of GitHub's hook-deliveries API in tests/it/reconcile.rs, and
// for what hookgate reads of it (src/sender_apis.rs): the listing and
// redelivery paths exist with the parameters and answers hookgate uses, and
// every item the stand-in lists is a `hook-delivery-item` (each required
// property there, of its type). Usage: node github_api.mjs BASE TOKEN HOOK.
// Prints one JSON document: {"items": N, "pages": N, "problems": [...]}.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const spec = require("@octokit/openapi/generated/api.github.com.json");
const [base, token, hook] = process.argv.slice(2);
const problems = [];

// The paths hookgate calls, for a repository's hook and an organization's.
for (const owner of ["/repos/{owner}/{repo}", "/orgs/{org}"]) {
  const list = spec.paths[`${owner}/hooks/{hook_id}/deliveries`]?.get;
  const ask = spec.paths[`${owner}/hooks/{hook_id}/deliveries/{delivery_id}/attempts`]?.post;
  if (!list) problems.push(`no GET ${owner}/hooks/{hook_id}/deliveries`);
  if (!ask) problems.push(`no POST ${owner}/hooks/{hook_id}/deliveries/{delivery_id}/attempts`);
  const params = (list?.parameters ?? []).map((p) => p.$ref?.split("/").pop() ?? p.name);
  for (const name of ["per-page", "cursor"]) {
    if (!params.includes(name)) problems.push(`${owner}: the listing takes no ${name}`);
  }
  const items = list?.responses?.["200"]?.content?.["application/json"]?.schema?.items?.$ref;
  if (items !== "#/components/schemas/hook-delivery-item") problems.push(`${owner}: the listing answers ${items}`);
  if (!ask?.responses?.["202"]) problems.push(`${owner}: a redelivery is not answered 202`);
}

const schema = spec.components.schemas["hook-delivery-item"];
// What hookgate reads of an item (src/sender_apis.rs), of its type.
for (const [field, type] of [["id", "integer"], ["guid", "string"], ["delivered_at", "string"], ["status_code", "integer"]]) {
  if (!schema.required.includes(field) || schema.properties[field]?.type !== type) {
    problems.push(`hook-delivery-item.${field} is not a required ${type}`);
  }
}

function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function check(item, at) {
  for (const field of schema.required) {
    if (!(field in item)) problems.push(`${at}: no ${field}`);
  }
  for (const [field, value] of Object.entries(item)) {
    const property = schema.properties[field];
    if (!property) {
      problems.push(`${at}: ${field} is not a property of hook-delivery-item`);
      continue;
    }
    const found = typeOf(value);
    const fits = found === property.type || (found === "integer" && property.type === "number")
      || (found === "null" && property.nullable);
    if (!fits) problems.push(`${at}: ${field} is ${found}, not ${property.type}`);
    if (property.format === "date-time" && value !== null && Number.isNaN(Date.parse(value))) {
      problems.push(`${at}: ${field} is not a date-time`);
    }
  }
}

let url = `${base}/${hook}/deliveries?per_page=100`;
let [items, pages] = [0, 0];
while (url) {
  const answer = await fetch(url, {
    headers: { authorization: `Bearer ${token}`, accept: "application/vnd.github+json" },
  });
  if (answer.status !== 200) {
    problems.push(`GET ${url}: ${answer.status}`);
    break;
  }
  const page = await answer.json();
  if (!Array.isArray(page)) problems.push(`GET ${url}: not an array`);
  for (const item of page) check(item, `item ${items++}`);
  pages += 1;
  // RFC 8288, as GitHub writes it.
  const link = answer.headers.get("link") ?? "";
  const next = link.split(",").map((part) => part.match(/<([^>]+)>;\s*rel="next"/)).find(Boolean);
  url = next ? next[1] : null;
  if (url && !new URL(url).searchParams.get("cursor")) problems.push(`a next link without a cursor: ${url}`);
}
console.log(JSON.stringify({ items, pages, problems }));
