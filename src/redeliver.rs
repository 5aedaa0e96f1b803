//! Sending a stored event again, on an operator's word (SPEC §6): a
//! **redelivery** forwards the stored request under the **same** key (a
//! retry: the upstream may recognise it), a **replay** under a **new** key
//! derived from the original, `{key}.replay-{n}` (a new event, done again
//! on purpose), and a **redrive** redelivers every dead letter of a route,
//! paced.
//!
//! Each is one attempt through the same steps as a sender's delivery: a
//! claim with a fencing token, the upstream call renewing it, and the
//! outcome settled by `Gateway::settle` — recorded when final, failed (or
//! dead again) when not. A redelivery never runs beside a live claim, and a
//! completed event is only sent again when forced.

use std::time::{Duration, Instant};

use http::StatusCode;

use crate::claim::Claim;
use crate::config::DeliveryMode;
use crate::error::AdminError;
use crate::headers::new_request_id;
use crate::key;
use crate::pipeline::{Gateway, Settled};
use crate::route::Route;
use crate::store::{
    ClaimMode, ClaimOutcome, ClaimRequest, Clock, RecordState, StoreError, Stored, StoredRequest,
};
use crate::upstream::{resend, UpstreamError, UpstreamResponse};

/// Replays of one event, at most (`{key}.replay-1` … `-1000`).
pub const MAX_REPLAYS: u32 = 1000;

/// Dead letters one redrive sends at most; run it again for more.
pub const MAX_REDRIVE: usize = 10_000;

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

/// What a redrive did.
#[derive(Debug, Default)]
pub struct Redrive {
    pub dead_letters: usize,
    pub completed: usize,
    pub failed: usize,
    pub dead: usize,
    /// Left alone: in flight, completed meanwhile, forgotten, or keeping
    /// no request.
    pub skipped: usize,
}

fn unavailable(error: StoreError) -> AdminError {
    AdminError::StoreUnavailable(error.to_string())
}

impl Gateway {
    /// Forward the stored request of `key` again under the same key;
    /// a completed event only with `force`.
    pub async fn redeliver(
        &self,
        route: &Route,
        key: &str,
        force: bool,
    ) -> Result<Sent, AdminError> {
        let store = self.store();
        let store_key = store.key(&route.scope, key);
        let record = store
            .get(&store_key)
            .await
            .map_err(unavailable)?
            .ok_or(AdminError::KeyNotFound)?;
        if record.state == RecordState::Completed && !force {
            return Err(AdminError::Completed);
        }
        let request = record.request.ok_or(AdminError::RequestNotStored)?;
        let claimed = store
            .claim(ClaimRequest {
                mode: ClaimMode::Redeliver { force },
                ..ClaimRequest::delivery(
                    &store_key,
                    &record.body_sha256,
                    route.processing_ttl,
                    route.retention,
                )
            })
            .await
            .map_err(unavailable)?;
        let lease = match claimed {
            ClaimOutcome::New(lease) => lease,
            ClaimOutcome::InFlight { .. } => return Err(AdminError::InFlight),
            ClaimOutcome::Completed(_) => return Err(AdminError::Completed),
            ClaimOutcome::Dead(_) | ClaimOutcome::Queued => {
                return Err(AdminError::StoreUnavailable(
                    "the store answered a redelivery as a delivery".into(),
                ))
            }
        };
        let claim = self.claim_for(route, store_key, lease);
        let accepted = record.first_seen_ms;
        Ok(self
            .attempt(route, claim, key, request, "redeliver", accepted)
            .await)
    }

    /// Forward the stored request of `key` as a new event, under the first
    /// free key `{key}.replay-{n}`; the replay keeps the request and names
    /// its original.
    pub async fn replay(&self, route: &Route, key: &str) -> Result<Sent, AdminError> {
        let store = self.store();
        let record = store
            .get(&store.key(&route.scope, key))
            .await
            .map_err(unavailable)?
            .ok_or(AdminError::KeyNotFound)?;
        let request = record.request.ok_or(AdminError::RequestNotStored)?;
        for n in 1..=MAX_REPLAYS {
            let replay_key =
                key::validate(replay_key(key, n)).map_err(|_| AdminError::KeyInvalid)?;
            let store_key = store.key(&route.scope, &replay_key);
            let claimed = store
                .claim(ClaimRequest {
                    stored: Some(Stored {
                        request: &request,
                        route: &route.name,
                        replay_of: Some(key),
                    }),
                    ..ClaimRequest::delivery(
                        &store_key,
                        &record.body_sha256,
                        route.processing_ttl,
                        route.retention,
                    )
                })
                .await
                .map_err(unavailable)?;
            if let ClaimOutcome::New(lease) = claimed {
                let claim = self.claim_for(route, store_key, lease);
                let accepted = Clock::system().now_ms();
                return Ok(self
                    .attempt(route, claim, &replay_key, request, "replay", accepted)
                    .await);
            }
        }
        Err(AdminError::BadQuery(format!(
            "{key} was replayed {MAX_REPLAYS} times already"
        )))
    }

    /// The replays of `key` that the store still holds, in order.
    pub async fn replays_of(&self, route: &Route, key: &str) -> Result<Vec<String>, AdminError> {
        let store = self.store();
        let mut found = Vec::new();
        for n in 1..=MAX_REPLAYS {
            let replay_key = replay_key(key, n);
            let record = store
                .get(&store.key(&route.scope, &replay_key))
                .await
                .map_err(unavailable)?;
            if record.is_none() {
                break;
            }
            found.push(replay_key);
        }
        Ok(found)
    }

    /// Redeliver every dead letter of `route`, at most `rate` a second,
    /// newest first; progress goes to the log.
    pub async fn redrive(&self, route: &Route, rate: u32) -> Result<Redrive, AdminError> {
        let store = self.store();
        // Collect first: each redelivery moves its record out of the
        // dead-letter listing being paged through.
        let mut keys = Vec::new();
        let mut cursor = None;
        while keys.len() < MAX_REDRIVE {
            let page = store
                .list(
                    &[&route.scope],
                    Some(RecordState::Dead),
                    500,
                    cursor.as_ref(),
                )
                .await
                .map_err(unavailable)?;
            keys.extend(
                page.records
                    .into_iter()
                    .filter(|listed| listed.record.route.as_deref() == Some(&route.name))
                    .map(|listed| listed.id),
            );
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        keys.truncate(MAX_REDRIVE);
        let mut done = Redrive {
            dead_letters: keys.len(),
            ..Redrive::default()
        };
        tracing::info!(target: "hookgate::admin", route = %route.name, dead_letters = keys.len(), rate, "redrive started");
        let started = Instant::now();
        let mut pace = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for (i, key) in keys.iter().enumerate() {
            pace.tick().await;
            match self.redeliver(route, key, false).await {
                Ok(sent) => match sent.settled {
                    Settled::Completed(_) => done.completed += 1,
                    Settled::Failed => done.failed += 1,
                    Settled::Dead => done.dead += 1,
                    Settled::Retrying(_) => done.failed += 1,
                },
                Err(AdminError::StoreUnavailable(error)) => {
                    tracing::warn!(target: "hookgate::admin", route = %route.name, %error, sent = i, "redrive stopped: the store is unavailable");
                    return Err(AdminError::StoreUnavailable(error));
                }
                Err(_) => done.skipped += 1,
            }
            if (i + 1) % 100 == 0 {
                tracing::info!(target: "hookgate::admin", route = %route.name, sent = i + 1, of = keys.len(),
                    completed = done.completed, "redrive progress");
            }
        }
        tracing::info!(target: "hookgate::admin", route = %route.name, dead_letters = done.dead_letters,
            completed = done.completed, failed = done.failed, dead = done.dead, skipped = done.skipped,
            elapsed_ms = started.elapsed().as_millis() as u64, "redrive finished");
        Ok(done)
    }

    /// One attempt of `request` under `key`, on `claim`; counted in
    /// `hookgate_redeliveries_total` as `kind`.
    async fn attempt(
        &self,
        route: &Route,
        mut claim: Claim<'_>,
        key: &str,
        request: StoredRequest,
        kind: &str,
        first_seen_ms: u64,
    ) -> Sent {
        let attempt = claim.attempt();
        let request_id = new_request_id();
        let upstream_request = resend(route, request.clone(), Some(key), &request_id);
        let (result, _) = claim.renewing(self.call(route, upstream_request)).await;
        // On an async route a failure is queued for the workers to retry.
        let accepted = matches!(route.delivery, DeliveryMode::Async(_)).then_some(first_seen_ms);
        let settled = self
            .settle(route, claim, &result, || request, accepted)
            .await;
        let (upstream_status, upstream_error) = describe(&result);
        self.metrics()
            .redeliveries
            .with_label_values(&[&route.name, kind, settled.as_str()])
            .inc();
        Sent {
            key: key.to_owned(),
            attempt,
            settled,
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
