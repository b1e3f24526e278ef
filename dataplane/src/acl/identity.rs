//! Remote identities in the data path: each network's IP → identity map (FQDN and CIDR
//! policy, `docs/fqdn.md`) as the workers read it, and the encoding of an identity in
//! a flow key's destination, which is how a [`Table`](super::table::Table) matches
//! its selector rules with the ordinary classifier.
//!
//! A map answers the identity of the longest prefix holding an address, or
//! [`WORLD`] when none does. Host prefixes (/32, /128), which DNS answers bring by the
//! thousand, live in hash shards shared copy-on-write between generations, so a new
//! address costs the control thread one shard's copy, not the whole map's; the few
//! shorter prefixes (CIDR policy) live in an LPM table rebuilt when they change.

use crate::flow::{Family, FlowKey};
use crate::lpm::{Lpm4, Lpm6, NO_ROUTE};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// A security identity (`ferrule_fqdn::Identity`'s number).
pub type IdentityId = u32;

/// The identity of an address no prefix of the map holds (`reserved:world`).
pub const WORLD: IdentityId = 2;

/// Host-prefix shards per family.
const SHARDS: usize = 64;

/// Host prefixes of one family, sharded by address.
#[derive(Debug, Clone)]
struct Hosts<K> {
    shards: Vec<Arc<FxHashMap<K, IdentityId>>>,
    len: usize,
}

impl<K> Default for Hosts<K> {
    fn default() -> Self {
        Hosts {
            shards: (0..SHARDS).map(|_| Arc::default()).collect(),
            len: 0,
        }
    }
}

trait ShardKey: Copy + Eq + std::hash::Hash {
    fn shard(self) -> usize;
}

impl ShardKey for u32 {
    #[inline(always)]
    fn shard(self) -> usize {
        (self as usize) % SHARDS
    }
}

impl ShardKey for u128 {
    #[inline(always)]
    fn shard(self) -> usize {
        (self as usize) % SHARDS
    }
}

impl<K: ShardKey> Hosts<K> {
    #[inline(always)]
    fn get(&self, k: K) -> Option<IdentityId> {
        if self.len == 0 {
            return None;
        }
        self.shards[k.shard()].get(&k).copied()
    }

    fn insert(&mut self, k: K, id: IdentityId) {
        if Arc::make_mut(&mut self.shards[k.shard()])
            .insert(k, id)
            .is_none()
        {
            self.len += 1;
        }
    }

    fn remove(&mut self, k: K) -> bool {
        let shard = &mut self.shards[k.shard()];
        if !shard.contains_key(&k) {
            return false;
        }
        Arc::make_mut(shard).remove(&k);
        self.len -= 1;
        true
    }
}

/// The prefixes shorter than a host's, compiled for longest-prefix match.
#[derive(Debug, Clone, Default)]
struct Prefixes {
    /// The master list: (network address, length) → identity.
    all: BTreeMap<(IpAddr, u8), IdentityId>,
    v4: Lpm4,
    v6: Lpm6,
    /// Identities by the LPM tables' values.
    ids: Vec<IdentityId>,
}

impl Prefixes {
    fn rebuild(all: BTreeMap<(IpAddr, u8), IdentityId>) -> Prefixes {
        let (mut v4, mut v6, mut ids) = (Lpm4::new(), Lpm6::new(), Vec::new());
        for (&(addr, len), &id) in &all {
            let nh = ids.len() as u32;
            ids.push(id);
            // Lengths are checked by `IdentityMap::set`; an insert cannot fail.
            let _ = match addr {
                IpAddr::V4(a) => v4.insert(a, len, nh).map(|_| ()),
                IpAddr::V6(a) => v6.insert(a, len, nh).map(|_| ()),
            };
        }
        Prefixes { all, v4, v6, ids }
    }
}

/// Why a prefix cannot be put into a map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{addr}/{len}: not a prefix length of its family")]
pub struct BadPrefix {
    pub addr: IpAddr,
    pub len: u8,
}

/// One network's IP → identity map.
#[derive(Debug, Clone, Default)]
pub struct IdentityMap {
    hosts4: Hosts<u32>,
    hosts6: Hosts<u128>,
    prefixes: Arc<Prefixes>,
}

fn masked(addr: IpAddr, len: u8) -> Result<IpAddr, BadPrefix> {
    match addr {
        IpAddr::V4(a) if len <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            Ok(IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask)))
        }
        IpAddr::V6(a) if len <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            Ok(IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask)))
        }
        _ => Err(BadPrefix { addr, len }),
    }
}

impl IdentityMap {
    /// Maps the prefix `addr/len` (host bits ignored) to `id`.
    pub fn set(&mut self, addr: IpAddr, len: u8, id: IdentityId) -> Result<(), BadPrefix> {
        match (masked(addr, len)?, len) {
            (IpAddr::V4(a), 32) => self.hosts4.insert(u32::from(a), id),
            (IpAddr::V6(a), 128) => self.hosts6.insert(u128::from(a), id),
            (addr, len) => {
                if self.prefixes.all.get(&(addr, len)) != Some(&id) {
                    let mut all = self.prefixes.all.clone();
                    all.insert((addr, len), id);
                    self.prefixes = Arc::new(Prefixes::rebuild(all));
                }
            }
        }
        Ok(())
    }

    /// Takes the prefix `addr/len` out; whether it was there.
    pub fn remove(&mut self, addr: IpAddr, len: u8) -> Result<bool, BadPrefix> {
        Ok(match (masked(addr, len)?, len) {
            (IpAddr::V4(a), 32) => self.hosts4.remove(u32::from(a)),
            (IpAddr::V6(a), 128) => self.hosts6.remove(u128::from(a)),
            (addr, len) => {
                if !self.prefixes.all.contains_key(&(addr, len)) {
                    return Ok(false);
                }
                let mut all = self.prefixes.all.clone();
                all.remove(&(addr, len));
                self.prefixes = Arc::new(Prefixes::rebuild(all));
                true
            }
        })
    }

    /// The identity of an IPv4 address (host order).
    #[inline]
    pub fn lookup_v4(&self, addr: u32) -> IdentityId {
        if let Some(id) = self.hosts4.get(addr) {
            return id;
        }
        match self.prefixes.v4.lookup_u32(addr) {
            NO_ROUTE => WORLD,
            nh => self.prefixes.ids.get(nh as usize).copied().unwrap_or(WORLD),
        }
    }

    /// The identity of an IPv6 address.
    #[inline]
    pub fn lookup_v6(&self, addr: u128) -> IdentityId {
        if let Some(id) = self.hosts6.get(addr) {
            return id;
        }
        match self.prefixes.v6.lookup_u128(addr) {
            NO_ROUTE => WORLD,
            nh => self.prefixes.ids.get(nh as usize).copied().unwrap_or(WORLD),
        }
    }

    /// The identity of an address.
    pub fn lookup(&self, addr: IpAddr) -> IdentityId {
        match addr {
            IpAddr::V4(a) => self.lookup_v4(u32::from(a)),
            IpAddr::V6(a) => self.lookup_v6(u128::from(a)),
        }
    }

    /// Prefixes held.
    pub fn len(&self) -> usize {
        self.hosts4.len + self.hosts6.len + self.prefixes.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every network's map, as a snapshot holds them.
#[derive(Debug, Clone, Default)]
pub struct Identities {
    /// By network id; `None` (or past the end): no map, every address is [`WORLD`].
    pub maps: Vec<Option<Arc<IdentityMap>>>,
}

impl Identities {
    /// The map of `network`, if it has one.
    pub fn map(&self, network: u16) -> Option<&IdentityMap> {
        self.maps.get(usize::from(network))?.as_deref()
    }

    /// The identity of a key's destination in the key's network.
    #[inline]
    pub fn dst_identity(&self, key: &FlowKey) -> IdentityId {
        let Some(map) = self.map(key.network) else {
            return WORLD;
        };
        match key.family {
            Family::V4 => map.lookup_v4(u32::from_be_bytes([
                key.dst[12],
                key.dst[13],
                key.dst[14],
                key.dst[15],
            ])),
            Family::V6 => map.lookup_v6(u128::from_be_bytes(key.dst)),
        }
    }
}

/// `key` with its destination replaced by the encoding of `id`, as the identity
/// classifier of a table expects it (see [`identity_prefix`]).
#[inline(always)]
pub fn identity_key(key: &FlowKey, id: IdentityId) -> FlowKey {
    let mut k = *key;
    k.dst = match key.family {
        Family::V4 => Ipv4Addr::from(id).to_ipv6_mapped().octets(),
        Family::V6 => Ipv6Addr::from(u128::from(id)).octets(),
    };
    k
}

/// The destination prefix that matches exactly identity `id` in keys of `family`
/// built by [`identity_key`].
pub fn identity_prefix(id: IdentityId, family: Family) -> super::Prefix {
    match family {
        Family::V4 => super::Prefix::v4(Ipv4Addr::from(id), 32),
        Family::V6 => super::Prefix::v6(Ipv6Addr::from(u128::from(id)), 128),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins_and_misses_are_world() {
        let mut m = IdentityMap::default();
        m.set(ip("192.0.2.0"), 24, 100).unwrap();
        m.set(ip("192.0.2.0"), 25, 101).unwrap();
        m.set(ip("192.0.2.7"), 32, 102).unwrap();
        m.set(ip("2001:db8::"), 32, 200).unwrap();
        m.set(ip("2001:db8::1"), 128, 201).unwrap();
        assert_eq!(m.lookup(ip("192.0.2.7")), 102);
        assert_eq!(m.lookup(ip("192.0.2.8")), 101);
        assert_eq!(m.lookup(ip("192.0.2.200")), 100);
        assert_eq!(m.lookup(ip("198.51.100.1")), WORLD);
        assert_eq!(m.lookup(ip("2001:db8::1")), 201);
        assert_eq!(m.lookup(ip("2001:db8::2")), 200);
        assert_eq!(m.lookup(ip("2001:db9::2")), WORLD);
        assert_eq!(m.len(), 5);
        assert!(m.remove(ip("192.0.2.0"), 25).unwrap());
        assert!(m.remove(ip("192.0.2.7"), 32).unwrap());
        assert!(!m.remove(ip("192.0.2.7"), 32).unwrap());
        assert_eq!(m.lookup(ip("192.0.2.7")), 100);
        assert_eq!(
            m.set(ip("192.0.2.0"), 33, 1),
            Err(BadPrefix {
                addr: ip("192.0.2.0"),
                len: 33
            })
        );
    }

    #[test]
    fn a_clone_is_independent_and_shares_untouched_shards() {
        let mut a = IdentityMap::default();
        for i in 0..1000u32 {
            a.set(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 32, 7)
                .unwrap();
        }
        let mut b = a.clone();
        b.set(ip("10.0.0.1"), 32, 8).unwrap();
        assert_eq!(a.lookup(ip("10.0.0.1")), 7);
        assert_eq!(b.lookup(ip("10.0.0.1")), 8);
        let shared = (0..SHARDS)
            .filter(|&s| Arc::ptr_eq(&a.hosts4.shards[s], &b.hosts4.shards[s]))
            .count();
        assert_eq!(shared, SHARDS - 1);
    }

    #[test]
    fn keys_carry_identities_in_their_destination() {
        let key = FlowKey::v4(
            3,
            6,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(192, 0, 2, 7),
            1,
            2,
        );
        let mut ids = Identities::default();
        let mut m = IdentityMap::default();
        m.set(ip("192.0.2.7"), 32, 0x0100_0005).unwrap();
        ids.maps = vec![None, None, None, Some(Arc::new(m))];
        let id = ids.dst_identity(&key);
        assert_eq!(id, 0x0100_0005);
        let k = identity_key(&key, id);
        assert!(identity_prefix(id, Family::V4).matches(k.dst_ip()));
        assert!(!identity_prefix(id + 1, Family::V4).matches(k.dst_ip()));
        let mut other = key;
        other.network = 1;
        assert_eq!(ids.dst_identity(&other), WORLD);
    }
}
