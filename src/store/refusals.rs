//! The store's refusals: operations a reachable store answers with an
//! error of its own — a PostgreSQL role without a grant, a Redis at
//! `maxmemory` under `noeviction`, a read-only replica — kept by
//! operation and source until the same operation succeeds there again.
//!
//! A refusal is not an outage: `ping` still answers and readiness stays
//! true (it is local by design, docs/operations/deploying.md,
//! "Readiness, and what a load balancer sees"), so it is
//! said everywhere an operator looks instead — `/readyz`'s detail, each
//! route in `GET /admin/routes`, the gauge `hookgate_store_refusing{op}`
//! and the `HookgateStoreRefusing` page. Timeouts are not refusals: they
//! are the store's unavailability, which `hookgate_store_up` and the store
//! alerts watch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use prometheus::IntGaugeVec;

/// One operation refused on one source, since when, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub op: &'static str,
    /// `{key_prefix}{scope}` (with its shard), or `""` for the store as a
    /// whole (its controls).
    pub source: String,
    /// The store's own words.
    pub error: String,
    /// Unix ms of the first refusal in a row.
    pub since_ms: u64,
}

/// The refusals standing now.
pub(super) struct Refusals {
    standing: Mutex<HashMap<(&'static str, String), Refused>>,
    /// Whether any stands: a success looks no further when none does.
    any: AtomicBool,
    gauge: IntGaugeVec,
}

impl Refusals {
    pub(super) fn new(gauge: IntGaugeVec) -> Self {
        Self {
            standing: Mutex::default(),
            any: AtomicBool::new(false),
            gauge,
        }
    }

    fn standing(&self) -> std::sync::MutexGuard<'_, HashMap<(&'static str, String), Refused>> {
        self.standing
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// `op` on `source` was refused with `error` at `now_ms`.
    pub(super) fn refused(&self, op: &'static str, source: &str, error: &str, now_ms: u64) {
        let mut standing = self.standing();
        let refused = standing
            .entry((op, source.to_owned()))
            .or_insert_with(|| Refused {
                op,
                source: source.to_owned(),
                error: String::new(),
                since_ms: now_ms,
            });
        if refused.error.is_empty() {
            tracing::error!(
                op,
                source,
                error,
                "the store refuses an operation while it answers"
            );
        }
        refused.error = error.to_owned();
        self.any.store(true, Ordering::Release);
        self.show(&standing, op);
    }

    /// `op` on `source` succeeded: a refusal there is over.
    pub(super) fn succeeded(&self, op: &'static str, source: &str) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut standing = self.standing();
        if standing.remove(&(op, source.to_owned())).is_some() {
            tracing::info!(op, source, "the store takes the operation again");
            self.any.store(!standing.is_empty(), Ordering::Release);
            self.show(&standing, op);
        }
    }

    /// `hookgate_store_refusing{op}`: the sources refusing it.
    fn show(&self, standing: &HashMap<(&'static str, String), Refused>, op: &'static str) {
        let count = standing
            .keys()
            .filter(|(refused, _)| *refused == op)
            .count();
        self.gauge.with_label_values(&[op]).set(count as i64);
    }

    /// Every refusal standing, oldest first.
    pub(super) fn all(&self) -> Vec<Refused> {
        let mut all: Vec<Refused> = self.standing().values().cloned().collect();
        all.sort_by(|a, b| (a.since_ms, a.op, &a.source).cmp(&(b.since_ms, b.op, &b.source)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_stands_until_the_same_operation_succeeds_there() {
        let gauge = IntGaugeVec::new(prometheus::Opts::new("g", "g"), &["op"]).unwrap();
        let refusals = Refusals::new(gauge.clone());
        refusals.refused("claim", "hg:orders", "permission denied", 10);
        refusals.refused("claim", "hg:orders", "permission denied again", 20);
        refusals.refused("claim", "hg:shop", "permission denied", 30);
        assert_eq!(gauge.with_label_values(&["claim"]).get(), 2);
        let all = refusals.all();
        assert_eq!(
            (all[0].since_ms, all[0].error.as_str()),
            (10, "permission denied again")
        );
        refusals.succeeded("claim", "hg:other");
        refusals.succeeded("complete", "hg:orders");
        assert_eq!(
            refusals.all().len(),
            2,
            "only the same operation on the same source"
        );
        refusals.succeeded("claim", "hg:orders");
        refusals.succeeded("claim", "hg:shop");
        assert!(refusals.all().is_empty());
        assert_eq!(gauge.with_label_values(&["claim"]).get(), 0);
    }
}
