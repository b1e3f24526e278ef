//! `route.*` and `neigh.*`: validate the request, change the master forwarding state,
//! publish a new generation. A refused change leaves the running generation as it was.

use super::{to_value, NodeState};
use crate::config::{format_mac, parse_cidr, parse_mac};
use crate::fib::FibError;
use ferrule_api::rpc::{parse_params, RpcError};
use ferrule_api::{self as api, NeighAdd, NeighDel, NetworkFilter, RouteAdd, RouteDel};
use ferrule_dataplane::snapshot::NextHopEntry;
use ferrule_dataplane::wire::EthernetAddress;
use serde_json::Value;
use std::net::IpAddr;

fn fib_err(e: FibError) -> RpcError {
    RpcError::invalid_params(e.field, e.message)
}

impl NodeState {
    fn network_param(&self, network: &Option<String>) -> Result<u16, RpcError> {
        match network {
            None => Ok(0),
            Some(n) => self.fib.network_index(n).ok_or_else(|| {
                RpcError::invalid_params("network", format!("no network named {n:?}"))
            }),
        }
    }

    fn port_param(&self, field: &str, port: &str) -> Result<u16, RpcError> {
        self.fib
            .port_index(port)
            .ok_or_else(|| RpcError::invalid_params(field, format!("no port named {port:?}")))
    }

    pub(super) fn route_add(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: RouteAdd = parse_params(params)?;
        let net = self.network_param(&p.network)?;
        let prefix = parse_cidr(&p.prefix).map_err(|e| RpcError::invalid_params("prefix", e))?;
        let entry = match (&p.port, p.blackhole) {
            (Some(port), false) => {
                let port = self.port_param("port", port)?;
                let via = match &p.via {
                    None => None,
                    Some(v) => Some(v.parse::<IpAddr>().map_err(|_| {
                        RpcError::invalid_params("via", format!("{v:?} is not an IP address"))
                    })?),
                };
                NextHopEntry::Port { port, via }
            }
            (None, true) => {
                if p.via.is_some() {
                    return Err(RpcError::invalid_params(
                        "via",
                        "a blackhole route has no next hop",
                    ));
                }
                NextHopEntry::Blackhole
            }
            (Some(_), true) => {
                return Err(RpcError::invalid_params(
                    "blackhole",
                    "give either port or blackhole, not both",
                ))
            }
            (None, false) => {
                return Err(RpcError::invalid_params("port", "needs port or blackhole"))
            }
        };
        self.fib.add_route(net, prefix, entry).map_err(fib_err)?;
        self.publish();
        tracing::info!(network = net, %prefix, ?entry, "route added");
        Ok(serde_json::json!({}))
    }

    pub(super) fn route_del(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: RouteDel = parse_params(params)?;
        let net = self.network_param(&p.network)?;
        let prefix = parse_cidr(&p.prefix).map_err(|e| RpcError::invalid_params("prefix", e))?;
        self.fib.del_route(net, prefix).map_err(fib_err)?;
        self.publish();
        tracing::info!(network = net, %prefix, "route deleted");
        Ok(serde_json::json!({}))
    }

    pub(super) fn route_dump(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NetworkFilter = parse_params(params)?;
        let nets: Vec<u16> = match &p.network {
            Some(_) => vec![self.network_param(&p.network)?],
            None => (0..self.fib.network_count() as u16).collect(),
        };
        let ports = self.fib.ports();
        let (mut routes, mut rules) = (Vec::new(), Vec::new());
        for net in nets {
            for (prefix, r) in self.fib.routes(net) {
                let (kind, port, via) = match r.entry {
                    NextHopEntry::Port { port, via } => (
                        "port",
                        ports.get(usize::from(port)).map(|p| p.name.clone()),
                        via.map(|v| v.to_string()),
                    ),
                    NextHopEntry::Blackhole => ("blackhole", None, None),
                    NextHopEntry::Isolated => ("isolated", None, None),
                    NextHopEntry::Local => ("local", None, None),
                };
                routes.push(api::RouteEntry {
                    network: self.fib.network_name(net).to_string(),
                    prefix: prefix.to_string(),
                    kind: kind.to_string(),
                    port,
                    via,
                    source: r.source.name().to_string(),
                    table: None,
                });
            }
            // The secondary ENIs' tables of this network: a default route each.
            for eni in self.fib.enis().filter(|e| e.device_index != 0) {
                let Some(port) = ports.get(usize::from(eni.port)) else {
                    continue;
                };
                if port.network != net {
                    continue;
                }
                routes.push(api::RouteEntry {
                    network: self.fib.network_name(net).to_string(),
                    prefix: "0.0.0.0/0".into(),
                    kind: "port".into(),
                    port: Some(port.name.clone()),
                    via: Some(eni.gateway.to_string()),
                    source: "eni".into(),
                    table: Some(eni.table()),
                });
                rules.push(api::SourceRule {
                    network: self.fib.network_name(net).to_string(),
                    table: eni.table(),
                    eni: eni.spec.id.clone(),
                    device_index: eni.device_index,
                    sources: eni.secondary_ips.iter().map(|a| a.to_string()).collect(),
                });
            }
        }
        to_value(api::RouteDump { routes, rules })
    }

    pub(super) fn neigh_add(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NeighAdd = parse_params(params)?;
        let net = self.network_param(&p.network)?;
        let ip: IpAddr = p.ip.parse().map_err(|_| {
            RpcError::invalid_params("ip", format!("{:?} is not an IP address", p.ip))
        })?;
        let mac = parse_mac(&p.mac).filter(|m| m[0] & 1 == 0).ok_or_else(|| {
            RpcError::invalid_params("mac", format!("{:?} is not a unicast MAC address", p.mac))
        })?;
        let port = self.port_param("port", &p.port)?;
        if self.fib.ports()[usize::from(port)].network != net {
            return Err(RpcError::invalid_params(
                "port",
                format!("port {:?} is in another network", p.port),
            ));
        }
        self.fib
            .set_neighbor(net, ip, EthernetAddress(mac), port, true);
        self.publish();
        if let Some(pending) = self.resolver.resolved((net, ip)) {
            self.send_held((net, ip), pending);
        }
        Ok(serde_json::json!({}))
    }

    pub(super) fn neigh_del(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NeighDel = parse_params(params)?;
        let net = self.network_param(&p.network)?;
        let ip: IpAddr = p.ip.parse().map_err(|_| {
            RpcError::invalid_params("ip", format!("{:?} is not an IP address", p.ip))
        })?;
        if !self.fib.del_neighbor(net, ip) {
            return Err(RpcError::invalid_params(
                "ip",
                format!(
                    "no neighbour {ip} in network {:?}",
                    self.fib.network_name(net)
                ),
            ));
        }
        self.publish();
        Ok(serde_json::json!({}))
    }

    pub(super) fn neigh_dump(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: NetworkFilter = parse_params(params)?;
        let only = match &p.network {
            Some(_) => Some(self.network_param(&p.network)?),
            None => None,
        };
        let ports = self.fib.ports();
        let port_name = |i: u16| {
            ports
                .get(usize::from(i))
                .map(|p| p.name.clone())
                .unwrap_or_default()
        };
        let mut neighbors: Vec<api::NeighEntry> = self
            .fib
            .neighbors()
            .filter(|((net, _), _)| only.is_none_or(|o| o == *net))
            .map(|(&(net, ip), n)| api::NeighEntry {
                network: self.fib.network_name(net).to_string(),
                ip: ip.to_string(),
                mac: format_mac(&n.mac.octets()),
                port: port_name(n.port),
                state: if n.is_static {
                    "static".into()
                } else if n.updated.elapsed() > self.neighbor_max_age / 2 {
                    "stale".into()
                } else {
                    "reachable".into()
                },
                age_secs: if n.is_static {
                    0.0
                } else {
                    n.updated.elapsed().as_secs_f64()
                },
                held_packets: 0,
            })
            .collect();
        for ((net, ip), port, held, age) in self.resolver.pending() {
            if only.is_none_or(|o| o == net) {
                neighbors.push(api::NeighEntry {
                    network: self.fib.network_name(net).to_string(),
                    ip: ip.to_string(),
                    mac: String::new(),
                    port: port_name(port),
                    state: "incomplete".into(),
                    age_secs: age,
                    held_packets: held as u32,
                });
            }
        }
        to_value(api::NeighDump { neighbors })
    }
}
