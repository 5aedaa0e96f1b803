//! hookgate's integration tests, in one binary: real sockets, a real
//! `redis-server` per test, a real recording upstream.

// Deeply nested request futures (the gateway's stages around each store
// operation): computing their layouts needs more than the default 128.
#![recursion_limit = "256"]

mod async_delivery;
mod at_rest;
mod backup;
mod bulk;
mod cli;
mod cluster_spread;
mod composition;
mod conformance;
mod console;
mod console_blocked;
mod copy;
mod dead_letters;
mod delivery;
mod demo;
mod described;
mod destinations;
mod entrances;
mod evidence;
mod fault_run;
mod faults;
mod fetched_keys;
mod filters;
mod fleet;
mod full_disk;
mod hostile;
mod keep_alive;
mod least_privilege;
mod matrix;
mod migrate;
mod model;
mod notify;
mod observability;
mod ordering;
mod ordering_crashes;
mod packed;
mod postgres;
mod queue_bounds;
mod reconcile;
mod reencrypt;
mod reload;
mod replay_cache;
mod roles;
mod schemes;
mod sdk;
mod search;
mod sentinel;
mod sns;
mod support;
mod tls;
mod tracing;
mod traffic;
mod transitions;
mod upgrade;
