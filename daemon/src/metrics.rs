//! Prometheus metrics of the node, in the Prometheus text format (0.0.4): the counters
//! `stats.get`, `ct.stats` and `acl.dump` read, gathered by the control thread at each
//! scrape (never by a worker) into a [`NodeMetrics`] and written with the
//! `prometheus-client` encoder. Names and labels follow Prometheus conventions:
//! `ferrule_` prefix, base units, `_total` for counters.

use ferrule_api as api;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The `Content-Type` of what [`render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// One ACL table's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclTableCounts {
    pub name: String,
    pub rules: usize,
    /// Packets some rule matched.
    pub matched: u64,
    /// Packets no rule matched (denied).
    pub no_match: u64,
}

/// Everything one scrape reports.
#[derive(Debug, Clone, Default)]
pub struct NodeMetrics {
    pub stats: Option<api::Stats>,
    pub ports: Vec<api::PortInfo>,
    pub ct: Option<api::CtStatsResult>,
    pub acl_generation: u64,
    pub acl: Vec<AclTableCounts>,
}

type Labels = Vec<(&'static str, String)>;

/// A metric family as it is written: name, help, type and samples.
struct Family<'a> {
    name: &'a str,
    help: &'a str,
    kind: MetricType,
    samples: Vec<(Labels, f64)>,
}

impl NodeMetrics {
    fn families(&self) -> Vec<Family<'static>> {
        let mut out = Vec::new();
        let mut fam = |name, help, kind, samples: Vec<(Labels, f64)>| {
            out.push(Family {
                name,
                help,
                kind,
                samples,
            })
        };
        let c = MetricType::Counter;
        let g = MetricType::Gauge;
        fam(
            "ferrule_build_info",
            "The running ferruled's version (always 1).",
            g,
            vec![(
                vec![("version", env!("CARGO_PKG_VERSION").to_string())],
                1.0,
            )],
        );
        if let Some(s) = &self.stats {
            fam(
                "ferrule_uptime_seconds",
                "Seconds since the daemon started forwarding.",
                g,
                vec![(vec![], s.uptime_secs)],
            );
            fam(
                "ferrule_mbufs",
                "Mbufs in the packet pool.",
                g,
                vec![(vec![], f64::from(s.mbufs))],
            );
            fam(
                "ferrule_mbufs_in_use",
                "Mbufs out of the pool (rings, in flight, held).",
                g,
                vec![(vec![], f64::from(s.mbufs_in_use))],
            );
            let per_port = |f: fn(&api::PortCounters) -> u64| -> Vec<(Labels, f64)> {
                s.ports
                    .iter()
                    .map(|p| (vec![("port", p.name.clone())], f(&p.counters) as f64))
                    .collect()
            };
            fam(
                "ferrule_port_rx_packets",
                "Packets received on a port.",
                c,
                per_port(|c| c.rx_packets),
            );
            fam(
                "ferrule_port_rx_bytes",
                "Bytes received on a port.",
                c,
                per_port(|c| c.rx_bytes),
            );
            fam(
                "ferrule_port_tx_packets",
                "Packets sent out of a port.",
                c,
                per_port(|c| c.tx_packets),
            );
            fam(
                "ferrule_port_tx_bytes",
                "Bytes sent out of a port.",
                c,
                per_port(|c| c.tx_bytes),
            );
            fam(
                "ferrule_port_drops",
                "Packets received on a port and dropped.",
                c,
                per_port(|c| c.drops),
            );
            fam(
                "ferrule_port_hw_rx_missed",
                "Packets the device dropped for want of receive descriptors.",
                c,
                per_port(|c| c.hw_rx_missed),
            );
            let per_worker = |f: fn(&api::WorkerStats) -> u64| -> Vec<(Labels, f64)> {
                s.workers
                    .iter()
                    .map(|w| {
                        (
                            vec![
                                ("worker", w.worker.to_string()),
                                ("lcore", w.lcore.to_string()),
                            ],
                            f(w) as f64,
                        )
                    })
                    .collect()
            };
            fam(
                "ferrule_worker_polls",
                "Receive polls of a worker.",
                c,
                per_worker(|w| w.polls),
            );
            fam(
                "ferrule_worker_busy_polls",
                "Receive polls that returned packets.",
                c,
                per_worker(|w| w.busy_polls),
            );
            fam(
                "ferrule_worker_rx_packets",
                "Packets a worker received.",
                c,
                per_worker(|w| w.rx_packets),
            );
            fam(
                "ferrule_worker_tx_packets",
                "Packets a worker sent.",
                c,
                per_worker(|w| w.tx_packets),
            );
            fam(
                "ferrule_worker_drops",
                "Packets a worker dropped.",
                c,
                per_worker(|w| w.drops),
            );
            fam(
                "ferrule_worker_punts",
                "Packets a worker handed to the control thread.",
                c,
                per_worker(|w| w.punts),
            );
            fam(
                "ferrule_drops",
                "Packets dropped, by reason (ferrulectl stats describes each reason).",
                c,
                s.totals
                    .drop_reasons
                    .iter()
                    .map(|d| (vec![("reason", d.reason.clone())], d.packets as f64))
                    .collect(),
            );
        }
        fam(
            "ferrule_port_up",
            "Whether a port's link is up (1) or down (0).",
            g,
            self.ports
                .iter()
                .map(|p| {
                    (
                        vec![("port", p.name.clone()), ("role", p.role.to_string())],
                        if p.link == "up" { 1.0 } else { 0.0 },
                    )
                })
                .collect(),
        );
        if let Some(ct) = &self.ct {
            fam(
                "ferrule_conntrack_entries",
                "Tracked connections, by network (zone).",
                g,
                ct.zones
                    .iter()
                    .map(|z| (vec![("network", z.network.clone())], z.entries as f64))
                    .collect(),
            );
            fam(
                "ferrule_conntrack_max_entries",
                "Most connections the node tracks at once.",
                g,
                vec![(vec![], f64::from(ct.max_connections))],
            );
            let sum =
                |f: fn(&api::CtWorkerStats) -> u64| ct.workers.iter().map(f).sum::<u64>() as f64;
            fam(
                "ferrule_conntrack_inserts",
                "Connections tracked.",
                c,
                vec![(vec![], sum(|w| w.inserts))],
            );
            fam(
                "ferrule_conntrack_expirations",
                "Connections that timed out.",
                c,
                vec![(vec![], sum(|w| w.expirations))],
            );
            fam(
                "ferrule_conntrack_refused",
                "New connections refused, by why.",
                c,
                vec![
                    (vec![("why", "table_full".into())], sum(|w| w.table_full)),
                    (vec![("why", "zone_full".into())], sum(|w| w.zone_full)),
                    (vec![("why", "clash".into())], sum(|w| w.clashes)),
                ],
            );
            let drop_of = |reason: &str| {
                ct.drops
                    .iter()
                    .find(|d| d.reason == reason)
                    .map_or(0.0, |d| d.packets as f64)
            };
            fam(
                "ferrule_snat_ports_exhausted",
                "Packets dropped because no source port was free for SNAT.",
                c,
                vec![(vec![], drop_of("snat-ports-exhausted"))],
            );
        }
        fam(
            "ferrule_acl_generation",
            "Generation of the ACL state in force.",
            g,
            vec![(vec![], self.acl_generation as f64)],
        );
        let per_table = |f: fn(&AclTableCounts) -> f64| -> Vec<(Labels, f64)> {
            self.acl
                .iter()
                .map(|t| (vec![("table", t.name.clone())], f(t)))
                .collect()
        };
        fam(
            "ferrule_acl_rules",
            "Rules of an ACL table.",
            g,
            per_table(|t| t.rules as f64),
        );
        fam(
            "ferrule_acl_matched_packets",
            "Packets a rule of the table matched.",
            c,
            per_table(|t| t.matched as f64),
        );
        fam(
            "ferrule_acl_no_match_packets",
            "Packets no rule of the table matched (denied).",
            c,
            per_table(|t| t.no_match as f64),
        );
        out
    }
}

/// The collector of one scrape.
#[derive(Debug)]
struct Scrape(NodeMetrics);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in self.0.families() {
            let mut metric = encoder.encode_descriptor(f.name, f.help, None, f.kind)?;
            for (labels, value) in &f.samples {
                let sample = metric.encode_family(labels)?;
                match f.kind {
                    MetricType::Counter => ConstCounter::new(*value).encode(sample)?,
                    _ => ConstGauge::new(*value).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

/// The scrape's text.
pub fn render(metrics: NodeMetrics) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(metrics)));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        tracing::error!("cannot encode metrics: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_with_types_labels_and_totals() {
        let m = NodeMetrics {
            acl_generation: 3,
            acl: vec![AclTableCounts {
                name: "pod-a\"x".into(),
                rules: 2,
                matched: 5,
                no_match: 1,
            }],
            ..NodeMetrics::default()
        };
        let text = render(m);
        assert!(
            text.contains("# TYPE ferrule_acl_matched_packets_total counter"),
            "{text}"
        );
        assert!(
            text.contains("ferrule_acl_matched_packets_total{table=\"pod-a\\\"x\"} 5"),
            "{text}"
        );
        assert!(text.contains("ferrule_acl_generation 3"), "{text}");
        assert!(text.contains("ferrule_build_info{version="), "{text}");
    }
}
