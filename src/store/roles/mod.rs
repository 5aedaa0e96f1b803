//! The store's operations by role: a caller names the capability it uses
//! — `store.records().claim(…)`, `store.queue().lease_due(…)`,
//! `store.listing().list(…)`, `store.fleet().controls()` — and each
//! handle's operations are its backend trait's ([`super::Records`],
//! [`super::Queue`], [`super::Listing`], [`super::Fleet`]) under the
//! facade's key layout, deadline, metrics, replay cache and sealing
//! (`facade.rs`). A capability a backend lacks answers through its
//! trait's default ("this store keeps no order", no invalidation feed).

mod fleet;
mod listing;
mod queue;
mod records;

use super::Store;

/// Claims and the records they leave: claim, renew, complete, fail,
/// release, get, delete.
pub struct Records<'a> {
    store: &'a Store,
}

/// The async queues: leases of due events, in order or not, and what
/// each scope holds queued.
pub struct Queue<'a> {
    store: &'a Store,
}

/// Listings for operators and gauges: pages, counts, the oldest record,
/// blocked entities, and the trimming of their indexes.
pub struct Listing<'a> {
    store: &'a Store,
}

/// What a fleet's instances share beyond records: route controls.
pub struct Fleet<'a> {
    store: &'a Store,
}

impl Store {
    pub fn records(&self) -> Records<'_> {
        Records { store: self }
    }

    pub fn queue(&self) -> Queue<'_> {
        Queue { store: self }
    }

    pub fn listing(&self) -> Listing<'_> {
        Listing { store: self }
    }

    pub fn fleet(&self) -> Fleet<'_> {
        Fleet { store: self }
    }
}
