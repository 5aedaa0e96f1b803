//! How the database thread runs each request inside the batch's
//! transaction: the request and answer types, one arm per operation. The
//! claim's read-decide-write (the record's life, `decide`) is `claim.rs`;
//! reading a record back from a row is `row.rs`.

use std::time::Duration;

use rusqlite::{params, Connection, Transaction};

// Every statement of `sql.rs`: this file runs them all.
use super::super::{
    history, Blocked, ClaimMode, ClaimOutcome, Deleted, Due, Failure, FailureClass, Lease, Leased,
    Next, PastAttempt, Queued, Record, RecordState,
};
use super::claim::Claiming;
use super::order::{entity_of, lease_ordered, wake, Placing};
use super::row::{live_record, query_one, record_from, run, Kept};
use super::sql::*;
use crate::order::Rules;
use crate::replay::RecordedResponse;

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
        /// An ordered acceptance's place.
        order: Option<Placing>,
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
        attempt: PastAttempt,
        kept: Kept,
        retention: Duration,
        next: Next,
    },
    LeaseDue {
        source: String,
        tokens: Vec<String>,
        processing_ttl: Duration,
    },
    LeaseOrdered {
        source: String,
        tokens: Vec<String>,
        processing_ttl: Duration,
        rules: Rules,
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
    Queued {
        source: String,
    },
    Blocked {
        source: String,
        limit: usize,
    },
    Get {
        key: String,
    },
    Export {
        key: String,
    },
    Import(Box<super::transfer::Import>),
    Reseal(Box<super::transfer::Reseal>),
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
    Exported(Option<(Record, u64)>),
    Listed(Vec<(String, Record)>),
    Leased(Vec<Due>),
    LeasedOrdered(Leased),
    Count(u64),
    Queued(Queued),
    Oldest(Option<u64>),
    Blocked(Vec<Blocked>),
    Deleted(Deleted),
    Pong,
    Controls(Vec<(String, String)>),
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
    connection.execute_batch(UPGRADE)
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
            order,
        } => {
            let claim = Claiming {
                order: order.as_ref(),
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
        } => complete(tx, &key, &token, &response, ms(retention), now),
        Op::Fail {
            key,
            token,
            class,
            status,
            attempt,
            kept: (request, route, _),
            retention,
            next,
        } => {
            let failure = Failure {
                class,
                status,
                request: &request,
                attempt: &attempt,
                route: &route,
                retention,
                next,
            };
            fail(tx, &key, &token, failure, now)
        }
        Op::LeaseDue {
            source,
            tokens,
            processing_ttl,
        } => lease_due(tx, &source, tokens, ms(processing_ttl), now).map(Reply::Leased),
        Op::LeaseOrdered {
            source,
            tokens,
            processing_ttl,
            rules,
        } => lease_ordered(tx, &source, tokens, ms(processing_ttl), rules, now)
            .map(Reply::LeasedOrdered),
        Op::Release { key, token } => run(tx, RELEASE, params![key, token, now_i]).map(applied),
        Op::List {
            source,
            state,
            limit,
            before,
        } => list(tx, &source, state, limit, before, now),
        Op::Count { source, state } => {
            let count: i64 = by_source(tx, state, now_i, &source, [COUNT_QUEUED, COUNT])?;
            Ok(Reply::Count(count as u64))
        }
        Op::Queued { source } => queued(tx, &source, now),
        Op::Oldest { source, state } => {
            let at: Option<i64> = by_source(tx, state, now_i, &source, [OLDEST_QUEUED, OLDEST])?;
            Ok(Reply::Oldest(at.map(|at| at as u64)))
        }
        Op::Blocked { source, limit } => {
            super::order::blocked(tx, &source, limit, now).map(Reply::Blocked)
        }
        Op::Get { key } => live_record(tx, &key, now).map(Reply::Record),
        Op::Export { key } => super::transfer::export(tx, &key, now).map(Reply::Exported),
        Op::Import(import) => import.run(tx, now).map(Reply::Applied),
        Op::Reseal(reseal) => reseal.run(tx, now).map(Reply::Applied),
        Op::Delete { key, force } => delete(tx, &key, force, now),
        Op::Ping => run(tx, PROBE, params![now_i]).map(|_| Reply::Pong),
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
        Op::Controls { space } => controls(tx, &space),
    }
}

/// `Op::Complete`: the record completed with `response`, and the next
/// event of its entity (an ordered route's) woken.
fn complete(
    tx: &Transaction<'_>,
    key: &str,
    token: &str,
    response: &RecordedResponse,
    expires_at: i64,
    now: u64,
) -> rusqlite::Result<Reply> {
    let completing = params![
        key,
        token,
        now as i64,
        response.status.as_u16(),
        response.encode_headers(),
        response.body.as_ref(),
        expires_at,
        response.body_kept.as_str()
    ];
    // The completed row's source and entity: no second read.
    let completed: Option<(Option<String>, Option<String>)> =
        query_one(tx, COMPLETE, completing, |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    let Some((source, entity)) = completed else {
        return Ok(Reply::Applied(false));
    };
    wake(tx, source.zip(entity), now)?;
    Ok(Reply::Applied(true))
}

/// `Op::Fail`: the failed attempt written on a record its token holds,
/// and a dead event's entity woken.
fn fail(
    tx: &Transaction<'_>,
    key: &str,
    token: &str,
    failure: Failure<'_>,
    now: u64,
) -> rusqlite::Result<Reply> {
    let now_i = now as i64;
    let ms = |d: Duration| now_i + d.as_millis() as i64;
    let held: Option<(bool, Option<String>)> =
        query_one(tx, ACCEPTED, params![key, token, now_i], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    let Some((accepted, past)) = held else {
        return Ok(Reply::Failed(None));
    };
    let state = failure.state(accepted);
    let request = failure.request;
    run(
        tx,
        FAIL,
        params![
            key,
            token,
            state.as_str(),
            now_i,
            failure.holds(accepted),
            failure.class.as_str(),
            failure.status,
            failure.route,
            request.method.as_str(),
            request.query,
            request.encode_headers(),
            request.body.as_ref(),
            ms(failure.retention),
            failure.due_in(accepted).map(ms),
            history::append(past.as_deref(), &failure.attempt.line())
        ],
    )?;
    if state == RecordState::Dead {
        wake(tx, entity_of(tx, key)?, now)?;
    }
    Ok(Reply::Failed(Some(state)))
}

/// `Op::List`: a page of `source`'s records in `state`, newest first,
/// before the cursor `before`.
fn list(
    tx: &Transaction<'_>,
    source: &str,
    state: RecordState,
    limit: usize,
    before: Option<(u64, Option<String>)>,
    now: u64,
) -> rusqlite::Result<Reply> {
    let (from, to) = source_range(source);
    // Before (ms, key); everything at ms is before (ms + 1, "").
    let (before_ms, before_key) = match &before {
        Some((ms, Some(id))) => (*ms as i64, format!("{source}:{id}")),
        Some((ms, None)) => (*ms as i64 + 1, String::new()),
        None => (i64::MAX, String::new()),
    };
    let mut statement = tx.prepare_cached(LIST)?;
    let rows = statement.query_map(
        params![
            state.as_str(),
            now as i64,
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

/// `Op::Delete`: the record forgotten (`force`: even while held), and
/// its entity woken.
fn delete(tx: &Transaction<'_>, key: &str, force: bool, now: u64) -> rusqlite::Result<Reply> {
    let now_i = now as i64;
    let entity = entity_of(tx, key)?;
    if run(tx, DELETE, params![key, now_i, force])? == 1 {
        wake(tx, entity, now)?;
        Ok(Reply::Deleted(Deleted::Deleted))
    } else if query_one(tx, EXISTS, params![key, now_i], |row| row.get::<_, i64>(0))?.is_some() {
        Ok(Reply::Deleted(Deleted::InFlight))
    } else {
        Ok(Reply::Deleted(Deleted::NotFound))
    }
}

/// `Op::Queued`: how many events, and bytes, `source` holds queued.
fn queued(tx: &Transaction<'_>, source: &str, now: u64) -> rusqlite::Result<Reply> {
    let state = RecordState::Queued.as_str();
    let (events, bytes): (i64, i64) = (tx.prepare_cached(QUEUED)?)
        .query_row(params![state, now as i64, source], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    Ok(Reply::Queued(Queued {
        events: events as u64,
        bytes: bytes as u64,
    }))
}

/// `Op::Controls`: every route's value in one `space` of controls.
fn controls(tx: &Transaction<'_>, space: &str) -> rusqlite::Result<Reply> {
    let mut statement = tx.prepare_cached(CONTROLS)?;
    let rows = statement.query_map(params![space], |row| Ok((row.get(0)?, row.get(1)?)))?;
    rows.collect::<Result<_, _>>().map(Reply::Controls)
}

/// One value about `source`'s records in `state`: from the due index for
/// queued ones (`queued`, bound to the source), from the listing index
/// and the source's key range for the others (`other`).
fn by_source<T: rusqlite::types::FromSql>(
    tx: &Transaction<'_>,
    state: RecordState,
    now: i64,
    source: &str,
    [queued, other]: [&str; 2],
) -> rusqlite::Result<T> {
    let (from, to) = source_range(source);
    let state_text = state.as_str();
    match state {
        RecordState::Queued => tx
            .prepare_cached(queued)?
            .query_row(params![state_text, now, source], |row| row.get(0)),
        _ => tx
            .prepare_cached(other)?
            .query_row(params![state_text, now, from, to], |row| row.get(0)),
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
