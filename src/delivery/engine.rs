//! The engine: what every attempt needs, whichever entrance made it — the
//! live routes, the store and the claims held, traffic control, the places
//! under `max_in_flight`, telemetry, metrics, the drain — with verbs for
//! the entrances and nothing else: no entrance reaches a component through
//! it.
//!
//! The components themselves are [`Parts`], built once at start-up and
//! handed to each holder — the ingress, the workers, the operator's door
//! (`ops::Operator`, which also keeps the gauges, readiness, the pauses and
//! the listing upkeep), the admin API, the reloader — next to its
//! `Arc<Engine>`. The engine imports none of them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::places::Places;
use crate::claim::{Claim, Claims};
use crate::config::{Config, Live};
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::notice::Notices;
use crate::replay::RecordedResponse;
use crate::route::{LiveRoutes, Route};
use crate::store::{Clock, Lease, Store, StoreKey};
use crate::telemetry::Telemetry;
use crate::traffic::bounds::QueueLevels;
use crate::traffic::{Admission, Pauses, Refusal};

/// The gateway's shared components, built once at start-up: the engine
/// and each entrance keep what they use of them. Cheap to clone (handles).
#[derive(Clone)]
pub struct Parts {
    /// The routes, secrets and request limits a reload swaps; a request
    /// keeps the snapshot it began with.
    pub routes: Arc<LiveRoutes>,
    /// Shared with every [`Claim`], which may outlive its request (a
    /// recording that waits for the store to come back).
    pub store: Arc<Store>,
    pub metrics: Metrics,
    /// The one clock every entrance, the policy and the operator's actions
    /// read (see `clock.rs`).
    pub clock: Clock,
    /// Each route's places under `max_in_flight`, and the workers' wake-up
    /// call.
    pub places: Arc<Places>,
    /// The routes an operator paused, as last read from the store.
    pub pauses: Arc<Pauses>,
    /// OpenTelemetry tracing, when `[telemetry]` is configured.
    pub telemetry: Arc<Telemetry>,
    /// What each async scope held queued at the last measurement, for the
    /// queue bounds.
    pub queues: Arc<QueueLevels>,
    /// Where a dead letter, a blocked entity or a reconciliation's finding
    /// is said, for the `[[notify]]` targets (`notify/`).
    pub notices: Notices,
}

impl Parts {
    /// Assemble the components `config` asks for around the opened `store`;
    /// starts the tracer, so it runs inside the gateway's runtime.
    pub fn new(config: &Config, store: Store, metrics: Metrics, clock: Clock) -> Self {
        store.set_keys(config.live.encryption.clone());
        Parts {
            routes: Arc::new(LiveRoutes::new(&config.live, &metrics)),
            store: Arc::new(store),
            metrics,
            clock,
            places: Arc::default(),
            pauses: Arc::default(),
            queues: Arc::default(),
            notices: Notices::default(),
            telemetry: Arc::new(match &config.fixed.telemetry {
                None => Telemetry::off(),
                Some(settings) => Telemetry::start(settings).unwrap_or_else(|error| {
                    tracing::error!(%error, "tracing is off");
                    Telemetry::off()
                }),
            }),
        }
    }

    /// `hookgate_route_paused{route}` for every current route.
    pub fn show_pauses(&self) {
        let routes = self.routes.all();
        (self.pauses).show(
            routes.iter().map(|route| route.name.as_str()),
            &self.metrics,
        );
    }
}

/// What every attempt needs, whichever entrance made it; shared by the
/// ingress, the workers, the operator's actions and the admin API.
pub struct Engine {
    pub(super) parts: Parts,
    /// The claims this process holds, for shutdown.
    claims: Arc<Claims>,
    /// Set once shutdown begins, so readiness turns false while draining.
    draining: AtomicBool,
}

impl Engine {
    pub fn new(parts: &Parts) -> Self {
        Self {
            parts: parts.clone(),
            claims: Arc::default(),
            draining: AtomicBool::new(false),
        }
    }

    /// Swap in the routes, secrets and request limits of `live`; requests
    /// already running keep the old ones.
    pub fn reload(&self, live: &Live) {
        let parts = &self.parts;
        parts.store.set_keys(live.encryption.clone());
        parts.routes.swap(live, &parts.metrics);
        parts.show_pauses();
    }

    /// Leave for one upstream call of `route` (docs/guide/traffic-control.md, "Traffic control"): refused while the
    /// route is paused, its breaker open or its rate spent.
    pub(crate) fn admit(&self, route: &Route) -> Result<Admission, GatewayError> {
        if self.parts.pauses.is_paused(&route.name) {
            return Err(GatewayError::RoutePaused);
        }
        route.controls.admit().map_err(|held| match held {
            Refusal::CircuitOpen(retry_after) => GatewayError::CircuitOpen { retry_after },
            Refusal::RateLimited(retry_after) => GatewayError::RateLimited { retry_after },
        })
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
            let released = self.claims.release_all(&self.parts.store).await;
            tracing::warn!(
                released,
                "grace period over: released unfinished claims so the senders' retries are processed"
            );
        } else {
            tracing::info!("drained");
        }
    }

    /// Record `answer` as the final word on what was `claimed` of `route`,
    /// with no call (an event no filter takes); whether it was recorded —
    /// when not (the lease lost, the store gone), the next delivery is
    /// judged again.
    pub async fn record(
        &self,
        route: &Route,
        (key, lease): (StoreKey, Lease),
        answer: &RecordedResponse,
    ) -> bool {
        let claim = self.claim_for(route, key, lease);
        claim.complete(answer, route.claim.retention).await
    }

    /// The claim `lease` grants on `key`, registered for shutdown.
    pub(super) fn claim_for(&self, route: &Route, key: StoreKey, lease: Lease) -> Claim {
        Claim::new(
            &self.parts.store,
            &self.claims,
            key,
            lease,
            route.claim.processing_ttl,
            Arc::clone(&route.label),
            route.series.leases_lost.clone(),
        )
    }
}
