//! A route's circuit breaker (docs/guide/traffic-control.md, "Traffic control"): after `failures` failed upstream
//! calls within `window`, no call is made for `open_for`; then one probe is
//! let through, and its outcome closes the breaker or opens it again.
//!
//! A failed call is one whose outcome was not final: a 5xx, 408, 429 or 3xx
//! answer, a refused connection, a timeout. The state is this instance's:
//! each gateway of a fleet judges the upstream by the calls it made itself.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use prometheus::{IntCounter, IntGauge};

use crate::config::BreakerSettings;

/// How long a caller refused while the probe is out should wait.
const PROBE_RETRY: Duration = Duration::from_secs(1);

pub struct Breaker {
    settings: BreakerSettings,
    state: Mutex<State>,
    /// `hookgate_circuit_breaker_open{route}`: 1 while calls are held.
    open: IntGauge,
    /// `hookgate_circuit_breaker_opened_total{route}`.
    opened: IntCounter,
    route: String,
}

enum State {
    /// Calls go through; the failures within the window are remembered.
    Closed { failures: VecDeque<Instant> },
    /// No call until `until`; then the first caller probes.
    Open { until: Instant },
    /// The probe is out.
    Probing,
}

/// Leave to call the upstream, from [`Breaker::admit`]. Report how the
/// call went with [`Ticket::report`]; a ticket dropped unreported (the call
/// was never made: the event was a duplicate) hands its probe to the next
/// caller.
pub struct Ticket {
    breaker: Arc<Breaker>,
    probe: bool,
    reported: bool,
}

impl Breaker {
    pub fn new(route: &str, settings: BreakerSettings, open: IntGauge, opened: IntCounter) -> Self {
        open.set(0);
        Self {
            settings,
            state: Mutex::new(State::Closed {
                failures: VecDeque::new(),
            }),
            open,
            opened,
            route: route.to_owned(),
        }
    }

    pub fn settings(&self) -> BreakerSettings {
        self.settings
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Leave for one call, or how long until the breaker lets one through.
    pub fn admit(self: &Arc<Self>) -> Result<Ticket, Duration> {
        let mut state = self.lock();
        let probe = match &*state {
            State::Closed { .. } => false,
            State::Open { until } => {
                let now = Instant::now();
                if *until > now {
                    return Err(*until - now);
                }
                *state = State::Probing;
                tracing::info!(route = %self.route, "circuit breaker half-open: probing the upstream");
                true
            }
            State::Probing => return Err(PROBE_RETRY),
        };
        Ok(Ticket {
            breaker: Arc::clone(self),
            probe,
            reported: false,
        })
    }

    /// `"closed"`, `"open"` or `"half_open"`, for the admin API.
    pub fn state(&self) -> &'static str {
        match &*self.lock() {
            State::Closed { .. } => "closed",
            State::Open { until } if *until <= Instant::now() => "half_open",
            State::Open { .. } => "open",
            State::Probing => "half_open",
        }
    }

    fn record(&self, probe: bool, success: bool) {
        let now = Instant::now();
        let mut state = self.lock();
        match &mut *state {
            State::Closed { failures } if !success => {
                failures.push_back(now);
                while failures
                    .front()
                    .is_some_and(|at| now.duration_since(*at) > self.settings.window)
                {
                    failures.pop_front();
                }
                if failures.len() >= self.settings.failures as usize {
                    *state = self.trip(now, "failures within the window");
                }
            }
            State::Probing if probe && success => {
                *state = State::Closed {
                    failures: VecDeque::new(),
                };
                self.open.set(0);
                tracing::info!(route = %self.route, "circuit breaker closed: the probe succeeded");
            }
            State::Probing if probe => {
                *state = self.trip(now, "the probe failed");
            }
            // A call admitted before the breaker opened: its outcome is
            // no news.
            _ => {}
        }
    }

    fn trip(&self, now: Instant, why: &'static str) -> State {
        self.open.set(1);
        self.opened.inc();
        tracing::warn!(
            route = %self.route,
            why,
            open_for_ms = self.settings.open_for.as_millis() as u64,
            "circuit breaker open: the upstream is not called"
        );
        State::Open {
            until: now + self.settings.open_for,
        }
    }

    /// The probe was never used: the next caller probes instead.
    fn unused_probe(&self) {
        let mut state = self.lock();
        if matches!(*state, State::Probing) {
            *state = State::Open {
                until: Instant::now(),
            };
        }
    }
}

impl Ticket {
    /// Whether this call is the half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// How the call went: `true` for a final answer (2xx, or a 4xx but 408
    /// and 429).
    pub fn report(mut self, success: bool) {
        self.reported = true;
        self.breaker.record(self.probe, success);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.probe && !self.reported {
            self.breaker.unused_probe();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(failures: u32, window_ms: u64, open_ms: u64) -> Arc<Breaker> {
        let settings = BreakerSettings {
            failures,
            window: Duration::from_millis(window_ms),
            open_for: Duration::from_millis(open_ms),
        };
        let open = IntGauge::new("open", "open").unwrap();
        let opened = IntCounter::new("opened", "opened").unwrap();
        Arc::new(Breaker::new("r", settings, open, opened))
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_failures_in_the_window_then_probes_once() {
        let breaker = breaker(3, 60_000, 50);
        for _ in 0..2 {
            breaker.admit().unwrap().report(false);
        }
        breaker.admit().unwrap().report(true);
        assert_eq!(breaker.state(), "closed", "successes do not trip it");
        breaker.admit().unwrap().report(false);
        assert_eq!(breaker.state(), "open");
        assert_eq!(breaker.opened.get(), 1);
        assert_eq!(breaker.open.get(), 1);
        assert!(breaker.admit().is_err(), "no call while open");

        tokio::time::advance(Duration::from_millis(49)).await;
        assert!(breaker.admit().is_err(), "still open just before open_for");
        tokio::time::advance(Duration::from_millis(1)).await;
        let probe = breaker.admit().expect("one probe after open_for");
        assert!(breaker.admit().is_err(), "only one probe at a time");
        probe.report(false);
        assert_eq!(breaker.state(), "open", "a failed probe opens it again");
        assert_eq!(breaker.opened.get(), 2);

        tokio::time::advance(Duration::from_millis(50)).await;
        breaker.admit().unwrap().report(true);
        assert_eq!(breaker.state(), "closed");
        assert_eq!(breaker.open.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_outside_the_window_are_forgotten() {
        let breaker = breaker(2, 30, 1_000);
        breaker.admit().unwrap().report(false);
        tokio::time::advance(Duration::from_millis(31)).await;
        breaker.admit().unwrap().report(false);
        assert_eq!(breaker.state(), "closed");
        tokio::time::advance(Duration::from_millis(29)).await;
        breaker.admit().unwrap().report(false);
        assert_eq!(breaker.state(), "open", "two failures within the window");
    }

    #[test]
    fn an_unused_probe_passes_to_the_next_caller() {
        let breaker = breaker(1, 60_000, 0);
        breaker.admit().unwrap().report(false);
        let probe = breaker.admit().unwrap();
        drop(probe);
        breaker
            .admit()
            .expect("the probe is handed on")
            .report(true);
        assert_eq!(breaker.state(), "closed");
    }
}
