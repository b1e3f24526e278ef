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
    /// `network.list`: every network with its counters.
    pub networks: Vec<api::network::NetworkInfo>,
    /// FQDN policy: the DNS proxy's and the circuit breaker's counters, and sizes.
    pub fqdn: FqdnMetrics,
}

/// What a scrape reports of FQDN policy.
#[derive(Debug, Clone, Default)]
pub struct FqdnMetrics {
    pub proxy: crate::fqdn::ProxyCounters,
    pub breaker: ferrule_fqdn::Counters,
    pub names: usize,
    pub identities: usize,
    pub pending: usize,
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
                "ferrule_worker_switched",
                "Frames a worker switched to one port of a layer-2 segment.",
                c,
                per_worker(|w| w.switched),
            );
            fam(
                "ferrule_worker_flooded",
                "Frames a worker flooded to a layer-2 segment's other ports.",
                c,
                per_worker(|w| w.flooded),
            );
            fam(
                "ferrule_worker_flood_copies",
                "Copies a worker sent of flooded frames.",
                c,
                per_worker(|w| w.flood_copies),
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
        let per_net = |f: fn(&api::network::NetworkInfo) -> f64| -> Vec<(Labels, f64)> {
            self.networks
                .iter()
                .map(|n| (vec![("network", n.name.clone())], f(n)))
                .collect()
        };
        fam(
            "ferrule_network_rx_packets",
            "Packets received on a network's ports.",
            c,
            per_net(|n| n.counters.rx_packets as f64),
        );
        fam(
            "ferrule_network_tx_packets",
            "Packets sent out of a network's ports.",
            c,
            per_net(|n| n.counters.tx_packets as f64),
        );
        fam(
            "ferrule_network_drops",
            "Packets received on a network's ports and dropped.",
            c,
            per_net(|n| n.counters.drops as f64),
        );
        fam(
            "ferrule_network_ports",
            "Ports attached to a network.",
            g,
            per_net(|n| n.ports.len() as f64),
        );
        fam(
            "ferrule_network_allocated_ips",
            "Addresses a user-defined network's IPAM has handed out on this node.",
            g,
            per_net(|n| f64::from(n.allocated)),
        );
        fam(
            "ferrule_network_ready",
            "Whether a network is ready on this node (1: every status condition true).",
            g,
            per_net(|n| {
                if n.zone.is_some() && n.conditions.iter().all(|c| c.status == "True") {
                    1.0
                } else {
                    0.0
                }
            }),
        );
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
        let p = &self.fqdn.proxy;
        fam(
            "ferrule_dns_proxy_queries",
            "DNS queries the proxy handled, by outcome.",
            c,
            [
                ("punted", p.queries),
                ("refused", p.refused),
                ("forwarded", p.forwarded),
                ("answered", p.answered),
                ("malformed", p.malformed_queries),
                ("upstream_timeout", p.upstream_timeouts),
                ("upstream_error", p.upstream_errors),
                ("reply_error", p.reply_errors),
            ]
            .into_iter()
            .map(|(o, v)| (vec![("outcome", o.to_string())], v as f64))
            .collect(),
        );
        fam(
            "ferrule_dns_proxy_tcp_connections",
            "DNS-over-TCP connections from pods, by outcome (refused: the connection limit was reached).",
            c,
            [("accepted", p.tcp_connections), ("refused", p.tcp_refused)]
                .into_iter()
                .map(|(o, v)| (vec![("outcome", o.to_string())], v as f64))
                .collect(),
        );
        fam(
            "ferrule_dns_proxy_malformed_answers",
            "Upstream datagrams that were not the answer to a waiting query.",
            c,
            vec![(vec![], p.malformed_answers as f64)],
        );
        fam(
            "ferrule_fqdn_addresses_learned",
            "Addresses of DNS answers given to the name manager.",
            c,
            vec![(vec![], p.addresses_learned as f64)],
        );
        let b = &self.fqdn.breaker;
        fam(
            "ferrule_fqdn_breaker_refusals",
            "What the FQDN circuit breaker refused, by what.",
            c,
            vec![
                (
                    vec![("what", "ips_refused_over_limit".into())],
                    b.ips_refused_over_limit as f64,
                ),
                (
                    vec![("what", "ips_evicted_over_limit".into())],
                    b.ips_evicted_over_limit as f64,
                ),
                (
                    vec![("what", "identities_refused".into())],
                    b.identities_refused as f64,
                ),
            ],
        );
        fam(
            "ferrule_fqdn_names",
            "Names in the FQDN name cache.",
            g,
            vec![(vec![], self.fqdn.names as f64)],
        );
        fam(
            "ferrule_fqdn_identities",
            "Local identities in use.",
            g,
            vec![(vec![], self.fqdn.identities as f64)],
        );
        fam(
            "ferrule_dns_proxy_pending",
            "DNS queries waiting for the upstream server.",
            g,
            vec![(vec![], self.fqdn.pending as f64)],
        );
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
            fqdn: FqdnMetrics {
                names: 4,
                ..Default::default()
            },
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
        assert!(text.contains("ferrule_fqdn_names 4"), "{text}");
        assert!(
            text.contains("ferrule_dns_proxy_queries_total{outcome=\"refused\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("ferrule_dns_proxy_tcp_connections_total{outcome=\"accepted\"} 0"),
            "{text}"
        );
        assert!(text.contains("ferrule_build_info{version="), "{text}");
    }
}

/// Most scrapes served at once; more connections wait in the listen backlog.
const MAX_CONNS: usize = 8;
/// Longest request head read.
const MAX_REQUEST: usize = 8 * 1024;
/// A connection that has not sent its request, or not taken its answer, in this long
/// is closed.
const CONN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The metrics endpoint: a non-blocking HTTP/1.1 listener the control thread polls at
/// its tick. `GET /metrics` is answered with [`render`]'s text; nothing a client does
/// can hold the control thread (reads and writes never block, a few connections at
/// once, each with a deadline).
#[derive(Debug)]
pub struct MetricsServer {
    listener: std::net::TcpListener,
    conns: Vec<HttpConn>,
}

#[derive(Debug)]
struct HttpConn {
    stream: std::net::TcpStream,
    request: Vec<u8>,
    /// The answer, once the request is complete; `out[sent..]` is left to send.
    out: Option<Vec<u8>>,
    sent: usize,
    since: std::time::Instant,
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Index,
    NotFound,
    NotAllowed,
    Bad,
}

fn route(head: &[u8]) -> Route {
    let text = String::from_utf8_lossy(head);
    let mut parts = text.lines().next().unwrap_or("").split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Bad;
    }
    if method != "GET" && method != "HEAD" {
        return Route::NotAllowed;
    }
    match target.split('?').next().unwrap_or("") {
        "/metrics" => Route::Metrics,
        "/" => Route::Index,
        _ => Route::NotFound,
    }
}

fn response(status: &str, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

impl MetricsServer {
    /// Listens on `addr` (non-blocking).
    pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<MetricsServer> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(MetricsServer {
            listener,
            conns: Vec::new(),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts, reads and answers what is ready without waiting; `collect` is called
    /// once per `GET /metrics`.
    pub fn poll(&mut self, mut collect: impl FnMut() -> NodeMetrics) {
        use std::io::{Read, Write};
        while self.conns.len() < MAX_CONNS {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        self.conns.push(HttpConn {
                            stream,
                            request: Vec::new(),
                            out: None,
                            sent: 0,
                            since: std::time::Instant::now(),
                        });
                    }
                }
                Err(_) => break,
            }
        }
        self.conns.retain_mut(|c| {
            if c.since.elapsed() > CONN_TIMEOUT {
                return false;
            }
            if c.out.is_none() {
                let mut buf = [0u8; 2048];
                loop {
                    match c.stream.read(&mut buf) {
                        Ok(0) => return false,
                        Ok(n) => {
                            c.request.extend_from_slice(&buf[..n]);
                            if c.request.len() > MAX_REQUEST {
                                c.out = Some(response(
                                    "431 Request Header Fields Too Large",
                                    "text/plain",
                                    "request too large\n",
                                    false,
                                ));
                                break;
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => return false,
                    }
                }
                if c.out.is_none() {
                    let Some(end) = c.request.windows(4).position(|w| w == b"\r\n\r\n") else {
                        return true;
                    };
                    let head = &c.request[..end];
                    let head_only = head.starts_with(b"HEAD ");
                    c.out = Some(match route(head) {
                        Route::Metrics => {
                            response("200 OK", CONTENT_TYPE, &render(collect()), head_only)
                        }
                        Route::Index => response(
                            "200 OK",
                            "text/plain; charset=utf-8",
                            "ferruled: metrics at /metrics\n",
                            head_only,
                        ),
                        Route::NotFound => response(
                            "404 Not Found",
                            "text/plain",
                            "not found: try /metrics\n",
                            head_only,
                        ),
                        Route::NotAllowed => response(
                            "405 Method Not Allowed",
                            "text/plain",
                            "GET /metrics\n",
                            false,
                        ),
                        Route::Bad => {
                            response("400 Bad Request", "text/plain", "bad request\n", false)
                        }
                    });
                }
            }
            let Some(out) = &c.out else {
                return true;
            };
            while c.sent < out.len() {
                match c.stream.write(&out[c.sent..]) {
                    Ok(0) => return false,
                    Ok(n) => c.sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => return false,
                }
            }
            false
        });
    }
}

#[cfg(test)]
mod http_tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(server: &mut MetricsServer, request: &[u8]) -> String {
        let mut c = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
        c.write_all(request).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_millis(20)))
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..200 {
            server.poll(NodeMetrics::default);
            let mut buf = [0u8; 4096];
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    #[test]
    fn scrapes_are_answered_and_bad_requests_refused() {
        let mut s = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let ok = get(&mut s, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(
            ok.contains("version=0.0.4") && ok.contains("ferrule_build_info"),
            "{ok}"
        );
        assert!(get(&mut s, b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(&mut s, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(&mut s, b"garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        let big = vec![b'a'; MAX_REQUEST + 10];
        assert!(get(&mut s, &big).starts_with("HTTP/1.1 431"));
        // A client that never sends its request does not stop the others.
        let _idle = std::net::TcpStream::connect(s.local_addr().unwrap()).unwrap();
        assert!(get(&mut s, b"GET /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
    }
}
