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

use deadpool_postgres::Pool;
use tokio::sync::watch;
use tokio_postgres::error::SqlState;

use super::migrations::{self, MIGRATIONS};
use super::{db, pool_error};
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
                let client = pool.get().await.map_err(pool_error)?;
                migrate(client).await
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
pub(super) async fn recorded(client: &tokio_postgres::Client) -> Option<Vec<i32>> {
    let rows = client.query(migrations::APPLIED, &[]).await.ok()?;
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

/// How one part of a migration runs (see [`steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step<'a> {
    /// Statements in one transaction: DDL that holds its lock for an
    /// instant (columns with a constant default or none, new tables).
    Transaction(&'a str),
    /// One statement outside any transaction: `CREATE INDEX CONCURRENTLY
    /// IF NOT EXISTS`, which builds without blocking writes. An invalid
    /// index left by an interrupted build is dropped first, so it is built
    /// again rather than skipped.
    Concurrently(&'a str),
    /// An `UPDATE` of a bounded batch, repeated, each in a transaction of
    /// its own, until it changes no row: a backfill that never holds many
    /// rows' locks for long.
    Batches(&'a str),
}

/// The marker lines of a migration file: what follows runs outside a
/// transaction, or in batches, or in a transaction again.
const CONCURRENTLY: &str = "-- hookgate: concurrently";
const BATCHES: &str = "-- hookgate: batches";
const TRANSACTION: &str = "-- hookgate: transaction";

/// The parts of `migration`, in order. Statements before any marker line
/// run in one transaction; after `-- hookgate: concurrently` each
/// statement runs alone outside a transaction; after `-- hookgate:
/// batches` each is repeated until it changes nothing; `-- hookgate:
/// transaction` goes back. Every part is safe to run again, so a migration
/// cut off anywhere is finished by the next try.
pub(super) fn steps(migration: &str) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    let mut marker = TRANSACTION;
    let mut rest = migration;
    loop {
        let next = [CONCURRENTLY, BATCHES, TRANSACTION]
            .into_iter()
            .filter_map(|marker| rest.find(&format!("\n{marker}\n")).map(|at| (at, marker)))
            .min();
        let part = next.map_or(rest, |(at, _)| &rest[..at]);
        for statement in statements(part, marker == TRANSACTION) {
            steps.push(match marker {
                CONCURRENTLY => Step::Concurrently(statement),
                BATCHES => Step::Batches(statement),
                _ => Step::Transaction(statement),
            });
        }
        let Some((at, next)) = next else {
            return steps;
        };
        marker = next;
        rest = &rest[at + next.len() + 2..];
    }
}

/// The statements of `part` (each ending in `;` at the end of a line),
/// or the whole part as one for a transaction; parts with nothing but
/// comments give none.
fn statements(part: &str, whole: bool) -> Vec<&str> {
    let is_sql = |text: &str| {
        text.lines()
            .any(|line| !line.trim().is_empty() && !line.trim_start().starts_with("--"))
    };
    if whole {
        return [part.trim()].into_iter().filter(|p| is_sql(p)).collect();
    }
    part.split_inclusive(";\n")
        .map(str::trim)
        .filter(|statement| is_sql(statement))
        .collect()
}

/// The index an `IF NOT EXISTS` index build names.
fn index_name(statement: &str) -> Option<&str> {
    let after = statement.split("IF NOT EXISTS").nth(1)?;
    after.split_whitespace().next()
}

/// Apply every migration not recorded yet, each part as [`steps`] says,
/// on a connection of its own that holds the gateways' advisory lock;
/// answers how many were applied. Nothing but a read when none is pending.
pub(super) async fn migrate(client: deadpool_postgres::Object) -> Result<usize, StoreError> {
    if pending(recorded(&client).await.as_deref()).is_empty() {
        return Ok(0);
    }
    // Out of the pool: the session's lock and settings end with it.
    let mut client = deadpool_postgres::Object::take(client);
    // A migration of a big table takes what it takes (the pools'
    // connections have store.timeout as their statement_timeout).
    client
        .batch_execute(migrations::NO_STATEMENT_TIMEOUT)
        .await
        .map_err(db)?;
    // Polled, not waited on: a session blocked on the lock would hold a
    // snapshot, and a concurrent index build waits for every older one.
    while !client
        .query_one(migrations::TRY_MIGRATION_LOCK, &[])
        .await
        .map_err(db)?
        .get::<_, bool>(0)
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    client
        .batch_execute(migrations::MIGRATIONS_TABLE)
        .await
        .map_err(db)?;
    let todo = pending(recorded(&client).await.as_deref());
    for (version, migration) in &todo {
        for step in steps(migration) {
            run(&mut client, step).await?;
        }
        client
            .execute(migrations::RECORD_APPLIED, &[version])
            .await
            .map_err(db)?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    Ok(todo.len())
}

async fn run(client: &mut tokio_postgres::Client, step: Step<'_>) -> Result<(), StoreError> {
    match step {
        Step::Transaction(statements) => {
            // A lock not had within the timeout is let go of and asked for
            // again: queued, it would stall every gateway's query behind it
            // for as long as the read it waits on runs.
            let mut waits = 0;
            loop {
                let transaction = client.transaction().await.map_err(db)?;
                let tried = match transaction
                    .batch_execute(migrations::MIGRATION_LOCK_TIMEOUT)
                    .await
                {
                    Ok(()) => transaction.batch_execute(statements).await,
                    Err(error) => Err(error),
                };
                match tried {
                    Ok(()) => return transaction.commit().await.map_err(db),
                    Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                        transaction.rollback().await.map_err(db)?;
                        waits += 1;
                        if waits % 50 == 1 {
                            tracing::info!(waits, "a migration waits for the gateways' transactions to let the table go");
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(error) => return Err(db(error)),
                }
            }
        }
        Step::Concurrently(statement) => {
            if let Some(index) = index_name(statement) {
                let invalid = client
                    .query_opt(migrations::INVALID_INDEX, &[&index])
                    .await
                    .map_err(db)?;
                if invalid.is_some() {
                    tracing::warn!(index, "dropping an index an interrupted build left invalid");
                    let drop = format!("DROP INDEX CONCURRENTLY IF EXISTS {index}");
                    client.batch_execute(&drop).await.map_err(db)?;
                }
            }
            client.batch_execute(statement).await.map_err(db)
        }
        Step::Batches(statement) => {
            let (mut rows, mut batches) = (0, 0);
            loop {
                let changed = client.execute(statement, &[]).await.map_err(db)?;
                if changed == 0 {
                    break;
                }
                (rows, batches) = (rows + changed, batches + 1);
            }
            if rows > 0 {
                tracing::info!(rows, batches, "PostgreSQL schema backfilled");
            }
            Ok(())
        }
    }
}

/// The tables and the sequence the schema creates, which the gateways'
/// role writes (docs/operations/stores.md, "PostgreSQL"): a migration that adds
/// one adds it here, and the grants follow.
const WRITTEN: [&str; 3] = ["webhook_events", "replay_guards", "hookgate_route_controls"];
const SEQUENCES: [&str; 1] = ["hookgate_order_seq"];

/// What a role that only serves (`hookgate run`, no DDL) needs on the
/// schema, as SQL for `psql`: its rows, the versions recorded, and the
/// ordering sequence (`nextval` when an ordered event is accepted, `setval`
/// when `store copy` moves it past copied places). `role` is a plain
/// identifier, checked by the caller.
pub fn grants(role: &str) -> String {
    let mut out = format!(
        "-- what the gateways' role {role} needs: rows, no DDL (hookgate migrate --grants {role})
         GRANT USAGE ON SCHEMA public TO {role};
         GRANT SELECT ON hookgate_migrations TO {role};
"
    );
    for table in WRITTEN {
        out += &format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role};
"
        );
    }
    for sequence in SEQUENCES {
        out += &format!(
            "GRANT USAGE, SELECT, UPDATE ON SEQUENCE {sequence} TO {role};
"
        );
    }
    out
}

/// `migrations` as one script `psql -v ON_ERROR_STOP=1 -f` runs as it is,
/// with the steps a gateway takes: under the gateways' advisory lock,
/// transactional parts in `BEGIN … COMMIT`, index builds alone, backfills
/// as a loop that commits each batch, each version recorded in
/// `hookgate_migrations` as a gateway records it, so a gateway started
/// afterwards finds nothing to do. Every part is safe to run again.
pub fn script(migrations: &[(i32, &str)]) -> String {
    let mut out = String::from(
        "-- hookgate's PostgreSQL schema migrations, for\n\
         --   psql -v ON_ERROR_STOP=1 -f THIS_FILE\n\
         -- run by a role that may create tables and indexes in the schema,\n\
         -- outside a transaction (no --single-transaction: indexes are built\n\
         -- CONCURRENTLY, so writes go on while it runs).\n",
    );
    if migrations.is_empty() {
        out += "-- Nothing to do: every version is recorded.\n";
        return out;
    }
    out += &format!("{};\n", migrations::NO_STATEMENT_TIMEOUT);
    out += &format!("{};\n", migrations::MIGRATION_LOCK);
    out += &format!("{};\n", migrations::MIGRATIONS_TABLE);
    for (version, migration) in migrations {
        out += &format!("\n-- version {version}\n");
        for step in steps(migration) {
            out += &match step {
                Step::Transaction(statements) => format!("BEGIN;\n{statements}\nCOMMIT;\n"),
                Step::Concurrently(statement) => {
                    let drop = index_name(statement).map(|index| {
                        format!(
                            "SELECT 'DROP INDEX CONCURRENTLY {index}' FROM pg_index \
                             WHERE indexrelid = to_regclass('{index}') AND NOT indisvalid \\gexec\n"
                        )
                    });
                    format!("{}{statement}\n", drop.unwrap_or_default())
                }
                Step::Batches(statement) => format!(
                    "DO $batches$\nDECLARE changed bigint;\nBEGIN\n  LOOP\n    {};\n    \
                     GET DIAGNOSTICS changed = ROW_COUNT;\n    EXIT WHEN changed = 0;\n    \
                     COMMIT;\n  END LOOP;\nEND\n$batches$;\n",
                    statement.trim_end_matches(';').trim()
                ),
            };
        }
        out += &format!(
            "INSERT INTO hookgate_migrations (version) VALUES ({version}) ON CONFLICT DO NOTHING;\n"
        );
    }
    out += &format!("{};\n", migrations::MIGRATION_UNLOCK);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migration_for_a_live_table_runs_in_its_parts() {
        let (_, second) = MIGRATIONS[1];
        let parts = steps(second);
        assert_eq!(parts.len(), 3, "{parts:#?}");
        assert!(
            matches!(parts[0], Step::Transaction(sql) if sql.contains("ADD COLUMN IF NOT EXISTS updated_at"))
        );
        assert!(
            matches!(parts[1], Step::Batches(sql) if sql.starts_with("-- Rows from") && sql.contains("LIMIT 10000"))
        );
        assert!(
            matches!(parts[2], Step::Concurrently(sql) if index_name(sql) == Some("webhook_events_parked"))
        );
        // Comments alone make no part; a file without markers is one.
        let (_, first) = MIGRATIONS[0];
        assert!(matches!(steps(first)[..], [Step::Transaction(_)]));
        assert!(steps("-- nothing\n\n-- hookgate: batches\n-- still nothing\n").is_empty());
    }

    #[test]
    fn every_index_on_an_existing_table_is_built_concurrently() {
        for (version, migration) in &MIGRATIONS[1..] {
            for step in steps(migration) {
                if let Step::Transaction(sql) = step {
                    assert!(!sql.contains("CREATE INDEX"), "version {version}: {sql}");
                    assert!(!sql.contains("UPDATE "), "version {version}: {sql}");
                }
            }
        }
    }

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
        assert!(super::script(&pending(None))
            .contains("CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_parked"));
        for version in 4..=MIGRATIONS.len() {
            assert!(script.contains(&format!(
                "INSERT INTO hookgate_migrations (version) VALUES ({version}) ON CONFLICT DO NOTHING;"
            )));
        }
        assert!(script
            .trim_end()
            .ends_with("pg_advisory_unlock(hashtext('hookgate-migrations'));"));
        // No index is built inside a transaction block.
        let mut open = false;
        for line in script.lines() {
            open = match line {
                "BEGIN;" => true,
                "COMMIT;" => false,
                _ => open,
            };
            assert!(!(open && line.contains("CONCURRENTLY")), "{line}");
        }
    }
}
