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
const ROUTES_EVERY_MS = 5000;
const STATES = ["", "processing", "queued", "failed", "dead", "stale", "completed"];

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
// A destination's delivery is named "route/destination" here, as the API
// lists it; its record is addressed with ?destination=.
function keyPath(route, key, suffix = "") {
  const [name, destination] = route.split("/");
  return "/admin/routes/" + enc(name) + "/keys/" + enc(key) + suffix + (destination ? "?destination=" + enc(destination) : "");
}
const deliveryName = (record) => record.destination ? record.route + "/" + record.destination : record.route;

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

// Times in the browser's zone, named ("14:02:07 CET").
function when(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });
}
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

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

// --- routes, and their outcomes from the gateway's own history ------------------

// The outcomes of a bucket, as the chart groups them.
const GROUPS = {
  ok: ["forwarded", "forwarded_unkeyed", "accepted", "handshake"],
  replayed: ["replayed", "filtered", "in_flight", "route_paused", "rate_limited", "upstream_circuit_open"],
  failed: ["upstream_error", "upstream_timeout", "upstream_body_incomplete", "dead_letter", "store_unavailable", "internal_error"],
};
const group = (outcome) => Object.keys(GROUPS).find((name) => GROUPS[name].includes(outcome)) || "refused";
let history = { step_ms: 300000, routes: {} };

// The route's outcomes over the last hour (twelve five-minute buckets).
function lastHour(route) {
  const buckets = (history.routes[route] || []).filter((b) => b.at > Date.now() - 3600000 - history.step_ms);
  const sums = {};
  for (const bucket of buckets) {
    for (const [outcome, n] of Object.entries(bucket)) if (outcome !== "at") sums[outcome] = (sums[outcome] || 0) + n;
  }
  const parts = Object.entries(sums).sort((a, b) => b[1] - a[1])
    .map(([outcome, n]) => el("span", { "data-outcome": outcome }, el("b", {}, String(n)), " " + outcome));
  return parts.length ? parts.flatMap((part, i) => (i ? [" · ", part] : [part])) : ["no traffic"];
}

// The route's reconciliation with its sender's API (docs/guide/reconciliation.md):
// when a pass last went well, what the last one found, and why it failed.
function reconcileLine(state) {
  if (!state) return null;
  const found = state.last_run_at ? "; last pass: " + state.missing + " missing of " + state.seen +
    ", " + state.delivered + " delivered, " + state.asked + " asked" : "";
  const good = state.last_success_at ? "last good pass " + state.last_success_at : "no good pass yet";
  return el("div", { "data-reconcile": state.route || "" },
    "reconciles with " + state.sender + ": " + good + found,
    state.last_error ? el("span", { class: "state state-failed", title: state.last_error }, " " + state.last_error) : null);
}

async function loadRoutes() {
  let data;
  try {
    [data, history] = await Promise.all([api("GET", "/admin/routes"), api("GET", "/admin/history")]);
  } catch (error) {
    say("routes: " + error.message, true);
    return;
  }
  const body = document.getElementById("routes-body");
  body.replaceChildren();
  const select = document.getElementById("filter-route");
  const chosen = select.value;
  if (select.options.length <= 1) {
    for (const route of data.routes) select.append(el("option", { value: route.name }, route.name));
    select.value = chosen;
  }
  for (const route of data.routes) {
    const redrive = route.dead_letters && !READ_ONLY
      ? el("button", { class: "danger", "data-redrive": route.name, onclick: () => redriveRoute(route.name, route.dead_letters) },
          "Redrive " + route.dead_letters + " dead letter" + (route.dead_letters === 1 ? "" : "s"))
      : null;
    body.append(
      el("tr", { "data-route": route.name },
        el("td", {}, el("b", {}, route.name)),
        el("td", {}, el("code", {}, route.path)),
        el("td", {}, route.delivery, route.paused ? el("span", { class: "state state-failed" }, " paused") : null,
          route.blocked ? el("button", { class: "state state-dead", "data-blocked": route.name, onclick: () => showBlocked(route.name),
            title: "entities whose later events wait behind a dead event: redeliver or forget it" }, route.blocked + " blocked") : null),
        el("td", { class: "rates" }, lastHour(route.name), reconcileLine(route.reconcile)),
        el("td", {}, route.queued === null || route.queued === undefined ? "" : String(route.queued)),
        el("td", {}, String(route.dead_letters || 0)),
        el("td", {}, redrive)));
  }
  drawCharts(data.routes.map((route) => route.name));
}

// The entities of an ordered route held by a dead event: each with its
// dead event (open it to redeliver or forget it) and how many wait.
async function showBlocked(route) {
  let data;
  try {
    data = await api("GET", "/admin/routes/" + encodeURIComponent(route) + "/blocked");
  } catch (error) {
    say("blocked: " + error.message, true);
    return;
  }
  const section = document.getElementById("event");
  section.hidden = false;
  const rows = data.blocked.map((held) =>
    el("tr", {},
      el("td", { class: "mono" }, held.entity),
      el("td", {}, el("a", { href: "#", class: "mono", onclick: (e) => { e.preventDefault(); showEvent(route, held.dead_event); } }, held.dead_event)),
      el("td", {}, when(held.since)),
      el("td", {}, String(held.waiting))));
  section.replaceChildren(
    el("h2", {}, "Blocked entities of " + route),
    el("p", {}, "Each entity's later events wait until its dead event is redelivered (and delivered) or forgotten."),
    el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "Entity"), el("th", {}, "Dead event"), el("th", {}, "Dead since"), el("th", {}, "Waiting"))),
      el("tbody", { id: "blocked-body" }, ...rows)),
    ...(data.more ? [el("p", { class: "empty" }, "more not shown")] : []));
  section.scrollIntoView({ block: "start" });
}

// One stacked bar per five minutes over 24 hours, per route: SVG built
// node by node (no markup), coloured by class (no inline style).
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

function drawCharts(routes) {
  const charts = document.getElementById("charts");
  charts.replaceChildren();
  document.getElementById("history-zone").textContent = "(five-minute bars, times in " + ZONE + ")";
  const slots = Math.round(86400000 / history.step_ms);
  const end = Date.now();
  for (const route of routes) {
    const buckets = history.routes[route] || [];
    const totals = buckets.map((b) => Object.entries(b).reduce((sum, [k, n]) => (k === "at" ? sum : sum + n), 0));
    const top = Math.max(1, ...totals);
    const chart = svg("svg", { viewBox: "0 0 " + slots * 4 + " 48", preserveAspectRatio: "none", "data-chart": route });
    buckets.forEach((bucket, i) => {
      const x = (slots - 1 - Math.floor((end - bucket.at) / history.step_ms)) * 4;
      if (x < 0) return;
      let y = 48;
      for (const name of ["ok", "replayed", "failed", "refused"]) {
        const n = Object.entries(bucket).reduce((sum, [k, v]) => (k !== "at" && group(k) === name ? sum + v : sum), 0);
        if (!n) continue;
        const h = Math.max(1, (n / top) * 46);
        y -= h;
        chart.append(svg("rect", { x, y, width: 3, height: h, class: name }, svg("title", {}, when(bucket.at) + ": " + n + " " + name)));
      }
    });
    charts.append(el("div", { class: "chart" }, el("span", {}, el("b", {}, route), " (" + totals.reduce((a, b) => a + b, 0) + ")"), chart));
  }
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

// --- events by filters, search by key, selection ---------------------------------

let cursor = null;
const selected = new Map(); // "route key" -> [route, key]

// The listing's filters as query parameters (the same for a bulk action).
function filterParams() {
  const params = new URLSearchParams();
  const value = (id) => document.getElementById(id).value.trim();
  for (const [name, id] of [["route", "filter-route"], ["state", "filter-state"], ["since", "filter-since"],
    ["until", "filter-until"], ["status", "filter-status"], ["error", "filter-error"], ["q", "filter-q"]]) {
    if (value(id)) params.set(name, value(id));
  }
  return params;
}

function showScope() {
  document.getElementById("bulk-scope").textContent = selected.size
    ? selected.size + " selected event" + (selected.size === 1 ? "" : "s")
    : "every event the filters match";
}

async function loadEvents(more) {
  const params = filterParams();
  params.set("limit", "50");
  if (more && cursor) params.set("cursor", cursor);
  let page;
  try {
    page = await api("GET", "/admin/events?" + params);
  } catch (error) {
    say("events: " + error.message, true);
    return;
  }
  const body = document.getElementById("events-body");
  if (!more) {
    body.replaceChildren();
    selected.clear();
    document.getElementById("select-all").checked = false;
    showScope();
  }
  for (const event of page.events) {
    const name = deliveryName(event);
    const id = name + " " + event.key;
    const check = el("input", { type: "checkbox", "data-select": event.key });
    check.addEventListener("click", (click) => {
      click.stopPropagation();
      if (check.checked) selected.set(id, [name, event.key]);
      else selected.delete(id);
      showScope();
    });
    body.append(
      el("tr", { class: "event", "data-key": event.key, onclick: () => showEvent(name, event.key) },
        el("td", { class: "check" }, READ_ONLY ? null : check),
        el("td", { class: "when" }, when(event.updated)),
        el("td", {}, name),
        el("td", { class: "mono" }, event.key),
        el("td", {}, stateBadge(event.state)),
        el("td", {}, String(event.attempts)),
        el("td", {}, event.last_error ? event.last_error.class + (event.last_error.status ? " " + event.last_error.status : "") : "")));
  }
  if (!body.children.length) body.append(el("tr", {}, el("td", { colspan: "7", class: "empty" }, "No events.")));
  cursor = page.next_cursor;
  document.getElementById("more").hidden = !cursor;
}

function selectAll() {
  const on = document.getElementById("select-all").checked;
  for (const check of document.querySelectorAll("#events-body input[data-select]")) {
    if (check.checked !== on) check.click();
  }
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

// An event's delivery at each destination of its route: click one to see
// (and act on) that delivery.
function destinationTable(route, key, destinations) {
  return el("table", { class: "destinations" },
    el("thead", {}, el("tr", {}, ["Destination", "State", "Attempts", "Last error"].map((title) => el("th", {}, title)))),
    el("tbody", {}, Object.entries(destinations).map(([name, delivery]) => delivery
      ? el("tr", { class: "event", "data-destination": name, onclick: () => showEvent(route + "/" + name, key) },
          el("td", {}, name), el("td", {}, stateBadge(delivery.state)), el("td", {}, String(delivery.attempts)),
          el("td", {}, delivery.last_error ? delivery.last_error.class + (delivery.last_error.status ? " " + delivery.last_error.status : "") : ""))
      : el("tr", { "data-destination": name }, el("td", {}, name), el("td", { colspan: "3", class: "empty" }, "not sent there (its filter)")))));
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
    el("dt", {}, "Route"), el("dd", {}, deliveryName(record)),
    el("dt", {}, "Key"), el("dd", { class: "mono", id: "event-key" }, record.key),
    el("dt", {}, "State"), el("dd", { id: "event-state" }, stateBadge(record.state)),
    el("dt", {}, "Attempts"), el("dd", {}, String(record.attempts)),
    el("dt", {}, "First seen"), el("dd", {}, when(record.first_seen)),
    el("dt", {}, "Updated"), el("dd", {}, when(record.updated)),
    el("dt", {}, "Last error"), el("dd", {}, error ? error.class + (error.status ? " (upstream " + error.status + ")" : "") + " at " + when(error.at) : "none"),
    record.next_attempt_at ? [el("dt", {}, "Next attempt"), el("dd", { id: "event-next" }, when(record.next_attempt_at))] : [],
    record.entity ? [el("dt", {}, "Entity"), el("dd", { class: "mono" }, record.entity)] : [],
    record.replay_of ? [el("dt", {}, "Replay of"), el("dd", { class: "mono" }, record.replay_of)] : [],
    record.replays && record.replays.length ? [el("dt", {}, "Replays"), el("dd", { class: "mono" }, record.replays.join(", "))] : []);
  const response = record.response;
  const request = record.request;
  const act = (label, cls, question, method, suffix) =>
    el("button", { class: cls, "data-action": label.toLowerCase().replace(" ", "-"), onclick: () => perform(label, question, method, route, key, suffix) }, label);
  section.replaceChildren(...[
    el("h2", {}, "Event"),
    details,
    record.destinations ? [el("h3", {}, "Destinations"), destinationTable(route, key, record.destinations)] : [],
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
    // An event of a route with destinations is acted on per destination.
    READ_ONLY || record.destinations ? null : el("div", { class: "actions" }, actionsFor(record, act)),
  ].flat(Infinity).filter((part) => part !== null && part !== undefined));
  section.scrollIntoView({ block: "start" });
}

// Only the actions that can work on the record as it is: a redelivery of
// a failed or dead event; "retry now" of a queued one (its workers deliver
// it at once); no send and no forget while a delivery holds it or it is
// queued; a replay of what keeps its request.
function actionsFor(record, act) {
  const key = record.key;
  const state = record.state;
  const kept = !!record.request;
  return [
    kept && (state === "failed" || state === "dead")
      ? act("Redeliver", "primary", "Send the stored request of " + key + " to the upstream again, under the same key?", "POST", "/redeliver") : null,
    state === "queued"
      ? act("Retry now", "primary", "Make " + key + " due now? Its workers deliver it at once.", "POST", "/redeliver") : null,
    kept && state !== "processing"
      ? act("Replay", "", "Send the stored request of " + key + " again as a new event, under a new key?", "POST", "/replay") : null,
    state !== "processing" && state !== "queued"
      ? act("Forget", "danger", "Forget " + key + "? The sender's next delivery of it is processed again.", "DELETE", "") : null,
  ];
}

async function perform(label, question, method, route, key, suffix) {
  if (!confirm(question)) return;
  try {
    const done = await api(method, keyPath(route, key, suffix));
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

// --- bulk actions: a selection, or every event the filters match ---------------

const VERBS = { redeliver: "Redeliver", replay: "Replay", forget: "Forget" };
let following = null;

async function bulk(action) {
  if (following) {
    say("a bulk action is running; wait for it or cancel it", true);
    return;
  }
  if (selected.size) return bulkSelection(action);
  const params = filterParams();
  let count;
  try {
    params.set("dry_run", "true");
    count = await api("POST", "/admin/events/" + action + "?" + params);
  } catch (error) {
    say(action + ": " + error.message, true);
    return;
  }
  if (!count.matched) {
    say("No event matches the filters.");
    return;
  }
  params.delete("dry_run");
  const shown = [...params].map(([k, v]) => k + "=" + v).join(" ") || "no filter";
  if (!confirm(VERBS[action] + " " + count.matched + " event" + (count.matched === 1 ? "" : "s") + " matching " + shown + "?" +
    (action === "forget" ? " Their next deliveries are processed again." : " Each is sent to the upstream once more, paced."))) return;
  let started;
  try {
    started = await api("POST", "/admin/events/" + action + "?" + params);
  } catch (error) {
    say(action + ": " + error.message, true);
    return;
  }
  follow(started.id);
}

// Follow a bulk action of the gateway until it ends.
async function follow(id) {
  following = id;
  const box = document.getElementById("bulk-progress");
  box.hidden = false;
  document.getElementById("bulk-cancel").hidden = false;
  for (;;) {
    let bulk;
    try {
      bulk = await api("GET", "/admin/bulk/" + enc(id));
    } catch (error) {
      say("bulk " + id + ": " + error.message, true);
      break;
    }
    showProgress(bulk.done, bulk.matched, VERBS[bulk.action] + " " + bulk.state + ": " + bulk.done + " of " + bulk.matched +
      " — " + bulk.delivered + " delivered, " + bulk.failed + " failed, " + bulk.skipped + " skipped" +
      (bulk.cancelled_by ? " (cancelled by " + bulk.cancelled_by + ")" : ""), bulk.state);
    if (bulk.state !== "running") break;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  following = null;
  document.getElementById("bulk-cancel").hidden = true;
  loadEvents();
  loadRoutes();
}

function showProgress(done, of, text, state) {
  const meter = document.getElementById("bulk-meter");
  meter.max = Math.max(1, of);
  meter.value = done;
  const line = document.getElementById("bulk-text");
  line.textContent = text;
  line.dataset.state = state;
}

// A selection: one call a key, in turn, with the same progress.
async function bulkSelection(action) {
  const events = [...selected.values()];
  if (!confirm(VERBS[action] + " the " + events.length + " selected event" + (events.length === 1 ? "" : "s") + "?")) return;
  following = "selection";
  document.getElementById("bulk-progress").hidden = false;
  document.getElementById("bulk-cancel").hidden = true;
  let done = 0, failed = 0;
  for (const [route, key] of events) {
    try {
      if (action === "forget") await api("DELETE", keyPath(route, key));
      else {
        const sent = await api("POST", keyPath(route, key, "/" + action));
        if (sent.state !== "completed" && sent.state !== "queued") failed++;
      }
    } catch (error) {
      failed++;
    }
    done++;
    showProgress(done, events.length, VERBS[action] + ": " + done + " of " + events.length + ", " + failed + " not completed", "running");
  }
  showProgress(done, events.length, VERBS[action] + " finished: " + done + " of " + events.length + ", " + failed + " not completed", "finished");
  following = null;
  loadEvents();
  loadRoutes();
}

async function cancelBulk() {
  if (!following || following === "selection") return;
  try {
    await api("DELETE", "/admin/bulk/" + enc(following));
  } catch (error) {
    say("cancel: " + error.message, true);
  }
}

// --- the audit: operator actions, on a page of their own ---------------------------

async function loadAudit() {
  let audit;
  try {
    audit = await api("GET", "/admin/audit");
  } catch (error) {
    say("audit: " + error.message, true);
    return;
  }
  const body = document.getElementById("audit-body");
  body.replaceChildren(...audit.actions.map((action) => el("tr", { "data-audit": action.method + " " + action.path },
    el("td", { class: "when" }, when(action.at)),
    el("td", { class: "mono" }, action.peer),
    el("td", {}, action.via),
    el("td", {}, action.role),
    el("td", { class: "mono" }, action.method + " " + action.path),
    el("td", {}, action.status ? String(action.status) : "caller left"))));
  if (!audit.actions.length) body.append(el("tr", {}, el("td", { colspan: "6", class: "empty" }, "No action yet.")));
}

function showPage() {
  const audit = location.hash === "#audit";
  document.getElementById("overview").hidden = audit;
  document.getElementById("audit-section").hidden = !audit;
  document.getElementById("nav-audit").classList.toggle("current", audit);
  document.getElementById("nav-overview").classList.toggle("current", !audit);
  if (audit) loadAudit();
}

// --- start ------------------------------------------------------------------

document.getElementById("filters").addEventListener("submit", searchKey);
document.getElementById("filter-route").addEventListener("change", () => loadEvents());
document.getElementById("filter-state").addEventListener("change", () => loadEvents());
document.getElementById("filter-error").addEventListener("change", () => loadEvents());
document.getElementById("more").addEventListener("click", () => loadEvents(true));
document.getElementById("refresh").addEventListener("click", () => loadEvents());
for (const state of STATES) {
  document.getElementById("filter-state").append(el("option", { value: state }, state || "any state"));
}
document.getElementById("select-all").addEventListener("click", selectAll);
document.getElementById("bulk-cancel").addEventListener("click", cancelBulk);
for (const button of document.querySelectorAll("button[data-bulk]")) {
  button.addEventListener("click", () => bulk(button.dataset.bulk));
}
if (READ_ONLY) document.getElementById("bulk-bar").hidden = true;
// A notification's link, #event/ROUTE/KEY (each percent-encoded; ROUTE is
// route/destination for a destination's event), opens that event.
function openLinked() {
  const match = /^#event\/([^/]+)\/([^/]+)$/.exec(location.hash);
  if (match) showEvent(decodeURIComponent(match[1]), decodeURIComponent(match[2]));
}

window.addEventListener("hashchange", () => { showPage(); openLinked(); });
showPage();
loadRoutes().then(() => { loadEvents(); openLinked(); });
setInterval(loadRoutes, ROUTES_EVERY_MS);
