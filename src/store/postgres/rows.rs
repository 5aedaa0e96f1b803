//! A claim's statements in order — insert, or read, decide (the record's
//! life, `decide`) and write under the row's lock — and reading a record
//! back from a row.

use std::time::Duration;

use bytes::Bytes;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::super::{
    decide, history, ClaimMode, ClaimOutcome, ClaimRequest, Decision, FailureClass, LastError,
    Lease, Ordered, Record, RecordState, StoreError, StoredRequest,
};
use super::group::NewClaim;
use super::{db, sql};
use crate::replay::{BodyKept, RecordedResponse};

/// Where a claim starts.
pub(super) enum Start {
    /// Insert the key, in case it is new.
    Insert,
    /// Read it: a grouped insert (`group.rs`) found it there.
    Read,
}

/// What a claim that inserted its key (`attempt` its attempts) answers.
pub(super) fn inserted(request: &ClaimRequest<'_>, token: &str, attempt: i32) -> ClaimOutcome {
    match request.mode {
        ClaimMode::Accept => ClaimOutcome::Queued,
        _ => ClaimOutcome::New(Lease {
            token: token.to_owned(),
            attempt: attempt as u32,
        }),
    }
}

/// Claim the key: insert it when new (one statement); otherwise its record
/// answers unless it may be claimed, and then it is taken over. A replay
/// thus reads without taking a row lock, so duplicates of one event do not
/// queue behind each other.
pub(super) async fn claim(
    client: &impl deadpool_postgres::GenericClient,
    request: &ClaimRequest<'_>,
    token: &str,
    start: Start,
) -> Result<ClaimOutcome, StoreError> {
    let (source, id) = (request.key.source(), request.key.id());
    // `CLAIM_NEW`'s parameters, as a grouped claim has them.
    let claim = NewClaim::of(request, token);
    let body = claim.body.as_deref();
    let params: [&(dyn ToSql + Sync); 16] = [
        &claim.source,
        &claim.id,
        &claim.token,
        &claim.body_sha256,
        &claim.lease_ms,
        &claim.retention_ms,
        &claim.route,
        &claim.replay_of,
        &claim.method,
        &claim.query,
        &claim.headers,
        &body,
        &claim.mode,
        &claim.entity,
        &claim.value,
        &claim.hold_ms,
    ];
    let new = |row: Row| inserted(request, token, row.get(0));
    let insert = client.prepare_cached(sql::CLAIM_NEW).await.map_err(db)?;
    if let Start::Insert = start {
        if let Some(row) = client.query_opt(&insert, &params).await.map_err(db)? {
            return Ok(new(row));
        }
    }
    // Read, decide, write: each write re-checks, under the row's lock, what
    // the read saw. A write that finds the row changed (a concurrent claim
    // or the holder's end) decides again on the row as it is now.
    for _ in 0..3 {
        let Some((record, now)) = live_record(client, source, id).await? else {
            // The row has expired: it goes, and the key is new again.
            let expired = client
                .prepare_cached(sql::DELETE_EXPIRED)
                .await
                .map_err(db)?;
            client
                .execute(&expired, &[&source, &id])
                .await
                .map_err(db)?;
            if let Some(row) = client.query_opt(&insert, &params).await.map_err(db)? {
                return Ok(new(row));
            }
            continue;
        };
        // The request an acceptance keeps: route, replay_of, method,
        // query, headers, body.
        let kept = &params[6..12];
        // An ordered acceptance's place: entity, value, hold.
        let placed = &params[13..16];
        let (statement, answer, args): (_, _, Vec<&(dyn ToSql + Sync)>) =
            match decide(record, now, request.mode) {
                Decision::Answer(answer) => return Ok(answer),
                Decision::TakeOver => (sql::TAKE_OVER, None, params[..13].to_vec()),
                Decision::Queue => {
                    let args = [&source as _, &id as _, params[3], params[5]];
                    (
                        sql::QUEUE,
                        Some(ClaimOutcome::Queued),
                        [&args[..], kept, placed].concat(),
                    )
                }
                Decision::MakeDue => {
                    let args = vec![&source as _, &id as _];
                    (sql::MAKE_DUE, Some(ClaimOutcome::Queued), args)
                }
                Decision::Adopt(answer) => {
                    let args = [&source as _, &id as _, params[5]];
                    (sql::ADOPT, Some(answer), [&args[..], kept].concat())
                }
            };
        let write = client.prepare_cached(statement).await.map_err(db)?;
        match answer {
            None => {
                if let Some(row) = client.query_opt(&write, &args).await.map_err(db)? {
                    return Ok(new(row));
                }
            }
            Some(answer) => {
                if client.execute(&write, &args).await.map_err(db)? == 1 {
                    return Ok(answer);
                }
            }
        }
    }
    Ok(ClaimOutcome::InFlight {
        retry_after: Duration::from_secs(1),
    })
}

/// The live record of `key` in `source`, and the database's now.
pub(super) async fn live_record(
    client: &impl deadpool_postgres::GenericClient,
    source: &str,
    key: &str,
) -> Result<Option<(Record, u64)>, StoreError> {
    let statement = client.prepare_cached(sql::SELECT_LIVE).await.map_err(db)?;
    let row = client
        .query_opt(&statement, &[&source, &key])
        .await
        .map_err(db)?;
    row.map(|row| record(&row)).transpose()
}

/// A row of `SELECT_LIVE` (or `LIST`) as a record, and the database's now.
pub(super) fn record(row: &Row) -> Result<(Record, u64), StoreError> {
    let status: String = row.get(0);
    let state = RecordState::parse(&status)
        .ok_or_else(|| StoreError::Corrupt(format!("status {status:?}")))?;
    let body: Option<Vec<u8>> = row.get(9);
    let response = match (state, row.get::<_, Option<i16>>(7), body) {
        (RecordState::Completed, Some(status), Some(body)) => {
            let headers: Option<Vec<u8>> = row.get(8);
            let kept = match row.get::<_, Option<String>>(10).as_deref() {
                None => BodyKept::Whole,
                Some(text) => BodyKept::parse(text)
                    .ok_or_else(|| StoreError::Corrupt(format!("response_body_kept {text:?}")))?,
            };
            Some(
                RecordedResponse::decode(
                    status as u16,
                    &headers.unwrap_or_default(),
                    Bytes::from(body),
                    kept,
                )
                .map_err(StoreError::Corrupt)?,
            )
        }
        _ => None,
    };
    let ms = |index: usize| row.get::<_, Option<i64>>(index).map(|v| v as u64);
    let last_error = match row.get::<_, Option<String>>(13) {
        None => None,
        Some(class) => Some(LastError {
            class: FailureClass::parse(&class)
                .ok_or_else(|| StoreError::Corrupt(format!("last_error {class:?}")))?,
            status: row.get::<_, Option<i16>>(14).map(|s| s as u16),
            at_ms: ms(15).unwrap_or(0),
        }),
    };
    let request = match (
        row.get::<_, Option<String>>(18),
        row.get::<_, Option<Vec<u8>>>(21),
    ) {
        (Some(method), Some(body)) => Some(
            StoredRequest::decode(
                &method,
                row.get(19),
                &row.get::<_, Option<Vec<u8>>>(20).unwrap_or_default(),
                Bytes::from(body),
            )
            .map_err(StoreError::Corrupt)?,
        ),
        _ => None,
    };
    let record = Record {
        state,
        token: row.get(1),
        body_sha256: row.get(2),
        attempts: row.get::<_, i32>(3) as u32,
        first_seen_ms: ms(4).unwrap_or(0),
        updated_ms: ms(12).unwrap_or(0),
        lease_expires_at_ms: ms(5),
        completed_at_ms: ms(6),
        next_attempt_ms: ms(23),
        accepted: row.get::<_, bool>(24),
        history: row
            .get::<_, Option<String>>(22)
            .map(|lines| history::decode(&lines))
            .unwrap_or_default(),
        response,
        last_error,
        route: row.get(16),
        replay_of: row.get(17),
        request,
        order: row.get::<_, Option<String>>(25).map(|entity| Ordered {
            entity,
            value: row.get(26),
            seq: row.get::<_, Option<i64>>(27).unwrap_or_default() as u64,
        }),
    };
    Ok((record, ms(11).unwrap_or(0)))
}
