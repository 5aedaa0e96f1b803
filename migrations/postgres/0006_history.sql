-- hookgate's PostgreSQL schema, version 6: a record keeps its last failed
-- attempts (when, by which entrance, how it failed, the upstream's status,
-- how long the call took, the error text, the start of the upstream's
-- error body), one JSON object per line, the newest last, at most ten.
-- Only a failure writes it. Adding a nullable column without a default
-- changes the catalogue only: no rewrite, the lock is held for an instant.

ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS history text;
