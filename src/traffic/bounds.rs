//! Queue bounds (docs/guide/async-delivery.md, "Asynchronous delivery"): what each async scope
//! held queued at the last measurement, and whether a new event still
//! fits its route's `max_queued` / `max_queued_bytes` and the store's
//! `store.max_queued_bytes`.
//!
//! The operator's upkeep measures every async scope (`Listing::queued`)
//! every [`MEASURE_EVERY`] and at start-up; an acceptance reads the last
//! measurement here, in memory. A bound is therefore checked against what
//! the store held at most that long ago: a burst can pass it by what
//! arrives meanwhile (every instance of a fleet accepts until it has
//! measured), never by more. A full queue answers a new event 503
//! `queue_full` with `Retry-After`, so its sender keeps it and retries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::store::Queued;

/// How often the upkeep measures the queues.
pub const MEASURE_EVERY: Duration = Duration::from_secs(2);

/// What a sender is told to wait before it tries a full queue again.
pub const QUEUE_FULL_RETRY_AFTER: Duration = Duration::from_secs(60);

/// One queue's bounds; 0 is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub events: u64,
    pub bytes: u64,
}

/// Which bound a full queue reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Events,
    Bytes,
    /// `store.max_queued_bytes`: every async scope together.
    Store,
}

impl Full {
    pub fn as_str(self) -> &'static str {
        match self {
            Full::Events => "max_queued",
            Full::Bytes => "max_queued_bytes",
            Full::Store => "store.max_queued_bytes",
        }
    }
}

/// The last measurement of every async scope.
#[derive(Default)]
pub struct QueueLevels {
    last: ArcSwap<Levels>,
}

#[derive(Default)]
struct Levels {
    scopes: HashMap<String, Queued>,
    bytes: u64,
}

impl QueueLevels {
    /// Keep a new measurement, every scope's.
    pub fn set(&self, scopes: HashMap<String, Queued>) {
        let bytes = scopes.values().map(|queued| queued.bytes).sum();
        self.last.store(Arc::new(Levels { scopes, bytes }));
    }

    /// What `scope` held at the last measurement.
    pub fn of(&self, scope: &str) -> Queued {
        self.last
            .load()
            .scopes
            .get(scope)
            .copied()
            .unwrap_or_default()
    }

    /// Every scope together, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.last.load().bytes
    }

    /// Whether a new event of `scope`, bounded by `bounds`, must wait —
    /// and by which bound; `store_bytes` is `store.max_queued_bytes`.
    pub fn full(&self, scope: &str, bounds: Bounds, store_bytes: u64) -> Option<Full> {
        let last = self.last.load();
        let held = last.scopes.get(scope).copied().unwrap_or_default();
        if bounds.events > 0 && held.events >= bounds.events {
            Some(Full::Events)
        } else if bounds.bytes > 0 && held.bytes >= bounds.bytes {
            Some(Full::Bytes)
        } else if store_bytes > 0 && last.bytes >= store_bytes {
            Some(Full::Store)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_fills_on_its_own_and_zero_is_none() {
        let levels = QueueLevels::default();
        let bounds = Bounds {
            events: 3,
            bytes: 10_000,
        };
        assert_eq!(levels.full("a", bounds, 0), None, "nothing measured yet");
        let queued = |events, bytes| Queued { events, bytes };
        levels.set(HashMap::from([
            ("a".to_owned(), queued(3, 100)),
            ("b".to_owned(), queued(1, 10_000)),
            ("c".to_owned(), queued(1, 100)),
        ]));
        assert_eq!(levels.full("a", bounds, 0), Some(Full::Events));
        assert_eq!(levels.full("b", bounds, 0), Some(Full::Bytes));
        assert_eq!(levels.full("c", bounds, 0), None);
        assert_eq!(levels.full("c", bounds, 10_200), Some(Full::Store));
        let none = Bounds {
            events: 0,
            bytes: 0,
        };
        assert_eq!(levels.full("a", none, 0), None, "0 is no bound");
        assert_eq!(levels.total_bytes(), 10_200);
        assert_eq!(levels.of("b"), queued(1, 10_000));
    }
}
