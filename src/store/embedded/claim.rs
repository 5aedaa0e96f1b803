//! One claim as the database thread runs it inside the batch's
//! transaction: read the key's row, decide with the record's life
//! (`decide`, shared by every backend), write what it decided.

use std::time::Duration;

use rusqlite::{params, Transaction};

// The claim's statements of `sql.rs`.
use super::super::{decide, settled, ClaimMode, ClaimOutcome, Decision, Lease, StoredRequest};
use super::order::{place, Placing};
use super::row::{live_record, query_one, run, Kept};
use super::sql::*;

/// One claim, as the database thread runs it; times are Unix ms.
pub(super) struct Claiming<'a> {
    pub(super) key: &'a str,
    pub(super) source: Option<&'a str>,
    pub(super) token: String,
    pub(super) guard_key: Option<&'a str>,
    pub(super) body_sha256: &'a str,
    pub(super) lease_until: i64,
    pub(super) expires_at: i64,
    pub(super) mode: ClaimMode,
    pub(super) stored: Option<&'a Kept>,
    pub(super) order: Option<&'a Placing>,
}

impl Claiming<'_> {
    pub(super) fn run(self, tx: &Transaction<'_>, now: u64) -> rusqlite::Result<ClaimOutcome> {
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
                    if let Some(placing) = self.order {
                        place(tx, key, placing, now_i)?;
                    }
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
            if let Some(placing) = self.order.filter(|_| self.mode.accepts()) {
                place(tx, key, placing, now_i)?;
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
