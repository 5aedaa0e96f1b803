//! The last 24 hours of each route's outcomes, kept in the gateway
//! (`GET /admin/history`, the console's chart): the request counters of
//! `/metrics` sampled every [`STEP`] into buckets, the newest one live.
//! Per instance, in memory: a restart begins a new history, and a fleet's
//! history is the sum of its instances' (as `/metrics` is).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::delivery::Parts;
use crate::shutdown::Shutdown;

/// One bucket's width.
pub(super) const STEP: Duration = Duration::from_secs(300);
/// Buckets kept: 24 hours.
const BUCKETS: usize = 288;

/// Counts by route, then by outcome.
type Counts = HashMap<String, HashMap<String, u64>>;

#[derive(Default)]
pub(super) struct History {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Closed buckets, oldest first: (start, counts in it).
    closed: VecDeque<(u64, Counts)>,
    /// The live bucket's start, and the counters' totals then.
    since: Option<(u64, Counts)>,
}

impl History {
    /// Sample the counters every [`STEP`] until the gateway stops.
    pub fn keep(self: &Arc<Self>, parts: Parts, shutdown: Shutdown) {
        let history = Arc::clone(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(STEP);
            let stopped = shutdown.stopped();
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    () = &mut stopped => return,
                    _ = every.tick() => history.sample(parts.clock.now_ms(), totals(&parts)),
                }
            }
        });
    }

    /// Close the live bucket at `now` with the counters' `totals`.
    fn sample(&self, now: u64, totals: Counts) {
        let mut inner = self.inner.lock().expect("poisoned");
        if let Some((start, before)) = inner.since.take() {
            inner
                .closed
                .push_back((start, difference(&totals, &before)));
            while inner.closed.len() >= BUCKETS {
                inner.closed.pop_front();
            }
        }
        inner.since = Some((now, totals));
    }

    /// Every bucket, the live one last (counted up to `now` from
    /// `totals`): `{"step_ms", "routes": {route: [{"at", outcome: n…}]}}`,
    /// with only the outcomes that happened.
    pub fn json(&self, totals: &Counts) -> Value {
        let inner = self.inner.lock().expect("poisoned");
        let live =
            (inner.since.as_ref()).map(|(start, before)| (*start, difference(totals, before)));
        let mut routes: Map<String, Value> = Map::new();
        for route in totals.keys() {
            routes.insert(route.clone(), Value::Array(Vec::new()));
        }
        for (start, counts) in inner.closed.iter().chain(live.iter()) {
            for (route, outcomes) in counts {
                let mut bucket = Map::new();
                bucket.insert("at".into(), json!(start));
                for (outcome, n) in outcomes.iter().filter(|(_, n)| **n > 0) {
                    bucket.insert(outcome.clone(), json!(n));
                }
                if let Some(Value::Array(buckets)) = routes.get_mut(route) {
                    buckets.push(Value::Object(bucket));
                }
            }
        }
        json!({ "step_ms": STEP.as_millis() as u64, "routes": routes })
    }
}

/// Every route's request counters now.
pub(super) fn totals(parts: &Parts) -> Counts {
    (parts.routes.all().iter())
        .map(|route| {
            let outcomes = parts.metrics.outcomes(&route.name);
            let counts = (outcomes.into_iter())
                .map(|(outcome, n)| (outcome, n.as_u64().unwrap_or(0)))
                .collect();
            (route.name.clone(), counts)
        })
        .collect()
}

/// `now - before`, per route and outcome (a route new since counts from 0).
fn difference(now: &Counts, before: &Counts) -> Counts {
    (now.iter())
        .map(|(route, outcomes)| {
            let earlier = before.get(route);
            let counts = (outcomes.iter())
                .map(|(outcome, n)| {
                    let then = earlier.and_then(|e| e.get(outcome)).copied().unwrap_or(0);
                    (outcome.clone(), n.saturating_sub(then))
                })
                .collect();
            (route.clone(), counts)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(route: &str, forwarded: u64, replayed: u64) -> Counts {
        let outcomes = [
            ("forwarded".to_owned(), forwarded),
            ("replayed".to_owned(), replayed),
        ];
        [(route.to_owned(), outcomes.into_iter().collect())]
            .into_iter()
            .collect()
    }

    #[test]
    fn buckets_hold_what_happened_in_them_and_the_day_is_bounded() {
        let history = History::default();
        history.sample(0, counts("hook", 0, 0));
        history.sample(300_000, counts("hook", 5, 1));
        let shown = history.json(&counts("hook", 7, 1));
        let buckets = shown["routes"]["hook"].as_array().unwrap();
        assert_eq!(buckets.len(), 2);
        assert_eq!(buckets[0], json!({"at": 0, "forwarded": 5, "replayed": 1}));
        assert_eq!(
            buckets[1],
            json!({"at": 300_000, "forwarded": 2}),
            "the live bucket"
        );
        for i in 2..400 {
            history.sample(i * 300_000, counts("hook", 7 + i, 1));
        }
        let shown = history.json(&counts("hook", 500, 1));
        assert_eq!(shown["routes"]["hook"].as_array().unwrap().len(), BUCKETS);
    }
}
