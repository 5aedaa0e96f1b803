//! Copying records into and out of the embedded file (`hookgate store
//! copy`): a whole row with its expiry, and a row written back as it was —
//! its state, times and request, and for an accepted event its queue — and
//! a row's content sealed again (`hookgate store reencrypt`), run by the
//! database thread like every other operation (`run.rs`).

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, OptionalExtension, Transaction};

use super::row::record_from;
use super::sql::EXPORT;
use crate::store::{history, Content, Record};

/// ?1 key, ?2..?28 the columns in `record_columns`' order, ?29 expiry, ?30 now: a
/// live row changed at or after ?6 is kept.
const IMPORT: &str = "INSERT INTO webhook_events (key, state, token, body_sha256, attempts, \
    first_seen, updated_at, lease_until, completed_at, last_error, last_status, last_attempt_at, \
    route, replay_of, response_status, response_body_kept, response_headers, response_body, \
    request_method, request_query, request_headers, request_body, history, next_attempt_at, \
    due_source, order_entity, order_value, order_seq, expires_at) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
    ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29) \
ON CONFLICT (key) DO UPDATE SET state = excluded.state, token = excluded.token, \
    body_sha256 = excluded.body_sha256, attempts = excluded.attempts, \
    first_seen = excluded.first_seen, updated_at = excluded.updated_at, \
    lease_until = excluded.lease_until, completed_at = excluded.completed_at, \
    last_error = excluded.last_error, last_status = excluded.last_status, \
    last_attempt_at = excluded.last_attempt_at, route = excluded.route, \
    replay_of = excluded.replay_of, response_status = excluded.response_status, \
    response_body_kept = excluded.response_body_kept, \
    response_headers = excluded.response_headers, response_body = excluded.response_body, \
    request_method = excluded.request_method, request_query = excluded.request_query, \
    request_headers = excluded.request_headers, request_body = excluded.request_body, \
    history = excluded.history, next_attempt_at = excluded.next_attempt_at, order_parked = NULL, \
    due_source = excluded.due_source, order_entity = excluded.order_entity, \
    order_value = excluded.order_value, order_seq = excluded.order_seq, \
    expires_at = excluded.expires_at \
WHERE webhook_events.expires_at <= ?30 \
   OR coalesce(webhook_events.updated_at, webhook_events.first_seen) < excluded.updated_at";

/// ?1 guard, ?2 key, ?3 expiry, ?4 now: kept while it points at a live row.
const IMPORT_GUARD: &str = "INSERT INTO replay_guards (body_key, first_key, expires_at) \
VALUES (?1, ?2, ?3) \
ON CONFLICT (body_key) DO UPDATE SET first_key = excluded.first_key, \
    expires_at = excluded.expires_at \
WHERE replay_guards.expires_at <= ?4 OR NOT EXISTS (SELECT 1 FROM webhook_events \
    WHERE key = replay_guards.first_key AND expires_at > ?4)";

/// ?1 key, ?2 now, ?3..?8 the content written, ?9..?14 the content it
/// replaces, compared with `IS` (NULL is NULL).
const RESEAL: &str = "UPDATE webhook_events SET request_query = ?3, request_headers = ?4, \
    request_body = ?5, response_headers = ?6, response_body = ?7, history = ?8 \
WHERE key = ?1 AND expires_at > ?2 AND request_query IS ?9 AND request_headers IS ?10 \
    AND request_body IS ?11 AND response_headers IS ?12 AND response_body IS ?13 \
    AND history IS ?14";

/// A row's content to seal again (see
/// [`Transfer::reseal`](crate::store::Transfer::reseal)).
pub(super) struct Reseal {
    pub(super) key: String,
    pub(super) was: Content,
    pub(super) now: Content,
}

impl Reseal {
    pub(super) fn run(self, tx: &Transaction<'_>, now: u64) -> rusqlite::Result<bool> {
        let columns = |content: Content| -> [Value; 6] {
            let blob = |bytes: Option<bytes::Bytes>| bytes.map(|b| b.to_vec());
            [
                content.request_query.into(),
                content.request_headers.into(),
                blob(content.request_body).into(),
                content.response_headers.into(),
                blob(content.response_body).into(),
                content.history.into(),
            ]
        };
        let values = [Value::from(self.key), Value::from(now as i64)]
            .into_iter()
            .chain(columns(self.now))
            .chain(columns(self.was));
        let written = tx
            .prepare_cached(RESEAL)?
            .execute(params_from_iter(values))?;
        Ok(written == 1)
    }
}

/// A record to write (see [`Transfer::import`](crate::store::Transfer::import)).
pub(super) struct Import {
    pub(super) key: String,
    /// The queue an accepted record goes back to.
    pub(super) source: String,
    pub(super) record: Record,
    pub(super) expires_at_ms: u64,
    pub(super) guard: Option<String>,
}

impl Import {
    pub(super) fn run(self, tx: &Transaction<'_>, now: u64) -> rusqlite::Result<bool> {
        let Import {
            key,
            source,
            record,
            expires_at_ms,
            guard,
        } = self;
        if expires_at_ms <= now {
            return Ok(false);
        }
        let ms = |value: Option<u64>| value.map(|v| v as i64);
        let error = record.last_error.as_ref();
        let response = record.response.as_ref();
        let request = record.request.as_ref();
        let order = record.order.as_ref();
        let written = tx.prepare_cached(IMPORT)?.execute(params![
            key,
            record.state.as_str(),
            record.token,
            record.body_sha256,
            record.attempts,
            record.first_seen_ms as i64,
            record.updated_ms as i64,
            ms(record.lease_expires_at_ms),
            ms(record.completed_at_ms),
            error.map(|e| e.class.as_str()),
            error.and_then(|e| e.status),
            error.map(|e| e.at_ms as i64),
            record.route,
            record.replay_of,
            response.map(|r| r.status.as_u16()),
            response.map(|r| r.body_kept.as_str()),
            response.map(|r| r.encode_headers()),
            response.map(|r| r.body.to_vec()),
            request.map(|r| r.method.as_str()),
            request.and_then(|r| r.query.as_deref()),
            request.map(|r| r.encode_headers()),
            request.map(|r| r.body.to_vec()),
            history::encode(&record.history),
            ms(record.next_attempt_ms),
            record.accepted.then_some(source),
            order.map(|o| o.entity.as_str()),
            order.and_then(|o| o.value),
            order.map(|o| o.seq as i64),
            expires_at_ms as i64,
            now as i64,
        ])? == 1;
        if let (true, Some(guard)) = (written, guard) {
            let guard_params = params![guard, key, expires_at_ms as i64, now as i64];
            tx.prepare_cached(IMPORT_GUARD)?.execute(guard_params)?;
        }
        if written && order.is_some() {
            // A copied row may settle what this store's rows of its entity
            // wait for.
            super::order::wake(tx, super::order::entity_of(tx, &key)?, now)?;
        }
        Ok(written)
    }
}

pub(super) fn export(
    tx: &Transaction<'_>,
    key: &str,
    now: u64,
) -> rusqlite::Result<Option<(Record, u64)>> {
    tx.prepare_cached(EXPORT)?
        .query_row(params![key, now as i64], |row| {
            Ok((record_from(row, 0)?, row.get::<_, i64>(27)? as u64))
        })
        .optional()
}
