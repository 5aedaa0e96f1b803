//! One `[[routes]]` entry, validated: [`RouteConfig`], in the sections a
//! route's table is read in — how its senders are verified, where it
//! calls, how an event is keyed, how long a claim lives, when a failing
//! event gives up, its traffic controls — each field named as its TOML
//! key; and the values those sections take (the delivery mode, the
//! breaker, the rate, what to do on a mismatch or an unknown outcome).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode, Uri};
use rustls::pki_types::CertificateDer;

use super::reconcile::ReconcileSettings;
use crate::cidr::Cidr;
use crate::headers::HeaderFormat;
use crate::key::{KeySource, OnMissingKey};
use crate::order::{OrderSettings, Place};
use crate::secret::Secret;
use crate::verify::{Profile, Verifier};

/// One `[[routes]]` entry, validated.
#[derive(Debug)]
pub struct RouteConfig {
    pub name: String,
    pub path: String,
    pub methods: Vec<Method>,
    /// How its senders are verified.
    pub verify: VerifySettings,
    /// Where its deliveries go.
    pub call: CallSettings,
    /// How an event is keyed.
    pub keying: KeySettings,
    /// How long a claim and its record live.
    pub claim: ClaimSettings,
    /// When a failing event gives up, and what it answers then.
    pub failures: FailureSettings,
    /// Senders admitted by address, and the brakes on upstream calls
    /// (docs/guide/traffic-control.md, "Traffic control").
    pub traffic: TrafficSettings,
    pub delivery: DeliveryMode,
    /// Which events the route (or destination) takes; the others are
    /// answered and recorded as filtered, never forwarded (to it).
    pub filter: Option<crate::filter::EventFilter>,
    /// `[[routes.destinations]]`: the deliveries an accepted event is
    /// fanned out to, each a route of its own (`destinations.rs`); empty
    /// for a route with one `upstream`.
    pub destinations: Vec<Arc<RouteConfig>>,
    /// On a destination's delivery: the route and destination it is.
    pub destination_of: Option<DestinationOf>,
    /// `[routes.reconcile]`: the sender's API asked, on a schedule, for
    /// what the gateway never completed.
    pub reconcile: Option<Arc<ReconcileSettings>>,
    /// A `[[notify]]` webhook's delivery: each attempt is signed as
    /// Standard Webhooks with this key (`webhook-id` is the event's key,
    /// `webhook-timestamp` the attempt's time).
    pub signs: Option<Arc<Secret>>,
}

/// `[routes.verify]`: the sender's scheme, and the verifier built from it.
#[derive(Debug)]
pub struct VerifySettings {
    pub scheme: &'static Profile,
    pub verifier: Verifier,
}

/// `upstream`, `upstream_ca`, `upstream_timeout`.
#[derive(Debug, Clone)]
pub struct CallSettings {
    pub upstream: Uri,
    /// The file (shown by `check`) and the CA certificates read from it,
    /// trusted for an https upstream beside the Mozilla roots.
    pub upstream_ca: Option<UpstreamCa>,
    pub upstream_timeout: Duration,
}

/// `key`, `scope`, `on_mismatch`, `on_missing_key`, `idempotency_header`
/// and its format.
#[derive(Debug, Clone)]
pub struct KeySettings {
    pub key: Vec<KeySource>,
    pub scope: String,
    pub on_mismatch: OnMismatch,
    /// A signed delivery that carries no key (handshakes, commands).
    pub on_missing_key: OnMissingKey,
    /// `None` when the operator disabled injection with `""`.
    pub idempotency_header: Option<HeaderName>,
    /// How the key is written in `idempotency_header`.
    pub idempotency_header_format: HeaderFormat,
}

/// `processing_ttl`, `retention`, `on_unknown`, `replay_guard`,
/// `max_cached_body_bytes`.
#[derive(Debug, Clone)]
pub struct ClaimSettings {
    /// The lease on a claim, renewed while the upstream call runs.
    pub processing_ttl: Duration,
    pub retention: Duration,
    /// A call whose outcome is unknown (timeout, connection broken after the
    /// request was sent): hold the claim until its lease runs out, or release.
    pub on_unknown: OnUnknown,
    /// Also claim the verified body's SHA-256, so a signed body re-sent under
    /// a new (unsigned) key is a duplicate of the first delivery.
    pub replay_guard: bool,
    pub max_cached_body_bytes: usize,
}

/// `max_attempts`, `dead_letter_status`, `dead_letter_retention`,
/// `page_after` (a sync route's).
#[derive(Debug, Clone)]
pub struct FailureSettings {
    /// Attempts before an event is parked as a dead letter; 0: unlimited.
    pub max_attempts: u32,
    /// What a delivery of a dead event gets (2xx stops the sender's retries).
    pub dead_letter_status: StatusCode,
    /// How long failed and dead records (with their requests) are kept.
    pub dead_letter_retention: Duration,
    /// A sync route's `page_after`: a failed event with no later delivery
    /// for this long is stuck work (`hookgate_oldest_failed_seconds`, the
    /// `HookgateFailedEventStuck` page). 15 minutes by default for a sender
    /// that never retries on its own (GitHub); none for the others, whose
    /// retries carry the event. An async route's is its queue's.
    pub page_failed_after: Option<Duration>,
}

/// `allow_from`, `circuit_breaker`, `upstream_rate` and `upstream_burst`.
#[derive(Debug, Clone, Default)]
pub struct TrafficSettings {
    /// `None`: every address.
    pub allow_from: Option<Vec<Cidr>>,
    /// Stop calling a failing upstream for a while.
    pub circuit_breaker: Option<BreakerSettings>,
    /// A token bucket towards the upstream, per gateway instance.
    pub upstream_rate: Option<RateSettings>,
}

/// Each of `routes`, each followed by its destinations' deliveries.
pub fn deliveries(routes: &[Arc<RouteConfig>]) -> impl Iterator<Item = &Arc<RouteConfig>> {
    (routes.iter()).flat_map(|route| std::iter::once(route).chain(&route.destinations))
}

/// Which route's destination a delivery is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationOf {
    pub route: String,
    pub destination: String,
}

impl RouteConfig {
    /// The configured route's name: a destination's delivery answers with
    /// its route's (the `route` label, the admin API's route).
    pub fn route_name(&self) -> &str {
        self.destination_of
            .as_ref()
            .map_or(&self.name, |of| &of.route)
    }

    /// The destination's name, `""` for a route with one upstream (the
    /// `destination` label).
    pub fn destination_name(&self) -> &str {
        self.destination_of
            .as_ref()
            .map_or("", |of| &of.destination)
    }

    /// The destination's name, on a destination's delivery (the admin
    /// API's `destination`).
    pub fn as_destination(&self) -> Option<&str> {
        (self.destination_of.as_ref()).map(|of| of.destination.as_str())
    }

    /// Whether the route hands its events to destinations instead of
    /// calling an upstream.
    pub fn fans_out(&self) -> bool {
        !self.destinations.is_empty()
    }

    /// The order its deliveries keep (docs/guide/ordering.md, "Ordered delivery"): an
    /// async route's or destination's `order_by`. A route with
    /// destinations calls no upstream: each destination orders, holds and
    /// judges staleness of its own deliveries ([`RouteConfig::hand_out_order`]).
    pub fn order(&self) -> Option<&OrderSettings> {
        match &self.delivery {
            DeliveryMode::Async(settings) if !self.fans_out() => settings.order.as_ref(),
            _ => None,
        }
    }

    /// A route with destinations and `order_by`: its events are handed
    /// out one at a time per entity, in the order they were accepted, so
    /// that each destination's own order starts from the sender's.
    pub fn hand_out_order(&self) -> Option<&OrderSettings> {
        match &self.delivery {
            DeliveryMode::Async(settings) if self.fans_out() => settings.order.as_ref(),
            _ => None,
        }
    }

    /// The order this route's queue is leased in: its deliveries' order,
    /// or its hand-outs'.
    pub fn queue_order(&self) -> Option<&OrderSettings> {
        self.order().or(self.hand_out_order())
    }

    /// Where an event this route accepts (or a destination is handed)
    /// stands in its entity's order, and how long it waits before it may
    /// be leased (`reorder_window`); `None` when it is delivered
    /// unordered. A hand-out keeps the acceptance's place alone: no value
    /// (staleness is each destination's to judge, by what it delivered)
    /// and no wait (each destination holds its own window).
    pub fn order_place(
        &self,
        headers: &http::HeaderMap,
        body: &[u8],
        body_sha256: &str,
    ) -> Option<(Place, Duration)> {
        if let Some(order) = self.order() {
            let place = order.place(headers, body, body_sha256)?;
            return Some((place, order.reorder_window));
        }
        let place = (self.hand_out_order()?).place(headers, body, body_sha256)?;
        Some((
            Place {
                value: None,
                ..place
            },
            Duration::ZERO,
        ))
    }

    /// The destination named `name` of this route.
    pub fn destination(&self, name: &str) -> Option<&Arc<RouteConfig>> {
        (self.destinations.iter()).find(|destination| destination.destination_name() == name)
    }
}

/// Same key, different body (docs/guide/what-a-sender-sees.md, "What a sender sees").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMismatch {
    Reject,
    Replay,
}

/// An upstream call whose outcome is unknown (docs/guide/what-a-sender-sees.md, "What a sender sees").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnknown {
    /// Keep the claim, unrenewed, until its lease runs out: a prompt retry
    /// gets 409 instead of running beside a call that may still be working.
    Hold,
    /// Release at once: the retry is forwarded at once.
    Release,
}

/// How a route delivers (docs/guide/async-delivery.md, "Asynchronous delivery").
// One per route, built at load and never moved on a request's path: the
// async variant's size costs nothing a box would save.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryMode {
    /// Forward while the sender waits, and answer with the upstream's word.
    Sync,
    /// Answer once the event is stored; workers deliver it with backoff.
    Async(AsyncDelivery),
}

/// An async route's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AsyncDelivery {
    /// What the sender gets once its event is durably stored.
    pub accept_status: StatusCode,
    /// The first retry's ceiling; each later one doubles, up to `backoff_max`
    /// (full jitter: the wait is random below the ceiling).
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// An event still undelivered this long after it was accepted is dead.
    pub max_age: Duration,
    /// The oldest undelivered accepted event older than this is an
    /// incident (`hookgate_route_page_after_seconds`, the paging alert).
    pub page_after: Duration,
    /// Concurrent upstream calls of this route, per gateway instance.
    pub max_in_flight: usize,
    /// Events the route's queue may hold undelivered before a new one is
    /// answered 503 `queue_full` (0: no bound of its own).
    pub max_queued: u64,
    /// The same in stored bytes (0: none).
    pub max_queued_bytes: u64,
    /// Hybrid: try synchronously this long first.
    pub respond_within: Option<Duration>,
    /// One entity's events in order, one at a time (docs/guide/ordering.md, "Ordered
    /// delivery").
    pub order: Option<OrderSettings>,
}

/// The queue's settings when the config names none: what an async route
/// starts from, and what a sync route's accepted records are retried by (a
/// route reloaded from async to sync, or sharing a scope with an async one).
pub static DEFAULT_QUEUE: AsyncDelivery = AsyncDelivery {
    accept_status: StatusCode::ACCEPTED,
    backoff_initial: Duration::from_secs(5),
    backoff_max: Duration::from_secs(3600),
    max_age: Duration::from_secs(3 * 86_400),
    page_after: Duration::from_secs(15 * 60),
    max_in_flight: 16,
    max_queued: 100_000,
    max_queued_bytes: 1 << 30,
    respond_within: None,
    order: None,
};

impl AsyncDelivery {
    /// The longest an accepted event is retried before it is parked: the
    /// sum of the backoff ceilings between `max_attempts` attempts, or
    /// `max_age` when that comes first (always, with `max_attempts` 0).
    pub fn horizon(&self, max_attempts: u32) -> Duration {
        if max_attempts == 0 {
            return self.max_age;
        }
        let mut total = Duration::ZERO;
        let mut ceiling = self.backoff_initial;
        for _ in 1..max_attempts {
            total += ceiling.min(self.backoff_max);
            if total >= self.max_age {
                return self.max_age;
            }
            ceiling = ceiling.saturating_mul(2);
        }
        total.min(self.max_age)
    }
}

impl Default for AsyncDelivery {
    fn default() -> Self {
        DEFAULT_QUEUE.clone()
    }
}

impl DeliveryMode {
    pub fn is_async(&self) -> bool {
        matches!(self, DeliveryMode::Async(_))
    }

    /// The queue settings that retry this route's accepted records.
    pub fn queue(&self) -> &AsyncDelivery {
        match self {
            DeliveryMode::Async(settings) => settings,
            DeliveryMode::Sync => &DEFAULT_QUEUE,
        }
    }
}

/// A route's `circuit_breaker`: after `failures` failed calls within
/// `window`, no call for `open_for`; then one probe decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    pub failures: u32,
    pub window: Duration,
    pub open_for: Duration,
}

/// A route's `upstream_rate` and `upstream_burst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSettings {
    /// Tokens added per second.
    pub per_second: f64,
    /// The bucket's size: calls allowed at once after a quiet spell.
    pub burst: u32,
}

/// A route's `upstream_ca`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamCa {
    pub path: PathBuf,
    pub certs: Vec<CertificateDer<'static>>,
}
