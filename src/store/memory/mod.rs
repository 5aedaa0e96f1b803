//! In-process store for tests and single-process experiments: a mutex over
//! hash maps. Nothing survives a restart and nothing is shared between
//! processes, so it gives no exactly-once guarantee across gateway restarts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::{
    decide, history, keeps_without_force, settled, Backend, Blocked, ClaimMode, ClaimOutcome,
    ClaimRequest, Clock, Content, Decision, Deleted, Due, Failure, Fleet, Health, LastError, Lease,
    Leased, ListQuery, Listing, Queue, Queued, Record, RecordState, Records, StoreError, StoreKey,
    Transfer,
};
use crate::order::Rules;
use crate::replay::RecordedResponse;

mod claim;
mod order;

use self::claim::{adopt, queue, taken};

/// How often, at most, a claim sweeps expired entries out of the maps.
const SWEEP_EVERY_MS: u64 = 10_000;

pub struct MemoryStore {
    tables: Mutex<Tables>,
    clock: Clock,
    last_sweep_ms: AtomicU64,
}

#[derive(Default)]
struct Tables {
    records: HashMap<String, Expiring<Record>>,
    /// Replay guards: body key → the key that first claimed that body.
    guards: HashMap<String, Expiring<String>>,
    /// Route controls: (space, route) → value.
    controls: HashMap<(String, String), String>,
    /// Ordered events by entity (`order.rs`).
    entities: order::Entities,
    /// The last place given in the store's sequence of ordered acceptances.
    sequence: u64,
}

struct Expiring<T> {
    value: T,
    expires_at_ms: u64,
}

fn live<'a, T>(map: &'a HashMap<String, Expiring<T>>, key: &str, now: u64) -> Option<&'a T> {
    map.get(key)
        .filter(|entry| entry.expires_at_ms > now)
        .map(|entry| &entry.value)
}

impl MemoryStore {
    pub fn new(clock: Clock) -> Self {
        Self {
            tables: Mutex::default(),
            last_sweep_ms: AtomicU64::new(clock.now_ms()),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Run `f` on the live record of `key`, under the lock.
    fn with_record<T>(
        &self,
        key: &str,
        f: impl FnOnce(Option<&mut Expiring<Record>>, u64) -> T,
    ) -> T {
        let now = self.clock.now_ms();
        let mut tables = self.lock();
        let entry = tables
            .records
            .get_mut(key)
            .filter(|entry| entry.expires_at_ms > now);
        f(entry, now)
    }

    /// The live records of `source` in `state`, with their ids.
    fn in_source<'t>(
        &self,
        tables: &'t Tables,
        source: &'t str,
        state: RecordState,
        now: u64,
    ) -> impl Iterator<Item = (&'t str, &'t Record)> + 't {
        tables.records.iter().filter_map(move |(key, entry)| {
            let id = key.strip_prefix(source)?.strip_prefix(':')?;
            (entry.expires_at_ms > now && entry.value.state == state).then_some((id, &entry.value))
        })
    }

    fn sweep(&self, now: u64) {
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SWEEP_EVERY_MS
            || self
                .last_sweep_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let mut tables = self.lock();
        tables.records.retain(|_, entry| entry.expires_at_ms > now);
        tables.guards.retain(|_, entry| entry.expires_at_ms > now);
    }
}

impl Backend for MemoryStore {
    const NAME: &'static str = "memory";
}

impl Records for MemoryStore {
    async fn claim(
        &self,
        request: ClaimRequest<'_>,
        token: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        let (key, guard_key) = (
            request.key.as_str(),
            request.guard_key.map(StoreKey::as_str),
        );
        let now = self.clock.now_ms();
        self.sweep(now);
        let mut tables = self.lock();
        let existing = live(&tables.records, key, now).cloned();
        let decision = existing
            .clone()
            .map(|record| decide(record, now, request.mode));
        let expires_at_ms = now + millis(request.retention);
        match decision {
            Some(Decision::Answer(answer)) => return Ok(answer),
            Some(Decision::MakeDue) => {
                if let Some(entry) = tables.records.get_mut(key) {
                    entry.value.next_attempt_ms = Some(now);
                }
                return Ok(ClaimOutcome::Queued);
            }
            Some(Decision::Adopt(answer)) => {
                if let Some(entry) = tables.records.get_mut(key) {
                    adopt(&mut entry.value, &request, now);
                    entry.expires_at_ms = entry.expires_at_ms.max(expires_at_ms);
                }
                return Ok(answer);
            }
            Some(Decision::Queue) => {
                if let Some(entry) = tables.records.get_mut(key) {
                    queue(&mut entry.value, &request, now);
                    entry.expires_at_ms = expires_at_ms;
                }
                tables.order(request.key, request.order);
                return Ok(ClaimOutcome::Queued);
            }
            Some(Decision::TakeOver) | None => {}
        }
        let first = guard_key
            .and_then(|guard| live(&tables.guards, guard, now))
            .filter(|first| first.as_str() != key)
            .and_then(|first| live(&tables.records, first, now));
        if let Some(answer) =
            first.and_then(|record| settled(record.clone(), now, ClaimMode::Deliver))
        {
            return Ok(answer);
        }
        let record = taken(existing, token, &request, now);
        let attempts = record.attempts;
        tables.records.insert(
            key.to_owned(),
            Expiring {
                value: record,
                expires_at_ms,
            },
        );
        if let Some(guard) = guard_key {
            tables.guards.insert(
                guard.to_owned(),
                Expiring {
                    value: key.to_owned(),
                    expires_at_ms,
                },
            );
        }
        if request.mode.accepts() {
            tables.order(request.key, request.order);
        }
        if request.mode == ClaimMode::Accept {
            return Ok(ClaimOutcome::Queued);
        }
        // Whoever holds an ordered event holds its entity.
        tables.hold(request.key);
        Ok(ClaimOutcome::New(Lease {
            token: token.to_owned(),
            attempt: attempts,
        }))
    }

    async fn renew(
        &self,
        key: &StoreKey,
        token: &str,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let key = key.as_str();
        Ok(self.with_record(key, |entry, now| match entry {
            Some(entry) if entry.value.token.as_deref() == Some(token) => {
                let until = now + millis(processing_ttl);
                entry.value.lease_expires_at_ms = Some(until);
                if entry.value.next_attempt_ms.is_some() {
                    entry.value.next_attempt_ms = Some(until);
                }
                true
            }
            _ => false,
        }))
    }

    async fn complete(
        &self,
        key: &StoreKey,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let mut tables = self.lock();
        let Some(entry) = (tables.records.get_mut(key.as_str())).filter(|entry| {
            entry.expires_at_ms > now && entry.value.token.as_deref() == Some(token)
        }) else {
            return Ok(false);
        };
        let record = &mut entry.value;
        record.state = RecordState::Completed;
        record.updated_ms = now;
        record.token = None;
        record.lease_expires_at_ms = None;
        record.completed_at_ms = Some(now);
        record.next_attempt_ms = None;
        record.response = Some(response.clone());
        entry.expires_at_ms = now + millis(retention);
        let record = record.clone();
        tables.delivered(key.source(), &record);
        Ok(true)
    }

    async fn fail(
        &self,
        key: &StoreKey,
        token: &str,
        failure: &Failure<'_>,
    ) -> Result<Option<RecordState>, StoreError> {
        let key = key.as_str();
        Ok(self.with_record(key, |entry, now| match entry {
            Some(entry) if entry.value.token.as_deref() == Some(token) => {
                let record = &mut entry.value;
                let accepted = record.accepted;
                record.state = failure.state(accepted);
                record.updated_ms = now;
                if !failure.holds(accepted) {
                    record.token = None;
                    record.lease_expires_at_ms = None;
                }
                record.next_attempt_ms = failure.due_in(accepted).map(|retry| now + millis(retry));
                record.last_error = Some(LastError {
                    class: failure.class,
                    status: failure.status,
                    at_ms: now,
                });
                record.request = Some(failure.request.clone());
                record.route = Some(failure.route.to_owned());
                record.history.push(failure.attempt.clone());
                let over = record.history.len().saturating_sub(history::KEPT);
                record.history.drain(..over);
                entry.expires_at_ms = now + millis(failure.retention);
                Some(record.state)
            }
            _ => None,
        }))
    }

    async fn release(&self, key: &StoreKey, token: &str) -> Result<bool, StoreError> {
        let key = key.as_str();
        Ok(self.with_record(key, |entry, now| match entry {
            Some(entry) if entry.value.token.as_deref() == Some(token) => {
                let record = &mut entry.value;
                if record.state == RecordState::Processing {
                    // An accepted event goes back to its queue, due now.
                    record.state = match record.accepted {
                        true => RecordState::Queued,
                        false => RecordState::Failed,
                    };
                    record.next_attempt_ms = record.accepted.then_some(now);
                    record.updated_ms = now;
                }
                entry.value.token = None;
                entry.value.lease_expires_at_ms = None;
                true
            }
            _ => false,
        }))
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let key = key.as_str();
        Ok(self.with_record(key, |entry, _| entry.map(|entry| entry.value.clone())))
    }

    async fn delete(&self, key: &StoreKey, force: bool) -> Result<Deleted, StoreError> {
        let key = key.as_str();
        let now = self.clock.now_ms();
        let mut tables = self.lock();
        let Some(record) = live(&tables.records, key, now) else {
            return Ok(Deleted::NotFound);
        };
        if keeps_without_force(record, now) && !force {
            return Ok(Deleted::InFlight);
        }
        tables.records.remove(key);
        Ok(Deleted::Deleted)
    }
}

impl Transfer for MemoryStore {
    async fn export(&self, key: &StoreKey) -> Result<Option<(Record, u64)>, StoreError> {
        let key = key.as_str();
        Ok(self.with_record(key, |entry, _| {
            entry.map(|entry| (entry.value.clone(), entry.expires_at_ms))
        }))
    }

    async fn import(
        &self,
        key: &StoreKey,
        record: &Record,
        expires_at_ms: u64,
        guard: Option<&StoreKey>,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let mut tables = self.lock();
        let newer = live(&tables.records, key.as_str(), now)
            .is_some_and(|held| held.updated_ms >= record.updated_ms);
        if newer || expires_at_ms <= now {
            return Ok(false);
        }
        let value = record.clone();
        let entry = Expiring {
            value,
            expires_at_ms,
        };
        tables.records.insert(key.as_str().to_owned(), entry);
        if let Some(order) = &record.order {
            tables.sequence = tables.sequence.max(order.seq);
        }
        if record.accepted
            && matches!(
                record.state,
                RecordState::Queued | RecordState::Processing | RecordState::Dead
            )
        {
            tables.enter(key.source(), key.id(), record);
        }
        if let Some(guard) = guard {
            let first = live(&tables.guards, guard.as_str(), now);
            if first.is_none_or(|first| live(&tables.records, first, now).is_none()) {
                let value = key.as_str().to_owned();
                let entry = Expiring {
                    value,
                    expires_at_ms,
                };
                tables.guards.insert(guard.as_str().to_owned(), entry);
            }
        }
        Ok(true)
    }

    async fn reseal(&self, key: &StoreKey, was: &Record, now: &Record) -> Result<bool, StoreError> {
        Ok(self.with_record(key.as_str(), |entry, _| {
            let Some(entry) = entry.filter(|e| Content::of(&e.value) == Content::of(was)) else {
                return false;
            };
            let record = &mut entry.value;
            record.request.clone_from(&now.request);
            record.response.clone_from(&now.response);
            record.history.clone_from(&now.history);
            true
        }))
    }
}

impl Queue for MemoryStore {
    async fn lease_due(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
    ) -> Result<Vec<Due>, StoreError> {
        let now = self.clock.now_ms();
        let mut tables = self.lock();
        let mut due = tables.due(source, now);
        due.sort();
        let lease_ms = millis(processing_ttl);
        Ok((due.into_iter().zip(tokens))
            .filter_map(|((_, id), token)| tables.lease(source, &id, token, lease_ms, now))
            .collect())
    }

    const ORDERED: bool = true;

    async fn lease_ordered(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        let now = self.clock.now_ms();
        let mut tables = self.lock();
        Ok(tables.lease_ordered(source, tokens, millis(processing_ttl), rules, now))
    }
}

impl Listing for MemoryStore {
    async fn list(&self, query: &ListQuery<'_>) -> Result<Vec<(String, Record)>, StoreError> {
        let now = self.clock.now_ms();
        let tables = self.lock();
        let mut page: Vec<(String, Record)> = self
            .in_source(&tables, query.source, query.state, now)
            .filter(|(id, record)| query.admits(record.updated_ms, id))
            .map(|(id, record)| (id.to_owned(), record.clone().summary()))
            .collect();
        page.sort_by(|(a_id, a), (b_id, b)| (b.updated_ms, b_id).cmp(&(a.updated_ms, a_id)));
        page.truncate(query.limit);
        Ok(page)
    }

    async fn oldest(&self, source: &str, state: RecordState) -> Result<Option<u64>, StoreError> {
        let now = self.clock.now_ms();
        let tables = self.lock();
        if state == RecordState::Queued {
            // Waiting for its delivery: queued, or tried again after a
            // failure.
            let owed = |state| {
                self.in_source(&tables, source, state, now)
                    .filter(|(_, record)| record.next_attempt_ms.is_some())
                    .filter(|(_, record)| {
                        state == RecordState::Queued || record.last_error.is_some()
                    })
                    .map(|(_, record)| record.first_seen_ms)
                    .min()
            };
            return Ok(owed(RecordState::Queued)
                .into_iter()
                .chain(owed(RecordState::Processing))
                .min());
        }
        Ok(self
            .in_source(&tables, source, state, now)
            .map(|(_, record)| record.updated_ms)
            .min())
    }

    async fn count(&self, source: &str, state: RecordState) -> Result<u64, StoreError> {
        let now = self.clock.now_ms();
        let tables = self.lock();
        Ok(self.in_source(&tables, source, state, now).count() as u64)
    }

    async fn blocked(&self, source: &str, limit: usize) -> Result<Vec<Blocked>, StoreError> {
        let now = self.clock.now_ms();
        Ok(self.lock().blocked(source, limit, now))
    }

    /// The bytes are the stored requests (their headers as stored, and
    /// their bodies) and keys: the heap's own overhead is not counted.
    async fn queued(&self, source: &str) -> Result<Queued, StoreError> {
        let now = self.clock.now_ms();
        let tables = self.lock();
        let mut queued = Queued::default();
        for (id, record) in self.in_source(&tables, source, RecordState::Queued, now) {
            let request = record.request.as_ref();
            let headers: usize = (request
                .into_iter()
                .flat_map(|request| request.headers.iter()))
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum();
            let body = request.map_or(0, |request| request.body.len());
            queued += Queued {
                events: 1,
                bytes: (source.len() + id.len() + headers + body) as u64,
            };
        }
        Ok(queued)
    }
}

impl Fleet for MemoryStore {
    fn invalidations(&self) -> super::Invalidations {
        super::Invalidations::Local
    }

    async fn set_control(
        &self,
        space: &str,
        route: &str,
        value: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut tables = self.lock();
        let name = (space.to_owned(), route.to_owned());
        match value {
            Some(value) => tables.controls.insert(name, value.to_owned()),
            None => tables.controls.remove(&name),
        };
        Ok(())
    }

    async fn controls(&self, space: &str) -> Result<Vec<(String, String)>, StoreError> {
        let tables = self.lock();
        Ok((tables.controls.iter())
            .filter(|((of, _), _)| of == space)
            .map(|((_, route), value)| (route.clone(), value.clone()))
            .collect())
    }
}

impl Health for MemoryStore {
    async fn ping(&self, _space: &str) -> Result<(), StoreError> {
        Ok(())
    }

    fn is_local(&self) -> bool {
        true
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}
