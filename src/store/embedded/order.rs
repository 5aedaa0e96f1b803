//! The embedded store's order (README, "Ordered delivery"): an accepted
//! event's row names its entity, its `stale_by` value and its place in the
//! file's sequence; an ordered lease takes, of each entity, only the first
//! of its pending rows, while no other row of it is in flight. The
//! database thread runs one operation at a time, so what a lease reads
//! still holds when it writes.

use rusqlite::{params, Transaction};

use super::row::{live_record, query_one};
use super::sql::LEASE_DUE;
use crate::order::Rules;
use crate::store::{Blocked, Due, Lease, Leased};

/// An acceptance's place: entity, value, and when it may first be leased
/// (its `reorder_window` from now).
pub(super) struct Placing {
    pub(super) entity: String,
    pub(super) value: Option<f64>,
    pub(super) hold_ms: i64,
}

/// ?1 key, ?2 entity, ?3 value, ?4 when it may be leased: the row takes the
/// next place in the file's sequence, once (a re-acceptance keeps it).
const PLACE: &str = "\
UPDATE webhook_events SET order_entity = ?2, order_value = ?3, \
    order_seq = (SELECT coalesce(max(order_seq), 0) + 1 FROM webhook_events \
                 WHERE order_seq IS NOT NULL), \
    next_attempt_at = CASE WHEN state = 'queued' THEN ?4 ELSE next_attempt_at END \
WHERE key = ?1 AND order_entity IS NULL";

/// The due rows of source ?2 at ?1 that may be leased, at most ?3: every
/// unordered one, and each entity's head — the first of its pending rows
/// (no value first, then by value, then by sequence; a dead one holds its
/// place unless ?4) — while no other row of the entity is in flight.
const HEADS: &str = "\
SELECT key, order_entity, order_value \
FROM webhook_events AS e INDEXED BY webhook_events_due_by_source \
WHERE due_source = ?2 AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 \
  AND state IN ('queued', 'processing') AND expires_at > ?1 \
  AND (order_entity IS NULL OR ( \
      key = (SELECT h.key FROM webhook_events AS h \
             WHERE h.due_source = ?2 AND h.order_entity = e.order_entity AND h.expires_at > ?1 \
               AND (h.state IN ('queued', 'processing', 'failed') \
                    OR (h.state = 'dead' AND NOT ?4)) \
             ORDER BY h.order_value IS NOT NULL, h.order_value, h.order_seq LIMIT 1) \
      AND NOT EXISTS (SELECT 1 FROM webhook_events AS f \
             WHERE f.due_source = ?2 AND f.order_entity = e.order_entity AND f.key <> e.key \
               AND f.state = 'processing' AND f.lease_until > ?1 AND f.expires_at > ?1))) \
ORDER BY next_attempt_at LIMIT ?3";

/// The newest value of entity ?2 of source ?1 among its completed rows.
const NEWEST: &str = "SELECT max(order_value) FROM webhook_events \
    WHERE due_source = ?1 AND order_entity = ?2 AND state = 'completed' AND expires_at > ?3";

/// ?1 turns stale at ?2: out of its queue, kept like a dead letter.
const STALE: &str = "UPDATE webhook_events SET state = 'stale', token = NULL, lease_until = NULL, \
    next_attempt_at = NULL, updated_at = ?2 WHERE key = ?1";

/// Give the accepted row of `key` its place.
pub(super) fn place(
    tx: &Transaction<'_>,
    key: &str,
    placing: &Placing,
    now: i64,
) -> rusqlite::Result<()> {
    let due = now + placing.hold_ms;
    let placed = params![key, placing.entity, placing.value, due];
    tx.prepare_cached(PLACE)?.execute(placed)?;
    Ok(())
}

/// Lease what `rules` let be leased of `source`'s due rows, one token each;
/// a head older than its entity's newest completed row turns stale, and
/// the rows are looked at again (the next head may be due).
pub(super) fn lease_ordered(
    tx: &Transaction<'_>,
    source: &str,
    tokens: Vec<String>,
    lease_until: i64,
    rules: Rules,
    now: u64,
) -> rusqlite::Result<Leased> {
    let now_i = now as i64;
    let prefix = source.len() + 1;
    let mut leased = Leased::default();
    let mut tokens = tokens.into_iter();
    loop {
        let room = tokens.len();
        if room == 0 {
            break;
        }
        let heads: Vec<(String, Option<String>, Option<f64>)> = tx
            .prepare_cached(HEADS)?
            .query_map(
                params![now_i, source, room as i64, rules.skip_dead],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )?
            .collect::<Result<_, _>>()?;
        let mut turned_stale = false;
        for (key, entity, value) in heads {
            if let (Some(entity), Some(value)) = (&entity, value) {
                let newest: Option<f64> =
                    query_one(tx, NEWEST, params![source, entity, now_i], |row| row.get(0))?
                        .flatten();
                if newest.is_some_and(|newest| value < newest) {
                    tx.prepare_cached(STALE)?.execute(params![key, now_i])?;
                    leased.stale.push(key[prefix..].to_owned());
                    turned_stale = true;
                    continue;
                }
            }
            let Some(token) = tokens.next() else { break };
            let leasing = params![key, token, lease_until, now_i];
            let Some(attempt) = query_one(tx, LEASE_DUE, leasing, |row| row.get::<_, u32>(0))?
            else {
                continue;
            };
            let record = live_record(tx, &key, now)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            leased.due.push(Due {
                id: key[prefix..].to_owned(),
                lease: Lease { token, attempt },
                record,
            });
        }
        if !turned_stale {
            break;
        }
    }
    Ok(leased)
}

/// The dead rows of source ?1 at ?2 that are their entity's first pending
/// row, oldest death first, at most ?3: entity, key, when it died, and how
/// many of the entity's rows wait behind it.
const BLOCKED: &str = "\
SELECT d.order_entity, d.key, d.updated_at, \
    (SELECT count(*) FROM webhook_events AS w \
     WHERE w.due_source = ?1 AND w.order_entity = d.order_entity AND w.key <> d.key \
       AND w.state IN ('queued', 'processing', 'failed', 'dead') AND w.expires_at > ?2) \
FROM webhook_events AS d \
WHERE d.due_source = ?1 AND d.order_entity IS NOT NULL AND d.state = 'dead' AND d.expires_at > ?2 \
  AND NOT EXISTS (SELECT 1 FROM webhook_events AS h \
      WHERE h.due_source = ?1 AND h.order_entity = d.order_entity AND h.key <> d.key \
        AND h.state IN ('queued', 'processing', 'failed', 'dead') AND h.expires_at > ?2 \
        AND (h.order_value IS NOT NULL, coalesce(h.order_value, 0), h.order_seq) \
            < (d.order_value IS NOT NULL, coalesce(d.order_value, 0), d.order_seq)) \
ORDER BY d.updated_at LIMIT ?3";

/// The entities of `source` held by a dead row (`Listing::blocked`).
pub(super) fn blocked(
    tx: &Transaction<'_>,
    source: &str,
    limit: usize,
    now: u64,
) -> rusqlite::Result<Vec<Blocked>> {
    let prefix = source.len() + 1;
    tx.prepare_cached(BLOCKED)?
        .query_map(params![source, now as i64, limit as i64], |row| {
            let key: String = row.get(1)?;
            Ok(Blocked {
                entity: row.get(0)?,
                dead: key[prefix..].to_owned(),
                since_ms: row.get::<_, i64>(2)? as u64,
                waiting: row.get::<_, i64>(3)? as u64,
            })
        })?
        .collect()
}
