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

mod backup;
mod file;
mod row;
mod run;
mod sql;
mod transfer;

pub use self::backup::{backup, Copied};
use self::file::{lock_file, prepare};
pub use self::file::{upgrade, Upgraded};

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rusqlite::{params, Connection};
use tokio::sync::oneshot;

use self::run::{execute, run, Op, Reply};
use self::sql::RELEASE;
use super::Synchronous;
use super::{
    Backend, ClaimOutcome, ClaimRequest, Clock, Deleted, Due, Failure, Fleet, Health,
    Invalidations, ListQuery, Listing, Queue, Record, RecordState, Records, StoreError, StoreKey,
};
use crate::replay::RecordedResponse;

/// Most requests committed in one transaction.
const MAX_BATCH: usize = 512;

/// Expired rows deleted per sweep step.
const SWEEP_BATCH: usize = 1_000;
/// How often the thread looks for expired rows when idle or busy.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

type Job = (Op, oneshot::Sender<Result<Reply, StoreError>>);

pub struct EmbeddedStore {
    jobs: mpsc::SyncSender<Job>,
    path: PathBuf,
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
        let connection = prepare(path, synchronous)?;
        let (jobs, queue) = mpsc::sync_channel::<Job>(Self::MAX_QUEUED);
        thread::Builder::new()
            .name("hookgate-sqlite".into())
            .spawn(move || {
                let _lock = lock;
                serve(connection, queue, &clock);
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the database thread: {e}")))?;
        Ok(Self {
            jobs,
            path: path.to_owned(),
        })
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
}

impl Records for EmbeddedStore {
    async fn claim(
        &self,
        request: ClaimRequest<'_>,
        token: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        match self
            .call(Op::Claim {
                key: request.key.as_str().to_owned(),
                source: request
                    .mode
                    .accepts()
                    .then(|| request.key.source().to_owned()),
                token: token.to_owned(),
                guard_key: request.guard_key.map(|guard| guard.as_str().to_owned()),
                body_sha256: request.body_sha256.to_owned(),
                processing_ttl: request.processing_ttl,
                retention: request.retention,
                mode: request.mode,
                stored: request.stored.map(|stored| {
                    (
                        stored.request.clone(),
                        stored.route.to_owned(),
                        stored.replay_of.map(str::to_owned),
                    )
                }),
            })
            .await?
        {
            Reply::Claim(outcome) => Ok(outcome),
            _ => Err(unexpected()),
        }
    }

    async fn renew(
        &self,
        key: &StoreKey,
        token: &str,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let key = key.as_str();
        let op = Op::Renew {
            key: key.to_owned(),
            token: token.to_owned(),
            processing_ttl,
        };
        self.applied(op).await
    }

    async fn complete(
        &self,
        key: &StoreKey,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let key = key.as_str();
        let op = Op::Complete {
            key: key.to_owned(),
            token: token.to_owned(),
            response: response.clone(),
            retention,
        };
        self.applied(op).await
    }

    async fn fail(
        &self,
        key: &StoreKey,
        token: &str,
        failure: &Failure<'_>,
    ) -> Result<Option<RecordState>, StoreError> {
        let op = Op::Fail {
            key: key.as_str().to_owned(),
            token: token.to_owned(),
            class: failure.class,
            status: failure.status,
            attempt: failure.attempt.clone(),
            kept: (failure.request.clone(), failure.route.to_owned(), None),
            retention: failure.retention,
            next: failure.next,
        };
        match self.call(op).await? {
            Reply::Failed(state) => Ok(state),
            _ => Err(unexpected()),
        }
    }

    async fn release(&self, key: &StoreKey, token: &str) -> Result<bool, StoreError> {
        let key = key.as_str();
        let op = Op::Release {
            key: key.to_owned(),
            token: token.to_owned(),
        };
        self.applied(op).await
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let key = key.as_str();
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

    async fn delete(&self, key: &StoreKey, force: bool) -> Result<Deleted, StoreError> {
        let key = key.as_str();
        let op = Op::Delete {
            key: key.to_owned(),
            force,
        };
        match self.call(op).await? {
            Reply::Deleted(deleted) => Ok(deleted),
            _ => Err(unexpected()),
        }
    }
}

impl Queue for EmbeddedStore {
    async fn lease_due(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
    ) -> Result<Vec<Due>, StoreError> {
        let op = Op::LeaseDue {
            source: source.to_owned(),
            tokens: tokens.to_vec(),
            processing_ttl,
        };
        match self.call(op).await? {
            Reply::Leased(due) => Ok(due),
            _ => Err(unexpected()),
        }
    }
}

impl Listing for EmbeddedStore {
    async fn list(&self, query: &ListQuery<'_>) -> Result<Vec<(String, Record)>, StoreError> {
        let op = Op::List {
            source: query.source.to_owned(),
            state: query.state,
            limit: query.limit,
            before: query.before.map(|(ms, id)| (ms, id.map(str::to_owned))),
        };
        match self.call(op).await? {
            Reply::Listed(page) => Ok(page),
            _ => Err(unexpected()),
        }
    }

    async fn oldest(&self, source: &str, state: RecordState) -> Result<Option<u64>, StoreError> {
        let op = Op::Oldest {
            source: source.to_owned(),
            state,
        };
        match self.call(op).await? {
            Reply::Oldest(at) => Ok(at),
            _ => Err(unexpected()),
        }
    }

    async fn count(&self, source: &str, state: RecordState) -> Result<u64, StoreError> {
        let op = Op::Count {
            source: source.to_owned(),
            state,
        };
        match self.call(op).await? {
            Reply::Count(count) => Ok(count),
            _ => Err(unexpected()),
        }
    }
}

impl Fleet for EmbeddedStore {
    /// The file is locked by one gateway: nobody else writes it.
    fn invalidations(&self) -> Invalidations {
        Invalidations::Local
    }

    async fn set_control(
        &self,
        space: &str,
        route: &str,
        value: Option<&str>,
    ) -> Result<(), StoreError> {
        let op = Op::SetControl {
            space: space.to_owned(),
            route: route.to_owned(),
            value: value.map(str::to_owned),
        };
        match self.call(op).await? {
            Reply::Pong => Ok(()),
            _ => Err(unexpected()),
        }
    }

    async fn controls(&self, space: &str) -> Result<Vec<(String, String)>, StoreError> {
        let op = Op::Controls {
            space: space.to_owned(),
        };
        match self.call(op).await? {
            Reply::Controls(controls) => Ok(controls),
            _ => Err(unexpected()),
        }
    }
}

impl Health for EmbeddedStore {
    /// A write, committed like any other: the file is writable.
    async fn ping(&self, _space: &str) -> Result<(), StoreError> {
        match self.call(Op::Ping).await? {
            Reply::Pong => Ok(()),
            _ => Err(unexpected()),
        }
    }

    fn is_local(&self) -> bool {
        true
    }

    fn size_bytes(&self) -> Option<u64> {
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
        Some(size(&self.path) + size(Path::new(&wal)))
    }
}

fn unexpected() -> StoreError {
    StoreError::Corrupt("the database thread answered another request".into())
}

/// The database thread: group-commit batches of requests, sweep between them.
fn serve(mut connection: Connection, queue: mpsc::Receiver<Job>, clock: &Clock) {
    let mut last_sweep = tokio::time::Instant::now();
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
            last_sweep = tokio::time::Instant::now();
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
    // Immediate: the write lock is taken (waiting `busy_timeout`) before
    // the first statement. A claim reads its record before it writes, and
    // a deferred transaction's read could not be upgraded to a write while
    // another connection writes: the batch would fail at once instead of
    // waiting.
    let behavior = rusqlite::TransactionBehavior::Immediate;
    let transaction = match connection.transaction_with_behavior(behavior) {
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
pub(super) fn sweep_step(connection: &Connection, now: u64) -> rusqlite::Result<usize> {
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
    if deleted > 0 {
        // Freed pages back to the filesystem, a bounded number a step (a
        // no-op for a file without incremental vacuum: `hookgate migrate`).
        // Each step of the pragma frees a page: run it to its end.
        let mut vacuum =
            connection.prepare_cached(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))?;
        let mut steps = vacuum.query([])?;
        while steps.next()?.is_some() {}
    }
    Ok(deleted)
}

/// Pages a sweep step gives back at most (4 MiB of 4 KiB pages).
const VACUUM_PAGES: usize = 1024;

#[cfg(test)]
mod tests {
    use super::sql::SCHEMA;
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
                     VALUES (?1, 'failed', '', 1, 0, ?2)",
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

    /// Upgrading (docs/operations.md): a file written by the first release —
    /// no dead-letter, request or async columns, `released` for a failed
    /// claim — is brought up to date at open, and its records read as
    /// before.
    #[tokio::test]
    async fn a_file_from_the_first_release_opens_and_keeps_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let later = Clock::system().now_ms() as i64 + 3_600_000;
        {
            let connection = Connection::open(&path).unwrap();
            connection.execute_batch(SCHEMA).unwrap();
            connection
                .execute(
                    "INSERT INTO webhook_events (key, state, body_sha256, attempts, first_seen, \
                     completed_at, response_status, response_headers, response_body, expires_at) \
                     VALUES ('hookgate:s:done', 'completed', 'aa', 1, 1, 2, 201, \
                     CAST('content-type: text/plain' AS BLOB), CAST('ok' AS BLOB), ?1)",
                    params![later],
                )
                .unwrap();
            connection
                .execute(
                    "INSERT INTO webhook_events (key, state, body_sha256, attempts, first_seen, expires_at) \
                     VALUES ('hookgate:s:let-go', 'released', 'bb', 2, 1, ?1)",
                    params![later],
                )
                .unwrap();
        }
        let store = EmbeddedStore::open(&path, Synchronous::Normal, Clock::system()).unwrap();
        let done = store
            .get(&StoreKey::event("hookgate:s", "done"))
            .await
            .unwrap()
            .expect("the completed record survives the upgrade");
        assert_eq!(done.state, RecordState::Completed);
        let response = done.response.expect("with its recorded response");
        assert_eq!(response.status.as_u16(), 201);
        assert_eq!(&response.body[..], b"ok");
        let let_go = store
            .get(&StoreKey::event("hookgate:s", "let-go"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            let_go.state,
            RecordState::Failed,
            "`released` reads as failed"
        );
        assert_eq!(let_go.attempts, 2);
    }
}
