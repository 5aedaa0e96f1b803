-- hookgate's PostgreSQL schema, version 5: a record remembers that it was
-- accepted for asynchronous delivery. Whatever ends an attempt — by a
-- worker, a sender, an operator; a failure, a release, a lapsed lease —
-- an accepted event goes back to its queue, whatever mode its route has
-- now. Rows queued before this version are accepted rows.

ALTER TABLE webhook_events ADD COLUMN accepted boolean NOT NULL DEFAULT false;
UPDATE webhook_events SET accepted = true WHERE next_attempt_at IS NOT NULL;
