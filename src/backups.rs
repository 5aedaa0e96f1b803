//! `[store.backup]`: the embedded store backed up by the gateway itself,
//! on a schedule (docs/operations/stores.md, "Backups").
//!
//! Every `every`, an online backup of the file (`store::backup`: one read
//! transaction, never blocking the gateway's writes, verified before it
//! is renamed into place) is written to `dir` as
//! `hookgate-<UTC time>.db`; of those files the newest `keep` are kept and
//! the older deleted (nothing else in `dir` is touched). The first backup
//! is due one `every` after the newest already in `dir` (at once when
//! there is none), so a restart neither skips nor doubles one.
//!
//! `hookgate_backup_last_success_timestamp_seconds` says when the newest
//! good one was written — from the files in `dir` at start-up, so a
//! restart does not look like a missed backup — and
//! `HookgateBackupOverdue` fires when it is older than two periods.
//! A backup runs on a blocking thread; the schedule stops with the
//! gateway's shutdown (a copy under way finishes or leaves only its
//! `.partial`, which the next one removes).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::{rfc3339, wall};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::store::BackupSettings;

/// What a backup file's name starts and ends with.
const PREFIX: &str = "hookgate-";
const SUFFIX: &str = ".db";

/// At start-up, before the gateway serves (so no scrape sees a restart
/// as a missed backup): the schedule's gauges, and when the newest backup
/// already in `settings.dir` was written.
pub fn known(settings: &BackupSettings, metrics: &Metrics) -> Option<SystemTime> {
    metrics.backup_every.set(settings.every.as_secs_f64());
    let newest = newest(&settings.dir);
    if let Some(at) = newest {
        metrics.backup_last_success.set(unix_seconds(at));
    }
    newest
}

/// Back the embedded file at `store` up on `settings`' schedule until the
/// gateway stops; the first is due one period after `newest` ([`known`]).
pub async fn run(
    store: PathBuf,
    settings: BackupSettings,
    newest: Option<SystemTime>,
    metrics: Metrics,
    shutdown: Shutdown,
) {
    let first = newest
        .and_then(|at| (at + settings.every).duration_since(wall()).ok())
        .unwrap_or_default();
    let stopped = shutdown.stopped();
    tokio::pin!(stopped);
    let mut next = tokio::time::Instant::now() + first;
    loop {
        tokio::select! {
            () = &mut stopped => return,
            () = tokio::time::sleep_until(next) => {}
        }
        next = tokio::time::Instant::now() + settings.every;
        let (store, settings) = (store.clone(), settings.clone());
        let done = tokio::task::spawn_blocking(move || take(&store, &settings)).await;
        match done {
            Ok(Ok((path, copied))) => {
                metrics.backups.with_label_values(&["ok"]).inc();
                metrics.backup_last_success.set(unix_seconds(wall()));
                tracing::info!(path = %path.display(), records = copied.records, bytes = copied.bytes, "backed up the store");
            }
            Ok(Err(error)) => {
                metrics.backups.with_label_values(&["failed"]).inc();
                tracing::error!(%error, "scheduled backup failed");
            }
            Err(error) => {
                metrics.backups.with_label_values(&["failed"]).inc();
                tracing::error!(%error, "scheduled backup failed");
            }
        }
    }
}

/// One backup into `settings.dir`, then the oldest beyond `keep` deleted.
fn take(
    store: &Path,
    settings: &BackupSettings,
) -> Result<(PathBuf, crate::store::Copied), String> {
    std::fs::create_dir_all(&settings.dir)
        .map_err(|error| format!("{}: {error}", settings.dir.display()))?;
    let path = settings.dir.join(file_name(wall()));
    let copied = crate::store::backup(store, &path).map_err(|error| error.to_string())?;
    for old in backups(&settings.dir).iter().rev().skip(settings.keep) {
        if let Err(error) = std::fs::remove_file(old) {
            tracing::warn!(path = %old.display(), %error, "could not delete an old backup");
        }
    }
    Ok((path, copied))
}

/// `hookgate-20261205T004512.250Z.db`: sorted by name is sorted by time.
fn file_name(at: SystemTime) -> String {
    let ms = at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let compact: String = rfc3339(ms)
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    format!("{PREFIX}{compact}{SUFFIX}")
}

/// The backups in `dir`, oldest first (by name, which is by time).
fn backups(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = (entries.flatten())
        .map(|entry| entry.path())
        .filter(|path| {
            (path.file_name().and_then(|name| name.to_str()))
                .is_some_and(|name| name.starts_with(PREFIX) && name.ends_with(SUFFIX))
        })
        .collect();
    found.sort();
    found
}

/// When the newest backup in `dir` was written.
fn newest(dir: &Path) -> Option<SystemTime> {
    let newest = backups(dir).pop()?;
    std::fs::metadata(newest)
        .and_then(|meta| meta.modified())
        .ok()
}

fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_time_and_only_ours_are_pruned() {
        let earlier = file_name(UNIX_EPOCH + Duration::from_millis(1_796_430_000_250));
        let later = file_name(UNIX_EPOCH + Duration::from_millis(1_796_430_001_000));
        assert_eq!(earlier, "hookgate-20261205T002000.250Z.db");
        assert!(earlier < later);

        let dir = tempfile::tempdir().unwrap();
        for name in [&later, &earlier, "hookgate.db", "notes-hookgate-1.db"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let found: Vec<_> = (backups(dir.path()).into_iter())
            .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(found, [earlier, later]);
    }
}
