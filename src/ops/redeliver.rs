//! Sending a stored event again, on an operator's word (docs/guide/dead-letters.md, "Failed
//! events and dead letters"): a **redelivery** forwards the stored request
//! under the **same** key (a retry: the upstream may recognise it), a
//! **replay** under a **new** key derived from the original,
//! `{key}.replay-{n}` (a new event, done again on purpose). A bulk action
//! (`bulk`), a redrive among them, does one of these to each match.
//!
//! Each runs as a task of the gateway, not of the caller's connection: a
//! caller that hangs up (a CLI timeout, a closed console tab) does not stop
//! it, and SIGTERM treats its claim like any other holder's. Each is one
//! [`Attempt`] — the claim with a fencing token, the call renewing it, the
//! outcome settled by the same rules as every other entrance — and is
//! governed like every call to the upstream: a paused route, an open
//! breaker or a spent rate refuse a single action and hold a bulk action until
//! they clear, and an async route's `max_in_flight` bounds them too. A
//! redelivery never runs beside a live claim; a completed event is only
//! sent again when forced; a queued event is made due now, for its
//! workers. An operator's failure never spends a sender's retries: a failed
//! record stays failed, a dead letter is dead again.

use std::sync::Arc;

use http::StatusCode;

use super::Operator;
use super::OpsError;
use crate::config::DeliveryMode;
use crate::delivery::places::Place;
use crate::delivery::{Attempt, Kind, Settled, Traced};
use crate::error::GatewayError;
use crate::key;
use crate::route::Route;
use crate::store::{ClaimMode, ClaimOutcome, Lease, Record, RecordState, StoreKey, StoredRequest};
use crate::traffic::Admission;
use crate::upstream::{UpstreamError, UpstreamResponse};

/// Replays of one event, at most (`{key}.replay-1` … `-1000`).
pub const MAX_REPLAYS: u32 = 1000;

/// What one attempt did.
#[derive(Debug)]
pub struct Sent {
    /// The key the upstream got.
    pub key: String,
    pub attempt: u32,
    pub settled: Settled,
    /// The upstream's status, when it answered.
    pub upstream_status: Option<StatusCode>,
    /// Why it did not answer.
    pub upstream_error: Option<String>,
}

impl Sent {
    /// A queued event made due now: its workers deliver it.
    fn queued(key: &str, attempt: u32) -> Self {
        Sent {
            key: key.to_owned(),
            attempt,
            settled: Settled::Queued,
            upstream_status: None,
            upstream_error: None,
        }
    }
}

/// A task of the gateway's, awaited: its caller may go away, the task
/// runs on.
pub(super) async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T, OpsError>> + Send + 'static,
) -> Result<T, OpsError> {
    tokio::spawn(work).await.unwrap_or(Err(OpsError::Ended))
}

/// Leave for one operator call of `route`: pause, breaker and rate, and
/// one of an async route's `max_in_flight` places (waited for, the claim
/// renewed meanwhile).
struct Leave {
    admission: Admission,
    place: Place,
}

impl Operator {
    /// Forward the stored request of `key` again under the same key; a
    /// completed event only with `force`; a queued one is made due now.
    pub async fn redeliver(
        &self,
        route: Arc<Route>,
        key: String,
        force: bool,
    ) -> Result<Sent, OpsError> {
        let gateway = self.clone();
        detached(async move { gateway.redeliver_now(&route, &key, force).await }).await
    }

    /// The record of `key` and its stored request, if an operator may
    /// redeliver it now: its route not paused, the record there, not
    /// completed (unless `force`; never on a route that fans out, whose
    /// destinations' deliveries are their own), its request kept.
    async fn redeliverable(
        &self,
        route: &Route,
        key: &str,
        force: bool,
    ) -> Result<(StoreKey, Record, StoredRequest), OpsError> {
        if self.parts.pauses.is_paused(&route.name) {
            return Err(OpsError::RoutePaused);
        }
        let store = &self.parts.store;
        let store_key = store.key(&route.keying.scope, key);
        let mut record = store
            .records()
            .get(&store_key)
            .await
            .map_err(OpsError::from)?
            .ok_or(OpsError::KeyNotFound)?;
        if route.fans_out() && record.state == RecordState::Completed {
            // Handed out: each destination's delivery is its own.
            return Err(OpsError::DestinationRequired);
        }
        if record.state == RecordState::Completed && !force {
            return Err(OpsError::Completed);
        }
        let request = record.request.take().ok_or(OpsError::RequestNotStored)?;
        Ok((store_key, record, request))
    }

    pub(super) async fn redeliver_now(
        &self,
        route: &Arc<Route>,
        key: &str,
        force: bool,
    ) -> Result<Sent, OpsError> {
        let (store_key, record, request) = self.redeliverable(route, key, force).await?;
        let store = &self.parts.store;
        let claim = |mode| route.claim_again(&store_key, &record.body_sha256, mode);
        if record.state == RecordState::Queued {
            // The workers deliver it, governed like every queued event.
            return match store
                .records()
                .claim(claim(ClaimMode::Redeliver { force }))
                .await
            {
                Ok(ClaimOutcome::Queued) => {
                    self.parts.places.wake();
                    Ok(Sent::queued(key, record.attempts))
                }
                Ok(_) => Err(OpsError::InFlight),
                Err(error) => Err(OpsError::from(error)),
            };
        }
        if route.fans_out() {
            // Never handed out (it died, or failed, before the route had
            // destinations): handing it out is its delivery.
            let claimed = store
                .records()
                .claim(claim(ClaimMode::Redeliver { force }))
                .await;
            return match claimed.map_err(OpsError::from)? {
                ClaimOutcome::New(lease) => {
                    let held = (store_key, lease);
                    self.hand_out(route, held, key, request, record.body_sha256)
                        .await
                }
                ClaimOutcome::Queued => {
                    self.parts.places.wake();
                    Ok(Sent::queued(key, record.attempts))
                }
                _ => Err(OpsError::InFlight),
            };
        }
        let leave = self.leave(route)?;
        let claimed = store
            .records()
            .claim(claim(ClaimMode::Redeliver { force }))
            .await
            .map_err(OpsError::from)?;
        let lease = match claimed {
            ClaimOutcome::New(lease) => lease,
            ClaimOutcome::InFlight { .. } => return Err(OpsError::InFlight),
            ClaimOutcome::Completed(_) => return Err(OpsError::Completed),
            ClaimOutcome::Queued => {
                self.parts.places.wake();
                return Ok(Sent::queued(key, record.attempts));
            }
            ClaimOutcome::Dead(_) => {
                return Err(OpsError::StoreUnavailable(
                    "the store answered a redelivery as a delivery".into(),
                ))
            }
        };
        let was_dead = record.state == RecordState::Dead;
        let held = (store_key, lease, leave);
        Ok(self
            .send(
                route,
                held,
                key,
                request,
                Kind::Redeliver,
                record.first_seen_ms,
                was_dead,
            )
            .await)
    }

    /// Forward the stored request of `key` as a new event, under the first
    /// free key `{key}.replay-{n}`; the replay keeps the request and names
    /// its original.
    pub async fn replay(&self, route: Arc<Route>, key: String) -> Result<Sent, OpsError> {
        let gateway = self.clone();
        detached(async move { gateway.replay_now(&route, &key).await }).await
    }

    pub(super) async fn replay_now(&self, route: &Arc<Route>, key: &str) -> Result<Sent, OpsError> {
        if self.parts.pauses.is_paused(&route.name) {
            return Err(OpsError::RoutePaused);
        }
        let store = &self.parts.store;
        let record = store
            .records()
            .get(&store.key(&route.keying.scope, key))
            .await
            .map_err(OpsError::from)?
            .ok_or(OpsError::KeyNotFound)?;
        if route.fans_out() && record.state == RecordState::Completed {
            // Handed out: each destination's delivery is its own.
            return Err(OpsError::DestinationRequired);
        }
        let request = record.request.ok_or(OpsError::RequestNotStored)?;
        // A route with destinations hands the replay out: no call, no leave.
        let mut leave = match route.fans_out() {
            true => None,
            false => Some(self.leave(route)?),
        };
        for n in 1..=MAX_REPLAYS {
            let replay_key = key::validate(replay_key(key, n)).map_err(|_| OpsError::KeyInvalid)?;
            let store_key = store.key(&route.keying.scope, &replay_key);
            let claimed = store
                .records()
                .claim(route.claim_replay(&store_key, &record.body_sha256, &request, key))
                .await
                .map_err(OpsError::from)?;
            if let ClaimOutcome::New(lease) = claimed {
                if route.fans_out() {
                    let held = (store_key, lease);
                    let sha = record.body_sha256;
                    return self.hand_out(route, held, &replay_key, request, sha).await;
                }
                let Some(leave) = leave.take() else { break };
                let held = (store_key, lease, leave);
                let now = self.parts.clock.now_ms();
                return Ok(self
                    .send(route, held, &replay_key, request, Kind::Replay, now, false)
                    .await);
            }
        }
        Err(OpsError::TooManyReplays { limit: MAX_REPLAYS })
    }

    /// The replays of `key` that the store still holds, in order.
    pub async fn replays_of(&self, route: &Route, key: &str) -> Result<Vec<String>, OpsError> {
        let store = &self.parts.store;
        let mut found = Vec::new();
        for n in 1..=MAX_REPLAYS {
            let replay_key = replay_key(key, n);
            let record = store
                .records()
                .get(&store.key(&route.keying.scope, &replay_key))
                .await
                .map_err(OpsError::from)?;
            if record.is_none() {
                break;
            }
            found.push(replay_key);
        }
        Ok(found)
    }

    /// Hand the claimed event `key` of a route with destinations to each
    /// destination its filters take now; their workers deliver it.
    async fn hand_out(
        &self,
        route: &Arc<Route>,
        (store_key, lease): (StoreKey, Lease),
        key: &str,
        request: StoredRequest,
        body_sha256: String,
    ) -> Result<Sent, OpsError> {
        let attempt = lease.attempt;
        let event = (key.to_owned(), request, body_sha256);
        match (self
            .engine
            .hand_out(Arc::clone(route), (store_key, lease), event))
        .await
        {
            true => Ok(Sent::queued(key, attempt)),
            false => Err(OpsError::StoreUnavailable(
                "the event could not be handed to its destinations".into(),
            )),
        }
    }

    /// Leave for one operator call now, or the error that says why not.
    fn leave(&self, route: &Route) -> Result<Leave, OpsError> {
        let admission = self.engine.admit(route).map_err(|held| match held {
            GatewayError::CircuitOpen { retry_after } => OpsError::UpstreamHeld {
                code: "upstream_circuit_open",
                retry_after,
            },
            GatewayError::RateLimited { retry_after } => OpsError::UpstreamHeld {
                code: "rate_limited",
                retry_after,
            },
            _ => OpsError::RoutePaused,
        })?;
        let place = match &route.delivery {
            DeliveryMode::Async(settings) => {
                Place::Wait(self.parts.places.gate(&route.name, settings.max_in_flight))
            }
            DeliveryMode::Sync => Place::Free,
        };
        Ok(Leave { admission, place })
    }

    /// One attempt of `request` under `key`, on the claim `held` names;
    /// counted in `hookgate_redeliveries_total` as `kind`.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        route: &Arc<Route>,
        (store_key, lease, leave): (StoreKey, Lease, Leave),
        key: &str,
        request: StoredRequest,
        kind: Kind,
        first_seen_ms: u64,
        was_dead: bool,
    ) -> Sent {
        let attempt_no = lease.attempt;
        let Leave { admission, place } = leave;
        let attempt = Attempt {
            admission,
            place,
            was_dead,
            ..Attempt::new(Arc::clone(route), (store_key, lease), kind, first_seen_ms)
        };
        let attempted = (self.engine)
            .attempt_stored(attempt, key, request, Traced::Own)
            .await;
        let (upstream_status, upstream_error) = describe(&attempted.result);
        Sent {
            key: key.to_owned(),
            attempt: attempt_no,
            settled: attempted.settled,
            upstream_status,
            upstream_error,
        }
    }
}

/// The key of the `n`-th replay of `key`.
pub fn replay_key(key: &str, n: u32) -> String {
    format!("{key}.replay-{n}")
}

fn describe(
    result: &Result<UpstreamResponse, UpstreamError>,
) -> (Option<StatusCode>, Option<String>) {
    match result {
        Ok(answer) => (Some(answer.status), None),
        Err(error) => (None, Some(error.to_string())),
    }
}
