//! The embedded store's file: opening it for this binary (refusing one a
//! newer release wrote, WAL mode, the schema and its added columns, the
//! format recorded, incremental vacuum for a new file), the lock that keeps
//! it to one process, and `hookgate migrate`'s upgrade of an older file.

use std::fs::File;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::run::add_missing_columns;
use super::sql::SCHEMA;
use crate::store::{StoreError, Synchronous};

/// The file format this binary writes (`PRAGMA user_version`; files from
/// before it have 0). A file of a higher one was written by a newer
/// hookgate, and is refused rather than half understood.
pub const FILE_VERSION: i64 = 1;

/// Open the file at `path` for this binary: refused when a newer release
/// wrote it, WAL mode, the schema with every column this release reads,
/// its format recorded. A new file gets incremental vacuum, so the sweep
/// gives freed pages back to the filesystem.
pub(super) fn prepare(path: &Path, synchronous: Synchronous) -> Result<Connection, StoreError> {
    let connection = Connection::open(path).map_err(|e| open_error(path, e))?;
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if version > FILE_VERSION {
        return Err(StoreError::Backend(format!(
            "{}: written by a newer hookgate (file format {version}; this binary reads up to \
             {FILE_VERSION}): run that version, or restore a backup taken before the upgrade",
            path.display()
        )));
    }
    let sync = match synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    connection
        .execute_batch(&format!(
            "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; \
             PRAGMA synchronous = {sync}; PRAGMA busy_timeout = 5000; {SCHEMA}"
        ))
        .map_err(|e| open_error(path, e))?;
    add_missing_columns(&connection).map_err(|e| open_error(path, e))?;
    connection
        .execute_batch(&format!("PRAGMA user_version = {FILE_VERSION}"))
        .map_err(|e| open_error(path, e))?;
    Ok(connection)
}

/// After `hookgate store reencrypt` beside a running gateway: the log's
/// frames written back into the file and the log emptied, so the row
/// versions the rewrites replaced (zeroed in the file, the rewriting
/// connection runs with `secure_delete`) keep no copy in `-wal`. Whether it
/// could: a gateway's read in progress keeps the log, whose frames are
/// then overwritten as the gateway reuses it.
pub fn checkpoint(path: &Path) -> Result<bool, StoreError> {
    let connection = Connection::open(path).map_err(|e| open_error(path, e))?;
    connection
        .busy_timeout(std::time::Duration::from_secs(10))
        .map_err(|e| open_error(path, e))?;
    let busy: i64 = connection
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    Ok(busy == 0)
}

/// What `hookgate migrate` did to an embedded file.
#[derive(Debug)]
pub struct Upgraded {
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Incremental vacuum was turned on (a file from before it, rewritten
    /// once by `VACUUM`).
    pub vacuumed: bool,
}

/// `hookgate migrate` on the embedded file, its gateway stopped (the lock
/// says so): the columns and format of [`EmbeddedStore::open`], and for a
/// file created before incremental vacuum, a `VACUUM` that turns it on and
/// gives the free pages of past backlogs back.
pub fn upgrade(path: &Path, synchronous: Synchronous) -> Result<Upgraded, StoreError> {
    let _lock = lock_file(path)?;
    let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
    let bytes_before = size(path);
    let connection = prepare(path, synchronous)?;
    let mode: i64 = connection
        .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    let vacuumed = mode != 2;
    if vacuumed {
        connection
            .execute_batch(
                "PRAGMA auto_vacuum = INCREMENTAL; VACUUM; PRAGMA wal_checkpoint(TRUNCATE);",
            )
            .map_err(|e| open_error(path, e))?;
    }
    drop(connection);
    Ok(Upgraded {
        bytes_before,
        bytes_after: size(path),
        vacuumed,
    })
}

pub(super) fn open_error(path: &Path, error: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("cannot open {}: {error}", path.display()))
}

/// Hold `{path}.lock` exclusively for the life of the process.
pub(super) fn lock_file(path: &Path) -> Result<File, StoreError> {
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

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::super::batches::sweep_step;
    use super::super::EmbeddedStore;
    use super::*;
    use crate::store::Clock;

    fn pages(connection: &Connection) -> i64 {
        connection
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap()
    }

    fn fill(connection: &Connection, rows: usize, expires_at: i64) {
        let body = vec![b'x'; 2048];
        for i in 0..rows {
            connection
                .execute(
                    "INSERT INTO webhook_events (key, state, body_sha256, attempts, first_seen, \
                     response_body, expires_at) VALUES (?1, 'completed', '', 1, 0, ?2, ?3)",
                    params![format!("k{i}"), body, expires_at],
                )
                .unwrap();
        }
    }

    /// The sweep gives what it frees back to the filesystem (a new file has
    /// incremental vacuum): a drained backlog does not keep its size.
    #[test]
    fn the_sweep_gives_freed_pages_back() {
        let dir = tempfile::tempdir().unwrap();
        let connection = prepare(&dir.path().join("v.db"), Synchronous::Normal).unwrap();
        let mode: i64 = connection
            .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, 2, "incremental");
        fill(&connection, 3000, 1);
        let full = pages(&connection);
        while sweep_step(&connection, 10).unwrap() > 0 {}
        let swept = pages(&connection);
        assert!(swept * 4 < full, "{full} pages, {swept} after the sweep");
    }

    /// `hookgate migrate` turns incremental vacuum on for a file from before
    /// it, and the file shrinks to what it holds.
    #[test]
    fn an_upgrade_turns_incremental_vacuum_on_and_shrinks_an_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let connection = Connection::open(&path).unwrap();
            connection.execute_batch(SCHEMA).unwrap();
            fill(&connection, 3000, 1);
            connection
                .execute("DELETE FROM webhook_events", [])
                .unwrap();
        }
        let done = upgrade(&path, Synchronous::Normal).unwrap();
        assert!(done.vacuumed);
        assert!(
            done.bytes_after * 4 < done.bytes_before,
            "{} bytes, {} after",
            done.bytes_before,
            done.bytes_after
        );
        let again = upgrade(&path, Synchronous::Normal).unwrap();
        assert!(!again.vacuumed, "once");
    }

    /// A rollback to an older binary: the file says which format wrote it,
    /// and a binary that reads only older ones refuses it, saying why.
    #[test]
    fn a_file_from_a_newer_hookgate_is_refused_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        drop(EmbeddedStore::open(&path, Synchronous::Normal, Clock::for_test()).unwrap());
        let connection = Connection::open(&path).unwrap();
        let version: i64 = connection
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, FILE_VERSION, "a file says which format wrote it");
        connection
            .execute_batch(&format!("PRAGMA user_version = {}", FILE_VERSION + 1))
            .unwrap();
        drop(connection);
        let refused = loop {
            // The dropped store's thread lets go of the lock as it ends.
            match EmbeddedStore::open(&path, Synchronous::Normal, Clock::for_test()) {
                Err(StoreError::Backend(why)) if why.contains("in use") => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Err(error) => break error.to_string(),
                Ok(_) => panic!("a newer file was opened"),
            }
        };
        assert!(refused.contains("written by a newer hookgate"), "{refused}");
        assert!(refused.contains("restore a backup"), "{refused}");
    }
}
