//! In-process store for tests and single-process experiments: a mutex over
//! hash maps. Nothing survives a restart and nothing is shared between
//! processes, so it gives no exactly-once guarantee across gateway restarts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::{
    settled, Backend, ClaimOutcome, ClaimRequest, Clock, Deleted, Lease, Record, RecordState,
    StoreError, StoreKey,
};
use crate::replay::RecordedResponse;

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
        let existing = live(&tables.records, key, now);
        if let Some(answer) = existing.and_then(|record| settled(record.clone(), now)) {
            return Ok(answer);
        }
        let first = guard_key
            .and_then(|guard| live(&tables.guards, guard, now))
            .filter(|first| first.as_str() != key)
            .and_then(|first| live(&tables.records, first, now));
        if let Some(answer) = first.and_then(|record| settled(record.clone(), now)) {
            return Ok(answer);
        }
        let (attempts, first_seen_ms) = existing.map_or((1, now), |record| {
            (record.attempts + 1, record.first_seen_ms)
        });
        let token = token.to_owned();
        let record = Record {
            state: RecordState::Processing,
            token: Some(token.clone()),
            body_sha256: request.body_sha256.to_owned(),
            attempts,
            first_seen_ms,
            lease_expires_at_ms: Some(now + millis(request.processing_ttl)),
            completed_at_ms: None,
            response: None,
        };
        let expires_at_ms = now + millis(request.retention);
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
        Ok(ClaimOutcome::New(Lease {
            token,
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
                entry.value.lease_expires_at_ms = Some(now + millis(processing_ttl));
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
        let key = key.as_str();
        Ok(self.with_record(key, |entry, now| match entry {
            Some(entry) if entry.value.token.as_deref() == Some(token) => {
                let record = &mut entry.value;
                record.state = RecordState::Completed;
                record.token = None;
                record.lease_expires_at_ms = None;
                record.completed_at_ms = Some(now);
                record.response = Some(response.clone());
                entry.expires_at_ms = now + millis(retention);
                true
            }
            _ => false,
        }))
    }

    async fn release(&self, key: &StoreKey, token: &str) -> Result<bool, StoreError> {
        let key = key.as_str();
        Ok(self.with_record(key, |entry, _| match entry {
            Some(entry) if entry.value.token.as_deref() == Some(token) => {
                entry.value.state = RecordState::Released;
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
        let in_flight = matches!(
            settled(record.clone(), now),
            Some(ClaimOutcome::InFlight { .. })
        );
        if in_flight && !force {
            return Ok(Deleted::InFlight);
        }
        tables.records.remove(key);
        Ok(Deleted::Deleted)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}
