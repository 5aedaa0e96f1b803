//! [`Listing`]: pages, counts and the oldest and blocked records of a
//! scope, every shard's.

use std::time::Duration;

use super::Listing;
use crate::store::backend;
use crate::store::backends::on;
use crate::store::listing::Listed;
use crate::store::{Blocked, Cursor, ListQuery, Page, RecordState, StoreError};

impl Listing<'_> {
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
            for source in self.store.sources(scope) {
                for &state in &states {
                    let query = ListQuery {
                        source: &source,
                        state,
                        limit,
                        before,
                    };
                    let page = self
                        .store
                        .deadline("list", async {
                            on!(self.store.backend, b => backend::Listing::list(b, &query).await)
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

    /// Drop listing entries of `scope`'s records in `state` that were last
    /// changed more than `horizon` ago (the longest a record in that state
    /// lives): see [`Listing::trim`](backend::Listing::trim).
    pub async fn trim(
        &self,
        scope: &str,
        state: RecordState,
        horizon: Duration,
    ) -> Result<u64, StoreError> {
        let before_ms = crate::clock::unix_ms().saturating_sub(horizon.as_millis() as u64);
        let mut trimmed = 0;
        for source in self.store.sources(scope) {
            let op = async {
                on!(self.store.backend, b => backend::Listing::trim(b, &source, state, before_ms).await)
            };
            trimmed += self.store.deadline("trim", op).await?;
        }
        Ok(trimmed)
    }

    /// When the longest-waiting record of `scope` in `state` last changed.
    pub async fn oldest(&self, scope: &str, state: RecordState) -> Result<Option<u64>, StoreError> {
        let mut oldest = None;
        for source in self.store.sources(scope) {
            let at = self
                .store
                .deadline("oldest", async {
                    on!(self.store.backend, b => backend::Listing::oldest(b, &source, state).await)
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
        for source in self.store.sources(scope) {
            let found = self
                .store
                .deadline("blocked", async {
                    on!(self.store.backend, b => backend::Listing::blocked(b, &source, limit).await)
                })
                .await?;
            blocked.extend(found);
        }
        blocked.sort_by_key(|held| held.since_ms);
        blocked.truncate(limit);
        Ok(blocked)
    }

    /// How many live records of `scope` are in `state`.
    pub async fn count(&self, scope: &str, state: RecordState) -> Result<u64, StoreError> {
        let mut count = 0;
        for source in self.store.sources(scope) {
            count += self
                .store
                .deadline("count", async {
                    on!(self.store.backend, b => backend::Listing::count(b, &source, state).await)
                })
                .await?;
        }
        Ok(count)
    }
}
