//! `[[routes.destinations]]` (docs/reference/configuration.md,
//! "`[[routes.destinations]]`"): the consumers of one async route, each validated into a
//! delivery of its own — a [`RouteConfig`] named `route/destination`, in
//! the scope `scope/destination`, with the route's settings as defaults and
//! its own upstream, filter and delivery settings — so that workers,
//! traffic control, dead letters and the operator's actions treat it as
//! they treat any route, and nothing one destination does reaches another.

use std::collections::HashSet;
use std::sync::Arc;

use http::HeaderName;

use super::locate::KeyPath;
use super::raw::{RawBreaker, RawDestination, RawRoute};
use super::route::{
    BreakerSettings, CallSettings, ClaimSettings, DeliveryMode, DestinationOf, FailureSettings,
    KeySettings, RouteConfig, TrafficSettings, VerifySettings,
};
use super::validate::Validator;
use super::verification::{none, placeholder};
use crate::filter::EventFilter;

/// The name of a destination's delivery, `route/destination`: route and
/// destination names are `[a-z0-9_-]+`, so it is never a route's name.
pub fn delivery_name(route: &str, destination: &str) -> String {
    format!("{route}/{destination}")
}

impl Validator<'_> {
    /// The destinations of `parent`, validated: `[a-z0-9_-]+` names, unique
    /// in the route, on an async route only.
    pub(super) fn destinations(
        &mut self,
        at: &KeyPath,
        parent: &RouteConfig,
        raw: Vec<RawDestination>,
    ) -> Vec<Arc<RouteConfig>> {
        let at = at.key("destinations");
        if raw.is_empty() {
            self.fail(
                &at,
                "list at least one destination, or give the route an `upstream`",
            );
        }
        if !parent.delivery.is_async() {
            self.fail(
                &at,
                "several destinations need delivery = \"async\": each is delivered on its own, after the sender was answered",
            );
        }
        if let DeliveryMode::Async(settings) = &parent.delivery {
            if settings.respond_within.is_some() {
                self.fail(
                    &at,
                    "respond_within forwards to one upstream while the sender waits; a route with destinations has several",
                );
            }
        }
        let mut names = HashSet::new();
        raw.into_iter()
            .enumerate()
            .map(|(i, raw)| {
                let at = at.index(i);
                let destination = self.destination(&at, parent, raw);
                if !names.insert(destination.name.clone()) {
                    self.fail(
                        &at.key("name"),
                        format!(
                            "destination name {:?} is used twice in the route",
                            destination.destination_name()
                        ),
                    );
                }
                Arc::new(destination)
            })
            .collect()
    }

    fn destination(
        &mut self,
        at: &KeyPath,
        parent: &RouteConfig,
        raw: RawDestination,
    ) -> RouteConfig {
        let name = self.identifier(&at.key("name"), &raw.name);
        let call = self.destination_call(at, parent, &raw);
        let idempotency_header = match &raw.idempotency_header {
            Some(text) => self.idempotency_header(&at.key("idempotency_header"), text),
            None => parent.keying.idempotency_header.clone(),
        };
        let max_attempts = match raw.max_attempts {
            Some(n) if n > 1000 => {
                self.fail(
                    &at.key("max_attempts"),
                    "must be between 0 (unlimited) and 1000",
                );
                parent.failures.max_attempts
            }
            Some(n) => n as u32,
            None => parent.failures.max_attempts,
        };
        let delivery = self.destination_delivery(at, parent, &raw);
        let circuit_breaker = match &raw.circuit_breaker {
            Some(breaker) => Some(self.breaker(&at.key("circuit_breaker"), breaker)),
            None => parent.traffic.circuit_breaker,
        };
        let upstream_rate = match &raw.upstream_rate {
            Some(_) => self.rate(at, &raw.upstream_rate, raw.upstream_burst),
            None => {
                if raw.upstream_burst.is_some() {
                    self.fail(&at.key("upstream_burst"), "only with upstream_rate");
                }
                parent.traffic.upstream_rate
            }
        };
        let filter = (raw.filter.as_ref()).and_then(|table| self.filter(at, table));
        RouteConfig {
            name: delivery_name(&parent.name, &name),
            path: parent.path.clone(),
            methods: parent.methods.clone(),
            verify: VerifySettings {
                scheme: parent.verify.scheme,
                // Never met by a sender: the route verified the event.
                verifier: (none().build)(placeholder()).expect("builds"),
            },
            call,
            keying: KeySettings {
                scope: format!("{}/{name}", parent.keying.scope),
                idempotency_header,
                ..parent.keying.clone()
            },
            claim: ClaimSettings {
                replay_guard: false,
                ..parent.claim.clone()
            },
            failures: FailureSettings {
                max_attempts,
                page_failed_after: None,
                ..parent.failures.clone()
            },
            traffic: TrafficSettings {
                allow_from: None,
                circuit_breaker,
                upstream_rate,
            },
            delivery,
            filter,
            destinations: Vec::new(),
            destination_of: Some(DestinationOf {
                route: parent.name.clone(),
                destination: name,
            }),
            // The route reconciles; its destinations take what it delivers.
            reconcile: None,
            signs: None,
        }
    }

    /// A destination's `upstream`, and its `upstream_ca` and
    /// `upstream_timeout` (its route's unless it sets them).
    fn destination_call(
        &mut self,
        at: &KeyPath,
        parent: &RouteConfig,
        raw: &RawDestination,
    ) -> CallSettings {
        let upstream = self.upstream(&at.key("upstream"), &raw.upstream);
        let upstream_ca = match &raw.upstream_ca {
            Some(path) => self.upstream_ca(&at.key("upstream_ca"), path),
            None => parent.call.upstream_ca.clone(),
        };
        if raw.upstream_ca.is_some() && upstream.scheme_str() != Some("https") {
            self.fail(
                &at.key("upstream_ca"),
                "upstream_ca only applies to an https:// upstream",
            );
        }
        let upstream_timeout = self.duration(
            &at.key("upstream_timeout"),
            raw.upstream_timeout.as_ref(),
            parent.call.upstream_timeout,
        );
        if parent.claim.retention <= upstream_timeout {
            self.fail(
                &at.key("upstream_timeout"),
                "must be shorter than the route's retention",
            );
        }
        CallSettings {
            upstream,
            upstream_ca,
            upstream_timeout,
        }
    }

    /// A destination's delivery: its route's, with its own
    /// `retry_backoff` and `max_in_flight` (an async route answers the
    /// sender itself, so no destination has a `respond_within`).
    fn destination_delivery(
        &mut self,
        at: &KeyPath,
        parent: &RouteConfig,
        raw: &RawDestination,
    ) -> DeliveryMode {
        let mut delivery = parent.delivery.clone();
        if let DeliveryMode::Async(settings) = &mut delivery {
            settings.respond_within = None;
            if let Some(backoff) = &raw.retry_backoff {
                let at = at.key("retry_backoff");
                let initial = backoff.initial.as_ref();
                settings.backoff_initial =
                    self.duration(&at.key("initial"), initial, settings.backoff_initial);
                settings.backoff_max =
                    self.duration(&at.key("max"), backoff.max.as_ref(), settings.backoff_max);
                if settings.backoff_max < settings.backoff_initial {
                    self.fail(&at.key("max"), "must be at least initial");
                }
            }
            settings.max_in_flight = self.size(
                &at.key("max_in_flight"),
                raw.max_in_flight,
                settings.max_in_flight as u64,
                10_000,
            );
        }
        delivery
    }

    /// `filter = { source = pattern(s) }`, compiled; a bad source is
    /// located under `at.filter`.
    pub(super) fn filter(&mut self, at: &KeyPath, table: &toml::Table) -> Option<EventFilter> {
        EventFilter::compile(table)
            .map_err(|problems| {
                for (source, problem) in problems {
                    let at = match source.is_empty() {
                        true => at.key("filter"),
                        false => at.key("filter").key(&source),
                    };
                    self.fail(&at, problem);
                }
            })
            .ok()
    }

    /// `circuit_breaker = { failures, window, open_for }`.
    pub(super) fn breaker(&mut self, at: &KeyPath, raw: &RawBreaker) -> BreakerSettings {
        BreakerSettings {
            failures: self.size(&at.key("failures"), raw.failures, 5, 10_000) as u32,
            window: self.duration(
                &at.key("window"),
                raw.window.as_ref(),
                std::time::Duration::from_secs(30),
            ),
            open_for: self.duration(
                &at.key("open_for"),
                raw.open_for.as_ref(),
                std::time::Duration::from_secs(30),
            ),
        }
    }

    /// `idempotency_header`: a header name hookgate does not manage itself,
    /// or `""` for none.
    pub(super) fn idempotency_header(&mut self, at: &KeyPath, raw: &str) -> Option<HeaderName> {
        let text = self.string(at, raw)?;
        if text.is_empty() {
            return None;
        }
        match HeaderName::from_bytes(text.as_bytes()) {
            Err(_) => {
                self.fail(at, format!("{text:?} is not a valid header name"));
                None
            }
            Ok(name) if crate::headers::managed(&name) => {
                self.fail(
                    at,
                    format!(
                        "{text:?} is a header hookgate sets or removes itself on the \
                         forwarded request; name another (default Idempotency-Key)"
                    ),
                );
                None
            }
            Ok(name) => Some(name),
        }
    }

    /// A route's `upstream` or its `destinations`, exactly one of the two.
    pub(super) fn upstream_or_destinations(&mut self, at: &KeyPath, raw: &RawRoute) -> bool {
        let fans_out = raw.destinations.is_some();
        match (&raw.upstream, fans_out) {
            (Some(_), true) => self.fail(
                &at.key("upstream"),
                "a route has one `upstream` or several [[routes.destinations]], not both",
            ),
            (None, false) => self.fail(at, "missing field `upstream`"),
            _ => {}
        }
        if fans_out && raw.filter.is_some() {
            self.fail(
                &at.key("filter"),
                "a route with destinations filters per destination: move the filter into each [[routes.destinations]]",
            );
        }
        fans_out
    }
}
