//! Places under `max_in_flight`: each route's bound on its concurrent
//! upstream calls in this instance, shared by every entrance that is
//! bounded by it (the workers, the hybrid, operators), and the workers'
//! wake-up call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Each route's bound on its concurrent upstream calls, and the workers'
/// wake-up call.
#[derive(Default)]
pub struct Places {
    wake: Notify,
    gates: Mutex<HashMap<String, Arc<Gate>>>,
}

/// A route's bound on its concurrent upstream calls in this instance
/// (`max_in_flight`), shared by its workers and its hybrid calls. A count
/// against a limit rather than a semaphore, so a reload that changes the
/// limit applies to the calls already running: lowering it admits no new
/// call until enough of them end.
#[derive(Debug, Default)]
pub struct Gate {
    limit: AtomicUsize,
    running: AtomicUsize,
    /// A place came free.
    freed: Notify,
}

/// One call's place under a route's [`Gate`], given back on drop.
pub struct Permit(Arc<Gate>);

/// The place an attempt calls in, under its route's `max_in_flight`.
pub enum Place {
    /// Not bounded (a sync route's own senders).
    Free,
    Taken(Permit),
    /// Wait for one (the claim is renewed meanwhile): a worker whose
    /// event's owner had no place left when it was leased, or an operator.
    Wait(Arc<Gate>),
}

impl Place {
    /// The place, once there is one.
    pub async fn take(self) -> Option<Permit> {
        match self {
            Place::Free => None,
            Place::Taken(permit) => Some(permit),
            Place::Wait(gate) => Some(gate.enter().await),
        }
    }
}

impl Gate {
    /// A place for one more call, if the limit has room.
    pub fn try_enter(self: &Arc<Self>) -> Option<Permit> {
        let limit = self.limit.load(Ordering::Relaxed);
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < limit).then_some(running + 1)
            })
            .ok()?;
        Some(Permit(Arc::clone(self)))
    }

    /// A place, waiting for one to come free.
    pub async fn enter(self: &Arc<Self>) -> Permit {
        loop {
            let freed = self.freed.notified();
            if let Some(permit) = self.try_enter() {
                return permit;
            }
            freed.await;
        }
    }

    /// How many more calls may start now.
    pub fn room(&self) -> usize {
        let limit = self.limit.load(Ordering::Relaxed);
        limit.saturating_sub(self.running.load(Ordering::Acquire))
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_one();
    }
}

impl Places {
    /// An event was accepted, or a place came free: the workers look for
    /// due events now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves when [`Places::wake`] is called.
    pub fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    /// The gate bounding `route`'s calls, its limit set to `max_in_flight`
    /// (the config of now: a reload changes it in place).
    pub fn gate(&self, route: &str, max_in_flight: usize) -> Arc<Gate> {
        let mut gates = self
            .gates
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let gate = gates.entry(route.to_owned()).or_default();
        gate.limit.store(max_in_flight, Ordering::Relaxed);
        Arc::clone(gate)
    }

    /// Deliveries running now in this instance, per route.
    pub fn delivering(&self) -> Vec<(String, usize)> {
        let gates = self
            .gates
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        gates
            .iter()
            .map(|(route, gate)| (route.clone(), gate.running()))
            .collect()
    }
}
