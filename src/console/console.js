// hookgate console: one page on the admin listener, calling the admin API
// with the session cookie and the page's CSRF token. Everything shown is
// built with textContent, never parsed as HTML: keys, headers and bodies come
// from senders and are shown as text, whatever they contain.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;
// A session of the read token (admin.read_token) reads everything and
// changes nothing: no action button is shown to it.
const READ_ONLY = document.querySelector('meta[name="role"]').content === "reader";
if (READ_ONLY) document.getElementById("who").textContent = "operator console (read only)";
const ROUTES_EVERY_MS = 2000;
const STATES = ["", "processing", "queued", "failed", "dead", "completed"];

// --- the admin API --------------------------------------------------------

async function api(method, path) {
  const response = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "X-CSRF-Token": csrf, Accept: "application/json" },
  });
  if (response.status === 401) {
    location.assign("/ui");
    throw new Error("the session ended; log in again");
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = body.error || {};
    throw new Error(error.message || error.code || response.status + " " + response.statusText);
  }
  return body;
}

const enc = encodeURIComponent;
const keyPath = (route, key) => "/admin/routes/" + enc(route) + "/keys/" + enc(key);

// --- building the page ------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "onclick") node.addEventListener("click", value);
    else if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function when(ms) {
  return ms ? new Date(ms).toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" }) : "";
}

function stateBadge(state) {
  return el("span", { class: "state state-" + state, "data-state": state }, state);
}

function say(text, error) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = error ? "error" : "";
  clearTimeout(say.timer);
  say.timer = setTimeout(() => (status.textContent = ""), error ? 10000 : 5000);
}

// --- routes, with live rates per outcome -------------------------------------

let previous = null;

async function loadRoutes() {
  let data;
  try {
    data = await api("GET", "/admin/routes");
  } catch (error) {
    say("routes: " + error.message, true);
    return;
  }
  const now = Date.now();
  const body = document.getElementById("routes-body");
  body.replaceChildren();
  const select = document.getElementById("filter-route");
  const chosen = select.value;
  if (select.options.length <= 1) {
    for (const route of data.routes) select.append(el("option", { value: route.name }, route.name));
    select.value = chosen;
  }
  for (const route of data.routes) {
    const rates = [];
    const before = previous && previous.routes[route.name];
    for (const [outcome, count] of Object.entries(route.outcomes || {})) {
      if (!count) continue;
      const rate = before ? ((count - (before[outcome] || 0)) * 1000) / (now - previous.at) : null;
      rates.push(el("span", { "data-outcome": outcome },
        el("b", {}, rate === null ? "…" : rate.toFixed(1) + "/s"), " " + outcome + " (" + count + ")"));
    }
    const shownRates = rates.length ? rates.flatMap((r, i) => (i ? [" · ", r] : [r])) : ["no traffic yet"];
    const redrive = route.dead_letters && !READ_ONLY
      ? el("button", { class: "danger", "data-redrive": route.name, onclick: () => redriveRoute(route.name, route.dead_letters) },
          "Redrive " + route.dead_letters + " dead letter" + (route.dead_letters === 1 ? "" : "s"))
      : null;
    body.append(
      el("tr", { "data-route": route.name },
        el("td", {}, el("b", {}, route.name)),
        el("td", {}, el("code", {}, route.path)),
        el("td", {}, route.delivery, route.paused ? el("span", { class: "state state-failed" }, " paused") : null),
        el("td", { class: "rates" }, shownRates),
        el("td", {}, route.queued === null || route.queued === undefined ? "" : String(route.queued)),
        el("td", {}, String(route.dead_letters || 0)),
        el("td", {}, redrive)));
  }
  previous = { at: now, routes: Object.fromEntries(data.routes.map((r) => [r.name, r.outcomes || {}])) };
}

async function redriveRoute(route, count) {
  if (!confirm("Redrive all " + count + " dead letters of route " + route + "? Each is sent to the upstream again.")) return;
  try {
    const done = await api("POST", "/admin/routes/" + enc(route) + "/dead-letters/redeliver");
    say("Redrive of " + route + ": " + done.completed + " completed, " + done.failed + " failed, " + done.dead + " dead again");
  } catch (error) {
    say("redrive: " + error.message, true);
  }
  loadRoutes();
  loadEvents();
}

// --- events by route and state, search by key --------------------------------

let cursor = null;

async function loadEvents(more) {
  const route = document.getElementById("filter-route").value;
  const state = document.getElementById("filter-state").value;
  const params = new URLSearchParams({ limit: "50" });
  if (route) params.set("route", route);
  if (state) params.set("state", state);
  if (more && cursor) params.set("cursor", cursor);
  let page;
  try {
    page = await api("GET", "/admin/events?" + params);
  } catch (error) {
    say("events: " + error.message, true);
    return;
  }
  const body = document.getElementById("events-body");
  if (!more) body.replaceChildren();
  for (const event of page.events) {
    body.append(
      el("tr", { class: "event", "data-key": event.key, onclick: () => showEvent(event.route, event.key) },
        el("td", { class: "when" }, when(event.updated)),
        el("td", {}, event.route),
        el("td", { class: "mono" }, event.key),
        el("td", {}, stateBadge(event.state)),
        el("td", {}, String(event.attempts)),
        el("td", {}, event.last_error ? event.last_error.class + (event.last_error.status ? " " + event.last_error.status : "") : "")));
  }
  if (!body.children.length) body.append(el("tr", {}, el("td", { colspan: "6", class: "empty" }, "No events.")));
  cursor = page.next_cursor;
  document.getElementById("more").hidden = !cursor;
}

async function searchKey(submit) {
  submit.preventDefault();
  const key = document.getElementById("filter-key").value.trim();
  if (!key) {
    loadEvents();
    return;
  }
  const chosen = document.getElementById("filter-route").value;
  const routes = chosen ? [chosen] : [...document.getElementById("filter-route").options].map((o) => o.value).filter(Boolean);
  for (const route of routes) {
    try {
      await api("GET", keyPath(route, key));
      showEvent(route, key);
      return;
    } catch (error) {
      if (!/^no record/.test(error.message)) {
        say(error.message, true);
        return;
      }
    }
  }
  say("No record of key " + key + (chosen ? " on route " + chosen : " on any route"), true);
}

// --- one event: its record, its request, and the actions -----------------------

function headerTable(headers) {
  if (!headers || !headers.length) return el("p", { class: "empty" }, "none");
  return el("table", { class: "headers" }, el("tbody", {}, headers.map(([name, value]) =>
    el("tr", {}, el("td", { class: "mono" }, name), el("td", { class: "mono" }, value)))));
}

function preview(part) {
  if (!part || part.body_preview === undefined) return null;
  const more = part.body_bytes > part.body_preview_bytes ? " (first " + part.body_preview_bytes + " of " + part.body_bytes + " bytes)" : "";
  return [el("h3", {}, "Body" + more), el("pre", { class: "body" }, part.body_preview)];
}

// The record's failed attempts, newest first; the upstream's words go in
// as text, like everything a sender or upstream wrote.
function historyTable(history) {
  if (!history.length) return el("p", { class: "empty" }, "none");
  return el("table", { id: "event-history" },
    el("thead", {}, el("tr", {}, ...["When", "Entrance", "How", "Took", "Error", "Upstream said"].map((t) => el("th", {}, t)))),
    el("tbody", {}, ...history.slice().reverse().map((attempt) => el("tr", {},
      el("td", {}, when(attempt.at)),
      el("td", {}, attempt.kind),
      el("td", {}, attempt.class + (attempt.status ? " " + attempt.status : "")),
      el("td", {}, attempt.duration_ms + " ms"),
      el("td", { class: "mono" }, attempt.error || ""),
      el("td", {}, attempt.body ? el("pre", { class: "body" }, attempt.body) : "")))));
}

async function showEvent(route, key) {
  let record;
  try {
    record = await api("GET", keyPath(route, key));
  } catch (error) {
    say(error.message, true);
    return;
  }
  const section = document.getElementById("event");
  section.hidden = false;
  const error = record.last_error;
  const details = el("dl", {},
    el("dt", {}, "Route"), el("dd", {}, record.route),
    el("dt", {}, "Key"), el("dd", { class: "mono", id: "event-key" }, record.key),
    el("dt", {}, "State"), el("dd", { id: "event-state" }, stateBadge(record.state)),
    el("dt", {}, "Attempts"), el("dd", {}, String(record.attempts)),
    el("dt", {}, "First seen"), el("dd", {}, when(record.first_seen)),
    el("dt", {}, "Updated"), el("dd", {}, when(record.updated)),
    el("dt", {}, "Last error"), el("dd", {}, error ? error.class + (error.status ? " (upstream " + error.status + ")" : "") + " at " + when(error.at) : "none"),
    record.next_attempt_at ? [el("dt", {}, "Next attempt"), el("dd", { id: "event-next" }, when(record.next_attempt_at))] : [],
    record.replay_of ? [el("dt", {}, "Replay of"), el("dd", { class: "mono" }, record.replay_of)] : [],
    record.replays && record.replays.length ? [el("dt", {}, "Replays"), el("dd", { class: "mono" }, record.replays.join(", "))] : []);
  const response = record.response;
  const request = record.request;
  const act = (label, cls, question, method, suffix) =>
    el("button", { class: cls, "data-action": label.toLowerCase(), onclick: () => perform(label, question, method, route, key, suffix) }, label);
  section.replaceChildren(...[
    el("h2", {}, "Event"),
    details,
    el("h3", {}, "Failed attempts"),
    historyTable(record.history || []),
    el("h3", {}, "Recorded response"),
    response
      ? [el("p", {}, "Status " + response.status), headerTable(response.headers), preview(response)]
      : el("p", { class: "empty" }, "none yet"),
    el("h3", {}, "Stored request"),
    request
      ? [el("p", { class: "mono" }, request.method + (request.query ? " ?" + request.query : "")), headerTable(request.headers), preview(request)]
      : el("p", { class: "empty" }, "not kept (only failed, dead and replayed events keep their request)"),
    READ_ONLY ? null : el("div", { class: "actions" },
      request ? act("Redeliver", "primary", "Send the stored request of " + key + " to the upstream again, under the same key?", "POST", "/redeliver") : null,
      request ? act("Replay", "", "Send the stored request of " + key + " again as a new event, under a new key?", "POST", "/replay") : null,
      act("Forget", "danger", "Forget " + key + "? The sender's next delivery of it is processed again.", "DELETE", "")),
  ].flat(Infinity).filter((part) => part !== null && part !== undefined));
  section.scrollIntoView({ block: "start" });
}

async function perform(label, question, method, route, key, suffix) {
  if (!confirm(question)) return;
  try {
    const done = await api(method, keyPath(route, key) + suffix);
    if (label === "Forget") {
      say("Forgot " + key);
      document.getElementById("event").hidden = true;
    } else {
      say(label + " of " + done.key + ": " + done.state + (done.upstream_status ? " (upstream " + done.upstream_status + ")" : ""));
      showEvent(route, done.key);
    }
  } catch (error) {
    say(label.toLowerCase() + ": " + error.message, true);
  }
  loadEvents();
  loadRoutes();
}

// --- start ------------------------------------------------------------------

document.getElementById("filters").addEventListener("submit", searchKey);
document.getElementById("filter-route").addEventListener("change", () => loadEvents());
document.getElementById("filter-state").addEventListener("change", () => loadEvents());
document.getElementById("more").addEventListener("click", () => loadEvents(true));
document.getElementById("refresh").addEventListener("click", () => loadEvents());
for (const state of STATES) {
  document.getElementById("filter-state").append(el("option", { value: state }, state || "any state"));
}
loadRoutes().then(() => loadEvents());
setInterval(loadRoutes, ROUTES_EVERY_MS);
