-- hookgate's PostgreSQL schema, version 2: failed and dead records keep
-- the request and their last error, every row knows when it last changed
-- (listings are newest first by it), and `released` is now called
-- `failed`. Written for a live table (docs/operations.md, "Upgrading"):
-- the columns are added in an instant (a constant default is not written
-- to the rows), the existing rows get their time of last change in
-- batches of their own transactions, and the index is built without
-- blocking writes. Gateways of version 1 keep serving throughout: their
-- rows get `updated_at` from its default, and a `released` row they write
-- later is read as `failed`.

ALTER TABLE webhook_events
    ADD COLUMN IF NOT EXISTS updated_at      timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
    ADD COLUMN IF NOT EXISTS last_error      text,         -- refused | not_delivered | unknown
    ADD COLUMN IF NOT EXISTS last_status     smallint,     -- the upstream's status, when it answered
    ADD COLUMN IF NOT EXISTS last_attempt_at timestamptz,
    ADD COLUMN IF NOT EXISTS route           text,         -- the route whose request is kept
    ADD COLUMN IF NOT EXISTS replay_of       text,         -- a replay: the idempotency_key it replays
    ADD COLUMN IF NOT EXISTS request_method  text,
    ADD COLUMN IF NOT EXISTS request_query   text,
    ADD COLUMN IF NOT EXISTS request_headers bytea,        -- 'name: value' lines, as forwarded
    ADD COLUMN IF NOT EXISTS request_body    bytea;

-- hookgate: batches
-- Rows from before this version got the moment the column was added; a
-- row written since (by either version) has its own. No gateway of this
-- version writes until the migration is recorded, so every row whose
-- `updated_at` is not its first claim's is one from before.
UPDATE webhook_events SET updated_at = date_trunc('milliseconds', first_seen_at),
       status = CASE WHEN status = 'released' THEN 'failed' ELSE status END
 WHERE ctid = ANY(ARRAY(SELECT ctid FROM webhook_events
                         WHERE updated_at <> date_trunc('milliseconds', first_seen_at)
                            OR status = 'released'
                         LIMIT 10000));

-- hookgate: concurrently
-- Listings of failed and dead events (and the dead-letter gauge): one
-- source and state, newest first. Only those rows: a claim and its
-- completion never touch this index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_parked
    ON webhook_events (source, status, updated_at DESC, idempotency_key COLLATE "C" DESC)
    WHERE status IN ('failed', 'dead');
