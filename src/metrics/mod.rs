//! Prometheus metrics (README, "Observability"), on an explicit [`Registry`] created at
//! start-up and passed in — never the global default — so every test and
//! every gateway in a process has its own.
//!
//! Label values are bounded by construction: route names from the config,
//! fixed outcome and operation strings, status classes. No request path, key
//! or other sender-controlled value ever becomes a label.

use std::time::Duration;

use prometheus::{
    exponential_buckets, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

mod reconcile;
mod store;

pub use self::reconcile::ReconcileMetrics;
pub use self::store::StoreMetrics;

/// The `route` label of requests that matched no route.
pub const UNMATCHED: &str = "_unmatched";

/// Every `outcome` a matched route's request can end with: each route's
/// series start at 0 at start-up and at every reload, so a rate or a ratio
/// over them is defined before the first such request (and after a
/// restart).
pub const OUTCOMES: [&str; 30] = [
    "forwarded",
    "filtered",
    "forwarded_unkeyed",
    "handshake",
    "replayed",
    "dead_letter",
    "accepted",
    "upstream_error",
    "upstream_timeout",
    "upstream_body_incomplete",
    "in_flight",
    "payload_mismatch",
    "signature_invalid",
    "timestamp_out_of_tolerance",
    "sender_unreachable",
    "key_missing",
    "key_invalid",
    "body_too_large",
    "body_unreadable",
    "body_timeout",
    "method_not_allowed",
    "source_not_allowed",
    "store_unavailable",
    "record_unreadable",
    "route_paused",
    "queue_full",
    "upstream_circuit_open",
    "rate_limited",
    "internal_error",
    "route_not_found",
];

/// Every `class` of `hookgate_upstream_responses_total`: the answer's
/// status class, or how an attempt without an answer ended.
pub const UPSTREAM_CLASSES: [&str; 7] = [
    "2xx",
    "3xx",
    "4xx",
    "5xx",
    "timeout",
    "unreachable",
    "broken",
];

/// A counter per route and destination.
fn per_delivery_counter(name: &str, help: &str) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), &["route", "destination"]).expect("valid metric")
}

/// A gauge per route and destination.
fn per_delivery_gauge(name: &str, help: &str) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), &["route", "destination"]).expect("valid metric")
}

/// The `route` and `destination` labels of a delivery's name: a
/// destination's delivery is named `route/destination`; a route with one
/// upstream has the destination `""`.
pub fn delivery_labels(name: &str) -> (&str, &str) {
    name.split_once('/').unwrap_or((name, ""))
}

/// Every collector hookgate exports.
#[derive(Clone)]
pub struct Metrics {
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub upstream_duration: HistogramVec,
    pub upstream_responses: IntCounterVec,
    pub store: StoreMetrics,
    pub reconcile: ReconcileMetrics,
    pub in_flight: IntGaugeVec,
    pub leases_lost: IntCounterVec,
    pub config_reloads: IntCounterVec,
    /// 1 when the last reload attempt succeeded (or none was made).
    pub config_last_reload_ok: prometheus::IntGauge,
    /// 1 while the store answers its readiness probe (set at each scrape).
    pub store_up: prometheus::IntGauge,
    /// Store settings that would silently lose claims, as `/readyz` lists
    /// them (Redis eviction, no persistence).
    pub store_warnings: prometheus::IntGauge,
    /// The embedded file and its write-ahead log, in bytes.
    pub store_bytes: prometheus::IntGauge,
    /// `[store.backup]`: when the last verified backup was written (Unix
    /// seconds), the schedule, and each backup's result.
    pub backup_last_success: prometheus::Gauge,
    pub backup_every: prometheus::Gauge,
    pub backups: IntCounterVec,
    /// `store.timeout`, for alerts on latency near it.
    pub store_timeout: prometheus::Gauge,
    /// When the served TLS certificate expires (0 without TLS).
    pub tls_cert_expiry: prometheus::Gauge,
    /// When the running config was last loaded (start-up or a reload).
    pub config_reloaded_at: prometheus::Gauge,
    /// Events parked as dead letters (README, "Failed events and dead letters" and "Asynchronous delivery").
    pub dead_letters_total: IntCounterVec,
    /// Ordered events found older than their entity's newest delivered one
    /// (README, "Ordered delivery").
    pub stale_events_total: IntCounterVec,
    /// Entities of ordered routes held by a dead event (`on_blocked =
    /// "wait"`), counted in the store when scraped.
    pub blocked_entities: IntGaugeVec,
    /// hookgate extension: dead letters held now, per route (counted in the
    /// store every few seconds).
    pub dead_letters: IntGaugeVec,
    /// hookgate extension: operator redeliveries and replays by result.
    pub redeliveries: IntCounterVec,
    /// Async delivery (README, "Asynchronous delivery"): the attempts of
    /// accepted events, by workers and the hybrid.
    pub delivery_attempts: IntCounterVec,
    /// Every attempt of a claimed event, by its entrance.
    pub attempts: IntCounterVec,
    pub queue_depth: IntGaugeVec,
    pub oldest_queued: prometheus::GaugeVec,
    /// The queue bounds: each async route's queued bytes and its bounds,
    /// and the store's (README, "Asynchronous delivery").
    pub queued_bytes: IntGaugeVec,
    pub queue_bound_bytes: IntGaugeVec,
    pub queue_bound_events: IntGaugeVec,
    pub store_queued_bytes: prometheus::IntGauge,
    pub store_queue_bound_bytes: prometheus::IntGauge,
    /// A sync route's failed event with no later delivery, by age.
    pub oldest_failed: prometheus::GaugeVec,
    /// Each route's `page_after`, for the paging alerts to compare.
    pub page_after: prometheus::GaugeVec,
    /// Traffic control (README, "Traffic control"): paused routes (1), breakers holding
    /// calls (1), breaker trips, and every pause or resume (the audit).
    pub route_paused: IntGaugeVec,
    pub breaker_open: IntGaugeVec,
    pub breaker_opened: IntCounterVec,
    pub route_control_changes: IntCounterVec,
    /// hookgate extension: failed or timed-out TLS handshakes.
    pub tls_handshake_failures: prometheus::IntCounter,
    registry: Registry,
    /// Every metric name registered, series or not yet.
    names: Vec<String>,
}

impl Metrics {
    /// Create every collector and register it in `registry`.
    pub fn new(registry: &Registry) -> Self {
        let requests = IntCounterVec::new(
            Opts::new("hookgate_requests_total", "Requests by route and outcome."),
            &["route", "outcome"],
        )
        .expect("valid metric");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "hookgate_request_duration_seconds",
                "Time from request head to response, by route and outcome.",
            )
            // 250 µs .. ~65 s: replays answer in well under a millisecond,
            // forwards take as long as the upstream.
            .buckets(exponential_buckets(0.000_25, 2.0, 19).expect("valid buckets")),
            &["route", "outcome"],
        )
        .expect("valid metric");
        let upstream_duration = HistogramVec::new(
            HistogramOpts::new(
                "hookgate_upstream_duration_seconds",
                "Time of the upstream call, body included, by route.",
            )
            .buckets(exponential_buckets(0.001, 2.0, 17).expect("valid buckets")),
            &["route", "destination"],
        )
        .expect("valid metric");
        let upstream_responses = IntCounterVec::new(
            Opts::new(
                "hookgate_upstream_responses_total",
                "Upstream answers by status class.",
            ),
            &["route", "destination", "class"],
        )
        .expect("valid metric");
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "hookgate_in_flight_requests",
                "Requests being processed now.",
            ),
            &["route"],
        )
        .expect("valid metric");
        let leases_lost = per_delivery_counter(
            "hookgate_leases_lost_total",
            "Claims taken over by another delivery while their upstream call ran.",
        );
        let config_reloads = IntCounterVec::new(
            Opts::new(
                "hookgate_config_reloads_total",
                "Config reloads (SIGHUP) by result.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let build_info = IntGaugeVec::new(
            Opts::new(
                "hookgate_build_info",
                "Always 1; the version is in the label.",
            ),
            &["version"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for result in ["success", "failure"] {
            config_reloads.with_label_values(&[result]);
        }
        let config_reloaded_at = prometheus::Gauge::new(
            "hookgate_config_last_reload_success_timestamp_seconds",
            "When the running config was loaded: at start-up, then at each successful reload.",
        )
        .expect("valid metric");
        let tls_handshake_failures = prometheus::IntCounter::new(
            "hookgate_tls_handshake_failures_total",
            "TLS handshakes on the public listener that failed or timed out.",
        )
        .expect("valid metric");
        let dead_letters_total = per_delivery_counter(
            "hookgate_dead_letters_total",
            "Events parked as dead letters after max_attempts.",
        );
        let stale_events_total = per_delivery_counter(
            "hookgate_stale_events_total",
            "Ordered events not delivered: older (stale_by) than the newest one delivered for their entity.",
        );
        let blocked_entities = per_delivery_gauge(
            "hookgate_blocked_entities",
            "Entities of ordered routes whose later events wait behind a dead event (on_blocked = \"wait\").",
        );
        let dead_letters = per_delivery_gauge(
            "hookgate_dead_letters",
            "Dead letters held in the store now.",
        );
        let redeliveries = IntCounterVec::new(
            Opts::new(
                "hookgate_redeliveries_total",
                "Operator redeliveries (same key) and replays (new key), by how the attempt ended.",
            ),
            &["route", "destination", "kind", "result"],
        )
        .expect("valid metric");
        let delivery_attempts = IntCounterVec::new(
            Opts::new(
                "hookgate_delivery_attempts_total",
                "Async delivery attempts by how they ended: completed, retrying, dead.",
            ),
            &["route", "destination", "result"],
        )
        .expect("valid metric");
        let attempts = IntCounterVec::new(
            Opts::new(
                "hookgate_attempts_total",
                "Upstream attempts of claimed events, by entrance (sync, hybrid, worker, redeliver, replay) and how each ended.",
            ),
            &["route", "destination", "entrance", "result"],
        )
        .expect("valid metric");
        let queue_depth = IntGaugeVec::new(
            Opts::new(
                "hookgate_queue_depth",
                "Async events waiting in the store (queued, fleet-wide) or being delivered by this instance (delivering).",
            ),
            &["route", "destination", "state"],
        )
        .expect("valid metric");
        let oldest_queued = prometheus::GaugeVec::new(
            Opts::new(
                "hookgate_oldest_queued_seconds",
                "Age of the oldest queued async event of the route (0 when none).",
            ),
            &["route", "destination"],
        )
        .expect("valid metric");
        let oldest_failed = prometheus::GaugeVec::new(
            Opts::new(
                "hookgate_oldest_failed_seconds",
                "A sync route with page_after: how long its oldest failed event has had no delivery (0 when none).",
            ),
            &["route", "destination"],
        )
        .expect("valid metric");
        let page_after = prometheus::GaugeVec::new(
            Opts::new(
                "hookgate_route_page_after_seconds",
                "Each route's page_after: an async route's oldest undelivered accepted event (HookgateAsyncEventOverdue), or a sync route's oldest failed event (HookgateFailedEventStuck), older than this pages.",
            ),
            &["route", "destination"],
        )
        .expect("valid metric");
        let queued_bytes = per_delivery_gauge(
            "hookgate_queued_bytes",
            "Bytes the store keeps for the async route's queued events (fleet-wide, measured every 2 s; routes sharing a scope show the same).",
        );
        let queue_bound_bytes = per_delivery_gauge(
            "hookgate_queue_bound_bytes",
            "The async route's max_queued_bytes (0: none): a new event past it is answered 503 queue_full.",
        );
        let queue_bound_events = per_delivery_gauge(
            "hookgate_queue_bound_events",
            "The async route's max_queued (0: none): a new event past it is answered 503 queue_full.",
        );
        let store_queued_bytes = prometheus::IntGauge::new(
            "hookgate_store_queued_bytes",
            "Bytes the store keeps for every async route's queued events together (measured every 2 s).",
        )
        .expect("valid metric");
        let store_queue_bound_bytes = prometheus::IntGauge::new(
            "hookgate_store_queue_bound_bytes",
            "store.max_queued_bytes (0: none): past it every async route answers a new event 503 queue_full.",
        )
        .expect("valid metric");
        let route_paused = per_delivery_gauge(
            "hookgate_route_paused",
            "1 while an operator has paused the route (fleet-wide, kept in the store).",
        );
        let breaker_open = per_delivery_gauge(
            "hookgate_circuit_breaker_open",
            "1 while this instance's circuit breaker holds the route's upstream calls (open or probing).",
        );
        let breaker_opened = per_delivery_counter(
            "hookgate_circuit_breaker_opened_total",
            "Times the route's circuit breaker opened (a failed probe opens it again).",
        );
        let route_control_changes = IntCounterVec::new(
            Opts::new(
                "hookgate_route_control_changes_total",
                "Operator pauses and resumes through this instance's admin API.",
            ),
            &["route", "destination", "action"],
        )
        .expect("valid metric");
        let config_last_reload_ok = prometheus::IntGauge::new(
            "hookgate_config_last_reload_successful",
            "1 when the last config reload succeeded (or none was tried), 0 when it was rejected.",
        )
        .expect("valid metric");
        config_last_reload_ok.set(1);
        let store_up = prometheus::IntGauge::new(
            "hookgate_store_up",
            "1 when the store answered its readiness probe at the last scrape, else 0.",
        )
        .expect("valid metric");
        let store_warnings = prometheus::IntGauge::new(
            "hookgate_store_warnings",
            "Store settings that would silently lose claims (Redis maxmemory-policy other than noeviction, no persistence), as /readyz lists them; 0 when none.",
        )
        .expect("valid metric");
        let store_bytes = prometheus::IntGauge::new(
            "hookgate_store_bytes",
            "The embedded store's file plus its write-ahead log, in bytes, at the last scrape (0 for other stores).",
        )
        .expect("valid metric");
        let backup_last_success = prometheus::Gauge::new(
            "hookgate_backup_last_success_timestamp_seconds",
            "[store.backup]: when the newest verified backup of the embedded store was written (Unix seconds; 0 before the first).",
        )
        .expect("valid metric");
        let backup_every = prometheus::Gauge::new(
            "hookgate_backup_every_seconds",
            "[store.backup]: how often a backup is taken (0 without [store.backup]), for HookgateBackupOverdue.",
        )
        .expect("valid metric");
        let backups = IntCounterVec::new(
            Opts::new(
                "hookgate_backups_total",
                "[store.backup]: scheduled backups of the embedded store, by result (ok, failed).",
            ),
            &["result"],
        )
        .expect("valid metric");
        let store_timeout = prometheus::Gauge::new(
            "hookgate_store_timeout_seconds",
            "The configured store.timeout: a store operation slower than this fails.",
        )
        .expect("valid metric");
        let tls_cert_expiry = prometheus::Gauge::new(
            "hookgate_tls_cert_expiry_timestamp_seconds",
            "When the certificate the public listener serves expires (Unix seconds; 0 without TLS).",
        )
        .expect("valid metric");
        let (store, store_collectors) = StoreMetrics::build();
        let (reconcile, reconcile_collectors) = ReconcileMetrics::build();

        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(requests.clone()),
            Box::new(request_duration.clone()),
            Box::new(upstream_duration.clone()),
            Box::new(upstream_responses.clone()),
            Box::new(in_flight.clone()),
            Box::new(leases_lost.clone()),
            Box::new(config_reloads.clone()),
            Box::new(config_reloaded_at.clone()),
            Box::new(config_last_reload_ok.clone()),
            Box::new(store_up.clone()),
            Box::new(store_warnings.clone()),
            Box::new(backup_last_success.clone()),
            Box::new(backup_every.clone()),
            Box::new(backups.clone()),
            Box::new(store_bytes.clone()),
            Box::new(store_timeout.clone()),
            Box::new(tls_cert_expiry.clone()),
            Box::new(dead_letters_total.clone()),
            Box::new(dead_letters.clone()),
            Box::new(stale_events_total.clone()),
            Box::new(blocked_entities.clone()),
            Box::new(redeliveries.clone()),
            Box::new(delivery_attempts.clone()),
            Box::new(attempts.clone()),
            Box::new(queue_depth.clone()),
            Box::new(oldest_queued.clone()),
            Box::new(oldest_failed.clone()),
            Box::new(queued_bytes.clone()),
            Box::new(queue_bound_bytes.clone()),
            Box::new(queue_bound_events.clone()),
            Box::new(store_queued_bytes.clone()),
            Box::new(store_queue_bound_bytes.clone()),
            Box::new(page_after.clone()),
            Box::new(route_paused.clone()),
            Box::new(breaker_open.clone()),
            Box::new(breaker_opened.clone()),
            Box::new(route_control_changes.clone()),
            Box::new(build_info),
            Box::new(tls_handshake_failures.clone()),
        ];
        let mut collectors: Vec<Box<dyn prometheus::core::Collector>> = (collectors.into_iter())
            .chain(store_collectors)
            .chain(reconcile_collectors)
            .collect();
        // process_cpu_seconds_total, process_resident_memory_bytes,
        // process_open_fds, process_start_time_seconds, …
        #[cfg(target_os = "linux")]
        collectors.push(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ));
        let names = (collectors.iter())
            .flat_map(|collector| collector.desc())
            .map(|desc| desc.fq_name.clone())
            .collect();
        for collector in collectors {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Self {
            requests,
            request_duration,
            upstream_duration,
            upstream_responses,
            store,
            reconcile,
            in_flight,
            leases_lost,
            config_reloads,
            config_reloaded_at,
            config_last_reload_ok,
            store_up,
            store_warnings,
            backup_last_success,
            backup_every,
            backups,
            store_bytes,
            store_timeout,
            tls_cert_expiry,
            dead_letters_total,
            stale_events_total,
            blocked_entities,
            dead_letters,
            redeliveries,
            delivery_attempts,
            attempts,
            queue_depth,
            oldest_queued,
            oldest_failed,
            queued_bytes,
            queue_bound_bytes,
            queue_bound_events,
            store_queued_bytes,
            store_queue_bound_bytes,
            page_after,
            route_paused,
            breaker_open,
            breaker_opened,
            route_control_changes,
            tls_handshake_failures,
            registry: registry.clone(),
            names,
        }
    }

    /// Every metric name this gateway exports.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Everything registered, in the Prometheus text format.
    pub fn render(&self) -> String {
        prometheus::TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_default()
    }

    /// The running config was loaded at `ms` (Unix milliseconds).
    pub fn reloaded_at(&self, ms: u64) {
        self.config_reloaded_at.set(ms as f64 / 1000.0);
    }

    /// Count one finished request.
    pub fn request_done(&self, route: &str, outcome: &str, elapsed: Duration) {
        self.requests.with_label_values(&[route, outcome]).inc();
        self.request_duration
            .with_label_values(&[route, outcome])
            .observe(elapsed.as_secs_f64());
    }

    /// One upstream attempt of `route` that took `elapsed` and ended in
    /// `class` (see [`UPSTREAM_CLASSES`]): every attempt is timed, those
    /// that timed out or never reached the upstream included.
    pub fn upstream_attempt(&self, route: &str, class: &str, elapsed: Duration) {
        let (route, destination) = delivery_labels(route);
        self.upstream_responses
            .with_label_values(&[route, destination, class])
            .inc();
        self.upstream_duration
            .with_label_values(&[route, destination])
            .observe(elapsed.as_secs_f64());
    }

    /// `route`'s request counts by outcome, as `/metrics` has them (the
    /// console turns them into rates).
    pub fn outcomes(&self, route: &str) -> serde_json::Map<String, serde_json::Value> {
        OUTCOMES
            .iter()
            .map(|outcome| {
                let count = self.requests.with_label_values(&[route, outcome]).get();
                ((*outcome).to_owned(), count.into())
            })
            .collect()
    }

    /// Create `route`'s series at 0 (start-up, reload): see [`OUTCOMES`].
    pub fn init_route(&self, route: &str) {
        let (route, destination) = delivery_labels(route);
        if destination.is_empty() {
            for outcome in OUTCOMES {
                self.requests.with_label_values(&[route, outcome]);
            }
            self.in_flight.with_label_values(&[route]);
        }
        for class in UPSTREAM_CLASSES {
            self.upstream_responses
                .with_label_values(&[route, destination, class]);
        }
        self.upstream_duration
            .with_label_values(&[route, destination]);
        self.leases_lost.with_label_values(&[route, destination]);
        self.dead_letters_total
            .with_label_values(&[route, destination]);
        self.stale_events_total
            .with_label_values(&[route, destination]);
    }

    /// The served certificate expires at `not_after` (Unix seconds).
    pub fn tls_cert_expires(&self, not_after: Option<i64>) {
        self.tls_cert_expiry
            .set(not_after.map_or(0.0, |not_after| not_after as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator finds every metric in the README's table and on the
    /// shipped Grafana dashboard.
    #[test]
    fn every_metric_is_documented_and_on_the_dashboard() {
        let metrics = Metrics::new(&Registry::new());
        let read = |path: &str| {
            std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
        };
        let (readme, dashboard) = (read("README.md"), read("deploy/grafana/hookgate.json"));
        assert!(metrics.names().len() > 30, "{:?}", metrics.names());
        for name in metrics.names() {
            let documented = readme.contains(&format!("`{name}`"))
                || (name.starts_with("process_") && readme.contains("`process_*`"));
            assert!(
                documented,
                "{name} is missing from the README's metric table"
            );
            assert!(
                dashboard.contains(name.as_str()),
                "{name} is on no dashboard panel"
            );
        }
    }
}
