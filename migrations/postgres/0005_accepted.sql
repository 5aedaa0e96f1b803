-- hookgate's PostgreSQL schema, version 5: a record remembers that it was
-- accepted for asynchronous delivery. Whatever ends an attempt — by a
-- worker, a sender, an operator; a failure, a release, a lapsed lease —
-- an accepted event goes back to its queue, whatever mode its route has
-- now. Rows queued before this version are accepted rows: marked in
-- batches found through the due index (a constant default is not written
-- to the rows, so the column is added in an instant).

ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS accepted boolean NOT NULL DEFAULT false;

-- hookgate: batches
UPDATE webhook_events SET accepted = true
 WHERE ctid = ANY(ARRAY(SELECT ctid FROM webhook_events
                         WHERE next_attempt_at IS NOT NULL AND NOT accepted
                         LIMIT 10000));
