//! A route's delivery settings, validated: sync or async (the queue's
//! backoff, `max_age`, `max_in_flight`, the hybrid `respond_within`), and
//! its traffic controls (`allow_from`, the circuit breaker, the upstream
//! rate limit).

use std::sync::Arc;
use std::time::Duration;

use super::locate::KeyPath;
use super::raw::RawRoute;
use super::route::RouteConfig;
use super::route::{AsyncDelivery, DeliveryMode, RateSettings, TrafficSettings, DEFAULT_QUEUE};
use super::settings::Backend as BackendSettings;
use super::validate::Validator;
use crate::key::KeySource;
use crate::order::{OnBlocked, OrderSettings};

impl Validator<'_> {
    /// `delivery` and the async settings; those are refused on a sync route
    /// (a typo must not look like it took effect).
    pub(super) fn delivery(
        &mut self,
        at: &KeyPath,
        raw: &RawRoute,
        upstream_timeout: Duration,
    ) -> DeliveryMode {
        let is_async = self.choice(
            &at.key("delivery"),
            raw.delivery.as_ref(),
            &[("sync", false), ("async", true)],
            false,
        );
        if !is_async {
            self.refuse_async_settings(at, raw);
            return DeliveryMode::Sync;
        }
        let accept_status = self.status(
            &at.key("accept_status"),
            raw.accept_status,
            200..=299,
            "must be a 2xx status: the event is stored, the sender must stop retrying",
        );
        let (backoff_initial, backoff_max) = self.retry_backoff(at, raw);
        let max_age = self.duration(
            &at.key("max_age"),
            raw.max_age.as_ref(),
            DEFAULT_QUEUE.max_age,
        );
        let page_after = self.duration(
            &at.key("page_after"),
            raw.page_after.as_ref(),
            DEFAULT_QUEUE.page_after,
        );
        if page_after >= max_age {
            self.fail(
                &at.key("page_after"),
                "must be shorter than max_age: past max_age the event is a dead letter, and nobody was paged while it waited",
            );
        }
        let max_in_flight = self.size(
            &at.key("max_in_flight"),
            raw.max_in_flight,
            DEFAULT_QUEUE.max_in_flight as u64,
            10_000,
        );
        let max_queued = raw.max_queued.unwrap_or(DEFAULT_QUEUE.max_queued);
        let max_queued_bytes = self.bytes(
            &at.key("max_queued_bytes"),
            raw.max_queued_bytes.as_ref(),
            DEFAULT_QUEUE.max_queued_bytes,
        );
        let order = self.order(at, raw);
        let respond_within = self.respond_within(at, raw, upstream_timeout, order.is_some());
        DeliveryMode::Async(AsyncDelivery {
            accept_status,
            backoff_initial,
            backoff_max,
            max_age,
            page_after,
            max_in_flight,
            max_queued,
            max_queued_bytes,
            respond_within,
            order,
        })
    }

    /// `respond_within`: shorter than `upstream_timeout`, and not on an
    /// ordered route.
    fn respond_within(
        &mut self,
        at: &KeyPath,
        raw: &RawRoute,
        upstream_timeout: Duration,
        ordered: bool,
    ) -> Option<Duration> {
        let respond_within = raw
            .respond_within
            .as_ref()
            .map(|raw| self.duration(&at.key("respond_within"), Some(raw), Duration::from_secs(5)));
        if respond_within.is_some_and(|within| within >= upstream_timeout) {
            self.fail(
                &at.key("respond_within"),
                "respond_within must be shorter than upstream_timeout",
            );
        }
        if ordered && respond_within.is_some() {
            self.fail(
                &at.key("respond_within"),
                "not with order_by: an ordered event waits for its entity's earlier events, so it cannot be forwarded at once",
            );
        }
        respond_within
    }

    /// A sync route's async settings, each refused.
    fn refuse_async_settings(&mut self, at: &KeyPath, raw: &RawRoute) {
        let set = [
            ("accept_status", raw.accept_status.is_some()),
            ("retry_backoff", raw.retry_backoff.is_some()),
            ("max_age", raw.max_age.is_some()),
            ("max_in_flight", raw.max_in_flight.is_some()),
            ("max_queued", raw.max_queued.is_some()),
            ("max_queued_bytes", raw.max_queued_bytes.is_some()),
            ("respond_within", raw.respond_within.is_some()),
            ("order_by", raw.order_by.is_some()),
            ("stale_by", raw.stale_by.is_some()),
            ("reorder_window", raw.reorder_window.is_some()),
            ("on_blocked", raw.on_blocked.is_some()),
        ];
        for (name, _) in set.iter().filter(|(_, set)| *set) {
            self.fail(&at.key(name), "only for delivery = \"async\"");
        }
    }

    /// `retry_backoff = { initial, max }`.
    fn retry_backoff(&mut self, at: &KeyPath, raw: &RawRoute) -> (Duration, Duration) {
        let backoff = raw.retry_backoff.as_ref();
        let backoff_at = at.key("retry_backoff");
        let backoff_initial = self.duration(
            &backoff_at.key("initial"),
            backoff.and_then(|b| b.initial.as_ref()),
            DEFAULT_QUEUE.backoff_initial,
        );
        let backoff_max = self.duration(
            &backoff_at.key("max"),
            backoff.and_then(|b| b.max.as_ref()),
            DEFAULT_QUEUE.backoff_max,
        );
        if backoff_max < backoff_initial {
            self.fail(&backoff_at.key("max"), "must be at least initial");
        }
        (backoff_initial, backoff_max)
    }

    /// `order_by` and what goes with it; those are refused without it.
    fn order(&mut self, at: &KeyPath, raw: &RawRoute) -> Option<OrderSettings> {
        let Some(text) = &raw.order_by else {
            let set = [
                ("stale_by", raw.stale_by.is_some()),
                ("reorder_window", raw.reorder_window.is_some()),
                ("on_blocked", raw.on_blocked.is_some()),
            ];
            for (name, _) in set.iter().filter(|(_, set)| *set) {
                self.fail(&at.key(name), "only with order_by");
            }
            return None;
        };
        let by = self.order_source(&at.key("order_by"), text);
        let stale_by = raw
            .stale_by
            .as_ref()
            .and_then(|text| self.order_source(&at.key("stale_by"), text));
        let reorder_window = self.duration_or_zero(
            &at.key("reorder_window"),
            raw.reorder_window.as_ref(),
            Duration::ZERO,
        );
        let on_blocked = self.choice(
            &at.key("on_blocked"),
            raw.on_blocked.as_ref(),
            &[OnBlocked::Wait, OnBlocked::Skip].map(|choice| (choice.as_str(), choice)),
            OnBlocked::Wait,
        );
        Some(OrderSettings {
            by: by?,
            stale_by,
            reorder_window,
            on_blocked,
        })
    }

    /// Ordered routes need a store that keeps an entity's order (docs/guide/ordering.md,
    /// "Ordered delivery"): one whose every event of a scope sits where one
    /// atomic step reaches it — every backend, a Redis Cluster laid out in
    /// one shard per scope.
    pub(super) fn orders_kept_by(
        &mut self,
        at: &KeyPath,
        routes: &[Arc<RouteConfig>],
        backend: &BackendSettings,
    ) {
        let refusal = match backend {
            BackendSettings::RedisCluster { shards, .. } if *shards > 1 => format!(
                "a cluster store keeps an entity's events in one hash slot only when each \
                 scope is one shard: set store.shards = 1 (a store already laid out in {shards} \
                 shards cannot order)"
            ),
            _ => return,
        };
        for (i, route) in routes.iter().enumerate() {
            let ordered = route.order().is_some()
                || (route.destinations.iter()).any(|destination| destination.order().is_some());
            if ordered {
                self.fail(&at.index(i).key("order_by"), refusal.clone());
            }
        }
    }

    /// One key source (docs/reference/configuration.md, "`[[routes]]`", its `key`):
    /// `body-sha256` names no entity and no time, so it is refused.
    fn order_source(&mut self, at: &KeyPath, text: &str) -> Option<KeySource> {
        let text = self.string(at, text)?;
        match KeySource::parse(&text) {
            Ok(KeySource::BodySha256) => {
                self.fail(
                    at,
                    "body-sha256 is different for every event: use a field of the event",
                );
                None
            }
            Ok(source) => Some(source),
            Err(error) => {
                self.fail(at, error);
                None
            }
        }
    }

    /// `upstream_rate = "N/s"` (or `/m`, `/h`) and `upstream_burst`, by
    /// default the calls of one second (at least 1).
    pub(super) fn rate(
        &mut self,
        at: &KeyPath,
        rate: &Option<String>,
        upstream_burst: Option<u64>,
    ) -> Option<RateSettings> {
        let Some(text) = rate else {
            if upstream_burst.is_some() {
                self.fail(&at.key("upstream_burst"), "only with upstream_rate");
            }
            return None;
        };
        let key = at.key("upstream_rate");
        let text = self.string(&key, text)?;
        let parsed = super::value::parse_rate(&text);
        let Some(per_second) = parsed else {
            self.fail(
                &key,
                format!("{text:?} is not a rate like \"50/s\", \"300/m\" or \"10/h\" (at least 1/h, at most 1000000 per unit)"),
            );
            return None;
        };
        let default_burst = per_second.ceil().max(1.0) as u64;
        let burst = self.size(
            &at.key("upstream_burst"),
            upstream_burst,
            default_burst,
            1_000_000,
        );
        Some(RateSettings {
            per_second,
            burst: burst as u32,
        })
    }

    /// `allow_from`, `circuit_breaker`, `upstream_rate` and `upstream_burst`.
    pub(super) fn traffic(&mut self, at: &KeyPath, raw: &RawRoute) -> TrafficSettings {
        let allow_from = raw.allow_from.as_deref().map(|ranges| {
            if ranges.is_empty() {
                self.fail(
                    &at.key("allow_from"),
                    "list at least one address range (leave allow_from out to admit every address)",
                );
            }
            self.cidrs(&at.key("allow_from"), ranges)
        });
        let circuit_breaker = (raw.circuit_breaker.as_ref())
            .map(|breaker| self.breaker(&at.key("circuit_breaker"), breaker));
        let upstream_rate = self.rate(at, &raw.upstream_rate, raw.upstream_burst);
        TrafficSettings {
            allow_from,
            circuit_breaker,
            upstream_rate,
        }
    }
}
