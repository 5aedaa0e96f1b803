//! Prometheus metrics (SPEC §5), on an explicit [`Registry`] created at
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

/// The `route` label of requests that matched no route.
pub const UNMATCHED: &str = "_unmatched";

/// Every collector hookgate exports.
#[derive(Clone)]
pub struct Metrics {
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub upstream_duration: HistogramVec,
    pub upstream_responses: IntCounterVec,
    pub store: StoreMetrics,
    pub in_flight: IntGaugeVec,
    pub leases_lost: IntCounterVec,
    pub config_reloads: IntCounterVec,
    /// When the running config was last loaded (start-up or a reload).
    pub config_reloaded_at: prometheus::Gauge,
    /// Events parked as dead letters (SPEC §6, §7).
    pub dead_letters_total: IntCounterVec,
    /// hookgate extension: dead letters held now, per route (counted in the
    /// store every few seconds).
    pub dead_letters: IntGaugeVec,
    /// hookgate extension: operator redeliveries and replays by result.
    pub redeliveries: IntCounterVec,
    /// Async delivery (SPEC §7).
    pub delivery_attempts: IntCounterVec,
    pub queue_depth: IntGaugeVec,
    pub oldest_queued: prometheus::GaugeVec,
    /// Traffic control (SPEC §9): paused routes (1), breakers holding
    /// calls (1), breaker trips, and every pause or resume (the audit).
    pub route_paused: IntGaugeVec,
    pub breaker_open: IntGaugeVec,
    pub breaker_opened: IntCounterVec,
    pub route_control_changes: IntCounterVec,
    /// hookgate extension: failed or timed-out TLS handshakes.
    pub tls_handshake_failures: prometheus::IntCounter,
    registry: Registry,
}

/// The store's share, handed to [`crate::store::Store`].
#[derive(Clone)]
pub struct StoreMetrics {
    pub duration: HistogramVec,
    pub errors: IntCounterVec,
}

impl StoreMetrics {
    /// Collectors registered nowhere, for stores used outside a gateway
    /// (benchmarks, tests).
    pub fn unregistered() -> Self {
        Self::build().0
    }

    fn build() -> (Self, [Box<dyn prometheus::core::Collector>; 2]) {
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "hookgate_store_operation_duration_seconds",
                "Time per store operation, by operation.",
            )
            // 50 µs .. ~1.6 s: sub-millisecond Redis and SQLite calls up to
            // the store timeout.
            .buckets(exponential_buckets(0.000_05, 2.0, 16).expect("valid buckets")),
            &["op"],
        )
        .expect("valid metric");
        let errors = IntCounterVec::new(
            Opts::new(
                "hookgate_store_errors_total",
                "Store operations that failed or timed out.",
            ),
            &["op"],
        )
        .expect("valid metric");
        let collectors: [Box<dyn prometheus::core::Collector>; 2] =
            [Box::new(duration.clone()), Box::new(errors.clone())];
        (Self { duration, errors }, collectors)
    }

    pub fn observe(&self, op: &'static str, elapsed: Duration, failed: bool) {
        self.duration
            .with_label_values(&[op])
            .observe(elapsed.as_secs_f64());
        if failed {
            self.errors.with_label_values(&[op]).inc();
        }
    }
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
            &["route"],
        )
        .expect("valid metric");
        let upstream_responses = IntCounterVec::new(
            Opts::new(
                "hookgate_upstream_responses_total",
                "Upstream answers by status class.",
            ),
            &["route", "class"],
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
        let leases_lost = IntCounterVec::new(
            Opts::new(
                "hookgate_leases_lost_total",
                "Claims taken over by another delivery while their upstream call ran.",
            ),
            &["route"],
        )
        .expect("valid metric");
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
        let dead_letters_total = IntCounterVec::new(
            Opts::new(
                "hookgate_dead_letters_total",
                "Events parked as dead letters after max_attempts.",
            ),
            &["route"],
        )
        .expect("valid metric");
        let dead_letters = IntGaugeVec::new(
            Opts::new(
                "hookgate_dead_letters",
                "Dead letters held in the store now.",
            ),
            &["route"],
        )
        .expect("valid metric");
        let redeliveries = IntCounterVec::new(
            Opts::new(
                "hookgate_redeliveries_total",
                "Operator redeliveries (same key) and replays (new key), by how the attempt ended.",
            ),
            &["route", "kind", "result"],
        )
        .expect("valid metric");
        let delivery_attempts = IntCounterVec::new(
            Opts::new(
                "hookgate_delivery_attempts_total",
                "Async delivery attempts by how they ended: completed, retrying, dead.",
            ),
            &["route", "result"],
        )
        .expect("valid metric");
        let queue_depth = IntGaugeVec::new(
            Opts::new(
                "hookgate_queue_depth",
                "Async events waiting in the store (queued, fleet-wide) or being delivered by this instance (delivering).",
            ),
            &["route", "state"],
        )
        .expect("valid metric");
        let oldest_queued = prometheus::GaugeVec::new(
            Opts::new(
                "hookgate_oldest_queued_seconds",
                "Age of the oldest queued async event of the route (0 when none).",
            ),
            &["route"],
        )
        .expect("valid metric");
        let route_paused = IntGaugeVec::new(
            Opts::new(
                "hookgate_route_paused",
                "1 while an operator has paused the route (fleet-wide, kept in the store).",
            ),
            &["route"],
        )
        .expect("valid metric");
        let breaker_open = IntGaugeVec::new(
            Opts::new(
                "hookgate_circuit_breaker_open",
                "1 while this instance's circuit breaker holds the route's upstream calls (open or probing).",
            ),
            &["route"],
        )
        .expect("valid metric");
        let breaker_opened = IntCounterVec::new(
            Opts::new(
                "hookgate_circuit_breaker_opened_total",
                "Times the route's circuit breaker opened (a failed probe opens it again).",
            ),
            &["route"],
        )
        .expect("valid metric");
        let route_control_changes = IntCounterVec::new(
            Opts::new(
                "hookgate_route_control_changes_total",
                "Operator pauses and resumes through this instance's admin API.",
            ),
            &["route", "action"],
        )
        .expect("valid metric");
        let (store, store_collectors) = StoreMetrics::build();

        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(requests.clone()),
            Box::new(request_duration.clone()),
            Box::new(upstream_duration.clone()),
            Box::new(upstream_responses.clone()),
            Box::new(in_flight.clone()),
            Box::new(leases_lost.clone()),
            Box::new(config_reloads.clone()),
            Box::new(config_reloaded_at.clone()),
            Box::new(dead_letters_total.clone()),
            Box::new(dead_letters.clone()),
            Box::new(redeliveries.clone()),
            Box::new(delivery_attempts.clone()),
            Box::new(queue_depth.clone()),
            Box::new(oldest_queued.clone()),
            Box::new(route_paused.clone()),
            Box::new(breaker_open.clone()),
            Box::new(breaker_opened.clone()),
            Box::new(route_control_changes.clone()),
            Box::new(build_info),
            Box::new(tls_handshake_failures.clone()),
        ];
        for collector in collectors.into_iter().chain(store_collectors) {
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
            in_flight,
            leases_lost,
            config_reloads,
            config_reloaded_at,
            dead_letters_total,
            dead_letters,
            redeliveries,
            delivery_attempts,
            queue_depth,
            oldest_queued,
            route_paused,
            breaker_open,
            breaker_opened,
            route_control_changes,
            tls_handshake_failures,
            registry: registry.clone(),
        }
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

    pub fn upstream_answered(&self, route: &str, status: http::StatusCode, elapsed: Duration) {
        let class = match status.as_u16() {
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        self.upstream_responses
            .with_label_values(&[route, class])
            .inc();
        self.upstream_duration
            .with_label_values(&[route])
            .observe(elapsed.as_secs_f64());
    }
}
