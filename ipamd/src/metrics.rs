//! The daemon's Prometheus metrics (prometheus-client): the pool's gauges, EC2 calls by
//! operation and outcome, ENI-state pushes to ferruled, and their text encoding for
//! `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::pool::Stats;

/// Labels of an EC2 call: the API operation and how it ended (`ok`, `throttled`,
/// `server_error`, `timeout`, `network`, `client_error`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub operation: String,
    pub outcome: String,
}

/// Labels of an EC2 error: the operation and the error code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub operation: String,
    pub code: String,
}

/// Labels of a push to ferruled: `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabels {
    pub outcome: String,
}

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    pub enis: Gauge,
    pub ips_total: Gauge,
    pub ips_assigned: Gauge,
    pub ips_warm: Gauge,
    pub ips_cooling: Gauge,
    pub max_pod_ips: Gauge,
    pub ec2_calls: Family<CallLabels, Counter>,
    pub ec2_errors: Family<ErrorLabels, Counter>,
    pub ferruled_pushes: Family<PushLabels, Counter>,
    pub reconciles: Counter,
    pub dropped_allocations: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("ferrule_ipamd");
        let m = Metrics {
            registry: Registry::default(),
            enis: Gauge::default(),
            ips_total: Gauge::default(),
            ips_assigned: Gauge::default(),
            ips_warm: Gauge::default(),
            ips_cooling: Gauge::default(),
            max_pod_ips: Gauge::default(),
            ec2_calls: Family::default(),
            ec2_errors: Family::default(),
            ferruled_pushes: Family::default(),
            reconciles: Counter::default(),
            dropped_allocations: Counter::default(),
        };
        registry.register("enis", "ENIs attached to the instance", m.enis.clone());
        registry.register(
            "ips_total",
            "Secondary IPv4 addresses on the ENIs",
            m.ips_total.clone(),
        );
        registry.register(
            "ips_assigned",
            "Addresses held by pods",
            m.ips_assigned.clone(),
        );
        registry.register("ips_warm", "Addresses ready for a pod", m.ips_warm.clone());
        registry.register(
            "ips_cooling",
            "Addresses released less than the cooling period ago",
            m.ips_cooling.clone(),
        );
        registry.register(
            "max_pod_ips",
            "The most pod addresses the node can hold",
            m.max_pod_ips.clone(),
        );
        registry.register(
            "ec2_calls",
            "EC2 API calls (each attempt) by operation and outcome",
            m.ec2_calls.clone(),
        );
        registry.register(
            "ec2_errors",
            "EC2 API errors by operation and error code",
            m.ec2_errors.clone(),
        );
        registry.register(
            "ferruled_pushes",
            "vpc.sync pushes to ferruled by outcome",
            m.ferruled_pushes.clone(),
        );
        registry.register("reconciles", "Reconcile rounds run", m.reconciles.clone());
        registry.register(
            "dropped_allocations",
            "Pod addresses dropped because EC2 no longer has them",
            m.dropped_allocations.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Sets the pool's gauges.
    pub fn set_pool(&self, enis: usize, stats: &Stats, max_pod_ips: u32) {
        self.enis.set(enis as i64);
        self.ips_total.set(i64::from(stats.total));
        self.ips_assigned.set(i64::from(stats.assigned));
        self.ips_warm.set(i64::from(stats.available));
        self.ips_cooling.set(i64::from(stats.cooling));
        self.max_pod_ips.set(i64::from(max_pod_ips));
    }

    /// Counts one EC2 call attempt.
    pub fn ec2_call(&self, operation: &str, outcome: &str) {
        self.ec2_calls
            .get_or_create(&CallLabels {
                operation: operation.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Counts one EC2 error.
    pub fn ec2_error(&self, operation: &str, code: &str) {
        self.ec2_errors
            .get_or_create(&ErrorLabels {
                operation: operation.to_string(),
                code: code.to_string(),
            })
            .inc();
    }

    /// Attempts of `operation` that ended with `outcome` so far.
    pub fn ec2_calls_of(&self, operation: &str, outcome: &str) -> u64 {
        self.ec2_calls
            .get_or_create(&CallLabels {
                operation: operation.to_string(),
                outcome: outcome.to_string(),
            })
            .get()
    }

    /// Counts one push to ferruled.
    pub fn push(&self, ok: bool) {
        self.ferruled_pushes
            .get_or_create(&PushLabels {
                outcome: if ok { "ok" } else { "error" }.to_string(),
            })
            .inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
