-- hookgate's PostgreSQL schema, version 4: route controls.
-- A paused route is paused for every gateway sharing this database and key
-- prefix (`space`), and stays paused across restarts. Gateways read the
-- whole table about once a second; it holds one row per paused route.

CREATE TABLE IF NOT EXISTS hookgate_route_controls (
    space      text NOT NULL,
    route      text NOT NULL,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space, route)
);
