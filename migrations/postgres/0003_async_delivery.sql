-- hookgate's PostgreSQL schema, version 3: asynchronous delivery.
-- An async event knows when a delivery worker takes it up: its next attempt
-- while queued, the end of the worker's lease while one holds it. Workers
-- find due events through a partial index that holds async events only,
-- so synchronous claims never touch it. A nullable column is added in an
-- instant; the index is built without blocking writes.

ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz;

-- hookgate: concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_due ON webhook_events (source, next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
