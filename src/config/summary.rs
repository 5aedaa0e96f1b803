//! What `hookgate check` prints: the listeners, the store and every route in
//! a few readable lines, then the warnings. Never a secret.

use std::time::Duration;

use http::Method;

use super::{Backend, Config, DeliveryMode, NotifyKind, NotifyTarget, OnStoreError, RouteConfig};
use crate::clock::{humanize, roughly};
use crate::order::OnBlocked;

impl Config {
    /// The human summary `hookgate check` prints.
    pub fn summary(&self) -> String {
        let Config { fixed, live, .. } = self;
        let backend = backend(&fixed.store.backend);
        let mut out = format!(
            "config {} is valid\nlisten {} ({})\nstore {} (key prefix {:?}, timeout {}, on_error {})\n",
            self.source.display(),
            fixed.server.listen,
            match &live.tls {
                Some(tls) => format!("TLS 1.2/1.3 with {}, ALPN h2 + http/1.1", tls.cert.display()),
                None => "plain HTTP/1.1 + h2c".to_owned(),
            },
            backend,
            fixed.key_prefix,
            humanize(fixed.store.timeout),
            match live.on_store_error {
                OnStoreError::Reject => "reject",
                OnStoreError::Forward => "forward",
            },
        );
        if let Some(keys) = &live.encryption {
            let ids = keys.ids();
            out += &format!(
                "data at rest sealed (AES-256-GCM): writes under key {}, {} key(s) open\n",
                ids[0],
                ids.len()
            );
        }
        if let Some(admin) = &fixed.admin {
            out += &format!(
                "admin {} (admin API {}{})\n",
                admin.listen,
                if admin.token.is_some() { "on" } else { "off" },
                if admin.read_token.is_some() {
                    ", read-only token on"
                } else {
                    ""
                }
            );
        }
        out += &format!("{} route(s):\n", live.routes.len());
        for route in &live.routes {
            out += &route_summary(route);
        }
        for target in &live.notify {
            out += &notify_summary(target);
        }
        for warning in &self.warnings {
            out += &format!("warning: {warning}\n");
        }
        out
    }
}

/// The store, in a few words.
fn backend(backend: &Backend) -> String {
    match backend {
        Backend::Embedded { path, .. } => format!(
            "embedded {} (one gateway instance per file; use redis for several)",
            path.display()
        ),
        Backend::Redis { .. } => "redis".to_owned(),
        Backend::RedisSentinel {
            sentinels, master, ..
        } => format!(
            "redis-sentinel (primary {master:?}, asked of {} sentinels)",
            sentinels.len()
        ),
        Backend::RedisCluster { nodes, shards } => format!(
            "redis-cluster ({} seed nodes, a new store's scopes in {shards} shards)",
            nodes.len()
        ),
        Backend::Memory => "memory (nothing survives a restart)".to_owned(),
        Backend::Postgres { pool_size, .. } => {
            format!("postgres ({pool_size} connections per gateway)")
        }
    }
}

/// A route in three lines, and one for each control, filter,
/// reconciliation and destination it has.
fn route_summary(route: &RouteConfig) -> String {
    let mut out = String::new();
    let methods: Vec<&str> = route.methods.iter().map(Method::as_str).collect();
    let keys: Vec<String> = route.keying.key.iter().map(ToString::to_string).collect();
    out += &format!(
        "  {name:<16} {methods} {path} -> {upstream}\n  {pad:<16} verify {scheme}{horizon}, key [{keys}], scope {scope}, processing_ttl {ttl}, retention {retention}{guard}\n  {pad:<16} {dead}\n",
        name = route.name,
        methods = methods.join(","),
        path = route.path,
        upstream = match route.fans_out() {
            true => format!("{} destinations", route.destinations.len()),
            false => route.call.upstream.to_string(),
        },
        pad = "",
        scheme = route.verify.scheme.name,
        horizon = match route.verify.scheme.retry_horizon {
            Some(Duration::ZERO) => " (the sender does not retry)".to_owned(),
            Some(horizon) => format!(" (the sender retries for {})", humanize(horizon)),
            None => String::new(),
        },
        keys = keys.join(", "),
        scope = route.keying.scope,
        ttl = humanize(route.claim.processing_ttl),
        retention = humanize(route.claim.retention),
        guard = if route.claim.replay_guard { ", replay guard on" } else { "" },
        dead = delivery_summary(route),
    );
    if let Some(traffic) = traffic_summary(route) {
        out += &format!("  {:<16} {traffic}\n", "");
    }
    if let Some(filter) = &route.filter {
        out += &format!("  {:<16} forwards only {filter}\n", "");
    }
    if let Some(reconcile) = &route.reconcile {
        out += &format!(
            "  {:<16} reconciles with {} every {}, {} back ({}{}; credentials {})\n",
            "",
            reconcile.sender.name,
            humanize(reconcile.every),
            humanize(reconcile.lookback),
            reconcile.api_base,
            reconcile
                .hook
                .as_ref()
                .map_or(String::new(), |hook| format!("/{hook}")),
            reconcile.credentials_file.display(),
        );
    }
    for destination in &route.destinations {
        out += &destination_summary(destination);
    }
    out
}

/// A route's traffic controls in one line, if it has any.
fn traffic_summary(route: &RouteConfig) -> Option<String> {
    let mut traffic = Vec::new();
    if let Some(ranges) = &route.traffic.allow_from {
        traffic.push(format!("allow_from {} range(s)", ranges.len()));
    }
    if let Some(breaker) = &route.traffic.circuit_breaker {
        traffic.push(format!(
            "circuit breaker after {} failures in {}, open {}",
            breaker.failures,
            humanize(breaker.window),
            humanize(breaker.open_for)
        ));
    }
    if let Some(rate) = &route.traffic.upstream_rate {
        traffic.push(format!(
            "upstream rate {}/s, burst {} (per instance)",
            rate.per_second, rate.burst
        ));
    }
    (!traffic.is_empty()).then(|| traffic.join(", "))
}

/// A destination of a route in one line.
fn destination_summary(destination: &RouteConfig) -> String {
    let DeliveryMode::Async(queue) = &destination.delivery else {
        return String::new();
    };
    format!(
        "  {:<16} destination {} -> {} (up to {} in flight{}){}\n",
        "",
        destination.destination_name(),
        destination.call.upstream,
        queue.max_in_flight,
        match destination.failures.max_attempts {
            0 => String::new(),
            n => format!(", parked after {n} attempts"),
        },
        destination
            .filter
            .as_ref()
            .map_or(String::new(), |filter| format!(", only {filter}")),
    )
}

/// A `[[notify]]` target in one line.
fn notify_summary(target: &NotifyTarget) -> String {
    // Never the URL: a Slack webhook's is its secret.
    let on: Vec<&str> = target.on.iter().map(|kind| kind.as_str()).collect();
    format!(
        "notify {}: {} on {} for {}, grouped within {}, at most {}/s\n",
        target.name,
        match target.kind {
            NotifyKind::Slack => "slack",
            NotifyKind::Webhook => "webhook (Standard Webhooks signed)",
            NotifyKind::PagerDuty => "pagerduty",
        },
        on.join(", "),
        target
            .routes
            .as_ref()
            .map_or("every route".to_owned(), |r| r.join(", ")),
        humanize(target.group_within),
        target
            .delivery
            .traffic
            .upstream_rate
            .map_or(0.0, |rate| rate.per_second),
    )
}

/// How a route delivers, and when it gives an event up.
fn delivery_summary(route: &RouteConfig) -> String {
    match (&route.delivery, route.failures.max_attempts) {
        (DeliveryMode::Async(settings), n) => format!(
            "async: answers {} once stored, up to {} in flight, backoff {}..{}, retried for up to {}{}, then parked{}{}",
            settings.accept_status.as_u16(),
            settings.max_in_flight,
            humanize(settings.backoff_initial),
            humanize(settings.backoff_max),
            roughly(settings.horizon(n)),
            match n {
                0 => " (max_age)".to_owned(),
                n => format!(" ({n} attempts)"),
            },
            settings.respond_within.map_or(String::new(), |within| {
                format!(", answers synchronously within {}", humanize(within))
            }),
            settings.order.as_ref().map_or(String::new(), |order| {
                let stale = (order.stale_by.as_ref())
                    .map_or(String::new(), |by| format!(", stale by {by}"));
                let blocked = match order.on_blocked {
                    OnBlocked::Wait => "a dead event holds its entity",
                    OnBlocked::Skip => "dead events skipped",
                };
                format!(
                    "\n  {:<16} ordered by {}{stale}, reorder window {}, {blocked}",
                    "",
                    order.by,
                    humanize(order.reorder_window)
                )
            }),
        ),
        (DeliveryMode::Sync, 0) => format!(
            "failed events kept {}, never parked (max_attempts 0)",
            humanize(route.failures.dead_letter_retention)
        ),
        (DeliveryMode::Sync, n) => format!(
            "dead letter after {n} failed attempts (answered {}), kept {}",
            route.failures.dead_letter_status.as_u16(),
            humanize(route.failures.dead_letter_retention)
        ),
    }
}
