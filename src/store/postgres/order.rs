//! The PostgreSQL store's order (README, "Ordered delivery"): an accepted
//! event's row names its entity, its `stale_by` value and its place in the
//! database's one sequence (`hookgate_order_seq`), written by the
//! acceptance's own statement. An ordered lease takes, of each entity,
//! only the first of its pending rows, while no other row of it is in
//! flight. Gateways of a fleet lease at once: each row is locked (`SKIP
//! LOCKED`), and each entity is decided under a transaction-scoped
//! advisory lock and looked at again under it, so two gateways never put
//! two events of one entity in flight.

use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::rows::live_record;
use super::{db, millis, sql, PostgresStore};
use crate::order::Rules;
use crate::store::{Blocked, Due, Lease, Leased, StoreError};

/// The head of entity `e.order_entity` of source $1: its first pending row
/// (no value first, then by value, then by place); a dead one holds its
/// place unless `$skip`.
macro_rules! head {
    ($skip:literal) => {
        concat!(
            "(SELECT h.idempotency_key FROM webhook_events AS h \
              WHERE h.source = $1 AND h.order_entity = e.order_entity AND h.expires_at > now() \
                AND (h.status IN ('queued', 'processing', 'failed') \
                     OR (h.status = 'dead' AND NOT ",
            $skip,
            ")) \
              ORDER BY h.order_value IS NOT NULL, h.order_value, h.order_seq LIMIT 1)"
        )
    };
}

/// Up to $2 due rows of source $1 that may be leased, locked (those other
/// gateways hold are skipped): every unordered one, and each entity's head.
const HEADS: &str = concat!(
    "SELECT idempotency_key, order_entity, order_value FROM webhook_events AS e \
     WHERE source = $1 AND next_attempt_at <= now() AND status IN ('queued', 'processing') \
       AND expires_at > now() AND (order_entity IS NULL OR idempotency_key = ",
    head!("$3::bool"),
    ") ORDER BY next_attempt_at LIMIT $2 FOR UPDATE OF e SKIP LOCKED"
);

/// Serializes the gateways deciding one entity ($1 source, $2 entity).
const ENTITY_LOCK: &str = "SELECT pg_try_advisory_xact_lock(hashtext($1), hashtext($2))";

/// Under the entity's lock, looked at again: whether ($1, $2) is still the
/// head of entity $3, and no other row of it is in flight.
const STILL_HEAD: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM webhook_events AS e \
     WHERE e.source = $1 AND e.idempotency_key = $2 AND e.order_entity = $3 \
       AND e.idempotency_key = ",
    head!("$4::bool"),
    ") AND NOT EXISTS (SELECT 1 FROM webhook_events AS f \
     WHERE f.source = $1 AND f.order_entity = $3 AND f.idempotency_key <> $2 \
       AND f.status = 'processing' AND f.lease_expires_at > now() AND f.expires_at > now())"
);

/// The newest value of entity $2 of source $1 among its completed rows.
const NEWEST: &str = "SELECT max(order_value) FROM webhook_events \
    WHERE source = $1 AND order_entity = $2 AND status = 'completed' AND expires_at > now()";

/// ($1, $2) turns stale: out of its queue, kept like a dead letter.
const STALE: &str = "UPDATE webhook_events SET status = 'stale', token = NULL, \
    lease_expires_at = NULL, next_attempt_at = NULL, \
    updated_at = date_trunc('milliseconds', now()) \
    WHERE source = $1 AND idempotency_key = $2";

impl PostgresStore {
    /// See [`Queue::lease_ordered`](crate::store::Queue::lease_ordered): in
    /// one transaction, rounds of heads until the tokens are spent or no
    /// head turned stale (the next head may be due).
    pub(super) async fn lease_in_order(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(db)?;
        let lease = millis(processing_ttl);
        let mut leased = Leased::default();
        let mut tokens = tokens.iter();
        loop {
            let room = tokens.len() as i64;
            if room == 0 {
                break;
            }
            let heads = transaction
                .query(HEADS, &[&source, &room, &rules.skip_dead])
                .await
                .map_err(db)?;
            let mut turned_stale = false;
            for row in heads {
                let (id, entity): (String, Option<String>) = (row.get(0), row.get(1));
                let value: Option<f64> = row.get(2);
                if let Some(entity) = &entity {
                    let locked: bool = (transaction.query_one(ENTITY_LOCK, &[&source, entity]))
                        .await
                        .map_err(db)?
                        .get(0);
                    let checked: [&(dyn ToSql + Sync); 4] =
                        [&source, &id, entity, &rules.skip_dead];
                    if !locked
                        || !(transaction.query_one(STILL_HEAD, &checked))
                            .await
                            .map_err(db)?
                            .get::<_, bool>(0)
                    {
                        continue;
                    }
                    let newest: Option<f64> = (transaction.query_one(NEWEST, &[&source, entity]))
                        .await
                        .map_err(db)?
                        .get(0);
                    if value
                        .zip(newest)
                        .is_some_and(|(value, newest)| value < newest)
                    {
                        (transaction.execute(STALE, &[&source, &id]))
                            .await
                            .map_err(db)?;
                        leased.stale.push(id);
                        turned_stale = true;
                        continue;
                    }
                }
                let Some(token) = tokens.next() else { break };
                let leasing: [&(dyn ToSql + Sync); 4] = [&source, &id, token, &lease];
                let attempt: i32 = (transaction.query_one(sql::LEASE_DUE, &leasing))
                    .await
                    .map_err(db)?
                    .get(0);
                let (record, _) = live_record(&transaction, source, &id)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt("a leased event vanished".into()))?;
                leased.due.push(Due {
                    id,
                    lease: Lease {
                        token: token.clone(),
                        attempt: attempt as u32,
                    },
                    record,
                });
            }
            if !turned_stale {
                break;
            }
        }
        transaction.commit().await.map_err(db)?;
        Ok(leased)
    }
}

/// The dead rows of source $1 that are their entity's first pending row,
/// oldest death first, at most $2: entity, id, when it died (ms), and how
/// many of the entity's rows wait behind it.
const BLOCKED: &str = "\
SELECT d.order_entity, d.idempotency_key, (extract(epoch FROM d.updated_at) * 1000)::bigint, \
    (SELECT count(*) FROM webhook_events AS w \
     WHERE w.source = $1 AND w.order_entity = d.order_entity \
       AND w.idempotency_key <> d.idempotency_key \
       AND w.status IN ('queued', 'processing', 'failed', 'dead') AND w.expires_at > now()) \
FROM webhook_events AS d \
WHERE d.source = $1 AND d.order_entity IS NOT NULL AND d.status = 'dead' AND d.expires_at > now() \
  AND NOT EXISTS (SELECT 1 FROM webhook_events AS h \
      WHERE h.source = $1 AND h.order_entity = d.order_entity \
        AND h.idempotency_key <> d.idempotency_key \
        AND h.status IN ('queued', 'processing', 'failed', 'dead') AND h.expires_at > now() \
        AND (h.order_value IS NOT NULL, coalesce(h.order_value, 0), h.order_seq) \
            < (d.order_value IS NOT NULL, coalesce(d.order_value, 0), d.order_seq)) \
ORDER BY d.updated_at LIMIT $2";

impl PostgresStore {
    /// [`Listing::blocked`](crate::store::Listing::blocked), on a listing
    /// connection.
    pub(super) async fn blocked_entities(
        &self,
        source: &str,
        limit: usize,
    ) -> Result<Vec<Blocked>, StoreError> {
        let client = self.listing_client().await?;
        let statement = client.prepare_cached(BLOCKED).await.map_err(db)?;
        let rows = client
            .query(&statement, &[&source, &(limit as i64)])
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|row| Blocked {
                entity: row.get(0),
                dead: row.get(1),
                since_ms: row.get::<_, i64>(2) as u64,
                waiting: row.get::<_, i64>(3) as u64,
            })
            .collect())
    }
}
