//! Prometheus metrics (docs/guide/observability.md, "Observability"), on an explicit [`Registry`] created at
//! start-up and passed in — never the global default — so every test and
//! every gateway in a process has its own.
//!
//! Label values are bounded by construction: route names from the config,
//! fixed outcome and operation strings, status classes. No request path, key
//! or other sender-controlled value ever becomes a label.

use std::time::Duration;

use prometheus::{exponential_buckets, HistogramVec, IntCounterVec, IntGaugeVec, Registry};

use self::builder::Builder;

mod builder;
mod reconcile;
mod route;
mod store;
mod table;

pub use self::reconcile::ReconcileMetrics;
pub use self::route::RouteSeries;
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

/// Every `kind` of `hookgate_attempts_total`: the attempt's entrance.
pub const ATTEMPT_KINDS: [&str; 6] = [
    "sync",
    "hybrid",
    "worker",
    "redeliver",
    "replay",
    "reconcile",
];

/// Every `settled` of `hookgate_attempts_total`: how the attempt settled.
pub const SETTLEMENTS: [&str; 7] = [
    "completed",
    "failed",
    "dead",
    "retrying",
    "queued",
    "recording",
    "unrecorded",
];

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
    /// Events parked as dead letters (docs/guide/dead-letters.md, "Failed events and dead letters" and "Asynchronous delivery").
    pub dead_letters_total: IntCounterVec,
    /// Ordered events found older than their entity's newest delivered one
    /// (docs/guide/ordering.md, "Ordered delivery").
    pub stale_events_total: IntCounterVec,
    /// Entities of ordered routes held by a dead event (`on_blocked =
    /// "wait"`), counted in the store when scraped.
    pub blocked_entities: IntGaugeVec,
    /// hookgate extension: dead letters held now, per route (counted in the
    /// store every few seconds).
    pub dead_letters: IntGaugeVec,
    /// hookgate extension: operator redeliveries and replays by result.
    pub redeliveries: IntCounterVec,
    /// Async delivery (docs/guide/async-delivery.md, "Asynchronous delivery"): the attempts of
    /// accepted events, by workers and the hybrid.
    pub delivery_attempts: IntCounterVec,
    /// Every attempt of a claimed event, by its entrance.
    pub attempts: IntCounterVec,
    pub queue_depth: IntGaugeVec,
    pub oldest_queued: prometheus::GaugeVec,
    /// The queue bounds: each async route's queued bytes and its bounds,
    /// and the store's (docs/guide/async-delivery.md, "Asynchronous delivery").
    pub queued_bytes: IntGaugeVec,
    pub queue_bound_bytes: IntGaugeVec,
    pub queue_bound_events: IntGaugeVec,
    pub store_queued_bytes: prometheus::IntGauge,
    pub store_queue_bound_bytes: prometheus::IntGauge,
    /// A sync route's failed event with no later delivery, by age.
    pub oldest_failed: prometheus::GaugeVec,
    /// Each route's `page_after`, for the paging alerts to compare.
    pub page_after: prometheus::GaugeVec,
    /// Traffic control (docs/guide/traffic-control.md, "Traffic control"): paused routes (1), breakers holding
    /// calls (1), breaker trips, and every pause or resume (the audit).
    pub route_paused: IntGaugeVec,
    pub breaker_open: IntGaugeVec,
    pub breaker_opened: IntCounterVec,
    pub route_control_changes: IntCounterVec,
    /// hookgate extension: failed or timed-out TLS handshakes.
    pub tls_handshake_failures: prometheus::IntCounter,
    /// The public listener's connections: open, and parked of those.
    pub open_connections: prometheus::IntGauge,
    pub parked_connections: prometheus::IntGauge,
    /// The workers' passes over every queue (`worker.rs`).
    pub worker_passes: prometheus::IntCounter,
    registry: Registry,
    /// Every metric name registered, series or not yet.
    names: Vec<String>,
}

impl Metrics {
    /// Create every collector, each from its line in [`table::DESCRIBED`],
    /// and register it in `registry`.
    pub fn new(registry: &Registry) -> Self {
        let mut b = Builder {
            registry,
            names: Vec::new(),
        };
        b.int_gauges("hookgate_build_info")
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let (store, store_collectors) = StoreMetrics::build();
        let (reconcile, reconcile_collectors) = ReconcileMetrics::build();
        for collector in store_collectors.into_iter().chain(reconcile_collectors) {
            b.register(collector);
        }
        // process_cpu_seconds_total, process_resident_memory_bytes,
        // process_open_fds, process_start_time_seconds, …
        #[cfg(target_os = "linux")]
        b.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ));
        let metrics = Self {
            store,
            reconcile,
            requests: b.counters("hookgate_requests_total"),
            // 250 µs .. ~65 s: replays answer in well under a millisecond,
            // forwards take as long as the upstream.
            request_duration: b.histograms(
                "hookgate_request_duration_seconds",
                exponential_buckets(0.000_25, 2.0, 19),
            ),
            upstream_duration: b.histograms(
                "hookgate_upstream_duration_seconds",
                exponential_buckets(0.001, 2.0, 17),
            ),
            upstream_responses: b.counters("hookgate_upstream_responses_total"),
            in_flight: b.int_gauges("hookgate_in_flight_requests"),
            leases_lost: b.counters("hookgate_leases_lost_total"),
            config_reloads: b.counters("hookgate_config_reloads_total"),
            config_reloaded_at: b.gauge("hookgate_config_last_reload_success_timestamp_seconds"),
            tls_handshake_failures: b.int_counter("hookgate_tls_handshake_failures_total"),
            open_connections: b.int_gauge("hookgate_open_connections"),
            parked_connections: b.int_gauge("hookgate_parked_connections"),
            worker_passes: b.int_counter("hookgate_worker_passes_total"),
            dead_letters_total: b.counters("hookgate_dead_letters_total"),
            stale_events_total: b.counters("hookgate_stale_events_total"),
            blocked_entities: b.int_gauges("hookgate_blocked_entities"),
            dead_letters: b.int_gauges("hookgate_dead_letters"),
            redeliveries: b.counters("hookgate_redeliveries_total"),
            delivery_attempts: b.counters("hookgate_delivery_attempts_total"),
            attempts: b.counters("hookgate_attempts_total"),
            queue_depth: b.int_gauges("hookgate_queue_depth"),
            oldest_queued: b.gauges("hookgate_oldest_queued_seconds"),
            oldest_failed: b.gauges("hookgate_oldest_failed_seconds"),
            page_after: b.gauges("hookgate_route_page_after_seconds"),
            queued_bytes: b.int_gauges("hookgate_queued_bytes"),
            queue_bound_bytes: b.int_gauges("hookgate_queue_bound_bytes"),
            queue_bound_events: b.int_gauges("hookgate_queue_bound_events"),
            store_queued_bytes: b.int_gauge("hookgate_store_queued_bytes"),
            store_queue_bound_bytes: b.int_gauge("hookgate_store_queue_bound_bytes"),
            route_paused: b.int_gauges("hookgate_route_paused"),
            breaker_open: b.int_gauges("hookgate_circuit_breaker_open"),
            breaker_opened: b.counters("hookgate_circuit_breaker_opened_total"),
            route_control_changes: b.counters("hookgate_route_control_changes_total"),
            config_last_reload_ok: b.int_gauge("hookgate_config_last_reload_successful"),
            store_up: b.int_gauge("hookgate_store_up"),
            store_warnings: b.int_gauge("hookgate_store_warnings"),
            store_bytes: b.int_gauge("hookgate_store_bytes"),
            backup_last_success: b.gauge("hookgate_backup_last_success_timestamp_seconds"),
            backup_every: b.gauge("hookgate_backup_every_seconds"),
            backups: b.counters("hookgate_backups_total"),
            store_timeout: b.gauge("hookgate_store_timeout_seconds"),
            tls_cert_expiry: b.gauge("hookgate_tls_cert_expiry_timestamp_seconds"),
            registry: registry.clone(),
            names: Vec::new(),
        };
        for result in ["success", "failure"] {
            metrics.config_reloads.with_label_values(&[result]);
        }
        metrics.config_last_reload_ok.set(1);
        Self {
            names: b.names,
            ..metrics
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

    /// The served certificate expires at `not_after` (Unix seconds).
    pub fn tls_cert_expires(&self, not_after: Option<i64>) {
        self.tls_cert_expiry
            .set(not_after.map_or(0.0, |not_after| not_after as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator finds every metric in docs/reference/metrics.md and on the
    /// shipped Grafana dashboard.
    #[test]
    fn every_metric_is_documented_and_on_the_dashboard() {
        let metrics = Metrics::new(&Registry::new());
        let read = |path: &str| {
            std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
        };
        let (readme, dashboard) = (
            read("docs/reference/metrics.md"),
            read("deploy/grafana/hookgate.json"),
        );
        assert!(metrics.names().len() > 30, "{:?}", metrics.names());
        for (name, ..) in table::DESCRIBED {
            assert!(
                metrics.names().iter().any(|built| built == name),
                "{name} is in metrics/table.rs but no collector is built from it"
            );
        }
        for name in metrics.names() {
            let documented = readme.contains(&format!("`{name}`"))
                || (name.starts_with("process_") && readme.contains("`process_*`"));
            assert!(
                documented,
                "{name} is missing from docs/reference/metrics.md"
            );
            assert!(
                dashboard.contains(name.as_str()),
                "{name} is on no dashboard panel"
            );
        }
    }
}
