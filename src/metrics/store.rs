//! The store's share of the metrics: operation times and errors, the
//! replay cache, sealed records that do not open, packed claims and
//! refusals — handed to [`crate::store::Store`], which records them.

use std::time::Duration;

use prometheus::{
    exponential_buckets, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
};

/// The store's share, handed to [`crate::store::Store`].
#[derive(Clone)]
pub struct StoreMetrics {
    pub duration: HistogramVec,
    pub errors: IntCounterVec,
    /// Duplicates answered from the replay cache, without the store.
    pub cache_hits: prometheus::IntCounter,
    /// 1 while the replay cache serves (its invalidation feed is up).
    pub cache_live: prometheus::IntGauge,
    /// Records read whose sealed parts no configured key opens.
    pub decrypt_failures: prometheus::IntCounter,
    /// 1 while new keys take Redis's packed claim (`store.packed_claims`).
    pub packed_claims: prometheus::IntGauge,
    /// Sources on which the store refuses an operation (`store/refusals.rs`).
    pub refusing: IntGaugeVec,
}

impl StoreMetrics {
    /// Collectors registered nowhere, for stores used outside a gateway
    /// (benchmarks, tests).
    pub fn unregistered() -> Self {
        Self::build().0
    }

    pub(super) fn build() -> (Self, [Box<dyn prometheus::core::Collector>; 7]) {
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
        let cache_hits = prometheus::IntCounter::new(
            "hookgate_replay_cache_hits_total",
            "Duplicates answered from the in-process replay cache, without a store round trip.",
        )
        .expect("valid metric");
        let cache_live = prometheus::IntGauge::new(
            "hookgate_replay_cache_live",
            "1 while the replay cache serves: on, and its invalidation feed connected.",
        )
        .expect("valid metric");
        let decrypt_failures = prometheus::IntCounter::new(
            "hookgate_store_decrypt_failures_total",
            "Stored records read that no [store.encryption] key opens (answered record_unreadable).",
        )
        .expect("valid metric");
        let packed_claims = prometheus::IntGauge::new(
            "hookgate_store_packed_claims",
            "1 while new sync keys take Redis's packed claim (store.packed_claims); 0 when it is off, or since the server refused SET ... NX GET (Redis before 7.0) and the hashed claim serves instead.",
        )
        .expect("valid metric");
        let refusing = IntGaugeVec::new(
            Opts::new(
                "hookgate_store_refusing",
                "Route scopes on which the store, though it answers, refuses the operation (a missing grant, maxmemory, a read-only replica); 0 once it takes it again.",
            ),
            &["op"],
        )
        .expect("valid metric");
        let collectors: [Box<dyn prometheus::core::Collector>; 7] = [
            Box::new(refusing.clone()),
            Box::new(duration.clone()),
            Box::new(errors.clone()),
            Box::new(cache_hits.clone()),
            Box::new(cache_live.clone()),
            Box::new(decrypt_failures.clone()),
            Box::new(packed_claims.clone()),
        ];
        (
            Self {
                duration,
                errors,
                cache_hits,
                cache_live,
                decrypt_failures,
                packed_claims,
                refusing,
            },
            collectors,
        )
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
