//! What each of the gateway's own metrics is — its name, its labels and
//! its help — in one table: `Metrics::new` builds every collector from its
//! line here, and a line no collector is built from fails a test.

/// One metric: name, labels, help.
pub(super) type Described = (&'static str, &'static [&'static str], &'static str);

/// The labels of a delivery's series: a route, and its destination (`""`
/// for a route with one upstream).
const DELIVERY: &[&str] = &["route", "destination"];

pub(super) const DESCRIBED: &[Described] = &[
    ("hookgate_requests_total", &["route", "outcome"], "Requests by route and outcome."),
    ("hookgate_request_duration_seconds", &["route", "outcome"], "Time from request head to response, by route and outcome."),
    ("hookgate_upstream_duration_seconds", DELIVERY, "Time of the upstream call, body included, by route."),
    ("hookgate_upstream_responses_total", &["route", "destination", "class"], "Upstream answers by status class."),
    ("hookgate_in_flight_requests", &["route"], "Requests being processed now."),
    ("hookgate_leases_lost_total", DELIVERY, "Claims taken over by another delivery while their upstream call ran."),
    ("hookgate_config_reloads_total", &["result"], "Config reloads (SIGHUP) by result."),
    ("hookgate_build_info", &["version"], "Always 1; the version is in the label."),
    ("hookgate_config_last_reload_success_timestamp_seconds", &[], "When the running config was loaded: at start-up, then at each successful reload."),
    ("hookgate_tls_handshake_failures_total", &[], "TLS handshakes on the public listener that failed or timed out."),
    ("hookgate_open_connections", &[], "Connections open on the public listener now (at most server.max_connections)."),
    ("hookgate_parked_connections", &[], "Of the open connections, the plain HTTP/1 keep-alive ones parked between requests, each holding only its socket."),
    ("hookgate_worker_passes_total", &[], "Passes the async workers made over every scope's queue: flat while async routes hold events means the workers are stuck."),
    ("hookgate_dead_letters_total", DELIVERY, "Events parked as dead letters after max_attempts."),
    ("hookgate_stale_events_total", DELIVERY, "Ordered events not delivered: older (stale_by) than the newest one delivered for their entity."),
    ("hookgate_blocked_entities", DELIVERY, "Entities of ordered routes whose later events wait behind a dead event (on_blocked = \"wait\")."),
    ("hookgate_dead_letters", DELIVERY, "Dead letters held in the store now."),
    ("hookgate_redeliveries_total", &["route", "destination", "kind", "result"], "Operator redeliveries (same key) and replays (new key), by how the attempt ended."),
    ("hookgate_delivery_attempts_total", &["route", "destination", "result"], "Async delivery attempts by how they ended: completed, retrying, dead."),
    ("hookgate_attempts_total", &["route", "destination", "entrance", "result"], "Upstream attempts of claimed events, by entrance (sync, hybrid, worker, redeliver, replay) and how each ended."),
    ("hookgate_queue_depth", &["route", "destination", "state"], "Async events waiting in the store (queued, fleet-wide) or being delivered by this instance (delivering)."),
    ("hookgate_oldest_queued_seconds", DELIVERY, "Age of the oldest queued async event of the route (0 when none)."),
    ("hookgate_oldest_failed_seconds", DELIVERY, "A sync route with page_after: how long its oldest failed event has had no delivery (0 when none)."),
    ("hookgate_route_page_after_seconds", DELIVERY, "Each route's page_after: an async route's oldest undelivered accepted event (HookgateAsyncEventOverdue), or a sync route's oldest failed event (HookgateFailedEventStuck), older than this pages."),
    ("hookgate_queued_bytes", DELIVERY, "Bytes the store keeps for the async route's queued events (fleet-wide, measured every 2 s; routes sharing a scope show the same)."),
    ("hookgate_queue_bound_bytes", DELIVERY, "The async route's max_queued_bytes (0: none): a new event past it is answered 503 queue_full."),
    ("hookgate_queue_bound_events", DELIVERY, "The async route's max_queued (0: none): a new event past it is answered 503 queue_full."),
    ("hookgate_store_queued_bytes", &[], "Bytes the store keeps for every async route's queued events together (measured every 2 s)."),
    ("hookgate_store_queue_bound_bytes", &[], "store.max_queued_bytes (0: none): past it every async route answers a new event 503 queue_full."),
    ("hookgate_route_paused", DELIVERY, "1 while an operator has paused the route (fleet-wide, kept in the store)."),
    ("hookgate_circuit_breaker_open", DELIVERY, "1 while this instance's circuit breaker holds the route's upstream calls (open or probing)."),
    ("hookgate_circuit_breaker_opened_total", DELIVERY, "Times the route's circuit breaker opened (a failed probe opens it again)."),
    ("hookgate_route_control_changes_total", &["route", "destination", "action"], "Operator pauses and resumes through this instance's admin API."),
    ("hookgate_config_last_reload_successful", &[], "1 when the last config reload succeeded (or none was tried), 0 when it was rejected."),
    ("hookgate_store_up", &[], "1 when the store answered its readiness probe at the last scrape, else 0."),
    ("hookgate_store_warnings", &[], "Store settings that would silently lose claims (Redis maxmemory-policy other than noeviction, no persistence), as /readyz lists them; 0 when none."),
    ("hookgate_store_bytes", &[], "The embedded store's file plus its write-ahead log, in bytes, at the last scrape (0 for other stores)."),
    ("hookgate_backup_last_success_timestamp_seconds", &[], "[store.backup]: when the newest verified backup of the embedded store was written (Unix seconds; 0 before the first)."),
    ("hookgate_backup_every_seconds", &[], "[store.backup]: how often a backup is taken (0 without [store.backup]), for HookgateBackupOverdue."),
    ("hookgate_backups_total", &["result"], "[store.backup]: scheduled backups of the embedded store, by result (ok, failed)."),
    ("hookgate_store_timeout_seconds", &[], "The configured store.timeout: a store operation slower than this fails."),
    ("hookgate_tls_cert_expiry_timestamp_seconds", &[], "When the certificate the public listener serves expires (Unix seconds; 0 without TLS)."),
];
