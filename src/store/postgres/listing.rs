//! Listings, counts and the gauges' queries, on their own connections
//! (`listing_client`): never the claim path's.

use tokio_postgres::types::ToSql;

use super::rows::record;
use super::{db, sql, PostgresStore};
use crate::store::{Blocked, ListQuery, Listing, Queued, Record, RecordState, StoreError};

impl Listing for PostgresStore {
    async fn list(&self, query: &ListQuery<'_>) -> Result<Vec<(String, Record)>, StoreError> {
        let client = self.listing_client().await?;
        let (state, limit) = (query.state.as_str(), query.limit as i64);
        let before_ms = query.before.map(|(ms, _)| ms as i64);
        let before_key = query.before.and_then(|(_, id)| id);
        let page: [&(dyn ToSql + Sync); 3] = [&query.source, &state, &limit];
        let (list, params) = match (&before_ms, &before_key) {
            (None, _) => (sql::LIST, page.to_vec()),
            (Some(ms), None) => (sql::LIST_UNTIL, [&page[..], &[ms as _]].concat()),
            (Some(ms), Some(id)) => (sql::LIST_AFTER, [&page[..], &[ms as _, id as _]].concat()),
        };
        let statement = client.prepare_cached(list).await.map_err(db)?;
        let rows = client.query(&statement, &params).await.map_err(db)?;
        rows.iter()
            .map(|row| Ok((row.get::<_, String>(28), record(row)?.0)))
            .collect()
    }

    async fn oldest(&self, source: &str, state: RecordState) -> Result<Option<u64>, StoreError> {
        let client = self.listing_client().await?;
        let oldest = match state {
            RecordState::Queued => sql::OLDEST_QUEUED,
            _ => sql::OLDEST,
        };
        let statement = client.prepare_cached(oldest).await.map_err(db)?;
        let row = client
            .query_one(&statement, &[&source, &state.as_str()])
            .await
            .map_err(db)?;
        Ok(row.get::<_, Option<i64>>(0).map(|at| at as u64))
    }

    async fn count(&self, source: &str, state: RecordState) -> Result<u64, StoreError> {
        let client = self.listing_client().await?;
        let count = match state {
            RecordState::Queued => sql::COUNT_QUEUED,
            _ => sql::COUNT,
        };
        let statement = client.prepare_cached(count).await.map_err(db)?;
        let row = client
            .query_one(&statement, &[&source, &state.as_str()])
            .await
            .map_err(db)?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    /// The bytes are what each row keeps — its key, stored request and
    /// attempt history, as stored (sealed, with `[store.encryption]`) —
    /// and a measured 700 bytes a row for the rest (`sql::QUEUED`).
    async fn queued(&self, source: &str) -> Result<Queued, StoreError> {
        let client = self.listing_client().await?;
        let statement = client.prepare_cached(sql::QUEUED).await.map_err(db)?;
        let row = client.query_one(&statement, &[&source]).await.map_err(db)?;
        Ok(Queued {
            events: row.get::<_, i64>(0) as u64,
            bytes: row.get::<_, i64>(1) as u64,
        })
    }

    async fn blocked(&self, source: &str, limit: usize) -> Result<Vec<Blocked>, StoreError> {
        self.blocked_entities(source, limit).await
    }
}
