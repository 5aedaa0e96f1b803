//! A leased event's work, whichever queue a worker leased it from: a
//! fanned-out route's event is handed to its destinations
//! ([`Engine::hand_out`]); an event whose attempts or age are spent
//! is parked as a dead letter without a call; any other is attempted, in a
//! span of its own.

use std::sync::Arc;

use super::attempt::{Attempt, Kind, Settled, Traced};
use super::places::Place;
use super::policy::{self, Rules};
use super::Engine;
use crate::claim::Claim;
use crate::route::Route;
use crate::store::{
    AttemptKind, Due, Failure, FailureClass, Next, PastAttempt, StoredRequest, SyncNext,
};
use crate::traffic::Admission;

impl Engine {
    /// Give the event a worker leased, `due` on `route`, its work, with
    /// the `place` and the `admission` the worker's pass took for it.
    pub async fn deliver_due(
        &self,
        route: Arc<Route>,
        due: Due,
        (place, admission): (Place, Admission),
    ) {
        let Some(request) = due.record.request else {
            tracing::error!(route = %route.name, key = %due.id, "an accepted event without its request; leaving it to its lease");
            return;
        };
        let first_seen_ms = due.record.first_seen_ms;
        let key = self.parts.store.key(&route.keying.scope, &due.id);
        if route.fans_out() {
            // Not a call: the event is handed to each destination it passed.
            let event = (due.id, request, due.record.body_sha256);
            self.hand_out(route, (key, due.lease), event).await;
            return;
        }
        let now_ms = self.parts.clock.now_ms();
        let rules = Rules::of(&route);
        if let Some(why) = policy::spent(&rules, due.lease.attempt, first_seen_ms, now_ms) {
            let claim = self.claim_for(&route, key, due.lease);
            self.park(&route, claim, &request, why).await;
            return;
        }
        let attempt = Attempt {
            admission,
            place,
            ..Attempt::new(
                Arc::clone(&route),
                (key, due.lease),
                Kind::Worker,
                first_seen_ms,
            )
        };
        let attempted = self
            .attempt_stored(attempt, &due.id, request, Traced::Own)
            .await;
        if let Settled::Retrying(after) = attempted.settled {
            tracing::info!(route = %route.name, key = %due.id, retry_in_ms = after.as_millis() as u64, "delivery failed; retrying later");
        }
    }

    /// Park the event `claim` holds as a dead letter without calling: a
    /// poison event whose attempts keep dying with their gateway would
    /// otherwise be retried forever. The history says `why`.
    async fn park(&self, route: &Route, claim: Claim, request: &StoredRequest, why: &str) {
        let key = claim.key().id().to_owned();
        tracing::warn!(route = %route.name, key, why, "event parked as a dead letter before another attempt");
        let tried = PastAttempt::new(
            self.parts.clock.now_ms(),
            AttemptKind::Worker,
            FailureClass::Unknown,
            None,
            0,
            Some(format!("not attempted: {why}")),
            &[],
        );
        let failure = Failure {
            class: FailureClass::Unknown,
            status: None,
            request,
            attempt: &tried,
            route: &route.name,
            retention: route.failures.dead_letter_retention,
            next: Next {
                sync: SyncNext::Dead,
                queued: None,
            },
        };
        let attempts = claim.attempt();
        if claim.fail(&failure).await.is_some() {
            route.series.dead_letters.inc();
            (self.parts.notices).dead_letter(route, &key, attempts, &tried, request);
        }
        self.count(route, Kind::Worker, Settled::Dead);
    }
}
