//! Source NAT (masquerade to the node IP, the AWS VPC CNI rule): the policy of one
//! generation (node IPs, VPC CIDRs, exclusions, the port range), the per-worker port
//! allocator, and the header rewrites in [`rewrite`].

#![forbid(unsafe_code)]

pub mod rewrite;

use crate::wire::Ipv4Cidr;
use std::net::Ipv4Addr;

/// The Kubernetes NodePort range, left out of the default SNAT port range.
pub const NODE_PORTS: (u16, u16) = (30000, 32767);

/// The default SNAT ports: 1024-65535 without the NodePort range.
pub const DEFAULT_PORTS: [(u16, u16); 2] = [(1024, 29999), (32768, 65535)];

/// When and how pod traffic is masqueraded. SNAT is off while `node_ips` is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnatPolicy {
    /// The node's IPs; traffic is masqueraded to the first (the primary).
    pub node_ips: Vec<Ipv4Addr>,
    /// Destinations inside these are not masqueraded (the VPC).
    pub vpc_cidrs: Vec<Ipv4Cidr>,
    /// Further destinations that are not masqueraded.
    pub exclude: Vec<Ipv4Cidr>,
    /// Source ports (and ICMP echo identifiers) to masquerade to, inclusive ranges.
    pub ports: Vec<(u16, u16)>,
}

impl Default for SnatPolicy {
    fn default() -> Self {
        SnatPolicy {
            node_ips: Vec::new(),
            vpc_cidrs: Vec::new(),
            exclude: Vec::new(),
            ports: DEFAULT_PORTS.to_vec(),
        }
    }
}

impl SnatPolicy {
    /// The address connections are masqueraded to, when SNAT is on.
    #[inline]
    pub fn snat_addr(&self) -> Option<Ipv4Addr> {
        self.node_ips.first().copied()
    }

    /// Whether a pod's IPv4 packet to `dst` leaving through an uplink is masqueraded.
    #[inline]
    pub fn applies(&self, dst: Ipv4Addr) -> bool {
        !self.node_ips.is_empty()
            && !self.vpc_cidrs.iter().any(|c| c.contains(dst))
            && !self.exclude.iter().any(|c| c.contains(dst))
    }

    /// Whether `a` is one of the node IPs connections are masqueraded to.
    #[inline]
    pub fn is_node_ip(&self, a: Ipv4Addr) -> bool {
        self.node_ips.contains(&a)
    }

    /// Whether `port` is one SNAT hands out.
    #[inline]
    pub fn port_in_range(&self, port: u16) -> bool {
        self.ports.iter().any(|&(lo, hi)| lo <= port && port <= hi)
    }
}

/// The worker that owns a SNAT port (and so every connection masqueraded to it): each
/// worker only hands out the ports `p` with `p % workers == worker`, so a reply's
/// destination port names the worker whose connection table holds it.
#[inline]
pub fn port_owner(port: u16, workers: u16) -> u16 {
    port % workers.max(1)
}

/// Ports a probe for a free SNAT port looks at, at most, before the connection is
/// refused as `snat-ports-exhausted` (all of them when the worker has fewer).
pub const MAX_PROBES: u32 = 1024;

/// Most port ranges whose shares an allocator keeps between calls (with more, they are
/// worked out on every call).
const CACHED_RANGES: usize = 4;

/// This worker's share of each range of the last range list allocated from: first
/// port and count (working them out takes divisions, on every new connection).
#[derive(Debug, Clone, Copy)]
struct Shares {
    ranges: [(u16, u16); CACHED_RANGES],
    /// Ranges cached (`usize::MAX`: none yet).
    len: usize,
    first: [u32; CACHED_RANGES],
    count: [u32; CACHED_RANGES],
    total: u32,
}

impl Shares {
    /// Whether these are the shares of `ranges` (at most [`CACHED_RANGES`]).
    #[inline(always)]
    fn holds(&self, ranges: &[(u16, u16)]) -> bool {
        self.len == ranges.len()
            && ranges
                .iter()
                .zip(&self.ranges)
                .all(|(&(lo, hi), &(clo, chi))| (lo ^ clo) | (hi ^ chi) == 0)
    }
}

/// One worker's SNAT port allocator: random ports from its share of the range.
#[derive(Debug, Clone)]
pub struct PortAllocator {
    worker: u16,
    workers: u16,
    state: u64,
    shares: Shares,
}

impl PortAllocator {
    /// The allocator of `worker` (0-based) of `workers`, seeded with `seed`.
    pub fn new(worker: u16, workers: u16, seed: u64) -> PortAllocator {
        PortAllocator {
            worker,
            workers: workers.max(1),
            state: seed | 1,
            shares: Shares {
                ranges: [(0, 0); CACHED_RANGES],
                len: usize::MAX,
                first: [0; CACHED_RANGES],
                count: [0; CACHED_RANGES],
                total: 0,
            },
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The first port of `lo..=hi` this worker owns and how many it owns there.
    fn share(&self, lo: u16, hi: u16) -> (u32, u32) {
        let (n, w) = (u32::from(self.workers), u32::from(self.worker));
        let lo32 = u32::from(lo);
        let first = lo32 + (w + n - lo32 % n) % n;
        if lo > hi || first > u32::from(hi) {
            return (first, 0);
        }
        (first, (u32::from(hi) - first) / n + 1)
    }

    /// Ports of `ranges` this worker owns.
    pub fn capacity(&self, ranges: &[(u16, u16)]) -> u32 {
        ranges.iter().map(|&(lo, hi)| self.share(lo, hi).1).sum()
    }

    /// A port of `ranges` owned by this worker for which `in_use` is false, starting
    /// at a random one; `None` when the probed ports are all taken (all of the
    /// worker's ports when it has at most [`MAX_PROBES`]).
    #[inline]
    pub fn allocate(
        &mut self,
        ranges: &[(u16, u16)],
        mut in_use: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        if ranges.len() > CACHED_RANGES {
            return self.allocate_uncached(ranges, in_use);
        }
        let n = ranges.len();
        if !self.shares.holds(ranges) {
            self.cache_shares(ranges);
        }
        let total = self.shares.total;
        if total == 0 {
            return None;
        }
        let start = (self.next_random() % u64::from(total)) as u32;
        let s = &self.shares;
        let workers = u32::from(self.workers);
        for k in 0..s.total.min(MAX_PROBES) {
            // (start + k) % total: both are below total.
            let mut index = start + k;
            if index >= s.total {
                index -= s.total;
            }
            for r in 0..n {
                if index < s.count[r] {
                    let port = (s.first[r] + index * workers) as u16;
                    if !in_use(port) {
                        return Some(port);
                    }
                    break;
                }
                index -= s.count[r];
            }
        }
        None
    }

    /// Works out and keeps the shares of `ranges` (at most [`CACHED_RANGES`]).
    #[cold]
    fn cache_shares(&mut self, ranges: &[(u16, u16)]) {
        let mut s = self.shares;
        s.len = ranges.len();
        s.total = 0;
        for (r, &(lo, hi)) in ranges.iter().enumerate() {
            let (first, count) = self.share(lo, hi);
            s.ranges[r] = (lo, hi);
            s.first[r] = first;
            s.count[r] = count;
            s.total += count;
        }
        self.shares = s;
    }

    /// [`allocate`](Self::allocate) for more than [`CACHED_RANGES`] ranges.
    fn allocate_uncached(
        &mut self,
        ranges: &[(u16, u16)],
        mut in_use: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        let total = self.capacity(ranges);
        if total == 0 {
            return None;
        }
        let start = (self.next_random() % u64::from(total)) as u32;
        let n = u32::from(self.workers);
        for k in 0..total.min(MAX_PROBES) {
            let mut index = (start + k) % total;
            for &(lo, hi) in ranges {
                let (first, count) = self.share(lo, hi);
                if index < count {
                    let port = (first + index * n) as u16;
                    if !in_use(port) {
                        return Some(port);
                    }
                    break;
                }
                index -= count;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn cidr(a: [u8; 4], len: u8) -> Ipv4Cidr {
        Ipv4Cidr::new(Ipv4Addr::from(a), len).expect("a prefix length 0-32")
    }

    #[test]
    fn policy_masquerades_outside_the_vpc_and_exclusions() {
        let mut p = SnatPolicy::default();
        assert!(!p.applies(Ipv4Addr::new(8, 8, 8, 8)), "off without node IP");
        p.node_ips = vec![Ipv4Addr::new(192, 0, 2, 10)];
        p.vpc_cidrs = vec![cidr([10, 0, 0, 0], 16)];
        p.exclude = vec![cidr([172, 16, 0, 0], 12)];
        assert!(p.applies(Ipv4Addr::new(8, 8, 8, 8)));
        assert!(!p.applies(Ipv4Addr::new(10, 0, 255, 1)));
        assert!(p.applies(Ipv4Addr::new(10, 1, 0, 1)));
        assert!(!p.applies(Ipv4Addr::new(172, 31, 1, 1)));
        assert_eq!(p.snat_addr(), Some(Ipv4Addr::new(192, 0, 2, 10)));
        assert!(p.port_in_range(1024) && p.port_in_range(65535) && p.port_in_range(32768));
        assert!(!p.port_in_range(1023) && !p.port_in_range(30000) && !p.port_in_range(32767));
        assert!(cidr([0, 0, 0, 0], 0).contains(Ipv4Addr::BROADCAST));
        assert!(cidr([10, 0, 0, 7], 32).contains(Ipv4Addr::new(10, 0, 0, 7)));
        assert!(!cidr([10, 0, 0, 7], 32).contains(Ipv4Addr::new(10, 0, 0, 6)));
        assert!(cidr([128, 0, 0, 0], 1).contains(Ipv4Addr::BROADCAST));
        assert!(!cidr([128, 0, 0, 0], 1).contains(Ipv4Addr::new(127, 255, 255, 255)));
    }

    #[test]
    fn each_worker_hands_out_only_its_own_ports_and_all_of_them() {
        let ranges = [(1000u16, 1010u16), (2000, 2003)];
        let mut all = HashSet::new();
        for w in 0..3u16 {
            let mut a = PortAllocator::new(w, 3, 42 + u64::from(w));
            let mut taken = HashSet::new();
            while let Some(p) = a.allocate(&ranges, |p| taken.contains(&p)) {
                assert_eq!(port_owner(p, 3), w);
                assert!(ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi));
                assert!(taken.insert(p), "handed out twice");
            }
            assert_eq!(taken.len() as u32, a.capacity(&ranges));
            all.extend(taken);
        }
        assert_eq!(all.len(), 11 + 4, "the workers' shares cover the ranges");
        let mut one = PortAllocator::new(0, 1, 7);
        assert_eq!(one.allocate(&[(5, 4)], |_| false), None, "empty range");
        assert_eq!(one.allocate(&[(65535, 65535)], |_| false), Some(65535));
    }

    #[test]
    fn cached_shares_allocate_as_the_uncached_path() {
        let lists: [&[(u16, u16)]; 5] = [
            &DEFAULT_PORTS,
            &[(1024, 1100)],
            &[(5, 4), (65535, 65535), (7, 9)],
            &[(1000, 1003), (2000, 2001), (3000, 3000), (40000, 40100)],
            &[(1024, 1030)],
        ];
        for workers in 1..=5u16 {
            for worker in 0..workers {
                let mut a = PortAllocator::new(worker, workers, 99);
                let mut b = a.clone();
                for round in 0..400usize {
                    let ranges = lists[round % lists.len()];
                    let taken = |p: u16| u32::from(p).wrapping_mul(2_654_435_761) % 3 == 0;
                    assert_eq!(
                        a.allocate(ranges, taken),
                        b.allocate_uncached(ranges, taken),
                        "worker {worker} of {workers}, {ranges:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn allocation_starts_at_random_ports() {
        let mut a = PortAllocator::new(0, 1, 99);
        let picks: HashSet<u16> = (0..64)
            .filter_map(|_| a.allocate(&DEFAULT_PORTS, |_| false))
            .collect();
        assert!(picks.len() > 60, "{picks:?}");
        assert!(picks.iter().all(|p| !(30000..=32767).contains(p)));
    }
}
