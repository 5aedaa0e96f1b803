//! hookgate's one clock. Nothing else reads the system's clocks (clippy
//! refuses `std::time::Instant` and `SystemTime::now` elsewhere): elapsed
//! time is `tokio::time::Instant`, which tests pause and advance
//! (`#[tokio::test(start_paused = true)]`), and wall time is [`Clock`] or,
//! for a signature's timestamp, [`wall`].
//!
//! [`Clock`] is Unix milliseconds that never step: the engine's, and the
//! store time of the backends that keep their own (memory, embedded).
//!
//! The clock reads the wall clock once, at start, and moves on from there
//! with the monotonic clock, so a forward step of the system clock (NTP, an
//! operator) cannot expire a live lease, and a backward step cannot stretch
//! one. Across a restart it re-anchors to the wall clock; the leases it
//! stamped before belonged to the process that died. Tests move it forward
//! with [`Clock::advance`] instead of sleeping until a lease runs out.
//!
//! Redis keeps its own clock (`TIME` in every script), so that every gateway
//! of a fleet judges leases by one clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// A shared handle: clones read (and advance) the same time.
#[derive(Clone, Debug)]
pub struct Clock(Arc<Anchor>);

#[derive(Debug)]
struct Anchor {
    /// Wall-clock Unix milliseconds at `started`.
    unix_ms: u64,
    started: Instant,
    /// Added by [`Clock::advance`].
    advanced_ms: AtomicU64,
}

/// The wall clock, now: for what is judged against a sender's own clock
/// (a signature's timestamp), and to anchor a [`Clock`].
#[allow(clippy::disallowed_methods)] // the one read of the system clock
pub fn wall() -> SystemTime {
    SystemTime::now()
}

impl Clock {
    /// Anchored to the wall clock now.
    pub fn system() -> Self {
        let unix_ms = wall()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self::anchored(unix_ms, Instant::now())
    }

    /// This clock's time as a `SystemTime`.
    pub fn system_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now_ms())
    }

    fn anchored(unix_ms: u64, started: Instant) -> Self {
        Self(Arc::new(Anchor {
            unix_ms,
            started,
            advanced_ms: AtomicU64::new(0),
        }))
    }

    /// Unix milliseconds.
    pub fn now_ms(&self) -> u64 {
        let anchor = &self.0;
        anchor.unix_ms
            + anchor.started.elapsed().as_millis() as u64
            + anchor.advanced_ms.load(Ordering::Relaxed)
    }

    /// Move this clock (and its clones) forward: leases and retentions run
    /// out as if `by` had passed.
    pub fn advance(&self, by: Duration) {
        self.0
            .advanced_ms
            .fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_with_the_monotonic_clock_from_its_anchor() {
        let started = Instant::now();
        let clock = Clock::anchored(1_000_000, started);
        let now = clock.now_ms();
        assert!((1_000_000..1_000_000 + 1_000).contains(&now), "{now}");
        let copy = clock.clone();
        copy.advance(Duration::from_secs(30));
        assert!(clock.now_ms() >= now + 30_000, "clones share the time");
        assert!(clock.now_ms() < now + 31_000);
    }
}
