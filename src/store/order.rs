//! An ordered event's place in its entity's order, as the store keeps it
//! and a lease reads it (docs/guide/ordering.md, "Ordered delivery"), and an entity a dead
//! event holds: the vocabulary of ordering every backend shares.

use std::time::Duration;

use crate::order::Place;

/// Where an accepted event stands in its entity's order: by `value` where
/// it has one (an event without sorts first), then by `seq`, its
/// acceptance's place in the store's sequence (`Queue::lease_ordered`).
#[derive(Debug, Clone, PartialEq)]
pub struct Ordered {
    pub entity: String,
    pub value: Option<f64>,
    pub seq: u64,
}

impl Ordered {
    /// Whether this event goes before `other` of the same entity.
    pub fn precedes(&self, other: &Ordered) -> bool {
        self.sort_key() < other.sort_key()
    }

    /// `(value, seq)` as one totally ordered key: no value sorts first.
    pub fn sort_key(&self) -> (i64, u64, u64) {
        match self.value {
            None => (0, 0, self.seq),
            Some(value) => (1, total_order(value), self.seq),
        }
    }
}

/// An f64 as a u64 that sorts as the number does (finite values).
fn total_order(value: f64) -> u64 {
    let bits = value.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// An ordered event's place as its acceptance writes it
/// ([`ClaimRequest::order`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrderSpot<'a> {
    pub entity: &'a str,
    /// Its `stale_by` value.
    pub value: Option<f64>,
    /// `reorder_window`: not leased before it has waited this long.
    pub hold: Duration,
}

impl<'a> OrderSpot<'a> {
    /// The spot of an event at `place`, waiting `hold` first, as
    /// `RouteConfig::order_place` gives them.
    pub fn at((place, hold): &'a (Place, Duration)) -> Self {
        OrderSpot {
            entity: &place.entity,
            value: place.value,
            hold: *hold,
        }
    }
}

/// An entity held by a dead event (`on_blocked = "wait"`): its later
/// events wait until an operator redelivers or forgets `dead`
/// (`Listing::blocked`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Blocked {
    pub entity: String,
    /// The dead event at the entity's head.
    pub dead: String,
    /// When it died (Unix ms).
    pub since_ms: u64,
    /// The entity's later events, waiting behind it.
    pub waiting: u64,
}
