//! Reconciliation with the sender (docs/guide/reconciliation.md, "Reconciliation"): a route
//! with `[routes.reconcile]` asks its sender's API, every `every`, what it
//! sent, and recovers each event the gateway never completed — Stripe's
//! delivered here through the sender's stages, GitHub's asked of GitHub
//! again ([`pass`]). The senders are data (`crate::sender_apis`), their API
//! calls [`api`]'s.
//!
//! A fleet reconciles a route once per `every`, on one gateway at a time:
//! a pass holds a lease in the store (the route's `lease:` key, claimed
//! and renewed like an event's, then completed for `every`, so the next
//! pass anywhere is due one period after this one ended). What the last
//! pass found is kept in the store too (the `status:` key), so any gateway
//! answers for the fleet, and the next pass goes on from where the last
//! good one ended (less a quarter hour of overlap) rather than re-reading
//! the whole `lookback`. A pass that recovered everything it found
//! advances the window; one with failures leaves it, so they are tried
//! again. Events younger than a minute are left to the sender's own
//! delivery, which is usually on its way.

mod api;
mod pass;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use self::api::Api;
use self::pass::{Pass, Tally, Window};
use crate::clock::rfc3339;
use crate::config::ReconcileSettings;
use crate::delivery::Parts;
use crate::ingress::Gateway;
use crate::notice::Notice;
use crate::replay::{BodyKept, RecordedResponse};
use crate::route::Route;
use crate::shutdown::Shutdown;
use crate::store::{ClaimMode, ClaimOutcome, ClaimRequest, StoreError, StoreKey};
use crate::upstream::Upstream;

/// How often the schedule looks at the routes.
const TICK: Duration = Duration::from_secs(1);
/// A pass's lease, renewed every third of it while the pass runs.
const LEASE_TTL: Duration = Duration::from_secs(60);
/// Events younger than this (seconds) are left to the sender's delivery.
const SETTLE: u64 = 60;
/// How far before the last good pass's end the next one starts (seconds):
/// an event the API lists a little late is still found.
const OVERLAP: u64 = 15 * 60;
/// How long a route's last pass is remembered; the longest any of
/// reconciliation's records lives.
pub const KEPT: Duration = Duration::from_secs(30 * 86_400);
/// How soon a gateway looks again after a pass elsewhere, or a store error.
const RETRY: Duration = Duration::from_secs(10);

/// A route's reconciliation as the fleet last recorded it (kept in the
/// store as JSON; times in Unix seconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub last_run_at: Option<u64>,
    pub last_success_at: Option<u64>,
    /// The window of the last good pass.
    pub since: Option<u64>,
    pub until: Option<u64>,
    pub seen: u64,
    pub missing: u64,
    pub delivered: u64,
    pub asked: u64,
    pub errors: u64,
    pub last_error: Option<String>,
    /// What the last pass cost: calls to the sender's API, and reads of
    /// the store to tell what is missing.
    #[serde(default)]
    pub api_calls: u64,
    #[serde(default)]
    pub store_reads: u64,
}

/// Why a pass did not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the route does not reconcile with its sender")]
    NotConfigured,
    #[error("a pass of this route is running (on this or another gateway)")]
    Busy,
    /// A pass ended less than `every` ago (Unix ms).
    #[error("a pass ended less than `every` ago")]
    NotDue(u64),
    #[error("{0}")]
    Since(String),
    #[error("the store: {0}")]
    Store(#[from] StoreError),
}

/// What an operator's pass answers.
pub enum Report {
    Ran(Value),
    DryRun(Value),
}

/// Each reconciling route's schedule, and its passes.
pub struct Reconciler {
    gateway: Arc<Gateway>,
    parts: Parts,
    client: Upstream,
    /// When this gateway next looks at each route (Unix ms).
    next: Mutex<HashMap<String, u64>>,
    running: Mutex<HashSet<String>>,
}

/// Where a route's lease, status and asks are kept: beside its events,
/// in a scope no route can have (scopes hold no `.`).
pub fn scope(route: &Route) -> String {
    format!("{}.reconcile", route.keying.scope)
}

impl Reconciler {
    pub fn new(gateway: Arc<Gateway>, parts: Parts) -> Self {
        Self {
            gateway,
            parts,
            client: Upstream::new(&[]),
            next: Mutex::default(),
            running: Mutex::default(),
        }
    }

    /// The schedule: each reconciling route, when due, on this gateway if
    /// no other holds it; until the drain begins.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let draining = shutdown.draining();
        tokio::pin!(draining);
        let mut tick = tokio::time::interval(TICK);
        let mut passes = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                () = &mut draining => break,
                Some(_) = passes.join_next(), if !passes.is_empty() => continue,
                _ = tick.tick() => {}
            }
            let now_ms = self.parts.clock.now_ms();
            for route in self.reconciling() {
                let Some(settings) = route.reconcile.clone() else {
                    continue;
                };
                let metrics = &self.parts.metrics.reconcile;
                (metrics.every.with_label_values(&[&route.name])).set(settings.every.as_secs_f64());
                let due = lock(&self.next)
                    .get(&route.name)
                    .is_none_or(|at| *at <= now_ms);
                if due && lock(&self.running).insert(route.name.clone()) {
                    passes.spawn(Arc::clone(&self).scheduled(route, settings));
                }
            }
        }
        // A pass under way finishes its event, not its window: its
        // deliveries run in tasks of their own, and its lease lapses.
        passes.abort_all();
    }

    fn reconciling(&self) -> Vec<Arc<Route>> {
        (self.parts.routes.all().into_iter())
            .filter(|route| route.reconcile.is_some() && route.destination_of.is_none())
            .collect()
    }

    async fn scheduled(self: Arc<Self>, route: Arc<Route>, settings: Arc<ReconcileSettings>) {
        let now_ms = self.parts.clock.now_ms();
        let every_ms = settings.every.as_millis() as u64;
        let next = match self.pass(&route, &settings, false, None).await {
            Ok(_) => now_ms + every_ms,
            Err(RunError::NotDue(ended_ms)) => {
                // Another gateway's pass (or this one's, before a
                // restart): its result is the fleet's.
                if let Ok(ledger) = self.ledger(&route).await {
                    self.show(&route, &ledger);
                }
                (ended_ms + every_ms).max(now_ms + 1000)
            }
            Err(RunError::Store(error)) => {
                tracing::warn!(route = %route.name, %error, "could not take the reconciliation lease");
                now_ms + RETRY.as_millis() as u64
            }
            Err(_) => now_ms + RETRY.as_millis() as u64,
        };
        lock(&self.next).insert(route.name.clone(), next);
        lock(&self.running).remove(&route.name);
    }

    /// An operator's pass, now: over the last `since` (else from where the
    /// last good pass ended), or a dry run that only lists what is missing
    /// (over `since`, else the whole `lookback`) and changes nothing.
    pub async fn run_now(
        self: &Arc<Self>,
        name: &str,
        since: Option<Duration>,
        dry_run: bool,
    ) -> Result<Report, RunError> {
        let (route, settings) = self.reconciling_route(name)?;
        let longest = settings.sender.retention.min(route.claim.retention);
        if since.is_some_and(|since| since > longest) {
            return Err(RunError::Since(format!(
                "since must be at most {} (the sender's retention, and the route's: an event completed longer ago is forgotten)",
                crate::clock::humanize(longest)
            )));
        }
        if dry_run {
            let since = since.unwrap_or(settings.lookback);
            let window = self.window(Some(since), &settings, None);
            let (tally, result) = self.walk(&route, &settings, window, true).await;
            if let Err(error) = result {
                return Ok(Report::DryRun(
                    json!({ "dry_run": true, "error": error.to_string() }),
                ));
            }
            return Ok(Report::DryRun(json!({
                "dry_run": true,
                "route": route.name,
                "since": rfc3339(window.since * 1000),
                "until": rfc3339(window.until * 1000),
                "seen": tally.seen,
                "missing": tally.missing_keys,
            })));
        }
        // Its own task: an operator hanging up does not cut the pass short.
        let (me, route) = (Arc::clone(self), Arc::clone(&route));
        let ledger = tokio::spawn(async move {
            let ledger = me.pass(&route, &settings, true, since).await?;
            Ok::<_, RunError>(me.json(&route, &settings, &ledger))
        });
        let ledger = ledger.await.map_err(|_| RunError::Busy)??;
        Ok(Report::Ran(ledger))
    }

    /// Route `name` of the running config, and its reconciliation.
    fn reconciling_route(
        &self,
        name: &str,
    ) -> Result<(Arc<Route>, Arc<ReconcileSettings>), RunError> {
        let route = (self.parts.routes.named(name)).ok_or(RunError::NotConfigured)?;
        let settings = route.reconcile.clone().ok_or(RunError::NotConfigured)?;
        Ok((route, settings))
    }

    /// The route's status, as the admin API shows it.
    pub async fn status(&self, name: &str) -> Result<Value, RunError> {
        let (route, settings) = self.reconciling_route(name)?;
        let ledger = self.ledger(&route).await?;
        Ok(self.json(&route, &settings, &ledger))
    }

    fn json(&self, route: &Route, settings: &ReconcileSettings, ledger: &Ledger) -> Value {
        let at = |secs: Option<u64>| secs.map(|secs| rfc3339(secs * 1000));
        json!({
            "route": route.name,
            "sender": settings.sender.name,
            "every": crate::clock::humanize(settings.every),
            "lookback": crate::clock::humanize(settings.lookback),
            "last_run_at": at(ledger.last_run_at),
            "last_success_at": at(ledger.last_success_at),
            "since": at(ledger.since),
            "until": at(ledger.until),
            "seen": ledger.seen,
            "missing": ledger.missing,
            "delivered": ledger.delivered,
            "asked": ledger.asked,
            "errors": ledger.errors,
            "last_error": ledger.last_error,
            "api_calls": ledger.api_calls,
            "store_reads": ledger.store_reads,
        })
    }

    /// One pass under the fleet's lease (an operator's takes the lease
    /// from a pass that ended, never from one running), recorded.
    async fn pass(
        &self,
        route: &Arc<Route>,
        settings: &ReconcileSettings,
        forced: bool,
        since: Option<Duration>,
    ) -> Result<Ledger, RunError> {
        let store = &self.parts.store;
        let lease_key = store.key(&scope(route), &format!("lease:{}", route.name));
        let claim = ClaimRequest {
            mode: match forced {
                true => ClaimMode::Redeliver { force: true },
                false => ClaimMode::Deliver,
            },
            ..ClaimRequest::delivery(&lease_key, "", LEASE_TTL, settings.every)
        };
        let lease = match store.records().claim(claim).await? {
            ClaimOutcome::New(lease) => lease,
            ClaimOutcome::Completed(record) => {
                return Err(RunError::NotDue(record.completed_at_ms.unwrap_or_default()))
            }
            _ => return Err(RunError::Busy),
        };
        let previous = self.ledger(route).await.unwrap_or_default();
        let window = self.window(since, settings, previous.until);
        let renewing = async {
            loop {
                tokio::time::sleep(LEASE_TTL / 3).await;
                if !matches!(
                    store.records().renew(&lease_key, &lease, LEASE_TTL).await,
                    Ok(true)
                ) {
                    return;
                }
            }
        };
        let walked = tokio::select! {
            walked = self.walk(route, settings, window, false) => Some(walked),
            () = renewing => None,
        };
        let ended = self.parts.clock.now_ms() / 1000;
        let mut ledger = Ledger {
            last_run_at: Some(ended),
            ..previous
        };
        let good = match walked {
            Some((tally, result)) => self.tallied(route, &mut ledger, &tally, result),
            None => {
                ledger.last_error = Some("the pass lost its lease in the store".into());
                false
            }
        };
        if good {
            (ledger.since, ledger.until) = (Some(window.since), Some(window.until));
            ledger.last_success_at = Some(ended);
        }
        let result = if good { "ok" } else { "error" };
        let metrics = &self.parts.metrics.reconcile;
        (metrics.runs.with_label_values(&[&route.name, result])).inc();
        match &ledger.last_error {
            Some(error) if !good => {
                tracing::warn!(route = %route.name, error, "reconciliation pass failed")
            }
            _ => tracing::info!(route = %route.name, seen = ledger.seen, missing = ledger.missing,
                delivered = ledger.delivered, asked = ledger.asked, "reconciliation pass"),
        }
        self.show(route, &ledger);
        if let Err(error) = self.record(route, &ledger).await {
            tracing::warn!(route = %route.name, %error, "could not record the reconciliation pass");
        }
        // The next pass, anywhere, one `every` from now.
        store
            .records()
            .complete(&lease_key, &lease, &note(Bytes::new()), settings.every)
            .await?;
        Ok(ledger)
    }

    /// What a walk found, into the pass's `ledger`, its metrics and, for
    /// missing events, a notice; whether the pass was good.
    fn tallied(
        &self,
        route: &Route,
        ledger: &mut Ledger,
        tally: &Tally,
        result: Result<(), api::ApiError>,
    ) -> bool {
        let good = result.is_ok() && tally.errors == 0;
        ledger.last_error = match result {
            Err(error) => Some(error.to_string()),
            Ok(()) => tally.last_error.clone(),
        };
        self.count(route, tally);
        if tally.missing > 0 {
            let (missing, delivered) = (tally.missing, tally.delivered);
            let now_ms = self.parts.clock.now_ms();
            let notice = Notice::reconcile_missing(&route.name, missing, delivered, now_ms);
            self.parts.notices.say(notice);
        }
        (
            ledger.seen,
            ledger.missing,
            ledger.delivered,
            ledger.asked,
            ledger.errors,
        ) = (
            tally.seen,
            tally.missing,
            tally.delivered,
            tally.asked,
            tally.errors,
        );
        (ledger.api_calls, ledger.store_reads) = (u64::from(tally.calls), u64::from(tally.reads));
        good
    }

    /// The pass's window: from `since` ago, else a little before where the
    /// last good pass ended, never beyond `lookback`; to a minute ago.
    fn window(
        &self,
        since: Option<Duration>,
        settings: &ReconcileSettings,
        last_until: Option<u64>,
    ) -> Window {
        let now = self.parts.clock.now_ms() / 1000;
        let earliest = now.saturating_sub(settings.lookback.as_secs());
        let since = match (since, last_until) {
            (Some(since), _) => now.saturating_sub(since.as_secs()),
            (None, Some(until)) => until.saturating_sub(OVERLAP).max(earliest),
            (None, None) => earliest,
        };
        Window {
            since,
            until: now.saturating_sub(SETTLE),
        }
    }

    /// List the window and recover what is missing.
    async fn walk(
        &self,
        route: &Arc<Route>,
        settings: &ReconcileSettings,
        window: Window,
        dry_run: bool,
    ) -> (Tally, Result<(), api::ApiError>) {
        let marks = scope(route);
        let pass = Pass {
            gateway: &self.gateway,
            store: &self.parts.store,
            route,
            settings,
            window,
            dry_run,
            marks: &marks,
            clock: &self.parts.clock,
        };
        let mut api = Api {
            client: &self.client,
            base: &settings.api_base,
            credentials: &settings.credentials,
            calls: 0,
        };
        let mut tally = Tally::default();
        let result = pass.run(&mut api, &mut tally).await;
        tally.calls = api.calls;
        tracing::debug!(route = %route.name, calls = tally.calls, reads = tally.reads, "reconciliation pass cost");
        (tally, result)
    }

    fn count(&self, route: &Route, tally: &Tally) {
        let metrics = &self.parts.metrics.reconcile;
        let name = [route.name.as_str()];
        metrics
            .missing
            .with_label_values(&name)
            .inc_by(tally.missing);
        metrics
            .delivered
            .with_label_values(&name)
            .inc_by(tally.delivered);
        metrics.asked.with_label_values(&name).inc_by(tally.asked);
    }

    /// The fleet's last good pass on this gateway's gauge.
    fn show(&self, route: &Route, ledger: &Ledger) {
        let gauge = &self.parts.metrics.reconcile.last_success;
        let at = ledger.last_success_at.unwrap_or_default();
        gauge.with_label_values(&[&route.name]).set(at as f64);
    }

    fn status_key(&self, route: &Route) -> StoreKey {
        (self.parts.store).key(&scope(route), &format!("status:{}", route.name))
    }

    /// What the last pass recorded, if any pass did.
    async fn ledger(&self, route: &Route) -> Result<Ledger, RunError> {
        let record = self
            .parts
            .store
            .records()
            .get(&self.status_key(route))
            .await?;
        let body = record.and_then(|record| record.response).map(|r| r.body);
        Ok(body
            .and_then(|body| serde_json::from_slice(&body).ok())
            .unwrap_or_default())
    }

    async fn record(&self, route: &Route, ledger: &Ledger) -> Result<(), StoreError> {
        let store = &self.parts.store;
        let key = self.status_key(route);
        let claim = ClaimRequest {
            mode: ClaimMode::Redeliver { force: true },
            ..ClaimRequest::delivery(&key, "", LEASE_TTL, KEPT)
        };
        let ClaimOutcome::New(lease) = store.records().claim(claim).await? else {
            return Ok(());
        };
        let body = serde_json::to_vec(ledger).unwrap_or_default();
        store
            .records()
            .complete(&key, &lease, &note(Bytes::from(body)), KEPT)
            .await
            .map(|_| ())
    }
}

/// What a reconciliation key (a lease, a status, an ask) records when it
/// completes: a note of its own, in the shape of an answer.
fn note(body: Bytes) -> RecordedResponse {
    RecordedResponse {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        body,
        body_kept: BodyKept::Whole,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}
