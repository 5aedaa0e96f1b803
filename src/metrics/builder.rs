//! Building a collector from its line of the table (`table.rs`) and
//! registering it, its names remembered for [`super::Metrics::names`].

use prometheus::core::Collector;
use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry,
};

use super::table::{Described, DESCRIBED};

pub(super) struct Builder<'a> {
    pub(super) registry: &'a Registry,
    /// Every metric name registered so far.
    pub(super) names: Vec<String>,
}

impl Builder<'_> {
    /// Register `collector`, remembering its names.
    pub(super) fn register(&mut self, collector: Box<dyn Collector>) {
        let names = collector
            .desc()
            .into_iter()
            .map(|desc| desc.fq_name.clone());
        self.names.extend(names);
        self.registry
            .register(collector)
            .expect("metric names are unique");
    }

    fn add<C: Collector + Clone + 'static>(&mut self, collector: C) -> C {
        self.register(Box::new(collector.clone()));
        collector
    }

    pub(super) fn counters(&mut self, name: &str) -> IntCounterVec {
        let (name, labels, help) = described(name);
        self.add(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    pub(super) fn int_gauges(&mut self, name: &str) -> IntGaugeVec {
        let (name, labels, help) = described(name);
        self.add(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    pub(super) fn gauges(&mut self, name: &str) -> GaugeVec {
        let (name, labels, help) = described(name);
        self.add(GaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    pub(super) fn histograms(
        &mut self,
        name: &str,
        buckets: prometheus::Result<Vec<f64>>,
    ) -> HistogramVec {
        let (name, labels, help) = described(name);
        let opts = HistogramOpts::new(name, help).buckets(buckets.expect("valid buckets"));
        self.add(HistogramVec::new(opts, labels).expect("valid metric"))
    }

    pub(super) fn int_gauge(&mut self, name: &str) -> IntGauge {
        let (name, _, help) = described(name);
        self.add(IntGauge::new(name, help).expect("valid metric"))
    }

    pub(super) fn gauge(&mut self, name: &str) -> Gauge {
        let (name, _, help) = described(name);
        self.add(Gauge::new(name, help).expect("valid metric"))
    }

    pub(super) fn int_counter(&mut self, name: &str) -> IntCounter {
        let (name, _, help) = described(name);
        self.add(IntCounter::new(name, help).expect("valid metric"))
    }
}

/// `name`'s line of the table.
fn described(name: &str) -> Described {
    *(DESCRIBED.iter())
        .find(|(described, ..)| *described == name)
        .unwrap_or_else(|| panic!("{name} is not in metrics/table.rs"))
}
