//! hookgate's integration tests, in one binary: real sockets, a real
//! `redis-server` per test, a real recording upstream.

mod async_delivery;
mod backup;
mod bulk;
mod cli;
mod cluster_spread;
mod conformance;
mod console;
mod copy;
mod dead_letters;
mod delivery;
mod demo;
mod entrances;
mod evidence;
mod fault_run;
mod faults;
mod fleet;
mod full_disk;
mod hostile;
mod keep_alive;
mod least_privilege;
mod migrate;
mod model;
mod observability;
mod postgres;
mod reload;
mod replay_cache;
mod roles;
mod schemes;
mod sdk;
mod search;
mod support;
mod tls;
mod tracing;
mod traffic;
mod upgrade;
