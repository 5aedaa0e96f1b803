//! The validated settings, split by how they change: [`Fixed`] is read once
//! at start-up, [`Live`] is what a reload (SIGHUP) swaps in. The split is the
//! one source of the reload rules: the runtime is built from `Live` alone,
//! and a reload compares `Fixed` to say what needs a restart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::Uri;

use super::route::{deliveries, RouteConfig};
use crate::cidr::Cidr;
pub use crate::headers::HeaderFormat;
use crate::secret::Secret;
pub use crate::store::{BackendSettings as Backend, StoreSettings, Synchronous};

/// Read once at start-up. A reload that changes any of it keeps the running
/// value and logs the setting as needing a restart.
#[derive(Debug, Clone, PartialEq)]
pub struct Fixed {
    pub server: ServerSettings,
    pub admin: Option<AdminSettings>,
    pub store: StoreSettings,
    /// Prepended to every stored key. Changing it would orphan every record.
    pub key_prefix: String,
    /// `[telemetry]`: OpenTelemetry tracing, when configured.
    pub telemetry: Option<TelemetrySettings>,
}

/// `[telemetry]` (hookgate extension).
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where spans go, OTLP/HTTP protobuf (`…/v1/traces`).
    pub otlp_endpoint: Uri,
    pub service_name: String,
    /// The share of traces kept (a sender's sampled parent is always kept).
    pub sample_ratio: f64,
    /// Put the idempotency key on spans (off: it can identify a customer).
    pub record_keys: bool,
}

impl Fixed {
    /// The settings that differ from `running`, named as in the file.
    pub fn changes_from(&self, running: &Fixed) -> Vec<String> {
        let (new, old) = (&self.server, &running.server);
        let mut changed = Vec::new();
        for (name, differs) in [
            ("server.listen", new.listen != old.listen),
            (
                "server.header_read_timeout",
                new.header_read_timeout != old.header_read_timeout,
            ),
            (
                "server.shutdown_grace",
                new.shutdown_grace != old.shutdown_grace,
            ),
            ("server.drain_delay", new.drain_delay != old.drain_delay),
            ("server.watch", new.watch != old.watch),
            ("server.idle_timeout", new.idle_timeout != old.idle_timeout),
            (
                "server.max_connections",
                new.max_connections != old.max_connections,
            ),
            ("server.tls on/off", new.tls != old.tls),
            ("[admin]", self.admin != running.admin),
            ("[store]", self.store != running.store),
            ("store.key_prefix", self.key_prefix != running.key_prefix),
            ("[telemetry]", self.telemetry != running.telemetry),
        ] {
            if differs {
                changed.push(name.to_owned());
            }
        }
        changed
    }
}

/// Swapped in atomically by a reload; requests already running finish on
/// the snapshot they started with.
#[derive(Debug)]
pub struct Live {
    pub routes: Vec<Arc<RouteConfig>>,
    pub limits: RequestLimits,
    /// What to do when the store cannot answer (docs/reference/configuration.md `store.on_error`).
    pub on_store_error: OnStoreError,
    /// `store.max_queued_bytes`: what every async route together may hold
    /// queued in the store (0: no bound but the routes' own).
    pub max_queued_bytes: u64,
    /// Peers whose `X-Forwarded-For` chain is kept (load balancers); from
    /// anyone else it is replaced by the peer's address.
    pub trusted_proxies: Vec<Cidr>,
    /// The listener's certificate; new connections get the reloaded one.
    pub tls: Option<TlsSettings>,
    /// `[store.encryption] keys` (docs/guide/stores.md, "Data at rest"): the first seals
    /// what is written from now on, any opens. Reloadable like secrets.
    pub encryption: Option<Arc<crate::seal::Keys>>,
    /// `[[notify]]`: where the on-call hears of an event (docs/guide/notifications.md,
    /// "Notifications").
    pub notify: Vec<Arc<NotifyTarget>>,
}

impl Live {
    /// Every route and every destination's delivery, and each notification
    /// target's.
    pub fn deliveries(&self) -> impl Iterator<Item = &Arc<RouteConfig>> {
        deliveries(&self.routes).chain(self.notify.iter().map(|target| &target.delivery))
    }

    /// Every scope the routes and their destinations name, each once, in
    /// order.
    pub fn scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self.deliveries().map(|r| r.keying.scope.clone()).collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Why these routes cannot run on a store that spreads each scope over
    /// `shards` shards: an ordered route needs every event of its scope in
    /// one hash slot (docs/guide/ordering.md, "Ordered delivery"). `store.shards = 1` is
    /// checked with the config; this catches a Redis Cluster store already
    /// laid out in more, which keeps its layout whatever the config says.
    pub fn refuses_layout(&self, shards: u16) -> Option<String> {
        if shards <= 1 {
            return None;
        }
        let ordered: Vec<&str> = (self.deliveries())
            .filter(|delivery| delivery.order().is_some())
            .map(|delivery| delivery.name.as_str())
            .collect();
        (!ordered.is_empty()).then(|| {
            format!(
                "ordered delivery ({}) needs each scope in one shard, and this store is laid out \
                 in {shards} shards per scope: order on a new key_prefix with store.shards = 1 \
                 (docs/operations/stores.md, \"Sharding an existing cluster store\")",
                ordered.join(", ")
            )
        })
    }
}

/// The public listener, as bound at start-up.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    /// Slow-header (slowloris) protection; also bounds a TLS handshake.
    pub header_read_timeout: Duration,
    /// How long SIGTERM waits for in-flight requests before releasing them.
    pub shutdown_grace: Duration,
    /// On SIGTERM, how long `/readyz` answers 503 while the public listener
    /// still accepts, before draining begins: time for a load balancer to
    /// stop sending (hookgate extension).
    pub drain_delay: Duration,
    /// Reload when the config file, a `${file:…}` secret or a certificate
    /// changes (hookgate extension).
    pub watch: bool,
    /// A connection with no request running for this long, once it has
    /// served one, is closed (hookgate extension; before its first request
    /// the bound is `header_read_timeout`).
    pub idle_timeout: Duration,
    /// Open connections beyond this wait in the kernel's accept queue
    /// (hookgate extension; bounds memory under a connection flood).
    pub max_connections: usize,
    /// Whether the listener terminates TLS (the certificate itself is live).
    pub tls: bool,
}

/// Per-request bounds on what a sender may send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestLimits {
    /// Bodies larger than this get 413 before any other work.
    pub max_body_bytes: usize,
    /// A sender that stalls mid-body is cut off after this (hookgate extension).
    pub body_read_timeout: Duration,
}

/// `server.tls`: where the certificate lives, and what was loaded from it.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub config: Arc<rustls::ServerConfig>,
    /// When the leaf certificate expires (Unix seconds), when readable.
    pub not_after: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdminSettings {
    pub listen: SocketAddr,
    /// May do everything the admin API offers.
    pub token: Option<Secret>,
    /// May read everything and change nothing (docs/guide/dead-letters.md, "Failed events and
    /// dead letters").
    pub read_token: Option<Secret>,
}

/// What to do when the store cannot answer (docs/reference/configuration.md `on_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// 503 + Retry-After; nothing is forwarded. The sender retries later.
    Reject,
    /// Forward without deduplication: availability over exactly-once.
    Forward,
}

/// What a `[[notify]]` target is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// An event parked as a dead letter.
    DeadLetter,
    /// An ordered route's entity held behind a dead event.
    EntityBlocked,
    /// A route's circuit breaker opened on this gateway.
    BreakerOpen,
    /// An async route's queue past 80% of a bound.
    QueueNearBound,
    /// A reconciliation pass found events the gateway never completed.
    ReconcileMissing,
}

impl NoticeKind {
    pub const ALL: [NoticeKind; 5] = [
        NoticeKind::DeadLetter,
        NoticeKind::EntityBlocked,
        NoticeKind::BreakerOpen,
        NoticeKind::QueueNearBound,
        NoticeKind::ReconcileMissing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::DeadLetter => "dead_letter",
            NoticeKind::EntityBlocked => "entity_blocked",
            NoticeKind::BreakerOpen => "breaker_open",
            NoticeKind::QueueNearBound => "queue_near_bound",
            NoticeKind::ReconcileMissing => "reconcile_missing",
        }
    }
}

/// How a `[[notify]]` target is written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyKind {
    /// A Slack incoming webhook: Block Kit.
    Slack,
    /// Any HTTPS endpoint: JSON signed as Standard Webhooks.
    Webhook,
    /// PagerDuty's Events API v2.
    PagerDuty,
}

/// One `[[notify]]` target: what it hears of, and its delivery — an async
/// delivery named `@notify/NAME` in the scope of that name, which the
/// workers deliver as they deliver any route's (retried, rate limited,
/// counted), and which no sender can reach.
#[derive(Debug)]
pub struct NotifyTarget {
    pub name: String,
    pub kind: NotifyKind,
    pub on: Vec<NoticeKind>,
    /// The routes it hears of; `None`: every route.
    pub routes: Option<Vec<String>>,
    /// PagerDuty's integration key.
    pub routing_key: Option<Secret>,
    /// The operator console's address (`https://…/ui`), for links.
    pub console_url: Option<String>,
    /// Notices within this long of the first are sent as one message.
    pub group_within: Duration,
    pub delivery: Arc<RouteConfig>,
}

impl NotifyTarget {
    /// Whether the target hears of `kind` on `route`.
    pub fn wants(&self, kind: NoticeKind, route: &str) -> bool {
        self.on.contains(&kind)
            && (self.routes.as_ref()).is_none_or(|routes| routes.iter().any(|r| r == route))
    }
}
