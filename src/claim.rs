//! A claim's life, in one type: from the store's `New` answer, through
//! renewal while the upstream works, to `complete` or `fail`.
//!
//! A [`Claim`] owns its store key, its fencing token (the [`Lease`]), the
//! `processing_ttl` it renews by, the time its lease runs out, and the
//! `leases_lost` counter of its route. While it lives it is registered in
//! [`Claims`], the set of claims this process holds, so shutdown can wait
//! for them and release the ones still unfinished when the grace period
//! ends — the sender's retry is then forwarded at once instead of after
//! `processing_ttl`. Completing or failing consumes the claim; dropping it
//! unfinished leaves the lease to run out. A claim holds the store by
//! `Arc`, so one whose recording waits for a store to come back can finish
//! in a task of its own while its sender already has the answer.
//!
//! Recording is retried, with backoff, for as long as the lease protects
//! the event: a store outage shorter than the rest of the lease never lets
//! a duplicate through (docs/guide/guarantee.md, "The guarantee, honestly").

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::replay::RecordedResponse;
use crate::store::{Failure, Lease, RecordState, Store, StoreError, StoreKey};

/// The first wait between attempts at recording; each later one doubles,
/// up to [`RECORD_BACKOFF_MAX`].
const RECORD_BACKOFF: Duration = Duration::from_millis(50);
const RECORD_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One delivery's hold on its key.
pub struct Claim {
    store: Arc<Store>,
    key: StoreKey,
    lease: Lease,
    processing_ttl: Duration,
    /// When the lease runs out unless renewed: from the claim, then from
    /// each renewal the store confirmed.
    lease_until: Instant,
    /// The route's name, for log lines.
    route: Arc<str>,
    /// `hookgate_leases_lost_total{route}`.
    leases_lost: IntCounter,
    /// Set when a renewal found another holder's token.
    lost: bool,
    _held: Registration,
}

/// What one try at recording left.
pub enum Recording<T> {
    /// Recorded, or the lease was lost (logged and counted): nothing more.
    Done(T),
    /// The store did not answer: the claim, to try again.
    Again(Claim),
}

impl Claim {
    /// Take over the `lease` the store granted on `key`, registered in
    /// `claims` until it ends.
    pub fn new(
        store: &Arc<Store>,
        claims: &Arc<Claims>,
        key: StoreKey,
        lease: Lease,
        processing_ttl: Duration,
        route: Arc<str>,
        leases_lost: IntCounter,
    ) -> Self {
        let held = claims.hold(&key, &lease);
        Self {
            store: Arc::clone(store),
            key,
            lease,
            processing_ttl,
            lease_until: Instant::now() + processing_ttl,
            route,
            leases_lost,
            lost: false,
            _held: held,
        }
    }

    pub fn key(&self) -> &StoreKey {
        &self.key
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
            () = Self::renew_until_lost(&self.store, (&self.route, &self.key), &self.lease, self.processing_ttl, &mut self.lease_until) => {}
        }
        tracing::warn!(route = %self.route, key = self.key.id(), "lease lost while the upstream call was running");
        self.leases_lost.inc();
        self.lost = true;
        work.await
    }

    /// Renew every third of `processing_ttl`; returns once another holder's
    /// token is found.
    async fn renew_until_lost(
        store: &Store,
        (route, key): (&str, &StoreKey),
        lease: &Lease,
        processing_ttl: Duration,
        lease_until: &mut Instant,
    ) {
        // One timer, inline in the call's future, set once per tick: most
        // calls end before the first (an `interval` would box its timer and
        // register it twice, its first tick being immediate).
        let period = processing_ttl / 3;
        let mut next = Instant::now() + period;
        loop {
            tokio::time::sleep_until(next).await;
            let asked = Instant::now();
            match store.records().renew(key, lease, processing_ttl).await {
                Ok(true) => *lease_until = asked + processing_ttl,
                Ok(false) => return,
                Err(error) => {
                    tracing::warn!(route, key = key.id(), %error, "lease renewal failed; retrying")
                }
            }
            // The next tick a period after this one, however long the
            // store took to answer it.
            next = asked + period;
        }
    }

    /// Record the final response for `retention`, retried with backoff
    /// while the lease still protects the event; whether it was recorded.
    pub async fn complete(self, recorded: &RecordedResponse, retention: Duration) -> bool {
        let once = |claim: Claim| claim.try_complete(recorded, retention);
        self.until_recorded(once, false, "response").await
    }

    /// Run `once` until the store takes the recording, waiting a backoff
    /// between tries, while another try fits before the lease runs out;
    /// `gave_up` when none does.
    async fn until_recorded<T, F, Fut>(mut self, mut once: F, gave_up: T, what: &str) -> T
    where
        F: FnMut(Claim) -> Fut,
        Fut: Future<Output = Recording<T>>,
    {
        let mut wait = RECORD_BACKOFF;
        loop {
            match once(self).await {
                Recording::Done(done) => return done,
                Recording::Again(claim) => self = claim,
            }
            if !self.may_retry(wait) {
                tracing::error!(route = %self.route, key = self.key.id(), "could not record the {what} before the lease ran out; the next delivery will be forwarded again");
                return gave_up;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RECORD_BACKOFF_MAX);
        }
    }

    /// One try at recording the final response: `Done(true)` recorded,
    /// `Done(false)` the lease was lost.
    pub async fn try_complete(
        self,
        recorded: &RecordedResponse,
        retention: Duration,
    ) -> Recording<bool> {
        match self
            .store
            .records()
            .complete(&self.key, &self.lease, recorded, retention)
            .await
        {
            Ok(true) => Recording::Done(true),
            // An earlier try timed out here but was applied.
            Ok(false) if self.recorded_already(recorded).await => Recording::Done(true),
            Ok(false) => {
                tracing::warn!(
                    route = %self.route, key = self.key.id(),
                    lost_while_running = self.lost,
                    "lease was lost before the response could be recorded"
                );
                if !self.lost {
                    // Taken over between the last renewal and now.
                    self.leases_lost.inc();
                }
                Recording::Done(false)
            }
            Err(error) => {
                tracing::warn!(route = %self.route, key = self.key.id(), %error, "recording the response failed; retrying");
                Recording::Again(self)
            }
        }
    }

    /// Whether another try fits before the lease runs out, after `wait`
    /// and one store round trip.
    fn may_retry(&self, wait: Duration) -> bool {
        Instant::now() + wait + self.store.timeout() < self.lease_until
    }

    /// Whether the record already holds `recorded` (a completion whose
    /// answer was lost to a timeout).
    async fn recorded_already(&self, recorded: &RecordedResponse) -> bool {
        matches!(
            self.store.records().get(&self.key).await,
            Ok(Some(record)) if record.response.as_ref() == Some(recorded)
        )
    }

    /// The attempt this claim is (1 for the first forward of the key).
    pub fn attempt(&self) -> u32 {
        self.lease.attempt
    }

    /// Record a failed attempt (`store.records().fail`), retried with backoff
    /// like [`Claim::complete`]; the state it left, or `None` when the lease
    /// was lost or the store never answered in time (the lease then runs
    /// out, and the next delivery is forwarded as if the record had been
    /// released, without the failure recorded).
    pub async fn fail(self, failure: &Failure<'_>) -> Option<RecordState> {
        let once = |claim: Claim| claim.try_fail(failure);
        self.until_recorded(once, None, "failure").await
    }

    /// One try at recording a failed attempt.
    pub async fn try_fail(self, failure: &Failure<'_>) -> Recording<Option<RecordState>> {
        match self
            .store
            .records()
            .fail(&self.key, &self.lease, failure)
            .await
        {
            Ok(None) => {
                tracing::warn!(route = %self.route, key = self.key.id(), "lease was lost before the failure could be recorded");
                Recording::Done(None)
            }
            Ok(Some(state)) => {
                if state == RecordState::Failed && failure.holds(false) {
                    tracing::info!(route = %self.route, key = self.key.id(), processing_ttl_ms = self.processing_ttl.as_millis() as u64,
                        "outcome unknown: the claim is held until its lease runs out");
                }
                Recording::Done(Some(state))
            }
            Err(error) => {
                tracing::warn!(route = %self.route, key = self.key.id(), %error, "recording the failure failed; retrying");
                Recording::Again(self)
            }
        }
    }

    /// Give the claim up (`store.records().release`).
    pub async fn release(self) -> Result<bool, StoreError> {
        self.store.records().release(&self.key, &self.lease).await
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
    fn hold(self: &Arc<Self>, key: &StoreKey, lease: &Lease) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, (key.clone(), lease.clone()));
        Registration {
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
            match store.records().release(&key, &lease).await {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(scope = key.source(), key = key.id(), %error, "could not release claim at shutdown")
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
struct Registration {
    claims: Arc<Claims>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut held = self.claims.lock();
        held.remove(&self.id);
        if held.is_empty() {
            self.claims.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::StoreMetrics;
    use crate::store::{ClaimOutcome, ClaimRequest, Clock, MemoryStore};

    const TTL: Duration = Duration::from_secs(3);

    fn store() -> Arc<Store> {
        let backend = MemoryStore::new(Clock::for_test());
        let metrics = StoreMetrics::unregistered();
        Arc::new(Store::new(backend, "t:", Duration::from_secs(1), metrics))
    }

    async fn claim(store: &Store, key: &StoreKey) -> ClaimOutcome {
        let request = ClaimRequest::delivery(key, "aa", TTL, Duration::from_secs(600));
        store.records().claim(request).await.unwrap()
    }

    /// Time is the subject: paused, it runs five leases long in no time,
    /// and the memory store's clock runs with it.
    #[tokio::test(start_paused = true)]
    async fn a_call_five_leases_long_keeps_its_claim_by_renewing() {
        let store = store();
        let key = store.key("s", "slow");
        let ClaimOutcome::New(lease) = claim(&store, &key).await else {
            panic!("a new key is claimed");
        };
        let counter = IntCounter::new("lost", "lost").unwrap();
        let mut held = Claim::new(
            &store,
            &Arc::default(),
            key.clone(),
            lease,
            TTL,
            Arc::from("r"),
            counter,
        );
        let rival = held
            .renewing(async {
                tokio::time::sleep(TTL * 5).await;
                claim(&store, &key).await
            })
            .await;
        assert!(
            matches!(rival, ClaimOutcome::InFlight { .. }),
            "a duplicate ran beside the renewing call: {rival:?}"
        );
        assert!(!held.lost);

        // Unrenewed, the same wait lets the next claim take the key.
        tokio::time::sleep(TTL * 2).await;
        assert!(matches!(claim(&store, &key).await, ClaimOutcome::New(_)));
    }
}
