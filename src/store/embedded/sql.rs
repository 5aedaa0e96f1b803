//! The embedded store's SQL: the schema (with the columns added since the
//! first release), one statement per operation, and how the database thread
//! executes each request inside the batch's transaction. Statements go
//! through SQLite's statement cache, so each is parsed once.

use std::time::Duration;

use bytes::Bytes;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::super::{settled, ClaimOutcome, Deleted, Lease, Record, RecordState};
use crate::replay::{BodyKept, RecordedResponse};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS webhook_events (
    key              TEXT PRIMARY KEY,
    state            TEXT NOT NULL,     -- processing | released | completed
    token            TEXT,              -- fencing token of the holder, while processing
    body_sha256      TEXT NOT NULL,
    attempts         INTEGER NOT NULL,
    first_seen       INTEGER NOT NULL,  -- unix ms
    lease_until      INTEGER,           -- unix ms, while processing
    completed_at     INTEGER,           -- unix ms
    response_status  INTEGER,
    response_headers BLOB,              -- 'name: value' lines
    response_body    BLOB,
    expires_at       INTEGER NOT NULL,  -- unix ms; the row is forgotten after
    response_body_kept TEXT             -- whole | dropped | incomplete (NULL: whole)
);
CREATE INDEX IF NOT EXISTS webhook_events_expires_at ON webhook_events (expires_at);
CREATE TABLE IF NOT EXISTS replay_guards (
    body_key   TEXT PRIMARY KEY,
    first_key  TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS replay_guards_expires_at ON replay_guards (expires_at);
";

/// Columns added after the first release, with their definitions: added at
/// open to a file created before them.
const ADDED_COLUMNS: [(&str, &str); 1] = [("response_body_kept", "TEXT")];

const SELECT_LIVE: &str = "SELECT state, token, body_sha256, attempts, first_seen, lease_until, \
     completed_at, response_status, response_headers, response_body, response_body_kept \
     FROM webhook_events WHERE key = ?1 AND expires_at > ?2";

const EXISTS: &str = "SELECT 1 FROM webhook_events WHERE key = ?1 AND expires_at > ?2";

const GUARD_FIRST_KEY: &str =
    "SELECT first_key FROM replay_guards WHERE body_key = ?1 AND expires_at > ?2";

/// Insert, or take over a row that may be claimed: expired, released, or
/// processing with a lapsed lease. Anything else is left untouched (no row
/// returned) and answers from the record.
const CLAIM: &str = "\
INSERT INTO webhook_events \
    (key, state, token, body_sha256, attempts, first_seen, lease_until, expires_at) \
VALUES (?1, 'processing', ?2, ?3, 1, ?4, ?5, ?6) \
ON CONFLICT (key) DO UPDATE SET \
    state = 'processing', token = excluded.token, body_sha256 = excluded.body_sha256, \
    attempts = CASE WHEN webhook_events.expires_at <= ?4 THEN 1 \
                    ELSE webhook_events.attempts + 1 END, \
    first_seen = CASE WHEN webhook_events.expires_at <= ?4 THEN ?4 \
                      ELSE webhook_events.first_seen END, \
    lease_until = excluded.lease_until, expires_at = excluded.expires_at, completed_at = NULL, \
    response_status = NULL, response_headers = NULL, response_body = NULL, \
    response_body_kept = NULL \
WHERE webhook_events.expires_at <= ?4 \
   OR webhook_events.state = 'released' \
   OR (webhook_events.state = 'processing' AND webhook_events.lease_until <= ?4) \
RETURNING attempts";

const SET_GUARD: &str = "\
INSERT INTO replay_guards (body_key, first_key, expires_at) VALUES (?1, ?2, ?3) \
ON CONFLICT (body_key) DO UPDATE SET \
    first_key = excluded.first_key, expires_at = excluded.expires_at";

const RENEW: &str = "UPDATE webhook_events SET lease_until = ?3 \
     WHERE key = ?1 AND token = ?2 AND expires_at > ?4";

const COMPLETE: &str = "\
UPDATE webhook_events SET state = 'completed', token = NULL, lease_until = NULL, \
    completed_at = ?3, response_status = ?4, response_headers = ?5, response_body = ?6, \
    expires_at = ?7, response_body_kept = ?8 \
WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

pub(super) const RELEASE: &str = "\
UPDATE webhook_events SET state = 'released', token = NULL, lease_until = NULL \
WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

/// Delete unless forced (?3) or a live claim holds the row.
const DELETE: &str = "\
DELETE FROM webhook_events WHERE key = ?1 AND expires_at > ?2 \
  AND (?3 OR state <> 'processing' OR lease_until <= ?2)";

/// One request to the database thread.
pub(super) enum Op {
    Claim {
        key: String,
        token: String,
        guard_key: Option<String>,
        body_sha256: String,
        processing_ttl: Duration,
        retention: Duration,
    },
    Renew {
        key: String,
        token: String,
        processing_ttl: Duration,
    },
    Complete {
        key: String,
        token: String,
        response: RecordedResponse,
        retention: Duration,
    },
    Release {
        key: String,
        token: String,
    },
    Get {
        key: String,
    },
    Delete {
        key: String,
        force: bool,
    },
    Ping,
}

pub(super) enum Reply {
    Claim(ClaimOutcome),
    Applied(bool),
    Record(Option<Record>),
    Deleted(Deleted),
    Pong,
}

/// Bring a file from an earlier version up to the current columns.
pub(super) fn add_missing_columns(connection: &Connection) -> rusqlite::Result<()> {
    let present: Vec<String> = connection
        .prepare("SELECT name FROM pragma_table_info('webhook_events')")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for (column, definition) in ADDED_COLUMNS {
        if !present.iter().any(|name| name == column) {
            connection.execute_batch(&format!(
                "ALTER TABLE webhook_events ADD COLUMN {column} {definition}"
            ))?;
        }
    }
    Ok(())
}

/// Run a statement through SQLite's statement cache (each is parsed once).
pub(super) fn run(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(params)
}

fn query_one<T>(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
    tx.prepare_cached(sql)?.query_row(params, f).optional()
}

pub(super) fn execute(tx: &Transaction<'_>, op: Op, now: u64) -> rusqlite::Result<Reply> {
    let now_i = now as i64;
    let ms = |d: Duration| now_i + d.as_millis() as i64;
    let applied = |n: usize| Reply::Applied(n == 1);
    match op {
        Op::Claim {
            key,
            token,
            guard_key,
            body_sha256,
            processing_ttl,
            retention,
        } => {
            let until = (ms(processing_ttl), ms(retention));
            let claiming = (key.as_str(), token);
            claim(tx, claiming, guard_key.as_deref(), &body_sha256, until, now).map(Reply::Claim)
        }
        Op::Renew {
            key,
            token,
            processing_ttl,
        } => run(tx, RENEW, params![key, token, ms(processing_ttl), now_i]).map(applied),
        Op::Complete {
            key,
            token,
            response,
            retention,
        } => run(
            tx,
            COMPLETE,
            params![
                key,
                token,
                now_i,
                response.status.as_u16(),
                response.encode_headers(),
                response.body.as_ref(),
                ms(retention),
                response.body_kept.as_str()
            ],
        )
        .map(applied),
        Op::Release { key, token } => run(tx, RELEASE, params![key, token, now_i]).map(applied),
        Op::Get { key } => live_record(tx, &key, now).map(Reply::Record),
        Op::Delete { key, force } => {
            if run(tx, DELETE, params![key, now_i, force])? == 1 {
                Ok(Reply::Deleted(Deleted::Deleted))
            } else if query_one(tx, EXISTS, params![key, now_i], |row| row.get::<_, i64>(0))?
                .is_some()
            {
                Ok(Reply::Deleted(Deleted::InFlight))
            } else {
                Ok(Reply::Deleted(Deleted::NotFound))
            }
        }
        Op::Ping => tx.query_row("SELECT 1", [], |_| Ok(Reply::Pong)),
    }
}

/// Claim `key`: `until` is (lease expiry, record expiry) in Unix ms.
fn claim(
    tx: &Transaction<'_>,
    (key, token): (&str, String),
    guard_key: Option<&str>,
    body_sha256: &str,
    (lease_expires_at, expires_at): (i64, i64),
    now: u64,
) -> rusqlite::Result<ClaimOutcome> {
    let now_i = now as i64;
    if let Some(guard_key) = guard_key {
        // The key's own record answers first; only a claimable key looks at
        // the body's first key.
        if let Some(answer) = live_record(tx, key, now)?.and_then(|r| settled(r, now)) {
            return Ok(answer);
        }
        let first: Option<String> =
            query_one(tx, GUARD_FIRST_KEY, params![guard_key, now_i], |row| {
                row.get(0)
            })?;
        if let Some(first) = first.filter(|first| first != key) {
            if let Some(answer) = live_record(tx, &first, now)?.and_then(|r| settled(r, now)) {
                return Ok(answer);
            }
        }
    }
    let claimed = params![key, token, body_sha256, now_i, lease_expires_at, expires_at];
    let attempts: Option<u32> = query_one(tx, CLAIM, claimed, |row| row.get(0))?;
    if let Some(attempt) = attempts {
        if let Some(guard_key) = guard_key {
            run(tx, SET_GUARD, params![guard_key, key, expires_at])?;
        }
        return Ok(ClaimOutcome::New(Lease { token, attempt }));
    }
    let record = live_record(tx, key, now)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(settled(record, now).unwrap_or(ClaimOutcome::InFlight {
        retry_after: Duration::from_secs(1),
    }))
}

fn live_record(tx: &Transaction<'_>, key: &str, now: u64) -> rusqlite::Result<Option<Record>> {
    query_one(tx, SELECT_LIVE, params![key, now as i64], |row| {
        let state: String = row.get(0)?;
        let state =
            RecordState::parse(&state).ok_or_else(|| corrupt(format!("state {state:?}")))?;
        let status: Option<u16> = row.get(7)?;
        let headers: Option<Vec<u8>> = row.get(8)?;
        let body: Option<Vec<u8>> = row.get(9)?;
        let kept: Option<String> = row.get(10)?;
        let kept = match kept.as_deref() {
            None => BodyKept::Whole,
            Some(text) => BodyKept::parse(text).ok_or_else(|| corrupt(format!("body {text:?}")))?,
        };
        let response = match (state, status) {
            (RecordState::Completed, Some(status)) => Some(
                RecordedResponse::decode(
                    status,
                    &headers.unwrap_or_default(),
                    Bytes::from(body.unwrap_or_default()),
                    kept,
                )
                .map_err(corrupt)?,
            ),
            (RecordState::Completed, None) => {
                return Err(corrupt("completed without status".into()))
            }
            _ => None,
        };
        Ok(Record {
            state,
            token: row.get(1)?,
            body_sha256: row.get(2)?,
            attempts: row.get(3)?,
            first_seen_ms: row.get::<_, i64>(4)? as u64,
            lease_expires_at_ms: row.get::<_, Option<i64>>(5)?.map(|v| v as u64),
            completed_at_ms: row.get::<_, Option<i64>>(6)?.map(|v| v as u64),
            response,
        })
    })
}

fn corrupt(message: String) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(message.into())
}
