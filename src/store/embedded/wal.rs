//! The write-ahead log's checkpoints, off the database thread.
//!
//! Left to itself, SQLite writes the log back into the file every 1,000
//! pages, inside the commit that crosses the mark: on the database thread,
//! with an fsync of the log and one of the file — 3–6 ms each on the
//! benchmark box, every third of a second at 1,000 deliveries a second, and
//! every request of that batch waited with it (BENCHMARKS.md, "Current
//! results": the embedded store's added p99). Here the database thread's
//! connection runs with `wal_autocheckpoint = 0`, and a thread of its own
//! with a connection of its own checkpoints every [`EVERY`] ([`SOON`] after
//! a pass that found the log long): `PASSIVE`, so the writer never waits
//! for it, and it syncs what the writer wrote meanwhile.
//!
//! A pass beside a busy writer never catches up with it, and SQLite starts
//! the log from its beginning again only when a commit begins with every
//! frame back in the file: the log would grow without end. So once a pass
//! finds it past [`RESTART_PAGES`], the database thread takes the turn
//! between two batches: it writes back the few frames committed since the
//! pass (their syncs small), and holds the turn until its next batch has
//! committed, which starts the log over — no pass may begin in between and
//! hold the log's start.
//!
//! Durability is unchanged: a commit is in the log (and, with `synchronous
//! = "full"`, synced) before its requests are answered; a checkpoint only
//! moves committed pages into the file. The thread stops when the database
//! thread has, after one last pass, and holds the file's lock until then,
//! so no other process opens the file while it still writes.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use rusqlite::Connection;

use crate::store::StoreError;

/// How often the log is written back into the file.
const EVERY: Duration = Duration::from_millis(200);
/// How soon after a pass that found the log long.
const SOON: Duration = Duration::from_millis(20);
/// Pages (4 KiB) in the log past which the database thread starts it over
/// (SQLite's own mark).
const RESTART_PAGES: i64 = 1_000;

/// What the database thread shares with the checkpoint thread; its end
/// dropped tells the thread to stop.
pub(super) struct Checkpoints {
    log: Arc<Log>,
    _stop: mpsc::Sender<()>,
}

/// The turn to checkpoint, held for a pass or for a restart.
pub(super) type Turn<'a> = MutexGuard<'a, ()>;

#[derive(Default)]
struct Log {
    turn: Mutex<()>,
    /// A pass found the log long since the database thread last started it
    /// over.
    long: AtomicBool,
}

impl Checkpoints {
    /// On the database thread, between batches: after a pass that found
    /// the log long, write back what was committed since and keep the turn,
    /// to be let go once the next batch has committed (and so started the
    /// log over). `None` when there is nothing to do, or a pass is running.
    pub(super) fn restart_if_long(&self, database: &Connection) -> Option<Turn<'_>> {
        if !self.log.long.load(Ordering::Relaxed) {
            return None;
        }
        let turn = self.log.turn.try_lock().ok()?;
        match database.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            Ok(()) => self.log.long.store(false, Ordering::Relaxed),
            Err(error) => {
                tracing::debug!(%error, "finishing a checkpoint on the database thread failed")
            }
        }
        Some(turn)
    }
}

/// Checkpoint the log of `database`'s file from a thread of its own until
/// the returned [`Checkpoints`] is dropped (by the database thread, when
/// it ends).
pub(super) fn checkpoint_apart(
    path: &Path,
    database: &Connection,
    lock: Option<File>,
) -> Result<Checkpoints, StoreError> {
    let failed = |e: rusqlite::Error| StoreError::Backend(format!("{}: {e}", path.display()));
    database
        .pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(failed)?;
    let connection = Connection::open(path).map_err(failed)?;
    connection
        .busy_timeout(Duration::from_secs(5))
        .map_err(failed)?;
    let (stop, stopped) = mpsc::channel();
    let log = Arc::new(Log::default());
    let passes = Arc::clone(&log);
    thread::Builder::new()
        .name("hookgate-sqlite-wal".into())
        .spawn(move || {
            let _lock = lock;
            checkpoints(&connection, &stopped, &passes);
        })
        .map_err(|e| StoreError::Backend(format!("cannot start the checkpoint thread: {e}")))?;
    Ok(Checkpoints { log, _stop: stop })
}

fn checkpoints(connection: &Connection, stopped: &mpsc::Receiver<()>, log: &Log) {
    let mut failing = false;
    loop {
        let wait = match log.long.load(Ordering::Relaxed) {
            true => SOON,
            false => EVERY,
        };
        let last = matches!(
            stopped.recv_timeout(wait),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
        let pass = {
            let _turn = log.turn.lock().unwrap_or_else(|poison| poison.into_inner());
            // (busy, pages in the log, pages written back): a busy answer
            // is another checkpoint's (`hookgate store reencrypt`).
            connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                row.get::<_, i64>(1)
            })
        };
        match pass {
            Ok(pages) => {
                if pages >= RESTART_PAGES {
                    log.long.store(true, Ordering::Relaxed);
                }
                if failing {
                    failing = false;
                    tracing::info!("the write-ahead log is written back into the file again");
                }
            }
            // Said once until it recovers: a full disk fails every try.
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "writing the write-ahead log back into the file failed; the log grows until it can");
            }
            Err(_) => {}
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that never pauses: the log starts over after the passes
    /// that found it long, instead of growing with everything written.
    #[test]
    fn a_busy_writers_log_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let database = Connection::open(&path).unwrap();
        database
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
                 CREATE TABLE t (x BLOB)",
            )
            .unwrap();
        let checkpoints = checkpoint_apart(&path, &database, None).unwrap();
        let insert = || {
            database
                .execute("INSERT INTO t VALUES (zeroblob(4000))", [])
                .unwrap();
        };
        // Ten rounds of 8 MB, each past the mark; between two, the
        // database thread's turn after a pass found the log long, let go
        // after the next commit, as between two batches.
        let log_bytes = || {
            std::fs::metadata(path.with_extension("db-wal"))
                .unwrap()
                .len()
        };
        let mut turn = None;
        let mut round_bytes = 0;
        for round in 0..10 {
            insert();
            drop(turn.take());
            for _ in 1..2_000 {
                insert();
            }
            if round == 0 {
                round_bytes = log_bytes();
            }
            // A pass comes within 200 ms; give it 10 s on a loaded box.
            for _ in 0..2_000 {
                thread::sleep(Duration::from_millis(5));
                turn = checkpoints.restart_if_long(&database);
                if turn.is_some() {
                    break;
                }
            }
            assert!(turn.is_some(), "round {round}: no turn in 10 s");
        }
        drop(turn);
        // Without the restarts it would hold all ten rounds.
        let kept = log_bytes();
        assert!(
            kept < 2 * round_bytes,
            "the log holds {kept} bytes, a round writes {round_bytes}"
        );
        let rows: i64 = database
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 20_000);
    }
}
