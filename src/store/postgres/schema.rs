//! The PostgreSQL schema's versions: what is recorded in
//! `hookgate_migrations`, applying what is not, and the same as a script
//! for `psql`.
//!
//! A gateway migrates in a task of its own, started by the store's first
//! use: no store operation's deadline (`store.timeout`) cuts it off, and a
//! caller that gives up waiting does not roll it back. Until it is done
//! every operation waits for it or fails with why (503 to senders), and the
//! readiness probe says "migrating". Several gateways at once serialize on
//! an advisory lock and find either nothing or everything to do. When every
//! version is recorded nothing but a read is run, so a role without DDL
//! rights (PostgreSQL 15's default for non-owners) serves a migrated
//! database; `hookgate migrate` applies them with a role that has them.

use std::sync::Weak;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::watch;

use super::{db, pool_error, sql, MIGRATIONS};
use crate::store::StoreError;

/// Where this process's migration is.
#[derive(Debug, Clone)]
pub(super) enum Schema {
    Migrating,
    Ready,
    /// The last try failed with this; it is tried again.
    Failed(String),
}

/// Start migrating in a task of its own, retried with backoff while the
/// store lives (`alive`); when done, `then` runs (the pruning task).
pub(super) fn spawn(
    pool: Pool,
    alive: Weak<()>,
    then: impl FnOnce() + Send + 'static,
) -> watch::Receiver<Schema> {
    let (schema, watched) = watch::channel(Schema::Migrating);
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(200);
        loop {
            let tried = async {
                let mut client = pool.get().await.map_err(pool_error)?;
                migrate(&mut client).await
            };
            match tried.await {
                Ok(_) => {
                    schema.send_replace(Schema::Ready);
                    then();
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "PostgreSQL schema migration failed; retrying");
                    schema.send_replace(Schema::Failed(error.to_string()));
                }
            }
            tokio::time::sleep(backoff).await;
            if alive.upgrade().is_none() {
                return;
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
            schema.send_replace(Schema::Migrating);
        }
    });
    watched
}

/// The versions recorded, or `None` when there is no `hookgate_migrations`
/// (a database hookgate never ran on) or it cannot be read.
pub(super) async fn recorded(client: &impl GenericClient) -> Option<Vec<i32>> {
    let rows = client.query(sql::APPLIED, &[]).await.ok()?;
    Some(rows.iter().map(|row| row.get(0)).collect())
}

/// The migrations not recorded in `recorded` (all of them for `None`).
pub fn pending(recorded: Option<&[i32]>) -> Vec<(i32, &'static str)> {
    MIGRATIONS
        .iter()
        .filter(|(version, _)| !recorded.is_some_and(|done| done.contains(version)))
        .copied()
        .collect()
}

/// Apply every migration not recorded yet, in one transaction, under an
/// advisory lock; answers how many were applied. Nothing but a read when
/// none is pending.
pub(super) async fn migrate(client: &mut deadpool_postgres::Object) -> Result<usize, StoreError> {
    if pending(recorded(&*client).await.as_deref()).is_empty() {
        return Ok(0);
    }
    let transaction = client.transaction().await.map_err(db)?;
    // A migration of a big table takes what it takes (the pools'
    // connections have store.timeout as their statement_timeout).
    transaction
        .batch_execute(sql::NO_STATEMENT_TIMEOUT)
        .await
        .map_err(db)?;
    transaction
        .batch_execute(sql::MIGRATION_LOCK)
        .await
        .map_err(db)?;
    transaction
        .batch_execute(sql::MIGRATIONS_TABLE)
        .await
        .map_err(db)?;
    let done = recorded(&transaction).await;
    let todo = pending(done.as_deref());
    for (version, migration) in &todo {
        transaction.batch_execute(migration).await.map_err(db)?;
        transaction
            .execute(sql::RECORD_APPLIED, &[version])
            .await
            .map_err(db)?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    transaction.commit().await.map_err(db)?;
    Ok(todo.len())
}

/// `migrations` as one script `psql -v ON_ERROR_STOP=1 -f` runs as it is:
/// one transaction, under the gateways' advisory lock, each version
/// recorded in `hookgate_migrations` as a gateway records it, so a gateway
/// started afterwards finds nothing to do.
pub fn script(migrations: &[(i32, &str)]) -> String {
    let mut out = String::from(
        "-- hookgate's PostgreSQL schema migrations, for\n\
         --   psql -v ON_ERROR_STOP=1 -f THIS_FILE\n\
         -- run by a role that may create tables and indexes in the schema.\n",
    );
    if migrations.is_empty() {
        out += "-- Nothing to do: every version is recorded.\n";
        return out;
    }
    out += &format!("{};\n", sql::BEGIN);
    out += &format!("{};\n", sql::NO_STATEMENT_TIMEOUT);
    out += &format!("{};\n", sql::MIGRATION_LOCK);
    out += &format!("{};\n", sql::MIGRATIONS_TABLE);
    for (version, migration) in migrations {
        out += &format!("\n-- version {version}\n{}\n", migration.trim_end());
        out += &format!("INSERT INTO hookgate_migrations (version) VALUES ({version});\n");
    }
    out += "\nCOMMIT;\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_is_what_is_not_recorded() {
        assert_eq!(pending(None).len(), MIGRATIONS.len());
        let all: Vec<i32> = MIGRATIONS.iter().map(|(v, _)| *v).collect();
        assert!(pending(Some(&all)).is_empty());
        let first = pending(Some(&all[..1]));
        assert_eq!(first.first().map(|(v, _)| *v), Some(2));
    }

    #[test]
    fn the_script_records_each_version_it_applies() {
        let script = script(&pending(Some(&[1, 2, 3])));
        assert!(
            script.starts_with("-- hookgate's PostgreSQL"),
            "no summary before the SQL"
        );
        assert!(!script.contains("INSERT INTO hookgate_migrations (version) VALUES (3)"));
        for version in 4..=MIGRATIONS.len() {
            assert!(script.contains(&format!(
                "INSERT INTO hookgate_migrations (version) VALUES ({version});"
            )));
        }
        assert!(script.trim_end().ends_with("COMMIT;"));
    }
}
