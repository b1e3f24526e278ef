//! The master route set of an LPM table: every route by prefix length. It is the source
//! of truth the lookup structures are derived from, answers exact-route queries, finds
//! the covering route a remove falls back to, and lists the routes in order.

use super::NextHop;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{BuildHasher, Hash, Hasher};

/// An address as an unsigned integer, most significant bit first.
pub(crate) trait PrefixBits: Copy + Eq + Ord + Hash + Debug {
    /// Address width: 32 or 128.
    const BITS: u8;
    /// Keeps the top `len` bits (`len` <= `BITS`).
    fn masked(self, len: u8) -> Self;
    /// The address whose top byte is `byte` and whose other bits are zero.
    fn from_top_byte(byte: u8) -> Self;
    /// The top byte.
    fn top_byte(self) -> u8;
}

impl PrefixBits for u32 {
    const BITS: u8 = 32;
    #[inline]
    fn masked(self, len: u8) -> Self {
        self & mask32(len)
    }
    fn from_top_byte(byte: u8) -> Self {
        u32::from(byte) << 24
    }
    fn top_byte(self) -> u8 {
        (self >> 24) as u8
    }
}

impl PrefixBits for u128 {
    const BITS: u8 = 128;
    #[inline]
    fn masked(self, len: u8) -> Self {
        self & mask128(len)
    }
    fn from_top_byte(byte: u8) -> Self {
        u128::from(byte) << 120
    }
    fn top_byte(self) -> u8 {
        (self >> 120) as u8
    }
}

/// The netmask of a /`len` IPv4 prefix.
#[inline]
pub(crate) fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

/// The netmask of a /`len` IPv6 prefix.
#[inline]
pub(crate) fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// All routes, one hash map per prefix length, keyed by the masked prefix.
#[derive(Clone)]
pub(crate) struct RuleSet<K> {
    by_len: Vec<HashMap<K, NextHop, PrefixHashBuilder>>,
    count: usize,
}

impl<K: PrefixBits> RuleSet<K> {
    pub(crate) fn new() -> Self {
        let hasher = PrefixHashBuilder::new();
        RuleSet {
            by_len: (0..=K::BITS)
                .map(|_| HashMap::with_hasher(hasher.clone()))
                .collect(),
            count: 0,
        }
    }

    /// Number of routes.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Adds or replaces a route (`prefix` already masked); returns the replaced next hop.
    pub(crate) fn insert(&mut self, prefix: K, len: u8, nh: NextHop) -> Option<NextHop> {
        let old = self.by_len[usize::from(len)].insert(prefix, nh);
        if old.is_none() {
            self.count += 1;
        }
        old
    }

    /// Removes a route (`prefix` already masked); returns its next hop.
    pub(crate) fn remove(&mut self, prefix: K, len: u8) -> Option<NextHop> {
        let map = &mut self.by_len[usize::from(len)];
        let old = map.remove(&prefix)?;
        self.count -= 1;
        if map.is_empty() {
            // Give the memory back: a VRF that once held many routes of a length.
            *map = HashMap::with_hasher(map.hasher().clone());
        }
        Some(old)
    }

    /// The exact route `prefix/len` (`prefix` already masked).
    #[inline]
    pub(crate) fn get(&self, prefix: K, len: u8) -> Option<NextHop> {
        self.by_len[usize::from(len)].get(&prefix).copied()
    }

    /// Whether any route has length `len`.
    #[inline]
    pub(crate) fn has_len(&self, len: u8) -> bool {
        !self.by_len[usize::from(len)].is_empty()
    }

    /// The longest route shorter than `len` that covers `prefix`: what the addresses of
    /// `prefix/len` fall back to when that route goes away.
    pub(crate) fn covering(&self, prefix: K, len: u8) -> Option<(u8, NextHop)> {
        (0..len)
            .rev()
            .filter(|&l| self.has_len(l))
            .find_map(|l| self.get(prefix.masked(l), l).map(|nh| (l, nh)))
    }

    /// The longest route of length < 8 covering addresses whose top byte is `byte`.
    pub(crate) fn best_short(&self, byte: u8) -> Option<NextHop> {
        self.covering(K::from_top_byte(byte), 8).map(|(_, nh)| nh)
    }

    /// Every route, sorted by (prefix, length).
    pub(crate) fn sorted(&self) -> Vec<(K, u8, NextHop)> {
        let mut all = Vec::with_capacity(self.count);
        for (len, map) in (0..=K::BITS).zip(&self.by_len) {
            all.extend(map.iter().map(|(&p, &nh)| (p, len, nh)));
        }
        all.sort_unstable_by_key(|&(p, len, _)| (p, len));
        all
    }

    /// Approximate heap bytes: buckets of every map (key, next hop, control byte).
    pub(crate) fn memory_bytes(&self) -> usize {
        let bucket = std::mem::size_of::<(K, NextHop)>() + 1;
        self.by_len
            .iter()
            .map(|m| m.capacity() * bucket)
            .sum::<usize>()
            + self.by_len.capacity() * std::mem::size_of::<HashMap<K, NextHop>>()
    }
}

/// A fast keyed hasher for prefixes: a folded 64x64->128 multiply per word, seeded per
/// table from the process's random hash keys, so route sets from outside cannot be
/// crafted to collide. Clones of a table share the seed.
#[derive(Clone)]
pub(crate) struct PrefixHashBuilder {
    seed: u64,
}

impl PrefixHashBuilder {
    fn new() -> Self {
        PrefixHashBuilder {
            seed: RandomState::new().hash_one(0x243f_6a88_85a3_08d3_u64) | 1,
        }
    }
}

impl BuildHasher for PrefixHashBuilder {
    type Hasher = PrefixHasher;
    #[inline]
    fn build_hasher(&self) -> PrefixHasher {
        PrefixHasher { state: self.seed }
    }
}

pub(crate) struct PrefixHasher {
    state: u64,
}

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl PrefixHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        let product = u128::from(self.state ^ word) * u128::from(MULTIPLIER);
        self.state = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for PrefixHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }
    #[inline]
    fn write_u128(&mut self, n: u128) {
        self.mix(n as u64);
        self.mix((n >> 64) as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(mask32(0), 0);
        assert_eq!(mask32(8), 0xFF00_0000);
        assert_eq!(mask32(32), u32::MAX);
        assert_eq!(mask128(0), 0);
        assert_eq!(mask128(1), 1 << 127);
        assert_eq!(mask128(128), u128::MAX);
    }

    #[test]
    fn covering_finds_the_next_longest_route() {
        let mut r = RuleSet::<u32>::new();
        r.insert(0, 0, 1);
        r.insert(0x0A00_0000, 8, 2);
        r.insert(0x0A01_0000, 16, 3);
        assert_eq!(r.covering(0x0A01_0200, 24), Some((16, 3)));
        assert_eq!(r.covering(0x0A01_0000, 16), Some((8, 2)));
        assert_eq!(r.covering(0x0B00_0000, 8), Some((0, 1)));
        assert_eq!(r.covering(0, 0), None);
        assert_eq!(r.best_short(0x0A), Some(1));
        assert_eq!(r.len(), 3);
        assert_eq!(r.remove(0, 0), Some(1));
        assert_eq!(r.remove(0, 0), None);
        assert_eq!(r.best_short(0x0A), None);
        assert_eq!(r.sorted(), vec![(0x0A00_0000, 8, 2), (0x0A01_0000, 16, 3)]);
    }
}
