//! The PostgreSQL schema's versions as SQL: the migrations (files in
//! `migrations/postgres/`, compiled in) and the statements that apply and
//! record them (`schema.rs` runs them, or prints them for `psql`).

/// Every migration, in order: (version, SQL).
pub const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        include_str!("../../../migrations/postgres/0001_webhook_events.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/postgres/0002_dead_letters.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/postgres/0003_async_delivery.sql"),
    ),
    (
        4,
        include_str!("../../../migrations/postgres/0004_route_controls.sql"),
    ),
    (
        5,
        include_str!("../../../migrations/postgres/0005_accepted.sql"),
    ),
    (
        6,
        include_str!("../../../migrations/postgres/0006_history.sql"),
    ),
    (
        7,
        include_str!("../../../migrations/postgres/0007_listing.sql"),
    ),
    (
        8,
        include_str!("../../../migrations/postgres/0008_listing_by_state.sql"),
    ),
    (
        9,
        include_str!("../../../migrations/postgres/0009_ordering.sql"),
    ),
    (
        10,
        include_str!("../../../migrations/postgres/0010_ordering_parked.sql"),
    ),
];

/// For the migration's own session only.
pub(super) const NO_STATEMENT_TIMEOUT: &str = "SET statement_timeout = 0";

/// A migration's transaction waits this long at most for a lock (an
/// `ALTER TABLE` behind a gateway's long read): while it waits, every
/// gateway's query on the table waits behind it.
pub(super) const MIGRATION_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '100ms'";

/// Serializes migrations between gateways starting at once, and `psql`
/// running `hookgate migrate --print`'s script: a session's lock, since
/// index builds run outside transactions.
pub(super) const MIGRATION_LOCK: &str = "SELECT pg_advisory_lock(hashtext('hookgate-migrations'))";

pub(super) const TRY_MIGRATION_LOCK: &str =
    "SELECT pg_try_advisory_lock(hashtext('hookgate-migrations'))";

pub(super) const MIGRATION_UNLOCK: &str =
    "SELECT pg_advisory_unlock(hashtext('hookgate-migrations'))";

/// ($1 name) a row when the index exists and is invalid.
pub(super) const INVALID_INDEX: &str =
    "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid";

pub(super) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS hookgate_migrations (\
    version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())";

pub(super) const APPLIED: &str = "SELECT version FROM hookgate_migrations";

pub(super) const RECORD_APPLIED: &str =
    "INSERT INTO hookgate_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING";
