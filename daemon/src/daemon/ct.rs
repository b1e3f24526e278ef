//! `ct.*` and `nat.dump`: questions about the workers' connection tables, asked through
//! their request queues and answered between bursts, merged here.

use super::{no_params, to_value, NodeState};
use ferrule_api::rpc::{parse_params, RpcError};
use ferrule_api::{self as api, CtFilterParams, CtTuple};
use ferrule_dataplane::conntrack::STATE_NAMES;
use ferrule_dataplane::counters::DropReason;
use ferrule_dataplane::ct_requests::{ConnInfo, CtFilter, CtReply, CtRequest};
use ferrule_dataplane::flow::FlowKey;
use ferrule_dataplane::wire::IpProtocol;
use serde_json::Value;
use std::net::IpAddr;
use std::time::Duration;

/// How long the control thread waits for every worker to answer.
const WORKER_ANSWER: Duration = Duration::from_secs(2);
/// Entries a dump returns unless the request says otherwise.
const DEFAULT_LIMIT: usize = 10_000;

/// The drop reasons `ct.stats` reports.
const CT_DROPS: [DropReason; 4] = [
    DropReason::CtInvalid,
    DropReason::CtTableFull,
    DropReason::SnatPortsExhausted,
    DropReason::HandoffFull,
];

/// Protocol names as dumps show them and filters take them.
fn proto_name(p: u8) -> String {
    IpProtocol(p).transport_name()
}

fn proto_number(text: &str) -> Option<u8> {
    IpProtocol::parse_transport(text).map(|p| p.0)
}

/// A state filter's name as dumps show it (any case given), or the error naming the
/// field and the names there are.
fn state_name(text: &str) -> Result<String, RpcError> {
    STATE_NAMES
        .iter()
        .find(|n| n.eq_ignore_ascii_case(text))
        .map(|n| n.to_string())
        .ok_or_else(|| {
            RpcError::invalid_params(
                "state",
                format!("{text:?}: one of {}", STATE_NAMES.join(", ")),
            )
        })
}

fn endpoint(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

fn tuple(key: &FlowKey, packets: u64, bytes: u64) -> CtTuple {
    CtTuple {
        src: key.src_ip().to_string(),
        dst: key.dst_ip().to_string(),
        sport: key.src_port,
        dport: key.dst_port,
        packets,
        bytes,
    }
}

impl NodeState {
    fn ct_filter(&self, p: &CtFilterParams) -> Result<CtFilter, RpcError> {
        let addr = |field: &str, v: &Option<String>| -> Result<Option<IpAddr>, RpcError> {
            v.as_deref()
                .map(|t| {
                    t.parse::<IpAddr>().map_err(|_| {
                        RpcError::invalid_params(field, format!("{t:?} is not an IP address"))
                    })
                })
                .transpose()
        };
        Ok(CtFilter {
            zone: match &p.network {
                None => None,
                Some(n) => Some(self.fib.network_index(n).ok_or_else(|| {
                    RpcError::invalid_params("network", format!("no network named {n:?}"))
                })?),
            },
            src: addr("src", &p.src)?,
            dst: addr("dst", &p.dst)?,
            proto: p
                .proto
                .as_deref()
                .map(|t| {
                    proto_number(t).ok_or_else(|| {
                        RpcError::invalid_params(
                            "proto",
                            format!("{t:?}: tcp, udp, sctp, icmp, icmpv6 or 0-255"),
                        )
                    })
                })
                .transpose()?,
            port: p.port,
            state: p.state.as_deref().map(state_name).transpose()?,
            nat_only: false,
        })
    }

    fn ask(&self, request: &CtRequest) -> Result<Vec<CtReply>, RpcError> {
        self.shared
            .ask_workers(request, WORKER_ANSWER)
            .ok_or_else(|| RpcError::internal("a worker did not answer within 2 s"))
    }

    /// The matching connections of every worker, with the worker each came from.
    fn conns(
        &self,
        filter: CtFilter,
        limit: Option<usize>,
    ) -> Result<(Vec<(u16, ConnInfo)>, bool), RpcError> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        let mut all = Vec::new();
        let mut truncated = false;
        for reply in self.ask(&CtRequest::Dump { filter, limit })? {
            if let CtReply::Dump {
                worker,
                conns,
                truncated: t,
            } = reply
            {
                truncated |= t;
                all.extend(conns.into_iter().map(|c| (worker, c)));
            }
        }
        all.sort_by(|(wa, a), (wb, b)| {
            (
                a.zone,
                a.key.proto,
                a.key.src,
                a.key.src_port,
                a.key.dst,
                a.key.dst_port,
                *wa,
            )
                .cmp(&(
                    b.zone,
                    b.key.proto,
                    b.key.src,
                    b.key.src_port,
                    b.key.dst,
                    b.key.dst_port,
                    *wb,
                ))
        });
        if all.len() > limit {
            all.truncate(limit);
            truncated = true;
        }
        Ok((all, truncated))
    }

    pub(super) fn ct_dump(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: CtFilterParams = parse_params(params)?;
        let (conns, truncated) = self.conns(self.ct_filter(&p)?, p.limit)?;
        let entries = conns
            .into_iter()
            .map(|(worker, c)| api::CtEntry {
                worker,
                network: self.fib.network_name(c.zone).to_string(),
                proto: proto_name(c.key.proto),
                state: c.state.to_string(),
                time_left_secs: c.time_left_ms as f64 / 1000.0,
                original: tuple(&c.key, c.packets[0], c.bytes[0]),
                reply: tuple(&c.reply_key, c.packets[1], c.bytes[1]),
                snat: c.nat.map(|n| format!("{}:{}", n.addr, n.port)),
            })
            .collect();
        to_value(api::CtDump { entries, truncated })
    }

    pub(super) fn ct_flush(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: CtFilterParams = parse_params(params)?;
        if p.limit.is_some() {
            return Err(RpcError::invalid_params("limit", "ct.flush takes no limit"));
        }
        let filter = self.ct_filter(&p)?;
        let removed = self
            .ask(&CtRequest::Flush { filter })?
            .into_iter()
            .map(|r| match r {
                CtReply::Flush { removed, .. } => removed,
                _ => 0,
            })
            .sum();
        tracing::info!(removed, filter = ?p, "conntrack flushed");
        to_value(api::CtFlushed { removed })
    }

    pub(super) fn ct_stats(&mut self, params: &Value) -> Result<Value, RpcError> {
        no_params(params)?;
        let mut workers = Vec::new();
        let mut zones: Vec<(u16, usize)> = Vec::new();
        for reply in self.ask(&CtRequest::Stats)? {
            if let CtReply::Stats {
                worker,
                stats,
                entries,
                capacity,
                zones: z,
            } = reply
            {
                workers.push(api::CtWorkerStats {
                    worker,
                    entries,
                    capacity,
                    inserts: stats.inserts,
                    removals: stats.removals,
                    expirations: stats.expirations,
                    table_full: stats.table_full,
                    zone_full: stats.zone_full,
                    clashes: stats.clashes,
                    invalid: stats.invalid,
                });
                for (zone, n) in z {
                    match zones.iter_mut().find(|(x, _)| *x == zone) {
                        Some((_, m)) => *m += n,
                        None => zones.push((zone, n)),
                    }
                }
            }
        }
        workers.sort_by_key(|w| w.worker);
        zones.sort_unstable();
        let drops = CT_DROPS
            .iter()
            .map(|&r| api::DropCount {
                reason: r.name().to_string(),
                packets: self
                    .workers
                    .iter()
                    .map(|w| w.counters.drops[r as usize].get())
                    .sum(),
            })
            .collect();
        let budget = self.shared.ct_budget();
        to_value(api::CtStatsResult {
            workers,
            max_connections: budget.map_or(0, |b| b.max_total()),
            max_per_zone: budget.map_or(0, |b| b.max_per_zone()),
            zones: zones
                .into_iter()
                .map(|(z, entries)| api::CtZone {
                    network: self.fib.network_name(z).to_string(),
                    entries,
                })
                .collect(),
            drops,
        })
    }

    pub(super) fn nat_dump(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p: CtFilterParams = parse_params(params)?;
        let mut filter = self.ct_filter(&p)?;
        filter.nat_only = true;
        let (conns, truncated) = self.conns(filter, p.limit)?;
        let entries = conns
            .into_iter()
            .filter_map(|(worker, c)| {
                let nat = c.nat?;
                let echo = matches!(c.key.proto, 1 | 58);
                Some(api::NatEntry {
                    worker,
                    proto: proto_name(c.key.proto),
                    inside: endpoint(c.key.src_ip(), c.key.src_port),
                    outside: endpoint(IpAddr::V4(nat.addr), nat.port),
                    // An echo has an identifier, not a remote port.
                    remote: if echo {
                        c.key.dst_ip().to_string()
                    } else {
                        endpoint(c.key.dst_ip(), c.key.dst_port)
                    },
                    state: c.state.to_string(),
                    time_left_secs: c.time_left_ms as f64 / 1000.0,
                })
            })
            .collect();
        to_value(api::NatDump { entries, truncated })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_names_in_any_case_and_refuse_unknown_ones() {
        assert_eq!(proto_number("TCP"), Some(6));
        assert_eq!(proto_number("icmpv6"), Some(58));
        assert_eq!(proto_number("47"), Some(47));
        assert_eq!(proto_number("tcpx"), None);
        assert_eq!(state_name("established").expect("known"), "ESTABLISHED");
        assert_eq!(state_name("Time_Wait").expect("known"), "TIME_WAIT");
        let e = state_name("BOGUS").expect_err("unknown");
        let text = format!("{e:?}");
        assert!(
            text.contains("state") && text.contains("BOGUS") && text.contains("ASSURED"),
            "{text}"
        );
    }
}
