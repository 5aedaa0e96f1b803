//! One route's series (or one destination's delivery's), looked up in the
//! collectors once per loaded config instead of once per request: each
//! `with_label_values` hashes its labels and takes the vector's lock, and a
//! request counted the long way did that about eight times.
//!
//! Built with the route table at start-up and at every reload, so every
//! series a rate or a ratio needs exists at 0 before its first request.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge};

use super::{delivery_labels, Metrics, ATTEMPT_KINDS, OUTCOMES, SETTLEMENTS, UPSTREAM_CLASSES};

/// A route's (or a destination's delivery's) series.
pub struct RouteSeries {
    metrics: Metrics,
    /// `route` and `destination` labels.
    route: String,
    destination: String,
    /// `hookgate_requests_total`, one per [`OUTCOMES`] entry, in its
    /// order, each at 0 from the start, and its
    /// `hookgate_request_duration_seconds`, made on the outcome's first
    /// request (as it always was: a histogram per outcome at 0 would be
    /// twenty lines of `/metrics` each). A destination's delivery answers
    /// no sender: empty.
    requests: Vec<(IntCounter, OnceLock<Histogram>)>,
    in_flight: Option<IntGauge>,
    /// `hookgate_upstream_responses_total`, one per [`UPSTREAM_CLASSES`]
    /// entry, and the attempts' times.
    upstream: Vec<IntCounter>,
    upstream_duration: Histogram,
    /// `hookgate_attempts_total`, by entrance and settlement, each made
    /// on its first use (most pairs never happen on a route).
    attempts: [[OnceLock<IntCounter>; SETTLEMENTS.len()]; ATTEMPT_KINDS.len()],
    pub leases_lost: IntCounter,
    /// `hookgate_dead_letters_total`, present (at 0) from the start so a
    /// rate over it is defined.
    pub dead_letters: IntCounter,
    /// `hookgate_stale_events_total`, likewise.
    pub stale_events: IntCounter,
}

impl RouteSeries {
    /// The series of the route or delivery `name` (`route/destination` for
    /// a destination's), each created at 0 if it was not there.
    pub fn new(metrics: &Metrics, name: &str) -> Self {
        let (route, destination) = delivery_labels(name);
        let labels = [route, destination];
        let (requests, in_flight) = if destination.is_empty() {
            let requests = OUTCOMES
                .iter()
                .map(|outcome| {
                    let count = metrics.requests.with_label_values(&[route, outcome]);
                    (count, OnceLock::new())
                })
                .collect();
            (
                requests,
                Some(metrics.in_flight.with_label_values(&[route])),
            )
        } else {
            (Vec::new(), None)
        };
        let upstream = UPSTREAM_CLASSES
            .iter()
            .map(|class| {
                (metrics.upstream_responses).with_label_values(&[route, destination, class])
            })
            .collect();
        Self {
            metrics: metrics.clone(),
            route: route.to_owned(),
            destination: destination.to_owned(),
            requests,
            in_flight,
            upstream,
            upstream_duration: metrics.upstream_duration.with_label_values(&labels),
            attempts: Default::default(),
            leases_lost: metrics.leases_lost.with_label_values(&labels),
            dead_letters: metrics.dead_letters_total.with_label_values(&labels),
            stale_events: metrics.stale_events_total.with_label_values(&labels),
        }
    }

    /// Count one finished request of this route that ended in `outcome`.
    pub fn request_done(&self, outcome: &str, elapsed: Duration) {
        match slot(&OUTCOMES, outcome).and_then(|at| self.requests.get(at)) {
            Some((count, duration)) => {
                count.inc();
                let labels = [self.route.as_str(), outcome];
                (duration.get_or_init(|| self.metrics.request_duration.with_label_values(&labels)))
                    .observe(elapsed.as_secs_f64());
            }
            _ => (self.metrics).request_done(&self.route, outcome, elapsed),
        }
    }

    /// `hookgate_in_flight_requests{route}`, for a request of this route.
    pub fn in_flight(&self) -> Option<&IntGauge> {
        self.in_flight.as_ref()
    }

    /// One upstream attempt that ended in `class` (see
    /// [`UPSTREAM_CLASSES`]) after `elapsed`.
    pub fn upstream_attempt(&self, class: &str, elapsed: Duration) {
        match slot(&UPSTREAM_CLASSES, class) {
            Some(at) => self.upstream[at].inc(),
            None => (self.metrics.upstream_responses)
                .with_label_values(&[&self.route, &self.destination, class])
                .inc(),
        }
        self.upstream_duration.observe(elapsed.as_secs_f64());
    }

    /// One settled attempt of entrance `kind` (see [`ATTEMPT_KINDS`]),
    /// settled as `settled` (see [`SETTLEMENTS`]).
    pub fn attempt(&self, kind: &str, settled: &str) {
        let count = || {
            let labels = [self.route.as_str(), &self.destination, kind, settled];
            self.metrics.attempts.with_label_values(&labels)
        };
        match (slot(&ATTEMPT_KINDS, kind), slot(&SETTLEMENTS, settled)) {
            (Some(kind), Some(settled)) => self.attempts[kind][settled].get_or_init(count).inc(),
            _ => count().inc(),
        }
    }
}

/// Where `label` is in the fixed list `labels`: its handle's slot.
fn slot(labels: &[&str], label: &str) -> Option<usize> {
    labels.iter().position(|known| *known == label)
}

#[cfg(test)]
mod tests {
    use prometheus::Registry;

    use super::*;

    /// A route's counters exist at 0 from the start; a duration histogram
    /// only once its outcome has happened, as before the series were
    /// cached (one per outcome at 0 would be twenty lines of `/metrics`
    /// each).
    #[test]
    fn only_the_counters_start_at_zero() {
        let metrics = Metrics::new(&Registry::new());
        let series = RouteSeries::new(&metrics, "hook");
        let rendered = metrics.render();
        assert!(rendered
            .contains(r#"hookgate_requests_total{outcome="signature_invalid",route="hook"} 0"#));
        assert!(
            !rendered.contains("hookgate_request_duration_seconds_count"),
            "{rendered}"
        );
        series.request_done("forwarded", Duration::from_millis(3));
        let rendered = metrics.render();
        assert!(rendered.contains(r#"hookgate_requests_total{outcome="forwarded",route="hook"} 1"#));
        let durations = rendered
            .lines()
            .filter(|line| line.starts_with("hookgate_request_duration_seconds_count"))
            .collect::<Vec<_>>();
        assert_eq!(
            durations,
            [r#"hookgate_request_duration_seconds_count{outcome="forwarded",route="hook"} 1"#]
        );
    }
}
