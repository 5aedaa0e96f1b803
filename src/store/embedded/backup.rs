//! `hookgate backup`: a consistent copy of the embedded file while its
//! gateway runs.
//!
//! A plain `cp` of a running file misses what is still in its write-ahead
//! log (`-wal`), or catches a page half written. SQLite's online backup API
//! copies the database as one read transaction sees it — every commit up to
//! its start, the log included — and a reader never blocks the gateway's
//! writes (WAL mode). The copy is written beside its destination and renamed
//! into place only once it opens and passes `PRAGMA integrity_check`, so a
//! failed backup leaves nothing that looks like one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::store::StoreError;

/// What a backup copied.
#[derive(Debug)]
pub struct Copied {
    pub records: u64,
    pub bytes: u64,
}

/// Copy the embedded store at `from` to `to` (which must not exist yet),
/// then verify the copy by opening it.
pub fn backup(from: &Path, to: &Path) -> Result<Copied, StoreError> {
    if to.exists() {
        return Err(failed(to, "already exists; choose a new path"));
    }
    if !from.exists() {
        return Err(failed(from, "no such database file"));
    }
    let source = Connection::open_with_flags(from, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| failed(from, e))?;
    source
        .busy_timeout(Duration::from_secs(10))
        .map_err(|e| failed(from, e))?;
    let partial = partial(to);
    let _ = std::fs::remove_file(&partial);
    let copied = (|| {
        let mut copy = Connection::open(&partial).map_err(|e| failed(&partial, e))?;
        {
            let backup = Backup::new(&source, &mut copy).map_err(|e| failed(&partial, e))?;
            // Every page in one step: one read transaction, one snapshot
            // (steps of a few pages would start over at each of the
            // gateway's commits).
            loop {
                match backup.step(-1).map_err(|e| failed(from, e))? {
                    StepResult::Done => break,
                    StepResult::More => {}
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        verify(&copy).map_err(|e| failed(&partial, e))
    })();
    let records = match copied {
        Ok(records) => records,
        Err(error) => {
            let _ = std::fs::remove_file(&partial);
            return Err(error);
        }
    };
    std::fs::rename(&partial, to).map_err(|e| failed(to, e))?;
    let bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    Ok(Copied { records, bytes })
}

/// The copy opens, is whole, and holds hookgate's table: its record count.
fn verify(copy: &Connection) -> rusqlite::Result<u64> {
    let check: String = copy.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
    if check != "ok" {
        return Err(rusqlite::Error::ToSqlConversionFailure(
            format!("integrity_check: {check}").into(),
        ));
    }
    copy.query_row("SELECT count(*) FROM webhook_events", [], |row| {
        row.get::<_, i64>(0).map(|n| n as u64)
    })
}

fn partial(to: &Path) -> PathBuf {
    let mut name = to.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

fn failed(path: &Path, why: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("backup: {}: {why}", path.display()))
}
