//! The control thread's side of the punt path: learns neighbours from ARP replies and
//! neighbour advertisements the workers hand over, holds packets whose next hop is
//! unresolved while it sends ARP requests / neighbour solicitations on its own transmit
//! queue, and sends them once the neighbour answers.

use super::{NodeState, PUNT_QUEUE};
use crate::resolver::{Held, Pending};
use ferrule_dataplane::counters::DropReason;
use ferrule_dataplane::dpdk::Mbuf;
use ferrule_dataplane::dpdk::Mempool;
use ferrule_dataplane::pipeline::{self, local, Punt};
use ferrule_dataplane::punt::InjectItem;
use ferrule_dataplane::wire::EthernetAddress;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

/// The EUI-64 link-local address of a MAC (fe80::/64).
fn link_local(mac: EthernetAddress) -> Ipv6Addr {
    let m = mac.octets();
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

impl NodeState {
    /// Handles everything the workers punted since the last tick.
    pub(super) fn drain_punts(&mut self, pool: &Mempool) {
        let mut learned = Vec::new();
        let mut changed = false;
        for _ in 0..PUNT_QUEUE {
            let Some(item) = self.shared.punt.packets.pop() else {
                break;
            };
            let in_port = usize::from(item.in_port);
            match item.punt {
                Punt::Learn => {
                    let Some(port) = self.fib.ports().get(in_port) else {
                        continue;
                    };
                    let net = port.network;
                    if let Some((ip, mac)) = local::learned(item.mbuf.as_ref()) {
                        // Only answers to our own requests, or updates of neighbours we
                        // know, are learned: an unsolicited reply cannot plant an entry.
                        let key = (net, ip);
                        let wanted =
                            self.resolver.is_pending(key) || self.fib.neighbor(key).is_some();
                        if wanted {
                            changed |= self.fib.set_neighbor(net, ip, mac, item.in_port, false);
                            learned.push(key);
                            tracing::debug!(%ip, %mac, port = in_port, "neighbour learned");
                        } else {
                            self.control_counters
                                .drop_packets(DropReason::ArpIgnored, in_port, 1);
                        }
                    }
                }
                Punt::Dns => self.dns_query(item.mbuf, item.in_port, pool),
                Punt::Resolve { network, ip, port } => {
                    let key = (network, ip);
                    if self.fib.neighbor(key).is_some() {
                        // Resolved since the worker looked: send it now.
                        let p = Pending {
                            port,
                            held: vec![item.mbuf],
                            tries: 0,
                            last_sent: None,
                            since: Instant::now(),
                        };
                        self.send_held(key, p);
                        continue;
                    }
                    match self.resolver.hold(key, port, item.mbuf) {
                        Held::Yes(true) => self.send_request(key, port, pool),
                        Held::Yes(false) => {}
                        Held::No(m) => {
                            drop(m);
                            self.control_counters
                                .drop_packets(DropReason::NoNeighbour, in_port, 1);
                        }
                    }
                }
            }
        }
        if changed {
            self.publish();
        }
        for key in learned {
            if let Some(p) = self.resolver.resolved(key) {
                self.send_held(key, p);
            }
        }
    }

    /// Asks again, at most once a second each, every learned neighbour older than
    /// `age`; an answer refreshes it (it is known, so the answer is learned).
    pub(super) fn refresh_neighbors(&mut self, age: std::time::Duration, pool: &Mempool) {
        let now = Instant::now();
        let refreshed = &self.refreshed;
        let due: Vec<((u16, IpAddr), u16)> = self
            .fib
            .neighbors()
            .filter(|(_, n)| !n.is_static && n.updated.elapsed() >= age)
            .filter(|(k, _)| {
                refreshed
                    .get(k)
                    .is_none_or(|t| now.duration_since(*t).as_secs() >= 1)
            })
            .map(|(&k, n)| (k, n.port))
            .collect();
        for (key, port) in due {
            self.refreshed.insert(key, now);
            self.send_request(key, port, pool);
        }
        let fib = &self.fib;
        self.refreshed.retain(|k, _| fib.neighbor(*k).is_some());
    }

    /// Re-sends due requests and drops packets whose neighbour never answered.
    pub(super) fn resolve_due(&mut self, pool: &Mempool) {
        let (resend, expired) = self.resolver.due(Instant::now());
        for (key, port) in resend {
            self.send_request(key, port, pool);
        }
        for m in expired {
            let index = self.port_index_of_dpdk(m.port()).unwrap_or(0);
            self.control_counters
                .drop_packets(DropReason::NoNeighbour, index, 1);
        }
    }

    fn port_index_of_dpdk(&self, dpdk_id: u16) -> Option<usize> {
        self.fib.ports().iter().position(|p| p.dpdk_id == dpdk_id)
    }

    /// Sends an ARP request or neighbour solicitation for `key` out of `port`.
    fn send_request(&mut self, key: (u16, IpAddr), port: u16, pool: &Mempool) {
        self.resolver.sent(key);
        let Some(p) = self.fib.ports().get(usize::from(port)).cloned() else {
            return;
        };
        let Some(mut m) = Mbuf::alloc(pool) else {
            return;
        };
        let Some(buf) = m.append(128) else { return };
        let len = match key.1 {
            IpAddr::V4(target) => match p.local_v4.first() {
                Some(&src) => local::build_arp_request(&p, src, target, buf),
                None => {
                    tracing::warn!(port = %p.name, %target, "cannot resolve: the port has no IPv4 address");
                    None
                }
            },
            IpAddr::V6(target) => {
                let src = p
                    .local_v6
                    .first()
                    .copied()
                    .unwrap_or_else(|| link_local(p.mac));
                local::build_neighbor_solicit(&p, src, target, buf)
            }
        };
        let Some(len) = len else { return };
        if m.trim(128 - len) {
            tracing::debug!(target = %key.1, port = %p.name, "resolving");
            self.tx_control(usize::from(port), std::iter::once(m));
        }
    }

    /// Rewrites held packets for the now-resolved `key` and sends them.
    pub(super) fn send_held(&mut self, key: (u16, IpAddr), p: Pending) {
        let mac = self.fib.neighbor(key).map(|n| n.mac);
        let out = self.fib.ports().get(usize::from(p.port)).cloned();
        let (Some(mac), Some(out)) = (mac, out) else {
            for m in p.held {
                let index = self.port_index_of_dpdk(m.port()).unwrap_or(0);
                self.control_counters
                    .drop_packets(DropReason::NoNeighbour, index, 1);
            }
            return;
        };
        let mut ready = Vec::with_capacity(p.held.len());
        for mut m in p.held {
            let parsed = pipeline::parse(m.as_ref(), key.0);
            match parsed {
                Ok(parsed) => {
                    pipeline::rewrite(m.as_mut(), &parsed, out.mac, mac);
                    ready.push(m);
                }
                Err(reason) => {
                    let index = self.port_index_of_dpdk(m.port()).unwrap_or(0);
                    self.control_counters.drop_packets(reason, index, 1);
                }
            }
        }
        self.tx_control(usize::from(p.port), ready.into_iter());
    }

    /// Hands packets to worker 0 to transmit on port `index` (the control thread owns
    /// no transmit queue); what does not fit its inject queue is dropped as `tx-full`.
    pub(super) fn tx_control(&mut self, index: usize, mbufs: impl Iterator<Item = Mbuf>) {
        let c = &self.control_counters;
        for m in mbufs {
            // Worker 0 counts what it sends; only what never reaches it is counted here.
            if let Err(item) = self.shared.inject.push(InjectItem {
                port: index as u16,
                mbuf: m,
            }) {
                drop(item);
                c.drop_packets(DropReason::TxFull, index, 1);
            }
        }
    }
}
