//! The embedded store's order (docs/guide/ordering.md, "Ordered delivery"): an accepted
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

/// The due rows of source ?2 at ?1, the first ?3 by when they are due:
/// what one pass looks at.
const CANDIDATES: &str = "\
SELECT key, order_entity FROM webhook_events INDEXED BY webhook_events_due_by_source \
WHERE due_source = ?2 AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 \
  AND state IN ('queued', 'processing') AND expires_at > ?1 \
ORDER BY next_attempt_at LIMIT ?3";

/// Entity ?2 of source ?1's head at ?3: its first pending row (no value
/// first, then by value, then by place; a dead one holds its place unless
/// ?4) — key, state, when it is due, whether its lease is live, value.
const HEAD: &str = "\
SELECT key, state, coalesce(order_parked, next_attempt_at), coalesce(lease_until > ?3, 0), order_value \
FROM webhook_events INDEXED BY webhook_events_head \
WHERE due_source = ?1 AND order_entity = ?2 \
  AND state IN ('queued', 'processing', 'failed', 'dead') AND expires_at > ?3 \
  AND (state <> 'dead' OR NOT ?4) \
ORDER BY order_value IS NOT NULL, order_value, order_seq LIMIT 1";

/// Whether another row (not ?3) of entity ?2 of source ?1 is in flight at ?4.
const FLYING: &str = "\
SELECT 1 FROM webhook_events INDEXED BY webhook_events_flying \
WHERE due_source = ?1 AND order_entity = ?2 AND state = 'processing' AND key <> ?3 \
  AND lease_until > ?4 LIMIT 1";

/// The newest value of entity ?2 of source ?1 among its completed rows
/// still kept at ?3.
const NEWEST: &str = "\
SELECT order_value FROM webhook_events INDEXED BY webhook_events_newest \
WHERE due_source = ?1 AND order_entity = ?2 AND state = 'completed' AND expires_at > ?3 \
  AND order_value IS NOT NULL \
ORDER BY order_value DESC LIMIT 1";

/// ?1 turns stale at ?2: out of its queue, kept like a dead letter.
const STALE: &str = "UPDATE webhook_events SET state = 'stale', token = NULL, lease_until = NULL, \
    next_attempt_at = NULL, order_parked = NULL, updated_at = ?2 WHERE key = ?1";

/// ?1 is not its entity's turn: out of the due window until its entity is
/// woken (?2, a day on, only if a wake never comes). When it was due is
/// kept, and shown.
const PARK: &str =
    "UPDATE webhook_events SET order_parked = coalesce(order_parked, next_attempt_at), \
    next_attempt_at = ?2 WHERE key = ?1 AND state IN ('queued', 'processing')";

/// Wake entity ?2 of source ?1 at ?3: its first pending row that is not
/// dead, if parked, is due now.
const WAKE: &str = "\
UPDATE webhook_events SET next_attempt_at = ?3, order_parked = NULL \
WHERE key = (SELECT key FROM webhook_events INDEXED BY webhook_events_head \
             WHERE due_source = ?1 AND order_entity = ?2 \
               AND state IN ('queued', 'processing', 'failed', 'dead') AND state <> 'dead' \
               AND expires_at > ?3 \
             ORDER BY order_value IS NOT NULL, order_value, order_seq LIMIT 1) \
  AND order_parked IS NOT NULL";

/// A parked head ?1 is due when it was due before it was parked.
const UNPARK: &str =
    "UPDATE webhook_events SET next_attempt_at = order_parked, order_parked = NULL \
    WHERE key = ?1 AND order_parked IS NOT NULL";

/// The source and entity of an ordered row ?1.
const ENTITY_OF: &str = "SELECT due_source, order_entity FROM webhook_events \
    WHERE key = ?1 AND order_entity IS NOT NULL AND due_source IS NOT NULL";

/// The most due rows one ordered pass looks at.
const MOST_LOOKED: usize = 2_048;

/// How long a parked row waits for its wake at most.
const PARKED_MS: i64 = 86_400_000;

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

/// Lease what `rules` let be leased of `source`'s due rows, one token
/// each. A pass looks at the first due rows only (four per token and
/// sixteen more), and takes each entity's turn once: its stale heads turn
/// stale, its head is leased when it is due and nothing of the entity is
/// in flight, and every other row of it met is parked — out of the due
/// window until the entity is woken by the settling of one of its rows
/// ([`wake`]). So a hot entity's backlog costs a pass what its head costs,
/// not what its backlog does, and never hides other entities' rows.
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
    let mut tokens = tokens.into_iter().peekable();
    let window = (4 * tokens.len() + 16) as i64;
    let mut seen = std::collections::HashSet::new();
    let park = |key: &str| {
        tx.prepare_cached(PARK)?
            .execute(params![key, now_i + PARKED_MS])
    };
    // Window after window while a window is mostly rows of entities already
    // seen: a hot entity's backlog leaves the due index in one pass (up to
    // MOST_LOOKED rows), not one window per worker poll, and other
    // entities' rows behind it are reached.
    let mut looked = 0;
    while tokens.peek().is_some() && looked < MOST_LOOKED {
        let candidates: Vec<(String, Option<String>)> = tx
            .prepare_cached(CANDIDATES)?
            .query_map(params![now_i, source, window], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        let candidates_len = candidates.len();
        looked += candidates_len;
        let (full, mut parked) = (candidates.len() as i64 == window, 0);
        for (key, entity) in candidates {
            if tokens.peek().is_none() {
                break;
            }
            let Some(entity) = entity else {
                let token = tokens.next().expect("peeked");
                leased
                    .due
                    .extend(lease(tx, &key, token, lease_until, now, prefix)?);
                continue;
            };
            if !seen.insert(entity.clone()) {
                // Its turn was taken. The head this pass leased for an
                // earlier row is met here too when its lease had lapsed
                // (due after its siblings): it is in flight now, not parked.
                if !leased.due.iter().any(|due| key[prefix..] == due.id) {
                    parked += park(&key)?;
                }
                continue;
            }
            loop {
                let Some(Head {
                    key: head,
                    state,
                    due_at,
                    live,
                    value,
                }) = head_of(tx, source, &entity, now_i, rules)?
                else {
                    break;
                };
                // A head in flight (an operator's redelivery) is not judged.
                let in_flight = state == "processing" && live;
                let newest: Option<f64> = match value {
                    Some(_) if !in_flight => {
                        query_one(tx, NEWEST, params![source, entity, now_i], |row| row.get(0))?
                    }
                    _ => None,
                };
                if let (Some(value), Some(newest)) = (value, newest) {
                    if value < newest {
                        tx.prepare_cached(STALE)?.execute(params![head, now_i])?;
                        leased.stale.push(head[prefix..].to_owned());
                        continue;
                    }
                }
                let flying = in_flight
                    || query_one(tx, FLYING, params![source, entity, head, now_i], |_| Ok(()))?
                        .is_some();
                let ready = matches!(state.as_str(), "queued" | "processing")
                    && due_at.is_some_and(|at| at <= now_i);
                if key != head || flying {
                    park(&key)?;
                }
                if ready && !flying {
                    tx.prepare_cached(UNPARK)?.execute(params![head])?;
                    let token = tokens.next().expect("peeked");
                    leased
                        .due
                        .extend(lease(tx, &head, token, lease_until, now, prefix)?);
                }
                break;
            }
        }
        // On only past a window mostly of rows of entities already seen:
        // what a hot backlog looks like. Parking is a write; a pass among
        // many entities has done its work.
        if !full || parked * 2 <= candidates_len {
            break;
        }
    }
    Ok(leased)
}

/// An entity's first pending row, as a pass reads it.
struct Head {
    key: String,
    state: String,
    /// When it is due (parked: when it was due before).
    due_at: Option<i64>,
    /// Its lease is live.
    live: bool,
    value: Option<f64>,
}

fn head_of(
    tx: &Transaction<'_>,
    source: &str,
    entity: &str,
    now: i64,
    rules: Rules,
) -> rusqlite::Result<Option<Head>> {
    let args = params![source, entity, now, rules.skip_dead];
    query_one(tx, HEAD, args, |row| {
        Ok(Head {
            key: row.get(0)?,
            state: row.get(1)?,
            due_at: row.get(2)?,
            live: row.get(3)?,
            value: row.get(4)?,
        })
    })
}

/// Lease the due row `key` under `token`.
fn lease(
    tx: &Transaction<'_>,
    key: &str,
    token: String,
    lease_until: i64,
    now: u64,
    prefix: usize,
) -> rusqlite::Result<Option<Due>> {
    let leasing = params![key, token, lease_until, now as i64];
    let Some(attempt) = query_one(tx, LEASE_DUE, leasing, |row| row.get::<_, u32>(0))? else {
        return Ok(None);
    };
    let record = live_record(tx, key, now)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Some(Due {
        id: key[prefix..].to_owned(),
        lease: Lease { token, attempt },
        record,
    }))
}

/// The source and entity of the ordered row `key`, for [`wake`] (read
/// before a deletion).
pub(super) fn entity_of(tx: &Transaction<'_>, key: &str) -> rusqlite::Result<Option<Entity>> {
    query_one(tx, ENTITY_OF, params![key], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })
}

/// A source and one of its entities.
pub(super) type Entity = (String, String);

/// A row of `entity` settled (completed, dead, forgotten): its next head,
/// if parked, is due now. Nothing for an unordered row (`None`).
pub(super) fn wake(tx: &Transaction<'_>, entity: Option<Entity>, now: u64) -> rusqlite::Result<()> {
    if let Some((source, entity)) = entity {
        tx.prepare_cached(WAKE)?
            .execute(params![source, entity, now as i64])?;
    }
    Ok(())
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
