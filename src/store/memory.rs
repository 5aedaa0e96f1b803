//! In-process store for tests and single-process experiments: a mutex over a
//! hash map. Nothing survives a restart and nothing is shared between
//! processes, so it gives no exactly-once guarantee across gateway restarts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::{
    new_token, now_ms, retry_after, ClaimOutcome, ClaimRequest, Lease, Record, RecordState,
    StoreError,
};
use crate::replay::RecordedResponse;

/// How often, at most, a claim sweeps expired records out of the map.
const SWEEP_EVERY_MS: u64 = 10_000;

pub struct MemoryStore {
    entries: Mutex<HashMap<String, Entry>>,
    last_sweep_ms: AtomicU64,
}

struct Entry {
    record: Record,
    expires_at_ms: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            last_sweep_ms: AtomicU64::new(now_ms()),
        }
    }

    /// Run `f` on the live (unexpired) entry for `key`, under the lock.
    fn with_entry<T>(&self, key: &str, f: impl FnOnce(Option<&mut Entry>, u64) -> T) -> T {
        let now = now_ms();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let live = entries
            .get_mut(key)
            .filter(|entry| entry.expires_at_ms > now);
        f(live, now)
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
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        entries.retain(|_, entry| entry.expires_at_ms > now);
    }

    pub async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let now = now_ms();
        self.sweep(now);
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let live = entries
            .get(request.key)
            .filter(|entry| entry.expires_at_ms > now)
            .map(|entry| &entry.record);
        let (attempts, first_seen_ms) = match live {
            Some(record) if record.state == RecordState::Completed => {
                return Ok(ClaimOutcome::Completed(record.clone()));
            }
            Some(record)
                if record.state == RecordState::Processing
                    && record.lease_until_ms.is_some_and(|until| until > now) =>
            {
                let until = record.lease_until_ms.unwrap_or(now);
                return Ok(ClaimOutcome::InFlight {
                    retry_after: retry_after(until, now),
                });
            }
            Some(record) => (record.attempts + 1, record.first_seen_ms),
            None => (1, now),
        };
        let token = new_token();
        let record = Record {
            state: RecordState::Processing,
            token: Some(token.clone()),
            body_sha256: request.body_sha256.to_owned(),
            attempts,
            first_seen_ms,
            lease_until_ms: Some(now + millis(request.lease)),
            completed_at_ms: None,
            response: None,
        };
        let expires_at_ms = now + millis(request.retention);
        entries.insert(
            request.key.to_owned(),
            Entry {
                record,
                expires_at_ms,
            },
        );
        Ok(ClaimOutcome::New(Lease {
            token,
            attempt: attempts,
        }))
    }

    pub async fn renew(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, StoreError> {
        Ok(self.with_entry(key, |entry, now| match entry {
            Some(entry) if entry.record.token.as_deref() == Some(token) => {
                entry.record.lease_until_ms = Some(now + millis(ttl));
                true
            }
            _ => false,
        }))
    }

    pub async fn complete(
        &self,
        key: &str,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.with_entry(key, |entry, now| match entry {
            Some(entry) if entry.record.token.as_deref() == Some(token) => {
                let record = &mut entry.record;
                record.state = RecordState::Completed;
                record.token = None;
                record.lease_until_ms = None;
                record.completed_at_ms = Some(now);
                record.response = Some(response.clone());
                entry.expires_at_ms = now + millis(retention);
                true
            }
            _ => false,
        }))
    }

    pub async fn release(&self, key: &str, token: &str) -> Result<bool, StoreError> {
        Ok(self.with_entry(key, |entry, _| match entry {
            Some(entry) if entry.record.token.as_deref() == Some(token) => {
                entry.record.state = RecordState::Released;
                entry.record.token = None;
                entry.record.lease_until_ms = None;
                true
            }
            _ => false,
        }))
    }

    pub async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        Ok(self.with_entry(key, |entry, _| entry.map(|entry| entry.record.clone())))
    }

    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        Ok(entries
            .remove(key)
            .is_some_and(|entry| entry.expires_at_ms > now))
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}
