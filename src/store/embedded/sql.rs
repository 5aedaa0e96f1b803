//! The embedded store's SQL: the schema (with the columns added since the
//! first release) and one statement per operation. How the database thread
//! runs them is `run.rs`. Statements go through SQLite's statement cache,
//! so each is parsed once.

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS webhook_events (
    key              TEXT PRIMARY KEY,
    state            TEXT NOT NULL,     -- processing | failed | dead | completed
    token            TEXT,              -- fencing token of the holder, while processing
    body_sha256      TEXT NOT NULL,
    attempts         INTEGER NOT NULL,
    first_seen       INTEGER NOT NULL,  -- unix ms
    lease_until      INTEGER,           -- unix ms, while processing
    completed_at     INTEGER,           -- unix ms
    response_status  INTEGER,
    response_headers BLOB,              -- 'name: value' lines
    response_body    BLOB,
    expires_at       INTEGER NOT NULL,  -- unix ms; the row is forgotten after
    response_body_kept TEXT             -- whole | dropped | incomplete (NULL: whole)
);
CREATE INDEX IF NOT EXISTS webhook_events_expires_at ON webhook_events (expires_at);
CREATE TABLE IF NOT EXISTS replay_guards (
    body_key   TEXT PRIMARY KEY,
    first_key  TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS replay_guards_expires_at ON replay_guards (expires_at);
CREATE TABLE IF NOT EXISTS readiness_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at INTEGER NOT NULL                    -- unix ms of the last probe's write
);
CREATE TABLE IF NOT EXISTS route_controls (
    space      TEXT NOT NULL,              -- the key prefix
    route      TEXT NOT NULL,
    value      TEXT NOT NULL,              -- JSON: a pause, who set it and when
    updated_at INTEGER NOT NULL,           -- unix ms
    PRIMARY KEY (space, route)
);
";

/// Columns added after the first release, with their definitions: added at
/// open to a file created before them.
pub(super) const ADDED_COLUMNS: [(&str, &str); 18] = [
    ("response_body_kept", "TEXT"),
    ("updated_at", "INTEGER"),
    ("last_error", "TEXT"),
    ("last_status", "INTEGER"),
    ("last_attempt_at", "INTEGER"),
    ("route", "TEXT"),
    ("replay_of", "TEXT"),
    ("request_method", "TEXT"),
    ("request_query", "TEXT"),
    ("request_headers", "BLOB"),
    ("request_body", "BLOB"),
    ("next_attempt_at", "INTEGER"),
    ("due_source", "TEXT"),
    ("history", "TEXT"),
    ("order_entity", "TEXT"),
    ("order_value", "REAL"),
    ("order_seq", "INTEGER"),
    ("order_parked", "INTEGER"),
];

/// Run at every open, after the columns exist: rows from before dead
/// letters get their time of last change, `released` is now `failed`, and
/// every row is indexed by state and time for the listings (which replaces
/// the index of failed and dead rows only that came before it; building
/// it on a file from before takes a moment at its first open).
pub(super) const UPGRADE: &str = "
UPDATE webhook_events SET updated_at = first_seen WHERE updated_at IS NULL;
UPDATE webhook_events SET state = 'failed' WHERE state = 'released';
CREATE INDEX IF NOT EXISTS webhook_events_listing ON webhook_events (state, updated_at, key);
DROP INDEX IF EXISTS webhook_events_parked;
CREATE INDEX IF NOT EXISTS webhook_events_due_by_source
    ON webhook_events (due_source, next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_events_by_entity
    ON webhook_events (due_source, order_entity, order_seq) WHERE order_entity IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_events_order_seq
    ON webhook_events (order_seq) WHERE order_seq IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_events_head
    ON webhook_events (due_source, order_entity, order_value IS NOT NULL, order_value, order_seq)
    WHERE order_entity IS NOT NULL AND state IN ('queued', 'processing', 'failed', 'dead');
CREATE INDEX IF NOT EXISTS webhook_events_flying ON webhook_events (due_source, order_entity)
    WHERE order_entity IS NOT NULL AND state = 'processing';
CREATE INDEX IF NOT EXISTS webhook_events_newest
    ON webhook_events (due_source, order_entity, order_value)
    WHERE order_entity IS NOT NULL AND state = 'completed';
";

/// A record's columns, in the order [`record_from`] reads them; listings
/// read the same with the request and the response left out.
macro_rules! record_columns {
    ($response:literal, $request:literal) => {
        concat!(
            "state, token, body_sha256, attempts, first_seen, updated_at, lease_until, \
             completed_at, last_error, last_status, last_attempt_at, route, replay_of, \
             response_status, response_body_kept, ",
            $response,
            ", ",
            $request,
            ", coalesce(order_parked, next_attempt_at), due_source, order_entity, order_value, order_seq"
        )
    };
}

pub(super) const SELECT_LIVE: &str = concat!(
    "SELECT ",
    record_columns!(
        "response_headers, response_body",
        "request_method, request_query, request_headers, request_body, history"
    ),
    " FROM webhook_events WHERE key = ?1 AND expires_at > ?2"
);

/// The same, then its expiry (for `hookgate store copy`; column 27).
pub(super) const EXPORT: &str = concat!(
    "SELECT ",
    record_columns!(
        "response_headers, response_body",
        "request_method, request_query, request_headers, request_body, history"
    ),
    ", expires_at FROM webhook_events WHERE key = ?1 AND expires_at > ?2"
);

/// One page of a listing: ?1 state, ?2 now, keys in [?3, ?4) (one source),
/// the records before (?5 time, ?6 key) — (`i64::MAX`, "") for the first
/// page — ?7 rows, newest first. Read off the listing index as a range of
/// it, so a deep page reads no entry before the cursor; the state's
/// entries of other sources in that range are skipped (an embedded
/// gateway has few routes).
pub(super) const LIST: &str = concat!(
    "SELECT key, ",
    record_columns!("NULL, NULL", "NULL, NULL, NULL, NULL, NULL"),
    " FROM webhook_events INDEXED BY webhook_events_listing \
      WHERE state = ?1 AND (updated_at, key) < (?5, ?6) \
        AND expires_at > ?2 AND key >= ?3 AND key < ?4 \
      ORDER BY updated_at DESC, key DESC LIMIT ?7"
);

pub(super) const COUNT: &str = "SELECT count(*) FROM webhook_events \
     WHERE state = ?1 AND expires_at > ?2 AND key >= ?3 AND key < ?4";
/// Queued rows are async rows: the due index finds them.
pub(super) const COUNT_QUEUED: &str = "SELECT count(*) FROM webhook_events \
     WHERE due_source = ?3 AND next_attempt_at IS NOT NULL AND state = ?1 AND expires_at > ?2";
/// A source's queued rows and the bytes they take: key, stored request
/// and attempt history, plus 1,000 bytes a row for its other columns, its
/// index entries and the pages' slack — measured: a queue of 2,000 events
/// with 1 KB bodies grew the file by 2.2 KB an event (`Listing::queued`;
/// docs/operations/deploying.md, "Sizing").
pub(super) const QUEUED: &str = "SELECT count(*), coalesce(sum(1000 + length(key) \
     + coalesce(length(request_query), 0) + coalesce(length(request_headers), 0) \
     + coalesce(length(request_body), 0) + coalesce(length(history), 0)), 0) \
     FROM webhook_events \
     WHERE due_source = ?3 AND next_attempt_at IS NOT NULL AND state = ?1 AND expires_at > ?2";
pub(super) const OLDEST: &str = "SELECT min(updated_at) FROM webhook_events \
     WHERE state = ?1 AND expires_at > ?2 AND key >= ?3 AND key < ?4";
/// The oldest event waiting for its delivery — queued, or being tried
/// again after a failure — by when it was first seen.
pub(super) const OLDEST_QUEUED: &str = "SELECT min(first_seen) FROM webhook_events \
     WHERE due_source = ?3 AND next_attempt_at IS NOT NULL \
     AND (state = ?1 OR (state = 'processing' AND last_error IS NOT NULL)) AND expires_at > ?2";

pub(super) const EXISTS: &str = "SELECT 1 FROM webhook_events WHERE key = ?1 AND expires_at > ?2";

pub(super) const GUARD_FIRST_KEY: &str =
    "SELECT first_key FROM replay_guards WHERE body_key = ?1 AND expires_at > ?2";

/// Insert, or take over a row that may be claimed in mode ?7 (0 a
/// delivery, 1 a redelivery, 2 a forced one, 4 a claimed acceptance):
/// expired (then it starts over), failed, or processing with a lapsed
/// lease; dead too for a redelivery, completed for a forced one — never
/// under a live lease. An accepted row (`due_source` set) stays owed to its
/// queue: due again when the new lease ends. Anything else is left
/// untouched (no row returned) and answers from the record. A stored
/// request (?8..?13), when given, replaces the one kept.
pub(super) const CLAIM: &str = "\
INSERT INTO webhook_events \
    (key, state, token, body_sha256, attempts, first_seen, updated_at, lease_until, expires_at, \
     route, replay_of, request_method, request_query, request_headers, request_body, \
     next_attempt_at, due_source) \
VALUES (?1, CASE WHEN ?7 = 3 THEN 'queued' ELSE 'processing' END, \
    CASE WHEN ?7 = 3 THEN NULL ELSE ?2 END, ?3, CASE WHEN ?7 = 3 THEN 0 ELSE 1 END, ?4, ?4, \
    CASE WHEN ?7 = 3 THEN NULL ELSE ?5 END, ?6, ?8, ?9, ?10, ?11, ?12, ?13, \
    CASE ?7 WHEN 3 THEN ?4 WHEN 4 THEN ?5 END, CASE WHEN ?7 >= 3 THEN ?14 END) \
ON CONFLICT (key) DO UPDATE SET \
    state = excluded.state, token = excluded.token, body_sha256 = excluded.body_sha256, \
    attempts = CASE WHEN webhook_events.expires_at <= ?4 THEN excluded.attempts \
                    ELSE webhook_events.attempts + 1 END, \
    first_seen = CASE WHEN webhook_events.expires_at <= ?4 THEN ?4 \
                      ELSE webhook_events.first_seen END, \
    updated_at = ?4, lease_until = excluded.lease_until, expires_at = excluded.expires_at, \
    next_attempt_at = CASE WHEN webhook_events.expires_at <= ?4 THEN excluded.next_attempt_at \
        WHEN coalesce(excluded.due_source, webhook_events.due_source) IS NOT NULL \
        THEN excluded.lease_until END, \
    due_source = CASE WHEN webhook_events.expires_at <= ?4 THEN excluded.due_source \
        ELSE coalesce(excluded.due_source, webhook_events.due_source) END, \
    completed_at = NULL, response_status = NULL, response_headers = NULL, response_body = NULL, \
    response_body_kept = NULL, \
    last_error = CASE WHEN webhook_events.expires_at <= ?4 THEN NULL \
                      ELSE webhook_events.last_error END, \
    route = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL THEN excluded.route \
                 ELSE webhook_events.route END, \
    replay_of = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                     THEN excluded.replay_of ELSE webhook_events.replay_of END, \
    request_method = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                          THEN excluded.request_method ELSE webhook_events.request_method END, \
    request_query = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                         THEN excluded.request_query ELSE webhook_events.request_query END, \
    request_headers = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                           THEN excluded.request_headers ELSE webhook_events.request_headers END, \
    request_body = CASE WHEN webhook_events.expires_at <= ?4 OR ?10 IS NOT NULL \
                        THEN excluded.request_body ELSE webhook_events.request_body END \
WHERE webhook_events.expires_at <= ?4 \
   OR (?7 <> 3 AND (webhook_events.lease_until IS NULL OR webhook_events.lease_until <= ?4) \
       AND (webhook_events.state IN ('processing', 'failed', 'released') \
            OR (webhook_events.state IN ('dead', 'stale') AND ?7 >= 1) \
            OR (webhook_events.state = 'completed' AND ?7 = 2))) \
RETURNING attempts";

/// The due async events of source ?2 at ?1, at most ?3, walked in due
/// order on the per-source due index (never the whole table's backlog, nor
/// the source's key range, which holds every completed event too).
pub(super) const DUE: &str =
    "SELECT key FROM webhook_events INDEXED BY webhook_events_due_by_source \
    WHERE due_source = ?2 AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 \
      AND state IN ('queued', 'processing') AND expires_at > ?1 \
    ORDER BY next_attempt_at LIMIT ?3";

/// Lease due event ?1 to token ?2 until ?3, at ?4.
pub(super) const LEASE_DUE: &str = "\
UPDATE webhook_events SET state = 'processing', token = ?2, lease_until = ?3, \
    next_attempt_at = ?3, order_parked = NULL, attempts = attempts + 1, updated_at = ?4 \
WHERE key = ?1 AND next_attempt_at <= ?4 AND state IN ('queued', 'processing') \
  AND expires_at > ?4 \
RETURNING attempts";

pub(super) const SET_GUARD: &str = "\
INSERT INTO replay_guards (body_key, first_key, expires_at) VALUES (?1, ?2, ?3) \
ON CONFLICT (body_key) DO UPDATE SET \
    first_key = excluded.first_key, expires_at = excluded.expires_at";

/// An async event's next look is its lease's end.
pub(super) const RENEW: &str = "UPDATE webhook_events SET lease_until = ?3, \
     next_attempt_at = CASE WHEN next_attempt_at IS NOT NULL THEN ?3 END \
     WHERE key = ?1 AND token = ?2 AND expires_at > ?4";

/// Returns the row's source and entity (an ordered row's, to wake it).
pub(super) const COMPLETE: &str = "\
UPDATE webhook_events SET state = 'completed', token = NULL, lease_until = NULL, \
    next_attempt_at = NULL, order_parked = NULL, completed_at = ?3, updated_at = ?3, \
    response_status = ?4, response_headers = ?5, \
    response_body = ?6, expires_at = ?7, response_body_kept = ?8 \
WHERE key = ?1 AND token = ?2 AND expires_at > ?3 \
RETURNING due_source, order_entity";

/// ?3 the new state, ?5 hold (keep token and lease), ?14 the next attempt
/// of a requeued async event.
pub(super) const FAIL: &str = "\
UPDATE webhook_events SET state = ?3, updated_at = ?4, \
    token = CASE WHEN ?5 THEN token END, lease_until = CASE WHEN ?5 THEN lease_until END, \
    last_error = ?6, last_status = ?7, last_attempt_at = ?4, route = ?8, \
    request_method = ?9, request_query = ?10, request_headers = ?11, request_body = ?12, \
    expires_at = ?13, next_attempt_at = ?14, order_parked = NULL, history = ?15 \
WHERE key = ?1 AND token = ?2 AND expires_at > ?4";

/// An acceptance of ?1, a row nobody holds: accepted into the queue of ?3,
/// due now (?2), its attempts kept; ?4 body hash, ?5 expiry, ?6..?11 the
/// request (route, replay of, method, query, headers, body).
pub(super) const QUEUE: &str = "\
UPDATE webhook_events SET state = 'queued', token = NULL, lease_until = NULL, \
    next_attempt_at = ?2, due_source = ?3, body_sha256 = ?4, updated_at = ?2, expires_at = ?5, \
    route = coalesce(?6, route), replay_of = coalesce(?7, replay_of), \
    request_method = coalesce(?8, request_method), \
    request_query = CASE WHEN ?8 IS NULL THEN request_query ELSE ?9 END, \
    request_headers = coalesce(?10, request_headers), request_body = coalesce(?11, request_body) \
WHERE key = ?1";

/// An acceptance meeting a sync holder of ?1: accepted into the queue of
/// ?3, due when the lease ends; a held failure waits queued (at ?2).
pub(super) const ADOPT: &str = "\
UPDATE webhook_events SET due_source = ?3, next_attempt_at = lease_until, \
    state = CASE WHEN state = 'failed' THEN 'queued' ELSE state END, \
    token = CASE WHEN state = 'failed' THEN NULL ELSE token END, \
    lease_until = CASE WHEN state = 'failed' THEN NULL ELSE lease_until END, \
    updated_at = CASE WHEN state = 'failed' THEN ?2 ELSE updated_at END, \
    expires_at = max(expires_at, ?4), \
    route = coalesce(?5, route), request_method = coalesce(?6, request_method), \
    request_query = CASE WHEN ?6 IS NULL THEN request_query ELSE ?7 END, \
    request_headers = coalesce(?8, request_headers), request_body = coalesce(?9, request_body) \
WHERE key = ?1";

/// An operator's redelivery of queued ?1: due now (?2).
pub(super) const MAKE_DUE: &str = "UPDATE webhook_events SET next_attempt_at = ?2 WHERE key = ?1";

/// Whether ?1 (live at ?2) is accepted: owed a delivery by its queue.
/// The readiness probe: one write, so a read-only or full file shows.
pub(super) const PROBE: &str =
    "INSERT INTO readiness_probe (id, at) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET at = ?1";

pub(super) const ACCEPTED: &str = "SELECT due_source IS NOT NULL OR next_attempt_at IS NOT NULL, \
    history FROM webhook_events WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

/// A released async event goes back to its queue, due now.
pub(super) const RELEASE: &str = "\
UPDATE webhook_events SET \
    state = CASE WHEN state = 'processing' \
                      AND (next_attempt_at IS NOT NULL OR due_source IS NOT NULL) THEN 'queued' \
                 WHEN state = 'processing' THEN 'failed' ELSE state END, \
    updated_at = CASE WHEN state = 'processing' THEN ?3 ELSE updated_at END, \
    next_attempt_at = CASE WHEN next_attempt_at IS NOT NULL OR due_source IS NOT NULL \
                           THEN ?3 END, \
    token = NULL, lease_until = NULL \
WHERE key = ?1 AND token = ?2 AND expires_at > ?3";

/// Delete unless forced (?3), or a live claim holds the row, or its queue
/// still owes it a delivery.
pub(super) const DELETE: &str = "\
DELETE FROM webhook_events WHERE key = ?1 AND expires_at > ?2 \
  AND (?3 OR ((lease_until IS NULL OR lease_until <= ?2) AND state <> 'queued'))";

pub(super) const SET_CONTROL: &str = "INSERT INTO route_controls (space, route, value, updated_at) \
    VALUES (?1, ?2, ?3, ?4) \
    ON CONFLICT (space, route) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at";

pub(super) const CLEAR_CONTROL: &str = "DELETE FROM route_controls WHERE space = ?1 AND route = ?2";

pub(super) const CONTROLS: &str = "SELECT route, value FROM route_controls WHERE space = ?1";
