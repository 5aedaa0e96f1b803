//! Route matching (docs/guide/what-a-sender-sees.md, "What a sender sees": exact path, query ignored, then method),
//! and each route's runtime companion: its pooled upstream client.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use http::Method;

use crate::cidr::Cidr;
use crate::config::{Live, NotifyTarget, OnStoreError, RequestLimits, RouteConfig, UpstreamCa};
use crate::error::GatewayError;
use crate::metrics::{Metrics, RouteSeries};
use crate::traffic::{Controls, RouteControls};
use crate::upstream::Upstream;

/// A configured route, ready to forward.
pub struct Route {
    pub config: Arc<RouteConfig>,
    /// Its name, shared with its claims for their log lines.
    pub label: Arc<str>,
    /// Shared by every route with the same TLS roots, so keep-alive
    /// connections are pooled across them (and kept across reloads).
    pub upstream: Upstream,
    /// Its metric series, looked up once per reload instead of once per
    /// request.
    pub series: RouteSeries,
    /// Its circuit breaker and upstream rate limit (docs/guide/traffic-control.md, "Traffic control"), kept across
    /// reloads.
    pub controls: RouteControls,
}

impl Deref for Route {
    type Target = RouteConfig;

    fn deref(&self) -> &RouteConfig {
        &self.config
    }
}

/// Routes by exact path, and the deliveries of their destinations (by
/// name, `route/destination`, never by path: no sender reaches them);
/// built once per loaded (or reloaded) config.
pub struct RouteTable {
    by_path: HashMap<String, Arc<Route>>,
    destinations: Vec<Arc<Route>>,
}

/// The pooled upstream clients, one per set of trusted roots (the Mozilla
/// roots, plus a route's `upstream_ca` when it has one). A reload reuses the
/// client of every route whose roots did not change, so its keep-alive
/// connections survive a SIGHUP.
#[derive(Default)]
pub struct Upstreams {
    clients: Mutex<Vec<(Option<UpstreamCa>, Upstream)>>,
}

impl Upstreams {
    /// The client for each of `routes`, in order: a running one where the
    /// roots match, a new one otherwise. Clients no route uses any more are
    /// dropped once the requests still using them finish.
    fn for_routes(&self, routes: &[Arc<RouteConfig>]) -> Vec<Upstream> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let mut kept: Vec<(Option<UpstreamCa>, Upstream)> = Vec::new();
        let picked = routes
            .iter()
            .map(|route| {
                let ca = &route.call.upstream_ca;
                if let Some((_, client)) = kept.iter().find(|(roots, _)| roots == ca) {
                    return client.clone();
                }
                let client = match clients.iter().find(|(roots, _)| roots == ca) {
                    Some((_, client)) => client.clone(),
                    None => Upstream::new(ca.as_ref().map_or(&[][..], |ca| &ca.certs)),
                };
                kept.push((ca.clone(), client.clone()));
                client
            })
            .collect();
        *clients = kept;
        picked
    }
}

impl RouteTable {
    /// The table of `live`'s routes, their destinations' deliveries and
    /// its notification targets' (those two reached by name only).
    pub fn new(live: &Live, upstreams: &Upstreams, controls: &Controls, metrics: &Metrics) -> Self {
        let deliveries: Vec<Arc<RouteConfig>> = live.deliveries().cloned().collect();
        let clients = upstreams.for_routes(&deliveries);
        let controls = controls.for_routes(&deliveries, metrics);
        let (mut by_path, mut destinations) = (HashMap::new(), Vec::new());
        for ((config, upstream), controls) in deliveries.iter().zip(clients).zip(controls) {
            let route = Arc::new(Route {
                config: Arc::clone(config),
                label: Arc::from(config.name.as_str()),
                upstream,
                series: RouteSeries::new(metrics, &config.name),
                controls,
            });
            match config.destination_of {
                Some(_) => destinations.push(route),
                None => {
                    by_path.insert(config.path.clone(), route);
                }
            }
        }
        Self {
            by_path,
            destinations,
        }
    }

    /// Every route and every destination's delivery, sorted by name (a
    /// route's destinations right after it).
    pub fn all(&self) -> Vec<Arc<Route>> {
        let mut routes: Vec<Arc<Route>> = (self.by_path.values())
            .chain(&self.destinations)
            .cloned()
            .collect();
        routes.sort_by(|a, b| a.name.cmp(&b.name));
        routes
    }

    /// The route or destination delivery named `name` (admin API).
    pub fn named(&self, name: &str) -> Option<&Arc<Route>> {
        (self.by_path.values())
            .chain(&self.destinations)
            .find(|route| route.name == name)
    }

    /// The route for `path`, if `method` is one it accepts.
    pub fn resolve(&self, path: &str, method: &Method) -> Result<&Arc<Route>, GatewayError> {
        let route = self.by_path.get(path).ok_or(GatewayError::RouteNotFound)?;
        if route.methods.contains(method) {
            Ok(route)
        } else {
            Err(GatewayError::MethodNotAllowed {
                allowed: route.methods.clone(),
            })
        }
    }
}

/// The live part of the config, ready to serve.
pub struct Runtime {
    pub routes: RouteTable,
    /// `[[notify]]`: the targets, each delivered as a route in `routes`.
    pub notify: Vec<Arc<NotifyTarget>>,
    pub on_store_error: OnStoreError,
    /// `store.max_queued_bytes` (0: none).
    pub max_queued_bytes: u64,
    pub limits: RequestLimits,
    pub trusted_proxies: Vec<Cidr>,
}

impl Runtime {
    fn new(live: &Live, upstreams: &Upstreams, controls: &Controls, metrics: &Metrics) -> Self {
        Self {
            routes: RouteTable::new(live, upstreams, controls, metrics),
            notify: live.notify.clone(),
            on_store_error: live.on_store_error,
            max_queued_bytes: live.max_queued_bytes,
            limits: live.limits,
            trusted_proxies: live.trusted_proxies.clone(),
        }
    }
}

/// What a reload swaps: the routes with their secrets, upstreams and
/// controls, and the request limits. Each request loads it once and keeps
/// that snapshot to the end, so in-flight requests finish on the config
/// they started with; the workers and operators read the routes here too.
pub struct LiveRoutes {
    runtime: ArcSwap<Runtime>,
    /// The upstream clients, kept across reloads for their pooled
    /// connections.
    upstreams: Upstreams,
    /// Each route's breaker and bucket, kept across reloads.
    controls: Controls,
}

impl LiveRoutes {
    pub fn new(live: &Live, metrics: &Metrics) -> Self {
        let upstreams = Upstreams::default();
        let controls = Controls::default();
        let runtime = Runtime::new(live, &upstreams, &controls, metrics);
        Self {
            runtime: ArcSwap::from_pointee(runtime),
            upstreams,
            controls,
        }
    }

    /// Swap in `live`; requests already running keep the old snapshot. A
    /// destination the new config removed is retired: it takes no new
    /// event, and goes on delivering the events already handed to it, with
    /// its last settings, until this gateway restarts (docs/operations/fleets.md,
    /// "Removing a destination").
    pub fn swap(&self, live: &Live, metrics: &Metrics) {
        let mut runtime = Runtime::new(live, &self.upstreams, &self.controls, metrics);
        let old = self.runtime.load();
        for retired in &old.routes.destinations {
            if runtime.routes.named(&retired.name).is_none() {
                tracing::warn!(destination = %retired.name,
                    "destination removed: it takes no new event, and delivers those already handed to it until this gateway restarts");
                runtime.routes.destinations.push(Arc::clone(retired));
            }
        }
        self.runtime.store(Arc::new(runtime));
    }

    /// The snapshot of now.
    pub fn load(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    /// Every current route, sorted by name.
    pub fn all(&self) -> Vec<Arc<Route>> {
        self.runtime.load().routes.all()
    }

    /// The current route named `name`.
    pub fn named(&self, name: &str) -> Option<Arc<Route>> {
        self.runtime.load().routes.named(name).cloned()
    }
}
