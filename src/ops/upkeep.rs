//! Upkeep an operator relies on without asking: the gauges the store
//! knows, set when `/metrics` is scraped; each async route's queue for
//! `/readyz`; the pauses other instances made, read every few seconds;
//! and the trim of listing indexes, every minute.

use std::collections::HashMap;

use super::Operator;
use crate::config::DeliveryMode;
use crate::metrics::delivery_labels;
use crate::route::Route;
use crate::store::RecordState;

impl Operator {
    /// Read the paused routes from the store (every [`PAUSE_POLL`], and at
    /// start-up before serving): a pause or resume made through another
    /// instance applies here. A resumed async route's backlog is delivered
    /// at once. A store that does not answer leaves the last known state.
    ///
    /// [`PAUSE_POLL`]: crate::traffic::PAUSE_POLL
    pub async fn refresh_pauses(&self) {
        match self.parts.pauses.refresh(&self.parts.store).await {
            Ok(resumed) => {
                if !resumed.is_empty() {
                    tracing::info!(routes = %resumed.join(","), "routes resumed by another instance");
                    self.parts.places.wake();
                }
            }
            Err(error) => tracing::debug!(%error, "could not read the paused routes"),
        }
        self.parts.show_pauses();
    }

    /// Set the gauges the store knows, when `/metrics` is scraped:
    /// `hookgate_dead_letters{route}`, and for async routes
    /// `hookgate_blocked_entities` (ordered routes that wait; at most
    /// `BLOCKED_COUNTED`),
    /// `hookgate_queue_depth{route,state="queued"}` (fleet-wide: every
    /// instance reports the same) and `hookgate_oldest_queued_seconds`;
    /// `state="delivering"` is this instance's running deliveries. Counted
    /// per route scope (routes sharing a scope show the same counts). A
    /// store that does not answer leaves the last values.
    pub async fn refresh_gauges(&self) {
        let metrics = &self.parts.metrics;
        metrics
            .store_up
            .set(i64::from(self.parts.store.ping().await.is_ok()));
        if let Some(bytes) = self.parts.store.size_bytes() {
            metrics.store_bytes.set(bytes as i64);
        }
        let cache_live = (self.parts.store)
            .replay_cache()
            .is_some_and(|cache| cache.is_live());
        metrics.store.cache_live.set(i64::from(cache_live));
        for route in self.parts.routes.all() {
            let (name, destination) = delivery_labels(&route.name);
            if let Ok(count) = self
                .parts
                .store
                .listing()
                .count(&route.keying.scope, RecordState::Dead)
                .await
            {
                metrics
                    .dead_letters
                    .with_label_values(&[name, destination])
                    .set(count as i64);
            }
            let DeliveryMode::Async(settings) = &route.delivery else {
                self.stuck_gauges(&route).await;
                continue;
            };
            (metrics.page_after.with_label_values(&[name, destination]))
                .set(settings.page_after.as_secs_f64());
            if let Some(blocked) = self.blocked_count(&route).await {
                metrics
                    .blocked_entities
                    .with_label_values(&[name, destination])
                    .set(blocked as i64);
            }
            if let Ok(count) = self
                .parts
                .store
                .listing()
                .count(&route.keying.scope, RecordState::Queued)
                .await
            {
                metrics
                    .queue_depth
                    .with_label_values(&[name, destination, "queued"])
                    .set(count as i64);
            }
            if let Ok(oldest) = self
                .parts
                .store
                .listing()
                .oldest(&route.keying.scope, RecordState::Queued)
                .await
            {
                let age = oldest.map_or(0, |at| self.parts.clock.now_ms().saturating_sub(at));
                metrics
                    .oldest_queued
                    .with_label_values(&[name, destination])
                    .set(age as f64 / 1000.0);
            }
        }
        for (route, running) in self.parts.places.delivering() {
            let (route, destination) = delivery_labels(&route);
            metrics
                .queue_depth
                .with_label_values(&[route, destination, "delivering"])
                .set(running as i64);
        }
    }

    /// Measure what every async scope holds queued (every
    /// [`MEASURE_EVERY`], and at start-up) for the queue bounds, and set
    /// their gauges. A store that does not answer keeps the last
    /// measurement.
    ///
    /// [`MEASURE_EVERY`]: crate::traffic::bounds::MEASURE_EVERY
    pub async fn measure_queues(&self) {
        let (parts, metrics) = (&self.parts, &self.parts.metrics);
        let runtime = parts.routes.load();
        let mut scopes = HashMap::new();
        for route in parts.routes.all() {
            let DeliveryMode::Async(settings) = &route.delivery else {
                continue;
            };
            if !scopes.contains_key(&route.keying.scope) {
                match parts.store.queue().queued(&route.keying.scope).await {
                    Ok(queued) => scopes.insert(route.keying.scope.clone(), queued),
                    Err(error) => {
                        tracing::debug!(%error, "could not measure the queues");
                        return;
                    }
                };
            }
            let labels = delivery_labels(&route.name);
            let labels = [labels.0, labels.1];
            let queued = scopes[&route.keying.scope];
            (metrics.queued_bytes.with_label_values(&labels)).set(queued.bytes as i64);
            (metrics.queue_bound_bytes.with_label_values(&labels))
                .set(settings.max_queued_bytes as i64);
            (metrics.queue_bound_events.with_label_values(&labels)).set(settings.max_queued as i64);
        }
        parts.queues.set(scopes);
        (metrics.store_queued_bytes).set(parts.queues.total_bytes() as i64);
        (metrics.store_queue_bound_bytes).set(runtime.max_queued_bytes as i64);
    }

    /// A sync route with `page_after`: its `page_after` and how long its
    /// oldest failed event has gone without a delivery (the record's last
    /// change: a sender's retry, or an operator's redelivery, moves it).
    async fn stuck_gauges(&self, route: &Route) {
        let Some(page_after) = route.failures.page_failed_after else {
            return;
        };
        let (metrics, labels) = (&self.parts.metrics, delivery_labels(&route.name));
        let labels = [labels.0, labels.1];
        (metrics.page_after.with_label_values(&labels)).set(page_after.as_secs_f64());
        if let Ok(oldest) = self
            .parts
            .store
            .listing()
            .oldest(&route.keying.scope, RecordState::Failed)
            .await
        {
            let age = oldest.map_or(0, |at| self.parts.clock.now_ms().saturating_sub(at));
            (metrics.oldest_failed.with_label_values(&labels)).set(age as f64 / 1000.0);
        }
    }

    /// Each async route's queue, for `/readyz`: events queued (in the
    /// store, fleet-wide) and being delivered by this instance.
    pub async fn delivery_status(&self) -> serde_json::Map<String, serde_json::Value> {
        let delivering: std::collections::HashMap<String, usize> =
            self.parts.places.delivering().into_iter().collect();
        let mut status = serde_json::Map::new();
        for route in self.parts.routes.all() {
            if !matches!(route.delivery, DeliveryMode::Async(_)) {
                continue;
            }
            let queued = self
                .parts
                .store
                .listing()
                .count(&route.keying.scope, RecordState::Queued)
                .await;
            status.insert(
                route.name.clone(),
                serde_json::json!({
                    "queued": queued.ok(),
                    "delivering": delivering.get(&route.name).copied().unwrap_or(0),
                }),
            );
        }
        status
    }

    /// Drop listing-index entries whose records have expired, per route
    /// scope and state, by the longest lifetime a record of that state has
    /// among the scope's routes (`retention` for processing and completed,
    /// `dead_letter_retention` for failed and dead). Run every minute; a
    /// store that keeps no such index has nothing to do.
    pub async fn trim_indexes(&self) {
        let routes = self.parts.routes.all();
        let mut scopes: Vec<&str> = routes
            .iter()
            .map(|route| route.keying.scope.as_str())
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        for scope in scopes {
            let of_scope = || routes.iter().filter(|route| route.keying.scope == scope);
            let retention = of_scope().map(|route| route.claim.retention).max();
            let parked = of_scope()
                .map(|route| route.failures.dead_letter_retention)
                .max();
            for state in RecordState::ALL {
                let horizon = match state {
                    RecordState::Processing | RecordState::Completed => retention,
                    RecordState::Queued
                    | RecordState::Failed
                    | RecordState::Dead
                    | RecordState::Stale => parked,
                };
                let Some(horizon) = horizon else { continue };
                if let Err(error) = self.parts.store.listing().trim(scope, state, horizon).await {
                    tracing::debug!(scope, %error, "could not trim a listing index");
                }
            }
        }
        // Reconciliation's own records (its lease, status and asks), kept
        // at most a month.
        for route in routes.iter().filter(|route| route.reconcile.is_some()) {
            let scope = crate::reconcile::scope(route);
            for state in RecordState::ALL {
                let horizon = crate::reconcile::KEPT;
                if let Err(error) = self
                    .parts
                    .store
                    .listing()
                    .trim(&scope, state, horizon)
                    .await
                {
                    tracing::debug!(scope, %error, "could not trim a listing index");
                }
            }
        }
    }
}
