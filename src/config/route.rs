//! One `[[routes]]` entry, validated: [`RouteConfig`], in the sections a
//! route's table is read in — how its senders are verified, where it
//! calls, how an event is keyed, how long a claim lives, when a failing
//! event gives up, its traffic controls — each field named as its TOML
//! key.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode, Uri};

use super::reconcile::ReconcileSettings;
use super::settings::{
    BreakerSettings, DeliveryMode, HeaderFormat, OnMismatch, OnUnknown, RateSettings, UpstreamCa,
};
use crate::cidr::Cidr;
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
