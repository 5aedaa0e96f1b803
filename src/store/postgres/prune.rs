//! Retention on PostgreSQL: expired rows deleted in bounded batches every
//! `PRUNE_EVERY`, on a listing connection (never a sender's), so a backlog
//! never becomes one giant `DELETE`.

use std::sync::Weak;
use std::time::Duration;

use deadpool_postgres::Pool;

use super::{db, pool_error, sql};
use crate::store::StoreError;

/// How often expired rows are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(30);

/// Prune expired rows in bounded batches while the store lives.
pub(super) fn spawn_pruning(alive: Weak<()>, pool: Pool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PRUNE_EVERY);
        loop {
            tick.tick().await;
            if alive.upgrade().is_none() {
                return;
            }
            if let Err(error) = prune(&pool).await {
                tracing::warn!(%error, "pruning expired records failed");
            }
        }
    });
}

/// Delete expired rows, a bounded batch per statement, until none is left.
async fn prune(pool: &Pool) -> Result<(), StoreError> {
    let client = pool.get().await.map_err(pool_error)?;
    for statement in sql::PRUNE {
        loop {
            let deleted = client.execute(statement, &[]).await.map_err(db)?;
            if deleted < sql::PRUNE_BATCH {
                break;
            }
            // Let requests through between batches.
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}
