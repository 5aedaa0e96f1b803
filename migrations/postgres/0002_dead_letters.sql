-- hookgate's PostgreSQL schema, version 2: failed and dead records keep
-- the request and their last error (SPEC §6), every row knows when it last
-- changed (listings are newest first by it), and `released` is now called
-- `failed`. Rows written by a gateway of version 1 during a rolling upgrade
-- still read correctly: `updated_at` has a default and `released` is read
-- as `failed`.

ALTER TABLE webhook_events
    ADD COLUMN updated_at      timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
    ADD COLUMN last_error      text,         -- refused | not_delivered | unknown
    ADD COLUMN last_status     smallint,     -- the upstream's status, when it answered
    ADD COLUMN last_attempt_at timestamptz,
    ADD COLUMN route           text,         -- the route whose request is kept
    ADD COLUMN replay_of       text,         -- a replay: the idempotency_key it replays
    ADD COLUMN request_method  text,
    ADD COLUMN request_query   text,
    ADD COLUMN request_headers bytea,        -- 'name: value' lines, as forwarded
    ADD COLUMN request_body    bytea;

UPDATE webhook_events SET updated_at = date_trunc('milliseconds', first_seen_at);
UPDATE webhook_events SET status = 'failed' WHERE status = 'released';

-- Listings of failed and dead events (and the dead-letter gauge): one
-- source and state, newest first. Only those rows: a claim and its
-- completion never touch this index. Listings of processing and completed
-- rows walk the primary key of their source instead.
CREATE INDEX webhook_events_parked
    ON webhook_events (source, status, updated_at DESC, idempotency_key COLLATE "C" DESC)
    WHERE status IN ('failed', 'dead');
