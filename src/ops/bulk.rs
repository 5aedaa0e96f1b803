//! Bulk actions (docs/guide/dead-letters.md, "Bulk actions"): redeliver, replay or forget
//! every event a filter matches — "everything that failed with 503 between
//! 14:02 and 14:40" — in one action that runs in the gateway.
//!
//! The matches are collected first, so the action covers each of them once
//! however the records change while it runs (a redelivery moves its record
//! to the front of the listing it came from). Each event then goes through
//! the same door as a single action ([`Operator::redeliver`] and its
//! siblings): its own claim with a fencing token, never beside a live
//! holder, and governed — before each event the action waits while the
//! route is paused, its breaker open or its rate spent, and an async
//! route's `max_in_flight` bounds it like every other call. Events are
//! started at most `rate` a second, at most [`CONCURRENCY`] at once.
//!
//! A bulk action belongs to the instance that took it: its progress is
//! kept in that process ([`Bulks`]) and logged. If the instance stops, the
//! action stops with it (what was sent stays recorded); the same command
//! run again finds only what is left, because a completed event is never
//! redelivered by a bulk action (it needs `force`, which bulk actions do
//! not take).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::filter::Filter;
use super::redeliver::detached;
use super::Operator;
use super::{EventsQuery, OpsError};
use crate::clock::Clock;
use crate::delivery::Settled;
use crate::error::GatewayError;
use crate::route::Route;
use crate::store::RecordState;
use crate::traffic::PAUSE_POLL;

/// Events of one bulk action in flight at once, at most.
pub const CONCURRENCY: usize = 8;
/// Finished bulk actions an instance remembers for `GET /admin/bulk`.
const KEPT: usize = 100;
/// Tries of one event while the store does not answer.
const STORE_TRIES: u32 = 3;

/// What a bulk action does to each match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send again under the same key (a retry).
    Redeliver,
    /// Send as a new event under `{key}.replay-{n}`.
    Replay,
    /// Forget the key: its next delivery is processed again.
    Forget,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Redeliver => "redeliver",
            Action::Replay => "replay",
            Action::Forget => "forget",
        }
    }
}

/// Which events a bulk action takes: a listing's route, state and filter.
#[derive(Clone)]
pub struct Selection {
    pub route: Option<Arc<Route>>,
    pub state: Option<RecordState>,
    pub filter: Filter,
}

impl Selection {
    /// Whether it leaves out any event at all.
    pub fn narrows(&self) -> bool {
        self.route.is_some() || self.state.is_some() || self.filter.narrows()
    }
}

/// One match: the route that owns it and its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Match {
    pub route: String,
    pub key: String,
}

/// Where a bulk action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    Finished,
    /// Stopped by the operator (or by shutdown) before its end.
    Cancelled,
    /// Its task ended by a fault before its end; `last_error` says what.
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Finished => "finished",
            State::Cancelled => "cancelled",
            State::Failed => "failed",
        }
    }
}

/// One bulk action, shared by its task and whoever asks after it.
pub struct Bulk {
    pub id: String,
    pub action: Action,
    /// Who asked (the audit: address, via, role).
    pub by: String,
    /// The filter as asked, for the operator to read back.
    pub selection: String,
    /// Events a second.
    pub rate: f64,
    pub matched: u64,
    pub started_ms: u64,
    counts: Counts,
    /// The state, and when it left `Running` (Unix ms).
    state: watch::Sender<(State, Option<u64>)>,
    /// Set to stop taking events.
    cancel: watch::Sender<Option<&'static str>>,
    last_error: Mutex<Option<String>>,
    /// What traffic control holds it by now (`route_paused`,
    /// `upstream_circuit_open`, `rate_limited`), while it waits.
    waiting_on: Mutex<Option<&'static str>>,
}

/// How each match ended so far.
#[derive(Default)]
struct Counts {
    /// Sent and answered with the upstream's final answer (for a forget:
    /// forgotten).
    delivered: AtomicU64,
    /// Sent and not completed (the record stays failed, or is retried).
    failed: AtomicU64,
    /// Of the failed, parked as a dead letter (again).
    dead: AtomicU64,
    /// Queued events made due now: their workers deliver them.
    queued: AtomicU64,
    /// Left alone: in flight, completed meanwhile, forgotten, keeping no
    /// request, or its route gone.
    skipped: AtomicU64,
}

/// What a bulk action has done so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub state: State,
    pub finished_ms: Option<u64>,
    pub cancelled_by: Option<&'static str>,
    pub delivered: u64,
    pub failed: u64,
    pub dead: u64,
    pub queued: u64,
    pub skipped: u64,
    pub last_error: Option<String>,
    pub waiting_on: Option<&'static str>,
}

impl Progress {
    /// Matches dealt with, whatever the outcome.
    pub fn done(&self) -> u64 {
        self.delivered + self.failed + self.queued + self.skipped
    }
}

impl Bulk {
    pub fn progress(&self) -> Progress {
        let (state, finished_ms) = *self.state.borrow();
        let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Progress {
            state,
            finished_ms,
            cancelled_by: *self.cancel.borrow(),
            delivered: count(&self.counts.delivered),
            failed: count(&self.counts.failed),
            dead: count(&self.counts.dead),
            queued: count(&self.counts.queued),
            skipped: count(&self.counts.skipped),
            last_error: self.last_error.lock().expect("poisoned").clone(),
            waiting_on: *self.waiting_on.lock().expect("poisoned"),
        }
    }

    /// Traffic control holds the next match by `code`, or (`None`) no more.
    pub(super) fn wait_on(&self, code: Option<&'static str>) {
        *self.waiting_on.lock().expect("poisoned") = code;
    }

    /// Stop taking events (those in flight finish); whether it was running.
    pub fn cancel(&self, by: &'static str) -> bool {
        let running = self.state.borrow().0 == State::Running;
        if running {
            self.cancel.send_if_modified(|cancel| {
                let first = cancel.is_none();
                if first {
                    *cancel = Some(by);
                }
                first
            });
        }
        running
    }

    /// Until it is no longer running.
    pub async fn finished(&self) -> Progress {
        let mut state = self.state.subscribe();
        let _ = state.wait_for(|(state, _)| *state != State::Running).await;
        self.progress()
    }

    fn cancelled(&self) -> bool {
        self.cancel.borrow().is_some()
    }

    /// Resolves once it is cancelled.
    async fn until_cancelled(&self) {
        let mut cancel = self.cancel.subscribe();
        let _ = cancel.wait_for(Option::is_some).await;
    }
}

/// The bulk actions of this instance: the running ones and the last
/// [`KEPT`] finished.
#[derive(Default)]
pub struct Bulks {
    all: Mutex<VecDeque<Arc<Bulk>>>,
}

impl Bulks {
    pub fn get(&self, id: &str) -> Option<Arc<Bulk>> {
        let all = self.all.lock().expect("poisoned");
        all.iter().find(|bulk| bulk.id == id).cloned()
    }

    /// Every bulk action remembered, newest first.
    pub fn list(&self) -> Vec<Arc<Bulk>> {
        let all = self.all.lock().expect("poisoned");
        all.iter().rev().cloned().collect()
    }

    fn add(&self, bulk: Arc<Bulk>) {
        let mut all = self.all.lock().expect("poisoned");
        all.push_back(bulk);
        while all.len() > KEPT {
            let Some(at) = all
                .iter()
                .position(|b| b.state.borrow().0 != State::Running)
            else {
                break;
            };
            all.remove(at);
        }
    }
}

/// What starting a bulk action needs beyond the matches.
pub struct Start {
    pub action: Action,
    pub by: String,
    pub selection: String,
    pub rate: f64,
}

impl Operator {
    /// Every event `selection` matches now, each once: the listing walked
    /// to its end, then once more over what changed meanwhile (a record
    /// that moved while the first walk ran is not lost).
    pub async fn matches(&self, selection: &Selection) -> Result<Vec<Match>, OpsError> {
        let begun = self.parts.clock.now_ms();
        let first = Filter {
            until_ms: Some(
                selection
                    .filter
                    .until_ms
                    .map_or(begun, |until| until.min(begun)),
            ),
            ..selection.filter.clone()
        };
        let mut found = Vec::new();
        let mut seen = HashSet::new();
        self.walk(selection, first, &mut found, &mut seen).await?;
        if selection.filter.until_ms.is_none_or(|until| until >= begun) {
            let since = selection
                .filter
                .since_ms
                .map_or(begun, |since| since.max(begun));
            let changed = Filter {
                since_ms: Some(since),
                ..selection.filter.clone()
            };
            self.walk(selection, changed, &mut found, &mut seen).await?;
        }
        Ok(found)
    }

    async fn walk(
        &self,
        selection: &Selection,
        filter: Filter,
        found: &mut Vec<Match>,
        seen: &mut HashSet<(String, String)>,
    ) -> Result<(), OpsError> {
        let mut cursor = None;
        loop {
            let query = EventsQuery {
                route: selection.route.clone(),
                state: selection.state,
                filter: filter.clone(),
                limit: super::SCAN_PAGE,
                cursor,
            };
            let page = self.events(query).await?;
            for (route, listed) in page.events {
                if seen.insert((listed.scope, listed.id.clone())) {
                    found.push(Match {
                        route,
                        key: listed.id,
                    });
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// Collect what `selection` matches and start `start.action` over it,
    /// registered in `bulks` — both in a task of the gateway, so a caller
    /// that hangs up while the matches are collected does not stop it.
    pub async fn bulk(
        &self,
        bulks: &Arc<Bulks>,
        selection: Selection,
        start: Start,
    ) -> Result<Arc<Bulk>, OpsError> {
        let (gateway, bulks) = (self.clone(), Arc::clone(bulks));
        detached(async move {
            let matches = gateway.matches(&selection).await?;
            Ok(gateway.start_bulk(&bulks, start, matches))
        })
        .await
    }

    /// Start `start.action` over `matches` as a task of the gateway,
    /// registered in `bulks`.
    fn start_bulk(&self, bulks: &Bulks, start: Start, matches: Vec<Match>) -> Arc<Bulk> {
        let bulk = Arc::new(Bulk {
            id: new_id(),
            action: start.action,
            by: start.by,
            selection: start.selection,
            rate: start.rate,
            matched: matches.len() as u64,
            started_ms: self.parts.clock.now_ms(),
            counts: Counts::default(),
            state: watch::Sender::new((State::Running, None)),
            cancel: watch::Sender::new(None),
            last_error: Mutex::new(None),
            waiting_on: Mutex::new(None),
        });
        bulks.add(Arc::clone(&bulk));
        tracing::info!(target: "hookgate::admin", bulk = %bulk.id, action = bulk.action.as_str(),
            matched = bulk.matched, rate = bulk.rate, by = %bulk.by, selection = %bulk.selection, "bulk action started");
        let gateway = self.clone();
        let task = Arc::clone(&bulk);
        let running = tokio::spawn(async move { gateway.run_bulk(task, matches).await });
        let clock = self.parts.clock.clone();
        tokio::spawn(watch_over(Arc::clone(&bulk), clock, running));
        bulk
    }

    async fn run_bulk(self, bulk: Arc<Bulk>, matches: Vec<Match>) {
        // The rate was validated (1/h to 10,000/s); never slower than that.
        let every = Duration::from_secs_f64((1.0 / bulk.rate).min(3600.0));
        let mut pace = tokio::time::interval(every);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut running = JoinSet::new();
        let total = matches.len();
        for (i, target) in matches.into_iter().enumerate() {
            if self.engine.is_draining() {
                bulk.cancel("shutdown");
            }
            if bulk.cancelled() {
                break;
            }
            tokio::select! {
                _ = pace.tick() => {}
                _ = bulk.until_cancelled() => break,
            }
            while running.len() >= CONCURRENCY {
                running.join_next().await;
            }
            let gateway = self.clone();
            let each = Arc::clone(&bulk);
            running.spawn(async move { gateway.one(&each, target).await });
            if (i + 1) % 500 == 0 {
                let progress = bulk.progress();
                tracing::info!(target: "hookgate::admin", bulk = %bulk.id, started = i + 1, of = total,
                    delivered = progress.delivered, failed = progress.failed, skipped = progress.skipped, "bulk action progress");
            }
        }
        while running.join_next().await.is_some() {}
        let end = match bulk.cancelled() {
            true => State::Cancelled,
            false => State::Finished,
        };
        bulk.state
            .send_replace((end, Some(self.parts.clock.now_ms())));
        let progress = bulk.progress();
        tracing::info!(target: "hookgate::admin", bulk = %bulk.id, action = bulk.action.as_str(), state = end.as_str(),
            cancelled_by = progress.cancelled_by, matched = bulk.matched, delivered = progress.delivered,
            failed = progress.failed, dead = progress.dead, queued = progress.queued, skipped = progress.skipped,
            "bulk action ended");
    }

    /// Wait until traffic control would let a call of `route` through
    /// (for the bulk action `bulk`, which shows what holds it meanwhile).
    async fn wait_for_leave(&self, route: &Route, bulk: &Bulk) {
        let mut said = false;
        loop {
            let (code, wait) = match self.engine.admit(route) {
                Ok(admission) => {
                    drop(admission); // given back: the redelivery takes its own
                    bulk.wait_on(None);
                    return;
                }
                Err(GatewayError::CircuitOpen { retry_after }) => {
                    ("upstream_circuit_open", retry_after)
                }
                Err(GatewayError::RateLimited { retry_after }) => ("rate_limited", retry_after),
                Err(_) => ("route_paused", PAUSE_POLL),
            };
            bulk.wait_on(Some(code));
            if !said {
                tracing::info!(target: "hookgate::admin", bulk = %bulk.id, route = %route.name, code, "bulk action waits: the route is paused, its breaker open or its rate spent");
                said = true;
            }
            tokio::time::sleep(wait.min(PAUSE_POLL)).await;
        }
    }

    /// One match: waited for until traffic control lets it through,
    /// tried again while the route is held or the store does not answer.
    async fn one(&self, bulk: &Bulk, target: Match) {
        let counts = &bulk.counts;
        let Some(route) = self.parts.routes.named(&target.route) else {
            counts.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut store_tries = 0;
        loop {
            if bulk.action != Action::Forget {
                tokio::select! {
                    _ = self.wait_for_leave(&route, bulk) => {}
                    _ = bulk.until_cancelled() => {
                        counts.skipped.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            }
            let key = target.key.clone();
            let sent = match bulk.action {
                Action::Redeliver => self.redeliver_now(&route, &key, false).await,
                Action::Replay => self.replay_now(&route, &key).await,
                Action::Forget => match self.forget(&route, &key, false).await {
                    Ok(()) => {
                        counts.delivered.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Err(error) => Err(error),
                },
            };
            let counter = match sent {
                Ok(sent) => match sent.settled {
                    Settled::Completed(_) => &counts.delivered,
                    Settled::Queued => &counts.queued,
                    Settled::Dead => {
                        counts.dead.fetch_add(1, Ordering::Relaxed);
                        &counts.failed
                    }
                    _ => &counts.failed,
                },
                Err(OpsError::RoutePaused | OpsError::UpstreamHeld { .. }) => continue,
                Err(OpsError::StoreUnavailable(error)) if store_tries + 1 < STORE_TRIES => {
                    store_tries += 1;
                    tracing::warn!(target: "hookgate::admin", bulk = %bulk.id, route = %route.name, key, %error,
                        "bulk action: the store did not answer; trying the event again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(error @ OpsError::StoreUnavailable(_)) => {
                    tracing::warn!(target: "hookgate::admin", bulk = %bulk.id, route = %route.name, key, %error,
                        "bulk action: the event was not sent, the store did not answer");
                    *bulk.last_error.lock().expect("poisoned") = Some(error.to_string());
                    &counts.failed
                }
                // Among them an event a route with destinations handed
                // out (destination_required): its destinations' deliveries,
                // in the same selection, are what is sent again.
                Err(_) => &counts.skipped,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
}

/// Wait for `bulk`'s task: whatever ends it, the action ends in a final
/// state with its cause — never `running` forever, and a cancel of it is
/// always answered.
async fn watch_over(bulk: Arc<Bulk>, clock: Clock, running: JoinHandle<()>) {
    let Err(error) = running.await else { return };
    let cause = match error.try_into_panic() {
        Ok(panic) => (panic.downcast_ref::<&str>().map(|text| text.to_string()))
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a fault".to_owned()),
        Err(_) => "its task was stopped".to_owned(),
    };
    let cause = format!("the bulk action stopped: {cause}");
    tracing::error!(target: "hookgate::admin", bulk = %bulk.id, cause, "bulk action failed");
    *bulk.last_error.lock().expect("poisoned") = Some(cause);
    bulk.state
        .send_replace((State::Failed, Some(clock.now_ms())));
}

/// A bulk action's id: `b_` and 16 hex digits.
fn new_id() -> String {
    format!("b_{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that dies leaves its action `failed`, with why.
    #[tokio::test]
    async fn a_bulk_action_whose_task_dies_ends_failed_with_its_cause() {
        let bulk = Arc::new(Bulk {
            id: new_id(),
            action: Action::Redeliver,
            by: "test".into(),
            selection: "every event".into(),
            rate: 1.0,
            matched: 3,
            started_ms: 0,
            counts: Counts::default(),
            state: watch::Sender::new((State::Running, None)),
            cancel: watch::Sender::new(None),
            last_error: Mutex::new(None),
            waiting_on: Mutex::new(None),
        });
        let dies = tokio::spawn(async { panic!("a pacing interval of zero") });
        watch_over(Arc::clone(&bulk), Clock::for_test(), dies).await;
        let progress = bulk.finished().await;
        assert_eq!(progress.state, State::Failed);
        let why = progress.last_error.unwrap();
        assert!(why.contains("a pacing interval of zero"), "{why}");
        assert!(
            !bulk.cancel("operator"),
            "a cancel is answered: not running"
        );
    }

    #[test]
    fn ids_differ() {
        assert_ne!(new_id(), new_id());
        assert!(new_id().starts_with("b_") && new_id().len() == 18);
    }
}
