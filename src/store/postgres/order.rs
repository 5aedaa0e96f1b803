//! The PostgreSQL store's order (docs/guide/ordering.md, "Ordered delivery"): an accepted
//! event's row names its entity, its `stale_by` value and its place in the
//! database's one sequence (`hookgate_order_seq`), written by the
//! acceptance's own statement. An ordered lease takes, of each entity,
//! only the first of its pending rows, while no other row of it is in
//! flight. Gateways of a fleet lease at once: each due row is locked (`SKIP
//! LOCKED`), and each entity is decided under a transaction-scoped
//! advisory lock and read again under it, so two gateways never put two
//! events of one entity in flight.
//!
//! A pass parks every row it meets that is not its entity's turn (out of
//! the due index, `order_parked` keeping when it was due) and the settle
//! of a row — completed, dead, deleted, copied — wakes its entity's next
//! head in the settle's own statement (`sql.rs`, `waking!`). So a hot
//! entity's backlog costs a lease what its head costs, and never hides
//! another entity's event.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::rows::live_record;
use super::{db, millis, sql, PostgresStore};
use crate::order::Rules;
use crate::store::{Blocked, Due, Lease, Leased, StoreError};

/// Up to $2 due rows of source $1, not among $3, locked (rows other
/// gateways hold are skipped), each with its entity, read off the due
/// index. The state is tested as an expression so that no index by state
/// is considered: on a young table whose statistics say few rows are
/// queued, the planner would read every queued row of the source and sort
/// them (measured: a hot entity's backlog leased 38 events/s instead of
/// hundreds).
const CANDIDATES: &str = "\
SELECT idempotency_key, order_entity FROM webhook_events \
WHERE source = $1 AND next_attempt_at <= now() AND status || '' IN ('queued', 'processing') \
  AND expires_at > now() AND idempotency_key <> ALL($3::text[]) \
ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED";

/// For this transaction only: [`CANDIDATES`] walks the due index in order
/// (an index scan), never a bitmap of it sorted afterwards. Parked rows
/// leave entries behind in the due index until a vacuum; an index scan
/// marks each one it finds dead so that later passes skip it, a bitmap
/// scan reads them all again each pass (measured on a table the planner
/// has no statistics of yet, with autovacuum off: a hot entity's backlog
/// leased 118 events/s with the bitmap, see BENCHMARKS.md).
const WALK_THE_DUE_INDEX: &str = "SET LOCAL enable_bitmapscan = off";

/// The entities $2 of source $1, each with whether this transaction now
/// holds its lock: what is read of an entity afterwards is read under it,
/// so gateways decide an entity one at a time.
const ENTITY_LOCKS: &str = "SELECT e, pg_try_advisory_xact_lock(hashtext($1), hashtext(e)) \
    FROM unnest($2::text[]) AS e";

/// Entity $2 of source $1's head: its first pending row (no value first,
/// then by value, then by place; a dead one holds its place unless $3) —
/// key, status, whether it is due (a parked row: when it was), whether its
/// lease is live, its value; whether another row of the entity is in
/// flight; the newest value among its delivered rows. Three partial
/// indexes answer it (`webhook_events_head`, `_flying`, `_newest`).
const HEAD: &str = "\
SELECT h.idempotency_key, h.status, coalesce(h.order_parked, h.next_attempt_at) <= now(), \
    coalesce(h.lease_expires_at > now(), false), h.order_value, \
    EXISTS (SELECT 1 FROM webhook_events AS f \
        WHERE f.source = $1 AND f.order_entity = $2 AND f.status = 'processing' \
          AND f.idempotency_key <> h.idempotency_key AND f.lease_expires_at > now() \
          AND f.expires_at > now()), \
    (SELECT max(n.order_value) FROM webhook_events AS n \
        WHERE n.source = $1 AND n.order_entity = $2 AND n.status = 'completed' \
          AND n.order_value IS NOT NULL AND n.expires_at > now()) \
FROM webhook_events AS h \
WHERE h.source = $1 AND h.order_entity = $2 \
  AND h.status IN ('queued', 'processing', 'failed', 'dead') AND h.expires_at > now() \
  AND (h.status <> 'dead' OR NOT $3::bool) \
ORDER BY h.order_value IS NOT NULL, h.order_value, h.order_seq LIMIT 1";

/// ($1, $2) turns stale: out of its queue, kept like a dead letter.
const STALE: &str = "UPDATE webhook_events SET status = 'stale', token = NULL, \
    lease_expires_at = NULL, next_attempt_at = NULL, order_parked = NULL, \
    updated_at = date_trunc('milliseconds', now()) \
    WHERE source = $1 AND idempotency_key = $2";

/// The rows $2 of source $1 are not their entity's turn: out of the due
/// index until their entity is woken (a day on, only if a wake never
/// comes). When each was due is kept, and shown.
const PARK: &str = "UPDATE webhook_events \
    SET order_parked = coalesce(order_parked, next_attempt_at), \
        next_attempt_at = now() + interval '1 day' \
    WHERE source = $1 AND idempotency_key = ANY($2::text[]) \
      AND status IN ('queued', 'processing')";

/// A head that was not among a pass's rows is locked before it is written;
/// held elsewhere, it waits for the next pass.
const LOCK_HEAD: &str = "SELECT 1 FROM webhook_events \
    WHERE source = $1 AND idempotency_key = $2 FOR UPDATE SKIP LOCKED";

/// The most due rows one ordered pass looks at.
const MOST_LOOKED: usize = 2_048;

/// An entity's head, as a pass reads it ([`HEAD`]).
struct Head {
    key: String,
    status: String,
    due: bool,
    live: bool,
    value: Option<f64>,
    flying: bool,
    newest: Option<f64>,
}

impl PostgresStore {
    /// See [`Queue::lease_ordered`](crate::store::Queue::lease_ordered): in
    /// one transaction, window after window of due rows (four per token
    /// and sixteen more), each entity's turn taken once — its stale heads
    /// turn stale, its head is leased when it is due and nothing of it is
    /// in flight, every other row of it met is parked. A pass goes on past
    /// a window only when most of it was parked (a hot backlog).
    pub(super) async fn lease_in_order(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        tx.batch_execute(WALK_THE_DUE_INDEX).await.map_err(db)?;
        let lease = millis(processing_ttl);
        let mut leased = Leased::default();
        let mut tokens = tokens.iter().peekable();
        let window = (4 * tokens.len() + 16) as i64;
        // Entities decided in this pass (true: under its lock), and the
        // rows met and left due (a later window does not meet them again).
        let mut decided = HashMap::<String, bool>::new();
        let mut passed: Vec<String> = Vec::new();
        let mut looked = 0;
        while tokens.peek().is_some() && looked < MOST_LOOKED {
            let rows = (tx.query(CANDIDATES, &[&source, &window, &passed]))
                .await
                .map_err(db)?;
            looked += rows.len();
            let full = rows.len() as i64 == window;
            let rows: Vec<(String, Option<String>)> =
                rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            let locked = entity_locks(&tx, source, &rows, &decided).await?;
            let mut parking: Vec<String> = Vec::new();
            for (key, entity) in rows.iter().cloned() {
                if tokens.peek().is_none() {
                    break;
                }
                let Some(entity) = entity else {
                    let token = tokens.next().expect("peeked");
                    leased
                        .due
                        .push(lease_row(&tx, source, key, token, lease).await?);
                    continue;
                };
                if let Some(&mine) = decided.get(&entity) {
                    // Its turn was taken: the rest wait for its wake. An
                    // entity another gateway holds is left as it is. The
                    // head this pass leased for an earlier row is met here
                    // too when its lease had lapsed (due after its
                    // siblings): it is in flight now, not parked.
                    if mine && !leased.due.iter().any(|due| due.id == key) {
                        parking.push(key);
                    }
                    continue;
                }
                let locked = locked.get(&entity).copied().unwrap_or(false);
                decided.insert(entity.clone(), locked);
                if !locked {
                    continue;
                }
                loop {
                    let Some(head) = head_of(&tx, source, &entity, rules).await? else {
                        break;
                    };
                    // A head in flight (an operator's redelivery) is not judged.
                    let in_flight = head.status == "processing" && head.live;
                    let older = head.value.zip(head.newest).is_some_and(|(v, n)| v < n);
                    let flying = in_flight || head.flying;
                    let ready = matches!(head.status.as_str(), "queued" | "processing") && head.due;
                    let mine = key == head.key;
                    // A head is written only under its row's lock, taken
                    // without waiting: a pass never waits on another.
                    let writes = (older && !in_flight) || (ready && !flying);
                    if writes && !mine && !locked_head(&tx, source, &head.key).await? {
                        break;
                    }
                    if older && !in_flight {
                        (tx.execute(STALE, &[&source, &head.key]))
                            .await
                            .map_err(db)?;
                        leased.stale.push(head.key);
                        continue;
                    }
                    if !mine || flying {
                        parking.push(key);
                    }
                    if ready && !flying {
                        let token = tokens.next().expect("peeked");
                        leased
                            .due
                            .push(lease_row(&tx, source, head.key, token, lease).await?);
                    }
                    break;
                }
            }
            let parked = parking.len();
            if parked > 0 {
                (tx.execute(PARK, &[&source, &parking])).await.map_err(db)?;
            }
            let gone: HashSet<&str> = (parking.iter().map(String::as_str))
                .chain(leased.due.iter().map(|due| due.id.as_str()))
                .collect();
            passed.extend(
                (rows.iter().map(|(key, _)| key))
                    .filter(|key| !gone.contains(key.as_str()))
                    .cloned(),
            );
            if !full || parked * 2 <= rows.len() {
                break;
            }
        }
        tx.commit().await.map_err(db)?;
        Ok(leased)
    }
}

/// Of the entities `rows` meet that this pass has not decided, whether
/// this pass took each one's lock (without waiting: one another gateway
/// holds is `false`).
async fn entity_locks(
    tx: &Transaction<'_>,
    source: &str,
    rows: &[(String, Option<String>)],
    decided: &HashMap<String, bool>,
) -> Result<HashMap<String, bool>, StoreError> {
    let met: HashSet<&String> = (rows.iter())
        .filter_map(|(_, entity)| entity.as_ref())
        .filter(|entity| !decided.contains_key(*entity))
        .collect();
    let met: Vec<&String> = met.into_iter().collect();
    let mut locked = HashMap::new();
    if !met.is_empty() {
        for row in (tx.query(ENTITY_LOCKS, &[&source, &met]))
            .await
            .map_err(db)?
        {
            locked.insert(row.get::<_, String>(0), row.get::<_, bool>(1));
        }
    }
    Ok(locked)
}

async fn head_of(
    tx: &Transaction<'_>,
    source: &str,
    entity: &str,
    rules: Rules,
) -> Result<Option<Head>, StoreError> {
    let row = (tx.query_opt(HEAD, &[&source, &entity, &rules.skip_dead]))
        .await
        .map_err(db)?;
    Ok(row.map(|row| Head {
        key: row.get(0),
        status: row.get(1),
        due: row.get::<_, Option<bool>>(2).unwrap_or(false),
        live: row.get(3),
        value: row.get(4),
        flying: row.get(5),
        newest: row.get(6),
    }))
}

/// Whether this transaction holds the row lock of `id` (taken now, or
/// already); a row another transaction holds is not waited for.
async fn locked_head(tx: &Transaction<'_>, source: &str, id: &str) -> Result<bool, StoreError> {
    let row = (tx.query_opt(LOCK_HEAD, &[&source, &id])).await;
    Ok(row.map_err(db)?.is_some())
}

/// Lease the row `id`, locked by this transaction, under `token`.
async fn lease_row(
    tx: &Transaction<'_>,
    source: &str,
    id: String,
    token: &str,
    lease: i64,
) -> Result<Due, StoreError> {
    let leasing: [&(dyn ToSql + Sync); 4] = [&source, &id, &token, &lease];
    let attempt: i32 = (tx.query_one(sql::LEASE_DUE, &leasing))
        .await
        .map_err(db)?
        .get(0);
    let (record, _) = live_record(tx, source, &id)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a leased event vanished".into()))?;
    Ok(Due {
        id,
        lease: Lease {
            token: token.to_owned(),
            attempt: attempt as u32,
        },
        record,
    })
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
