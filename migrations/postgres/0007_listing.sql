-- hookgate's PostgreSQL schema, version 7: every listing the admin API
-- and the console offer is served by an index — one source and state,
-- newest first, a page after a cursor — so a listing of a million
-- completed events reads one page of index entries instead of sorting the
-- route. It holds every row, so it replaces the failed-and-dead index
-- that only those listings used. The cost on the success path is one more
-- index entry per claim and per completion: 8% fewer claim + completion
-- pairs per second on the benchmark machine (BENCHMARKS.md). Built
-- without blocking writes.

-- hookgate: concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_listing
    ON webhook_events (source, status, updated_at DESC, idempotency_key COLLATE "C" DESC);
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_parked;
