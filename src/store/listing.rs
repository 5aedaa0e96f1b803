//! What spans a scope: listings — records with their scope and id, one
//! page at a time, and the opaque cursor a client passes back for the next
//! — the queue's lease, trims, counts and the oldest-record gauges, each
//! over every shard of the scope.

use std::time::Duration;

use super::backend::{Listing, Queue};
use super::backends::on;
use super::{
    new_token, Blocked, Due, Leased, ListQuery, Queued, Record, RecordState, Store, StoreError,
    StoreKey,
};
use crate::order::Rules;

/// A record as a listing returns it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub scope: String,
    pub id: String,
    pub record: Record,
}

impl Listed {
    /// Where it sorts: listings are newest first by this.
    pub(super) fn position(&self) -> (u64, &str, &str) {
        (self.record.updated_ms, &self.scope, &self.id)
    }

    /// Where a listing goes on after this record.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            updated_ms: self.record.updated_ms,
            scope: self.scope.clone(),
            id: self.id.clone(),
        }
    }
}

/// One page of a listing, and where the next one starts.
#[derive(Debug, Clone)]
pub struct Page {
    pub records: Vec<Listed>,
    pub next: Option<Cursor>,
}

/// Where a listing goes on: after the record at `(updated_ms, scope, id)`.
/// Opaque to clients (URL-safe base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    updated_ms: u64,
    scope: String,
    id: String,
}

impl Cursor {
    /// Where a listing of the records changed at or before `ms` starts.
    pub fn at_or_before(ms: u64) -> Self {
        // Every scope sorts after "": its records must be older than `ms + 1`.
        Cursor {
            updated_ms: ms.saturating_add(1),
            scope: String::new(),
            id: String::new(),
        }
    }

    pub fn encode(&self) -> String {
        use base64::Engine;
        let text = format!("{}\n{}\n{}", self.updated_ms, self.scope, self.id);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    pub fn decode(text: &str) -> Option<Self> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(3, '\n');
        Some(Self {
            updated_ms: parts.next()?.parse().ok()?,
            scope: parts.next()?.to_owned(),
            id: parts.next()?.to_owned(),
        })
    }

    /// The bound a listing of `scope` continues from: records of a scope
    /// that sorts before the cursor's may share its time, those of a later
    /// scope may not.
    pub(super) fn bound_for(&self, scope: &str) -> (u64, Option<&str>) {
        let id = match scope.cmp(self.scope.as_str()) {
            std::cmp::Ordering::Less => None,
            std::cmp::Ordering::Equal => Some(self.id.as_str()),
            std::cmp::Ordering::Greater => Some(""),
        };
        (self.updated_ms, id)
    }
}

impl Store {
    /// One page of the records of `scopes` in `state` (every state when
    /// `None`), newest first by last change, after `cursor`. Each shard of
    /// each scope is listed on its own (on a Redis Cluster it lives in one
    /// hash slot) and the pages are merged; the next page starts after the
    /// last record.
    pub async fn list(
        &self,
        scopes: &[&str],
        state: Option<RecordState>,
        limit: usize,
        cursor: Option<&Cursor>,
    ) -> Result<Page, StoreError> {
        let states: Vec<RecordState> = match state {
            Some(state) => vec![state],
            None => RecordState::ALL.to_vec(),
        };
        let mut listed = Vec::new();
        for scope in scopes {
            let before = cursor.map(|cursor| cursor.bound_for(scope));
            for source in self.sources(scope) {
                for &state in &states {
                    let query = ListQuery {
                        source: &source,
                        state,
                        limit,
                        before,
                    };
                    let page = self
                        .deadline("list", async {
                            on!(self.backend, b => Listing::list(b, &query).await)
                        })
                        .await?;
                    listed.extend(page.into_iter().map(|(id, record)| Listed {
                        scope: (*scope).to_owned(),
                        id,
                        record,
                    }));
                }
            }
        }
        listed.sort_by(|a, b| b.position().cmp(&a.position()));
        listed.truncate(limit);
        let next = (listed.len() == limit)
            .then(|| listed.last().map(Listed::cursor))
            .flatten();
        Ok(Page {
            records: listed,
            next,
        })
    }

    /// Lease up to `limit` due async events of `scope` for `processing_ttl`
    /// (see [`Queue::lease_due`]). Leases applied after their answer was
    /// lost to the deadline hold their events under tokens nobody has; those
    /// events are due again when the leases run out, so they are delayed by
    /// `processing_ttl`, never lost.
    pub async fn lease_due(
        &self,
        scope: &str,
        limit: usize,
        processing_ttl: Duration,
    ) -> Result<Vec<Due>, StoreError> {
        let mut leased = Vec::new();
        // Each pass starts at the next shard, so none waits behind another.
        for shard in self.shards.rotation() {
            let room = limit - leased.len();
            if room == 0 {
                break;
            }
            let source = self.source(scope, shard);
            let tokens: Vec<String> = (0..room).map(|_| new_token()).collect();
            let op = async {
                on!(self.backend, b => Queue::lease_due(b, &source, &tokens, processing_ttl).await)
            };
            leased.extend(
                self.opened_due(&source, self.deadline_at("lease_due", &source, op).await?),
            );
        }
        Ok(leased)
    }

    /// As [`Store::lease_due`], keeping each entity's order (see
    /// [`Queue::lease_ordered`](super::Queue::lease_ordered)).
    pub async fn lease_ordered(
        &self,
        scope: &str,
        limit: usize,
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        let mut leased = Leased::default();
        for shard in self.shards.rotation() {
            let room = limit - leased.due.len();
            if room == 0 {
                break;
            }
            let source = self.source(scope, shard);
            let tokens: Vec<String> = (0..room).map(|_| new_token()).collect();
            let op = async {
                on!(self.backend, b => Queue::lease_ordered(b, &source, &tokens, processing_ttl, rules).await)
            };
            let more = self.deadline_at("lease_ordered", &source, op).await?;
            leased.due.extend(self.opened_due(&source, more.due));
            leased.stale.extend(more.stale);
        }
        Ok(leased)
    }

    /// The leased events whose records open; one that does not is left to
    /// its lease (counted and logged by [`Store::opened`]): it is due again
    /// when the lease runs out, kept, never delivered as garbage.
    fn opened_due(&self, source: &str, due: Vec<Due>) -> Vec<Due> {
        (due.into_iter())
            .filter_map(|due| {
                let key = StoreKey::event(source, &due.id);
                let record = self.opened(&key, due.record).ok()?;
                Some(Due { record, ..due })
            })
            .collect()
    }

    /// Drop listing entries of `scope`'s records in `state` that were last
    /// changed more than `horizon` ago (the longest a record in that state
    /// lives): see [`Listing::trim`].
    pub async fn trim(
        &self,
        scope: &str,
        state: RecordState,
        horizon: Duration,
    ) -> Result<u64, StoreError> {
        let before_ms = crate::clock::unix_ms().saturating_sub(horizon.as_millis() as u64);
        let mut trimmed = 0;
        for source in self.sources(scope) {
            let op =
                async { on!(self.backend, b => Listing::trim(b, &source, state, before_ms).await) };
            trimmed += self.deadline("trim", op).await?;
        }
        Ok(trimmed)
    }

    /// When the longest-waiting record of `scope` in `state` last changed.
    pub async fn oldest(&self, scope: &str, state: RecordState) -> Result<Option<u64>, StoreError> {
        let mut oldest = None;
        for source in self.sources(scope) {
            let at = self
                .deadline("oldest", async {
                    on!(self.backend, b => Listing::oldest(b, &source, state).await)
                })
                .await?;
            oldest = oldest.into_iter().chain(at).min();
        }
        Ok(oldest)
    }

    /// The entities of `scope` held by a dead event, oldest death first,
    /// at most `limit` (`Listing::blocked`).
    pub async fn blocked(&self, scope: &str, limit: usize) -> Result<Vec<Blocked>, StoreError> {
        let mut blocked = Vec::new();
        for source in self.sources(scope) {
            let found = self
                .deadline("blocked", async {
                    on!(self.backend, b => Listing::blocked(b, &source, limit).await)
                })
                .await?;
            blocked.extend(found);
        }
        blocked.sort_by_key(|held| held.since_ms);
        blocked.truncate(limit);
        Ok(blocked)
    }

    /// What `scope` holds queued (`Listing::queued`), every shard's.
    pub async fn queued(&self, scope: &str) -> Result<Queued, StoreError> {
        let mut queued = Queued::default();
        for source in self.sources(scope) {
            queued += (self.deadline("queued", async {
                on!(self.backend, b => Listing::queued(b, &source).await)
            }))
            .await?;
        }
        Ok(queued)
    }

    /// How many live records of `scope` are in `state`.
    pub async fn count(&self, scope: &str, state: RecordState) -> Result<u64, StoreError> {
        let mut count = 0;
        for source in self.sources(scope) {
            count += self
                .deadline("count", async {
                    on!(self.backend, b => Listing::count(b, &source, state).await)
                })
                .await?;
        }
        Ok(count)
    }
}
