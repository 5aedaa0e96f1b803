//! hookgate: a reverse proxy that gives existing webhook endpoints
//! exactly-once processing.
//!
//! # Layout
//!
//! A delivery reaches the upstream through five entrances — the sender's
//! own request, the async workers, the hybrid `respond_within`, an
//! operator's action, an event reconciliation fetched from the sender's
//! API — and every one of them builds the same
//! [`delivery::Attempt`] and hands it to the one [`delivery::Engine`].
//! [`ingress::Gateway::handle`] walks through a sender's request in order:
//!
//! - [`config`] — the TOML file, validated into typed settings: [`config::Fixed`]
//!   (read once) and [`config::Live`] (what a reload swaps in).
//! - [`server`] — accept, TLS, connection limits, HTTP/1.1 + h2; it hands
//!   each request to a [`server::Handler`] and knows nothing of deliveries.
//! - [`ingress`] — the sender's entrance: one delivery's life, one step per
//!   stage (route, admit the address, read, verify, key, traffic control,
//!   claim or accept, forward, settle), and what hookgate answers itself.
//! - [`route`] — exact-path and method matching; [`route::LiveRoutes`],
//!   what a reload swaps (the routes with their pooled upstream clients and
//!   controls, kept across reloads).
//! - [`verify`] — signature schemes, on the raw body, before anything else.
//!   Each sender is a [`verify::Profile`] (default key, retry horizon,
//!   retention, replay guard): described as data in `verify/senders.toml`
//!   (adding one is an entry and its vector), or a file of code where the
//!   scheme is more than data; a config's `[[schemes]]` describes more.
//! - [`key`] — the idempotency key from a header, a JSON pointer or the body.
//! - [`delivery`] — one delivery, whatever its entrance: the
//!   [`delivery::Engine`] that every entrance holds, verbs only (attempt a
//!   claimed event, hand it to its destinations, give a leased event its
//!   work, record a filtered one, admit, reload, drain); the
//!   [`delivery::Parts`] (live routes, store, metrics, clock, places under
//!   `max_in_flight`, pauses, telemetry) built once and handed to each
//!   holder beside it; [`delivery::attempt`], the one place that calls the
//!   upstream for a claimed event and settles it; [`delivery::policy`],
//!   the pure rule of what follows a failed attempt.
//! - [`worker`] — the async entrance: workers that lease due events of
//!   every scope and give each its work (`Engine::deliver_due`).
//! - [`ops`] — the operator's one door, [`ops::Operator`]: every operator
//!   action is one method returning one [`ops::OpsError`], and the gauges,
//!   readiness, the pauses read from the store and listing upkeep live
//!   there too; [`ops::redeliver`] is its
//!   entrance to the upstream — redelivery (same key), replay (new key)
//!   and redrive of dead letters, as tasks of the gateway.
//! - [`notice`] — a notice, and the handle every part that sees one says
//!   it through, held in the parts.
//! - [`notify`] — `[[notify]]`: dead letters, blocked entities, open
//!   breakers, queues near their bounds and reconciliation's findings,
//!   grouped and accepted into each target's own queue, which the workers
//!   deliver like any route's.
//! - [`reconcile`] — the sender's API asked, on a schedule and one gateway
//!   of a fleet at a time, for what the gateway never completed: Stripe's
//!   events delivered through the ingress (`Gateway::deliver_fetched`),
//!   GitHub's asked of GitHub again; the senders' APIs as data in
//!   [`sender_apis`].
//! - [`claim`] — a claim's life: renewal while the upstream runs, then
//!   complete or fail (retried while the lease protects the event); the
//!   set of claims this process holds.
//! - [`store`] — the [`store::Backend`] contract (atomic claims with fenced
//!   leases; failed and dead records that keep their request; the queue;
//!   listings) and its backends, `memory`, `embedded`, `redis`,
//!   `redis-cluster` and `postgres`; [`store::Store`] adds the key layout
//!   and deadlines. The record's life (docs/operations/README.md) is one
//!   function, `decide` in `store/record.rs`, that every backend applies.
//!   Adding a backend is its folder implementing the capabilities, one
//!   variant of `store::Backends` (with its arm in the `on!` dispatch),
//!   one settings variant opened in [`store::Store::open`], and its name
//!   in the tests' one list of backends (`tests/it/support/stores.rs`,
//!   which the store contract's suite and the gateway's scenarios share).
//! - [`upstream`] — the forwarded request and the pooled client.
//! - [`replay`] — recorded responses and their replay.
//! - [`error`] — every response hookgate writes itself, status and code,
//!   the admin API's included.
//! - [`secret`] — key material that never reaches a log.
//! - [`tls`] — rustls configs: the listener's certificate, https upstreams.
//! - [`traffic`] — pause and resume (kept in the store, fleet-wide), the
//!   circuit breaker and the upstream rate limit.
//! - [`reload`] — swap the live config atomically: on SIGHUP, `POST
//!   /admin/reload`, or when a file it was built from changes.
//! - `backups` — `[store.backup]`: the embedded store's scheduled online
//!   backups, kept `keep` deep, with the time of the last good one.
//! - `shutdown` — one signal for every task of [`App::serve`]: the workers
//!   stop leasing when the drain begins, the upkeep, the config watcher and
//!   the admin listener once it is over.
//! - [`telemetry`] — optional OpenTelemetry spans and `traceparent`.
//! - [`headers`] — header names and hop-by-hop rules.
//! - [`cidr`] — address ranges, for `trusted_proxies` and `allow_from`.
//! - [`metrics`] — Prometheus collectors on an explicit registry.
//! - [`admin`] — `/metrics`, health, readiness and the admin API, on their
//!   own listener, over the operator's door; [`console`] is the operator console on
//!   it (`/ui`); [`access`] says what the admin token and the read token
//!   may do there.
//!
//! # Names
//!
//! Each word means one thing: to **settle** is to end a claim by what the
//! upstream is known to have done ([`delivery::Settled`]); a **hold** is a
//! claim an unknown outcome keeps until its lease runs out (`on_unknown =
//! "hold"`); a **refusal** is traffic control's no ([`traffic::Refusal`]);
//! an **admission** is its yes, told the call's outcome. "Replay" is the
//! contract's word in three places and stays so: a duplicate is *replayed*
//! its recorded response (`Idempotent-Replayed`, served from the *replay
//! cache* when hot); an operator's *replay* sends a stored request as a new
//! event under a new key; the *replay guard* answers a body already
//! claimed under another key.
//!
//! [`App`] wires them together for the binary; tests use the same pieces.
//!
//! # What the library shows
//!
//! The crate is the gateway; the binary (`src/bin/hookgate/`) is its
//! command line: `run`, `check`, the admin API's client (`events`,
//! `routes`, `reload`, `reconcile`), `store copy` and `reencrypt`,
//! `migrate`, `backup` and `demo`. Outside the crate, the binary, the
//! integration tests and the benchmarks see [`App`], [`Reloader`] and
//! eight modules: [`config`], [`store`] (with what records hold),
//! [`clock`], [`metrics`], [`verify`], [`tls`], [`server`] and
//! [`headers`]; every other module is the crate's own.

#![forbid(unsafe_code)]
// The request lifecycle nests the futures of its stages, each the size of
// the largest store backend's operation: computing their layouts from
// scratch goes deeper than the default 128.
#![recursion_limit = "256"]

mod access;
mod admin;
mod backups;
mod cidr;
mod claim;
pub mod clock;
#[cfg(test)]
mod codes;
pub mod config;
mod console;
mod delivery;
mod error;
mod filter;
pub mod headers;
mod ingress;
mod key;
pub mod metrics;
mod notice;
mod notify;
mod ops;
mod order;
mod reconcile;
mod reload;
mod replay;
mod route;
mod seal;
mod secret;
mod sender_apis;
pub mod server;
mod shutdown;
pub mod store;
mod telemetry;
pub mod tls;
mod traffic;
mod upstream;
pub mod verify;
mod worker;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;

use crate::admin::Admin;
use crate::config::{Config, ServerSettings};
use crate::delivery::{Engine, Parts};
use crate::ingress::Gateway;
use crate::metrics::Metrics;
use crate::ops::Operator;
use crate::reconcile::Reconciler;
pub use crate::reload::Reloader;
use crate::shutdown::Signal;
use crate::store::Store;

/// How often the store's listing indexes are trimmed of expired entries.
const UPKEEP_EVERY: Duration = Duration::from_secs(60);
/// The configured store, laid out as it was first (or as the config asks
/// of a new one), with its replay cache; the settings it has that would
/// lose claims are logged, counted and returned.
async fn open_store(
    config: &Config,
    metrics: &Metrics,
    clock: &clock::Clock,
) -> Result<(Store, Vec<String>), store::StoreError> {
    let fixed = &config.fixed;
    let mut store = Store::open(
        &fixed.store,
        &fixed.key_prefix,
        metrics.store.clone(),
        clock,
    )?;
    learn_layout(&mut store, config).await;
    if let Some(refusal) = config.live.refuses_layout(store.shards()) {
        return Err(store::StoreError::Layout(refusal));
    }
    let store = store.with_replay_cache(fixed.store.replay_cache_bytes);
    let longest_retention = config
        .live
        .routes
        .iter()
        .map(|route| route.claim.retention)
        .max()
        .unwrap_or(Duration::ZERO);
    let risks = store.risks(longest_retention).await;
    for risk in &risks {
        tracing::warn!("{risk}");
    }
    metrics.store_warnings.set(risks.len() as i64);
    Ok((store, risks))
}

/// Learn how the store lays out its scopes before anything is named by it
/// (`Store::learn_layout`), trying again every second while the store does
/// not answer: a Redis Cluster instance serves only once it knows.
async fn learn_layout(store: &mut Store, config: &Config) {
    let scopes = config.live.scopes();
    let wanted = config.fixed.store.backend.shards();
    loop {
        match store.learn_layout(&scopes, wanted).await {
            Ok(1) => return,
            Ok(shards) => {
                tracing::info!(shards, "each scope is spread over {shards} shards");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "could not learn the store's key layout; trying again in 1s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// A gateway assembled from its config: metrics registry, store, engine,
/// its entrances and the admin endpoints, ready to serve.
pub struct App {
    /// What every entrance holds: the ingress, the workers, the operator.
    engine: Arc<Engine>,
    /// The components each entrance keeps what it uses of (routes, store,
    /// metrics, clock, places, pauses, telemetry).
    pub parts: Parts,
    /// The operator's door, for the admin API and the upkeep.
    ops: Operator,
    /// The sender's entrance.
    gateway: Arc<Gateway>,
    /// Reconciliation with the senders' APIs, on its schedule.
    reconciler: Arc<Reconciler>,
    admin: Arc<Admin>,
    server: ServerSettings,
    tls: Option<server::Tls>,
    reloader: Arc<Reloader>,
    /// `[store.backup]`: the embedded file, its schedule, and when the
    /// newest backup already there was written (read before serving).
    backup: Option<(
        std::path::PathBuf,
        store::BackupSettings,
        Option<std::time::SystemTime>,
    )>,
}

impl App {
    /// Build everything `config` asks for; the embedded store opens (and
    /// locks) its file here.
    pub async fn new(config: &Config, clock: clock::Clock) -> Result<App, store::StoreError> {
        tls::install_default_provider();
        let registry = prometheus::Registry::new();
        let metrics = Metrics::new(&registry);
        let fixed = &config.fixed;
        let (store, risks) = open_store(config, &metrics, &clock).await?;
        metrics.store_timeout.set(fixed.store.timeout.as_secs_f64());
        metrics.tls_cert_expires(config.live.tls.as_ref().and_then(|tls| tls.not_after));
        let parts = Parts::new(config, store, metrics, clock);
        let engine = Arc::new(Engine::new(&parts));
        let ops = Operator::new(Arc::clone(&engine), parts.clone());
        // Paused routes and full queues are known before the first request.
        ops.refresh_pauses().await;
        ops.measure_queues().await;
        let tls = config.live.tls.as_ref().map(|tls| server::Tls {
            config: Arc::new(ArcSwap::new(Arc::clone(&tls.config))),
            handshake_failures: parts.metrics.tls_handshake_failures.clone(),
        });
        let reloader = Arc::new(Reloader::new(
            Arc::clone(&engine),
            parts.clone(),
            tls.as_ref().map(|tls| Arc::clone(&tls.config)),
            config,
        ));
        let gateway = Arc::new(Gateway::new(Arc::clone(&engine), parts.clone()));
        let reconciler = Arc::new(Reconciler::new(Arc::clone(&gateway), parts.clone()));
        let tokens = (fixed.admin.as_ref())
            .map(|admin| access::Tokens {
                operator: admin.token.clone(),
                reader: admin.read_token.clone(),
            })
            .unwrap_or_default();
        let admin = Arc::new(Admin::new(
            ops.clone(),
            parts.clone(),
            Arc::clone(&reloader),
            Arc::clone(&reconciler),
            tokens,
            risks,
        ));
        let backup = match (&fixed.store.backend, &fixed.store.backup) {
            (store::BackendSettings::Embedded { path, .. }, Some(settings)) => {
                let newest = backups::known(settings, &parts.metrics);
                Some((path.clone(), settings.clone(), newest))
            }
            _ => None,
        };
        Ok(App {
            backup,
            engine,
            parts,
            ops,
            gateway,
            reconciler,
            admin,
            server: fixed.server.clone(),
            tls,
            reloader,
        })
    }

    /// Applies reloaded configs to this gateway (SIGHUP, `POST
    /// /admin/reload`, `server.watch`).
    pub fn reloader(&self) -> Arc<Reloader> {
        Arc::clone(&self.reloader)
    }

    /// Serve on already bound listeners (public, and admin when given) until
    /// `shutdown` resolves, then drain.
    pub async fn serve(
        self,
        listener: TcpListener,
        admin_listener: Option<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) {
        // One signal for every task: the workers stop leasing when the
        // drain begins, the rest once it is over.
        let (signal, stage) = Signal::new();
        let admin_task =
            admin_listener.map(|listener| tokio::spawn(self.admin.serve(listener, stage.clone())));
        let workers = tokio::spawn(worker::run(
            Arc::clone(&self.engine),
            self.parts.clone(),
            stage.clone().draining(),
        ));
        let reconciling = tokio::spawn(Arc::clone(&self.reconciler).run(stage.clone()));
        let notifying = tokio::spawn(notify::run(self.parts.clone(), stage.clone().stopped()));
        let ops = self.ops.clone();
        let upkept = stage.clone().stopped();
        let upkeep = tokio::spawn(async move {
            let mut pauses = tokio::time::interval(traffic::PAUSE_POLL);
            let mut trim = tokio::time::interval(UPKEEP_EVERY);
            let mut queues = tokio::time::interval(traffic::bounds::MEASURE_EVERY);
            tokio::pin!(upkept);
            loop {
                tokio::select! {
                    () = &mut upkept => return,
                    _ = pauses.tick() => ops.refresh_pauses().await,
                    _ = trim.tick() => ops.trim_indexes().await,
                    _ = queues.tick() => ops.measure_queues().await,
                }
            }
        });
        let backups = self.backup.map(|(path, settings, newest)| {
            let metrics = self.parts.metrics.clone();
            tokio::spawn(backups::run(path, settings, newest, metrics, stage.clone()))
        });
        let watcher = self.server.watch.then(|| {
            let (reloader, watched) = (Arc::clone(&self.reloader), stage.clone().stopped());
            tokio::spawn(async move {
                tokio::select! {
                    () = reload::watch(reloader, reload::WATCH_EVERY) => {}
                    () = watched => {}
                }
            })
        });
        let shutdown = async {
            shutdown.await;
            // Stop leasing new events; running deliveries drain as claims.
            signal.drain();
        };
        let metrics = &self.parts.metrics;
        let gauges = server::ConnectionGauges {
            open: metrics.open_connections.clone(),
            parked: metrics.parked_connections.clone(),
        };
        server::serve(
            listener,
            self.gateway,
            &self.server,
            self.tls,
            gauges,
            shutdown,
        )
        .await;
        let _ = workers.await;
        let _ = reconciling.await;
        signal.stop();
        let _ = upkeep.await;
        let _ = notifying.await;
        self.parts.telemetry.shutdown().await;
        if let Some(watcher) = watcher {
            let _ = watcher.await;
        }
        if let Some(backups) = backups {
            let _ = backups.await;
        }
        if let Some(task) = admin_task {
            let _ = task.await;
        }
    }
}
