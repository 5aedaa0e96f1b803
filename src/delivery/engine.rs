//! The engine: what every attempt needs, whichever entrance made it — the
//! live routes, the store and the claims held, traffic control, the places
//! under `max_in_flight`, telemetry, metrics, the drain — with verbs for
//! the entrances. The ingress, the workers and the operator's door
//! (`ops::Operator`, which also keeps the gauges, readiness and the
//! listing upkeep) each hold an `Arc<Engine>`; the engine imports none of
//! them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::places::Places;
use crate::claim::{Claim, Claims};
use crate::config::{Config, Live};
use crate::error::GatewayError;
use crate::metrics::{delivery_labels, Metrics};
use crate::route::{LiveRoutes, Route, Runtime};
use crate::store::{Clock, Lease, Store, StoreError, StoreKey};
use crate::telemetry::Telemetry;
use crate::traffic::{Admission, Pause, Pauses, Refusal};

/// What every attempt needs, whichever entrance made it; shared by the
/// ingress, the workers, the operator's actions and the admin API.
pub struct Engine {
    /// What a reload swaps.
    routes: LiveRoutes,
    /// Shared with every [`Claim`], which may outlive its request (a
    /// recording that waits for the store to come back).
    store: Arc<Store>,
    /// The claims this process holds, for shutdown.
    claims: Arc<Claims>,
    metrics: Metrics,
    /// Set once shutdown begins, so readiness turns false while draining.
    draining: AtomicBool,
    /// Each route's places under `max_in_flight`, and the workers' wake-up
    /// call.
    places: Places,
    /// The routes an operator paused, as last read from the store.
    pauses: Pauses,
    /// OpenTelemetry tracing, when `[telemetry]` is configured.
    telemetry: Telemetry,
    /// The one clock every entrance, the policy and the operator's actions
    /// read (see `clock.rs`).
    clock: Clock,
}

impl Engine {
    pub fn new(config: &Config, store: Store, metrics: Metrics) -> Self {
        store.set_keys(config.live.encryption.clone());
        Self {
            routes: LiveRoutes::new(&config.live, &metrics),
            pauses: Pauses::default(),
            telemetry: match &config.fixed.telemetry {
                None => Telemetry::off(),
                Some(settings) => Telemetry::start(settings).unwrap_or_else(|error| {
                    tracing::error!(%error, "tracing is off");
                    Telemetry::off()
                }),
            },
            store: Arc::new(store),
            claims: Arc::default(),
            metrics,
            draining: AtomicBool::new(false),
            places: Places::default(),
            clock: Clock::system(),
        }
    }

    /// Swap in the routes, secrets and request limits of `live`; requests
    /// already running keep the old ones.
    pub fn reload(&self, live: &Live) {
        self.store.set_keys(live.encryption.clone());
        self.routes.swap(live, &self.metrics);
        self.set_pause_gauges();
    }

    /// The live config's snapshot of now (what a request keeps).
    pub fn runtime(&self) -> Arc<Runtime> {
        self.routes.load()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn places(&self) -> &Places {
        &self.places
    }

    pub fn pauses(&self) -> &Pauses {
        &self.pauses
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Read the paused routes from the store (every [`PAUSE_POLL`], and at
    /// start-up before serving): a pause or resume made through another
    /// instance applies here. A resumed async route's backlog is delivered
    /// at once. A store that does not answer leaves the last known state.
    ///
    /// [`PAUSE_POLL`]: crate::traffic::PAUSE_POLL
    pub async fn refresh_pauses(&self) {
        match self.pauses.refresh(&self.store).await {
            Ok(resumed) => {
                if !resumed.is_empty() {
                    tracing::info!(routes = %resumed.join(","), "routes resumed by another instance");
                    self.places.wake();
                }
            }
            Err(error) => tracing::debug!(%error, "could not read the paused routes"),
        }
        self.set_pause_gauges();
    }

    /// Pause (`Some`) or resume `route` for the whole fleet: written to the
    /// store and applied here at once, gauge included; a resumed route's
    /// backlog is delivered now rather than at the next poll.
    pub async fn set_pause(&self, route: &str, pause: Option<&Pause>) -> Result<(), StoreError> {
        self.pauses.set(&self.store, route, pause).await?;
        self.set_pause_gauges();
        if pause.is_none() {
            self.places.wake();
        }
        Ok(())
    }

    /// `hookgate_route_paused{route}` for every current route.
    fn set_pause_gauges(&self) {
        for route in self.routes() {
            let paused = self.pauses.is_paused(&route.name);
            let (name, destination) = delivery_labels(&route.name);
            self.metrics
                .route_paused
                .with_label_values(&[name, destination])
                .set(i64::from(paused));
        }
    }

    /// Leave for one upstream call of `route` (README, "Traffic control"): refused while the
    /// route is paused, its breaker open or its rate spent.
    pub(crate) fn admit(&self, route: &Route) -> Result<Admission, GatewayError> {
        if self.pauses.is_paused(&route.name) {
            return Err(GatewayError::RoutePaused);
        }
        route.controls.admit().map_err(|held| match held {
            Refusal::CircuitOpen(retry_after) => GatewayError::CircuitOpen { retry_after },
            Refusal::RateLimited(retry_after) => GatewayError::RateLimited { retry_after },
        })
    }

    /// Every current route, sorted by name.
    pub fn routes(&self) -> Vec<Arc<Route>> {
        self.routes.all()
    }

    /// The current route named `name`.
    pub fn route(&self, name: &str) -> Option<Arc<Route>> {
        self.routes.named(name)
    }

    /// Readiness turns false (shutdown has begun); requests are still
    /// served.
    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Shutdown: readiness turns false, running deliveries get `grace` to
    /// finish (`connections` resolves once every connection has closed);
    /// then the claims still held are released, so the senders' retries are
    /// forwarded at once instead of after `processing_ttl`.
    pub async fn drain(&self, grace: Duration, connections: impl Future<Output = ()>) {
        self.draining.store(true, Ordering::Relaxed);
        tracing::info!(
            in_flight = self.claims.count(),
            grace_ms = grace.as_millis() as u64,
            "shutting down: draining in-flight requests"
        );
        let finished = tokio::time::timeout(grace, async {
            connections.await;
            self.claims.wait_idle().await;
        })
        .await;
        if finished.is_err() {
            let released = self.claims.release_all(&self.store).await;
            tracing::warn!(
                released,
                "grace period over: released unfinished claims so the senders' retries are processed"
            );
        } else {
            tracing::info!("drained");
        }
    }

    /// The claim `lease` grants on `key`, registered for shutdown.
    pub(crate) fn claim_for(&self, route: &Route, key: StoreKey, lease: Lease) -> Claim {
        Claim::new(
            &self.store,
            &self.claims,
            key,
            lease,
            route.processing_ttl,
            Arc::clone(&route.label),
            route.leases_lost.clone(),
        )
    }
}
