//! The connection table's hash index: a seeded multiply-fold hash of a [`FlowKey`] and
//! an open-addressing table of 64-byte buckets (ten 16-bit tags, ten 32-bit entry
//! references, an overflow count) with linear probing between buckets and exact
//! deletion (no tombstones: a bucket's overflow count says whether a probe must go on).

use super::{preallocated, prefetch, MemoryAdvice};
use crate::flow::FlowKey;

/// A key's hash under one table's seed ([`ConnTable::hash`](super::ConnTable::hash)),
/// to look the key up later without hashing it again, and, once
/// [`prefetch_entry`](super::ConnTable::prefetch_entry) has read its bucket, the
/// reference of the entry it prefetched (the lookup checks that entry first, without
/// reading the bucket again). Only meaningful for the table that computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash {
    pub(super) h: u64,
    /// The first reference whose tag matched in the home bucket (or, after
    /// [`Index::next_candidate`], in the next one), `NO_CANDIDATE`, or `IN_NEXT`.
    pub(super) cand: u32,
}

/// No candidate reference (not read yet, or no tag matched).
pub(super) const NO_CANDIDATE: u32 = u32::MAX;
/// No tag matched in the home bucket, but keys overflowed past it: the key may be in
/// the next bucket (prefetched). Like `NO_CANDIDATE`, never a valid reference.
pub(super) const IN_NEXT: u32 = u32::MAX - 1;

impl KeyHash {
    #[inline(always)]
    pub(super) fn new(h: u64) -> KeyHash {
        KeyHash {
            h,
            cand: NO_CANDIDATE,
        }
    }
}

impl Default for KeyHash {
    fn default() -> Self {
        KeyHash::new(0)
    }
}

/// Slots per bucket.
pub(super) const SLOTS: usize = 10;
/// Buckets per connection, as a fraction: two keys per connection at 80% load at
/// most — one 64-byte bucket per four connections, 16 bytes each.
pub(super) const CONNS_PER_BUCKET: usize = 4;
/// The tag of an empty slot (real tags are never 0).
const EMPTY: u16 = 0;

/// One cache line of the index.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Bucket {
    tags: [u16; SLOTS],
    /// How many keys whose probe started at or before this bucket live after it
    /// (saturates, and then stays, at `u16::MAX`).
    overflow: u16,
    _pad: u16,
    refs: [u32; SLOTS],
}

const EMPTY_BUCKET: Bucket = Bucket {
    tags: [EMPTY; SLOTS],
    overflow: 0,
    _pad: 0,
    refs: [0; SLOTS],
};

#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// splitmix64, to derive the hash's seed words from one seed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The index: buckets and the seeded hash.
#[derive(Debug, Clone)]
pub(super) struct Index {
    buckets: Vec<Bucket>,
    seed: [u64; 6],
}

impl Index {
    /// An index for `max_conns` connections (two keys each).
    pub(super) fn new(max_conns: usize, seed: u64, advice: &impl MemoryAdvice) -> Index {
        let n = max_conns.div_ceil(CONNS_PER_BUCKET).max(1);
        let mut s = seed;
        Index {
            buckets: preallocated(n, EMPTY_BUCKET, advice),
            seed: std::array::from_fn(|_| splitmix(&mut s)),
        }
    }

    /// Bytes of the buckets.
    pub(super) fn memory_bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// The seeded hash of a key. The ports, zone and protocol enter both operands of
    /// the last multiplication: in one only, keys that differ in one port alone (many
    /// connections from one pod to one server) crowd some buckets under some seeds.
    #[inline(always)]
    pub(super) fn hash(&self, k: &FlowKey) -> u64 {
        let s = u128::from_le_bytes(k.src);
        let d = u128::from_le_bytes(k.dst);
        let misc = u64::from(k.src_port)
            | u64::from(k.dst_port) << 16
            | u64::from(k.network) << 32
            | u64::from(k.proto) << 48
            | (k.family as u64) << 56;
        let a = fold(s as u64 ^ self.seed[0], (s >> 64) as u64 ^ self.seed[1]);
        let b = fold(d as u64 ^ self.seed[2], (d >> 64) as u64 ^ self.seed[3]);
        fold(
            a ^ misc ^ self.seed[4],
            b ^ misc.rotate_left(32) ^ self.seed[5],
        )
    }

    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.buckets.len() as u128) >> 64) as usize
    }

    #[inline(always)]
    fn tag(h: u64) -> u16 {
        (h as u16).max(1)
    }

    #[inline(always)]
    fn next(&self, b: usize) -> usize {
        if b + 1 == self.buckets.len() {
            0
        } else {
            b + 1
        }
    }

    /// Prefetches the bucket a probe for hash `h` starts at.
    #[inline(always)]
    pub(super) fn prefetch(&self, h: u64) {
        prefetch(&self.buckets[self.home(h)]);
    }

    /// The first reference in the home bucket of `h` whose tag matches (to prefetch
    /// the entry before the real probe); when none does but keys overflowed past the
    /// home bucket, prefetches the next bucket and says `IN_NEXT`; else
    /// `NO_CANDIDATE`.
    #[inline(always)]
    pub(super) fn first_candidate(&self, h: u64) -> u32 {
        let home = self.home(h);
        let b = &self.buckets[home];
        let m = Self::tag_mask(b, Self::tag(h));
        if m != 0 {
            b.refs[m.trailing_zeros() as usize]
        } else if b.overflow != 0 {
            prefetch(&self.buckets[self.next(home)]);
            IN_NEXT
        } else {
            NO_CANDIDATE
        }
    }

    /// The first reference in the bucket after the home bucket of `h` whose tag
    /// matches (after [`first_candidate`](Self::first_candidate) said `IN_NEXT`).
    #[inline]
    pub(super) fn next_candidate(&self, h: u64) -> Option<u32> {
        let b = &self.buckets[self.next(self.home(h))];
        let m = Self::tag_mask(b, Self::tag(h));
        (m != 0).then(|| b.refs[m.trailing_zeros() as usize])
    }

    /// Bit `i` set when slot `i` of `b` holds `tag`: with the DPDK layer on x86-64, one
    /// SSE2 compare of slots 0-7 and 8-9 scalar; otherwise branch-free scalar compares.
    #[inline(always)]
    fn tag_mask(b: &Bucket, tag: u16) -> u32 {
        #[cfg(all(feature = "dpdk", target_arch = "x86_64"))]
        {
            let (low, high) = b.tags.split_at(8);
            let low: &[u16; 8] = low.try_into().expect("eight tags");
            crate::dpdk::memory::eq_mask_u16x8(low, tag)
                | u32::from(high[0] == tag) << 8
                | u32::from(high[1] == tag) << 9
        }
        #[cfg(not(all(feature = "dpdk", target_arch = "x86_64")))]
        {
            let mut m = 0u32;
            for (i, &t) in b.tags.iter().enumerate() {
                m |= u32::from(t == tag) << i;
            }
            m
        }
    }

    /// The reference stored for a key with hash `h` for which `matches` is true. A key
    /// that is not there is usually told by its home bucket alone (no tag matches, no
    /// overflow), before the probe proper. Both are inline: the probe behind a call,
    /// though established packets never make it, cost each of them 28 instructions of
    /// register shuffling in the burst lookup; inline, it costs a new connection 24.
    #[inline(always)]
    pub(super) fn find(&self, h: u64, matches: impl FnMut(u32) -> bool) -> Option<u32> {
        let b = &self.buckets[self.home(h)];
        if Self::tag_mask(b, Self::tag(h)) == 0 && b.overflow == 0 {
            return None;
        }
        self.probe(h, matches)
    }

    /// [`find`](Self::find)'s probe, from the home bucket on.
    #[inline(always)]
    fn probe(&self, h: u64, mut matches: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = Self::tag(h);
        let mut b = self.home(h);
        for _ in 0..self.buckets.len() {
            let bucket = &self.buckets[b];
            let mut m = Self::tag_mask(bucket, tag);
            while m != 0 {
                let r = bucket.refs[m.trailing_zeros() as usize];
                if matches(r) {
                    return Some(r);
                }
                m &= m - 1;
            }
            if bucket.overflow == 0 {
                return None;
            }
            b = self.next(b);
        }
        None
    }

    /// Stores reference `r` under hash `h`. False only when every slot is taken, which
    /// the table's sizing rules out. The home bucket's first empty slot is found inline
    /// (one compare of its tags), a later bucket's by the probe proper.
    #[inline(always)]
    pub(super) fn insert(&mut self, h: u64, r: u32) -> bool {
        let tag = Self::tag(h);
        let home = self.home(h);
        let bucket = &mut self.buckets[home];
        let empty = Self::tag_mask(bucket, EMPTY);
        if empty != 0 {
            let i = empty.trailing_zeros() as usize;
            bucket.tags[i] = tag;
            bucket.refs[i] = r;
            return true;
        }
        self.insert_probe(h, r)
    }

    /// [`insert`](Self::insert) from the home bucket on.
    #[inline(never)]
    fn insert_probe(&mut self, h: u64, r: u32) -> bool {
        let tag = Self::tag(h);
        let mut b = self.home(h);
        for _ in 0..self.buckets.len() {
            let bucket = &mut self.buckets[b];
            if let Some(i) = bucket.tags.iter().position(|&t| t == EMPTY) {
                bucket.tags[i] = tag;
                bucket.refs[i] = r;
                return true;
            }
            bucket.overflow = bucket.overflow.saturating_add(1);
            b = self.next(b);
        }
        false
    }

    /// Removes reference `r` stored under hash `h`; false when it is not there.
    pub(super) fn remove(&mut self, h: u64, r: u32) -> bool {
        let tag = Self::tag(h);
        let home = self.home(h);
        let mut b = home;
        for step in 0..self.buckets.len() {
            let bucket = &mut self.buckets[b];
            if let Some(i) = (0..SLOTS).find(|&i| bucket.tags[i] == tag && bucket.refs[i] == r) {
                bucket.tags[i] = EMPTY;
                bucket.refs[i] = 0;
                let mut p = home;
                for _ in 0..step {
                    let o = &mut self.buckets[p].overflow;
                    if *o != u16::MAX {
                        *o -= 1;
                    }
                    p = self.next(p);
                }
                return true;
            }
            if bucket.overflow == 0 {
                return false;
            }
            b = self.next(b);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Family;
    use std::net::Ipv4Addr;

    /// A two-bucket index (eight connections) with `keys` inserted, each key's reference
    /// its position; and their hashes.
    fn filled(seed: u64, keys: impl Iterator<Item = FlowKey>) -> (Index, Vec<u64>) {
        let mut ix = Index::new(8, seed, &super::super::NoAdvice);
        let hs: Vec<u64> = keys.map(|k| ix.hash(&k)).collect();
        for (i, &h) in hs.iter().enumerate() {
            assert!(ix.insert(h, i as u32));
        }
        (ix, hs)
    }

    #[test]
    fn bucket_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
    }

    #[test]
    fn overflow_chains_survive_deletes() {
        // One bucket for 4 connections: 10 slots; force every key into bucket 0's
        // chain by using a two-bucket index and many keys.
        let (mut ix, hs) = filled(
            7,
            (0..16u16)
                .map(|p| FlowKey::v4(0, 17, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::LOCALHOST, p, 1)),
        );
        for (i, &h) in hs.iter().enumerate() {
            assert_eq!(ix.find(h, |r| r == i as u32), Some(i as u32));
        }
        for (i, &h) in hs.iter().enumerate().step_by(2) {
            assert!(ix.remove(h, i as u32));
            assert!(!ix.remove(h, i as u32));
        }
        for (i, &h) in hs.iter().enumerate() {
            let want = (i % 2 == 1).then_some(i as u32);
            assert_eq!(ix.find(h, |r| r == i as u32), want);
        }
        for (i, &h) in hs.iter().enumerate().skip(1).step_by(2) {
            assert!(ix.remove(h, i as u32));
        }
        assert!(ix
            .buckets
            .iter()
            .all(|b| b.overflow == 0 && b.tags == [EMPTY; SLOTS]));
    }

    #[test]
    fn candidates_point_into_the_home_or_the_next_bucket() {
        // Two buckets, 20 slots, 20 keys: unless they split evenly, some keys live past
        // their home bucket.
        let mut in_next = 0;
        for seed in 0..8 {
            let (ix, hs) = filled(
                seed,
                (0..20u16).map(|p| {
                    FlowKey::v4(0, 6, Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::LOCALHOST, p, 9)
                }),
            );
            for (i, &h) in hs.iter().enumerate() {
                let home = &ix.buckets[ix.home(h)];
                let tag_at_home = home.tags.contains(&Index::tag(h));
                match ix.first_candidate(h) {
                    IN_NEXT => {
                        assert!(!tag_at_home && home.overflow != 0);
                        assert_eq!(ix.next_candidate(h), Some(i as u32));
                        in_next += 1;
                    }
                    NO_CANDIDATE => panic!("key {i} is stored"),
                    r => assert!(tag_at_home && ix.find(h, |x| x == r).is_some()),
                }
            }
        }
        assert!(in_next > 0, "some keys overflowed");
    }

    #[test]
    fn tag_mask_marks_every_matching_slot() {
        let mut b = EMPTY_BUCKET;
        for pattern in 0u32..1 << SLOTS {
            for (i, t) in b.tags.iter_mut().enumerate() {
                *t = if pattern >> i & 1 != 0 {
                    0x8001
                } else {
                    i as u16 + 1
                };
            }
            assert_eq!(Index::tag_mask(&b, 0x8001), pattern);
            for i in 0..SLOTS as u16 {
                let want = if pattern >> i & 1 != 0 { 0 } else { 1 << i };
                assert_eq!(Index::tag_mask(&b, i + 1), want);
            }
        }
    }

    #[test]
    fn hashes_spread_keys_that_differ_in_one_field() {
        // 65,536 keys over 16,384 buckets: 4 per bucket on average; a uniform hash puts
        // more than 20 in one with probability ~1e-8 per bucket. (With the ports mixed
        // into one multiplicand only, keys differing in their source port alone reached
        // 22 under some seeds.)
        for seed in 0..8 {
            let ix = Index::new(65_536, seed, &super::super::NoAdvice);
            let a = Ipv4Addr::new(10, 0, 0, 1);
            let families: [Box<dyn Fn(u32) -> FlowKey>; 4] = [
                Box::new(|i| FlowKey::v4(3, 6, a, Ipv4Addr::LOCALHOST, i as u16, 443)),
                Box::new(|i| FlowKey::v4(3, 17, a, Ipv4Addr::from(0x0A00_0000 | i), 53, 53)),
                Box::new(|i| FlowKey::v4(i as u16, 6, a, Ipv4Addr::LOCALHOST, 1, 2)),
                Box::new(|i| {
                    let mut k = FlowKey::v4(3, 6, a, Ipv4Addr::LOCALHOST, 1, 2);
                    k.family = Family::V6;
                    k.src[..4].copy_from_slice(&i.to_be_bytes());
                    k
                }),
            ];
            for (f, key) in families.iter().enumerate() {
                let mut load = vec![0u32; ix.buckets.len()];
                for i in 0..65_536 {
                    load[ix.home(ix.hash(&key(i)))] += 1;
                }
                let max = load.iter().max().copied().unwrap_or(0);
                assert!(
                    max <= 20,
                    "seed {seed}, key family {f}: {max} keys in one bucket"
                );
            }
        }
    }

    #[test]
    fn seeds_change_the_hash() {
        let k = FlowKey::v4(1, 6, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::LOCALHOST, 1, 2);
        let (a, b) = (
            Index::new(4, 1, &super::super::NoAdvice),
            Index::new(4, 2, &super::super::NoAdvice),
        );
        assert_ne!(a.hash(&k), b.hash(&k));
        assert_ne!(a.hash(&k), a.hash(&k.reversed()));
    }
}
