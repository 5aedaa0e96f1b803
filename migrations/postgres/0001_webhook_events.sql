-- hookgate's PostgreSQL schema, version 1: the seed guide's webhook_events
-- table (idempotency_key, source, status, response_status, response_body,
-- first_seen_at, completed_at, attempts) plus hookgate's own columns, and
-- the replay guards. Applied once, under an advisory lock, by the first
-- gateway that starts; recorded in hookgate_migrations.

CREATE TABLE IF NOT EXISTS webhook_events (
    source             text        NOT NULL,  -- {key_prefix}{scope}
    idempotency_key    text        NOT NULL,  -- the sender's event id
    status             text        NOT NULL,  -- processing | released | completed
    response_status    smallint,
    response_body      bytea,
    first_seen_at      timestamptz NOT NULL,
    completed_at       timestamptz,
    attempts           integer     NOT NULL,
    token              text,                  -- fencing token of the holder, while processing
    lease_expires_at   timestamptz,           -- while processing
    body_sha256        text        NOT NULL,  -- of the request body that claimed the key
    response_headers   bytea,                 -- 'name: value' lines
    response_body_kept text,                  -- whole | dropped | incomplete
    expires_at         timestamptz NOT NULL,  -- the row is pruned after this
    PRIMARY KEY (source, idempotency_key)
);

-- Retention pruning walks this index in bounded batches.
CREATE INDEX IF NOT EXISTS webhook_events_expires_at ON webhook_events (expires_at);

CREATE TABLE IF NOT EXISTS replay_guards (
    source      text        NOT NULL,
    body_sha256 text        NOT NULL,
    first_key   text        NOT NULL,  -- the idempotency_key that last claimed the body
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (source, body_sha256)
);

CREATE INDEX IF NOT EXISTS replay_guards_expires_at ON replay_guards (expires_at);
