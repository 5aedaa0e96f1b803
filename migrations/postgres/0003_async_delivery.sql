-- hookgate's PostgreSQL schema, version 3: asynchronous delivery (SPEC §7).
-- An async event knows when a delivery worker takes it up: its next attempt
-- while queued, the end of the worker's lease while one holds it. Workers
-- find due events through a partial index that holds async events only,
-- so synchronous claims never touch it.

ALTER TABLE webhook_events ADD COLUMN next_attempt_at timestamptz;

CREATE INDEX webhook_events_due ON webhook_events (source, next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
