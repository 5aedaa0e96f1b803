//! Copying records into and out of PostgreSQL (`hookgate store copy`): a
//! whole row with its expiry, and a row written back as it was, in one
//! statement that keeps a newer row; and a row's content sealed again
//! (`hookgate store reencrypt`), in one statement that keeps a changed row.

use tokio_postgres::types::ToSql;

use super::rows::record;
use super::{db, sql, PostgresStore};
use crate::store::{history, Content, Record, StoreError, StoreKey, Transfer};

/// Moves the order sequence past a copied record's place ($1), when it is
/// not already past it.
const SEQUENCE_PAST: &str = "SELECT setval('hookgate_order_seq', $1) FROM hookgate_order_seq \
    WHERE last_value < $1";

/// ($1 source, $2 key, $3..$8 the content written, $9..$14 the content it
/// replaces): written only while the live row keeps exactly the latter.
const RESEAL: &str = "UPDATE webhook_events SET request_query = $3, request_headers = $4, \
    request_body = $5, response_headers = $6, response_body = $7, history = $8 \
WHERE source = $1 AND idempotency_key = $2 AND expires_at > now() \
    AND request_query IS NOT DISTINCT FROM $9 AND request_headers IS NOT DISTINCT FROM $10 \
    AND request_body IS NOT DISTINCT FROM $11 AND response_headers IS NOT DISTINCT FROM $12 \
    AND response_body IS NOT DISTINCT FROM $13 AND history IS NOT DISTINCT FROM $14";

impl Transfer for PostgresStore {
    async fn export(&self, key: &StoreKey) -> Result<Option<(Record, u64)>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(sql::EXPORT).await.map_err(db)?;
        let row = client
            .query_opt(&statement, &[&key.source(), &key.id()])
            .await
            .map_err(db)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let (record, _) = record(&row)?;
        Ok(Some((record, row.get::<_, i64>(28) as u64)))
    }

    async fn import(
        &self,
        key: &StoreKey,
        record: &Record,
        expires_at_ms: u64,
        guard: Option<&StoreKey>,
    ) -> Result<bool, StoreError> {
        // Already expired: nothing to keep (a row written anyway would be
        // invisible, and pruned).
        if expires_at_ms <= crate::clock::unix_ms() {
            return Ok(false);
        }
        let ms = |value: Option<u64>| value.map(|v| v as i64);
        let error = record.last_error.as_ref();
        let response = record.response.as_ref();
        let request = record.request.as_ref();
        let columns: (&str, &str, i32, i64, i64) = (
            record.state.as_str(),
            &record.body_sha256,
            record.attempts as i32,
            record.first_seen_ms as i64,
            record.updated_ms as i64,
        );
        let (lease, completed) = (ms(record.lease_expires_at_ms), ms(record.completed_at_ms));
        let status = response.map(|r| r.status.as_u16() as i16);
        let headers = response.map(|r| r.encode_headers());
        let body = response.map(|r| r.body.as_ref());
        let kept = response.map(|r| r.body_kept.as_str());
        let class = error.map(|e| e.class.as_str());
        let last_status = error.and_then(|e| e.status).map(|s| s as i16);
        let last_at = error.map(|e| e.at_ms as i64);
        let method = request.map(|r| r.method.as_str());
        let query = request.and_then(|r| r.query.as_deref());
        let request_headers = request.map(|r| r.encode_headers());
        let request_body = request.map(|r| r.body.as_ref());
        let past = history::encode(&record.history);
        let next = ms(record.next_attempt_ms);
        let expires = expires_at_ms as i64;
        let order = record.order.as_ref();
        let entity = order.map(|o| o.entity.as_str());
        let (value, seq) = (order.and_then(|o| o.value), order.map(|o| o.seq as i64));
        let params: [&(dyn ToSql + Sync); 30] = [
            &key.source(),
            &key.id(),
            &columns.0,
            &record.token,
            &columns.1,
            &columns.2,
            &columns.3,
            &columns.4,
            &lease,
            &completed,
            &status,
            &headers,
            &body,
            &kept,
            &class,
            &last_status,
            &last_at,
            &record.route,
            &record.replay_of,
            &method,
            &query,
            &request_headers,
            &request_body,
            &past,
            &next,
            &record.accepted,
            &entity,
            &value,
            &seq,
            &expires,
        ];
        let client = self.client().await?;
        let statement = client.prepare_cached(sql::IMPORT).await.map_err(db)?;
        let written = client.execute(&statement, &params).await.map_err(db)? == 1;
        if let (true, Some(seq)) = (written, seq) {
            // New acceptances take places after every copied one: an
            // entity's copied events go before its new ones.
            let statement = client.prepare_cached(SEQUENCE_PAST).await.map_err(db)?;
            client.execute(&statement, &[&seq]).await.map_err(db)?;
        }
        if let (true, Some(guard)) = (written, guard) {
            let statement = client.prepare_cached(sql::IMPORT_GUARD).await.map_err(db)?;
            let guard: [&(dyn ToSql + Sync); 4] =
                [&guard.source(), &guard.id(), &key.id(), &expires];
            client.execute(&statement, &guard).await.map_err(db)?;
        }
        Ok(written)
    }

    async fn reseal(&self, key: &StoreKey, was: &Record, now: &Record) -> Result<bool, StoreError> {
        let (was, now) = (Content::of(was), Content::of(now));
        let bytes = |b: &Option<bytes::Bytes>| b.as_ref().map(|b| b.to_vec());
        let (new_request, new_response) = (bytes(&now.request_body), bytes(&now.response_body));
        let (old_request, old_response) = (bytes(&was.request_body), bytes(&was.response_body));
        let params: [&(dyn ToSql + Sync); 14] = [
            &key.source(),
            &key.id(),
            &now.request_query,
            &now.request_headers,
            &new_request,
            &now.response_headers,
            &new_response,
            &now.history,
            &was.request_query,
            &was.request_headers,
            &old_request,
            &was.response_headers,
            &old_response,
            &was.history,
        ];
        let client = self.client().await?;
        let statement = client.prepare_cached(RESEAL).await.map_err(db)?;
        Ok(client.execute(&statement, &params).await.map_err(db)? == 1)
    }
}
