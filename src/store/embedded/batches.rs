//! The embedded store's database thread: it owns the connection, drains
//! whatever requests have queued up and runs them as one transaction
//! (group commit), answering each only once that commit is durable; skips
//! work whose caller gave up and releases a claim applied after its caller
//! gave up; and between batches deletes expired rows a bounded number at a
//! time, giving the freed pages back.

use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{params, Connection};
use tokio::sync::oneshot;

use super::row::run;
use super::run::{execute, Op, Reply};
use super::sql::RELEASE;
use super::wal::Checkpoints;
use crate::store::{ClaimOutcome, Clock, StoreError};

/// Most requests committed in one transaction.
const MAX_BATCH: usize = 512;

/// Expired rows deleted per sweep step.
pub(super) const SWEEP_BATCH: usize = 1_000;
/// How often the thread looks for expired rows when idle or busy.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// A request and where its answer goes.
pub(super) type Job = (Op, oneshot::Sender<Result<Reply, StoreError>>);

/// The database thread: group-commit batches of requests, sweep between
/// them, and let the log start over when the checkpoint thread says it is
/// long (`wal.rs`).
pub(super) fn serve(
    mut connection: Connection,
    queue: mpsc::Receiver<Job>,
    clock: &Clock,
    checkpoints: Option<&Checkpoints>,
) {
    let mut last_sweep = tokio::time::Instant::now();
    let mut backlog = false;
    let mut turn = None;
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
            // A restart's turn (`wal.rs`) ends with this batch's commit.
            let _turn = turn.take();
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            run_batch(&mut connection, batch, clock.now_ms());
        }
        if turn.is_none() {
            turn = checkpoints.and_then(|c| c.restart_if_long(&connection));
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
