//! A claim's life, in one type: from the store's `New` answer, through
//! renewal while the upstream works, to `complete` or `fail`.
//!
//! A [`Claim`] owns its store key, its fencing token (the [`Lease`]), the
//! `processing_ttl` it renews by, and the `leases_lost` counter of its route.
//! While it lives it is registered in [`Claims`], the set of claims this
//! process holds, so shutdown can wait for them and release the ones still
//! unfinished when the grace period ends — the sender's retry is then
//! forwarded at once instead of after `processing_ttl`. Completing or
//! failing consumes the claim; dropping it unfinished leaves the lease to
//! run out.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::sync::Notify;

use crate::replay::RecordedResponse;
use crate::store::{Failure, Lease, Store, StoreKey};

/// Attempts at recording a final response before giving up on it.
const COMPLETE_ATTEMPTS: u32 = 3;

/// One delivery's hold on its key.
pub struct Claim<'s> {
    store: &'s Store,
    key: StoreKey,
    lease: Lease,
    processing_ttl: Duration,
    /// `hookgate_leases_lost_total{route}`.
    leases_lost: IntCounter,
    /// Set when a renewal found another holder's token.
    lost: bool,
    _held: Held,
}

impl<'s> Claim<'s> {
    /// Take over the `lease` the store granted on `key`, registered in
    /// `claims` until it ends.
    pub fn new(
        store: &'s Store,
        claims: &Arc<Claims>,
        key: StoreKey,
        lease: Lease,
        processing_ttl: Duration,
        leases_lost: IntCounter,
    ) -> Self {
        let held = claims.hold(&key, &lease);
        Self {
            store,
            key,
            lease,
            processing_ttl,
            leases_lost,
            lost: false,
            _held: held,
        }
    }

    /// Run `work` while renewing the lease every third of `processing_ttl`,
    /// so a slow upstream never lets a duplicate through.
    ///
    /// A renewal that fails on a store error is retried at the next tick (the
    /// lease has two more ticks of slack); one that finds the token replaced
    /// counts a lost lease at once, stops renewing and lets `work` finish.
    pub async fn renewing<T>(&mut self, work: impl Future<Output = T>) -> T {
        tokio::pin!(work);
        tokio::select! {
            output = &mut work => return output,
            () = self.renew_until_lost() => {}
        }
        tracing::warn!(key = %self.key, "lease lost while the upstream call was running");
        self.leases_lost.inc();
        self.lost = true;
        work.await
    }

    /// Renew every third of `processing_ttl`; returns once another holder's
    /// token is found.
    async fn renew_until_lost(&self) {
        let mut tick = tokio::time::interval(self.processing_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate; the claim is fresh
        loop {
            tick.tick().await;
            match self
                .store
                .renew(&self.key, &self.lease, self.processing_ttl)
                .await
            {
                Ok(true) => {}
                Ok(false) => return,
                Err(error) => tracing::warn!(%error, "lease renewal failed; retrying"),
            }
        }
    }

    /// Record the final response for `retention`. A few quick retries:
    /// losing the recording means the next retry is forwarded again once the
    /// lease runs out.
    pub async fn complete(self, recorded: &RecordedResponse, retention: Duration) {
        let store = self.store;
        for attempt in 1..=COMPLETE_ATTEMPTS {
            match store
                .complete(&self.key, &self.lease, recorded, retention)
                .await
            {
                Ok(true) => return,
                Ok(false) if attempt > 1 && self.recorded_already(recorded).await => {
                    // An earlier attempt timed out here but was applied.
                    return;
                }
                Ok(false) => {
                    tracing::warn!(
                        key = %self.key,
                        lost_while_running = self.lost,
                        "lease was lost before the response could be recorded"
                    );
                    if !self.lost {
                        // Taken over between the last renewal and now.
                        self.leases_lost.inc();
                    }
                    return;
                }
                Err(error) if attempt < COMPLETE_ATTEMPTS => {
                    tracing::warn!(%error, attempt, "recording the response failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                }
                Err(error) => {
                    tracing::error!(key = %self.key, %error, "could not record the response; a retry after processing_ttl will be forwarded again");
                }
            }
        }
    }

    /// Whether the record already holds `recorded` (a completion whose
    /// answer was lost to a timeout).
    async fn recorded_already(&self, recorded: &RecordedResponse) -> bool {
        matches!(
            self.store.get(&self.key).await,
            Ok(Some(record)) if record.response.as_ref() == Some(recorded)
        )
    }

    /// The attempt this claim is (1 for the first forward of the key).
    pub fn attempt(&self) -> u32 {
        self.lease.attempt
    }

    /// Record a failed attempt: the record turns failed (or dead) and keeps
    /// the request. A few quick retries, like [`Claim::complete`]; if all
    /// fail, the lease runs out and the next delivery is forwarded as if the
    /// record had been released, without the failure recorded.
    pub async fn fail(self, failure: &Failure<'_>) {
        for attempt in 1..=COMPLETE_ATTEMPTS {
            match self.store.fail(&self.key, &self.lease, failure).await {
                Ok(true) => break,
                Ok(false) => {
                    tracing::warn!(key = %self.key, "lease was lost before the failure could be recorded");
                    return;
                }
                Err(error) if attempt < COMPLETE_ATTEMPTS => {
                    tracing::warn!(%error, attempt, "recording the failure failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                }
                Err(error) => {
                    tracing::warn!(key = %self.key, %error, "could not record the failure; the claim expires with its lease");
                    return;
                }
            }
        }
        if failure.hold {
            tracing::info!(key = %self.key, processing_ttl_ms = self.processing_ttl.as_millis() as u64,
                "outcome unknown: the claim is held until its lease runs out");
        }
    }
}

/// The claims this process currently holds.
#[derive(Default)]
pub struct Claims {
    held: Mutex<HashMap<u64, (StoreKey, Lease)>>,
    next_id: AtomicU64,
    idle: Notify,
}

impl Claims {
    fn hold(self: &Arc<Self>, key: &StoreKey, lease: &Lease) -> Held {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, (key.clone(), lease.clone()));
        Held {
            claims: Arc::clone(self),
            id,
        }
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Wait until no claim is held.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Release every claim still held (shutdown after the grace period).
    pub async fn release_all(&self, store: &Store) -> usize {
        let held: Vec<(StoreKey, Lease)> = self.lock().values().cloned().collect();
        let mut released = 0;
        for (key, lease) in held {
            match store.release(&key, &lease).await {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%key, %error, "could not release claim at shutdown")
                }
            }
        }
        released
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (StoreKey, Lease)>> {
        self.held
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// Registration of one claim in [`Claims`], removed on drop.
struct Held {
    claims: Arc<Claims>,
    id: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.claims.lock();
        held.remove(&self.id);
        if held.is_empty() {
            self.claims.idle.notify_waiters();
        }
    }
}
