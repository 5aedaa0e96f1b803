//! `[[routes]]`: path, methods, upstream, key sources, lifetimes; each
//! route's `[routes.verify]` is `verification.rs`'s.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, Uri};

use super::locate::KeyPath;
use super::raw::RawRoute;
use super::reconcile::ForRoute;
use super::route::{
    CallSettings, ClaimSettings, DeliveryMode, FailureSettings, KeySettings, OnMismatch, OnUnknown,
    RouteConfig, UpstreamCa, VerifySettings, DEFAULT_QUEUE,
};
use super::settings::HeaderFormat;
use crate::clock::{humanize, roughly};

/// Failed and dead events are kept this long unless the route says otherwise
/// (docs/guide/dead-letters.md, "Failed events and dead letters"), or as long as `retention` when that is longer.
const DEFAULT_DEAD_LETTER_RETENTION: Duration = Duration::from_secs(30 * 86_400);
use super::validate::Validator;
use super::verification::{none, placeholder};
use crate::key::{KeySource, OnMissingKey};
use crate::order::OrderSettings;
use crate::verify::Profile;

const DEFAULT_MAX_CACHED_BODY_BYTES: u64 = 64 * 1024;

impl Validator<'_> {
    pub(super) fn routes(&mut self, at: &KeyPath, raw: Vec<RawRoute>) -> Vec<Arc<RouteConfig>> {
        if raw.is_empty() {
            self.warn("no [[routes]] configured: every request will get 404".to_owned());
        }
        let mut names = HashSet::new();
        let mut paths = HashSet::new();
        let mut orders: HashMap<String, (String, Option<OrderSettings>)> = HashMap::new();
        let mut routes = Vec::with_capacity(raw.len());
        for (i, raw_route) in raw.into_iter().enumerate() {
            let at = at.index(i);
            let route = self.route(&at, raw_route);
            if !names.insert(route.name.clone()) {
                self.fail(
                    &at.key("name"),
                    format!("route name {:?} is used twice", route.name),
                );
            }
            if !paths.insert(route.path.clone()) {
                self.fail(
                    &at.key("path"),
                    format!("path {:?} is used by two routes", route.path),
                );
            }
            // One queue per scope, leased by one set of rules.
            let order = route.order().cloned();
            match orders.get(&route.keying.scope) {
                Some((first, theirs)) if *theirs != order => self.fail(
                    &at.key("order_by"),
                    format!(
                        "route {first:?} shares the scope {:?} and orders its events otherwise: \
                         routes sharing a scope share one queue and one order",
                        route.keying.scope
                    ),
                ),
                Some(_) => {}
                None => {
                    orders.insert(route.keying.scope.clone(), (route.name.clone(), order));
                }
            }
            routes.push(Arc::new(route));
        }
        routes
    }

    /// One `[[routes]]` table, a section at a time: where it is and where
    /// it forwards, how its senders are verified, how long it keeps what,
    /// how an event is keyed, how it is delivered and when it gives up,
    /// and its traffic controls.
    pub(super) fn route(&mut self, at: &KeyPath, mut raw: RawRoute) -> RouteConfig {
        let name = self.identifier(&at.key("name"), &raw.name);
        let path = self.string(&at.key("path"), &raw.path).unwrap_or_default();
        if !path.starts_with('/') || path.contains(['?', '#']) {
            self.fail(
                &at.key("path"),
                format!("{path:?} must be an absolute path without query"),
            );
        }
        let mut methods = self.methods(&at.key("methods"), raw.methods.as_deref());
        let (upstream, upstream_ca) = self.route_upstream(at, &raw);
        let signed = self.route_verification(at, &mut raw, &mut methods);
        let scheme = signed.scheme;
        let lifetimes = self.lifetimes(at, &raw, scheme);
        let keyed = self.keying(at, &raw, scheme, &name);
        let delivery = self.delivery(at, &raw, lifetimes.upstream_timeout);
        let failures = self.failures(at, &raw, scheme, &delivery, lifetimes.retention);

        let traffic = self.traffic(at, &raw);
        let filter = (raw.filter.as_ref()).and_then(|table| self.filter(at, table));
        let reconcile = raw.reconcile.as_ref().and_then(|reconcile| {
            let route = ForRoute {
                scheme,
                retention: lifetimes.retention,
                default_key: raw.key.is_none(),
                first_secret: signed.first_secret,
            };
            self.reconcile(&at.key("reconcile"), reconcile, route)
        });

        let mut route = RouteConfig {
            name,
            path,
            methods,
            verify: VerifySettings {
                scheme,
                verifier: signed.verifier,
            },
            call: CallSettings {
                upstream,
                upstream_ca,
                upstream_timeout: lifetimes.upstream_timeout,
            },
            keying: KeySettings {
                key: keyed.key,
                scope: keyed.scope,
                on_mismatch: keyed.on_mismatch,
                on_missing_key: keyed.on_missing_key,
                idempotency_header: keyed.idempotency_header,
                idempotency_header_format: keyed.idempotency_header_format,
            },
            claim: ClaimSettings {
                processing_ttl: lifetimes.processing_ttl,
                retention: lifetimes.retention,
                on_unknown: keyed.on_unknown,
                replay_guard: keyed.replay_guard,
                max_cached_body_bytes: failures.max_cached_body_bytes,
            },
            failures: FailureSettings {
                max_attempts: failures.max_attempts,
                dead_letter_status: failures.dead_letter_status,
                dead_letter_retention: failures.dead_letter_retention,
                page_failed_after: failures.page_failed_after,
            },
            traffic,
            delivery,
            filter,
            destinations: Vec::new(),
            destination_of: None,
            reconcile,
            signs: None,
        };
        if let Some(destinations) = raw.destinations.take() {
            route.destinations = self.destinations(at, &route, destinations);
            // Each destination took them as its default; the fan-out itself
            // calls no upstream.
            route.traffic.circuit_breaker = None;
            route.traffic.upstream_rate = None;
        }
        route
    }

    /// `upstream` and `upstream_ca`, or `destinations` instead.
    fn route_upstream(&mut self, at: &KeyPath, raw: &RawRoute) -> (Uri, Option<UpstreamCa>) {
        let fans_out = self.upstream_or_destinations(at, raw);
        let upstream = match (&raw.upstream, fans_out) {
            (Some(upstream), false) => self.upstream(&at.key("upstream"), upstream),
            // Never called: each destination has its own.
            _ => Uri::from_static("http://127.0.0.1/"),
        };
        let upstream_ca = raw
            .upstream_ca
            .as_ref()
            .and_then(|path| self.upstream_ca(&at.key("upstream_ca"), path));
        if upstream_ca.is_some() && upstream.scheme_str() != Some("https") {
            self.fail(
                &at.key("upstream_ca"),
                "upstream_ca only applies to an https:// upstream",
            );
        }
        (upstream, upstream_ca)
    }

    /// `[routes.verify]` and `public_url`; a sender that proves the
    /// endpoint with a `GET` adds it to `methods`.
    fn route_verification(
        &mut self,
        at: &KeyPath,
        raw: &mut RawRoute,
        methods: &mut Vec<Method>,
    ) -> Signed {
        let public_url = raw
            .public_url
            .as_ref()
            .and_then(|text| self.public_url(&at.key("public_url"), text));
        let (scheme, verifier, first_secret) = match raw.verify.take() {
            Some(verify) => self.verify(&at.key("verify"), verify, public_url.clone()),
            None => {
                self.fail(
                    at,
                    "route has no [routes.verify]; write `scheme = \"none\"` to accept unsigned traffic on purpose",
                );
                (none(), None, None)
            }
        };
        match (scheme.signs_url, &public_url) {
            (true, None) if raw.public_url.is_none() => self.fail(
                at,
                format!(
                    "scheme {:?} signs the URL the sender posts to; set `public_url` to it, as configured at the sender",
                    scheme.name
                ),
            ),
            (false, Some(_)) => self.fail(
                &at.key("public_url"),
                format!("scheme {:?} does not sign the URL; remove `public_url`", scheme.name),
            ),
            _ => {}
        }
        // A sender that proves the endpoint with a GET is let through to
        // its handshake (and to 401 for any other GET).
        let asks_get = scheme.challenge().is_some_and(|c| c.before_verification);
        if asks_get && raw.methods.is_none() {
            methods.push(Method::GET);
        }
        Signed {
            scheme,
            // Broken verify settings fail the whole config: this
            // placeholder is never served, it only lets validation go on
            // and report the rest.
            verifier: verifier.unwrap_or_else(|| (none().build)(placeholder()).expect("builds")),
            first_secret,
        }
    }

    /// `processing_ttl`, `retention` and `upstream_timeout`, each within
    /// the ones it must outlast.
    fn lifetimes(&mut self, at: &KeyPath, raw: &RawRoute, scheme: &Profile) -> Lifetimes {
        let processing_ttl = self.duration(
            &at.key("processing_ttl"),
            raw.processing_ttl.as_ref(),
            Duration::from_secs(30),
        );
        let retention = self.duration(
            &at.key("retention"),
            raw.retention.as_ref(),
            scheme.default_retention,
        );
        let upstream_timeout = self.duration(
            &at.key("upstream_timeout"),
            raw.upstream_timeout.as_ref(),
            Duration::from_secs(30),
        );
        if retention <= processing_ttl {
            self.fail(
                &at.key("retention"),
                "retention must be longer than processing_ttl",
            );
        }
        if retention <= upstream_timeout {
            // The record would expire while the call it guards still runs.
            self.fail(
                &at.key("retention"),
                "retention must be longer than upstream_timeout",
            );
        }
        if let Some(horizon) = scheme.retry_horizon.filter(|h| retention < *h) {
            self.warn(format!(
                "{at}.retention: {} is shorter than {}'s retry horizon of {}; a late retry would be processed again",
                humanize(retention),
                scheme.name,
                humanize(horizon),
            ));
        }
        Lifetimes {
            processing_ttl,
            retention,
            upstream_timeout,
        }
    }

    /// How an event is keyed and told apart: `key`, `scope`, the
    /// idempotency header, and what a changed body, a missing key or an
    /// unknown outcome does.
    fn keying(&mut self, at: &KeyPath, raw: &RawRoute, scheme: &Profile, name: &str) -> Keyed {
        let idempotency_header = match &raw.idempotency_header {
            None => Some(HeaderName::from_static("idempotency-key")),
            Some(text) => self.idempotency_header(&at.key("idempotency_header"), text),
        };
        let idempotency_header_format = self.choice(
            &at.key("idempotency_header_format"),
            raw.idempotency_header_format.as_ref(),
            &[
                ("raw", HeaderFormat::Raw),
                ("sf-string", HeaderFormat::SfString),
            ],
            HeaderFormat::Raw,
        );
        let key = self.key_sources(&at.key("key"), raw.key.as_deref(), scheme);
        let scope = match &raw.scope {
            Some(scope) => self.identifier(&at.key("scope"), scope),
            None => name.to_owned(),
        };
        let on_mismatch = self.choice(
            &at.key("on_mismatch"),
            raw.on_mismatch.as_ref(),
            &[
                ("reject", OnMismatch::Reject),
                ("replay", OnMismatch::Replay),
            ],
            if scheme.retries_change_body {
                OnMismatch::Replay
            } else {
                OnMismatch::Reject
            },
        );
        let on_missing_key = self.choice(
            &at.key("on_missing_key"),
            raw.on_missing_key.as_ref(),
            &[
                ("reject", OnMissingKey::Reject),
                ("forward", OnMissingKey::Forward),
            ],
            scheme.on_missing_key,
        );
        let on_unknown = self.choice(
            &at.key("on_unknown"),
            raw.on_unknown.as_ref(),
            &[("hold", OnUnknown::Hold), ("release", OnUnknown::Release)],
            OnUnknown::Hold,
        );
        let replay_guard = self.choice(
            &at.key("replay_guard"),
            raw.replay_guard.as_ref(),
            &[("body", true), ("off", false)],
            scheme.replay_guard,
        );
        let unsigned: Vec<String> = key
            .iter()
            .filter(|source| !scheme.signs(source))
            .map(ToString::to_string)
            .collect();
        if !unsigned.is_empty() && !replay_guard && scheme != none() {
            self.warn(format!(
                "{at}: the key source {} is not covered by the {} signature and replay_guard is off: \
                 a captured body re-sent under a new key would be forwarded again; set replay_guard = \"body\"",
                unsigned.join(", "),
                scheme.name,
            ));
        }
        Keyed {
            idempotency_header,
            idempotency_header_format,
            key,
            scope,
            on_mismatch,
            on_missing_key,
            on_unknown,
            replay_guard,
        }
    }

    /// What a route keeps of an answer, how often it tries, and how long
    /// it keeps and when it pages about what failed.
    fn failures(
        &mut self,
        at: &KeyPath,
        raw: &RawRoute,
        scheme: &Profile,
        delivery: &DeliveryMode,
        retention: Duration,
    ) -> Failures {
        let max_cached_body_bytes = self.size(
            &at.key("max_cached_body_bytes"),
            raw.max_cached_body_bytes,
            DEFAULT_MAX_CACHED_BODY_BYTES,
            16 << 20,
        );
        let page_failed_after = match (delivery, &raw.page_after) {
            (DeliveryMode::Async(_), _) => None,
            (DeliveryMode::Sync, Some(text)) => {
                Some(self.duration(&at.key("page_after"), Some(text), DEFAULT_QUEUE.page_after))
            }
            (DeliveryMode::Sync, None) => {
                (!scheme.retries_itself).then_some(DEFAULT_QUEUE.page_after)
            }
        };
        // 0: until max_age (an accepted event's sender will not retry), or
        // until the sender stops retrying.
        let max_attempts = raw.max_attempts.unwrap_or(0);
        if max_attempts > 1000 {
            self.fail(
                &at.key("max_attempts"),
                "must be between 0 (unlimited) and 1000",
            );
        }
        let max_attempts = max_attempts.min(1000) as u32;
        let dead_letter_status = self.status(
            &at.key("dead_letter_status"),
            raw.dead_letter_status,
            200..=599,
            "must be an HTTP status between 200 and 599",
        );
        let dead_letter_retention = self.duration(
            &at.key("dead_letter_retention"),
            raw.dead_letter_retention.as_ref(),
            DEFAULT_DEAD_LETTER_RETENTION.max(retention),
        );
        if dead_letter_retention < retention {
            self.fail(
                &at.key("dead_letter_retention"),
                "dead_letter_retention must be at least retention: failed events are kept longer than completed ones",
            );
        }
        if let DeliveryMode::Async(settings) = delivery {
            if dead_letter_retention <= settings.max_age {
                self.fail(
                    &at.key("max_age"),
                    "max_age must be shorter than dead_letter_retention: an accepted event must outlive its attempts",
                );
            }
            let retried = settings.horizon(max_attempts);
            if let Some(horizon) = scheme.retry_horizon.filter(|h| retried < *h) {
                self.warn(format!(
                    "{at}: accepted events are retried for at most {} (max_attempts, retry_backoff, max_age), shorter than {}'s own retry horizon of {}; an outage longer than that parks events the sender would still have retried (max_attempts = 0 retries until max_age)",
                    roughly(retried),
                    scheme.name,
                    humanize(horizon),
                ));
            }
        }
        Failures {
            max_cached_body_bytes,
            page_failed_after,
            max_attempts,
            dead_letter_status,
            dead_letter_retention,
        }
    }

    fn methods(&mut self, at: &KeyPath, raw: Option<&[String]>) -> Vec<Method> {
        let Some(raw) = raw else {
            return vec![Method::POST];
        };
        if raw.is_empty() {
            self.fail(at, "list at least one method");
        }
        raw.iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let text = self.string(&at.index(i), text)?;
                match Method::from_bytes(text.as_bytes()) {
                    Ok(method) if text.bytes().all(|b| b.is_ascii_uppercase()) => Some(method),
                    _ => {
                        self.fail(
                            &at.index(i),
                            format!("{text:?} is not an HTTP method like \"POST\""),
                        );
                        None
                    }
                }
            })
            .collect()
    }

    pub(super) fn upstream(&mut self, at: &KeyPath, raw: &str) -> Uri {
        let fallback = Uri::from_static("http://127.0.0.1/");
        let Some(text) = self.string(at, raw) else {
            return fallback;
        };
        let uri: Uri = match text.parse() {
            Ok(uri) => uri,
            Err(err) => {
                self.fail(at, format!("{text:?} is not a URL: {err}"));
                return fallback;
            }
        };
        match uri.scheme_str() {
            Some("http" | "https") if uri.authority().is_some() => uri,
            _ => {
                self.fail(
                    at,
                    format!("{text:?} must be an absolute http:// or https:// URL"),
                );
                fallback
            }
        }
    }

    /// The CA certificates of `upstream_ca`, read now so a bad file is a
    /// config error and not a failed delivery.
    pub(super) fn upstream_ca(&mut self, at: &KeyPath, raw: &str) -> Option<UpstreamCa> {
        let path = PathBuf::from(self.string(at, raw)?);
        self.read_file(&path);
        let certs = crate::tls::load_certs(&path)
            .and_then(|certs| crate::tls::client_config(&certs).map(|_| certs));
        match certs {
            Ok(certs) => Some(UpstreamCa { path, certs }),
            Err(message) => {
                self.fail(at, message);
                None
            }
        }
    }

    fn key_sources(
        &mut self,
        at: &KeyPath,
        raw: Option<&[String]>,
        scheme: &Profile,
    ) -> Vec<KeySource> {
        let texts: Vec<(KeyPath, String)> = match raw {
            Some(list) => list
                .iter()
                .enumerate()
                .filter_map(|(i, text)| Some((at.index(i), self.string(&at.index(i), text)?)))
                .collect(),
            None if scheme.default_key.is_empty() => {
                self.fail(
                    at,
                    format!(
                        "scheme {:?} has no default key; set `key = [...]`",
                        scheme.name
                    ),
                );
                Vec::new()
            }
            None => scheme
                .default_key
                .iter()
                .map(|d| (at.clone(), (*d).to_owned()))
                .collect(),
        };
        if raw.is_some_and(<[String]>::is_empty) {
            self.fail(at, "list at least one key source");
        }
        texts
            .into_iter()
            .filter_map(|(key, text)| match KeySource::parse(&text) {
                Ok(source) => Some(source),
                Err(message) => {
                    self.fail(&key, message);
                    None
                }
            })
            .collect()
    }
}

/// A route's verification, as `[routes.verify]` asks.
struct Signed {
    scheme: &'static Profile,
    verifier: crate::verify::Verifier,
    /// For reconciliation's default credentials.
    first_secret: Option<crate::secret::Secret>,
}

struct Lifetimes {
    processing_ttl: Duration,
    retention: Duration,
    upstream_timeout: Duration,
}

struct Keyed {
    idempotency_header: Option<HeaderName>,
    idempotency_header_format: HeaderFormat,
    key: Vec<KeySource>,
    scope: String,
    on_mismatch: OnMismatch,
    on_missing_key: OnMissingKey,
    on_unknown: OnUnknown,
    replay_guard: bool,
}

struct Failures {
    max_cached_body_bytes: usize,
    page_failed_after: Option<Duration>,
    max_attempts: u32,
    dead_letter_status: http::StatusCode,
    dead_letter_retention: Duration,
}
