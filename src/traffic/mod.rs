//! Traffic control per route (docs/guide/traffic-control.md, "Traffic control"), beyond `allow_from` (which the
//! pipeline applies before reading a body): what decides whether an
//! upstream call may be made now.
//!
//! - **Pause** — an operator's, kept in the store so that it holds for the
//!   whole fleet and across restarts. Each instance reads the paused routes
//!   every [`PAUSE_POLL`] and at once when it changes them itself
//!   ([`Pauses`]). A paused sync route refuses (503 `route_paused`); a
//!   paused async route keeps accepting and its workers hold.
//! - **Circuit breaker** ([`Breaker`]) and **rate limit** ([`TokenBucket`])
//!   — this instance's, kept across reloads while the route keeps its
//!   settings ([`Controls`]).
//!
//! [`RouteControls::admit`] asks the breaker, then the bucket, for leave to
//! call; the [`Admission`] it grants is told the call's outcome, or
//! dropped unused (a duplicate was answered from its record), which gives
//! the token and any probe back.
//!
//! - **Queue bounds** ([`bounds`]) — how much an async route may hold
//!   undelivered: a full queue answers a new event 503 `queue_full`.

pub mod bounds;
mod breaker;
mod rate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use serde::{Deserialize, Serialize};

pub use self::breaker::{Breaker, Ticket};
pub use self::rate::TokenBucket;
use crate::config::RouteConfig;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};

/// How often each instance reads the paused routes from the store: a pause
/// set through another instance applies here within this.
pub const PAUSE_POLL: Duration = Duration::from_secs(1);

/// A route's pause, as kept in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// When it was paused (Unix ms).
    pub since_ms: u64,
    /// Who paused it, as the caller said (the CLI sends the user's name).
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// This instance's view of the paused routes.
#[derive(Default)]
pub struct Pauses {
    /// `None` until the store has answered once: async workers hold until
    /// then, so that a restart never delivers from a paused route.
    known: ArcSwapOption<HashMap<String, Pause>>,
    /// Pauses and resumes made here, counted: a refresh whose read began
    /// before one of them does not overwrite it with what it read.
    sets: std::sync::Mutex<u64>,
}

impl Pauses {
    /// `route`'s pause, if it is paused (as far as this instance knows).
    pub fn of(&self, route: &str) -> Option<Pause> {
        self.known.load().as_ref()?.get(route).cloned()
    }

    /// Whether `route` (a route, or a destination's delivery
    /// `route/destination`) holds: paused itself, or its route paused.
    pub fn is_paused(&self, route: &str) -> bool {
        let (whole, _) = crate::metrics::delivery_labels(route);
        self.known
            .load()
            .as_ref()
            .is_some_and(|paused| paused.contains_key(route) || paused.contains_key(whole))
    }

    fn sets(&self) -> std::sync::MutexGuard<'_, u64> {
        self.sets
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Whether the store has answered since start-up.
    pub fn known(&self) -> bool {
        self.known.load().is_some()
    }

    /// Read the paused routes from the store; the routes that were paused
    /// and are not any more (resumed elsewhere). Unreadable values (written
    /// by a newer version) count as paused by an unknown caller.
    pub async fn refresh(&self, store: &Store) -> Result<Vec<String>, StoreError> {
        let sets_before = *self.sets();
        let read: HashMap<String, Pause> = store
            .fleet()
            .controls()
            .await?
            .into_iter()
            .map(|(route, value)| {
                let pause = serde_json::from_str(&value).unwrap_or(Pause {
                    since_ms: 0,
                    by: "unknown".into(),
                    reason: None,
                });
                (route, pause)
            })
            .collect();
        let sets = self.sets();
        if *sets != sets_before {
            // Older than a pause or resume made here meanwhile: the next
            // refresh reads again.
            return Ok(Vec::new());
        }
        let before = self.known.swap(Some(Arc::new(read.clone())));
        drop(sets);
        Ok(before
            .map(|before| {
                before
                    .keys()
                    .filter(|route| !read.contains_key(*route))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `hookgate_route_paused{route}` for each of `routes`.
    pub fn show<'a>(&self, routes: impl IntoIterator<Item = &'a str>, metrics: &Metrics) {
        for route in routes {
            let (name, destination) = crate::metrics::delivery_labels(route);
            (metrics.route_paused)
                .with_label_values(&[name, destination])
                .set(i64::from(self.is_paused(route)));
        }
    }

    /// Pause (`Some`) or resume `route` for the fleet: written to the
    /// store, then applied here at once.
    pub async fn set(
        &self,
        store: &Store,
        route: &str,
        pause: Option<&Pause>,
    ) -> Result<(), StoreError> {
        let value = pause.map(|pause| serde_json::to_string(pause).expect("serializable"));
        store.fleet().set_control(route, value.as_deref()).await?;
        let mut sets = self.sets();
        *sets += 1;
        let mut paused = self.known.load().as_deref().cloned().unwrap_or_default();
        match pause {
            Some(pause) => paused.insert(route.to_owned(), pause.clone()),
            None => paused.remove(route),
        };
        self.known.store(Some(Arc::new(paused)));
        Ok(())
    }
}

/// A route's breaker and bucket, when it has them.
#[derive(Clone, Default)]
pub struct RouteControls {
    pub breaker: Option<Arc<Breaker>>,
    pub rate: Option<Arc<TokenBucket>>,
}

/// Why a call may not be made now, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    CircuitOpen(Duration),
    RateLimited(Duration),
}

/// Leave for one upstream call: see the module doc.
#[must_use]
#[derive(Default)]
pub struct Admission {
    ticket: Option<Ticket>,
    token: Option<Arc<TokenBucket>>,
}

impl RouteControls {
    /// Leave for one call: the breaker first (an open breaker takes no
    /// token), then the bucket.
    pub fn admit(&self) -> Result<Admission, Refusal> {
        let ticket = match &self.breaker {
            Some(breaker) => Some(breaker.admit().map_err(Refusal::CircuitOpen)?),
            None => None,
        };
        if let Some(rate) = &self.rate {
            rate.try_take().map_err(Refusal::RateLimited)?;
        }
        Ok(Admission {
            ticket,
            token: self.rate.clone(),
        })
    }

    /// Leave for up to `wanted` calls at once (an async worker's pass):
    /// fewer when the bucket is low, one while the breaker probes, none
    /// while it is open. The first admission carries the probe.
    pub fn admit_many(&self, wanted: usize) -> Vec<Admission> {
        if wanted == 0 {
            return Vec::new();
        }
        let mut tickets = Vec::new();
        if let Some(breaker) = &self.breaker {
            let Ok(first) = breaker.admit() else {
                return Vec::new();
            };
            let probing = first.is_probe();
            tickets.push(first);
            if !probing {
                tickets.extend((1..wanted).map_while(|_| breaker.admit().ok()));
            }
        }
        let wanted = if self.breaker.is_some() {
            tickets.len()
        } else {
            wanted
        };
        let granted = (self.rate.as_ref()).map_or(wanted, |rate| rate.take_up_to(wanted));
        let mut tickets = tickets.into_iter();
        (0..granted)
            .map(|_| Admission {
                ticket: tickets.next(),
                token: self.rate.clone(),
            })
            .collect()
    }

    /// The breaker's state, for the admin API: `closed`, `open`,
    /// `half_open`, or `None` without a breaker.
    pub fn breaker_state(&self) -> Option<&'static str> {
        self.breaker.as_ref().map(|breaker| breaker.state())
    }
}

impl Admission {
    /// The call was made: a final answer (`true`) or not, for the breaker.
    pub fn report(mut self, success: bool) {
        self.token = None;
        if let Some(ticket) = self.ticket.take() {
            ticket.report(success);
        }
    }
}

impl Drop for Admission {
    /// Never used: the token goes back to the bucket, the probe (if this
    /// was it) to the next caller.
    fn drop(&mut self) {
        if let Some(rate) = self.token.take() {
            rate.refund(1);
        }
    }
}

/// Each route's breaker and bucket, by route name: a reload keeps them
/// (their state, open or spent, holds) unless the route's settings changed.
#[derive(Default)]
pub struct Controls {
    by_route: Mutex<HashMap<String, RouteControls>>,
}

impl Controls {
    /// The controls of each of `routes`, in order; the others are dropped.
    pub fn for_routes(&self, routes: &[Arc<RouteConfig>], metrics: &Metrics) -> Vec<RouteControls> {
        let mut by_route = self
            .by_route
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let mut kept = HashMap::new();
        let picked = routes
            .iter()
            .map(|route| {
                let old = by_route.remove(&route.name).unwrap_or_default();
                let labels = [route.route_name(), route.destination_name()];
                let controls = RouteControls {
                    breaker: keep_or_new(
                        old.breaker,
                        route.traffic.circuit_breaker,
                        Breaker::settings,
                        |settings| {
                            Breaker::new(
                                &route.name,
                                settings,
                                metrics.breaker_open.with_label_values(&labels),
                                metrics.breaker_opened.with_label_values(&labels),
                            )
                        },
                    ),
                    rate: keep_or_new(
                        old.rate,
                        route.traffic.upstream_rate,
                        TokenBucket::settings,
                        TokenBucket::new,
                    ),
                };
                if controls.breaker.is_none() {
                    let _ = metrics.breaker_open.remove_label_values(&labels);
                }
                kept.insert(route.name.clone(), controls.clone());
                controls
            })
            .collect();
        *by_route = kept;
        picked
    }
}

/// The running `old` when its settings are still `wanted`, else a new one.
fn keep_or_new<T, S: PartialEq + Copy>(
    old: Option<Arc<T>>,
    wanted: Option<S>,
    settings: impl Fn(&T) -> S,
    new: impl FnOnce(S) -> T,
) -> Option<Arc<T>> {
    let wanted = wanted?;
    match old {
        Some(old) if settings(&old) == wanted => Some(old),
        _ => Some(Arc::new(new(wanted))),
    }
}
