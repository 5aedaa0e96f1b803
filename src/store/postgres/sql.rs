//! The PostgreSQL store's SQL: the versioned migrations (files in
//! `migrations/postgres/`, compiled in), and one statement per operation.
//! Every time is the database's `now()`, so gateways with skewed clocks
//! agree; times leave the database as Unix milliseconds.

/// Every migration, in order: (version, SQL).
pub const MIGRATIONS: &[(i32, &str)] = &[(
    1,
    include_str!("../../../migrations/postgres/0001_webhook_events.sql"),
)];

/// Serializes migrations between gateways starting at once.
pub(super) const MIGRATION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtext('hookgate-migrations'))";

pub(super) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS hookgate_migrations (\
    version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())";

pub(super) const APPLIED: &str = "SELECT version FROM hookgate_migrations";

pub(super) const RECORD_APPLIED: &str = "INSERT INTO hookgate_migrations (version) VALUES ($1)";

/// `ms` as a Unix-millisecond expression of a timestamp column.
macro_rules! ms {
    ($column:literal) => {
        concat!("(extract(epoch FROM ", $column, ") * 1000)::bigint")
    };
}

/// The live record of ($1 source, $2 key), and the database's now.
pub(super) const SELECT_LIVE: &str = concat!(
    "SELECT status, token, body_sha256, attempts, ",
    ms!("first_seen_at"),
    ", ",
    ms!("lease_expires_at"),
    ", ",
    ms!("completed_at"),
    ", response_status, response_headers, response_body, response_body_kept, ",
    ms!("now()"),
    " FROM webhook_events WHERE source = $1 AND idempotency_key = $2 AND expires_at > now()"
);

pub(super) const NOW: &str = concat!("SELECT ", ms!("now()"));

/// Insert a new key; an existing row (of any state) is left alone, unlocked,
/// and nothing is returned. $5 lease and $6 retention in ms.
pub(super) const CLAIM_NEW: &str = "\
INSERT INTO webhook_events (source, idempotency_key, status, token, body_sha256, attempts, \
    first_seen_at, lease_expires_at, expires_at) \
VALUES ($1, $2, 'processing', $3, $4, 1, now(), \
    now() + $5::bigint * interval '1 millisecond', now() + $6::bigint * interval '1 millisecond') \
ON CONFLICT (source, idempotency_key) DO NOTHING \
RETURNING attempts";

/// Take over a row that may be claimed — expired, released, or processing
/// with a lapsed lease — in one statement; of concurrent takeovers the row
/// lock lets one through, the others find it no longer claimable.
pub(super) const TAKE_OVER: &str = "\
UPDATE webhook_events SET \
    status = 'processing', token = $3, body_sha256 = $4, \
    attempts = CASE WHEN expires_at <= now() THEN 1 ELSE attempts + 1 END, \
    first_seen_at = CASE WHEN expires_at <= now() THEN now() ELSE first_seen_at END, \
    lease_expires_at = now() + $5::bigint * interval '1 millisecond', \
    expires_at = now() + $6::bigint * interval '1 millisecond', \
    completed_at = NULL, response_status = NULL, response_headers = NULL, \
    response_body = NULL, response_body_kept = NULL \
WHERE source = $1 AND idempotency_key = $2 \
  AND (expires_at <= now() OR status = 'released' \
       OR (status = 'processing' AND lease_expires_at <= now())) \
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
    SET lease_expires_at = now() + $4::bigint * interval '1 millisecond' \
    WHERE source = $1 AND idempotency_key = $2 AND token = $3 AND expires_at > now()";

pub(super) const COMPLETE: &str = "\
UPDATE webhook_events SET status = 'completed', token = NULL, lease_expires_at = NULL, \
    completed_at = now(), response_status = $4, response_headers = $5, response_body = $6, \
    response_body_kept = $7, expires_at = now() + $8::bigint * interval '1 millisecond' \
WHERE source = $1 AND idempotency_key = $2 AND token = $3 AND expires_at > now()";

pub(super) const RELEASE: &str = "\
UPDATE webhook_events SET status = 'released', token = NULL, lease_expires_at = NULL \
WHERE source = $1 AND idempotency_key = $2 AND token = $3 AND expires_at > now()";

/// Delete unless forced ($3) or a live claim holds the row.
pub(super) const DELETE: &str = "\
DELETE FROM webhook_events WHERE source = $1 AND idempotency_key = $2 AND expires_at > now() \
  AND ($3 OR status <> 'processing' OR lease_expires_at <= now())";

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
