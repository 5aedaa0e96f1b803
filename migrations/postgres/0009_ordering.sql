-- hookgate's PostgreSQL schema, version 9: ordered delivery per entity
-- (README, "Ordered delivery"). An accepted event of an ordered route
-- names its entity, its `stale_by` value and its place in one sequence
-- shared by the whole database (so every gateway of a fleet orders alike).
-- The columns have no default: they are added in an instant, and rows from
-- before are unordered. The index by entity finds an entity's pending rows
-- and is built without blocking writes.

ALTER TABLE webhook_events
    ADD COLUMN IF NOT EXISTS order_entity text,
    ADD COLUMN IF NOT EXISTS order_value double precision,
    ADD COLUMN IF NOT EXISTS order_seq bigint;
CREATE SEQUENCE IF NOT EXISTS hookgate_order_seq;

-- hookgate: concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_by_entity
    ON webhook_events (source, order_entity, order_seq) WHERE order_entity IS NOT NULL;
