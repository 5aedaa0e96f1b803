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
//! one instance; fleets share Redis. `hookgate store reencrypt` alone works
//! beside a running gateway ([`EmbeddedStore::beside`]).
//!
//! The files: `batches.rs` the database thread, `wal.rs` the log's
//! checkpoints on a thread of their own, `run.rs` each operation's
//! statements in a batch's transaction, `sql.rs` the SQL, `row.rs` a row
//! read back, `file.rs` opening and upgrading the file, `backup.rs` and
//! `transfer.rs` `hookgate backup` and `hookgate store copy`.

mod backup;
mod batches;
mod claim;
mod file;
mod order;
mod row;
mod run;
mod sql;
mod transfer;
mod wal;

pub use self::backup::{backup, Copied};
pub use self::file::{checkpoint, upgrade, Upgraded};
use self::file::{lock_file, prepare};

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tokio::sync::oneshot;

use self::batches::{serve, Job};
#[cfg(test)]
use self::batches::{sweep_step, SWEEP_BATCH};
use self::order::Placing;
use self::run::{Op, Reply};
use self::transfer::{Import, Reseal};
use self::wal::{checkpoint_apart, Checkpoints};
use super::Synchronous;
use super::{
    Backend, Blocked, ClaimOutcome, ClaimRequest, Clock, Content, Deleted, Due, Failure, Fleet,
    Health, Invalidations, Leased, ListQuery, Listing, Queue, Queued, Record, RecordState, Records,
    StoreError, StoreKey, Transfer,
};
use crate::order::Rules;
use crate::replay::RecordedResponse;

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
        // The checkpoint thread ends last and holds the lock till then.
        let checkpoints = checkpoint_apart(path, &connection, Some(lock))?;
        Self::start(path, connection, clock, Some(checkpoints))
    }

    /// Open the file of a gateway that may be running, without its lock:
    /// for `hookgate store reencrypt`, whose every write is one short
    /// transaction that changes a row only while it is as read, so
    /// SQLite's own locking (the gateway waits out `busy_timeout` at most)
    /// keeps the two apart. Nothing else may use a store opened so.
    pub fn beside(path: &Path, synchronous: Synchronous, clock: Clock) -> Result<Self, StoreError> {
        if !path.exists() {
            return Err(StoreError::Backend(format!(
                "{}: no such file",
                path.display()
            )));
        }
        let connection = prepare(path, synchronous)?;
        // What a rewrite replaces is zeroed, not left in the file's free
        // space ([`checkpoint`] empties the log after).
        (connection.pragma_update(None, "secure_delete", true))
            .map_err(|e| StoreError::Backend(format!("{}: {e}", path.display())))?;
        Self::start(path, connection, clock, None)
    }

    /// Start the database thread; `checkpoints` (the checkpoint thread,
    /// `wal.rs`) ends with it.
    fn start(
        path: &Path,
        connection: rusqlite::Connection,
        clock: Clock,
        checkpoints: Option<Checkpoints>,
    ) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::sync_channel::<Job>(Self::MAX_QUEUED);
        thread::Builder::new()
            .name("hookgate-sqlite".into())
            .spawn(move || serve(connection, queue, &clock, checkpoints.as_ref()))
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
                order: request.order.map(|spot| Placing {
                    entity: spot.entity.to_owned(),
                    value: spot.value,
                    hold_ms: spot.hold.as_millis() as i64,
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

    const ORDERED: bool = true;

    async fn lease_ordered(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        let op = Op::LeaseOrdered {
            source: source.to_owned(),
            tokens: tokens.to_vec(),
            processing_ttl,
            rules,
        };
        match self.call(op).await? {
            Reply::LeasedOrdered(leased) => Ok(leased),
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

    /// The bytes are what each row keeps — its key, stored request and
    /// attempt history, as stored (sealed, with `[store.encryption]`) —
    /// and a measured 1,000 bytes a row for the rest (`sql::QUEUED`).
    async fn queued(&self, source: &str) -> Result<Queued, StoreError> {
        let op = Op::Queued {
            source: source.to_owned(),
        };
        match self.call(op).await? {
            Reply::Queued(queued) => Ok(queued),
            _ => Err(unexpected()),
        }
    }

    async fn blocked(&self, source: &str, limit: usize) -> Result<Vec<Blocked>, StoreError> {
        let op = Op::Blocked {
            source: source.to_owned(),
            limit,
        };
        match self.call(op).await? {
            Reply::Blocked(blocked) => Ok(blocked),
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

impl Transfer for EmbeddedStore {
    async fn export(&self, key: &StoreKey) -> Result<Option<(Record, u64)>, StoreError> {
        let key = key.as_str().to_owned();
        match self.call(Op::Export { key }).await? {
            Reply::Exported(exported) => Ok(exported),
            _ => Err(unexpected()),
        }
    }

    async fn import(
        &self,
        key: &StoreKey,
        record: &Record,
        expires_at_ms: u64,
        guard: Option<&StoreKey>,
    ) -> Result<bool, StoreError> {
        let import = Import {
            key: key.as_str().to_owned(),
            source: key.source().to_owned(),
            record: record.clone(),
            expires_at_ms,
            guard: guard.map(|guard| guard.as_str().to_owned()),
        };
        match self.call(Op::Import(Box::new(import))).await? {
            Reply::Applied(written) => Ok(written),
            _ => Err(unexpected()),
        }
    }

    async fn reseal(&self, key: &StoreKey, was: &Record, now: &Record) -> Result<bool, StoreError> {
        let reseal = Reseal {
            key: key.as_str().to_owned(),
            was: Content::of(was),
            now: Content::of(now),
        };
        self.applied(Op::Reseal(Box::new(reseal))).await
    }
}

fn unexpected() -> StoreError {
    StoreError::Corrupt("the database thread answered another request".into())
}

#[cfg(test)]
mod tests {
    use rusqlite::{params, Connection};

    use super::sql::SCHEMA;
    use super::*;

    #[test]
    fn the_sweep_deletes_expired_rows_in_bounded_steps() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let now = crate::clock::unix_ms() as i64;
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

    /// Upgrading (docs/operations/README.md): a file written by the first release —
    /// no dead-letter, request or async columns, `released` for a failed
    /// claim — is brought up to date at open, and its records read as
    /// before.
    #[tokio::test]
    async fn a_file_from_the_first_release_opens_and_keeps_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let later = crate::clock::unix_ms() as i64 + 3_600_000;
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
        let store = EmbeddedStore::open(&path, Synchronous::Normal, Clock::for_test()).unwrap();
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
