//! Embedded backend: one SQLite file (WAL), the default — exactly-once for a
//! single gateway with nothing else to install.
//!
//! The schema is one classic `webhook_events` table (plus `replay_guards`),
//! readable with the `sqlite3` shell while the gateway runs:
//!
//! ```sql
//! SELECT key, state, attempts, response_status FROM webhook_events;
//! ```
//!
//! SQLite is blocking, so a dedicated thread owns the connection. Requests
//! reach it over a bounded channel (a full one fails a request at once: a
//! stalled disk must not turn into unbounded memory); it drains whatever has
//! queued up and runs the whole batch in one transaction (group commit),
//! answering each request only after that commit — one fsync for many
//! claims. Work whose caller has already given up is skipped, and a claim
//! applied after its caller gave up is released again. Between batches it deletes
//! expired rows, a bounded number at a time, so a sweep never stalls requests
//! for long. Claims go through one `INSERT … ON CONFLICT DO UPDATE … WHERE
//! <claimable> RETURNING`, so insert-or-take-over is a single statement.
//!
//! Durability: with `synchronous = "normal"` (default) a committed claim or
//! recording survives a crash or SIGKILL of hookgate, and may be lost only on
//! power loss or an OS crash; `"full"` also survives those at one fsync per
//! batch. The file is locked (`{path}.lock`) for the life of the process: a
//! second gateway on the same file fails at start-up — this backend is for
//! one instance; fleets share Redis.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tokio::sync::oneshot;

use super::Synchronous;
use super::{
    new_token, settled, Backend, ClaimOutcome, ClaimRequest, Clock, Deleted, Lease, Record,
    RecordState, StoreError,
};
use crate::replay::{BodyKept, RecordedResponse};

/// Most requests committed in one transaction.
const MAX_BATCH: usize = 512;

/// Expired rows deleted per sweep step.
const SWEEP_BATCH: usize = 1_000;
/// How often the thread looks for expired rows when idle or busy.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

const SCHEMA: &str = "
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

const RELEASE: &str = "\
UPDATE webhook_events SET state = 'released', token = NULL, lease_until = NULL \
WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

/// Delete unless forced (?3) or a live claim holds the row.
const DELETE: &str = "\
DELETE FROM webhook_events WHERE key = ?1 AND expires_at > ?2 \
  AND (?3 OR state <> 'processing' OR lease_until <= ?2)";

/// One request to the database thread.
enum Op {
    Claim {
        key: String,
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

enum Reply {
    Claim(ClaimOutcome),
    Applied(bool),
    Record(Option<Record>),
    Deleted(Deleted),
    Pong,
}

type Job = (Op, oneshot::Sender<Result<Reply, StoreError>>);

pub struct EmbeddedStore {
    jobs: mpsc::SyncSender<Job>,
}

impl EmbeddedStore {
    /// Most requests waiting for the database thread. During a disk stall
    /// callers give up after `store.timeout` (503); beyond this many
    /// waiting, new requests fail at once instead of piling up in memory.
    pub const MAX_QUEUED: usize = 4096;

    /// Open (or create) the database at `path` and start its thread; leases
    /// and expiry are judged by `clock`.
    pub fn open(path: &Path, synchronous: Synchronous, clock: Clock) -> Result<Self, StoreError> {
        let lock = lock_file(path)?;
        let connection = Connection::open(path).map_err(|e| open_error(path, e))?;
        let sync = match synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        connection
            .execute_batch(&format!(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; PRAGMA busy_timeout = 5000; {SCHEMA}"
            ))
            .map_err(|e| open_error(path, e))?;
        add_missing_columns(&connection).map_err(|e| open_error(path, e))?;
        let (jobs, queue) = mpsc::sync_channel::<Job>(Self::MAX_QUEUED);
        thread::Builder::new()
            .name("hookgate-sqlite".into())
            .spawn(move || {
                let _lock = lock;
                serve(connection, queue, &clock);
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the database thread: {e}")))?;
        Ok(Self { jobs })
    }

    async fn call(&self, op: Op) -> Result<Reply, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .try_send((op, reply))
            .map_err(|error| match error {
                mpsc::TrySendError::Full(_) => StoreError::Backend(format!(
                    "{} requests are waiting for the database (is the disk stalled?)",
                    Self::MAX_QUEUED
                )),
                mpsc::TrySendError::Disconnected(_) => {
                    StoreError::Backend("the database thread has stopped".into())
                }
            })?;
        answer
            .await
            .map_err(|_| StoreError::Backend("the database thread has stopped".into()))?
    }

    async fn applied(&self, op: Op) -> Result<bool, StoreError> {
        match self.call(op).await? {
            Reply::Applied(applied) => Ok(applied),
            _ => Err(unexpected()),
        }
    }
}

impl Backend for EmbeddedStore {
    const NAME: &'static str = "embedded";

    async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        match self
            .call(Op::Claim {
                key: request.key.to_owned(),
                guard_key: request.guard_key.map(str::to_owned),
                body_sha256: request.body_sha256.to_owned(),
                processing_ttl: request.processing_ttl,
                retention: request.retention,
            })
            .await?
        {
            Reply::Claim(outcome) => Ok(outcome),
            _ => Err(unexpected()),
        }
    }

    async fn renew(
        &self,
        key: &str,
        token: &str,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let op = Op::Renew {
            key: key.to_owned(),
            token: token.to_owned(),
            processing_ttl,
        };
        self.applied(op).await
    }

    async fn complete(
        &self,
        key: &str,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let op = Op::Complete {
            key: key.to_owned(),
            token: token.to_owned(),
            response: response.clone(),
            retention,
        };
        self.applied(op).await
    }

    async fn release(&self, key: &str, token: &str) -> Result<bool, StoreError> {
        let op = Op::Release {
            key: key.to_owned(),
            token: token.to_owned(),
        };
        self.applied(op).await
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        match self
            .call(Op::Get {
                key: key.to_owned(),
            })
            .await?
        {
            Reply::Record(record) => Ok(record),
            _ => Err(unexpected()),
        }
    }

    async fn delete(&self, key: &str, force: bool) -> Result<Deleted, StoreError> {
        let op = Op::Delete {
            key: key.to_owned(),
            force,
        };
        match self.call(op).await? {
            Reply::Deleted(deleted) => Ok(deleted),
            _ => Err(unexpected()),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self.call(Op::Ping).await? {
            Reply::Pong => Ok(()),
            _ => Err(unexpected()),
        }
    }
}

fn unexpected() -> StoreError {
    StoreError::Corrupt("the database thread answered another request".into())
}

fn open_error(path: &Path, error: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("cannot open {}: {error}", path.display()))
}

/// Bring a file from an earlier version up to the current columns.
fn add_missing_columns(connection: &Connection) -> rusqlite::Result<()> {
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

/// Hold `{path}.lock` exclusively for the life of the process.
fn lock_file(path: &Path) -> Result<File, StoreError> {
    let mut lock_path = PathBuf::from(path).into_os_string();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StoreError::Backend(format!("cannot open {}: {e}", lock_path.display())))?;
    file.try_lock().map_err(|_| {
        StoreError::Backend(format!(
            "{} is in use by another hookgate process; the embedded store serves one instance \
             (use the redis backend to run several gateways)",
            path.display()
        ))
    })?;
    Ok(file)
}

/// The database thread: group-commit batches of requests, sweep between them.
fn serve(mut connection: Connection, queue: mpsc::Receiver<Job>, clock: &Clock) {
    let mut last_sweep = std::time::Instant::now();
    let mut backlog = false;
    loop {
        let wait = if backlog {
            Duration::from_millis(10)
        } else {
            SWEEP_EVERY.saturating_sub(last_sweep.elapsed())
        };
        let first = match queue.recv_timeout(wait) {
            Ok(job) => Some(job),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        if let Some(first) = first {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            run_batch(&mut connection, batch, clock.now_ms());
        }
        // A full step means more is waiting: take the next one after the
        // next batch of requests instead of waiting a whole interval.
        if backlog || last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = std::time::Instant::now();
            backlog = match sweep_step(&connection, clock.now_ms()) {
                Ok(deleted) => deleted >= SWEEP_BATCH,
                Err(error) => {
                    tracing::warn!(%error, "expiring old records failed");
                    false
                }
            };
        }
    }
}

/// Run `batch` in one transaction and answer each request once it is
/// durable.
///
/// A caller that gave up (its store `timeout` ran out, so it answered 503)
/// has dropped its end of the reply: work it queued and is no longer
/// waiting for is skipped, and a claim that was applied all the same — its
/// caller gave up while it ran or committed — is released again, so no key is
/// left `processing` under a token nobody holds.
fn run_batch(connection: &mut Connection, batch: Vec<Job>, now: u64) {
    let transaction = match connection.transaction() {
        Ok(transaction) => transaction,
        Err(error) => {
            for (_, reply) in batch {
                let _ = reply.send(Err(StoreError::Backend(error.to_string())));
            }
            return;
        }
    };
    let mut answers = Vec::with_capacity(batch.len());
    for (op, reply) in batch {
        if reply.is_closed() {
            continue;
        }
        let claimed_key = match &op {
            Op::Claim { key, .. } => Some(key.clone()),
            _ => None,
        };
        let answer = execute(&transaction, op, now).map_err(|e| StoreError::Backend(e.to_string()));
        answers.push((reply, answer, claimed_key));
    }
    // Answer only once the batch is durable.
    if let Err(error) = transaction.commit() {
        for (reply, _, _) in answers {
            let _ = reply.send(Err(StoreError::Backend(error.to_string())));
        }
        return;
    }
    let mut abandoned = Vec::new();
    for (reply, answer, claimed_key) in answers {
        if let Err(Ok(Reply::Claim(ClaimOutcome::New(lease)))) = reply.send(answer) {
            abandoned.extend(claimed_key.map(|key| (key, lease.token)));
        }
    }
    if !abandoned.is_empty() {
        release_abandoned(connection, &abandoned, now);
    }
}

/// Release claims whose callers were gone by the time they were applied.
fn release_abandoned(connection: &mut Connection, claims: &[(String, String)], now: u64) {
    let released = connection.transaction().and_then(|tx| {
        for (key, token) in claims {
            run(&tx, RELEASE, params![key, token, now as i64])?;
        }
        tx.commit()
    });
    match released {
        Ok(()) => tracing::info!(
            claims = claims.len(),
            "released claims whose callers had given up"
        ),
        Err(error) => tracing::warn!(
            %error,
            "could not release abandoned claims; they expire with their lease"
        ),
    }
}

/// Delete up to `SWEEP_BATCH` expired rows of each table: one short write,
/// interleaved with request batches, so a large backlog drains without
/// stalling requests.
fn sweep_step(connection: &Connection, now: u64) -> rusqlite::Result<usize> {
    let now = now as i64;
    let mut deleted = 0;
    for table in ["webhook_events", "replay_guards"] {
        deleted += connection.execute(
            &format!(
                "DELETE FROM {table} WHERE rowid IN \
                 (SELECT rowid FROM {table} WHERE expires_at <= ?1 LIMIT {SWEEP_BATCH})"
            ),
            params![now],
        )?;
    }
    Ok(deleted)
}

/// Run a statement through SQLite's statement cache (each is parsed once).
fn run(tx: &Transaction<'_>, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
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

fn execute(tx: &Transaction<'_>, op: Op, now: u64) -> rusqlite::Result<Reply> {
    let now_i = now as i64;
    let ms = |d: Duration| now_i + d.as_millis() as i64;
    let applied = |n: usize| Reply::Applied(n == 1);
    match op {
        Op::Claim {
            key,
            guard_key,
            body_sha256,
            processing_ttl,
            retention,
        } => {
            let until = (ms(processing_ttl), ms(retention));
            claim(tx, &key, guard_key.as_deref(), &body_sha256, until, now).map(Reply::Claim)
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
    key: &str,
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
    let token = new_token();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_deletes_expired_rows_in_bounded_steps() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let now = Clock::system().now_ms() as i64;
        let insert = |key: String, expires_at: i64| {
            connection
                .execute(
                    "INSERT INTO webhook_events (key, state, body_sha256, attempts, first_seen, expires_at) \
                     VALUES (?1, 'released', '', 1, 0, ?2)",
                    params![key, expires_at],
                )
                .unwrap();
        };
        for i in 0..(SWEEP_BATCH + 500) {
            insert(format!("old-{i}"), now - 1);
        }
        insert("live".into(), now + 60_000);
        connection
            .execute(
                "INSERT INTO replay_guards VALUES ('g', 'live', ?1)",
                params![now - 1],
            )
            .unwrap();

        assert_eq!(
            sweep_step(&connection, now as u64).unwrap(),
            SWEEP_BATCH + 1,
            "one bounded step per table"
        );
        assert_eq!(sweep_step(&connection, now as u64).unwrap(), 500);
        assert_eq!(sweep_step(&connection, now as u64).unwrap(), 0);
        let left: Vec<String> = connection
            .prepare("SELECT key FROM webhook_events")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(left, ["live"]);
    }
}
