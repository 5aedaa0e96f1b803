//! The memory store's order (docs/guide/ordering.md, "Ordered delivery"): per entity of a
//! source, its pending events in order, the one a worker leased last, and
//! the newest `stale_by` value delivered. An ordered lease gives each
//! entity at most its head: the first of its pending events, while none of
//! its events is in flight, once the head is due; a head older than what
//! was delivered turns `Stale` on the way.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{live, Tables};
use crate::order::Rules;
use crate::store::{
    Blocked, Due, Lease, Leased, OrderSpot, Ordered, Record, RecordState, StoreKey,
};

/// One entity's order.
#[derive(Debug, Default)]
pub(super) struct Entity {
    /// Its pending events (queued, in flight, dead while they hold it), by
    /// [`Ordered::sort_key`]. Settled ones are dropped when met.
    members: BTreeMap<(i64, u64, u64), String>,
    /// The event last leased: while it is in flight, the entity waits.
    busy: Option<String>,
    /// The newest `stale_by` value of an event delivered.
    newest: Option<f64>,
}

/// Entities by (source, entity).
pub(super) type Entities = HashMap<(String, String), Entity>;

/// What an entity offers a lease now.
enum Head {
    /// Its head, due now.
    Ready(String),
    /// Nothing: empty, in flight, waiting for its head's time, or held by
    /// a dead event.
    Nothing,
}

impl Tables {
    /// Give an accepted event of `source` its place in its entity's order
    /// (the next in the store's sequence), unless it has one.
    fn place(&mut self, source: &str, id: &str, record: &mut Record, spot: OrderSpot) {
        if record.order.is_none() {
            self.sequence += 1;
            record.order = Some(Ordered {
                entity: spot.entity.to_owned(),
                value: spot.value,
                seq: self.sequence,
            });
        }
        self.enter(source, id, record);
    }

    /// Give the accepted event of `key` its place, when its acceptance
    /// named one (`spot`).
    pub(super) fn order(&mut self, key: &StoreKey, spot: Option<OrderSpot>) {
        let Some(spot) = spot else { return };
        let Some(mut entry) = self.records.remove(key.as_str()) else {
            return;
        };
        self.place(key.source(), key.id(), &mut entry.value, spot);
        self.records.insert(key.as_str().to_owned(), entry);
    }

    /// The ordered event of `key` was claimed (an operator's redelivery,
    /// the claimed acceptance): its entity waits while it is in flight.
    pub(super) fn hold(&mut self, key: &StoreKey) {
        let Some(order) =
            (self.records.get(key.as_str())).and_then(|entry| entry.value.order.as_ref())
        else {
            return;
        };
        let entity = (key.source().to_owned(), order.entity.clone());
        self.entities.entry(entity).or_default().busy = Some(key.id().to_owned());
    }

    /// Put an ordered event (back) among its entity's pending ones.
    pub(super) fn enter(&mut self, source: &str, id: &str, record: &Record) {
        if let Some(order) = &record.order {
            let entity = (source.to_owned(), order.entity.clone());
            (self.entities.entry(entity).or_default().members)
                .insert(order.sort_key(), id.to_owned());
        }
    }

    /// An ordered event was delivered: its value is the entity's newest,
    /// if newer, and it no longer holds its place.
    pub(super) fn delivered(&mut self, source: &str, record: &Record) {
        let Some(order) = &record.order else { return };
        let entity = (source.to_owned(), order.entity.clone());
        if let Some(entity) = self.entities.get_mut(&entity) {
            entity.members.remove(&order.sort_key());
            if let Some(value) = order.value {
                entity.newest = Some(entity.newest.map_or(value, |newest| newest.max(value)));
            }
        }
    }

    /// Lease up to `tokens.len()` due events of `source`: unordered ones as
    /// `lease_due` does, and of each entity at most its head.
    pub(super) fn lease_ordered(
        &mut self,
        source: &str,
        tokens: &[String],
        lease_ms: u64,
        rules: Rules,
        now: u64,
    ) -> Leased {
        let mut candidates = self.due(source, now);
        candidates.sort();
        let mut leased = Leased::default();
        let mut seen = HashSet::new();
        for (_, id) in candidates {
            let Some(token) = tokens.get(leased.due.len()) else {
                break;
            };
            let key = format!("{source}:{id}");
            let order = live(&self.records, &key, now).and_then(|record| record.order.clone());
            let Some(order) = order else {
                leased
                    .due
                    .extend(self.lease(source, &id, token, lease_ms, now));
                continue;
            };
            if !seen.insert(order.entity.clone()) {
                continue;
            }
            let entity = (source.to_owned(), order.entity);
            while let Head::Ready(head) = self.head(&entity, rules, now) {
                if self.stale(&entity, &head, now) {
                    leased.stale.push(head);
                    continue;
                }
                let due = self.lease(source, &head, token, lease_ms, now);
                if let Some(entity) = self.entities.get_mut(&entity) {
                    entity.busy = Some(head);
                }
                leased.due.extend(due);
                break;
            }
        }
        leased
    }

    /// The entities of `source` whose first pending event is dead.
    pub(super) fn blocked(&self, source: &str, limit: usize, now: u64) -> Vec<Blocked> {
        let mut blocked: Vec<Blocked> = (self.entities.iter())
            .filter(|((of, _), _)| of == source)
            .filter_map(|((_, entity), order)| {
                let mut pending = (order.members.values()).filter_map(|id| {
                    let record = live(&self.records, &format!("{source}:{id}"), now)?;
                    let settled =
                        matches!(record.state, RecordState::Completed | RecordState::Stale);
                    (!settled).then_some((id, record))
                });
                let (dead, record) = pending.next()?;
                (record.state == RecordState::Dead).then(|| Blocked {
                    entity: entity.clone(),
                    dead: dead.clone(),
                    since_ms: record.updated_ms,
                    waiting: pending.count() as u64,
                })
            })
            .collect();
        blocked.sort_by_key(|held| held.since_ms);
        blocked.truncate(limit);
        blocked
    }

    /// The due events of `source`: `(when, id)`.
    pub(super) fn due(&self, source: &str, now: u64) -> Vec<(u64, String)> {
        self.records
            .iter()
            .filter_map(|(key, entry)| {
                let id = key.strip_prefix(source)?.strip_prefix(':')?;
                let record = &entry.value;
                let at = record.next_attempt_ms?;
                let waiting = matches!(record.state, RecordState::Queued | RecordState::Processing);
                (entry.expires_at_ms > now && waiting && at <= now).then(|| (at, id.to_owned()))
            })
            .collect()
    }

    /// What `entity` offers now; settled events met on the way are dropped.
    fn head(&mut self, entity: &(String, String), rules: Rules, now: u64) -> Head {
        let source = &entity.0;
        let Some(order) = self.entities.get_mut(entity) else {
            return Head::Nothing;
        };
        if let Some(busy) = &order.busy {
            let key = format!("{source}:{busy}");
            let in_flight = live(&self.records, &key, now).is_some_and(|record| {
                record.state == RecordState::Processing
                    && record.lease_expires_at_ms.is_some_and(|until| until > now)
            });
            if in_flight {
                return Head::Nothing;
            }
            order.busy = None;
        }
        while let Some((place, id)) = order.members.first_key_value() {
            let key = format!("{source}:{id}");
            let Some(record) = live(&self.records, &key, now) else {
                let place = *place;
                order.members.remove(&place);
                continue;
            };
            let settled = match record.state {
                RecordState::Completed | RecordState::Stale => true,
                RecordState::Dead => rules.skip_dead,
                _ => false,
            };
            if settled {
                let place = *place;
                order.members.remove(&place);
                continue;
            }
            let due = matches!(record.state, RecordState::Queued | RecordState::Processing)
                && record.next_attempt_ms.is_some_and(|at| at <= now);
            return match due {
                true => Head::Ready(id.clone()),
                false => Head::Nothing,
            };
        }
        Head::Nothing
    }

    /// Whether the head `id` is older than the newest event delivered for
    /// its entity; if so it turns `Stale` and leaves the order.
    fn stale(&mut self, entity: &(String, String), id: &str, now: u64) -> bool {
        let Some(order) = self.entities.get_mut(entity) else {
            return false;
        };
        let key = format!("{}:{id}", entity.0);
        let Some(entry) = self.records.get_mut(&key) else {
            return false;
        };
        let record = &mut entry.value;
        let Some((value, newest)) = (record.order.as_ref())
            .and_then(|o| o.value)
            .zip(order.newest)
        else {
            return false;
        };
        if value >= newest {
            return false;
        }
        if let Some(place) = record.order.as_ref().map(Ordered::sort_key) {
            order.members.remove(&place);
        }
        record.state = RecordState::Stale;
        record.token = None;
        record.lease_expires_at_ms = None;
        record.next_attempt_ms = None;
        record.updated_ms = now;
        true
    }

    /// Lease `id` of `source` under `token`.
    pub(super) fn lease(
        &mut self,
        source: &str,
        id: &str,
        token: &str,
        lease_ms: u64,
        now: u64,
    ) -> Option<Due> {
        let entry = self.records.get_mut(&format!("{source}:{id}"))?;
        let record = &mut entry.value;
        let until = now + lease_ms;
        record.state = RecordState::Processing;
        record.token = Some(token.to_owned());
        record.lease_expires_at_ms = Some(until);
        record.next_attempt_ms = Some(until);
        record.attempts += 1;
        record.updated_ms = now;
        Some(Due {
            id: id.to_owned(),
            lease: Lease {
                token: token.to_owned(),
                attempt: record.attempts,
            },
            record: record.clone(),
        })
    }
}
