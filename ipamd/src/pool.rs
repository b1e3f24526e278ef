//! The address pool: the node's ENIs and their secondary IPv4 addresses as EC2 last
//! confirmed them, which pod interface holds which address, and which addresses are
//! cooling. Pure state, no I/O: the reconciler feeds it EC2's view and the IPAM socket
//! takes and releases addresses through it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// A pod interface: the runtime's container ID and the interface name in the pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodKey {
    pub container_id: String,
    pub ifname: String,
}

/// A pod interface's address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub container_id: String,
    pub ifname: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub ip: Ipv4Addr,
    pub eni_id: String,
}

impl Allocation {
    pub fn key(&self) -> PodKey {
        PodKey {
            container_id: self.container_id.clone(),
            ifname: self.ifname.clone(),
        }
    }
}

/// An ENI attached to the instance, as EC2 reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eni {
    pub id: String,
    pub mac: String,
    pub device_index: u32,
    pub attachment_id: Option<String>,
    pub subnet_id: String,
    pub primary_ip: Ipv4Addr,
    /// Its secondary addresses, the pool's addresses.
    pub secondary_ips: Vec<Ipv4Addr>,
}

/// Counts of the pool's addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub total: u32,
    pub assigned: u32,
    pub cooling: u32,
    pub available: u32,
}

/// What the pool says when it has no address for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    pub stats: Stats,
}

/// The pool. Cooling deadlines are milliseconds since the Unix epoch, so that they
/// survive a restart through the datastore.
#[derive(Debug, Default, Clone)]
pub struct Pool {
    enis: BTreeMap<String, Eni>,
    allocations: BTreeMap<PodKey, Allocation>,
    cooling: BTreeMap<Ipv4Addr, u64>,
    /// Addresses being given back to EC2 (unassigned, or their ENI freed): never
    /// handed out, whatever the reconciler's EC2 calls do meanwhile.
    draining: BTreeSet<Ipv4Addr>,
}

impl Pool {
    /// A pool holding the datastore's allocations and cooling addresses, and no ENIs
    /// yet (until [`Pool::set_enis`]).
    pub fn restore(allocations: Vec<Allocation>, cooling: BTreeMap<Ipv4Addr, u64>) -> Pool {
        Pool {
            enis: BTreeMap::new(),
            allocations: allocations.into_iter().map(|a| (a.key(), a)).collect(),
            cooling,
            draining: BTreeSet::new(),
        }
    }

    pub fn enis(&self) -> impl Iterator<Item = &Eni> {
        self.enis.values()
    }

    pub fn eni(&self, id: &str) -> Option<&Eni> {
        self.enis.get(id)
    }

    pub fn allocations(&self) -> impl Iterator<Item = &Allocation> {
        self.allocations.values()
    }

    pub fn cooling(&self) -> &BTreeMap<Ipv4Addr, u64> {
        &self.cooling
    }

    /// The cooling deadline of `ip`, if it is cooling.
    pub fn cooling_until(&self, ip: Ipv4Addr) -> Option<u64> {
        self.cooling.get(&ip).copied()
    }

    /// The allocation holding `ip`, if any.
    pub fn holder(&self, ip: Ipv4Addr) -> Option<&Allocation> {
        self.allocations.values().find(|a| a.ip == ip)
    }

    /// Replaces the ENIs with what EC2 reports. Allocations whose address EC2 no longer
    /// has are removed and returned (the caller logs them); cooling entries of vanished
    /// addresses are forgotten.
    pub fn set_enis(&mut self, enis: Vec<Eni>) -> Vec<Allocation> {
        self.enis = enis.into_iter().map(|e| (e.id.clone(), e)).collect();
        let present: BTreeMap<Ipv4Addr, &str> = self
            .enis
            .values()
            .flat_map(|e| e.secondary_ips.iter().map(move |ip| (*ip, e.id.as_str())))
            .collect();
        let mut dropped = Vec::new();
        self.allocations.retain(|_, a| match present.get(&a.ip) {
            Some(eni) => {
                // The address may have moved ENI (never in practice): follow EC2.
                if a.eni_id != *eni {
                    a.eni_id = eni.to_string();
                }
                true
            }
            None => {
                dropped.push(a.clone());
                false
            }
        });
        self.cooling.retain(|ip, _| present.contains_key(ip));
        dropped
    }

    /// Ends the cooling of addresses whose deadline has passed.
    pub fn expire_cooling(&mut self, now_ms: u64) {
        self.cooling.retain(|_, until| *until > now_ms);
    }

    fn state_of(&self, ip: Ipv4Addr, now_ms: u64) -> IpUse {
        if self.allocations.values().any(|a| a.ip == ip) {
            IpUse::Assigned
        } else if self.cooling.get(&ip).is_some_and(|until| *until > now_ms) {
            IpUse::Cooling
        } else {
            IpUse::Available
        }
    }

    /// Whether `ip` can be given to a pod now.
    pub fn is_available(&self, ip: Ipv4Addr, now_ms: u64) -> bool {
        self.state_of(ip, now_ms) == IpUse::Available
    }

    /// Keeps `ips` from being handed out until [`Pool::undrain`].
    pub fn drain(&mut self, ips: &[Ipv4Addr]) {
        self.draining.extend(ips.iter().copied());
    }

    /// Ends [`Pool::drain`] of `ips`.
    pub fn undrain(&mut self, ips: &[Ipv4Addr]) {
        for ip in ips {
            self.draining.remove(ip);
        }
    }

    /// Whether `ip` is cooling now.
    pub fn is_cooling(&self, ip: Ipv4Addr, now_ms: u64) -> bool {
        self.state_of(ip, now_ms) == IpUse::Cooling
    }

    /// Counts of the pool's addresses at `now_ms`.
    pub fn stats(&self, now_ms: u64) -> Stats {
        let mut stats = Stats::default();
        for ip in self.enis.values().flat_map(|e| &e.secondary_ips) {
            stats.total += 1;
            match self.state_of(*ip, now_ms) {
                IpUse::Assigned => stats.assigned += 1,
                IpUse::Cooling => stats.cooling += 1,
                IpUse::Available => stats.available += 1,
            }
        }
        stats
    }

    /// The address of `key`, if it has one.
    pub fn lookup(&self, key: &PodKey) -> Option<&Allocation> {
        self.allocations.get(key)
    }

    /// Gives `key` an address: the one it already holds (idempotent), else an available
    /// one, taken from the ENI with the fewest available addresses (so that emptier ENIs
    /// can be freed), lowest address first.
    pub fn assign(
        &mut self,
        key: &PodKey,
        pod_namespace: &str,
        pod_name: &str,
        now_ms: u64,
    ) -> Result<(Allocation, bool), Exhausted> {
        if let Some(existing) = self.allocations.get(key) {
            return Ok((existing.clone(), false));
        }
        let mut best: Option<(usize, u32, Ipv4Addr, String)> = None;
        for eni in self.enis.values() {
            let free: Vec<Ipv4Addr> = eni
                .secondary_ips
                .iter()
                .copied()
                .filter(|ip| self.is_available(*ip, now_ms) && !self.draining.contains(ip))
                .collect();
            if let Some(ip) = free.iter().min() {
                let candidate = (free.len(), eni.device_index, *ip, eni.id.clone());
                if best
                    .as_ref()
                    .is_none_or(|b| (candidate.0, candidate.1) < (b.0, b.1))
                {
                    best = Some(candidate);
                }
            }
        }
        let Some((_, _, ip, eni_id)) = best else {
            return Err(Exhausted {
                stats: self.stats(now_ms),
            });
        };
        let allocation = Allocation {
            container_id: key.container_id.clone(),
            ifname: key.ifname.clone(),
            pod_namespace: pod_namespace.to_string(),
            pod_name: pod_name.to_string(),
            ip,
            eni_id,
        };
        self.cooling.remove(&ip);
        self.allocations.insert(key.clone(), allocation.clone());
        Ok((allocation, true))
    }

    /// Releases `key`'s address into cooling until `cooling_until_ms`; `None` when it
    /// held none.
    pub fn release(&mut self, key: &PodKey, cooling_until_ms: u64) -> Option<Allocation> {
        let allocation = self.allocations.remove(key)?;
        self.cooling.insert(allocation.ip, cooling_until_ms);
        Some(allocation)
    }

    /// The secondary addresses of `eni_id` that are neither assigned nor cooling.
    pub fn free_ips_of(&self, eni_id: &str, now_ms: u64) -> Vec<Ipv4Addr> {
        self.enis
            .get(eni_id)
            .map(|e| {
                e.secondary_ips
                    .iter()
                    .copied()
                    .filter(|ip| self.is_available(*ip, now_ms))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IpUse {
    Assigned,
    Cooling,
    Available,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eni(id: &str, index: u32, ips: &[u8]) -> Eni {
        Eni {
            id: id.into(),
            mac: "02:00:00:00:00:01".into(),
            device_index: index,
            attachment_id: None,
            subnet_id: "subnet-1".into(),
            primary_ip: Ipv4Addr::new(10, 0, index as u8, 1),
            secondary_ips: ips
                .iter()
                .map(|d| Ipv4Addr::new(10, 0, index as u8, *d))
                .collect(),
        }
    }

    fn key(c: &str) -> PodKey {
        PodKey {
            container_id: c.into(),
            ifname: "eth0".into(),
        }
    }

    #[test]
    fn assign_is_idempotent_and_release_cools() {
        let mut pool = Pool::default();
        pool.set_enis(vec![eni("eni-a", 0, &[10, 11])]);
        let (a, new) = pool.assign(&key("c1"), "ns", "p1", 0).unwrap();
        assert!(new);
        let (again, new) = pool.assign(&key("c1"), "ns", "p1", 0).unwrap();
        assert!(!new);
        assert_eq!(a, again);
        assert_eq!(pool.stats(0).assigned, 1);
        assert_eq!(pool.release(&key("c1"), 1000).unwrap().ip, a.ip);
        assert!(pool.release(&key("c1"), 1000).is_none());
        let s = pool.stats(500);
        assert_eq!((s.cooling, s.available), (1, 1));
        // The cooling address is not handed out before its deadline.
        let (b, _) = pool.assign(&key("c2"), "ns", "p2", 500).unwrap();
        assert_ne!(b.ip, a.ip);
        assert!(pool.assign(&key("c3"), "ns", "p3", 500).is_err());
        pool.expire_cooling(1000);
        assert_eq!(
            pool.assign(&key("c3"), "ns", "p3", 1000).unwrap().0.ip,
            a.ip
        );
    }

    #[test]
    fn vanished_addresses_drop_their_allocations() {
        let mut pool = Pool::default();
        pool.set_enis(vec![eni("eni-a", 0, &[10, 11])]);
        let (a, _) = pool.assign(&key("c1"), "ns", "p1", 0).unwrap();
        let dropped = pool.set_enis(vec![eni("eni-a", 0, &[12])]);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].ip, a.ip);
        assert!(pool.lookup(&key("c1")).is_none());
        assert_eq!(pool.stats(0).total, 1);
    }

    #[test]
    fn fills_the_fullest_eni_first() {
        let mut pool = Pool::default();
        pool.set_enis(vec![eni("eni-a", 0, &[10, 11, 12]), eni("eni-b", 1, &[10])]);
        let (a, _) = pool.assign(&key("c1"), "ns", "p1", 0).unwrap();
        assert_eq!(a.eni_id, "eni-b");
        // Draining addresses are never handed out.
        pool.drain(&[Ipv4Addr::new(10, 0, 0, 10), Ipv4Addr::new(10, 0, 0, 11)]);
        let (b, _) = pool.assign(&key("c2"), "ns", "p2", 0).unwrap();
        assert_eq!(b.ip, Ipv4Addr::new(10, 0, 0, 12));
        assert!(pool.assign(&key("c3"), "ns", "p3", 0).is_err());
    }
}
