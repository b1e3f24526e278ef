//! A network's share on this node, and a small IPAM over it.
//!
//! Layer3: node `k` (its [`Settings::node_index`](crate::Settings::node_index)) gets the
//! `k`-th host subnet of each subnet (`10.128.0.0/16/24`: node 0 `10.128.0.0/24`, node
//! 3 `10.128.3.0/24`); none is skipped, and an index beyond the split is an error.
//! Layer2 and Localnet: every node shares the whole subnet. The gateway is the node
//! subnet's first address after the network address (`.1`) for Layer3 and Layer2;
//! Localnet has none (the physical network's router is outside).
//!
//! [`Ipam`] hands out the lowest free address of each family of the node subnets,
//! minus the network address, the IPv4 broadcast address, the gateway and the
//! `excludeSubnets`.

use crate::manifest::{IpamMode, Topology};
use crate::validate::NetworkConfig;
use ferrule_dataplane::wire::IpCidr;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One of a network's subnets on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeSubnet {
    /// The network's subnet (cluster-wide).
    pub subnet: IpCidr,
    /// This node's part: a host subnet (Layer3) or the whole subnet.
    pub node_subnet: IpCidr,
    /// The pods' gateway: `.1` of the node subnet (Layer3, Layer2); none for Localnet.
    pub gateway: Option<IpAddr>,
}

/// A network's address plan on this node: one [`NodeSubnet`] per subnet (IPv4 first).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodePlan {
    pub node_index: u32,
    pub subnets: Vec<NodeSubnet>,
}

/// Why a network has no plan on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

pub(crate) fn to_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(a.to_bits()),
        IpAddr::V6(a) => a.to_bits(),
    }
}

pub(crate) fn from_bits(v6: bool, bits: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from_bits(bits))
    } else {
        IpAddr::V4(Ipv4Addr::from_bits(bits as u32))
    }
}

/// The first and last address of a prefix, as numbers.
pub(crate) fn range(c: &IpCidr) -> (u128, u128) {
    let first = to_bits(c.network());
    let host_bits = u32::from(c.max_len() - c.prefix_len());
    let size_minus_one = if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    (first, first + size_minus_one)
}

/// This node's plan for a network.
pub fn node_plan(config: &NetworkConfig, node_index: u32) -> Result<NodePlan, PlanError> {
    let mut subnets = Vec::new();
    for s in &config.subnets {
        let v6 = matches!(s.cidr, IpCidr::V6(_));
        let node_subnet = match (config.topology, s.host_len) {
            (Topology::Layer3, Some(h)) => {
                let split_bits = u32::from(h - s.cidr.prefix_len());
                let count: Option<u128> = 1u128.checked_shl(split_bits);
                if count.is_some_and(|n| u128::from(node_index) >= n) {
                    return Err(PlanError(format!(
                        "node index {node_index} is beyond the {} host subnets /{h} of {}",
                        count.unwrap_or_default(),
                        s.cidr
                    )));
                }
                let step = u32::from(s.cidr.max_len() - h);
                let base = to_bits(s.cidr.network());
                let addr = base + (u128::from(node_index) << step);
                IpCidr::new(from_bits(v6, addr), h).expect("a valid length")
            }
            _ => s.cidr,
        };
        let gateway = match config.topology {
            Topology::Localnet => None,
            _ => {
                let (first, last) = range(&node_subnet);
                (first < last).then(|| from_bits(v6, first + 1))
            }
        };
        subnets.push(NodeSubnet {
            subnet: s.cidr,
            node_subnet,
            gateway,
        });
    }
    Ok(NodePlan {
        node_index,
        subnets,
    })
}

/// The free addresses of one node subnet.
#[derive(Debug, Clone)]
struct Pool {
    v6: bool,
    first: u128,
    last: u128,
    /// Merged, sorted, inclusive ranges never given out.
    reserved: Vec<(u128, u128)>,
    used: BTreeSet<u128>,
}

impl Pool {
    fn new(ns: &NodeSubnet, excludes: &[IpCidr]) -> Pool {
        let v6 = matches!(ns.node_subnet, IpCidr::V6(_));
        let (net, end) = range(&ns.node_subnet);
        let (first, last) = if v6 {
            (net.saturating_add(1), end)
        } else {
            (net.saturating_add(1), end.saturating_sub(1))
        };
        let mut reserved: Vec<(u128, u128)> = excludes
            .iter()
            .filter(|e| e.contains_cidr(&ns.node_subnet) || ns.node_subnet.contains_cidr(e))
            .map(|e| {
                let (a, b) = range(e);
                (a.max(net), b.min(end))
            })
            .collect();
        if let Some(g) = ns.gateway {
            let g = to_bits(g);
            reserved.push((g, g));
        }
        reserved.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::new();
        for (a, b) in reserved {
            match merged.last_mut() {
                Some(m) if a <= m.1.saturating_add(1) => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        Pool {
            v6,
            first,
            last,
            reserved: merged,
            used: BTreeSet::new(),
        }
    }

    fn is_reserved(&self, a: u128) -> Option<u128> {
        self.reserved
            .iter()
            .find(|(s, e)| *s <= a && a <= *e)
            .map(|(_, e)| *e)
    }

    fn usable(&self, a: u128) -> bool {
        self.first <= a && a <= self.last && self.is_reserved(a).is_none()
    }

    fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv6() == self.v6 && self.usable(to_bits(ip))
    }

    /// The lowest free address.
    fn lowest_free(&self) -> Option<u128> {
        let mut c = self.first;
        loop {
            if c > self.last {
                return None;
            }
            if let Some(end) = self.is_reserved(c) {
                c = end.checked_add(1)?;
                continue;
            }
            // Skip a run of used addresses.
            let mut run = self.used.range(c..);
            if run.next() == Some(&c) {
                let mut n = c;
                for u in run {
                    if *u == n + 1 {
                        n = *u;
                    } else {
                        break;
                    }
                }
                c = n.checked_add(1)?;
                continue;
            }
            return Some(c);
        }
    }
}

/// A network's addresses on this node: per owner (a pod, a VM) one address of each
/// family of the node subnets. `None` from [`Ipam::new`] when the network's IPAM is
/// disabled.
#[derive(Debug, Clone)]
pub struct Ipam {
    pools: Vec<Pool>,
    owners: BTreeMap<IpAddr, String>,
}

impl Ipam {
    /// The IPAM of a network on this node; `None` when its `ipam.mode` is Disabled (or
    /// it has no subnets).
    pub fn new(config: &NetworkConfig, plan: &NodePlan) -> Option<Ipam> {
        if config.ipam_mode == IpamMode::Disabled || plan.subnets.is_empty() {
            return None;
        }
        Some(Ipam {
            pools: plan
                .subnets
                .iter()
                .map(|ns| Pool::new(ns, &config.exclude_subnets))
                .collect(),
            owners: BTreeMap::new(),
        })
    }

    /// The owner's addresses, one per family: the lowest free ones, or those it already
    /// has (an allocation is idempotent per owner). `None`, with nothing allocated,
    /// when a family has no free address left.
    pub fn allocate(&mut self, owner: &str) -> Option<Vec<IpAddr>> {
        let have = self.addresses_of(owner);
        if !have.is_empty() {
            return Some(have);
        }
        let picks: Vec<u128> = self
            .pools
            .iter()
            .map(Pool::lowest_free)
            .collect::<Option<_>>()?;
        let mut out = Vec::new();
        for (pool, a) in self.pools.iter_mut().zip(picks) {
            pool.used.insert(a);
            let ip = from_bits(pool.v6, a);
            self.owners.insert(ip, owner.to_string());
            out.push(ip);
        }
        Some(out)
    }

    /// The addresses an owner has (IPv4 first).
    pub fn addresses_of(&self, owner: &str) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self
            .owners
            .iter()
            .filter(|(_, o)| o.as_str() == owner)
            .map(|(ip, _)| *ip)
            .collect();
        v.sort_by_key(|ip| ip.is_ipv6());
        v
    }

    /// Frees one address; returns its owner, `None` if it was free.
    pub fn release(&mut self, ip: IpAddr) -> Option<String> {
        let owner = self.owners.remove(&ip)?;
        for p in self.pools.iter_mut().filter(|p| p.v6 == ip.is_ipv6()) {
            p.used.remove(&to_bits(ip));
        }
        Some(owner)
    }

    /// Frees every address of an owner; returns them.
    pub fn release_owner(&mut self, owner: &str) -> Vec<IpAddr> {
        let ips = self.addresses_of(owner);
        for ip in &ips {
            self.release(*ip);
        }
        ips
    }

    /// Every allocated address with its owner, in address order (for persistence).
    pub fn owners(&self) -> Vec<(IpAddr, String)> {
        self.owners.iter().map(|(ip, o)| (*ip, o.clone())).collect()
    }

    /// Puts back an allocation read from persistence. Refused when the address is not
    /// assignable here (outside the node subnets, reserved or excluded) or another
    /// owner has it; restoring the same pair twice is fine.
    pub fn restore(&mut self, ip: IpAddr, owner: &str) -> Result<(), String> {
        if let Some(o) = self.owners.get(&ip) {
            return if o == owner {
                Ok(())
            } else {
                Err(format!("{ip} is already allocated to {o:?}"))
            };
        }
        let Some(pool) = self.pools.iter_mut().find(|p| p.contains(ip)) else {
            return Err(format!(
                "{ip} is not an assignable address of this network on this node"
            ));
        };
        if let Some(prev) = self
            .owners
            .iter()
            .find(|(a, o)| o.as_str() == owner && a.is_ipv6() == ip.is_ipv6())
        {
            return Err(format!(
                "{owner:?} already has the {} address {}",
                if ip.is_ipv6() { "IPv6" } else { "IPv4" },
                prev.0
            ));
        }
        pool.used.insert(to_bits(ip));
        self.owners.insert(ip, owner.to_string());
        Ok(())
    }

    /// How many addresses are allocated.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether nothing is allocated.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}
