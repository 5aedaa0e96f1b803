//! The embedded store's SQL: the schema (with the columns added since the
//! first release), one statement per operation, and how the database thread
//! executes each request inside the batch's transaction. Statements go
//! through SQLite's statement cache, so each is parsed once.

use std::time::Duration;

use bytes::Bytes;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::super::{
    decide, settled, ClaimMode, ClaimOutcome, Decision, Deleted, Due, Failure, FailureClass,
    LastError, Lease, Next, Record, RecordState, StoredRequest,
};
use crate::replay::{BodyKept, RecordedResponse};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS webhook_events (
    key              TEXT PRIMARY KEY,
    state            TEXT NOT NULL,     -- processing | failed | dead | completed
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
CREATE TABLE IF NOT EXISTS route_controls (
    space      TEXT NOT NULL,              -- the key prefix
    route      TEXT NOT NULL,
    value      TEXT NOT NULL,              -- JSON: a pause, who set it and when
    updated_at INTEGER NOT NULL,           -- unix ms
    PRIMARY KEY (space, route)
);
";

/// Columns added after the first release, with their definitions: added at
/// open to a file created before them.
const ADDED_COLUMNS: [(&str, &str); 13] = [
    ("response_body_kept", "TEXT"),
    ("updated_at", "INTEGER"),
    ("last_error", "TEXT"),
    ("last_status", "INTEGER"),
    ("last_attempt_at", "INTEGER"),
    ("route", "TEXT"),
    ("replay_of", "TEXT"),
    ("request_method", "TEXT"),
    ("request_query", "TEXT"),
    ("request_headers", "BLOB"),
    ("request_body", "BLOB"),
    ("next_attempt_at", "INTEGER"),
    ("due_source", "TEXT"),
];

/// Run at every open, after the columns exist: rows from before dead
/// letters get their time of last change, `released` is now `failed`, and
/// the failed and dead rows are indexed by time for their listings. Only
/// those: a claim and its completion never touch that index, so the
/// success path pays nothing for it (listings of processing and completed
/// rows walk the key range of their source instead).
const UPGRADE: &str = "
UPDATE webhook_events SET updated_at = first_seen WHERE updated_at IS NULL;
UPDATE webhook_events SET state = 'failed' WHERE state = 'released';
CREATE INDEX IF NOT EXISTS webhook_events_parked ON webhook_events (state, updated_at)
    WHERE state IN ('failed', 'dead');
CREATE INDEX IF NOT EXISTS webhook_events_due_by_source
    ON webhook_events (due_source, next_attempt_at) WHERE next_attempt_at IS NOT NULL;
";

/// A record's columns, in the order [`record_from`] reads them; listings
/// read the same with the request and the response left out.
macro_rules! record_columns {
    ($response:literal, $request:literal) => {
        concat!(
            "state, token, body_sha256, attempts, first_seen, updated_at, lease_until, \
             completed_at, last_error, last_status, last_attempt_at, route, replay_of, \
             response_status, response_body_kept, ",
            $response,
            ", ",
            $request,
            ", next_attempt_at, due_source"
        )
    };
}

const SELECT_LIVE: &str = concat!(
    "SELECT ",
    record_columns!(
        "response_headers, response_body",
        "request_method, request_query, request_headers, request_body"
    ),
    " FROM webhook_events WHERE key = ?1 AND expires_at > ?2"
);

/// One page of a listing: ?1 state, ?2 now, keys in [?3, ?4) (one source),
/// before (?5 time, ?6 key) when ?5 is set, ?7 rows; `$parked` is the
/// condition that lets failed and dead listings use their index.
macro_rules! list {
    ($parked:literal) => {
        concat!(
            "SELECT key, ",
            record_columns!("NULL, NULL", "NULL, NULL, NULL, NULL"),
            " FROM webhook_events WHERE state = ?1 ",
            $parked,
            " AND expires_at > ?2 AND key >= ?3 AND key < ?4 \
              AND (?5 IS NULL OR updated_at < ?5 OR (updated_at = ?5 AND (?6 IS NULL OR key < ?6))) \
             ORDER BY updated_at DESC, key DESC LIMIT ?7"
        )
    };
}
const LIST: &str = list!("");
const LIST_PARKED: &str = list!("AND state IN ('failed', 'dead')");

const COUNT: &str = "SELECT count(*) FROM webhook_events \
     WHERE state = ?1 AND expires_at > ?2 AND key >= ?3 AND key < ?4";
/// Queued rows are async rows: the due index finds them.
const COUNT_QUEUED: &str = "SELECT count(*) FROM webhook_events \
     WHERE due_source = ?3 AND next_attempt_at IS NOT NULL AND state = ?1 AND expires_at > ?2";
const OLDEST: &str = "SELECT min(updated_at) FROM webhook_events \
     WHERE state = ?1 AND expires_at > ?2 AND key >= ?3 AND key < ?4";
const OLDEST_QUEUED: &str = "SELECT min(updated_at) FROM webhook_events \
     WHERE due_source = ?3 AND next_attempt_at IS NOT NULL AND state = ?1 AND expires_at > ?2";
const COUNT_PARKED: &str = "SELECT count(*) FROM webhook_events \
     WHERE state = ?1 AND state IN ('failed', 'dead') AND expires_at > ?2 AND key >= ?3 AND key < ?4";

const EXISTS: &str = "SELECT 1 FROM webhook_events WHERE key = ?1 AND expires_at > ?2";

const GUARD_FIRST_KEY: &str =
    "SELECT first_key FROM replay_guards WHERE body_key = ?1 AND expires_at > ?2";

/// Insert, or take over a row that may be claimed in mode ?7 (0 a
/// delivery, 1 a redelivery, 2 a forced one, 4 a claimed acceptance):
/// expired (then it starts over), failed, or processing with a lapsed
/// lease; dead too for a redelivery, completed for a forced one — never
/// under a live lease. An accepted row (`due_source` set) stays owed to its
/// queue: due again when the new lease ends. Anything else is left
/// untouched (no row returned) and answers from the record. A stored
/// request (?8..?13), when given, replaces the one kept.
const CLAIM: &str = "\
INSERT INTO webhook_events \
    (key, state, token, body_sha256, attempts, first_seen, updated_at, lease_until, expires_at, \
     route, replay_of, request_method, request_query, request_headers, request_body, \
     next_attempt_at, due_source) \
VALUES (?1, CASE WHEN ?7 = 3 THEN 'queued' ELSE 'processing' END, \
    CASE WHEN ?7 = 3 THEN NULL ELSE ?2 END, ?3, CASE WHEN ?7 = 3 THEN 0 ELSE 1 END, ?4, ?4, \
    CASE WHEN ?7 = 3 THEN NULL ELSE ?5 END, ?6, ?8, ?9, ?10, ?11, ?12, ?13, \
    CASE ?7 WHEN 3 THEN ?4 WHEN 4 THEN ?5 END, CASE WHEN ?7 >= 3 THEN ?14 END) \
ON CONFLICT (key) DO UPDATE SET \
    state = excluded.state, token = excluded.token, body_sha256 = excluded.body_sha256, \
    attempts = CASE WHEN webhook_events.expires_at <= ?4 THEN excluded.attempts \
                    ELSE webhook_events.attempts + 1 END, \
    first_seen = CASE WHEN webhook_events.expires_at <= ?4 THEN ?4 \
                      ELSE webhook_events.first_seen END, \
    updated_at = ?4, lease_until = excluded.lease_until, expires_at = excluded.expires_at, \
    next_attempt_at = CASE WHEN webhook_events.expires_at <= ?4 THEN excluded.next_attempt_at \
        WHEN coalesce(excluded.due_source, webhook_events.due_source) IS NOT NULL \
        THEN excluded.lease_until END, \
    due_source = CASE WHEN webhook_events.expires_at <= ?4 THEN excluded.due_source \
        ELSE coalesce(excluded.due_source, webhook_events.due_source) END, \
    completed_at = NULL, response_status = NULL, response_headers = NULL, response_body = NULL, \
    response_body_kept = NULL, \
    last_error = CASE WHEN webhook_events.expires_at <= ?4 THEN NULL \
                      ELSE webhook_events.last_error END, \
    route = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL THEN excluded.route \
                 ELSE webhook_events.route END, \
    replay_of = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                     THEN excluded.replay_of ELSE webhook_events.replay_of END, \
    request_method = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                          THEN excluded.request_method ELSE webhook_events.request_method END, \
    request_query = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                         THEN excluded.request_query ELSE webhook_events.request_query END, \
    request_headers = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                           THEN excluded.request_headers ELSE webhook_events.request_headers END, \
    request_body = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                        THEN excluded.request_body ELSE webhook_events.request_body END \
WHERE webhook_events.expires_at <= ?4 \
   OR (?7 <> 3 AND (webhook_events.lease_until IS NULL OR webhook_events.lease_until <= ?4) \
       AND (webhook_events.state IN ('processing', 'failed', 'released') \
            OR (webhook_events.state = 'dead' AND ?7 >= 1) \
            OR (webhook_events.state = 'completed' AND ?7 = 2))) \
RETURNING attempts";

/// The due async events of source ?2 at ?1, at most ?3, walked in due
/// order on the per-source due index (never the whole table's backlog, nor
/// the source's key range, which holds every completed event too).
const DUE: &str = "SELECT key FROM webhook_events INDEXED BY webhook_events_due_by_source \
    WHERE due_source = ?2 AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 \
      AND state IN ('queued', 'processing') AND expires_at > ?1 \
    ORDER BY next_attempt_at LIMIT ?3";

/// Lease due event ?1 to token ?2 until ?3, at ?4.
const LEASE_DUE: &str = "\
UPDATE webhook_events SET state = 'processing', token = ?2, lease_until = ?3, \
    next_attempt_at = ?3, attempts = attempts + 1, updated_at = ?4 \
WHERE key = ?1 AND next_attempt_at <= ?4 AND state IN ('queued', 'processing') \
  AND expires_at > ?4 \
RETURNING attempts";

const SET_GUARD: &str = "\
INSERT INTO replay_guards (body_key, first_key, expires_at) VALUES (?1, ?2, ?3) \
ON CONFLICT (body_key) DO UPDATE SET \
    first_key = excluded.first_key, expires_at = excluded.expires_at";

/// An async event's next look is its lease's end.
const RENEW: &str = "UPDATE webhook_events SET lease_until = ?3, \
     next_attempt_at = CASE WHEN next_attempt_at IS NOT NULL THEN ?3 END \
     WHERE key = ?1 AND token = ?2 AND expires_at > ?4";

const COMPLETE: &str = "\
UPDATE webhook_events SET state = 'completed', token = NULL, lease_until = NULL, \
    next_attempt_at = NULL, completed_at = ?3, updated_at = ?3, response_status = ?4, response_headers = ?5, \
    response_body = ?6, expires_at = ?7, response_body_kept = ?8 \
WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

/// ?3 the new state, ?5 hold (keep token and lease), ?14 the next attempt
/// of a requeued async event.
const FAIL: &str = "\
UPDATE webhook_events SET state = ?3, updated_at = ?4, \
    token = CASE WHEN ?5 THEN token END, lease_until = CASE WHEN ?5 THEN lease_until END, \
    last_error = ?6, last_status = ?7, last_attempt_at = ?4, route = ?8, \
    request_method = ?9, request_query = ?10, request_headers = ?11, request_body = ?12, \
    expires_at = ?13, next_attempt_at = ?14 \
WHERE key = ?1 AND token = ?2 AND expires_at > ?4";

/// An acceptance of ?1, a row nobody holds: accepted into the queue of ?3,
/// due now (?2), its attempts kept; ?4 body hash, ?5 expiry, ?6..?11 the
/// request (route, replay of, method, query, headers, body).
const QUEUE: &str = "\
UPDATE webhook_events SET state = 'queued', token = NULL, lease_until = NULL, \
    next_attempt_at = ?2, due_source = ?3, body_sha256 = ?4, updated_at = ?2, expires_at = ?5, \
    route = coalesce(?6, route), replay_of = coalesce(?7, replay_of), \
    request_method = coalesce(?8, request_method), \
    request_query = CASE WHEN ?8 IS NULL THEN request_query ELSE ?9 END, \
    request_headers = coalesce(?10, request_headers), request_body = coalesce(?11, request_body) \
WHERE key = ?1";

/// An acceptance meeting a sync holder of ?1: accepted into the queue of
/// ?3, due when the lease ends; a held failure waits queued (at ?2).
const ADOPT: &str = "\
UPDATE webhook_events SET due_source = ?3, next_attempt_at = lease_until, \
    state = CASE WHEN state = 'failed' THEN 'queued' ELSE state END, \
    token = CASE WHEN state = 'failed' THEN NULL ELSE token END, \
    lease_until = CASE WHEN state = 'failed' THEN NULL ELSE lease_until END, \
    updated_at = CASE WHEN state = 'failed' THEN ?2 ELSE updated_at END, \
    expires_at = max(expires_at, ?4), \
    route = coalesce(?5, route), request_method = coalesce(?6, request_method), \
    request_query = CASE WHEN ?6 IS NULL THEN request_query ELSE ?7 END, \
    request_headers = coalesce(?8, request_headers), request_body = coalesce(?9, request_body) \
WHERE key = ?1";

/// An operator's redelivery of queued ?1: due now (?2).
const MAKE_DUE: &str = "UPDATE webhook_events SET next_attempt_at = ?2 WHERE key = ?1";

/// Whether ?1 (live at ?2) is accepted: owed a delivery by its queue.
const ACCEPTED: &str = "SELECT due_source IS NOT NULL OR next_attempt_at IS NOT NULL \
    FROM webhook_events WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

/// A released async event goes back to its queue, due now.
pub(super) const RELEASE: &str = "\
UPDATE webhook_events SET \
    state = CASE WHEN state = 'processing' \
                      AND (next_attempt_at IS NOT NULL OR due_source IS NOT NULL) THEN 'queued' \
                 WHEN state = 'processing' THEN 'failed' ELSE state END, \
    updated_at = CASE WHEN state = 'processing' THEN ?3 ELSE updated_at END, \
    next_attempt_at = CASE WHEN next_attempt_at IS NOT NULL OR due_source IS NOT NULL \
                           THEN ?3 END, \
    token = NULL, lease_until = NULL \
WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

/// Delete unless forced (?3), or a live claim holds the row, or its queue
/// still owes it a delivery.
const DELETE: &str = "\
DELETE FROM webhook_events WHERE key = ?1 AND expires_at > ?2 \
  AND (?3 OR ((lease_until IS NULL OR lease_until <= ?2) AND state <> 'queued'))";

/// A request stored with a claim or a failure: (request, route, replay of).
pub(super) type Kept = (StoredRequest, String, Option<String>);

/// One request to the database thread.
pub(super) enum Op {
    Claim {
        key: String,
        /// Only for an acceptance (the due index is per source).
        source: Option<String>,
        token: String,
        guard_key: Option<String>,
        body_sha256: String,
        processing_ttl: Duration,
        retention: Duration,
        mode: ClaimMode,
        stored: Option<Kept>,
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
    Fail {
        key: String,
        token: String,
        class: FailureClass,
        status: Option<u16>,
        kept: Kept,
        retention: Duration,
        next: Next,
    },
    LeaseDue {
        source: String,
        tokens: Vec<String>,
        processing_ttl: Duration,
    },
    Release {
        key: String,
        token: String,
    },
    List {
        source: String,
        state: RecordState,
        limit: usize,
        before: Option<(u64, Option<String>)>,
    },
    Count {
        source: String,
        state: RecordState,
    },
    Oldest {
        source: String,
        state: RecordState,
    },
    Get {
        key: String,
    },
    Delete {
        key: String,
        force: bool,
    },
    Ping,
    SetControl {
        space: String,
        route: String,
        value: Option<String>,
    },
    Controls {
        space: String,
    },
}

pub(super) enum Reply {
    Claim(ClaimOutcome),
    Applied(bool),
    Failed(Option<RecordState>),
    Record(Option<Record>),
    Listed(Vec<(String, Record)>),
    Leased(Vec<Due>),
    Count(u64),
    Oldest(Option<u64>),
    Deleted(Deleted),
    Pong,
    Controls(Vec<(String, String)>),
}

const SET_CONTROL: &str = "INSERT INTO route_controls (space, route, value, updated_at) \
    VALUES (?1, ?2, ?3, ?4) \
    ON CONFLICT (space, route) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at";

const CLEAR_CONTROL: &str = "DELETE FROM route_controls WHERE space = ?1 AND route = ?2";

const CONTROLS: &str = "SELECT route, value FROM route_controls WHERE space = ?1";

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
    connection.execute_batch(UPGRADE)
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
            source,
            token,
            guard_key,
            body_sha256,
            processing_ttl,
            retention,
            mode,
            stored,
        } => {
            let claim = Claiming {
                key: &key,
                source: source.as_deref(),
                token,
                guard_key: guard_key.as_deref(),
                body_sha256: &body_sha256,
                lease_until: ms(processing_ttl),
                expires_at: ms(retention),
                mode,
                stored: stored.as_ref(),
            };
            claim.run(tx, now).map(Reply::Claim)
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
        Op::Fail {
            key,
            token,
            class,
            status,
            kept: (request, route, _),
            retention,
            next,
        } => {
            let accepted: Option<bool> =
                query_one(tx, ACCEPTED, params![key, token, now_i], |row| row.get(0))?;
            let Some(accepted) = accepted else {
                return Ok(Reply::Failed(None));
            };
            let failure = Failure {
                class,
                status,
                request: &request,
                route: &route,
                retention,
                next,
            };
            let state = failure.state(accepted);
            run(
                tx,
                FAIL,
                params![
                    key,
                    token,
                    state.as_str(),
                    now_i,
                    failure.holds(accepted),
                    class.as_str(),
                    status,
                    route,
                    request.method.as_str(),
                    request.query,
                    request.encode_headers(),
                    request.body.as_ref(),
                    ms(retention),
                    failure.due_in(accepted).map(ms)
                ],
            )?;
            Ok(Reply::Failed(Some(state)))
        }
        Op::LeaseDue {
            source,
            tokens,
            processing_ttl,
        } => lease_due(tx, &source, tokens, ms(processing_ttl), now).map(Reply::Leased),
        Op::Release { key, token } => run(tx, RELEASE, params![key, token, now_i]).map(applied),
        Op::List {
            source,
            state,
            limit,
            before,
        } => {
            let (from, to) = source_range(&source);
            let (before_ms, before_key) = match &before {
                Some((ms, id)) => (
                    Some(*ms as i64),
                    id.as_ref().map(|id| format!("{source}:{id}")),
                ),
                None => (None, None),
            };
            let mut statement =
                tx.prepare_cached(if state.parked() { LIST_PARKED } else { LIST })?;
            let rows = statement.query_map(
                params![
                    state.as_str(),
                    now_i,
                    from,
                    to,
                    before_ms,
                    before_key,
                    limit as i64
                ],
                |row| {
                    let key: String = row.get(0)?;
                    let id = key[from.len()..].to_owned();
                    Ok((id, record_from(row, 1)?))
                },
            )?;
            rows.collect::<Result<_, _>>().map(Reply::Listed)
        }
        Op::Count { source, state } => {
            let count: i64 = by_source(
                tx,
                state,
                now_i,
                &source,
                [COUNT_QUEUED, COUNT_PARKED, COUNT],
            )?;
            Ok(Reply::Count(count as u64))
        }
        Op::Oldest { source, state } => {
            let at: Option<i64> =
                by_source(tx, state, now_i, &source, [OLDEST_QUEUED, OLDEST, OLDEST])?;
            Ok(Reply::Oldest(at.map(|at| at as u64)))
        }
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
        Op::SetControl {
            space,
            route,
            value: Some(value),
        } => run(tx, SET_CONTROL, params![space, route, value, now_i]).map(|_| Reply::Pong),
        Op::SetControl {
            space,
            route,
            value: None,
        } => run(tx, CLEAR_CONTROL, params![space, route]).map(|_| Reply::Pong),
        Op::Controls { space } => {
            let mut statement = tx.prepare_cached(CONTROLS)?;
            let rows = statement.query_map(params![space], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect::<Result<_, _>>().map(Reply::Controls)
        }
    }
}

/// One value about `source`'s records in `state`: from the due index for
/// queued ones (`statements[0]`, bound to the source), from the index of
/// failed and dead rows (`[1]`) or the source's key range (`[2]`).
fn by_source<T: rusqlite::types::FromSql>(
    tx: &Transaction<'_>,
    state: RecordState,
    now: i64,
    source: &str,
    statements: [&str; 3],
) -> rusqlite::Result<T> {
    let (from, to) = source_range(source);
    let state_text = state.as_str();
    match state {
        RecordState::Queued => tx
            .prepare_cached(statements[0])?
            .query_row(params![state_text, now, source], |row| row.get(0)),
        _ => {
            let statement = if state.parked() {
                statements[1]
            } else {
                statements[2]
            };
            tx.prepare_cached(statement)?
                .query_row(params![state_text, now, from, to], |row| row.get(0))
        }
    }
}

/// Lease the due async events of `source`, one token each.
fn lease_due(
    tx: &Transaction<'_>,
    source: &str,
    tokens: Vec<String>,
    lease_until: i64,
    now: u64,
) -> rusqlite::Result<Vec<Due>> {
    let now_i = now as i64;
    let from = format!("{source}:");
    let keys: Vec<String> = tx
        .prepare_cached(DUE)?
        .query_map(params![now_i, source, tokens.len() as i64], |row| {
            row.get(0)
        })?
        .collect::<Result<_, _>>()?;
    let mut leased = Vec::new();
    for (key, token) in keys.into_iter().zip(tokens) {
        let leasing = params![key, token, lease_until, now_i];
        let Some(attempt) = query_one(tx, LEASE_DUE, leasing, |row| row.get::<_, u32>(0))? else {
            continue;
        };
        let record = live_record(tx, &key, now)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
        leased.push(Due {
            id: key[from.len()..].to_owned(),
            lease: Lease { token, attempt },
            record,
        });
    }
    Ok(leased)
}

/// The keys of `source`'s events: from `{source}:` up to (not including)
/// `{source};`, the next character after `:`.
fn source_range(source: &str) -> (String, String) {
    (format!("{source}:"), format!("{source};"))
}

/// One claim, as the database thread runs it; times are Unix ms.
struct Claiming<'a> {
    key: &'a str,
    source: Option<&'a str>,
    token: String,
    guard_key: Option<&'a str>,
    body_sha256: &'a str,
    lease_until: i64,
    expires_at: i64,
    mode: ClaimMode,
    stored: Option<&'a Kept>,
}

impl Claiming<'_> {
    fn run(self, tx: &Transaction<'_>, now: u64) -> rusqlite::Result<ClaimOutcome> {
        let now_i = now as i64;
        let key = self.key;
        let (request, route, replay_of) = match self.stored {
            Some((request, route, replay_of)) => (Some(request), Some(route), replay_of.as_ref()),
            None => (None, None, None),
        };
        let method = request.map(|r| r.method.as_str());
        let query = request.and_then(|r| r.query.as_deref());
        let headers = request.map(StoredRequest::encode_headers);
        let body = request.map(|r| r.body.as_ref());
        // The database thread runs one operation at a time: what the record
        // says here still holds when the write below runs.
        if let Some(record) = live_record(tx, key, now)? {
            match decide(record, now, self.mode) {
                Decision::Answer(answer) => return Ok(answer),
                Decision::MakeDue => {
                    run(tx, MAKE_DUE, params![key, now_i])?;
                    return Ok(ClaimOutcome::Queued);
                }
                Decision::Adopt(answer) => {
                    let adopt = params![
                        key,
                        now_i,
                        self.source,
                        self.expires_at,
                        route,
                        method,
                        query,
                        headers,
                        body
                    ];
                    run(tx, ADOPT, adopt)?;
                    return Ok(answer);
                }
                Decision::Queue => {
                    let queue = params![
                        key,
                        now_i,
                        self.source,
                        self.body_sha256,
                        self.expires_at,
                        route,
                        replay_of,
                        method,
                        query,
                        headers,
                        body
                    ];
                    run(tx, QUEUE, queue)?;
                    return Ok(ClaimOutcome::Queued);
                }
                Decision::TakeOver => {}
            }
        }
        if let Some(guard_key) = self.guard_key {
            // Only a claimable key looks at the body's first key.
            let first: Option<String> =
                query_one(tx, GUARD_FIRST_KEY, params![guard_key, now_i], |row| {
                    row.get(0)
                })?;
            if let Some(first) = first.filter(|first| first != key) {
                if let Some(answer) =
                    live_record(tx, &first, now)?.and_then(|r| settled(r, now, ClaimMode::Deliver))
                {
                    return Ok(answer);
                }
            }
        }
        let claimed = params![
            key,
            self.token,
            self.body_sha256,
            now_i,
            self.lease_until,
            self.expires_at,
            self.mode.code(),
            route,
            replay_of,
            method,
            query,
            headers,
            body,
            self.source,
        ];
        let attempts: Option<u32> = query_one(tx, CLAIM, claimed, |row| row.get(0))?;
        if let Some(attempt) = attempts {
            if let Some(guard_key) = self.guard_key {
                run(tx, SET_GUARD, params![guard_key, key, self.expires_at])?;
            }
            if self.mode == ClaimMode::Accept {
                return Ok(ClaimOutcome::Queued);
            }
            return Ok(ClaimOutcome::New(Lease {
                token: self.token,
                attempt,
            }));
        }
        let record = live_record(tx, key, now)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
        Ok(
            settled(record, now, self.mode).unwrap_or(ClaimOutcome::InFlight {
                retry_after: Duration::from_secs(1),
            }),
        )
    }
}

fn live_record(tx: &Transaction<'_>, key: &str, now: u64) -> rusqlite::Result<Option<Record>> {
    query_one(tx, SELECT_LIVE, params![key, now as i64], |row| {
        record_from(row, 0)
    })
}

/// Read a record from `row`, its columns ([`record_columns`]) from `at` on.
fn record_from(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Record> {
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
        next_attempt_ms: get_ms(21)?,
        accepted: row.get::<_, Option<String>>(at + 22)?.is_some() || get_ms(21)?.is_some(),
        response,
        last_error,
        route: row.get(at + 11)?,
        replay_of: row.get(at + 12)?,
        request,
    })
}

fn corrupt(message: String) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(message.into())
}
