//! Real components for the integration tests, one file per concern: a
//! `redis-server` on a free port that a test can kill and restart (and a real
//! cluster), a recording upstream that counts side effects per idempotency
//! key, the gateway itself on 127.0.0.1:0 or as the real binary, a signing
//! sender, a test PKI, metric scraping, and a PgBouncer in front of a
//! test database.

mod admin;
mod browser;
mod cli;
mod gateway;
mod metrics;
mod old_redis;
mod pgbouncer;
mod pki;
mod postgres;
mod redis;
mod sender;
mod sender_api;
mod sentinel;
pub mod stores;
mod upstream;

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

pub use self::admin::*;
pub use self::browser::*;
pub use self::cli::*;
pub use self::gateway::*;
pub use self::metrics::*;
pub use self::old_redis::*;
pub use self::pgbouncer::*;
pub use self::pki::*;
pub use self::postgres::*;
pub use self::redis::*;
pub use self::sender::*;
pub use self::sender_api::*;
pub use self::sentinel::*;
pub use self::upstream::*;

pub use std::future::ready;

pub const SECRET: &str = "test-secret-0123456789";

/// Held by the tests that load the machine for tens of seconds — the
/// fault runs, the cluster failovers, the big-table upgrade — so that they
/// run one at a time instead of starving each other (and their stores'
/// deadlines) on a 2-core CI machine.
pub async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    HEAVY.lock().await
}

/// Poll `check` every 20 ms until it holds or `within` passes; the one
/// deadline loop of the suite.
pub async fn eventually<F: Future<Output = bool>>(
    within: Duration,
    mut check: impl FnMut() -> F,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check().await
}

/// Ticks `every` apart for a loop that paces what it sends (the first at
/// once); a tick missed while a request ran is not made up in a burst.
pub fn pace(every: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

/// A clock for what a test builds (a gateway, a store): each its own, as
/// each process has one.
#[allow(clippy::disallowed_methods)]
pub fn clock() -> hookgate::clock::Clock {
    hookgate::clock::Clock::system()
}

/// A port free now, and never handed out before in this process: the
/// kernel may give a port just released by one call to the next, and a
/// test that asks for two (a gateway's public and admin listeners) would
/// then get one port twice.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}
