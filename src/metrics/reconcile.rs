//! Reconciliation's share of the metrics (docs/guide/reconciliation.md, "Reconciliation"): its
//! passes, what they found missing and what became of it, and when a
//! route's last good pass ended — by route.

use prometheus::{GaugeVec, IntCounterVec, Opts};

/// Recorded by `crate::reconcile`.
#[derive(Clone)]
pub struct ReconcileMetrics {
    /// Passes, by `result` (`ok`, `error`).
    pub runs: IntCounterVec,
    /// Events the sender sent that the gateway had not completed.
    pub missing: IntCounterVec,
    /// Of those, delivered through the gateway's stages.
    pub delivered: IntCounterVec,
    /// Of those, asked of the sender again.
    pub asked: IntCounterVec,
    /// When the route's last good pass ended (Unix seconds), as the fleet
    /// last recorded it.
    pub last_success: GaugeVec,
    /// The route's `every`, for the alert on passes that keep failing.
    pub every: GaugeVec,
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge(name: &str, help: &str) -> GaugeVec {
    GaugeVec::new(Opts::new(name, help), &["route"]).expect("valid metric")
}

impl ReconcileMetrics {
    pub(super) fn build() -> (Self, [Box<dyn prometheus::core::Collector>; 6]) {
        let runs = counter(
            "hookgate_reconcile_runs_total",
            "Reconciliation passes with the sender's API, by result (ok, error).",
            &["route", "result"],
        );
        let missing = counter(
            "hookgate_reconcile_missing_total",
            "Events the sender's API listed that the gateway had not completed.",
            &["route"],
        );
        let delivered = counter(
            "hookgate_reconcile_delivered_total",
            "Missing events reconciliation delivered through the gateway (forwarded, accepted or filtered as the route says).",
            &["route"],
        );
        let asked = counter(
            "hookgate_reconcile_asked_total",
            "Missing deliveries reconciliation asked the sender to send again (GitHub).",
            &["route"],
        );
        let last_success = gauge(
            "hookgate_reconcile_last_success_timestamp_seconds",
            "When the route's last good reconciliation pass ended, on any gateway of the fleet (Unix seconds; 0 before the first).",
        );
        let every = gauge(
            "hookgate_reconcile_every_seconds",
            "How often the route is reconciled ([routes.reconcile] every).",
        );
        let collectors: [Box<dyn prometheus::core::Collector>; 6] = [
            Box::new(runs.clone()),
            Box::new(missing.clone()),
            Box::new(delivered.clone()),
            Box::new(asked.clone()),
            Box::new(last_success.clone()),
            Box::new(every.clone()),
        ];
        let metrics = Self {
            runs,
            missing,
            delivered,
            asked,
            last_success,
            every,
        };
        (metrics, collectors)
    }
}
