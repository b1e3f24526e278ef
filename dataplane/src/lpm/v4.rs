//! [`Lpm4`]: the IPv4 route table of a VRF, DIR-24-8 like DPDK's `rte_lpm`.
//!
//! A lookup reads the root entry of the top 24 address bits (tbl24, 64 MiB of address
//! space backed only where routes were written); an extension entry sends it to one
//! 256-entry group (tbl8) indexed by the last byte. An empty entry falls back to the
//! 256-entry table of routes shorter than /8. At most two dependent memory reads.

use super::entry::{is_ext, leaf, DEPTH_MASK, DEPTH_SHIFT, EMPTY, PAYLOAD};
use super::rules::{mask32, RuleSet};
use super::short::ShortTable;
use super::trie::{Trie, GROUP_ENTRIES};
use super::{check_route, LpmError, NextHop, NO_ROUTE};
use std::fmt;
use std::net::Ipv4Addr;

/// Lookups resolved per pass of [`Lpm4::lookup_batch`].
const BATCH_LANES: usize = 256;

/// An IPv4 longest-prefix-match table (DIR-24-8 with incremental updates).
///
/// Cloning copies the written parts only; the clone is independent of its source.
#[derive(Clone)]
pub struct Lpm4 {
    trie: Trie<24, { 1 << 24 }>,
    short: ShortTable,
    rules: RuleSet<u32>,
}

impl Default for Lpm4 {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Lpm4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lpm4")
            .field("routes", &self.len())
            .field("tbl8_groups", &self.trie.groups_in_use())
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

/// The prefix as the trie's left-aligned key.
fn wide(prefix: u32) -> u128 {
    u128::from(prefix) << 96
}

impl Lpm4 {
    /// An empty table. tbl24 is reserved as zero pages; tbl8 groups grow on demand.
    pub fn new() -> Self {
        Lpm4 {
            trie: Trie::new(32),
            short: ShortTable::new(),
            rules: RuleSet::new(),
        }
    }

    /// Adds the route `prefix/len → nh`, or replaces the next hop of that exact route
    /// (returning the old one). Host bits of `prefix` beyond `len` are ignored.
    pub fn insert(
        &mut self,
        prefix: Ipv4Addr,
        len: u8,
        nh: NextHop,
    ) -> Result<Option<NextHop>, LpmError> {
        check_route(len, 32, nh)?;
        let p = u32::from(prefix) & mask32(len);
        if len >= 8 {
            self.trie.insert(wide(p), len, nh)?;
        }
        let old = self.rules.insert(p, len, nh);
        if len < 8 {
            self.short.refresh(&self.rules, p, len);
        }
        Ok(old)
    }

    /// Removes the route `prefix/len`; its addresses fall back to the next-longest
    /// covering route. Returns its next hop, `None` if there was no such route.
    pub fn remove(&mut self, prefix: Ipv4Addr, len: u8) -> Option<NextHop> {
        if len > 32 {
            return None;
        }
        let p = u32::from(prefix) & mask32(len);
        let old = self.rules.remove(p, len)?;
        if len < 8 {
            self.short.refresh(&self.rules, p, len);
        } else {
            let replacement = match self.rules.covering(p, len) {
                Some((l, nh)) if l >= 8 => leaf(l, nh),
                _ => EMPTY,
            };
            self.trie.remove(wide(p), len, replacement);
        }
        Some(old)
    }

    /// The next hop of the exact route `prefix/len`.
    pub fn get(&self, prefix: Ipv4Addr, len: u8) -> Option<NextHop> {
        if len > 32 {
            return None;
        }
        self.rules.get(u32::from(prefix) & mask32(len), len)
    }

    /// The next hop of the longest route covering `addr`.
    #[inline]
    pub fn lookup(&self, addr: Ipv4Addr) -> Option<NextHop> {
        match self.lookup_u32(u32::from(addr)) {
            NO_ROUTE => None,
            nh => Some(nh),
        }
    }

    /// The next hop of the longest route covering `addr` (host order), [`NO_ROUTE`] if
    /// none does.
    #[inline]
    pub fn lookup_u32(&self, addr: u32) -> u32 {
        let e = self.trie.root.entries[(addr >> 8) as usize];
        let e = if is_ext(e) { self.tbl8(e, addr) } else { e };
        self.resolve(e, addr)
    }

    #[inline(always)]
    fn tbl8(&self, e: u32, addr: u32) -> u32 {
        self.trie.groups[(e & PAYLOAD) as usize * GROUP_ENTRIES + (addr & 0xFF) as usize]
    }

    /// The next hop of leaf `e`, or of the short route table when `e` is empty, without
    /// a branch: a quarter of the lookups may miss, and a mispredicted branch would throw
    /// away the table reads of the lookups issued after it. (A select written in Rust
    /// is turned back into a branch by the compiler; a mask read from a table is not.)
    #[inline(always)]
    fn resolve(&self, e: u32, addr: u32) -> u32 {
        let short = self.short.next_hop[(addr >> 24) as usize];
        let empty = self.short.empty_mask[(e >> DEPTH_SHIFT) as usize & 0x7F];
        (e & PAYLOAD & !empty) | (short & empty)
    }

    /// Looks up every address of `addrs` (host order) into `out[i]`, [`NO_ROUTE`] for a
    /// miss. A first pass reads the tbl24 entry (and the tbl8 entry, for the few that
    /// extend) of up to 256 addresses: few instructions per address and no dependency
    /// between addresses, so the out-of-order core keeps dozens of cache and TLB misses
    /// in flight. A second pass turns the entries into next hops, without branches.
    ///
    /// # Panics
    /// If `out` is shorter than `addrs`.
    pub fn lookup_batch(&self, addrs: &[u32], out: &mut [u32]) {
        let out = &mut out[..addrs.len()];
        let tbl24 = &self.trie.root.entries;
        for (a, o) in addrs.chunks(BATCH_LANES).zip(out.chunks_mut(BATCH_LANES)) {
            for (&addr, slot) in a.iter().zip(o.iter_mut()) {
                let e = tbl24[(addr >> 8) as usize];
                *slot = if is_ext(e) { self.tbl8(e, addr) } else { e };
            }
            match self.short.uniform {
                // No route shorter than /8, or one covering all of them alike (a default
                // route): a pass the compiler vectorises.
                Some(short) => {
                    for slot in o.iter_mut() {
                        let e = *slot;
                        *slot = if e & DEPTH_MASK == 0 {
                            short
                        } else {
                            e & PAYLOAD
                        };
                    }
                }
                None => {
                    for (&addr, slot) in a.iter().zip(o.iter_mut()) {
                        *slot = self.resolve(*slot, addr);
                    }
                }
            }
        }
    }

    /// Hints that the lookup of `addr` will be made soon: its first table entry is
    /// fetched while the caller gathers the rest of a batch.
    #[inline(always)]
    pub fn prefetch(&self, addr: u32) {
        if let Some(e) = self.trie.root.entries.get((addr >> 8) as usize) {
            crate::conntrack::prefetch(e);
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
    pub fn iter(&self) -> impl Iterator<Item = (Ipv4Addr, u8, NextHop)> + '_ {
        self.rules
            .sorted()
            .into_iter()
            .map(|(p, len, nh)| (Ipv4Addr::from(p), len, nh))
    }

    /// Bytes the table occupies: the written 4 KiB pages of tbl24 (the rest is untouched
    /// zero pages), the tbl8 groups, the short-route table and the master route set.
    /// Counted in 4 KiB pages: a clone's dense stretches of tbl24, on huge pages, can
    /// cost up to twice their share.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.trie.memory_bytes() + self.rules.memory_bytes()
    }

    /// tbl8 groups in use.
    pub fn tbl8_groups(&self) -> usize {
        self.trie.groups_in_use()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn nested_routes_insert_and_remove() {
        let mut t = Lpm4::new();
        assert_eq!(t.lookup(a("10.1.2.3")), None);
        assert_eq!(t.insert(a("0.0.0.0"), 0, 1), Ok(None));
        assert_eq!(t.insert(a("10.0.0.0"), 8, 2), Ok(None));
        assert_eq!(t.insert(a("10.1.0.0"), 16, 3), Ok(None));
        assert_eq!(t.insert(a("10.1.2.0"), 24, 4), Ok(None));
        assert_eq!(t.insert(a("10.1.2.128"), 25, 5), Ok(None));
        assert_eq!(t.insert(a("10.1.2.3"), 32, 6), Ok(None));
        assert_eq!(t.tbl8_groups(), 1);
        let probe = |t: &Lpm4| {
            [
                "10.1.2.3",
                "10.1.2.4",
                "10.1.2.200",
                "10.1.3.1",
                "10.2.0.0",
                "11.0.0.0",
            ]
            .map(|s| t.lookup(a(s)))
        };
        assert_eq!(probe(&t), [6, 4, 5, 3, 2, 1].map(Some));
        assert_eq!(t.remove(a("10.1.2.0"), 24), Some(4));
        assert_eq!(probe(&t), [6, 3, 5, 3, 2, 1].map(Some));
        assert_eq!(t.remove(a("10.0.0.0"), 8), Some(2));
        assert_eq!(probe(&t), [6, 3, 5, 3, 1, 1].map(Some));
        assert_eq!(t.remove(a("10.1.2.3"), 32), Some(6));
        assert_eq!(t.remove(a("10.1.2.128"), 25), Some(5));
        assert_eq!(
            t.tbl8_groups(),
            0,
            "the group folds when its last /25+ goes"
        );
        assert_eq!(probe(&t), [3, 3, 3, 3, 1, 1].map(Some));
        assert_eq!(t.remove(a("0.0.0.0"), 0), Some(1));
        assert_eq!(probe(&t), [Some(3), Some(3), Some(3), Some(3), None, None]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn sibling_routes_with_equal_next_hops_keep_their_group() {
        let mut t = Lpm4::new();
        t.insert(a("10.0.0.0"), 25, 5).unwrap();
        t.insert(a("10.0.0.128"), 25, 5).unwrap();
        t.insert(a("10.0.0.0"), 26, 7).unwrap();
        assert_eq!(t.remove(a("10.0.0.0"), 26), Some(7));
        // All entries now read 5, but from /25s: folding them into tbl24 would lose them.
        assert_eq!(t.tbl8_groups(), 1);
        assert_eq!(t.remove(a("10.0.0.0"), 25), Some(5));
        assert_eq!(t.lookup(a("10.0.0.1")), None);
        assert_eq!(t.lookup(a("10.0.0.129")), Some(5));
        assert_eq!(t.remove(a("10.0.0.128"), 25), Some(5));
        assert_eq!(t.tbl8_groups(), 0);
        assert_eq!(t.lookup(a("10.0.0.129")), None);
    }

    #[test]
    fn replace_mask_and_errors() {
        let mut t = Lpm4::new();
        assert_eq!(t.insert(a("192.168.7.9"), 16, 1), Ok(None));
        assert_eq!(t.get(a("192.168.0.0"), 16), Some(1));
        assert_eq!(t.insert(a("192.168.0.0"), 16, 2), Ok(Some(1)));
        assert_eq!(t.lookup(a("192.168.255.1")), Some(2));
        assert_eq!(
            t.insert(a("1.2.3.4"), 33, 1),
            Err(LpmError::PrefixLength { len: 33, max: 32 })
        );
        assert_eq!(
            t.insert(a("1.2.3.4"), 8, 1 << 24),
            Err(LpmError::NextHopTooLarge(1 << 24))
        );
        assert_eq!(t.remove(a("1.0.0.0"), 8), None);
        assert_eq!(t.remove(a("1.0.0.0"), 40), None);
        assert_eq!(t.len(), 1);
        let routes: Vec<_> = t.iter().collect();
        assert_eq!(routes, vec![(a("192.168.0.0"), 16, 2)]);
    }

    #[test]
    fn short_routes_do_not_touch_tbl24() {
        let mut t = Lpm4::new();
        let empty = t.memory_bytes();
        t.insert(a("0.0.0.0"), 0, 7).unwrap();
        t.insert(a("128.0.0.0"), 1, 8).unwrap();
        t.insert(a("10.0.0.0"), 7, 9).unwrap();
        assert!(t.memory_bytes() - empty < 8192);
        assert_eq!(t.lookup(a("1.1.1.1")), Some(7));
        assert_eq!(t.lookup(a("11.1.1.1")), Some(9));
        assert_eq!(t.lookup(a("200.1.1.1")), Some(8));
        let c = t.clone();
        assert_eq!(c.memory_bytes(), t.memory_bytes());
        assert_eq!(c.lookup(a("11.1.1.1")), Some(9));
    }
}
