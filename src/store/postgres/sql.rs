//! The PostgreSQL store's SQL: one statement per operation (the
//! migrations and the statements that apply them are `migrations.rs`'s).
//! Every time is the database's `now()`, so gateways with skewed clocks
//! agree; times leave the database as Unix milliseconds.

/// `ms` as a Unix-millisecond expression of a timestamp column.
macro_rules! ms {
    ($column:literal) => {
        concat!("(extract(epoch FROM ", $column, ") * 1000)::bigint")
    };
}

/// A record's columns, in the order `record` reads them, then the
/// database's now; listings read the same with the request and the
/// response left out.
macro_rules! record_columns {
    ($response:literal, $request:literal) => {
        concat!(
            "status, token, body_sha256, attempts, ",
            ms!("first_seen_at"),
            ", ",
            ms!("lease_expires_at"),
            ", ",
            ms!("completed_at"),
            ", response_status, ",
            $response,
            ", response_body_kept, ",
            ms!("now()"),
            ", ",
            ms!("updated_at"),
            ", last_error, last_status, ",
            ms!("last_attempt_at"),
            ", route, replay_of, ",
            $request,
            ", ",
            ms!("coalesce(order_parked, next_attempt_at)"),
            ", accepted, order_entity, order_value, order_seq"
        )
    };
}

/// The live record of ($1 source, $2 key), and the database's now.
pub(super) const SELECT_LIVE: &str = concat!(
    "SELECT ",
    record_columns!(
        "response_headers, response_body",
        "request_method, request_query, request_headers, request_body, history"
    ),
    " FROM webhook_events WHERE source = $1 AND idempotency_key = $2 AND expires_at > now()"
);

/// One page of ($1 source, $2 state), $3 rows, newest first, read off the
/// listing index (`webhook_events_by_state`); the key is the last column.
/// `$after` bounds where the page starts, as an index condition (so a deep
/// page reads no entry before it).
macro_rules! list {
    ($after:literal) => {
        concat!(
            "SELECT ",
            record_columns!(
                "NULL::bytea, NULL::bytea",
                "NULL::text, NULL::text, NULL::bytea, NULL::bytea, NULL::text"
            ),
            ", idempotency_key FROM webhook_events \
             WHERE source = $1 AND status = $2 AND expires_at > now() ",
            $after,
            " ORDER BY updated_at DESC, idempotency_key COLLATE \"C\" DESC LIMIT $3"
        )
    };
}
/// The first page.
pub(super) const LIST: &str = list!("");
/// A page of what changed at or before $4 (ms).
pub(super) const LIST_UNTIL: &str =
    list!("AND updated_at <= 'epoch'::timestamptz + $4::bigint * interval '1 millisecond'");
/// A page after the record ($4 ms, $5 key).
pub(super) const LIST_AFTER: &str = list!(
    "AND (updated_at, idempotency_key COLLATE \"C\") \
       < ('epoch'::timestamptz + $4::bigint * interval '1 millisecond', $5::text)"
);

pub(super) const COUNT: &str = "SELECT count(*) FROM webhook_events \
    WHERE source = $1 AND status = $2 AND expires_at > now()";
/// A source's queued rows and the bytes they take: key, stored request
/// and attempt history, plus 700 bytes a row for its other columns and its
/// index entries — measured: a queue of 2,000 events with 1 KB bodies
/// grew the table and its indexes by 1.9 KB an event (`Listing::queued`;
/// docs/operations/deploying.md, "Sizing").
pub(super) const QUEUED: &str =
    "SELECT count(*), coalesce(sum(700 + octet_length(idempotency_key) \
    + coalesce(octet_length(request_query), 0) + coalesce(octet_length(request_headers), 0) \
    + coalesce(octet_length(request_body), 0) + coalesce(octet_length(history), 0)), 0)::bigint \
    FROM webhook_events \
    WHERE source = $1 AND next_attempt_at IS NOT NULL AND status = 'queued' AND expires_at > now()";
/// Queued rows are async rows: the due index finds them.
pub(super) const COUNT_QUEUED: &str = "SELECT count(*) FROM webhook_events \
    WHERE source = $1 AND next_attempt_at IS NOT NULL AND status = $2 AND expires_at > now()";
pub(super) const OLDEST: &str = concat!(
    "SELECT ",
    ms!("min(updated_at)"),
    " FROM webhook_events WHERE source = $1 AND status = $2 AND expires_at > now()"
);
/// The oldest event waiting for its delivery — queued, or being tried
/// again after a failure — by when it was first seen.
pub(super) const OLDEST_QUEUED: &str = concat!(
    "SELECT ",
    ms!("min(first_seen_at)"),
    " FROM webhook_events WHERE source = $1 AND next_attempt_at IS NOT NULL \
      AND (status = $2 OR (status = 'processing' AND last_error IS NOT NULL)) \
      AND expires_at > now()"
);

pub(super) const NOW: &str = concat!("SELECT ", ms!("now()"));

/// Insert a new key; an existing row (of any state) is left alone, unlocked,
/// and nothing is returned. $5 lease and $6 retention in ms, $7..$12 a
/// request to keep (route, replay_of, method, query, headers, body), $13
/// the mode: 3 accepts an async event (queued, due now), 4 accepts and
/// claims it (due when the lease runs out); an ordered acceptance's $14
/// entity, $15 value and $16 hold (ms before it is due), its place the
/// next of the sequence.
pub(super) const CLAIM_NEW: &str = "\
INSERT INTO webhook_events (source, idempotency_key, status, token, body_sha256, attempts, \
    first_seen_at, updated_at, lease_expires_at, expires_at, route, replay_of, request_method, \
    request_query, request_headers, request_body, next_attempt_at, accepted, order_entity, \
    order_value, order_seq) \
VALUES ($1, $2, CASE WHEN $13::int = 3 THEN 'queued' ELSE 'processing' END, \
    CASE WHEN $13::int = 3 THEN NULL ELSE $3::text END, $4, \
    CASE WHEN $13::int = 3 THEN 0 ELSE 1 END, now(), date_trunc('milliseconds', now()), \
    CASE WHEN $13::int = 3 THEN NULL ELSE now() + $5::bigint * interval '1 millisecond' END, \
    now() + $6::bigint * interval '1 millisecond', $7, $8, $9, $10, $11, $12, \
    CASE $13::int WHEN 3 THEN now() + coalesce($16::bigint, 0) * interval '1 millisecond' \
                  WHEN 4 THEN now() + $5::bigint * interval '1 millisecond' END, $13::int >= 3, \
    $14::text, $15::float8, \
    CASE WHEN $14::text IS NOT NULL THEN nextval('hookgate_order_seq') END) \
ON CONFLICT (source, idempotency_key) DO NOTHING \
RETURNING attempts";

/// `CLAIM_NEW` for a group of claims (`group.rs`): one array per
/// parameter, in `CLAIM_NEW`'s order, each key at most once. Returns the
/// keys inserted, with their attempts.
pub(super) const CLAIM_NEW_GROUP: &str = "\
INSERT INTO webhook_events (source, idempotency_key, status, token, body_sha256, attempts, \
    first_seen_at, updated_at, lease_expires_at, expires_at, route, replay_of, request_method, \
    request_query, request_headers, request_body, next_attempt_at, accepted, order_entity, \
    order_value, order_seq) \
SELECT c.source, c.key, CASE WHEN c.mode = 3 THEN 'queued' ELSE 'processing' END, \
    CASE WHEN c.mode = 3 THEN NULL ELSE c.token END, c.sha, \
    CASE WHEN c.mode = 3 THEN 0 ELSE 1 END, now(), date_trunc('milliseconds', now()), \
    CASE WHEN c.mode = 3 THEN NULL ELSE now() + c.lease * interval '1 millisecond' END, \
    now() + c.retention * interval '1 millisecond', c.route, c.replay_of, c.method, c.query, \
    c.headers, c.body, \
    CASE c.mode WHEN 3 THEN now() + coalesce(c.hold, 0) * interval '1 millisecond' \
                WHEN 4 THEN now() + c.lease * interval '1 millisecond' END, \
    c.mode >= 3, c.entity, c.value, \
    CASE WHEN c.entity IS NOT NULL THEN nextval('hookgate_order_seq') END \
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], \
    $7::text[], $8::text[], $9::text[], $10::text[], $11::bytea[], $12::bytea[], $13::int[], \
    $14::text[], $15::float8[], $16::bigint[]) \
    AS c(source, key, token, sha, lease, retention, route, replay_of, method, query, headers, \
         body, mode, entity, value, hold) \
ON CONFLICT (source, idempotency_key) DO NOTHING \
RETURNING source, idempotency_key, attempts";

/// An expired row is gone before a claim takes its key.
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM webhook_events \
    WHERE source = $1 AND idempotency_key = $2 AND expires_at <= now()";

/// Take over a live row that may be claimed in mode $13 (0 a delivery, 1 a
/// redelivery, 2 a forced one, 4 a claimed acceptance) — failed, or
/// processing with a lapsed lease; dead too for a redelivery, completed for
/// a forced one; never under a live lease — in one statement; of concurrent
/// takeovers the row lock lets one through, the others find it no longer
/// claimable. An accepted row stays owed to its queue: due again when the
/// new lease ends. A request in $7..$12 (as for `CLAIM_NEW`) replaces the
/// one kept.
pub(super) const TAKE_OVER: &str = "\
UPDATE webhook_events SET order_parked = NULL, \
    status = 'processing', token = $3, body_sha256 = $4, attempts = attempts + 1, \
    updated_at = date_trunc('milliseconds', now()), \
    lease_expires_at = now() + $5::bigint * interval '1 millisecond', \
    expires_at = now() + $6::bigint * interval '1 millisecond', \
    accepted = accepted OR $13::int = 4, \
    next_attempt_at = CASE WHEN accepted OR $13::int = 4 \
        THEN now() + $5::bigint * interval '1 millisecond' END, \
    completed_at = NULL, response_status = NULL, response_headers = NULL, \
    response_body = NULL, response_body_kept = NULL, \
    route = coalesce($7, route), replay_of = coalesce($8, replay_of), \
    request_method = coalesce($9, request_method), \
    request_query = CASE WHEN $9::text IS NULL THEN request_query ELSE $10 END, \
    request_headers = coalesce($11, request_headers), \
    request_body = coalesce($12, request_body) \
WHERE source = $1 AND idempotency_key = $2 AND expires_at > now() AND $13::int <> 3 \
  AND (lease_expires_at IS NULL OR lease_expires_at <= now()) \
  AND (status IN ('processing', 'failed', 'released') \
       OR (status IN ('dead', 'stale') AND $13::int IN (1, 2)) \
       OR (status = 'completed' AND $13::int = 2)) \
RETURNING attempts";

/// An acceptance of a row nobody holds (failed, or its sync holder died):
/// accepted, queued and due now, its attempts kept. $1 source, $2 key, $3
/// body hash, $4 retention ms, $5..$10 the request to keep (route,
/// replay_of, method, query, headers, body), $11..$13 an ordered
/// acceptance's entity, value and hold (its place, once).
pub(super) const QUEUE: &str = "\
UPDATE webhook_events SET order_parked = NULL, \
    status = 'queued', token = NULL, lease_expires_at = NULL, body_sha256 = $3, \
    accepted = true, updated_at = date_trunc('milliseconds', now()), \
    next_attempt_at = now() + coalesce($13::bigint, 0) * interval '1 millisecond', \
    order_seq = CASE WHEN order_entity IS NULL AND $11::text IS NOT NULL \
        THEN nextval('hookgate_order_seq') ELSE order_seq END, \
    order_value = CASE WHEN order_entity IS NULL THEN $12::float8 ELSE order_value END, \
    order_entity = coalesce(order_entity, $11::text), \
    expires_at = now() + $4::bigint * interval '1 millisecond', \
    route = coalesce($5, route), replay_of = coalesce($6, replay_of), \
    request_method = coalesce($7, request_method), \
    request_query = CASE WHEN $7::text IS NULL THEN request_query ELSE $8 END, \
    request_headers = coalesce($9, request_headers), \
    request_body = coalesce($10, request_body) \
WHERE source = $1 AND idempotency_key = $2 AND expires_at > now() \
  AND (lease_expires_at IS NULL OR lease_expires_at <= now()) \
  AND status IN ('processing', 'failed', 'released') \
  AND NOT (accepted AND status = 'processing')";

/// An acceptance meeting a sync holder under a live lease: the row turns
/// accepted, due when the lease ends; a held failure drops its token and
/// waits queued. $1 source, $2 key, $3 retention ms, $4..$9 the request to
/// keep (as for `QUEUE`).
pub(super) const ADOPT: &str = "\
UPDATE webhook_events SET order_parked = NULL, \
    accepted = true, next_attempt_at = lease_expires_at, \
    status = CASE WHEN status = 'failed' THEN 'queued' ELSE status END, \
    token = CASE WHEN status = 'failed' THEN NULL ELSE token END, \
    lease_expires_at = CASE WHEN status = 'failed' THEN NULL ELSE lease_expires_at END, \
    updated_at = CASE WHEN status = 'failed' \
        THEN date_trunc('milliseconds', now()) ELSE updated_at END, \
    expires_at = greatest(expires_at, now() + $3::bigint * interval '1 millisecond'), \
    route = coalesce($4, route), replay_of = coalesce($5, replay_of), \
    request_method = coalesce($6, request_method), \
    request_query = CASE WHEN $6::text IS NULL THEN request_query ELSE $7 END, \
    request_headers = coalesce($8, request_headers), \
    request_body = coalesce($9, request_body) \
WHERE source = $1 AND idempotency_key = $2 AND expires_at > now() AND NOT accepted \
  AND lease_expires_at > now() AND status IN ('processing', 'failed')";

/// An operator's redelivery of a queued event: due now.
pub(super) const MAKE_DUE: &str = "UPDATE webhook_events SET next_attempt_at = now() \
    WHERE source = $1 AND idempotency_key = $2 AND expires_at > now() AND status = 'queued'";

/// Up to $2 due async events of source $1, locked; those other workers
/// hold locked are skipped.
pub(super) const DUE: &str = "SELECT idempotency_key FROM webhook_events \
    WHERE source = $1 AND next_attempt_at <= now() AND status IN ('queued', 'processing') \
      AND expires_at > now() \
    ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED";

/// Lease due event ($1, $2) to token $3 for $4 ms.
pub(super) const LEASE_DUE: &str = "\
UPDATE webhook_events SET status = 'processing', token = $3, order_parked = NULL, \
    lease_expires_at = now() + $4::bigint * interval '1 millisecond', \
    next_attempt_at = now() + $4::bigint * interval '1 millisecond', \
    attempts = attempts + 1, updated_at = date_trunc('milliseconds', now()) \
WHERE source = $1 AND idempotency_key = $2 \
RETURNING attempts";

/// Claims of one body under a replay guard take this lock first, so the
/// guard check and the claim are one step for that body.
pub(super) const GUARD_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext($1 || '#' || $2))";

pub(super) const GUARD_FIRST_KEY: &str = "SELECT first_key FROM replay_guards \
    WHERE source = $1 AND body_sha256 = $2 AND expires_at > now()";

pub(super) const SET_GUARD: &str = "\
INSERT INTO replay_guards (source, body_sha256, first_key, expires_at) \
VALUES ($1, $2, $3, now() + $4::bigint * interval '1 millisecond') \
ON CONFLICT (source, body_sha256) DO UPDATE SET \
    first_key = excluded.first_key, expires_at = excluded.expires_at";

pub(super) const RENEW: &str = "UPDATE webhook_events \
    SET lease_expires_at = now() + $4::bigint * interval '1 millisecond', \
        next_attempt_at = CASE WHEN next_attempt_at IS NOT NULL \
            THEN now() + $4::bigint * interval '1 millisecond' END \
    WHERE source = $1 AND idempotency_key = $2 AND token = $3 AND expires_at > now()";

/// `$settle` (a statement returning the settled row's `source,
/// idempotency_key, order_entity` and what `$returned` reads), then, when
/// `$when` holds of it, the wake of its entity (docs/guide/ordering.md, "Ordered
/// delivery"): the entity's first pending row that is neither dead nor the
/// settled one, if parked, is due now. One statement, so no settle leaves
/// its entity parked; an unordered row wakes nothing.
///
/// The next row is written whether or not it is parked now: an ordered
/// lease that is parking it holds its row lock, so the wake waits for that
/// lease to commit and then sees the park (a condition on `order_parked`
/// would be judged before the park, and the row would stay parked).
macro_rules! waking {
    ($settle:expr, $when:literal, $returned:literal) => {
        concat!(
            "WITH done AS (",
            $settle,
            "), woken AS (UPDATE webhook_events AS w \
             SET next_attempt_at = CASE WHEN w.order_parked IS NOT NULL THEN now() \
                                        ELSE w.next_attempt_at END, \
                 order_parked = NULL FROM done \
             WHERE done.order_entity IS NOT NULL AND ",
            $when,
            " AND w.source = done.source \
               AND w.idempotency_key = (SELECT h.idempotency_key FROM webhook_events AS h \
                 WHERE h.source = done.source AND h.order_entity = done.order_entity \
                   AND h.idempotency_key <> done.idempotency_key \
                   AND h.status IN ('queued', 'processing', 'failed', 'dead') \
                   AND h.status <> 'dead' AND h.expires_at > now() \
                 ORDER BY h.order_value IS NOT NULL, h.order_value, h.order_seq LIMIT 1)) \
             SELECT ",
            $returned,
            " FROM done"
        )
    };
}

/// What a completion writes, given the response's status, headers, body,
/// how much of the body was kept, and the retention in ms.
macro_rules! completed {
    ($status:literal, $headers:literal, $body:literal, $kept:literal, $retention:literal) => {
        concat!(
            "status = 'completed', token = NULL, lease_expires_at = NULL, \
             next_attempt_at = NULL, order_parked = NULL, completed_at = now(), \
             updated_at = date_trunc('milliseconds', now()), response_status = ",
            $status,
            ", response_headers = ",
            $headers,
            ", response_body = ",
            $body,
            ", response_body_kept = ",
            $kept,
            ", expires_at = now() + ",
            $retention,
            " * interval '1 millisecond' "
        )
    };
}

/// The completion of a row its token ($3) still holds: $1 source, $2 key,
/// then the response: $4 status, $5 headers, $6 body, $7 how much of the
/// body was kept; $8 retention ms.
macro_rules! completing {
    () => {
        concat!(
            "UPDATE webhook_events SET ",
            completed!("$4", "$5", "$6", "$7", "$8::bigint"),
            "WHERE source = $1 AND idempotency_key = $2 AND token = $3 AND expires_at > now()"
        )
    };
}

/// [`completing`] of an unordered row: one table update, nothing to wake.
/// Most completions are this; an ordered row is left to `COMPLETE`.
pub(super) const COMPLETE_UNORDERED: &str = concat!(completing!(), " AND order_entity IS NULL");

/// [`completing`] of a group's unordered rows (`group.rs`): one array per
/// parameter, in `completing`'s order. Returns each row completed with the
/// token that completed it. Run under [`LOOKUPS_BY_KEY`].
pub(super) const COMPLETE_UNORDERED_GROUP: &str = concat!(
    "UPDATE webhook_events AS w SET ",
    completed!("c.status", "c.headers", "c.body", "c.kept", "c.retention"),
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::bytea[], $6::bytea[], \
         $7::text[], $8::bigint[]) AS c(source, key, token, status, headers, body, kept, retention) \
     WHERE w.source = c.source AND w.idempotency_key = c.key AND w.token = c.token \
       AND w.expires_at > now() AND w.order_entity IS NULL \
     RETURNING w.source, w.idempotency_key, c.token"
);

/// For the transaction of a statement that joins a group's arrays to the
/// table: each item is found by the primary key, a nested loop of index
/// lookups, planned for the arrays and the table as they are now. A plan
/// kept from a young table's statistics would scan the whole table for
/// every group as it grows (it did: 10× slower within seconds).
pub(super) const LOOKUPS_BY_KEY: &str = "SET LOCAL plan_cache_mode = force_custom_plan; \
    SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; \
    SET LOCAL enable_mergejoin = off";

/// [`completing`] of any row. Returns a row when it completed; its entity
/// is woken.
pub(super) const COMPLETE: &str = waking!(
    concat!(
        completing!(),
        " RETURNING source, idempotency_key, order_entity"
    ),
    "true",
    "1"
);

/// By the row's duty: an accepted row is queued again ($14 ms ahead) or,
/// without $14, dead; any other takes $4 (failed or dead), keeping token
/// and lease when $5 holds them. Returns the state left; a death wakes
/// its entity.
pub(super) const FAIL: &str = waking!(
    "UPDATE webhook_events SET order_parked = NULL, \
    status = CASE WHEN NOT accepted THEN $4 WHEN $14::bigint IS NULL THEN 'dead' \
        ELSE 'queued' END, \
    updated_at = date_trunc('milliseconds', now()), \
    token = CASE WHEN $5::boolean AND NOT accepted THEN token END, \
    lease_expires_at = CASE WHEN $5::boolean AND NOT accepted THEN lease_expires_at END, \
    last_error = $6, last_status = $7, last_attempt_at = now(), route = $8, \
    request_method = $9, request_query = $10, request_headers = $11, request_body = $12, \
    expires_at = now() + $13::bigint * interval '1 millisecond', \
    next_attempt_at = CASE WHEN accepted \
        THEN now() + $14::bigint * interval '1 millisecond' END, \
    history = (SELECT array_to_string(lines[greatest(1, cardinality(lines) - 9):], E'\\n') \
        FROM (SELECT string_to_array(CASE WHEN history IS NULL OR history = '' THEN $15::text \
            ELSE history || E'\\n' || $15 END, E'\\n') AS lines) appended) \
     WHERE source = $1 AND idempotency_key = $2 AND token = $3 AND expires_at > now() \
     RETURNING source, idempotency_key, order_entity, status",
    "done.status = 'dead'",
    "done.status"
);

/// A released accepted event goes back to its queue, due now.
pub(super) const RELEASE: &str = "\
UPDATE webhook_events SET order_parked = NULL, \
    status = CASE WHEN status = 'processing' AND (accepted OR next_attempt_at IS NOT NULL) \
                  THEN 'queued' \
                  WHEN status = 'processing' THEN 'failed' ELSE status END, \
    next_attempt_at = CASE WHEN accepted OR next_attempt_at IS NOT NULL THEN now() END, \
    updated_at = CASE WHEN status = 'processing' \
        THEN date_trunc('milliseconds', now()) ELSE updated_at END, \
    token = NULL, lease_expires_at = NULL \
WHERE source = $1 AND idempotency_key = $2 AND token = $3 AND expires_at > now()";

/// Delete unless forced ($3), or a live claim holds the row, or its queue
/// still owes it a delivery.
/// Returns a row when it deleted; its entity is woken.
pub(super) const DELETE: &str = waking!(
    "DELETE FROM webhook_events \
     WHERE source = $1 AND idempotency_key = $2 AND expires_at > now() \
       AND ($3 OR ((lease_expires_at IS NULL OR lease_expires_at <= now()) \
                   AND status <> 'queued')) \
     RETURNING source, idempotency_key, order_entity",
    "true",
    "1"
);

pub(super) const EXISTS: &str = "SELECT 1 FROM webhook_events \
    WHERE source = $1 AND idempotency_key = $2 AND expires_at > now()";

/// One bounded step of the retention prune, per table.
pub(super) const PRUNE: [&str; 2] = [
    "DELETE FROM webhook_events WHERE ctid = ANY(ARRAY( \
        SELECT ctid FROM webhook_events WHERE expires_at <= now() LIMIT 1000))",
    "DELETE FROM replay_guards WHERE ctid = ANY(ARRAY( \
        SELECT ctid FROM replay_guards WHERE expires_at <= now() LIMIT 1000))",
];

/// Rows one prune step deletes at most.
pub(super) const PRUNE_BATCH: u64 = 1000;

pub(super) const SET_CONTROL: &str = "INSERT INTO hookgate_route_controls (space, route, value) \
    VALUES ($1, $2, $3) \
    ON CONFLICT (space, route) DO UPDATE SET value = excluded.value, updated_at = now()";

pub(super) const CLEAR_CONTROL: &str =
    "DELETE FROM hookgate_route_controls WHERE space = $1 AND route = $2";

pub(super) const CONTROLS: &str =
    "SELECT route, value FROM hookgate_route_controls WHERE space = $1";

/// A Unix-millisecond parameter as a timestamp (NULL stays NULL).
macro_rules! at {
    ($n:literal) => {
        concat!(
            "('epoch'::timestamptz + $",
            $n,
            "::bigint * interval '1 millisecond')"
        )
    };
}

/// ($1 source, $2 key): the live record whole, the database's now, then
/// its expiry (column 28).
pub(super) const EXPORT: &str = concat!(
    "SELECT ",
    record_columns!(
        "response_headers, response_body",
        "request_method, request_query, request_headers, request_body, history"
    ),
    ", ",
    ms!("expires_at"),
    " FROM webhook_events WHERE source = $1 AND idempotency_key = $2 AND expires_at > now()"
);

/// A copied record, as it was ($1 source, $2 key, $3.. its columns, $27..$29
/// its order, $30 its expiry). A live row changed at or after it is kept.
/// Returns a row when it wrote; the entity is woken (its settled head may
/// have come with the copy).
pub(super) const IMPORT: &str = waking!(
    concat!(
    "INSERT INTO webhook_events (source, idempotency_key, status, token, body_sha256, attempts, \
     first_seen_at, updated_at, lease_expires_at, completed_at, response_status, \
     response_headers, response_body, response_body_kept, last_error, last_status, \
     last_attempt_at, route, replay_of, request_method, request_query, request_headers, \
     request_body, history, next_attempt_at, accepted, order_entity, order_value, order_seq, \
     expires_at) VALUES ($1, $2, $3, $4, $5, $6, ",
    at!(7), ", ", at!(8), ", ", at!(9), ", ", at!(10),
    ", $11, $12, $13, $14, $15, $16, ",
    at!(17),
    ", $18, $19, $20, $21, $22, $23, $24, ",
    at!(25),
    ", $26, $27, $28, $29, ",
    at!(30),
    ") ON CONFLICT (source, idempotency_key) DO UPDATE SET status = excluded.status, \
     token = excluded.token, body_sha256 = excluded.body_sha256, attempts = excluded.attempts, \
     first_seen_at = excluded.first_seen_at, updated_at = excluded.updated_at, \
     lease_expires_at = excluded.lease_expires_at, completed_at = excluded.completed_at, \
     response_status = excluded.response_status, response_headers = excluded.response_headers, \
     response_body = excluded.response_body, response_body_kept = excluded.response_body_kept, \
     last_error = excluded.last_error, last_status = excluded.last_status, \
     last_attempt_at = excluded.last_attempt_at, route = excluded.route, \
     replay_of = excluded.replay_of, request_method = excluded.request_method, \
     request_query = excluded.request_query, request_headers = excluded.request_headers, \
     request_body = excluded.request_body, history = excluded.history, \
     next_attempt_at = excluded.next_attempt_at, accepted = excluded.accepted, \
     order_entity = excluded.order_entity, order_value = excluded.order_value, \
     order_seq = excluded.order_seq, expires_at = excluded.expires_at, order_parked = NULL \
     WHERE webhook_events.expires_at <= now() OR webhook_events.updated_at < excluded.updated_at \
     RETURNING source, idempotency_key, order_entity"
    ),
    "true",
    "1"
);

/// The replay guard of a copied record ($1 source, $2 the guard's id, $3 key,
/// $4 expiry), kept while it points at a live row.
pub(super) const IMPORT_GUARD: &str = concat!(
    "INSERT INTO replay_guards (source, body_sha256, first_key, expires_at) VALUES ($1, $2, $3, ",
    at!(4),
    ") ON CONFLICT (source, body_sha256) DO UPDATE SET first_key = excluded.first_key, \
     expires_at = excluded.expires_at \
     WHERE replay_guards.expires_at <= now() OR NOT EXISTS (SELECT 1 FROM webhook_events e \
     WHERE e.source = replay_guards.source AND e.idempotency_key = replay_guards.first_key \
       AND e.expires_at > now())"
);
