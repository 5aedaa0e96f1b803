//! Reading a record back from a row of the embedded store (the columns
//! `sql.rs`'s `record_columns` names, in that order; one row of a query),
//! and running one statement: what both the operations (`run.rs`) and
//! the claim (`claim.rs`) use.

use bytes::Bytes;
use rusqlite::{params, OptionalExtension, Transaction};

use super::super::{history, FailureClass, LastError, Ordered, Record, RecordState, StoredRequest};
use super::sql::SELECT_LIVE;
use crate::replay::{BodyKept, RecordedResponse};

/// Read a record from `row`, its columns ([`record_columns`]) from `at` on.
pub(super) fn record_from(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Record> {
    let get_ms = |i: usize| -> rusqlite::Result<Option<u64>> {
        Ok(row.get::<_, Option<i64>>(at + i)?.map(|v| v as u64))
    };
    let state: String = row.get(at)?;
    let state = RecordState::parse(&state).ok_or_else(|| corrupt(format!("state {state:?}")))?;
    let last_error = match row.get::<_, Option<String>>(at + 8)? {
        None => None,
        Some(class) => Some(LastError {
            class: FailureClass::parse(&class)
                .ok_or_else(|| corrupt(format!("last_error {class:?}")))?,
            status: row.get(at + 9)?,
            at_ms: get_ms(10)?.unwrap_or_default(),
        }),
    };
    let status: Option<u16> = row.get(at + 13)?;
    let kept: Option<String> = row.get(at + 14)?;
    let headers: Option<Vec<u8>> = row.get(at + 15)?;
    let body: Option<Vec<u8>> = row.get(at + 16)?;
    let kept = match kept.as_deref() {
        None => BodyKept::Whole,
        Some(text) => BodyKept::parse(text).ok_or_else(|| corrupt(format!("body {text:?}")))?,
    };
    let response = match (state, status, body) {
        (RecordState::Completed, Some(status), Some(body)) => Some(
            RecordedResponse::decode(
                status,
                &headers.unwrap_or_default(),
                Bytes::from(body),
                kept,
            )
            .map_err(corrupt)?,
        ),
        _ => None,
    };
    let method: Option<String> = row.get(at + 17)?;
    let request_body: Option<Vec<u8>> = row.get(at + 20)?;
    let request = match (method, request_body) {
        (Some(method), Some(body)) => Some(
            StoredRequest::decode(
                &method,
                row.get(at + 18)?,
                &row.get::<_, Option<Vec<u8>>>(at + 19)?.unwrap_or_default(),
                Bytes::from(body),
            )
            .map_err(corrupt)?,
        ),
        _ => None,
    };
    Ok(Record {
        state,
        token: row.get(at + 1)?,
        body_sha256: row.get(at + 2)?,
        attempts: row.get(at + 3)?,
        first_seen_ms: get_ms(4)?.unwrap_or_default(),
        updated_ms: get_ms(5)?.unwrap_or_default(),
        lease_expires_at_ms: get_ms(6)?,
        completed_at_ms: get_ms(7)?,
        next_attempt_ms: get_ms(22)?,
        accepted: row.get::<_, Option<String>>(at + 23)?.is_some() || get_ms(22)?.is_some(),
        history: row
            .get::<_, Option<String>>(at + 21)?
            .map(|lines| history::decode(&lines))
            .unwrap_or_default(),
        response,
        last_error,
        route: row.get(at + 11)?,
        replay_of: row.get(at + 12)?,
        request,
        order: match row.get::<_, Option<String>>(at + 24)? {
            None => None,
            Some(entity) => Some(Ordered {
                entity,
                value: row.get(at + 25)?,
                seq: row.get::<_, Option<i64>>(at + 26)?.unwrap_or_default() as u64,
            }),
        },
    })
}

pub(super) fn corrupt(message: String) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(message.into())
}

/// The first row of `sql`, read by `f`; `None` when there is none.
pub(super) fn query_one<T>(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
    tx.prepare_cached(sql)?.query_row(params, f).optional()
}

/// The record of `key`, unless it expired by `now`.
pub(super) fn live_record(
    tx: &Transaction<'_>,
    key: &str,
    now: u64,
) -> rusqlite::Result<Option<Record>> {
    query_one(tx, SELECT_LIVE, params![key, now as i64], |row| {
        record_from(row, 0)
    })
}

/// A request stored with a claim or a failure: (request, route, replay of).
pub(super) type Kept = (StoredRequest, String, Option<String>);

/// Run a statement through SQLite's statement cache (each is parsed once).
pub(super) fn run(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(params)
}
