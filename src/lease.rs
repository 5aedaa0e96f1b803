//! Holding a claim while the upstream call runs.
//!
//! [`renewing`] keeps a lease alive for as long as the call takes (a slow
//! upstream must not let a duplicate through), and [`Leases`] remembers every
//! claim this process holds so shutdown can wait for them and release the
//! ones still unfinished when the grace period ends — the sender's retry is
//! then forwarded at once instead of after `processing_ttl`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::store::{Lease, Store};

/// Whether the claim stayed ours for the whole call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    Held,
    /// A renewal found another token: the lease expired and was taken over.
    Lost,
}

/// Run `work` while renewing `lease` every third of `ttl`.
///
/// A renewal that fails on a store error is retried at the next tick (the
/// lease has two more ticks of slack); one that finds the token replaced
/// calls `on_lost` at once, stops renewing, lets `work` finish and reports
/// [`LeaseStatus::Lost`].
pub async fn renewing<T>(
    store: &Store,
    key: &str,
    lease: &Lease,
    ttl: Duration,
    work: impl Future<Output = T>,
    on_lost: impl FnOnce(),
) -> (T, LeaseStatus) {
    let renewals = async {
        let mut tick = tokio::time::interval(ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate; the claim is fresh
        loop {
            tick.tick().await;
            match store.renew(key, lease, ttl).await {
                Ok(true) => {}
                Ok(false) => return LeaseStatus::Lost,
                Err(err) => tracing::warn!(error = %err, "lease renewal failed; retrying"),
            }
        }
    };
    tokio::pin!(work);
    tokio::select! {
        output = &mut work => (output, LeaseStatus::Held),
        lost = renewals => {
            tracing::warn!(key, "lease lost while the upstream call was running");
            on_lost();
            (work.await, lost)
        }
    }
}

/// The claims this process currently holds.
#[derive(Default)]
pub struct Leases {
    held: Mutex<HashMap<u64, (String, Lease)>>,
    next_id: AtomicU64,
    idle: Notify,
}

impl Leases {
    /// Remember a claim until the returned guard is dropped.
    pub fn hold(self: &Arc<Self>, key: &str, lease: &Lease) -> Held {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, (key.to_owned(), lease.clone()));
        Held {
            leases: Arc::clone(self),
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
        let held: Vec<(String, Lease)> = self.lock().values().cloned().collect();
        let mut released = 0;
        for (key, lease) in held {
            match store.release(&key, &lease).await {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(key, error = %err, "could not release claim at shutdown")
                }
            }
        }
        released
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (String, Lease)>> {
        self.held
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// Drop guard of one held claim.
pub struct Held {
    leases: Arc<Leases>,
    id: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.leases.lock();
        held.remove(&self.id);
        if held.is_empty() {
            self.leases.idle.notify_waiters();
        }
    }
}
