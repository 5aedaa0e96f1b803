-- hookgate's PostgreSQL schema, version 10: an ordered lease that costs
-- what an entity's head costs, not what its backlog does (README, "Ordered
-- delivery"). A row that is not its entity's turn is parked: out of the due
-- index until a settle of its entity wakes its next head; `order_parked`
-- keeps when it was due, and is what listings show. Three partial indexes,
-- over ordered rows only, find an entity's head, its row in flight and its
-- newest delivered value without reading its history. Built without
-- blocking writes; unordered rows are in none of them.

ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS order_parked timestamptz;

-- hookgate: concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_head
    ON webhook_events (source, order_entity, (order_value IS NOT NULL), order_value, order_seq)
    WHERE order_entity IS NOT NULL AND status IN ('queued', 'processing', 'failed', 'dead');
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_flying
    ON webhook_events (source, order_entity)
    WHERE order_entity IS NOT NULL AND status = 'processing';
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_newest
    ON webhook_events (source, order_entity, order_value)
    WHERE order_entity IS NOT NULL AND status = 'completed' AND order_value IS NOT NULL;
