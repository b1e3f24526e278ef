//! [`Lpm6`]: the IPv6 route table of a VRF.
//!
//! Routes up to /64 live in a multibit trie: a root indexed by the top 24 address bits
//! (64 MiB of address space, backed only where written: a 4 KiB page per 1024 /24s, or
//! in a clone a 2 MiB huge page where at least half of its pages are written) and
//! 256-entry groups for each further byte down to bit 64, leaf-pushed like
//! [`Lpm4`](super::Lpm4) — a /48 costs at most 4 dependent reads, a /64 at most 6, and
//! most misses stop at the root. (A 16-bit root costs one more level on every path; in
//! A/B runs on a noisy machine it measured up to ~15% slower.)
//! Routes longer than /64 (in practice /128 pod routes) live in exact-match hash tables,
//! one per length present. The trie entry of every /64 that holds such routes carries a
//! flag, so only addresses inside those /64s probe the hash tables (longest first);
//! a /128 thus costs no trie groups beyond those of its /64.
//! Routes shorter than /8 live in the 256-entry short table, as for IPv4.

use super::entry::{is_ext, leaf, DEPTH_MASK, EMPTY, FLAG, PAYLOAD};
use super::rules::{mask128, RuleSet};
use super::short::ShortTable;
use super::trie::{Trie, GROUP_ENTRIES};
use super::{check_route, LpmError, NextHop, NO_ROUTE};
use std::collections::HashMap;
use std::fmt;
use std::net::Ipv6Addr;

/// Address bits the root table is indexed by.
const ROOT_BITS: u32 = 24;
/// Shift that leaves the root index of an address.
const ROOT_SHIFT: u32 = 128 - ROOT_BITS;
/// Routes longer than this live in the exact-match tables.
const TRIE_MAX_LEN: u8 = 64;
/// Lookups resolved per pass of [`Lpm6::lookup_batch`].
const BATCH_LANES: usize = 64;

/// An IPv6 longest-prefix-match table.
///
/// Cloning copies the written parts only; the clone is independent of its source.
#[derive(Clone)]
pub struct Lpm6 {
    trie: Trie<ROOT_BITS, { 1 << ROOT_BITS }>,
    short: ShortTable,
    rules: RuleSet<u128>,
    /// Lengths > /64 that have routes, longest first.
    long_lens: Vec<u8>,
    /// Number of routes > /64 inside each /64 (keyed by its top 64 bits).
    long_per_64: HashMap<u64, u32>,
}

impl Default for Lpm6 {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Lpm6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lpm6")
            .field("routes", &self.len())
            .field("groups", &self.trie.groups_in_use())
            .field("long_lens", &self.long_lens)
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

impl Lpm6 {
    /// An empty table.
    pub fn new() -> Self {
        Lpm6 {
            trie: Trie::new(TRIE_MAX_LEN),
            short: ShortTable::new(),
            rules: RuleSet::new(),
            long_lens: Vec::new(),
            long_per_64: HashMap::new(),
        }
    }

    /// Adds the route `prefix/len → nh`, or replaces the next hop of that exact route
    /// (returning the old one). Host bits of `prefix` beyond `len` are ignored.
    pub fn insert(
        &mut self,
        prefix: Ipv6Addr,
        len: u8,
        nh: NextHop,
    ) -> Result<Option<NextHop>, LpmError> {
        check_route(len, 128, nh)?;
        let p = u128::from(prefix) & mask128(len);
        if len > TRIE_MAX_LEN {
            if self.rules.get(p, len).is_none() {
                let slash64 = (p >> 64) as u64;
                if !self.long_per_64.contains_key(&slash64) {
                    self.trie.set_flag(p, true)?;
                }
                *self.long_per_64.entry(slash64).or_insert(0) += 1;
            }
        } else if len >= 8 {
            self.trie.insert(p, len, nh)?;
        }
        let old = self.rules.insert(p, len, nh);
        if len < 8 {
            self.short.refresh(&self.rules, p, len);
        } else if len > TRIE_MAX_LEN && old.is_none() {
            self.refresh_long_lens();
        }
        Ok(old)
    }

    /// Removes the route `prefix/len`; its addresses fall back to the next-longest
    /// covering route. Returns its next hop, `None` if there was no such route.
    pub fn remove(&mut self, prefix: Ipv6Addr, len: u8) -> Option<NextHop> {
        if len > 128 {
            return None;
        }
        let p = u128::from(prefix) & mask128(len);
        let old = self.rules.remove(p, len)?;
        if len < 8 {
            self.short.refresh(&self.rules, p, len);
        } else if len <= TRIE_MAX_LEN {
            let replacement = match self.rules.covering(p, len) {
                Some((l, nh)) if l >= 8 => leaf(l, nh),
                _ => EMPTY,
            };
            self.trie.remove(p, len, replacement);
        } else {
            let slash64 = (p >> 64) as u64;
            let left = self.long_per_64.get_mut(&slash64).map(|n| {
                *n -= 1;
                *n
            });
            if left == Some(0) {
                self.long_per_64.remove(&slash64);
                // Clearing a flag only folds groups; it cannot fail.
                let _ = self.trie.set_flag(p, false);
            }
            self.refresh_long_lens();
        }
        Some(old)
    }

    fn refresh_long_lens(&mut self) {
        self.long_lens.clear();
        self.long_lens.extend(
            (TRIE_MAX_LEN + 1..=128)
                .rev()
                .filter(|&l| self.rules.has_len(l)),
        );
    }

    /// The next hop of the exact route `prefix/len`.
    pub fn get(&self, prefix: Ipv6Addr, len: u8) -> Option<NextHop> {
        if len > 128 {
            return None;
        }
        self.rules.get(u128::from(prefix) & mask128(len), len)
    }

    /// The next hop of the longest route covering `addr`.
    #[inline]
    pub fn lookup(&self, addr: Ipv6Addr) -> Option<NextHop> {
        match self.lookup_u128(u128::from(addr)) {
            NO_ROUTE => None,
            nh => Some(nh),
        }
    }

    /// The next hop of the longest route covering `addr`, [`NO_ROUTE`] if none does.
    #[inline]
    pub fn lookup_u128(&self, addr: u128) -> u32 {
        let mut e = self.trie.root.entries[(addr >> ROOT_SHIFT) as usize];
        let mut shift = ROOT_SHIFT - 8;
        while is_ext(e) {
            e = self.group_entry(e, addr, shift);
            shift -= 8;
        }
        self.resolve(e, addr)
    }

    #[inline(always)]
    fn group_entry(&self, e: u32, addr: u128, shift: u32) -> u32 {
        let byte = (addr >> shift) as usize & 0xFF;
        self.trie.groups[(e & PAYLOAD) as usize * GROUP_ENTRIES + byte]
    }

    /// The result for the trie leaf `e` reached by `addr`.
    #[inline(always)]
    fn resolve(&self, e: u32, addr: u128) -> u32 {
        if e & FLAG != 0 {
            if let Some(nh) = self.lookup_long(addr) {
                return nh;
            }
        }
        if e & DEPTH_MASK != 0 {
            e & PAYLOAD
        } else {
            self.short.next_hop[(addr >> 120) as usize]
        }
    }

    /// The longest route > /64 covering `addr`, probing each length present.
    #[inline]
    fn lookup_long(&self, addr: u128) -> Option<NextHop> {
        self.long_lens
            .iter()
            .find_map(|&len| self.rules.get(addr & mask128(len), len))
    }

    /// Looks up every address of `addrs` into `out[i]`, [`NO_ROUTE`] for a miss. The
    /// trie is walked level by level across up to 64 addresses, so the reads of one
    /// level are independent of each other and overlap their cache misses.
    ///
    /// # Panics
    /// If `out` is shorter than `addrs`.
    pub fn lookup_batch(&self, addrs: &[u128], out: &mut [u32]) {
        let out = &mut out[..addrs.len()];
        let root = &self.trie.root.entries;
        for (a, o) in addrs.chunks(BATCH_LANES).zip(out.chunks_mut(BATCH_LANES)) {
            let mut pending = false;
            for (&addr, slot) in a.iter().zip(o.iter_mut()) {
                let e = root[(addr >> ROOT_SHIFT) as usize];
                pending |= is_ext(e);
                *slot = e;
            }
            let mut shift = ROOT_SHIFT - 8;
            while pending {
                pending = false;
                for (&addr, slot) in a.iter().zip(o.iter_mut()) {
                    if is_ext(*slot) {
                        let e = self.group_entry(*slot, addr, shift);
                        pending |= is_ext(e);
                        *slot = e;
                    }
                }
                shift -= 8;
            }
            for (&addr, slot) in a.iter().zip(o.iter_mut()) {
                *slot = self.resolve(*slot, addr);
            }
        }
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether the table has no route.
    pub fn is_empty(&self) -> bool {
        self.rules.len() == 0
    }

    /// All routes as `(prefix, len, next hop)`, sorted by prefix then length.
    pub fn iter(&self) -> impl Iterator<Item = (Ipv6Addr, u8, NextHop)> + '_ {
        self.rules
            .sorted()
            .into_iter()
            .map(|(p, len, nh)| (Ipv6Addr::from(p), len, nh))
    }

    /// Bytes the table occupies: written root pages, trie groups, the short-route table,
    /// the master route set (which is also the exact-match table of routes > /64).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.trie.memory_bytes()
            + self.rules.memory_bytes()
            + self.long_per_64.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }

    /// Trie groups in use.
    pub fn groups(&self) -> usize {
        self.trie.groups_in_use()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn nested_routes_with_host_routes() {
        let mut t = Lpm6::new();
        t.insert(a("::"), 0, 1).unwrap();
        t.insert(a("2001:db8::"), 32, 2).unwrap();
        t.insert(a("2001:db8:1::"), 48, 3).unwrap();
        t.insert(a("2001:db8:1:2::"), 64, 4).unwrap();
        t.insert(a("2001:db8:1:2::10"), 128, 5).unwrap();
        t.insert(a("2001:db8:5:3::10"), 128, 6).unwrap();
        t.insert(a("2001:db8:1:2::"), 96, 7).unwrap();
        let probe = |t: &Lpm6| {
            [
                "2001:db8:1:2::10",
                "2001:db8:1:2::11",
                "2001:db8:1:2:1::",
                "2001:db8:5:3::10",
                "2001:db8:5:3::11",
                "2001:db8:2::",
                "2001:db9::",
            ]
            .map(|s| t.lookup(a(s)))
        };
        assert_eq!(probe(&t), [5, 7, 4, 6, 2, 2, 1].map(Some));
        let groups = t.groups();
        t.remove(a("2001:db8:5:3::10"), 128).unwrap();
        assert!(t.groups() < groups, "the /64 without host routes folds");
        assert_eq!(probe(&t), [5, 7, 4, 2, 2, 2, 1].map(Some));
        t.remove(a("2001:db8:1:2::"), 64).unwrap();
        assert_eq!(probe(&t), [5, 7, 3, 2, 2, 2, 1].map(Some));
        t.remove(a("2001:db8:1:2::10"), 128).unwrap();
        t.remove(a("2001:db8:1:2::"), 96).unwrap();
        assert_eq!(probe(&t), [3, 3, 3, 2, 2, 2, 1].map(Some));
        t.remove(a("::"), 0).unwrap();
        t.remove(a("2001:db8::"), 32).unwrap();
        t.remove(a("2001:db8:1::"), 48).unwrap();
        assert_eq!(probe(&t), [None; 7]);
        assert_eq!(t.groups(), 0);
        assert!(t.is_empty());
    }

    #[test]
    fn a_group_of_flagged_slash64s_folds_only_when_all_flags_go() {
        let mut t = Lpm6::new();
        t.insert(a("2001:db8::"), 48, 1).unwrap();
        // Host routes in all 256 /64s of 2001:db8:0:100::/56: every entry of that
        // deepest group is the same flagged leaf.
        let host = |i: u16| Ipv6Addr::new(0x2001, 0xdb8, 0, 0x100 | i, 0, 0, 0, 1);
        for i in 0..256 {
            t.insert(host(i), 128, 100 + u32::from(i)).unwrap();
        }
        for i in 0..256 {
            assert_eq!(t.lookup(host(i)), Some(100 + u32::from(i)));
            assert_eq!(t.remove(host(i), 128), Some(100 + u32::from(i)));
            assert_eq!(t.lookup(host(i)), Some(1));
            if i < 255 {
                assert_eq!(t.lookup(host(255)), Some(355));
            }
        }
        assert_eq!(t.groups(), 3, "only the /48's path is left: bits 24..48");
        t.remove(a("2001:db8::"), 48).unwrap();
        assert_eq!(t.groups(), 0);
    }
}
